#!/usr/bin/env bash
# `make bench-pressure`: the queue alone and the send pipeline under a held XID, repeatable-read
# readers, overload and chaos (backend kills, idle connections, a full server, PostgreSQL
# restart, worker SIGKILL), against the local cluster. scripts/bench-pressure.py says what it
# runs, what it prints and its knobs (BENCH_PRESSURE_SCALE=0.1 for a run of about 7 minutes).
#
#   scripts/bench-pressure.sh BIN_DIR [full|reduced] [PARTS]
#
# BIN_DIR holds herald-api, herald-worker, heraldctl, nh-emulator and herald-bench (release builds
# for the figures; `reduced`, the correctness pass of `make test`, runs on the debug build).
# PARTS: a comma-separated subset of queue,pipeline,chaos. It restarts the cluster in its chaos
# part, so run it alone. The output (stdout and stderr) is also kept in .data/bench/pressure.txt
# once a full run has succeeded.
set -euo pipefail
bin="${1:?usage: bench-pressure.sh BIN_DIR [full|reduced] [PARTS]}"
mode="${2:-full}"
parts="${3:-queue,pipeline,chaos}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/db.sh up >/dev/null
set -a; . .data/postgres.env; set +a
if [ "$mode" = reduced ]; then
  exec python3 scripts/bench-pressure.py --bin "$bin" --mode reduced
fi
mkdir -p .data/bench
python3 scripts/bench-pressure.py --bin "$bin" --mode full --parts "$parts" 2>&1 | tee .data/bench/pressure.txt.partial
status="${PIPESTATUS[0]}"
[ "$status" -eq 0 ] && mv .data/bench/pressure.txt.partial .data/bench/pressure.txt
exit "$status"
