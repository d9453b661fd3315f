#!/usr/bin/env bash
# Tools the tests drive besides PostgreSQL (which scripts/db.sh installs):
# - tmux, in which the `heraldctl send` test checks the progress bar as a real terminal shows it
#   (Tests/HeraldEndToEndTests/BulkSendTests.swift);
# - Debian's chromium and chromium-driver, and Selenium (pinned in
#   scripts/dashboard-test/requirements.txt, from PyPI into .data/dashboard-venv), which the
#   dashboard's browser test drives (scripts/dashboard-test.sh).
# Installs what is missing; the tests fail, never skip, without it.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/scripts/lib/tools.sh"
if ! command -v tmux >/dev/null 2>&1; then
  echo "test-tools: installing tmux (Debian package)" >&2
  debian_install tmux
fi
command -v tmux >/dev/null 2>&1 || { echo "test-tools: tmux is still missing" >&2; exit 1; }

if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  echo "test-tools: installing chromium and chromium-driver (Debian packages)" >&2
  debian_install chromium chromium-driver
fi
command -v chromium >/dev/null 2>&1 || { echo "test-tools: chromium is still missing" >&2; exit 1; }
command -v chromedriver >/dev/null 2>&1 || { echo "test-tools: chromedriver is still missing" >&2; exit 1; }
python_venv "$root/.data/dashboard-venv" "$(cat "$root/scripts/dashboard-test/requirements.txt")"
