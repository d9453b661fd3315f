#!/usr/bin/env bash
# The independent Standard Webhooks verifier for scripts/webhook-verify.py: the
# reference Python library (PyPI `standardwebhooks`, pinned) in a venv under .data/webhook-venv.
# Prints the venv's python path on stdout; everything else goes to stderr.
#
#   scripts/webhook-venv.sh
#
# Installs python3-venv (Debian) when missing; the venv is made again only when the pin changes.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
venv=.data/webhook-venv
standardwebhooks_version="1.1.0"

. "$(dirname "${BASH_SOURCE[0]}")/lib/tools.sh"
mkdir -p .data
python_venv "$venv" "standardwebhooks==$standardwebhooks_version" >&2
echo "$root/$venv/bin/python"
