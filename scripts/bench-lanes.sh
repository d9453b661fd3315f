#!/usr/bin/env bash
# `make bench-lanes`: does one sender's backlog delay another sender's sends? Release builds of
# herald-api, herald-worker and nh-emulator on loopback; key B sends single notifications
# (`POST /v1/notifications`, one user, one hub send, one every 200 ms) while key A's backlog drains:
#
#   idle      50 singles and nothing else: the baseline
#   campaign  key A's campaign (5,000 users in four formats: 1,000 hub sends a run) fired 20 times
#             (20,000 hub sends, committed while the worker is paused, so the whole backlog waits
#             at once as one large run's would), then the singles while it drains
#   batch     key A's 100,000 notifications posted through `POST /v1/notifications:batch` (1,000 a
#             request, worker paused), then the singles while they drain; after the fifth single
#             key C posts its first batch (10 notifications): a second sender's first send
#
# All three run twice in one run: `before` with HERALD_QUEUE_LANES=off (one lane, one sender: the
# claim's old first-in-first-out order) and `after` with the default lanes, each on freshly
# started processes and tables reset to the same history. Latency is from the notification's
# commit (`created_at`) to the start of its first hub call (its outcome row's `started_at`), both
# on the database clock, as `send.latency` in bench-send.sh. Prints, for MODE before and after:
#
#   bench lanes.idle.single_p50.MODE / .single_p99.MODE <v> ms
#   bench lanes.campaign.single_p50.MODE / .single_p99.MODE <v> ms     singles while the campaign drains
#   bench lanes.campaign.ratio_to_idle.MODE <v> x                      campaign p99 / idle p99
#   bench lanes.campaign.backlog_rate.MODE <v> sends/s   the backlog's hub sends per second from the
#                                                        worker's resumption to the last single's send
#   bench lanes.batch.single_p50.MODE / .single_p99.MODE <v> ms        singles while the batches drain
#   bench lanes.batch.ratio_to_idle.MODE <v> x                         batch p99 / idle p99
#   bench lanes.batch.second_sender_first.MODE <v> ms    key C's accept to its first hub call
#   bench lanes.batch.backlog_rate.MODE <v> sends/s
#   bench lanes.seconds <v> s
#
# and, run on its own, the figures with a target as `target NAME VALUE OP GOAL met|missed`
# (scripts/bench.sh judges them itself and sets BENCH_LANES_TARGETS=0).
# Progress (how much of each backlog has gone out) goes to standard error.
#
# Each phase waits on the database for the singles' sends (and, except the last, for the whole
# queue to empty), not on sleeps. The `after` batch phase stops once the singles and the second
# sender's sends are out; what is left of its backlog is dropped with the tables.
#
# Usage: scripts/bench-lanes.sh BIN_DIR   (BIN_DIR holds release builds of the executables)
# Knobs: BENCH_LANES_SINGLES (50), BENCH_LANES_INTERVAL_MS (200), BENCH_LANES_CAMPAIGN_RUNS (20),
# BENCH_LANES_BATCH_COUNT (100000), BENCH_HISTORY (50000 finished sends in the tables at the start
# of each half).
set -euo pipefail
bin="${1:?usage: bench-lanes.sh BIN_DIR}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
singles="${BENCH_LANES_SINGLES:-50}"
interval_ms="${BENCH_LANES_INTERVAL_MS:-200}"
campaign_runs="${BENCH_LANES_CAMPAIGN_RUNS:-20}"
batch_count="${BENCH_LANES_BATCH_COUNT:-100000}"
history="${BENCH_HISTORY:-50000}"
campaign_users=5000      # 250 hub sends of 20 users in each of four formats: 1,000 a run
second_count=10          # key C's first batch
started="$(date +%s)"

. scripts/bench-lib.sh
bench_setup herald_bench_lanes
q() { psql -qtA "$bench_url" -c "$1"; }
# `figure NAME VALUE UNIT`: one `bench` line, also kept for the targets at the end.
figure() { echo "bench $1 $2 $3" | tee -a "$work/figures.txt"; }
make_key() {
  "$bin/heraldctl" keys create --name "$1" --scopes send,read --rate-limit 100000 2>"$work/key.err" \
    || { echo "bench-lanes: could not make an API key:" >&2; cat "$work/key.err" >&2; exit 1; }
}
# Key A first: the seeded history belongs to the first key, so every key's figures below are
# read from its notifications created in the phase.
key_a="$(make_key bench-a)"; key_b="$(make_key bench-b)"; key_c="$(make_key bench-c)"
key_id() { q "SELECT id FROM api_keys WHERE name = '$1'"; }
id_a="$(key_id bench-a)"; id_b="$(key_id bench-b)"; id_c="$(key_id bench-c)"

bench_start_emulator
load() { python3 scripts/bench-lanes.py "$port" "$@"; }

# The database clock, for a phase's start.
db_now() { q "SELECT clock_timestamp()"; }

# `watch LABEL BACKLOG_SQL DONE_SQL [PID]`: until process PID (the senders; none when empty)
# has exited and DONE_SQL answers t, polls every 0.2 s on one session; every 3 s prints
# BACKLOG_SQL's answer (how far the backlog is; nothing when empty) to standard error. Fails after
# 15 minutes, or when PID failed.
watch() {
  local label="$1" backlog_sql="$2" done_sql="$3" pid="${4:-}" polls=0
  while :; do
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
      wait "$pid" || { echo "bench-lanes: $label: the senders failed" >&2; exit 1; }
      pid=""
    fi
    if [ -z "$pid" ]; then
      bench_poll "$done_sql"
      [ "$POLL" = t ] && break
    fi
    if [ -n "$backlog_sql" ] && [ $((polls % 15)) = 0 ]; then
      bench_poll "$backlog_sql"
      echo "bench-lanes: $label: $POLL" >&2
    fi
    polls=$((polls + 1))
    [ "$polls" -lt 4500 ] || { echo "bench-lanes: $label: not done after 15 minutes" >&2; tail -20 "$work/worker.err" >&2; exit 1; }
    sleep 0.2
  done
}
queue_empty="SELECT NOT EXISTS (SELECT 1 FROM pgqueue.jobs WHERE queue = 'notifications')"
campaign_progress="SELECT format('%s of %s hub sends sent', count(*) FILTER (WHERE state NOT IN ('Queued', 'Scheduled')), count(*)) FROM hub_sends WHERE campaign_run_id IS NOT NULL"
jobs_left="SELECT format('%s jobs left (sends and telemetry polls)', count(*)) FROM pgqueue.jobs WHERE queue = 'notifications'"
# Key KEY_ID's notifications since SINCE: none waiting any more.
sent_sql() { echo "SELECT NOT EXISTS (SELECT 1 FROM notifications WHERE api_key_id = $1 AND created_at >= '$2' AND state IN ('Queued', 'Scheduled'))"; }

# `latency KEY_ID SINCE` prints "p50 p99 count" in ms over the key's notifications since SINCE.
latency() {
  q "SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 1),
            round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 1), count(*)
     FROM (SELECT extract(epoch FROM min(o.started_at) - n.created_at) * 1000 AS ms
           FROM notifications n JOIN notification_outcomes o ON o.notification_id = n.id AND o.kind = 'send'
           WHERE n.api_key_id = $1 AND n.created_at >= '$2'
           GROUP BY n.id, n.created_at) t" | tr '|' ' '
}
# `singles_latency PHASE MODE SINCE` prints the singles' lines and sets `p99`.
singles_latency() {
  local p50 count
  read -r p50 p99 count < <(latency "$id_b" "$3")
  [ "$count" -eq "$singles" ] || { echo "bench-lanes: $1 $2: $count of $singles singles reached the hub" >&2; exit 1; }
  figure "lanes.$1.single_p50.$2" "$p50" ms
  figure "lanes.$1.single_p99.$2" "$p99" ms
}
ratio() { python3 -c "import sys; print(f'{float(sys.argv[1]) / max(float(sys.argv[2]), 0.001):.1f}')" "$1" "$2"; }
# `backlog_rate PHASE MODE SINCE BACKLOG_FILTER`: the backlog's hub sends started from SINCE to
# the last single's first hub call, per second.
backlog_rate() {
  local rate
  rate="$(q "WITH last AS (SELECT max(o.started_at) AS at FROM notifications n
                             JOIN notification_outcomes o ON o.notification_id = n.id AND o.kind = 'send'
                           WHERE n.api_key_id = $id_b AND n.created_at >= '$3')
             SELECT round(count(*) / greatest(extract(epoch FROM (SELECT at FROM last) - '$3'::timestamptz), 0.001))
             FROM notification_outcomes o JOIN notifications n ON n.id = o.notification_id
             WHERE o.kind = 'send' AND o.attempt = 1 AND o.started_at >= '$3' AND o.started_at <= (SELECT at FROM last)
               AND $4")"
  figure "lanes.$1.backlog_rate.$2" "$rate" sends/s
}

api_pid=""; worker_pid=""
# The worker, then the API: SIGTERM, and SIGKILL (said on standard error) after 60 s.
stop_processes() {
  local pid name
  for pid in "$worker_pid" "$api_pid"; do
    [ -n "$pid" ] || continue
    name="$(cat "/proc/$pid/comm" 2>/dev/null || echo "$pid")"
    kill -TERM "$pid" 2>/dev/null || true; kill -CONT "$pid" 2>/dev/null || true
    for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "bench-lanes: $name did not stop within 60 s of SIGTERM; killed" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
  done
  api_pid=""; worker_pid=""
}

campaign_id=""
# `half MODE SETTING…`: the three phases on processes started with SETTING (VAR=value).
half() {
  local mode="$1" since campaign_sends
  shift
  q "TRUNCATE notifications, campaign_runs CASCADE" >/dev/null
  q "DELETE FROM pgqueue.jobs WHERE queue = 'notifications'" >/dev/null
  bench_seed_history "$history"
  bench_start_api "$@"
  api_pid="${pids[-1]}"
  env HERALD_WORKER_METRICS_PORT=0 "$@" "$bin/herald-worker" 2>>"$work/worker.err" &
  pids+=($!)
  worker_pid=$!
  if [ -z "$campaign_id" ]; then
    campaign_id="$(load campaign "$key_a" "$campaign_users")"
  fi

  # Warm-up: connections, caches and plans on both paths, then an empty queue.
  load bulk "$key_a" 2000 2
  load singles "$key_b" 10 20 2>/dev/null
  watch "$mode warm-up" "" "$queue_empty"

  # Idle.
  since="$(db_now)"
  load singles "$key_b" "$singles" "$interval_ms" &
  watch "$mode idle" "" "$(sent_sql "$id_b" "$since")" "$!"
  singles_latency idle "$mode" "$since"
  idle_p99="$p99"

  # Campaign: its runs committed while the worker waits, then the singles while they drain.
  kill -STOP "$worker_pid"
  load fire "$key_a" "$campaign_id" "$campaign_runs"
  campaign_sends="$(q "SELECT count(*) FROM hub_sends WHERE campaign_run_id IS NOT NULL")"
  [ "$campaign_sends" -ge 20000 ] || echo "bench-lanes: the campaign's runs made $campaign_sends hub sends (fewer than 20,000)" >&2
  since="$(db_now)"
  kill -CONT "$worker_pid"
  load singles "$key_b" "$singles" "$interval_ms" &
  watch "$mode campaign" "$campaign_progress" "$(sent_sql "$id_b" "$since")" "$!"
  singles_latency campaign "$mode" "$since"
  figure "lanes.campaign.ratio_to_idle.$mode" "$(ratio "$p99" "$idle_p99")" x
  backlog_rate campaign "$mode" "$since" "n.campaign_run_id IS NOT NULL"
  # The rest of the runs and their telemetry polls, before the next phase.
  watch "$mode campaign, the rest" "$jobs_left" "$queue_empty"

  # Batch: key A's notifications accepted while the worker waits, then the singles while they
  # drain, and key C's first batch after the fifth single.
  kill -STOP "$worker_pid"
  local accept_start
  accept_start="$(date +%s.%N)"
  since="$(db_now)"
  load bulk "$key_a" "$batch_count" 4
  echo "bench-lanes: $mode batch: $batch_count accepted in $(python3 -c "import sys,time; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$accept_start") s" >&2
  local batch_since
  batch_since="$since"
  since="$(db_now)"
  kill -CONT "$worker_pid"
  load singles "$key_b" "$singles" "$interval_ms" "$key_c" "$second_count" &
  watch "$mode batch" \
    "SELECT format('%s of %s notifications sent', count(*) FILTER (WHERE state NOT IN ('Queued', 'Scheduled')), count(*)) FROM notifications WHERE api_key_id = $id_a AND created_at >= '$batch_since'" \
    "SELECT ($(sent_sql "$id_b" "$since")) AND ($(sent_sql "$id_c" "$since"))" "$!"
  singles_latency batch "$mode" "$since"
  figure "lanes.batch.ratio_to_idle.$mode" "$(ratio "$p99" "$idle_p99")" x
  local first
  first="$(q "SELECT round((extract(epoch FROM min(o.started_at) - min(n.created_at)) * 1000)::numeric, 1)
              FROM notifications n JOIN notification_outcomes o ON o.notification_id = n.id AND o.kind = 'send'
              WHERE n.api_key_id = $id_c AND n.created_at >= '$since'")"
  [ -n "$first" ] || { echo "bench-lanes: $mode batch: the second sender's sends have no outcome" >&2; exit 1; }
  figure "lanes.batch.second_sender_first.$mode" "$first" ms
  backlog_rate batch "$mode" "$since" "n.api_key_id = $id_a AND n.created_at >= '$batch_since'"
  bench_poll "SELECT count(*) FROM notifications WHERE api_key_id = $id_a AND created_at >= '$batch_since' AND state IN ('Queued', 'Scheduled')"
  [ "$POLL" = 0 ] || echo "bench-lanes: $mode batch: $POLL of the backlog still waiting when the singles had gone out (left unsent)" >&2
  # Every hub send of the half that went out went out once and was not given up.
  local bad
  bad="$(q "SELECT count(*) FROM hub_sends WHERE attempts > 1 OR state IN ('Abandoned', 'Unknown', 'Cancelled', 'Expired')")"
  [ "$bad" -eq 0 ] || { echo "bench-lanes: $mode: $bad hub sends were retried or given up" >&2; q "SELECT state, attempts, last_error, count(*) FROM hub_sends GROUP BY 1, 2, 3" >&2; exit 1; }
  stop_processes
}

half before HERALD_QUEUE_LANES=off
half after
figure lanes.seconds "$(($(date +%s) - started))" s

# On its own, its figures with a target (scripts/bench-targets.py).
if [ "${BENCH_LANES_TARGETS:-1}" != 0 ]; then
  python3 scripts/bench-targets.py "$work/figures.txt" --only lanes.
fi
