#!/usr/bin/env bash
# `make bench`: every benchmark, on the release executables in BIN_DIR, in one process tree:
# the queue (herald-bench queue), the hub client (herald-bench hub), device registration
# (scripts/bench-api.sh), the send pipeline (scripts/bench-send.sh), fairness between senders
# (scripts/bench-lanes.sh) and the stats API (herald-bench stats). Each prints `bench NAME VALUE UNIT` lines and fails if a device or a
# send did not end in its final state. At the end, the figures that have a target
# (docs/benchmarks.md lists them) are printed against it as `target NAME VALUE OP GOAL met|missed`.
#
# The whole output (stdout and stderr) is also kept in .data/bench/latest.txt, once the run has
# succeeded; `scripts/bench-table.py .data/bench/latest.txt` writes its figures into
# docs/benchmarks.md, and BENCH_UPDATE_DOCS=1 has this script do that at the end.
#
# With BENCH_BASELINE_BIN=DIR (release executables of an older commit), the same benchmarks run
# first on those, and the targets table shows both columns: before and after, same run.
#
# Usage: scripts/bench.sh BIN_DIR
# Knobs: BENCH_BASELINE_BIN, BENCH_SKIP_STATS=1 (leaves out the stats benchmark, whose first run
# seeds 1 M notifications), BENCH_SKIP_LANES=1 (leaves out the fairness benchmark, several
# minutes), BENCH_UPDATE_DOCS=1, and those of the scripts it runs.
set -euo pipefail
bin="${1:?usage: bench.sh BIN_DIR}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
latest=.data/bench/latest.txt

# Every benchmark and the targets; its output is what .data/bench/latest.txt keeps.
run_all() {
results="$(mktemp -d)"
trap 'rm -rf "$results"' EXIT
echo "# date: $(date -u +%Y-%m-%dT%H:%MZ)"
echo "# machine: $(nproc) cores, $(awk '/^MemTotal:/ {printf "%.1f GB", $2 / 1048576}' /proc/meminfo) memory"

# `suite DIR OUT STATS_DB`: every benchmark on the executables in DIR, their lines also kept in
# OUT. The stats benchmark keeps its seeded database between runs; the baseline gets one of its
# own, since an older build refuses a database a newer one has migrated further.
suite() {
  local dir="$1" out="$2" stats_db="$3" started
  started="$(date +%s)"
  (
    set -a; . ./.data/postgres.env; set +a
    echo "# queue" >&2; "$dir/herald-bench" queue
    echo "# hub client" >&2; "$dir/herald-bench" hub
    echo "# device registration" >&2; scripts/bench-api.sh "$dir"
    echo "# send pipeline" >&2; scripts/bench-send.sh "$dir"
    if [ "${BENCH_SKIP_LANES:-0}" != 1 ]; then echo "# lanes" >&2; BENCH_LANES_TARGETS=0 scripts/bench-lanes.sh "$dir"; fi
    if [ "${BENCH_SKIP_STATS:-0}" != 1 ]; then echo "# stats API" >&2; "$dir/herald-bench" stats --database "$stats_db"; fi
  ) | tee "$out"
  echo "bench total.seconds $(($(date +%s) - started)) s" | tee -a "$out"
}

if [ -n "${BENCH_BASELINE_BIN:-}" ]; then
  echo "# baseline: $BENCH_BASELINE_BIN"
  suite "$BENCH_BASELINE_BIN" "$results/before.txt" herald_bench_stats_baseline
  echo "# this build: $bin"
fi
suite "$bin" "$results/after.txt" herald_bench_stats

python3 scripts/bench-targets.py "$results/after.txt" "$results/before.txt"
}

mkdir -p "$(dirname "$latest")"
run_all 2>&1 | tee "$latest.partial"
mv "$latest.partial" "$latest"
if [ "${BENCH_UPDATE_DOCS:-0}" = 1 ]; then
  python3 scripts/bench-table.py "$latest"
else
  echo "# the whole output is in $latest; to write its figures into docs/benchmarks.md:"
  echo "#   scripts/bench-table.py $latest"
fi
