#!/usr/bin/env bash
# The fault harness (scripts/chaos/chaos.py): the real processes against the local PostgreSQL
# cluster and nh-emulator, with faults injected.
#
#   scripts/chaos.sh BIN_DIR reduced|full [scenario,...]
#
# Installs what it needs when missing: PostgreSQL (scripts/db.sh), python3-venv (Debian) and
# schemathesis (PyPI) in a venv under .data/chaos-venv. The harness restarts the cluster in its
# PostgreSQL scenario, so run it alone (make test runs it after the Swift tests).
set -euo pipefail
bin="${1:?usage: chaos.sh BIN_DIR reduced|full [scenario,...]}"
size="${2:-reduced}"
only="${3:-}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
venv=.data/chaos-venv
schemathesis_version="4.32.5"

scripts/db.sh up >/dev/null
. "$(dirname "${BASH_SOURCE[0]}")/lib/tools.sh"
python_venv "$venv" "schemathesis==$schemathesis_version"
# Databases left by interrupted runs would slow the cluster's restart.
set -a; . .data/postgres.env; set +a
scripts/test-db-cleanup.sh >/dev/null 2>&1 || true
exec python3 scripts/chaos/chaos.py --bin "$bin" --size "$size" ${only:+--only "$only"}
