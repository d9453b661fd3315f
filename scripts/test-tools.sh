#!/usr/bin/env bash
# Tools the tests drive besides PostgreSQL (which scripts/db.sh installs): tmux, in which the
# `heraldctl send` test checks the progress bar as a real terminal shows it
# (Tests/HeraldEndToEndTests/BulkSendTests.swift). Installs the Debian package when missing;
# the test fails, never skips, without it.
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib/tools.sh"
if ! command -v tmux >/dev/null 2>&1; then
  echo "test-tools: installing tmux (Debian package)" >&2
  debian_install tmux
fi
command -v tmux >/dev/null 2>&1 || { echo "test-tools: tmux is still missing" >&2; exit 1; }
