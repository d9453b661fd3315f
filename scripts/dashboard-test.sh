#!/usr/bin/env bash
# The ops dashboard's browser test (scripts/dashboard-test/test_dashboard.py): the real
# processes from BIN_DIR on a fresh database of the local cluster, the page driven in headless
# Chromium by Selenium. One line per check; exits non-zero when one fails. Screenshots go to
# .build/dashboard-screenshots/.
#
#   scripts/dashboard-test.sh BIN_DIR
#
# Installs what it needs when missing (scripts/test-tools.sh): Debian's chromium and
# chromium-driver, and the pinned Selenium of scripts/dashboard-test/requirements.txt (PyPI) in
# .data/dashboard-venv.
set -euo pipefail
bin="${1:?usage: dashboard-test.sh BIN_DIR}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/db.sh up >/dev/null
scripts/test-tools.sh
set -a; . .data/postgres.env; set +a
exec .data/dashboard-venv/bin/python scripts/dashboard-test/test_dashboard.py --bin "$bin"
