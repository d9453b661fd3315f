#!/usr/bin/env bash
# Herald's local PostgreSQL: a throwaway cluster in .data/postgres on a free loopback port.
#
#   scripts/db.sh up     install the server if missing, create/start the cluster with TLS on,
#                        write .data/postgres.env and print it (idempotent): HERALD_DATABASE_URL
#                        and the TLS test fixtures' HERALD_TEST_DATABASE_* lines
#   scripts/db.sh down   stop this cluster only
#   scripts/db.sh env    print the env file (fails if the cluster is not running)
#   scripts/db.sh restart [fast|immediate] [SECONDS]
#                        stop the cluster, keep it down SECONDS, start it on the same port
#   scripts/db.sh replica up     a streaming replica of the cluster (pg_basebackup -R, a hot
#                        standby on another port, hot_standby_feedback off), started with the
#                        cluster if needed; writes .data/replica.env and prints it (idempotent):
#                        HERALD_DATABASE_READ_URL and HERALD_TEST_REPLICA_URL
#   scripts/db.sh replica down   stop the replica only (its files stay, for a faster next start)
#   scripts/db.sh replica env    print .data/replica.env (fails if the replica is not running)
#
# Runs as root (initdb refuses root, so the cluster belongs to an unprivileged user) or as
# an ordinary user. Needs nothing set up by hand: on a fresh Debian machine it installs the
# `postgresql` package, whose server binaries are not on PATH.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
data_root="$root/.data"
env_file="$data_root/postgres.env"
db_user="herald"
db_name="herald"
# TLS for the TLS tests: a CA made here once, a server certificate for the name `localhost`
# only, a second CA that signed nothing of this server, and a role pg_hba admits over TLS only.
tls_dir="$data_root/postgres-tls"
tls_role="herald_tls_only"

log() { printf 'db: %s\n' "$*" >&2; }
die() { printf 'db: error: %s\n' "$*" >&2; exit 1; }
. "$(dirname "${BASH_SOURCE[0]}")/lib/tools.sh"

find_bindir() {
  local dir
  if command -v pg_config >/dev/null 2>&1; then
    dir="$(pg_config --bindir 2>/dev/null || true)"
    if [ -n "$dir" ] && [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then echo "$dir"; return 0; fi
  fi
  for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then echo "$dir"; return 0; fi
  done
  return 1
}

install_server() {
  log "PostgreSQL server binaries not found; installing the Debian 'postgresql' package"
  debian_install postgresql postgresql-contrib || die "could not install the 'postgresql' package"
}

# The OS user that owns the cluster. initdb refuses root.
cluster_owner() {
  if [ "$(id -u)" -ne 0 ]; then id -un; return; fi
  if ! id postgres >/dev/null 2>&1; then
    useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres
  fi
  echo postgres
}

as_owner() {
  local owner="$1"; shift
  # From /, which every user may enter (the checkout may sit in a root-only home).
  if [ "$(id -un)" = "$owner" ]; then "$@"; else (cd / && runuser -u "$owner" -- "$@"); fi
}

free_port() {
  python3 - <<'PY' 2>/dev/null && return 0
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()
PY
  local p
  for p in $(shuf -i 20000-60000 -n 50); do
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return 0; }
  done
  die "no free port found"
}

# Where the cluster's files live. The cluster owner must be able to reach them; when the
# checkout sits somewhere it cannot (a root-only home), the cluster lives under /var/tmp and
# .data/postgres links to it.
cluster_dir() {
  local owner="$1" dir="$data_root/postgres"
  if [ -L "$dir" ]; then readlink -f "$dir"; return; fi
  if [ -d "$dir" ]; then echo "$dir"; return; fi
  mkdir -p "$data_root"
  if [ "$owner" = "$(id -un)" ] || runuser -u "$owner" -- test -x "$data_root" 2>/dev/null; then
    echo "$dir"; return
  fi
  local alt="/var/tmp/herald-postgres-$(printf '%s' "$root" | sha1sum | cut -c1-12)"
  mkdir -p "$alt"
  ln -sfn "$alt" "$dir"
  echo "$alt"
}

# The primary's options on every start. Parallel query is sized to the machine, never above
# PostgreSQL's defaults (8 workers, 2 a query), and off below 4 cores: each parallel worker of
# an analytics scan is one more process that the queue's claims wait behind for the CPU.
# Autovacuum looks at each database every 10 s: at 1 s its workers' starts, and its passes that
# free nothing while a transaction holds the horizon, took CPU from the sends.
server_options() {
  local cores
  cores="$(nproc 2>/dev/null || echo 2)"
  local workers=$(( cores < 8 ? cores : 8 )) per_query=$(( cores / 4 ))
  [ "$per_query" -le 2 ] || per_query=2
  printf '%s' "-p $1 -k $2 -c max_connections=500 -c max_parallel_workers=$workers -c max_parallel_workers_per_gather=$per_query -c autovacuum_naptime=10s"
}

is_running() {
  local bindir="$1" owner="$2" dir="$3"
  [ -f "$dir/PG_VERSION" ] && as_owner "$owner" "$bindir/pg_ctl" -D "$dir" status >/dev/null 2>&1
}

# Waits until the server on $2 accepts connections (crash recovery of a big cluster can take minutes).
wait_ready() {
  local i
  for i in $(seq 1 900); do
    "$1/pg_isready" -q -h 127.0.0.1 -p "$2" && return 0
    sleep 1
  done
  die "the server on port $2 did not become ready"
}

# The CA, the server's certificate (localhost only) and a CA unrelated to it, made once.
make_certificates() {
  [ -f "$tls_dir/server.crt" ] && return 0
  command -v openssl >/dev/null 2>&1 || debian_install openssl
  mkdir -p "$tls_dir"
  local ca
  for ca in ca wrong-ca; do
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=Herald local $ca" \
      -keyout "$tls_dir/$ca.key" -out "$tls_dir/$ca.crt" \
      -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
  done
  openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout "$tls_dir/server.key" \
    -out "$tls_dir/server.csr" 2>/dev/null
  printf 'subjectAltName = DNS:localhost\nextendedKeyUsage = serverAuth\n' >"$tls_dir/server.ext"
  openssl x509 -req -in "$tls_dir/server.csr" -CA "$tls_dir/ca.crt" -CAkey "$tls_dir/ca.key" -CAcreateserial \
    -days 3650 -extfile "$tls_dir/server.ext" -out "$tls_dir/server.crt" 2>/dev/null
  chmod 600 "$tls_dir"/*.key
}

# TLS on in the cluster's configuration (the server's files beside it, owned by its owner), and
# pg_hba lines that admit $tls_role over TLS only. Prints "changed" when it changed anything.
configure_tls() {
  local owner="$1" dir="$2"
  make_certificates
  if ! cmp -s "$tls_dir/server.crt" "$dir/server.crt" 2>/dev/null; then
    install -o "$owner" -m 600 "$tls_dir/server.key" "$dir/server.key"
    install -o "$owner" -m 644 "$tls_dir/server.crt" "$dir/server.crt"
    echo changed
  fi
  if ! grep -q '^ssl = on' "$dir/postgresql.conf"; then
    printf '# TLS (server.crt/server.key beside this file; scripts/db.sh)\nssl = on\n' >>"$dir/postgresql.conf"
    echo changed
  fi
  if ! grep -q "$tls_role" "$dir/pg_hba.conf"; then
    # First match wins: these two lines come before the initdb ones.
    { printf 'hostssl   all %s 127.0.0.1/32 scram-sha-256\n' "$tls_role"
      printf 'hostnossl all %s 127.0.0.1/32 reject\n' "$tls_role"
      printf 'hostssl   all %s ::1/128 scram-sha-256\n' "$tls_role"
      printf 'hostnossl all %s ::1/128 reject\n' "$tls_role"
      cat "$dir/pg_hba.conf"; } >"$dir/pg_hba.conf.new"
    chown "$owner" "$dir/pg_hba.conf.new"
    mv "$dir/pg_hba.conf.new" "$dir/pg_hba.conf"
    echo changed
  fi
}

# The TLS-only role (the cluster's password) and the env file's lines.
write_env() {
  local bindir="$1" port="$2" password="$3"
  PGPASSWORD="$password" "$bindir/psql" -X -q -h 127.0.0.1 -p "$port" -U "$db_user" -d postgres -v ON_ERROR_STOP=1 -c "
    DO \$\$ BEGIN
      CREATE ROLE $tls_role LOGIN PASSWORD '$password';
    EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
    END \$\$;" >/dev/null
  {
    printf 'HERALD_DATABASE_URL=postgres://%s:%s@127.0.0.1:%s/%s\n' "$db_user" "$password" "$port" "$db_name"
    printf 'HERALD_TEST_DATABASE_CA=%s\n' "$tls_dir/ca.crt"
    printf 'HERALD_TEST_DATABASE_WRONG_CA=%s\n' "$tls_dir/wrong-ca.crt"
    printf 'HERALD_TEST_DATABASE_TLS_ROLE=%s\n' "$tls_role"
  } >"$env_file"
  chmod 600 "$env_file"
  cat "$env_file"
}

cmd_up() {
  local bindir owner dir port password
  bindir="$(find_bindir)" || { install_server; bindir="$(find_bindir)" || die "installed postgresql but found no initdb"; }
  owner="$(cluster_owner)"
  dir="$(cluster_dir "$owner")"

  if is_running "$bindir" "$owner" "$dir"; then
    # Its port is line 4 of postmaster.pid; the env file may be missing or name an older start.
    port="$(sed -n 4p "$dir/postmaster.pid")"
    password="$(cat "$data_root/postgres.password")"
    log "reusing the running cluster in $dir (port $port)"
    wait_ready "$bindir" "$port"
    if [ -n "$(configure_tls "$owner" "$dir")" ]; then
      log "TLS configured; reloading the server"
      as_owner "$owner" "$bindir/pg_ctl" -D "$dir" reload >/dev/null
      sleep 1
    fi
    write_env "$bindir" "$port" "$password"
    return 0
  fi

  if [ ! -f "$dir/PG_VERSION" ]; then
    log "creating a cluster in $dir"
    mkdir -p "$dir"
    chown "$owner" "$dir"
    chmod 700 "$dir"
    password="$(head -c 18 /dev/urandom | base64 | tr -d '/+=' )"
    local pwfile; pwfile="$(mktemp)"
    printf '%s\n' "$password" >"$pwfile"
    chown "$owner" "$pwfile"
    as_owner "$owner" "$bindir/initdb" -D "$dir" -U "$db_user" --pwfile="$pwfile" \
      --auth=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 >/dev/null
    rm -f "$pwfile"
    printf '%s\n' "$password" >"$data_root/postgres.password"
    chmod 600 "$data_root/postgres.password"
    cat >>"$dir/postgresql.conf" <<CONF
# Herald local cluster
listen_addresses = '127.0.0.1'
max_connections = 500
shared_buffers = 512MB
log_min_messages = warning
CONF
  fi
  password="$(cat "$data_root/postgres.password")"
  configure_tls "$owner" "$dir" >/dev/null
  port="$(free_port)"
  log "starting PostgreSQL on 127.0.0.1:$port"
  as_owner "$owner" "$bindir/pg_ctl" -D "$dir" -w -t 900 -l "$dir/server.log" \
    -o "$(server_options "$port" "$dir")" start >/dev/null || { tail -20 "$dir/server.log" >&2 || true; die "the server did not start"; }
  if ! PGPASSWORD="$password" "$bindir/psql" -h 127.0.0.1 -p "$port" -U "$db_user" -d postgres -tAc \
      "SELECT 1 FROM pg_database WHERE datname = '$db_name'" | grep -q 1; then
    PGPASSWORD="$password" "$bindir/psql" -h 127.0.0.1 -p "$port" -U "$db_user" -d postgres -qc "CREATE DATABASE $db_name" >/dev/null
  fi
  write_env "$bindir" "$port" "$password"
}

cmd_down() {
  local bindir owner dir
  [ -e "$data_root/postgres" ] || { log "no cluster"; return 0; }
  bindir="$(find_bindir)" || die "no PostgreSQL binaries"
  owner="$(cluster_owner)"
  dir="$(cluster_dir "$owner")"
  replica_down
  if is_running "$bindir" "$owner" "$dir"; then
    as_owner "$owner" "$bindir/pg_ctl" -D "$dir" -m fast -w stop >/dev/null
    log "stopped the cluster in $dir"
  else
    log "the cluster is not running"
  fi
  rm -f "$env_file"
}

# Stops the cluster (`fast`: a clean shutdown, or `immediate`: a crash), keeps it down for
# $2 seconds, and starts it again on the same port (the fault harness's outage).
cmd_restart() {
  local mode="${1:-fast}" seconds="${2:-0}" bindir owner dir port
  bindir="$(find_bindir)" || die "no PostgreSQL binaries"
  owner="$(cluster_owner)"
  dir="$(cluster_dir "$owner")"
  is_running "$bindir" "$owner" "$dir" || die "the cluster is not running"
  port="$(sed -n 4p "$dir/postmaster.pid")"
  as_owner "$owner" "$bindir/pg_ctl" -D "$dir" -m "$mode" -w stop >/dev/null
  log "stopped ($mode) on port $port; down for ${seconds}s"
  sleep "$seconds"
  as_owner "$owner" "$bindir/pg_ctl" -D "$dir" -w -t 900 -l "$dir/server.log" \
    -o "$(server_options "$port" "$dir")" start >/dev/null || die "the server did not start again"
  log "started again on port $port"
}

# The replica's files sit beside the cluster's, so that the cluster's owner can reach them too.
replica_dir() {
  local owner="$1" primary
  primary="$(cluster_dir "$owner")"
  echo "${primary%/}-replica"
}

replica_env_file="$data_root/replica.env"

# Waits until the standby on port $3 streams from the cluster (its WAL receiver says so).
wait_streaming() {
  local bindir="$1" password="$2" port="$3" i status
  for i in $(seq 1 600); do
    status="$(PGPASSWORD="$password" "$bindir/psql" -X -qtA -h 127.0.0.1 -p "$port" -U "$db_user" -d postgres \
      -c "SELECT status FROM pg_stat_wal_receiver" 2>/dev/null || true)"
    [ "$status" = "streaming" ] && return 0
    sleep 0.1
  done
  return 1
}

replica_up() {
  local bindir owner dir port password primary_port
  cmd_up >/dev/null
  bindir="$(find_bindir)"
  owner="$(cluster_owner)"
  dir="$(replica_dir "$owner")"
  password="$(cat "$data_root/postgres.password")"
  primary_port="$(sed -n 4p "$(cluster_dir "$owner")/postmaster.pid")"

  if is_running "$bindir" "$owner" "$dir"; then
    port="$(sed -n 4p "$dir/postmaster.pid")"
    log "reusing the running replica in $dir (port $port)"
  else
    port="$(free_port)"
    # A standby left from an earlier start streams again from where it stopped; one that
    # cannot (the cluster moved to another port, its WAL is gone) is made again.
    if [ -f "$dir/standby.signal" ]; then
      sed -i "s/port=[0-9]*/port=$primary_port/" "$dir/postgresql.auto.conf"
      log "starting the replica in $dir on 127.0.0.1:$port"
      if ! as_owner "$owner" "$bindir/pg_ctl" -D "$dir" -w -t 120 -l "$dir/server.log" -o "-p $port -k $dir" start >/dev/null \
        || ! wait_streaming "$bindir" "$password" "$port"; then
        log "the old replica does not stream; making it again"
        as_owner "$owner" "$bindir/pg_ctl" -D "$dir" -m immediate -w stop >/dev/null 2>&1 || true
        rm -rf "$dir"
      fi
    elif [ -e "$dir" ]; then
      rm -rf "$dir"
    fi
    if [ ! -d "$dir" ]; then
      log "copying the cluster on port $primary_port into $dir (pg_basebackup)"
      mkdir -p "$dir"
      chown "$owner" "$dir"
      chmod 700 "$dir"
      # -R writes standby.signal and primary_conninfo (with the password: the file is the owner's only).
      local out; out="$(mktemp)"
      # The cluster's socket sits in its folder: pg_basebackup skips it with a warning, kept out of the output.
      as_owner "$owner" env PGPASSWORD="$password" "$bindir/pg_basebackup" -h 127.0.0.1 -p "$primary_port" \
        -U "$db_user" -D "$dir" -R -X stream -c fast >"$out" 2>&1 \
        || { grep -v 'skipping special file' "$out" >&2; rm -f "$out"; die "pg_basebackup failed"; }
      rm -f "$out"
      cat >>"$dir/postgresql.conf" <<CONF
# Herald local replica (scripts/db.sh replica up)
# Off: the replica's readers never hold back vacuum on the cluster's queue tables; a long
# query conflicting with replayed cleanup is cancelled after max_standby_streaming_delay.
hot_standby = on
hot_standby_feedback = off
max_standby_streaming_delay = 30s
shared_buffers = 128MB
CONF
      log "starting the replica on 127.0.0.1:$port"
      as_owner "$owner" "$bindir/pg_ctl" -D "$dir" -w -t 900 -l "$dir/server.log" -o "-p $port -k $dir" start >/dev/null \
        || { tail -20 "$dir/server.log" >&2 || true; die "the replica did not start"; }
    fi
  fi
  wait_ready "$bindir" "$port"
  wait_streaming "$bindir" "$password" "$port" || { tail -20 "$dir/server.log" >&2 || true; die "the replica does not stream"; }
  {
    printf 'HERALD_DATABASE_READ_URL=postgres://%s:%s@127.0.0.1:%s/%s\n' "$db_user" "$password" "$port" "$db_name"
    printf 'HERALD_TEST_REPLICA_URL=postgres://%s:%s@127.0.0.1:%s/%s\n' "$db_user" "$password" "$port" "$db_name"
  } >"$replica_env_file"
  chmod 600 "$replica_env_file"
  cat "$replica_env_file"
}

replica_down() {
  local bindir owner dir
  rm -f "$replica_env_file"
  bindir="$(find_bindir)" || return 0
  owner="$(cluster_owner)"
  dir="$(replica_dir "$owner")"
  if is_running "$bindir" "$owner" "$dir"; then
    as_owner "$owner" "$bindir/pg_ctl" -D "$dir" -m fast -w stop >/dev/null
    log "stopped the replica in $dir"
  fi
}

cmd_replica() {
  case "${1:-}" in
    up) replica_up ;;
    down) replica_down ;;
    env) [ -f "$replica_env_file" ] || die "no replica running: run 'scripts/db.sh replica up'"; cat "$replica_env_file" ;;
    *) echo "usage: $0 replica up|down|env" >&2; exit 2 ;;
  esac
}

cmd_env() {
  [ -f "$env_file" ] || die "no cluster running: run 'make db-up'"
  cat "$env_file"
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  env) cmd_env ;;
  restart) cmd_restart "${2:-fast}" "${3:-0}" ;;
  replica) cmd_replica "${2:-}" ;;
  *) echo "usage: $0 up|down|env|restart [fast|immediate] [seconds]|replica up|down|env" >&2; exit 2 ;;
esac
