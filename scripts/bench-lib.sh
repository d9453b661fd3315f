# Shared setup of the load benchmarks (sourced by scripts/bench-*.sh, which set `bin`, the folder
# of the release executables, and run from the repository root).
#
#   bench_setup NAME       a work folder, a cleanup trap that stops every process in `pids`, and
#                          a fresh database NAME (dropped and recreated), migrated; exports
#                          HERALD_DATABASE_URL for it and sets `base_url` and `bench_url`
#   bench_start_emulator   nh-emulator on a free port; exports HERALD_HUB_CONNECTION_STRING/NAME
#   bench_start_api [VAR=value…]  herald-api on a free port with those settings; waits until it
#                          is ready and sets `port` and `url`
#   cpu_ticks PID…         CPU clock ticks (user + system) the processes have used so far, summed
#   postgres_pids          the postmaster and its children (backends, background processes)
#   cpu_ms TICKS COUNT     milliseconds of CPU per item: TICKS clock ticks over COUNT items
#   rss_mb PID             the resident set of a process, in MB
#   bench_poll SQL         runs SQL on one psql session kept open for the whole run and sets
#                          POLL to the first column of its first row: for the polls inside measured
#                          phases. A psql process per poll costs about 27 ms of CPU (and a backend's
#                          start): at ten polls a second, an eighth of a 2-core machine that the
#                          phases then did not have, while the figures they are divided by (the
#                          hub client alone, the queue's own enqueue) paid for no polling. Call it
#                          from the script's own shell, not in `$(…)`: bash gives a subshell no
#                          access to the session.
#   bench_seed_history COUNT  COUNT finished notifications (one completed hub send and its outcome
#                          each, two days old, of the first API key) in the bench database, then
#                          VACUUM (ANALYZE): what the tables hold at the start of each measured phase

bench_setup() {
  local name="$1"
  set -a; . .data/postgres.env; set +a
  work="$(mktemp -d)"
  pids=()
  trap bench_cleanup EXIT INT TERM
  base_url="$HERALD_DATABASE_URL"
  bench_url="$(python3 -c 'import sys,urllib.parse as u; p=u.urlsplit(sys.argv[1]); print(u.urlunsplit(p._replace(path="/" + sys.argv[2])))' "$base_url" "$name")"
  export PGOPTIONS="-c client_min_messages=warning"
  psql -q "$base_url" -c "DROP DATABASE IF EXISTS $name WITH (FORCE)" -c "CREATE DATABASE $name" \
    || { echo "bench: could not recreate database $name" >&2; exit 1; }
  export HERALD_DATABASE_URL="$bench_url" HERALD_LOG_LEVEL=warning
  "$bin/heraldctl" migrate >/dev/null || { echo "bench: heraldctl migrate failed" >&2; exit 1; }
}

bench_cleanup() {
  [ -n "${BENCH_PSQL_PID:-}" ] && kill -TERM "$BENCH_PSQL_PID" 2>/dev/null
  # A paused process (bench-api pauses the worker) acts on TERM only once continued.
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; kill -CONT "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}

bench_start_emulator() {
  "$bin/nh-emulator" --port 0 --hub herald --inspection >"$work/emulator.out" 2>"$work/emulator.err" &
  pids+=($!)
  for _ in $(seq 1 100); do grep -q '^HERALD_HUB_NAME=' "$work/emulator.out" 2>/dev/null && break; sleep 0.1; done
  grep -q '^HERALD_HUB_NAME=' "$work/emulator.out" || { echo "bench: nh-emulator did not start" >&2; cat "$work/emulator.err" >&2; exit 1; }
  # Not sourced: the connection string holds `;`, which the shell would split on.
  HERALD_HUB_CONNECTION_STRING="$(sed -n 's/^HERALD_HUB_CONNECTION_STRING=//p' "$work/emulator.out")"
  HERALD_HUB_NAME="$(sed -n 's/^HERALD_HUB_NAME=//p' "$work/emulator.out")"
  export HERALD_HUB_CONNECTION_STRING HERALD_HUB_NAME
}

bench_start_api() {
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  env HERALD_API_PORT="$port" "$@" "$bin/herald-api" 2>"$work/api.err" &
  pids+=($!)
  url="http://127.0.0.1:$port"
  local ready_url="$url/health/ready"
  ready() { python3 -c 'import sys,urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "$ready_url" 2>/dev/null; }
  for _ in $(seq 1 300); do ready && break; sleep 0.2; done
  ready || { echo "bench: herald-api did not start" >&2; cat "$work/api.err" >&2; exit 1; }
}

cpu_ticks() {
  local total=0 pid ticks
  for pid in "$@"; do
    # Fields 14 and 15 of /proc/PID/stat (utime, stime); the command field before them never
    # holds a space for these processes.
    ticks="$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null)" || continue
    total=$((total + ${ticks:-0}))
  done
  echo "$total"
}

postgres_pids() {
  local postmaster
  postmaster="$(head -1 "$(readlink -f .data/postgres)/postmaster.pid")"
  echo "$postmaster" $(pgrep -P "$postmaster")
}

cpu_ms() {
  python3 -c "import os, sys; print(f'{int(sys.argv[1]) * 1000 / os.sysconf(\"SC_CLK_TCK\") / max(1, int(sys.argv[2])):.3f}')" "$1" "$2"
}

rss_mb() {
  awk '/^VmRSS:/ {printf "%.0f", $2 / 1024}' "/proc/$1/status"
}

bench_poll() {
  if [ -z "${BENCH_PSQL_PID:-}" ]; then
    coproc BENCH_PSQL { exec psql -X -qtA "$bench_url"; }
  fi
  # The marker line ends the answer (psql prints nothing for an empty result).
  printf '%s;\n\\echo __bench_poll_end__\n' "$1" >&"${BENCH_PSQL[1]}"
  POLL=""
  local line
  while IFS= read -r line <&"${BENCH_PSQL[0]}"; do
    [ "$line" = __bench_poll_end__ ] && return 0
    [ -n "$POLL" ] || POLL="$line"
  done
  echo "bench: the polling session ended" >&2
  exit 1
}

# Finished sends the tables hold at the start of each phase, as a database in use does.
# Without them each phase began on the empty tables TRUNCATE leaves, and the worker's
# connections kept the plans PostgreSQL made for them at the phase's first batches:
# sequential scans of hub_sends and notifications, run for every batch as the tables grew
# (auto_explain: 716 such lookups of a batch's hub sends in one run, 2 ms each by the end).
bench_seed_history() {
  psql -qtA "$bench_url" -c "WITH n AS (
       INSERT INTO notifications (id, api_key_id, target, content, state, deadline, created_at, updated_at,
                                  finished_at)
       SELECT gen_random_uuid(), (SELECT id FROM api_keys ORDER BY id LIMIT 1), '{\"tags\": \"bench:history\"}',
              '{\"apple\": {\"aps\": {\"alert\": \"history\"}}}', 'Completed', now() - interval '1 day',
              now() - interval '2 days', now() - interval '2 days', now() - interval '2 days'
       FROM generate_series(1, $1) RETURNING id),
     h AS (
       INSERT INTO hub_sends (notification_id, format, tag_expression, state, attempts, hub_notification_id,
                              last_status)
       SELECT id, 'apple', 'bench:history', 'Completed', 1, 'history', 201 FROM n RETURNING id, notification_id)
     INSERT INTO notification_outcomes (hub_send_id, notification_id, kind, attempt, http_status, duration_ms,
                                        decision, state, at)
     SELECT id, notification_id, 'send', 1, 201, 1, 'enqueued', 'Enqueued', now() - interval '2 days' FROM h" >/dev/null
  # Vacuumed as old history would have been: otherwise the first autovacuum reads it all while
  # the benchmark measures.
  psql -qtA "$bench_url" -c "VACUUM (ANALYZE) notifications, hub_sends, notification_outcomes" >/dev/null
}
