#!/usr/bin/env bash
# `make bench-api`: device-registration throughput of a release herald-api under load from wrk
# on loopback, with a herald-worker draining the sync jobs into an nh-emulator in the same run.
#
# Prints:
#   bench api.health <v> req/s            GET /health/live: the framework's ceiling here
#   bench api.device_put <v> req/s        PUT /api/register/{id}, JWT bearer auth (HS256)
#   bench api.device_put_basic <v> req/s  the same with Basic auth and the credential cache
#   bench api.device_put_ratio <v> ratio  device_put / health
#   bench api.device_put_sql <v> tx/s     baseline: pgbench running the naive PUT (the sign-in read,
#                                         then the write's transaction, unnamed) on as many connections
#   bench api.device_put_sql_ratio <v> ratio  device_put / device_put_sql
#   bench api.sync_drain <v> jobs/s       sync jobs the worker finished per second, load included
#   bench api.sync_keepup_ratio <v> ratio sync jobs finished per second during the JWT run / its PUT/s
#   bench api.sync_backlog <v> jobs       sync jobs waiting when the JWT run ends (0: no backlog)
#   bench api.sync_jobs_per_put <v> ratio  sync jobs the JWT run's PUTs made / its PUTs: below 1
#                                         when PUTs of a device whose sync was still waiting joined it
#   bench api.rss_mb / worker.rss_mb <v> MB  resident memory at the end of the load phases
#   bench api.device_put_solo <v> req/s   the JWT PUT with the worker paused, and its CPU per PUT:
#   bench api.put_cpu_ms.api / .postgres <v> ms   herald-api's and PostgreSQL's (every backend)
#   bench api.sync_cpu_ms.worker / .postgres / .emulator <v> ms   CPU per sync job while the
#                                         worker, paused during that run, drains what it left, nothing else running
#
# Usage: scripts/bench-api.sh BIN_DIR   (BIN_DIR holds release builds of the four executables)
# Knobs: BENCH_SECONDS (10), BENCH_CONNECTIONS (64), BENCH_THREADS (2).
set -euo pipefail
bin="${1:?usage: bench-api.sh BIN_DIR}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
seconds="${BENCH_SECONDS:-10}"
connections="${BENCH_CONNECTIONS:-64}"
threads="${BENCH_THREADS:-2}"

if ! command -v wrk >/dev/null; then
  echo "bench-api: installing wrk (Debian package)" >&2
  . "$(dirname "${BASH_SOURCE[0]}")/lib/tools.sh"
  debian_install wrk
fi

. scripts/bench-lib.sh
bench_setup herald_bench_api

# 20 Basic users (bcrypt cost 12, the default), 50 devices each; 200 JWT users, 10 devices each.
for n in $(seq 1 20); do
  printf 'bench-password-%s\n' "$n" | "$bin/heraldctl" users add "bench-basic-$n" --password-stdin >/dev/null
done
secret="$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')"
python3 - "$work" "$secret" "$threads" <<'PY'
import base64, hashlib, hmac, json, sys, time, uuid
work, secret, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
def b64(data): return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
def jwt(sub):
    header = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    claims = b64(json.dumps({"sub": sub, "exp": int(time.time()) + 3600}).encode())
    signature = hmac.new(secret.encode(), f"{header}.{claims}".encode(), hashlib.sha256).digest()
    return f"Bearer {header}.{claims}.{b64(signature)}"
def basic(n): return "Basic " + base64.b64encode(f"bench-basic-{n}:bench-password-{n}".encode()).decode()
def script(name, entries):
    lines = ["local entries = {"]
    for auth, device, handle in entries:
        lines.append(f'  {{"{auth}", "{device}", "{handle}"}},')
    # Each wrk thread walks the list from its own place: LuaJIT seeds math.random the same in
    # every thread, so a random start put both threads on the same device at the same moment
    # (two PUTs of one device at once wait on each other's locks; no client does that).
    lines += ["}",
        "local started = 0",
        "function setup(thread) thread:set('offset', started); started = started + 1 end",
        "local i = nil",
        "request = function()",
        f"  i = (i or (offset or 0) * math.floor(#entries / {threads})) % #entries + 1",
        "  local e = entries[i]",
        "  local body = '{\"Platform\": \"apns\", \"Handle\": \"' .. e[3] .. '\", \"Tags\": [\"World\", \"Sports\"]}'",
        "  return wrk.format(\"PUT\", \"/api/register/\" .. e[2],",
        "    {[\"Authorization\"] = e[1], [\"Content-Type\"] = \"application/json\"}, body)",
        "end"]
    open(f"{work}/{name}.lua", "w").write("\n".join(lines) + "\n")
def handle(): return uuid.uuid4().hex.upper() + uuid.uuid4().hex.upper()
script("jwt", [(jwt(f"bench-jwt-{u}"), str(uuid.uuid4()), handle()) for u in range(200) for _ in range(10)])
script("basic", [(basic(u), str(uuid.uuid4()), handle()) for u in range(1, 21) for _ in range(50)])
PY

bench_start_emulator
# Every request is a device write: lift the per-user write limit so it measures the API, not the limiter.
bench_start_api HERALD_AUTH_JWT_HS256_SECRET="$secret" HERALD_MAX_DEVICES_PER_USER=1000 HERALD_DEVICE_WRITE_RATE_PER_MINUTE=10000000 \
  HERALD_AUTH_BASIC_CACHE_SECONDS=60
api_pid="${pids[-1]}"
start_worker() {
  "$bin/herald-worker" 2>>"$work/worker.err" &
  pids+=($!)
  worker_pid=$!
}
start_worker

# One wrk run; prints requests per second, fails on any non-2xx answer.
run_wrk() {
  local name="$1"; shift
  wrk -t"$threads" -c"$connections" -d"${seconds}s" --latency "$@" >"$work/$name.txt"
  if grep -q 'Non-2xx' "$work/$name.txt"; then
    echo "bench-api: $name had error answers:" >&2; cat "$work/$name.txt" >&2; exit 1
  fi
  echo "bench-api: $name: $(grep -E '^ +50%|^ +99%' "$work/$name.txt" | tr -s ' ' | tr '\n' ' ')" >&2
  awk '/Requests\/sec/ {printf "%d", $2}' "$work/$name.txt"
}

# Warm-up: creates every device and fills the Basic credential cache (one bcrypt per user).
wrk -t1 -c20 -d3s -s "$work/basic.lua" "$url" >/dev/null
wrk -t1 -c20 -d3s -s "$work/jwt.lua" "$url" >/dev/null

# Baseline: what PostgreSQL alone does with the naive PUT's statements (the sign-in read, then in one
# transaction the row lock, handle lock, handle move, upsert and job insert), extended protocol
# with unnamed statements as PostgresNIO sends them, from pgbench on as many connections.
users_count="$(psql -qtA "$bench_url" -c "SELECT count(*) FROM users")"
cat >"$work/put.sql" <<SQL
\\set n random(1, 2000)
\\set u random(0, $((users_count - 1)))
SELECT id AS uid, name, password_hash, disabled, credential_version FROM users ORDER BY id LIMIT 1 OFFSET :u \\gset
BEGIN;
SELECT user_id, kind, deleted_at IS NOT NULL FROM devices WHERE id = md5('sql' || :n)::uuid FOR UPDATE;
SELECT pg_advisory_xact_lock(18500, hashtext('SQL' || :n));
UPDATE devices SET deleted_at = now(), version = version + 1, sync_state = 'pending', updated_at = now() WHERE handle = 'SQL' || :n AND platform IS NOT NULL AND deleted_at IS NULL AND id <> md5('sql' || :n)::uuid RETURNING id, kind;
INSERT INTO devices (id, user_id, kind, platform, handle, tags) VALUES (md5('sql' || :n)::uuid, :uid, 'registration', 'apns', 'SQL' || :n, ARRAY['World', 'Sports', 'user-tag']) ON CONFLICT (id) DO UPDATE SET platform = EXCLUDED.platform, handle = EXCLUDED.handle, tags = EXCLUDED.tags, deleted_at = NULL, sync_state = 'pending', version = devices.version + 1, updated_at = now() RETURNING id, user_id, kind, platform, handle, tags, version;
INSERT INTO pgqueue.jobs (id, queue, kind, args, priority, max_attempts, run_at, unique_key) VALUES (nextval('pgqueue.job_ids'), 'bench-sql', 'none', '{}', 0, 20, now(), 'bench-sql-' || :n) ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state IN ('available', 'retryable') DO NOTHING RETURNING id;
COMMIT;
SQL
pgbench_bin="$(command -v pgbench || ls /usr/lib/postgresql/*/bin/pgbench | tail -1)"
# pgbench ends a -T run on SIGALRM: unblock signals the calling shell may have blocked.
run_pgbench() {
  python3 -c 'import signal, subprocess, sys
signal.pthread_sigmask(signal.SIG_UNBLOCK, signal.valid_signals())
sys.exit(subprocess.run(sys.argv[1:]).returncode)' "$pgbench_bin" "$@"
}

jobs_finished() {
  psql -qtA "$bench_url" -c "SELECT count(*) FROM pgqueue.job_history WHERE queue = 'devices' AND state = 'completed'"
}
jobs_waiting() {
  psql -qtA "$bench_url" -c "SELECT count(*) FROM pgqueue.jobs WHERE queue = 'devices'"
}
# Waits until the worker has finished every sync job, then checks every device ended synced.
drain_and_check() {
  for _ in $(seq 1 600); do
    bench_poll "SELECT count(*) FROM pgqueue.jobs WHERE queue = 'devices'"
    [ "$POLL" -eq 0 ] && break
    sleep 0.2
  done
  local failed unsynced
  failed="$(psql -qtA "$bench_url" -c "SELECT count(*) FROM devices WHERE sync_state = 'failed'")"
  unsynced="$(psql -qtA "$bench_url" -c "SELECT count(*) FROM devices WHERE deleted_at IS NULL AND sync_state <> 'synced'")"
  echo "bench-api: devices failed $failed, not synced $unsynced" >&2
  if [ "$failed" -ne 0 ] || [ "$unsynced" -ne 0 ]; then
    echo "bench-api: every device must end synced" >&2; exit 1
  fi
}
start_jobs="$(jobs_finished)"; start_time="$(date +%s.%N)"

health="$(run_wrk health "$url/health/live")"
jwt_jobs0="$(jobs_finished)"; jwt_time0="$(date +%s.%N)"
put_jwt="$(run_wrk device_put -s "$work/jwt.lua" "$url")"
jwt_jobs1="$(jobs_finished)"; jwt_time1="$(date +%s.%N)"
backlog="$(jobs_waiting)"
# The Basic cache keeps a credential for at most 60 s (the setting's limit): fill it again, so
# the run measures cached sign-ins rather than 20 bcrypt checks at cost 12 in its middle.
wrk -t1 -c20 -d3s -s "$work/basic.lua" "$url" >/dev/null
put_basic="$(run_wrk device_put_basic -s "$work/basic.lua" "$url")"
api_rss="$(rss_mb "$api_pid")"
sql_tps="$(run_pgbench -n -M extended -c "$connections" -j "$threads" -T "$seconds" -f "$work/put.sql" "$bench_url" 2>"$work/pgbench.err" | awk '/^tps/ {printf "%d", $3}')"
[ -n "$sql_tps" ] || { echo "bench-api: pgbench failed:" >&2; cat "$work/pgbench.err" >&2; exit 1; }
psql -q "$bench_url" -c "DELETE FROM pgqueue.jobs WHERE queue = 'bench-sql'" -c "DELETE FROM devices WHERE handle LIKE 'SQL%'"

# Let the worker finish what the load enqueued, then rate it over the whole window.
drain_and_check
end_time="$(date +%s.%N)"; end_jobs="$(jobs_finished)"
# Sync jobs the JWT run made (all finished by now), against its PUTs: a PUT of a device whose
# sync job is still waiting makes none (the job reads the device's latest row).
jwt_made="$(psql -qtA "$bench_url" -c "SELECT count(*) FROM pgqueue.job_history WHERE queue = 'devices'
  AND created_at BETWEEN to_timestamp($jwt_time0) AND to_timestamp($jwt_time1)")"
jwt_puts="$(awk '/requests in/ {print $1}' "$work/device_put.txt")"
worker_rss="$(rss_mb "$worker_pid")"
echo "bench-api: sync jobs finished $((end_jobs - start_jobs))" >&2

# Where the time goes per PUT: the same JWT load with the worker paused (SIGSTOP: it uses no
# CPU and claims nothing), and the CPU that herald-api and PostgreSQL used for it.
kill -STOP "$worker_pid"
api_ticks0="$(cpu_ticks "$api_pid")"; pg_ticks0="$(cpu_ticks $(postgres_pids))"
put_solo="$(run_wrk device_put_solo -s "$work/jwt.lua" "$url")"
api_ticks1="$(cpu_ticks "$api_pid")"; pg_ticks1="$(cpu_ticks $(postgres_pids))"
solo_requests="$(awk '/requests in/ {print $1}' "$work/device_put_solo.txt")"

# And per sync job: the worker, continued, drains what that load left, with nothing else
# running. Paused and continued rather than stopped and started again, so the window holds
# neither a start-up nor jobs whose hub calls came before it opened: a restarted worker's
# first claim took 400 of about 1,300 jobs before its first finished job opened the window.
emulator_pid="${pids[0]}"
sync_jobs0="$(jobs_finished)"; worker_ticks0="$(cpu_ticks "$worker_pid")"
pg_ticks2="$(cpu_ticks $(postgres_pids))"; emu_ticks0="$(cpu_ticks "$emulator_pid")"
kill -CONT "$worker_pid"
drain_and_check
sync_jobs1="$(jobs_finished)"
worker_ticks1="$(cpu_ticks "$worker_pid")"; pg_ticks3="$(cpu_ticks $(postgres_pids))"; emu_ticks1="$(cpu_ticks "$emulator_pid")"
synced=$((sync_jobs1 - sync_jobs0))

echo "bench api.health $health req/s"
echo "bench api.device_put $put_jwt req/s"
echo "bench api.device_put_basic $put_basic req/s"
python3 -c "print(f'bench api.device_put_ratio {$put_jwt / $health:.3f} ratio')"
echo "bench api.device_put_sql $sql_tps tx/s"
python3 -c "print(f'bench api.device_put_sql_ratio {$put_jwt / $sql_tps:.3f} ratio')"
python3 -c "print(f'bench api.sync_drain {($end_jobs - $start_jobs) / ($end_time - $start_time):.0f} jobs/s')"
python3 -c "print(f'bench api.sync_keepup_ratio {(($jwt_jobs1 - $jwt_jobs0) / ($jwt_time1 - $jwt_time0)) / $put_jwt:.3f} ratio')"
echo "bench api.sync_backlog $backlog jobs"
python3 -c "print(f'bench api.sync_jobs_per_put {$jwt_made / $jwt_puts:.3f} ratio')"
echo "bench api.rss_mb $api_rss MB"
echo "bench worker.rss_mb $worker_rss MB"
echo "bench api.device_put_solo $put_solo req/s"
echo "bench api.put_cpu_ms.api $(cpu_ms $((api_ticks1 - api_ticks0)) "$solo_requests") ms"
echo "bench api.put_cpu_ms.postgres $(cpu_ms $((pg_ticks1 - pg_ticks0)) "$solo_requests") ms"
echo "bench-api: $synced sync jobs drained by the continued worker" >&2
echo "bench api.sync_cpu_ms.worker $(cpu_ms $((worker_ticks1 - worker_ticks0)) "$synced") ms"
echo "bench api.sync_cpu_ms.postgres $(cpu_ms $((pg_ticks3 - pg_ticks2)) "$synced") ms"
echo "bench api.sync_cpu_ms.emulator $(cpu_ms $((emu_ticks1 - emu_ticks0)) "$synced") ms"
