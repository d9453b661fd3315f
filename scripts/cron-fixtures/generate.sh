#!/usr/bin/env bash
# Regenerates the cron fixtures (Tests/HeraldDomainTests/Fixtures/cron/) from an independent
# implementation: croniter from PyPI, plus a brute-force oracle on Python's zoneinfo for DST.
#
#   scripts/cron-fixtures/generate.sh
#
# Installs what it needs when missing: python3-venv (Debian) and pinned croniter and tzdata
# (PyPI) in a venv under .data/cron-venv. The Swift tests read the committed JSON; they never
# need Python. The output is deterministic (fixed seed), so a rerun with the same pins changes
# nothing.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
venv=.data/cron-venv
croniter_version="7.0.0"
# The IANA release of the zone data the oracle reads; keep it equal to Foundation's
# (TimeZone.timeZoneDataVersion, 2025b with Swift 6.3) so both sides see the same rules.
tzdata_version="2025.2"

. "$(dirname "${BASH_SOURCE[0]}")/../lib/tools.sh"
python_venv "$venv" "croniter==$croniter_version
tzdata==$tzdata_version"
exec "$venv/bin/python" scripts/cron-fixtures/generate.py --out Tests/HeraldDomainTests/Fixtures/cron "$@"
