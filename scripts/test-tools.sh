#!/usr/bin/env bash
# Tools the tests drive besides PostgreSQL (which scripts/db.sh installs), from Debian's packages
# when missing; the tests fail, never skip, without them:
# - tmux, in which the `heraldctl send` test checks the progress bar as a real terminal shows it
#   (Tests/HeraldEndToEndTests/BulkSendTests.swift);
# - promtool (package prometheus), which parses and lints both processes' /metrics
#   (Tests/HeraldEndToEndTests/MetricsExpositionTests.swift) and checks deploy/prometheus.
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib/tools.sh"
missing=()
command -v tmux >/dev/null 2>&1 || missing+=(tmux)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "test-tools: installing ${missing[*]} (Debian packages)" >&2
  debian_install "${missing[@]}"
fi
for tool in tmux promtool; do
  command -v "$tool" >/dev/null 2>&1 || { echo "test-tools: $tool is still missing" >&2; exit 1; }
done
