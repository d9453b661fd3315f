#!/usr/bin/env bash
# `make bench-send`: the send pipeline of release builds, on loopback, in one run:
#
#   bench hub.client.sends <v> sends/s     the NotificationHubs client alone against this run's
#                                          nh-emulator (herald-bench hub, 32 connections): the ceiling,
#                                          the mean of a run before the phases and one after them
#                                          (hub.client.sends_first / _last): measured once, in a few
#                                          seconds, it moved by a quarter between runs on a shared machine
#   bench send.enqueue_bulk <v> jobs/s     the queue's own bulk enqueue of as many jobs (herald-bench
#                                          queue --enqueue-only, same cluster): the accept baseline
#   bench send.batch_accept <v> jobs/s     notifications accepted by POST /v1/notifications:batch
#                                          (1,000 per request, 4 concurrent senders, worker stopped)
#   bench send.batch_accept_ratio <v> ratio  send.batch_accept / send.enqueue_bulk
#   bench send.accept_cpu_ms.api / .postgres <v> ms  CPU per accepted notification in that run
#   bench send.e2e <v> sends/s             notifications ("telemetry": false) posted through the batch API
#                                          while the worker sends them to the emulator, outcome rows
#                                          written: count / time from the first post to the last hub
#                                          send leaving Queued
#   bench send.e2e_ratio <v> ratio         send.e2e / hub.client.sends
#   bench send.cpu_ms.api / .worker / .postgres / .emulator <v> ms   CPU per notification in that run
#   bench send.e2e_telemetry <v> sends/s   the same with "telemetry": true, until every send's telemetry
#                                          is recorded, less the fixed first-poll delay (5 s) that is
#                                          waiting, not work
#   bench send.e2e_telemetry_ratio <v> ratio  send.e2e_telemetry / hub.client.sends
#   bench send.e2e_two_workers <v> sends/s send.e2e with two worker processes
#   bench send.e2e_two_workers_ratio <v> ratio  send.e2e_two_workers / send.e2e
#   bench send.api_rss_mb / send.worker_rss_mb <v> MB  resident memory after the load phases
#   bench send.latency.p50_ms <v> ms       enqueue (the notification's commit) -> start of its hub
#   bench send.latency.p99_ms <v> ms       call, at 1,000 notifications/s offered (10 every 10 ms)
#   bench cli.send <v> jobs/s              notifications accepted through `heraldctl send` from a file of
#                                          BENCH_ACCEPT_COUNT users (batches of 1,000, 4 in flight, an
#                                          idempotency key per line, worker stopped), process start to exit
#   bench cli.send_rate <v> ratio          cli.send / send.batch_accept (same run; target >= 0.8)
#   bench webhooks.e2e <v> events/s        send.e2e's run again with a webhook endpoint wanting every
#                                          notification.enqueued: events delivered to a loopback receiver
#                                          (herald-bench webhook-receiver) / time from the first post to
#                                          the last delivery
#   bench webhooks.send_e2e_after <v> sends/s  send.e2e's run again, after the webhook runs
#   bench webhooks.e2e_ratio <v> ratio     webhooks.e2e / the mean of send.e2e and
#                                          webhooks.send_e2e_after (target >= 0.5)
#   bench webhooks.latency.p50_ms / .p99_ms <v> ms  state change (the event's timestamp) -> its
#                                          delivery's arrival, at 1,000 notifications/s offered
#   bench webhooks.cpu_ms.api / .worker / .postgres / .emulator / .receiver <v> ms  CPU per event in
#                                          webhooks.e2e's run (its sends included)
#
# BENCH_SEND_PHASES=webhooks (make bench-webhooks) runs only send.e2e and the webhook phases.
#
# Usage: scripts/bench-send.sh BIN_DIR   (BIN_DIR holds release builds of the executables and herald-bench)
# Knobs: BENCH_ACCEPT_COUNT (50000), BENCH_E2E_COUNT (20000), BENCH_HISTORY (50000: finished sends
# in the tables at the start of each phase), BENCH_LATENCY_SECONDS (10),
# BENCH_LATENCY_PER_TICK (10: notifications per 10 ms tick, so 1,000/s; a lower rate shows the
# pipeline's own latency on a machine whose send.e2e is below 1,000/s).
# A build older than the per-notification `telemetry` option (it refuses the field) polls
# telemetry for every send: the field is then left out, and its send.e2e is the pipeline with
# telemetry running.
set -euo pipefail
bin="${1:?usage: bench-send.sh BIN_DIR}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
accept_count="${BENCH_ACCEPT_COUNT:-50000}"
e2e_count="${BENCH_E2E_COUNT:-20000}"
latency_seconds="${BENCH_LATENCY_SECONDS:-10}"
latency_per_tick="${BENCH_LATENCY_PER_TICK:-10}"
phases="${BENCH_SEND_PHASES:-all}"
case "$phases" in all | webhooks) ;; *) echo "bench-send: BENCH_SEND_PHASES is all or webhooks" >&2; exit 1 ;; esac
all() { [ "$phases" = all ]; }
first_poll=5  # seconds from a send to its first telemetry poll (DeliveryConfiguration.telemetryFirstPoll)

. scripts/bench-lib.sh
bench_setup herald_bench_send
q() { psql -qtA "$bench_url" -c "$1"; }
key="$("$bin/heraldctl" keys create --name bench --scopes send,read --rate-limit 100000 2>"$work/key.err")" \
  || { echo "bench-send: could not make an API key:" >&2; cat "$work/key.err" >&2; exit 1; }

bench_start_emulator

# The ceiling: the hub client alone, apple sends to the tag `bench:hub` with one registration
# (the first run creates it; Herald's sends below go to the same tag, so each send does the
# same work). Run again after the phases (adding no registration), and the two averaged.
# `hub_ceiling REGISTRATIONS` sets `ceiling`.
hub_ceiling() {
  "$bin/herald-bench" hub --connection-string "$HERALD_HUB_CONNECTION_STRING" --hub "$HERALD_HUB_NAME" \
    --kind apple --registrations "$1" --rounds 3 --count 5000 --warmup 1000 --concurrency 32 >"$work/hub.txt" 2>"$work/hub.err" \
    || { cat "$work/hub.err" >&2; exit 1; }
  ceiling="$(awk '/^bench hub.client.sends/ {print $3}' "$work/hub.txt")"
}
if all; then
  hub_ceiling 1
  client_sends_first="$ceiling"
fi

# The accept ratio's baseline: the queue library's bulk enqueue of as many jobs, on this cluster.
if all; then
  "$bin/herald-bench" queue --enqueue-only --jobs "$accept_count" >"$work/enqueue.txt" 2>"$work/enqueue.err" \
    || { cat "$work/enqueue.err" >&2; exit 1; }
  enqueue_rate="$(awk '/^bench queue.enqueue.bulk/ {print $3}' "$work/enqueue.txt")"
fi

# The webhook phases' receiver is on loopback (both processes read this).
export HERALD_WEBHOOK_ALLOW_PRIVATE=on
bench_start_api
api_pid="${pids[-1]}"
emulator_pid="${pids[0]}"

worker_pids=()
start_worker() {
  HERALD_WORKER_METRICS_PORT=0 "$bin/herald-worker" 2>>"$work/worker.err" &
  pids+=($!)
  worker_pids+=($!)
}

# `post TELEMETRY MODE …` with TELEMETRY on, off or omit (the field left out);
# `bulk COUNT THREADS`: posts COUNT notifications in batches of 1,000 from THREADS threads;
# `paced SECONDS PER_TICK`: PER_TICK at a time every 10 ms from one thread for SECONDS. Prints
# the seconds it took and the count posted; fails on any non-202.
cat >"$work/post.py" <<'PY'
import http.client, json, sys, threading, time
port, key, telemetry, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
item = {"target": {"tags": "bench:hub"}, "content": {"apple": {"aps": {"alert": "Benchmark", "badge": 1}}}}
if telemetry != "omit": item["telemetry"] = telemetry == "on"
def body(n): return json.dumps({"notifications": [item] * n}).encode()
headers = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}
def post(conn, payload):
    conn.request("POST", "/v1/notifications:batch", payload, headers)
    response = conn.getresponse()
    data = response.read()
    if response.status != 202:
        sys.stderr.write(f"bench-send: batch answered {response.status}: {data[:300]!r}\n")
        sys.exit(1)
if mode == "bulk":
    count, threads = int(sys.argv[5]), int(sys.argv[6])
    per = count // threads // 1000
    payload = body(1000)
    errors = []
    def run():
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            for _ in range(per): post(conn, payload)
        except BaseException as e:
            errors.append(e)
    workers = [threading.Thread(target=run) for _ in range(threads)]
    start = time.monotonic()
    for w in workers: w.start()
    for w in workers: w.join()
    for e in errors:
        if not isinstance(e, SystemExit): sys.stderr.write(f"bench-send: a sender failed: {e!r}\n")
    if errors: sys.exit(1)
    print(f"{time.monotonic() - start:.3f} {per * 1000 * threads}")
else:
    seconds, per_tick = float(sys.argv[5]), int(sys.argv[6])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    payload = body(per_tick)
    start = time.monotonic()
    ticks = int(seconds * 100)
    for tick in range(ticks):
        post(conn, payload)
        delay = start + (tick + 1) / 100 - time.monotonic()
        if delay > 0: time.sleep(delay)
    print(f"{time.monotonic() - start:.3f} {ticks * per_tick}")
PY
post() { python3 "$work/post.py" "$port" "$key" "$@"; }
# Does this build take the `telemetry` field? (A build that does not answers 400 to it.)
telemetry_option=1; without=off; with=on
if ! python3 - "$port" "$key" <<'PY'
import http.client, json, sys
conn = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=30)
item = {"target": {"tags": "bench:probe"}, "content": {"apple": {"aps": {"alert": "probe"}}}, "telemetry": False}
conn.request("POST", "/v1/notifications:batch", json.dumps({"notifications": [item]}),
             {"Authorization": "Bearer " + sys.argv[2], "Content-Type": "application/json"})
sys.exit(0 if conn.getresponse().status == 202 else 1)
PY
then
  telemetry_option=0; without=omit; with=omit
  echo "bench-send: this build has no telemetry option; every send is polled" >&2
fi
# The polls below run every 0.1 s inside measured phases, so they are cheap (one session,
# bench_poll, and small reads): a notification
# (one hub send each here) leaves Queued in the transaction that records its send, and the
# waiting ones are in a small partial index; counting hub_sends instead scanned the table.
wait_sent() {
  for _ in $(seq 1 3000); do
    bench_poll "SELECT EXISTS (SELECT 1 FROM notifications WHERE state IN ('Queued', 'Scheduled'))"
    [ "$POLL" = f ] && return 0
    sleep 0.1
  done
  echo "bench-send: sends did not drain" >&2; tail -20 "$work/worker.err" >&2; exit 1
}
# Waits until no job is left on the notifications queue: every send and telemetry poll done.
wait_jobs() {
  for _ in $(seq 1 3000); do
    bench_poll "SELECT EXISTS (SELECT 1 FROM pgqueue.jobs WHERE queue = 'notifications')"
    [ "$POLL" = f ] && return 0
    sleep 0.1
  done
  echo "bench-send: notification jobs did not drain" >&2; tail -20 "$work/worker.err" >&2; exit 1
}
check_outcomes() {
  local bad
  bad="$(q "SELECT count(*) FROM hub_sends WHERE state NOT IN ('Enqueued', 'Processing', 'Completed') OR attempts <> 1")"
  [ "$bad" -eq 0 ] || { echo "bench-send: $bad hub sends did not go out once" >&2; q "SELECT state, attempts, last_error, count(*) FROM hub_sends GROUP BY 1,2,3" >&2; exit 1; }
  local missing
  missing="$(q "SELECT count(*) FROM hub_sends h WHERE NOT EXISTS (SELECT 1 FROM notification_outcomes o WHERE o.hub_send_id = h.id AND o.kind = 'send')")"
  [ "$missing" -eq 0 ] || { echo "bench-send: $missing hub sends have no outcome row" >&2; exit 1; }
}
# Finished sends in the tables at the start of each phase (bench_seed_history says why).
history="${BENCH_HISTORY:-50000}"
reset() {
  q "TRUNCATE notifications CASCADE" >/dev/null; q "DELETE FROM pgqueue.jobs WHERE queue = 'notifications'" >/dev/null
  bench_seed_history "$history"
}

if all; then
# 1. Accept: the API alone (no worker), 4 senders posting batches of 1,000.
post "$without" bulk 4000 4 >/dev/null  # warm-up
reset
accept_api0="$(cpu_ticks "$api_pid")"; accept_pg0="$(cpu_ticks $(postgres_pids))"
read -r accept_seconds accept_posted < <(post "$without" bulk "$accept_count" 4)
accept_api1="$(cpu_ticks "$api_pid")"; accept_pg1="$(cpu_ticks $(postgres_pids))"
jobs="$(q "SELECT count(*) FROM pgqueue.jobs WHERE queue = 'notifications'")"
[ "$jobs" -eq "$accept_posted" ] || { echo "bench-send: $accept_posted accepted but $jobs jobs" >&2; exit 1; }
reset

# 1b. The same through `heraldctl send` (a users file, one apple send to each user's tag, so
# one hub send per notification as above), still without a worker.
python3 -c "import sys; sys.stdout.write(''.join(f'bench{i}\n' for i in range($accept_posted)))" >"$work/users.txt"
cli_start="$(date +%s.%N)"
HERALD_API_KEY="$key" "$bin/heraldctl" send --api "$url" --users-file "$work/users.txt" \
  --apple '{"aps":{"alert":"Benchmark","badge":1}}' >"$work/cli.out" 2>"$work/cli.err" \
  || { echo "bench-send: heraldctl send failed:" >&2; tail -5 "$work/cli.err" >&2; exit 1; }
cli_end="$(date +%s.%N)"
jobs="$(q "SELECT count(*) FROM pgqueue.jobs WHERE queue = 'notifications'")"
[ "$jobs" -eq "$accept_posted" ] || { echo "bench-send: heraldctl send made $jobs jobs for $accept_posted users" >&2; exit 1; }
fi
reset

# 2. End to end: the worker runs while the batches arrive, no telemetry asked for.
start_worker
post "$with" bulk 2000 2 >/dev/null; wait_jobs  # warm-up: connections, caches, telemetry included
reset
ticks() { echo "$(cpu_ticks "$api_pid") $(cpu_ticks "${worker_pids[@]}") $(cpu_ticks $(postgres_pids)) $(cpu_ticks "$emulator_pid")"; }
read -r api0 worker0 pg0 emu0 < <(ticks)
start_time="$(date +%s.%N)"
read -r _ e2e_posted < <(post "$without" bulk "$e2e_count" 2)
wait_sent
end_time="$(date +%s.%N)"
read -r api1 worker1 pg1 emu1 < <(ticks)
check_outcomes
if [ "$telemetry_option" = 1 ]; then
  polls="$(q "SELECT count(*) FROM pgqueue.jobs WHERE queue = 'notifications' AND kind = 'notification.telemetry'")"
  [ "$polls" -eq 0 ] || { echo "bench-send: $polls telemetry polls for sends that asked for none" >&2; exit 1; }
fi
wait_jobs
reset
e2e="$(python3 -c "print(f'{$e2e_posted / ($end_time - $start_time):.0f}')")"

if all; then
# 2b. With telemetry: until every send's telemetry answer is recorded.
start_time="$(date +%s.%N)"
read -r _ telemetry_posted < <(post "$with" bulk "$e2e_count" 2)
wait_jobs
end_time="$(date +%s.%N)"
check_outcomes
unpolled="$(q "SELECT count(*) FROM hub_sends WHERE state NOT IN ('Completed', 'NoTargetFound')")"
[ "$unpolled" -eq 0 ] || { echo "bench-send: $unpolled sends without their telemetry" >&2; exit 1; }
reset
e2e_telemetry="$(python3 -c "print(f'{$telemetry_posted / ($end_time - $start_time - $first_poll):.0f}')")"

# 3. Latency at 1,000/s offered: from the notification's commit to the start of its hub call
# (the outcome row's `started_at`, the attempt's fenced start), both on the database clock.
read -r _ latency_posted < <(post "$without" paced "$latency_seconds" "$latency_per_tick")
wait_sent
check_outcomes
read -r p50 p99 < <(q "SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 2),
                                round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 2)
                         FROM (SELECT extract(epoch FROM (o.started_at - n.created_at)) * 1000 AS ms
                               FROM notification_outcomes o JOIN notifications n ON n.id = o.notification_id
                               WHERE o.kind = 'send') t" | tr '|' ' ')
wait_jobs
reset
fi

# 5. Webhooks: an endpoint on a loopback receiver wants every notification.enqueued (one per
# send here). The same end-to-end run, until the receiver has them all; then the latency run
# at 1,000/s offered, from each event's timestamp to its arrival.
coproc RECEIVER { exec "$bin/herald-bench" webhook-receiver 2>"$work/receiver.err"; }
pids+=("$RECEIVER_PID")
IFS= read -r -t 30 line <&"${RECEIVER[0]}" || { echo "bench-send: the webhook receiver did not start" >&2; exit 1; }
receiver_port="${line#PORT=}"
receiver() {  # receiver COMMAND: sends it; for STATS sets count, first, last, p50, p99
  printf '%s\n' "$1" >&"${RECEIVER[1]}"
  [ "$1" = STATS ] || return 0
  IFS= read -r -t 30 line <&"${RECEIVER[0]}" || { echo "bench-send: the webhook receiver did not answer" >&2; exit 1; }
  eval "$(printf '%s' "$line" | tr ' ' '\n' | sed -n 's/^\(count\|first\|last\|p50_ms\|p99_ms\)=/\1=/p')"
}
wait_delivered() {  # wait_delivered COUNT
  for _ in $(seq 1 3000); do
    receiver STATS
    [ "$count" -ge "$1" ] && return 0
    sleep 0.1
  done
  echo "bench-send: $count of $1 webhooks delivered" >&2; tail -20 "$work/worker.err" >&2; exit 1
}
python3 - "$port" "$key" "$receiver_port" <<'PY' || exit 1
import http.client, json, sys
conn = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=30)
body = {"url": f"http://127.0.0.1:{sys.argv[3]}/hook", "types": ["notification.enqueued"], "maxConcurrency": 100}
conn.request("POST", "/v1/webhooks", json.dumps(body), {"Authorization": "Bearer " + sys.argv[2], "Content-Type": "application/json"})
response = conn.getresponse()
answer = response.read()
if response.status != 201: sys.exit(f"bench-send: the webhook endpoint was refused: {response.status} {answer[:300]!r}")
PY
post "$without" bulk 2000 2 >/dev/null; wait_delivered 2000; wait_jobs  # warm-up
reset; receiver RESET
read -r hapi0 hworker0 hpg0 hemu0 < <(ticks); hrecv0="$(cpu_ticks "$RECEIVER_PID")"
start_time="$(date +%s.%N)"
read -r _ hooked_posted < <(post "$without" bulk "$e2e_count" 2)
wait_delivered "$hooked_posted"
read -r hapi1 hworker1 hpg1 hemu1 < <(ticks); hrecv1="$(cpu_ticks "$RECEIVER_PID")"
webhooks_e2e="$(python3 -c "print(f'{$hooked_posted / ($last - $start_time):.0f}')")"
wait_jobs; reset; receiver RESET
read -r _ hooked_latency_posted < <(post "$without" paced "$latency_seconds" "$latency_per_tick")
wait_delivered "$hooked_latency_posted"
hook_p50="$p50_ms"; hook_p99="$p99_ms"
undelivered="$(q "SELECT count(*) FROM webhook_deliveries WHERE state <> 'Delivered' OR attempts <> 1")"
[ "$undelivered" -eq 0 ] || { echo "bench-send: $undelivered webhook deliveries not delivered at the first attempt" >&2; exit 1; }
q "UPDATE webhook_endpoints SET deleted_at = now()" >/dev/null  # the later phases send no webhooks
wait_jobs
reset
# send.e2e's run once more, after the webhook runs: the ratio's baseline is the mean of the two,
# as hub.client.sends is, so the machine's drift during the runs moves both sides alike.
start_time="$(date +%s.%N)"
read -r _ after_posted < <(post "$without" bulk "$e2e_count" 2)
wait_sent
end_time="$(date +%s.%N)"
check_outcomes
wait_jobs
reset
e2e_after="$(python3 -c "print(f'{$after_posted / ($end_time - $start_time):.0f}')")"

if all; then
# 4. Two worker processes: the same end-to-end run, to see that they do not collapse on contention.
start_worker
start_time="$(date +%s.%N)"
read -r _ two_posted < <(post "$without" bulk "$e2e_count" 2)
wait_sent
end_time="$(date +%s.%N)"
check_outcomes
two_workers="$(python3 -c "print(f'{$two_posted / ($end_time - $start_time):.0f}')")"
api_rss="$(rss_mb "$api_pid")"; worker_rss="$(rss_mb "${worker_pids[0]}")"
wait_jobs
reset
fi

for pid in "${worker_pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
echo "bench webhooks.e2e $webhooks_e2e events/s"
echo "bench webhooks.send_e2e_after $e2e_after sends/s"
python3 -c "print(f'bench webhooks.e2e_ratio {$webhooks_e2e / (($e2e + $e2e_after) / 2):.3f} ratio')"
echo "bench webhooks.latency.p50_ms $hook_p50 ms"
echo "bench webhooks.latency.p99_ms $hook_p99 ms"
echo "bench webhooks.cpu_ms.api $(cpu_ms $((hapi1 - hapi0)) "$hooked_posted") ms"
echo "bench webhooks.cpu_ms.worker $(cpu_ms $((hworker1 - hworker0)) "$hooked_posted") ms"
echo "bench webhooks.cpu_ms.postgres $(cpu_ms $((hpg1 - hpg0)) "$hooked_posted") ms"
echo "bench webhooks.cpu_ms.emulator $(cpu_ms $((hemu1 - hemu0)) "$hooked_posted") ms"
echo "bench webhooks.cpu_ms.receiver $(cpu_ms $((hrecv1 - hrecv0)) "$hooked_posted") ms"
if ! all; then
  echo "bench send.e2e $e2e sends/s"
  echo "bench send.cpu_ms.api $(cpu_ms $((api1 - api0)) "$e2e_posted") ms"
  echo "bench send.cpu_ms.worker $(cpu_ms $((worker1 - worker0)) "$e2e_posted") ms"
  echo "bench send.cpu_ms.postgres $(cpu_ms $((pg1 - pg0)) "$e2e_posted") ms"
  echo "bench send.cpu_ms.emulator $(cpu_ms $((emu1 - emu0)) "$e2e_posted") ms"
  exit 0
fi
hub_ceiling 0
client_sends_last="$ceiling"
client_sends="$(python3 -c "print(f'{($client_sends_first + $client_sends_last) / 2:.0f}')")"

echo "bench-send: accepted $accept_posted in ${accept_seconds}s; e2e $e2e_posted; telemetry $telemetry_posted; latency $latency_posted; two workers $two_posted" >&2
echo "bench hub.client.sends_first $client_sends_first sends/s"
echo "bench hub.client.sends_last $client_sends_last sends/s"
echo "bench hub.client.sends $client_sends sends/s"
echo "bench send.enqueue_bulk $enqueue_rate jobs/s"
accept="$(python3 -c "print(f'{$accept_posted / $accept_seconds:.0f}')")"
echo "bench send.batch_accept $accept jobs/s"
python3 -c "print(f'bench send.batch_accept_ratio {$accept / $enqueue_rate:.3f} ratio')"
echo "bench send.accept_cpu_ms.api $(cpu_ms $((accept_api1 - accept_api0)) "$accept_posted") ms"
echo "bench send.accept_cpu_ms.postgres $(cpu_ms $((accept_pg1 - accept_pg0)) "$accept_posted") ms"
python3 -c "print(f'bench cli.send {$accept_posted / ($cli_end - $cli_start):.0f} jobs/s')"
python3 -c "print(f'bench cli.send_rate {($accept_posted / ($cli_end - $cli_start)) / $accept:.3f} ratio')"
echo "bench send.e2e $e2e sends/s"
python3 -c "print(f'bench send.e2e_ratio {$e2e / $client_sends:.3f} ratio')"
echo "bench send.cpu_ms.api $(cpu_ms $((api1 - api0)) "$e2e_posted") ms"
echo "bench send.cpu_ms.worker $(cpu_ms $((worker1 - worker0)) "$e2e_posted") ms"
echo "bench send.cpu_ms.postgres $(cpu_ms $((pg1 - pg0)) "$e2e_posted") ms"
echo "bench send.cpu_ms.emulator $(cpu_ms $((emu1 - emu0)) "$e2e_posted") ms"
echo "bench send.e2e_telemetry $e2e_telemetry sends/s"
python3 -c "print(f'bench send.e2e_telemetry_ratio {$e2e_telemetry / $client_sends:.3f} ratio')"
echo "bench send.latency.p50_ms $p50 ms"
echo "bench send.latency.p99_ms $p99 ms"
echo "bench send.e2e_two_workers $two_workers sends/s"
python3 -c "print(f'bench send.e2e_two_workers_ratio {$two_workers / $e2e:.3f} ratio')"
echo "bench send.api_rss_mb $api_rss MB"
echo "bench send.worker_rss_mb $worker_rss MB"
