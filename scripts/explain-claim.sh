#!/usr/bin/env bash
# The claim's plan on a large backlog: loads 1,000,000 waiting jobs across lanes and senders into
# a scratch database of the local cluster (herald_explain_claim, made again on every run), placed
# in line as the enqueue places them, and prints EXPLAIN (ANALYZE, BUFFERS) of one claim of 100
# and of its candidates' scan (each in a transaction that is rolled back), then of a sender's
# end-of-line lookup.
#
#   scripts/explain-claim.sh [JOBS]      JOBS defaults to 1000000
#
# Needs the local cluster (`make db-up`); reads HERALD_DATABASE_URL from .data/postgres.env.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
jobs="${1:-1000000}"
[ -f "$root/.data/postgres.env" ] || { echo "explain-claim: run \`make db-up\` first" >&2; exit 1; }
set -a; . "$root/.data/postgres.env"; set +a
psql_bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r | head -1)/psql"
[ -x "$psql_bin" ] || psql_bin="psql"
base="${HERALD_DATABASE_URL%/*}"
query="${HERALD_DATABASE_URL#*\?}"; [ "$query" = "$HERALD_DATABASE_URL" ] && query="" || query="?$query"
admin="$base/postgres$query"
scratch="$base/herald_explain_claim$query"
"$psql_bin" -q -X -v ON_ERROR_STOP=1 "$admin" -c "DROP DATABASE IF EXISTS herald_explain_claim" \
  -c "CREATE DATABASE herald_explain_claim"
for file in "$root"/Sources/PostgresQueue/Schema/*.sql; do
  "$psql_bin" -q -X -v ON_ERROR_STOP=1 "$scratch" -f "$file"
done
echo "loading $jobs jobs..." >&2
"$psql_bin" -q -X -v ON_ERROR_STOP=1 -v jobs="$jobs" "$scratch" <<'SQL'
-- The mix, as fractions of :jobs, each sender's jobs chained k spacings after its start:
--   bulk        60%: 20 senders (API keys), 20 ms apart; one in ten dated tomorrow
--   campaign    30%: 2 runs, 20 ms apart
--   interactive  5%: 5,000 senders of up to 10 jobs, 1 ms apart
--   telemetry    5%: no sender, 500 ms after their run time, some not yet due
INSERT INTO pgqueue.jobs (queue, kind, args, lane, fairness_key, run_at, fair_at)
SELECT 'notifications', 'notification.send', '{"hubSendID":1}', 'bulk', 'key:' || s,
       run_at, run_at + k * interval '20 milliseconds'
FROM generate_series(1, 20) AS s,
     LATERAL generate_series(1, (:jobs * 0.6 / 20)::int) AS k,
     LATERAL (SELECT CASE WHEN k % 10 = 0 THEN now() + interval '1 day'
                          ELSE now() - s * interval '30 seconds' END AS run_at) AS t;
INSERT INTO pgqueue.jobs (queue, kind, args, lane, fairness_key, run_at, fair_at)
SELECT 'notifications', 'notification.send', '{"hubSendID":1}', 'campaign', 'run:' || r,
       now() - r * interval '1 minute', now() - r * interval '1 minute' + k * interval '20 milliseconds'
FROM generate_series(1, 2) AS r, LATERAL generate_series(1, (:jobs * 0.3 / 2)::int) AS k;
INSERT INTO pgqueue.jobs (queue, kind, args, lane, fairness_key, run_at, fair_at)
SELECT 'notifications', 'notification.send', '{"hubSendID":1}', 'interactive', 'key:i' || (n % 5000),
       now() - (n % 600) * interval '1 second',
       now() - (n % 600) * interval '1 second' + (n / 5000 + 1) * interval '1 millisecond'
FROM generate_series(1, (:jobs * 0.05)::int) AS n;
INSERT INTO pgqueue.jobs (queue, kind, args, lane, run_at, fair_at)
SELECT 'notifications', 'notification.telemetry', '{"hubSendID":1}', 'telemetry', run_at,
       run_at + interval '500 milliseconds'
FROM generate_series(1, (:jobs * 0.05)::int) AS n,
     LATERAL (SELECT now() - (n % 900) * interval '1 second' + interval '5 minutes' AS run_at) AS t;
-- Each sender's last job of each statement ends its line (what the sender index holds).
UPDATE pgqueue.jobs SET line_end = true
WHERE id IN (SELECT max(id) FROM pgqueue.jobs WHERE fairness_key IS NOT NULL GROUP BY lane, fairness_key, run_at);
VACUUM ANALYZE pgqueue.jobs;
SQL
"$psql_bin" -X -v ON_ERROR_STOP=1 "$scratch" <<'SQL'
SELECT lane, count(*) AS jobs, count(*) FILTER (WHERE run_at <= now()) AS due FROM pgqueue.jobs GROUP BY lane ORDER BY lane;
\echo
\echo '== the claim of 100 (QueueSQL.claim), rolled back'
BEGIN;
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF)
WITH unflushed AS (SELECT set_config('synchronous_commit', 'off', true))
UPDATE pgqueue.jobs j
SET state = 'running', attempt = j.attempt + 1, attempted_at = now(), locked_by = 'explain',
    lease_expires_at = now() + 60000 * interval '1 millisecond'
FROM unflushed
WHERE j.id = ANY(ARRAY(SELECT pgqueue.claim_candidates('notifications', NULL, 100)))
RETURNING j.id, j.lane;
ROLLBACK;
\echo
\echo '== its candidates as pgqueue.claim_candidates plans them (sorting disabled), rolled back'
BEGIN;
SET LOCAL enable_sort = off;
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF)
SELECT id FROM pgqueue.jobs
WHERE queue = 'notifications' AND state IN ('available', 'retryable') AND run_at <= now()
      AND fair_at >= '-infinity'
ORDER BY fair_at, id
LIMIT 100
FOR UPDATE SKIP LOCKED;
ROLLBACK;
\echo
\echo '== the end of a sender''s line (an enqueue''s lookup, once per sender and statement)'
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF)
SELECT s.fair_at FROM pgqueue.jobs s
WHERE 'key:7' <> '' AND s.queue = 'notifications' AND s.lane = 'bulk' AND s.fairness_key = 'key:7'
  AND s.line_end AND s.attempted_at IS NULL AND s.fairness_key IS NOT NULL AND s.run_at <= now()
ORDER BY s.run_at DESC, s.fair_at DESC LIMIT 1;
SQL
"$psql_bin" -q -X "$admin" -c "DROP DATABASE IF EXISTS herald_explain_claim"
