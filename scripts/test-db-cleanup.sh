#!/usr/bin/env bash
# Drops the per-suite test databases that earlier `make test` runs left in the local cluster.
set -euo pipefail
: "${HERALD_DATABASE_URL:?}"
psql "$HERALD_DATABASE_URL" -tAc "SELECT datname FROM pg_database WHERE datname LIKE 'herald_t_%'" 2>/dev/null |
  while read -r db; do
    [ -n "$db" ] && psql "$HERALD_DATABASE_URL" -qc "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null 2>&1 || true
  done
