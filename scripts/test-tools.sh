#!/usr/bin/env bash
# Tools the tests drive besides PostgreSQL (which scripts/db.sh installs), installed when missing;
# the tests fail, never skip, without them:
# - tmux, in which the `heraldctl send` test checks the progress bar as a real terminal shows it
#   (Tests/HeraldEndToEndTests/BulkSendTests.swift);
# - promtool (Debian's prometheus package), which parses and lints both processes' /metrics
#   (Tests/HeraldEndToEndTests/MetricsExpositionTests.swift) and checks deploy/prometheus;
# - Debian's chromium and chromium-driver, and Selenium (pinned in
#   scripts/dashboard-test/requirements.txt, from PyPI into .data/dashboard-venv), which the
#   dashboard's browser test drives (scripts/dashboard-test.sh);
# - the reference Standard Webhooks library in .data/webhook-venv (scripts/webhook-venv.sh),
#   which the webhook tests' receiver and verifier use.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/scripts/lib/tools.sh"
missing=()
command -v tmux >/dev/null 2>&1 || missing+=(tmux)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "test-tools: installing ${missing[*]} (Debian packages)" >&2
  debian_install "${missing[@]}"
fi
for tool in tmux promtool chromium chromedriver; do
  command -v "$tool" >/dev/null 2>&1 || { echo "test-tools: $tool is still missing" >&2; exit 1; }
done
python_venv "$root/.data/dashboard-venv" "$(cat "$root/scripts/dashboard-test/requirements.txt")"
# The reference Standard Webhooks library, made once here rather than by the webhook tests at once.
"$root/scripts/webhook-venv.sh" >/dev/null
