#!/usr/bin/env bash
# `make test` after the build: the Swift tests; the DocC catalogues of the reusable libraries
# (`swift package generate-documentation`, warnings are errors); the end-to-end send and registration suites
# again through a PgBouncer in transaction mode with three workers (scripts/pgbouncer.sh); the ops
# reads against a real streaming replica (`scripts/db.sh replica up`, the ReplicaReadTests suite); the
# deploy files' checks (scripts/deploy-check.sh) and the dashboard in a real browser
# (scripts/dashboard-test.sh), beside the reduced pressure pass (scripts/bench-pressure.sh reduced:
# about two minutes of a held XID and backend kills under the queue alone and the send pipeline,
# checked for correctness only); then the fault harness at its reduced size (it restarts the cluster, so
# it runs alone, last). Every part runs even when an earlier one failed.
#
# Each part's output goes to the terminal and to .data/test-logs/PART.log. The last lines
# printed say which parts failed and, for the Swift tests, which tests (their `✘` lines): a CI
# log's tail then names the failure.
#
# Usage: scripts/test.sh BIN_DIR   (the debug build's products, from `swift build --show-bin-path`)
set -uo pipefail
bin="${1:?usage: test.sh BIN_DIR}"
cd "$(dirname "$0")/.."
logs=.data/test-logs
rm -rf "$logs"
mkdir -p "$logs"
set -a
. ./.data/postgres.env
set +a
scripts/test-db-cleanup.sh

failed=()
timings=()

# part NAME COMMAND...: runs COMMAND, its output teed to $logs/NAME.log.
part() {
    local name="$1" began=$SECONDS
    shift
    "$@" 2>&1 | tee "$logs/$name.log"
    local status="${PIPESTATUS[0]}"
    if [ "$status" -ne 0 ]; then failed+=("$name:$status"); fi
    timings+=("$name $((SECONDS - began))s")
}

# background NAME COMMAND...: starts COMMAND as part NAME beside the parts that follow, its output
# to $logs/NAME.log only; `finish NAME` waits for it and then shows that output.
declare -A background_pids background_began
background() {
    local name="$1"
    shift
    background_began[$name]=$SECONDS
    "$@" >"$logs/$name.log" 2>&1 &
    background_pids[$name]=$!
}
finish() {
    local name="$1" status=0
    wait "${background_pids[$name]}" || status=$?
    cat "$logs/$name.log"
    if [ "$status" -ne 0 ]; then failed+=("$name:$status"); fi
    timings+=("$name $((SECONDS - ${background_began[$name]}))s (beside others)")
}

pooled() {
    scripts/pgbouncer.sh up >/dev/null || return 1
    local status=0
    (
        set -a
        . ./.data/pgbouncer.env
        set +a
        HERALD_TEST_WORKERS=3 HERALD_BIN_DIR="$bin" "${SWIFT:-swift}" test --skip-build \
            --filter 'HeraldEndToEndTests.(SendTests|DeviceRegistrationTests)'
    ) || status=$?
    scripts/pgbouncer.sh down || true
    return "$status"
}

# The replica suite skips without HERALD_TEST_REPLICA_URL: it runs here, with a replica started for it.
replicated() {
    scripts/db.sh replica up >/dev/null || return 1
    local status=0
    (
        set -a
        . ./.data/replica.env
        set +a
        "${SWIFT:-swift}" test --skip-build --filter 'HeraldAPITests.ReplicaReadTests'
    ) || status=$?
    scripts/db.sh replica down || true
    return "$status"
}

part swift-test env HERALD_BIN_DIR="$bin" "${SWIFT:-swift}" test --skip-build
# The archives go to .build/plugins/Swift-DocC/outputs/.
part docc "${SWIFT:-swift}" package generate-documentation --target NotificationHubs --target PostgresQueue \
    --warnings-as-errors
part pgbouncer pooled
part replica replicated
# The pressure pass has databases of its own and checks correctness only, so the deploy checks
# and the dashboard run beside it (none of the three runs SwiftPM, whose lock would serialize them).
background pressure scripts/bench-pressure.sh "$bin" reduced
part deploy-check scripts/deploy-check.sh all "$bin"
part dashboard scripts/dashboard-test.sh "$bin"
finish pressure
part chaos scripts/chaos.sh "$bin" reduced

# How long each part took, so a slow CI run names the part that grew.
(IFS=,; echo "test: parts took ${timings[*]}")
if [ "${#failed[@]}" -eq 0 ]; then
    echo "test: every part passed (logs in $logs/)"
    exit 0
fi
for entry in "${failed[@]}"; do
    name="${entry%%:*}"
    echo "test: FAILED $name (exit ${entry##*:}); its log: $logs/$name.log"
    # The failing tests (swift-testing's ✘ with its ↳ comments, XCTest's "error:"), or the part's last lines.
    if ! grep -E '✘|↳|: error:|^not ok|FAIL' "$logs/$name.log" | grep -vE '↳ (Testing Library Version|Target Platform)' \
        | head -n 40 | sed 's/^/test:   /'; then
        tail -n 10 "$logs/$name.log" | sed 's/^/test:   /'
    fi
done
exit 1
