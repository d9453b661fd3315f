#!/usr/bin/env bash
# A PgBouncer in transaction pooling mode in front of the local PostgreSQL cluster
# (scripts/db.sh), the way production runs Herald behind a pooler. `make test` runs the
# end-to-end suites through it.
#
#   scripts/pgbouncer.sh up     install Debian's `pgbouncer` if missing, start it on a free
#                               loopback port in front of the running cluster, write
#                               .data/pgbouncer.env and print its HERALD_TEST_PGBOUNCER_URL line
#                               (idempotent)
#   scripts/pgbouncer.sh down   stop it
#   scripts/pgbouncer.sh env    print the env file's line (fails if it is not running)
#
# Every database of the cluster is reachable through it (a `*` fallback entry), so the tests'
# per-test databases need no configuration. It runs as the cluster's owner (PgBouncer refuses
# to run as root).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
data_root="$root/.data"
env_file="$data_root/pgbouncer.env"

log() { printf 'pgbouncer: %s\n' "$*" >&2; }
die() { printf 'pgbouncer: error: %s\n' "$*" >&2; exit 1; }
. "$(dirname "${BASH_SOURCE[0]}")/lib/tools.sh"

find_binary() {
  local path
  for path in "$(command -v pgbouncer 2>/dev/null || true)" /usr/sbin/pgbouncer; do
    if [ -n "$path" ] && [ -x "$path" ]; then echo "$path"; return 0; fi
  done
  return 1
}

install_pgbouncer() {
  log "pgbouncer not found; installing the Debian 'pgbouncer' package"
  debian_install pgbouncer || die "could not install the 'pgbouncer' package"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  # The package starts a system-wide pgbouncer on 6432; ours does not need it.
  $sudo systemctl disable --now pgbouncer >/dev/null 2>&1 || $sudo service pgbouncer stop >/dev/null 2>&1 || true
}

# The OS user PgBouncer runs as: the cluster's owner (see scripts/db.sh).
owner() {
  if [ "$(id -u)" -ne 0 ]; then id -un; else echo postgres; fi
}

as_owner() {
  local user="$1"; shift
  if [ "$(id -un)" = "$user" ]; then "$@"; else (cd / && runuser -u "$user" -- "$@"); fi
}

# PgBouncer's files: .data/pgbouncer, or (when its user cannot reach the checkout) a folder
# under /var/tmp that .data/pgbouncer links to, as scripts/db.sh does for the cluster.
state_dir() {
  local user="$1" dir="$data_root/pgbouncer"
  if [ -L "$dir" ]; then readlink -f "$dir"; return; fi
  if [ -d "$dir" ]; then echo "$dir"; return; fi
  mkdir -p "$data_root"
  if [ "$user" = "$(id -un)" ] || runuser -u "$user" -- test -x "$data_root" 2>/dev/null; then
    mkdir -p "$dir"; echo "$dir"; return
  fi
  local alt="/var/tmp/herald-pgbouncer-$(printf '%s' "$root" | sha1sum | cut -c1-12)"
  mkdir -p "$alt"
  ln -sfn "$alt" "$dir"
  echo "$alt"
}

free_port() {
  python3 - <<'PY'
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()
PY
}

running_pid() {
  local dir="$1" pid
  [ -f "$dir/pgbouncer.pid" ] || return 1
  pid="$(cat "$dir/pgbouncer.pid")"
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && grep -q pgbouncer "/proc/$pid/cmdline" 2>/dev/null && echo "$pid"
}

cmd_up() {
  local binary user dir pg_url pg_port password port
  "$root/scripts/db.sh" up >/dev/null
  pg_url="$(sed -n 's/^HERALD_DATABASE_URL=//p' "$data_root/postgres.env")"
  pg_port="$(printf '%s' "$pg_url" | sed -n 's|.*@127\.0\.0\.1:\([0-9]*\)/.*|\1|p')"
  [ -n "$pg_port" ] || die "cannot read the cluster's port from .data/postgres.env"
  password="$(cat "$data_root/postgres.password")"
  binary="$(find_binary)" || { install_pgbouncer; binary="$(find_binary)" || die "installed pgbouncer but found no binary"; }
  user="$(owner)"
  dir="$(state_dir "$user")"
  chown "$user" "$dir"
  chmod 700 "$dir"

  if running_pid "$dir" >/dev/null && [ -f "$dir/upstream.port" ] && [ "$(cat "$dir/upstream.port")" = "$pg_port" ]; then
    port="$(cat "$dir/listen.port")"
    log "reusing the running pgbouncer on port $port"
  else
    cmd_stop "$dir"
    port="$(free_port)"
    # Plain-text password in the auth file: PgBouncer then speaks SCRAM both to its clients and
    # to the cluster (which uses scram-sha-256).
    printf '"herald" "%s"\n' "$password" >"$dir/userlist.txt"
    cat >"$dir/pgbouncer.ini" <<INI
; Written by scripts/pgbouncer.sh for the tests; deploy/README.md explains the settings.
[databases]
* = host=127.0.0.1 port=$pg_port

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = scram-sha-256
auth_file = $dir/userlist.txt
pool_mode = transaction
; Each test database gets its own pool; three workers, an API and the tests' own clients
; stay far below these.
max_client_conn = 2000
default_pool_size = 20
max_db_connections = 40
server_idle_timeout = 10
ignore_startup_parameters = extra_float_digits
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
log_connections = 0
log_disconnections = 0
INI
    printf '%s\n' "$pg_port" >"$dir/upstream.port"
    printf '%s\n' "$port" >"$dir/listen.port"
    chown "$user" "$dir"/*
    chmod 600 "$dir/userlist.txt"
    log "starting pgbouncer on 127.0.0.1:$port (transaction pooling) in front of port $pg_port"
    as_owner "$user" "$binary" -d "$dir/pgbouncer.ini" || { tail -5 "$dir/pgbouncer.log" >&2 || true; die "pgbouncer did not start"; }
    local i
    for i in $(seq 1 100); do
      (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
      sleep 0.1
    done
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || { tail -5 "$dir/pgbouncer.log" >&2 || true; die "pgbouncer does not accept connections"; }
  fi
  printf 'HERALD_TEST_PGBOUNCER_URL=postgres://herald:%s@127.0.0.1:%s/herald\n' "$password" "$port" >"$env_file"
  chmod 600 "$env_file"
  cat "$env_file"
}

# Stops the pgbouncer whose files are in $1: SIGINT (a safe shutdown: clients finish), then
# SIGTERM if it is still there.
cmd_stop() {
  local dir="$1" pid i
  pid="$(running_pid "$dir")" || return 0
  kill -INT "$pid" 2>/dev/null || true
  for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  log "stopped pgbouncer (pid $pid)"
}

cmd_down() {
  [ -e "$data_root/pgbouncer" ] || { rm -f "$env_file"; return 0; }
  cmd_stop "$(state_dir "$(owner)")"
  rm -f "$env_file"
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  env) [ -f "$env_file" ] || die "not running: run scripts/pgbouncer.sh up"; cat "$env_file" ;;
  *) echo "usage: $0 up|down|env" >&2; exit 2 ;;
esac
