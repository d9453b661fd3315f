#!/usr/bin/env bash
# `make run`: the whole system on this machine, no cloud account. Starts nh-emulator,
# migrates, creates the demo users alice and bob, starts herald-api and
# herald-worker, prints where everything is, and stops it all on Ctrl-C.
set -euo pipefail
bin="${1:?usage: run.sh BIN_DIR}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
set -a; . .data/postgres.env; set +a

pids=()
cleanup() {
  trap - INT TERM EXIT
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  echo "run: stopped"
}
trap cleanup INT TERM EXIT

"$bin/heraldctl" migrate

# The emulator picks a free port and prints its connection string: read it from its output.
emulator_out="$(mktemp)"
"$bin/nh-emulator" --port 0 --hub herald --inspection >"$emulator_out" &
pids+=($!)
for _ in $(seq 1 100); do grep -q '^HERALD_HUB_NAME=' "$emulator_out" 2>/dev/null && break; sleep 0.1; done
grep -q '^HERALD_HUB_NAME=' "$emulator_out" || { echo "run: nh-emulator did not start" >&2; cat "$emulator_out" >&2; exit 1; }
# Not `. "$emulator_out"`: the connection string holds `;`, which the shell would split on.
HERALD_HUB_CONNECTION_STRING="$(sed -n 's/^HERALD_HUB_CONNECTION_STRING=//p' "$emulator_out")"
HERALD_HUB_NAME="$(sed -n 's/^HERALD_HUB_NAME=//p' "$emulator_out")"
export HERALD_HUB_CONNECTION_STRING HERALD_HUB_NAME

# Demo users: created on the first run; later runs reset their passwords and enable them, so
# the passwords printed below always work.
for user in alice bob; do
  if ! printf '%s-password\n' "$user" | "$bin/heraldctl" users add "$user" --password-stdin >/dev/null 2>&1; then
    printf '%s-password\n' "$user" | "$bin/heraldctl" users set-password "$user" --password-stdin >/dev/null
    "$bin/heraldctl" users enable "$user" >/dev/null
  fi
done
users="alice / alice-password, bob / bob-password"

# A demo sender API key (send, read): made once and kept in .data/ (git-ignored, owner-only);
# made again when the database no longer knows it.
key_file=.data/demo-sender.key
if ! { [ -s "$key_file" ] \
       && "$bin/heraldctl" keys list 2>/dev/null | grep -F "$(cut -c1-13 "$key_file")…" | grep -q '  live  '; }; then
  (umask 077; "$bin/heraldctl" keys create --name "demo-sender-$(date +%s)" --scopes send,read 2>/dev/null >"$key_file")
fi

"$bin/herald-api" &
pids+=($!)
"$bin/herald-worker" &
pids+=($!)

# Print the banner once the API answers (bash's /dev/tcp: no curl needed).
api_host="${HERALD_API_HOST:-127.0.0.1}"; api_port="${HERALD_API_PORT:-8080}"
for _ in $(seq 1 300); do (exec 3<>"/dev/tcp/$api_host/$api_port") 2>/dev/null && break; sleep 0.2; done

emulator_port="$(sed -n 's|.*Endpoint=[a-z]*://[^:]*:\([0-9]*\)/.*|\1|p' "$emulator_out")"
cat <<TXT

Herald is running.
  API:          http://${api_host}:${api_port}  (GET /health/ready)
  dashboard:    http://${api_host}:${api_port}/dashboard  (sign in with the demo key in ${key_file})
  nh-emulator:  http://127.0.0.1:${emulator_port}  (GET /_emulator/hubs/herald/deliveries)
  database:     ${HERALD_DATABASE_URL%%://*}://…@${HERALD_DATABASE_URL##*@}
  demo users:   ${users}
Try it (the tutorial client's registration):
  curl -u alice:alice-password -X POST 'http://${api_host}:${api_port}/api/register?handle=ABCDEF0123456789ABCDEF0123456789'
  curl -u alice:alice-password -X PUT -H 'Content-Type: application/json' \\
       -d '{"Platform":"apns","Handle":"ABCDEF0123456789ABCDEF0123456789","Tags":["World"]}' \\
       'http://${api_host}:${api_port}/api/register/<the id from above>'
  curl http://127.0.0.1:${emulator_port}/_emulator/hubs/herald/registrations
Send (the tutorial's endpoint, then the sender API with the demo key ${key_file}):
  curl -u bob:bob-password -X POST -H 'Content-Type: application/json' -d '"Hello"' \\
       'http://${api_host}:${api_port}/api/notifications?pns=apns&to_tag=alice'
  curl -H "Authorization: Bearer \$(cat ${key_file})" -H 'Content-Type: application/json' \\
       -d '{"target":{"tags":"World"},"content":{"apple":{"aps":{"alert":"Breaking news"}}}}' \\
       http://${api_host}:${api_port}/v1/notifications
  curl http://127.0.0.1:${emulator_port}/_emulator/hubs/herald/deliveries
Ctrl-C stops everything.
TXT
wait -n "${pids[@]}" || true
