#!/usr/bin/env bash
# Tools the tests drive besides PostgreSQL (which scripts/db.sh installs): tmux, in which the
# `heraldctl send` test checks the progress bar as a real terminal shows it
# (Tests/HeraldEndToEndTests/BulkSendTests.swift). Installs the Debian package when missing;
# the test fails, never skips, without it.
set -euo pipefail
if ! command -v tmux >/dev/null 2>&1; then
  echo "test-tools: installing tmux (Debian package)" >&2
  sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends tmux >/dev/null
fi
command -v tmux >/dev/null 2>&1 || { echo "test-tools: tmux is still missing" >&2; exit 1; }
