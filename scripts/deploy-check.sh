#!/usr/bin/env bash
# The deploy files' checks, as far as a machine without a container engine can take them
# (make test runs them all):
#
#   scripts/deploy-check.sh files          hadolint on deploy/Dockerfile; the Kubernetes manifests
#                                          against Kubernetes' schemas (kubernetes-validate, strict);
#                                          KEDA's objects against KEDA's CRDs; compose.yaml against
#                                          the Compose specification; Secret keys documented;
#                                          every Herald pod under an egress policy (DNS, database,
#                                          hub only)
#   scripts/deploy-check.sh monitoring     promtool on deploy/prometheus (rules, their unit tests, the
#                                          scrape configuration) and on every query of
#                                          deploy/grafana/herald.json
#   scripts/deploy-check.sh queue BIN_DIR  the KEDA trigger's query on a freshly migrated database,
#                                          as a login role in herald_queue_depth: one integer,
#                                          counting due and running jobs only
#   scripts/deploy-check.sh ldd [SCRATCH]  links the four executables as the image does (the Swift
#                                          runtime linked in, the Dockerfile's STATIC_LINK_FLAGS) from
#                                          the debug build's objects in SCRATCH (default .build; run
#                                          `swift build` first), then checks with ldd that each loads
#                                          only libraries of packages the Dockerfile's run stage
#                                          installs, and starts each once (--help) with the Swift
#                                          toolchain's libraries hidden
#   scripts/deploy-check.sh processes BIN_DIR
#                                          runs the migration and starts herald-api and herald-worker
#                                          with the environment compose.yaml and kubernetes/ write
#                                          (hosts mapped to the local cluster, its TLS CA, a local
#                                          nh-emulator) until both answer /health/ready
#                                          (scripts/deploy-check/processes.py)
#   scripts/deploy-check.sh all BIN_DIR [SCRATCH]  all five
#
# Installs what it needs when missing: python3-venv (Debian) and the pinned tools of
# scripts/deploy-check/requirements.txt (PyPI) in .data/deploy-venv. The schemas are in
# deploy/schemas/, so the checks run offline once installed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
venv=.data/deploy-venv
requirements=scripts/deploy-check/requirements.txt
check_py=scripts/deploy-check/check.py
# The oldest Kubernetes the manifests are meant for (CronJob timeZone is stable from 1.27)
# and the newest the validator knows.
kubernetes_versions="1.29.0 1.37.0"
products="herald-api herald-worker heraldctl nh-emulator"

log() { printf 'deploy-check: %s\n' "$*"; }
fail() { printf 'deploy-check: FAIL %s\n' "$*" >&2; exit 1; }

sudo_cmd() { if [ "$(id -u)" -ne 0 ]; then echo sudo; fi; }

. "$(dirname "${BASH_SOURCE[0]}")/lib/tools.sh"

ensure_venv() { python_venv "$venv" "$(cat "$requirements")"; }

check_files() {
  ensure_venv
  "$venv/bin/hadolint" --no-color --failure-threshold info deploy/Dockerfile || fail "hadolint: deploy/Dockerfile"
  log "ok hadolint $("$venv/bin/hadolint" --version | grep -o '[0-9][0-9.]*' | head -1): deploy/Dockerfile"

  # KEDA's kinds are not Kubernetes' own: they are checked against KEDA's CRDs below.
  local manifests=() file version
  for file in deploy/kubernetes/*.yaml; do
    grep -q '^apiVersion: keda.sh/' "$file" || manifests+=("$file")
  done
  for version in $kubernetes_versions; do
    "$venv/bin/kubernetes-validate" --strict --quiet -k "$version" "${manifests[@]}" \
      || fail "kubernetes-validate $version: deploy/kubernetes"
    log "ok kubernetes $version: ${#manifests[@]} manifest files valid (strict)"
  done
  "$venv/bin/python" "$check_py" keda deploy/kubernetes/worker-autoscaling.yaml deploy/schemas/keda \
    deploy/kubernetes/worker.yaml
  "$venv/bin/python" "$check_py" compose deploy/compose.yaml deploy/schemas/compose-spec.json deploy/env.example
  "$venv/bin/python" "$check_py" secrets deploy/kubernetes deploy/README.md
  "$venv/bin/python" "$check_py" egress deploy/kubernetes
}

# The ScaledObject's query, run as KEDA would on a migrated database: it must answer one
# integer, count due and running jobs, and not count jobs that wait for a later time.
check_queue() {
  local bin="${1:?usage: deploy-check.sh queue BIN_DIR}"
  ensure_venv
  [ -f .data/postgres.env ] || fail "no database: run scripts/db.sh up"
  local base db url query answer
  base="$(sed -n 's/^HERALD_DATABASE_URL=//p' .data/postgres.env)"
  db="herald_t_deploycheck_$$"
  url="${base%/*}/$db"
  query="$("$venv/bin/python" "$check_py" query deploy/kubernetes/worker-autoscaling.yaml)"
  # KEDA's login role: a member of herald_queue_depth only, as deploy/README.md creates it.
  local role="herald_t_keda_$$" hostport="${base#*@}"
  hostport="${hostport%%/*}"
  local keda_url="postgres://$role:keda@$hostport/$db"
  psql "$base" -qc "CREATE DATABASE $db" >/dev/null
  trap 'psql "$base" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true; psql "$base" -qc "DROP ROLE IF EXISTS $role" >/dev/null 2>&1 || true' RETURN
  HERALD_DATABASE_URL="$url" "$bin/heraldctl" migrate >/dev/null || fail "heraldctl migrate"
  psql "$base" -qc "CREATE ROLE $role LOGIN PASSWORD 'keda' IN ROLE herald_queue_depth" >/dev/null
  answer() { psql "$keda_url" -X -v ON_ERROR_STOP=1 -At -c "$query" 2>&1 | tr '\n' '|'; }
  [ "$(answer)" = "0|" ] || fail "the KEDA query on an empty queue answered '$(answer)', not one integer 0"
  psql "$url" -X -v ON_ERROR_STOP=1 -qc "
    INSERT INTO pgqueue.jobs (queue, kind, args) VALUES ('q', 'k', '{}'), ('q', 'k', '{}');
    INSERT INTO pgqueue.jobs (queue, kind, args, state, locked_by, lease_expires_at)
      VALUES ('q', 'k', '{}', 'running', 'w', now() + interval '1 minute');
    INSERT INTO pgqueue.jobs (queue, kind, args, run_at) VALUES ('q', 'k', '{}', now() + interval '1 hour');" >/dev/null
  [ "$(answer)" = "3|" ] || fail "the KEDA query answered '$(answer)' for 2 due, 1 running and 1 later job (want 3)"
  log "ok keda query: one integer as a member of herald_queue_depth; counts due and running jobs, not later ones"
}

# The deploy files' environments, run for real against the local cluster (TLS on).
check_processes() {
  local bin="${1:?usage: deploy-check.sh processes BIN_DIR}"
  ensure_venv
  [ -f .data/postgres.env ] || fail "no database: run scripts/db.sh up"
  (
    set -a; . .data/postgres.env; set +a
    [ -n "${HERALD_TEST_DATABASE_CA:-}" ] || fail "no TLS fixtures in .data/postgres.env: run scripts/db.sh up"
    "$venv/bin/python" scripts/deploy-check/processes.py "$bin" "$HERALD_TEST_DATABASE_CA"
  )
}

# The packages the Dockerfile's run stage installs.
run_packages() { ensure_venv >/dev/null; "$venv/bin/python" "$check_py" run-packages deploy/Dockerfile; }

# The Debian package that owns a library file. dpkg knows each file by one of its names: with
# merged /usr, /lib/… and /usr/lib/… name the same file, and libraries are reached by symlinks.
owner_of() {
  local path="$1" dir candidate owner
  dir="$(readlink -f "$(dirname "$path")")"
  for candidate in "$path" "$dir/$(basename "$path")" "$(readlink -f "$path")"; do
    for candidate in "$candidate" "${candidate#/usr}" "/usr${candidate}"; do
      owner="$(dpkg -S "$candidate" 2>/dev/null | head -1 | cut -d: -f1)"
      if [ -n "$owner" ]; then echo "$owner"; return 0; fi
    done
  done
}

# The packages apt-get installs for the run stage's list (with --no-install-recommends): the
# named ones and everything they depend on, as Debian 12 (this machine's release, and the run
# image's) resolves them.
run_stage_closure() {
  local named; named="$(run_packages)"
  {
    printf '%s\n' $named
    # shellcheck disable=SC2086
    apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
      --no-enhances $named 2>/dev/null | sed -n 's/^ *\(Pre\)\{0,1\}Depends: \([^ <>]*\).*/\2/p'
  } | sed 's/:.*//' | sort -u
}

check_ldd() {
  local scratch="${1:-.build}" product
  ensure_venv
  # -lxml2 (in the flags, as in the image's build stage) needs libxml2's development link.
  if ! ls /usr/lib/*/libxml2.so >/dev/null 2>&1; then
    debian_install libxml2-dev
  fi
  # Global, for the exit trap. Beside the build, on its file system: the four binaries take
  # about 900 MB, more than a small /tmp (a tmpfs) may have free.
  stage="$(mktemp -d "$(cd "$scratch" && pwd)/deploy-check.XXXXXX")"
  trap 'rm -rf "${stage:-}"' EXIT
  local started=$SECONDS pids=() pid
  # Side by side: the links share the cores instead of taking turns.
  for product in $products; do
    "$venv/bin/python" "$check_py" static-link "$scratch" deploy/Dockerfile "$product" "$stage/$product" &
    pids+=("$!")
  done
  for pid in "${pids[@]}"; do wait "$pid" || fail "a static link failed (its error is above)"; done
  log "linked $products with --static-swift-stdlib and the Dockerfile's flags in $((SECONDS - started)) s"

  local allowed; allowed=" $(run_stage_closure | tr '\n' ' ') "
  # The toolchain's runtime libraries: hidden while the binaries are checked and started.
  local toolchain_libs
  toolchain_libs="$(swift -print-target-info | python3 -c 'import json,sys; print(" ".join(json.load(sys.stdin)["paths"]["runtimeLibraryPaths"]))')"
  # In a private mount namespace a read-only empty tmpfs covers each toolchain library folder,
  # so nothing (a RUNPATH included) can load from it there.
  cat >"$stage/inside.sh" <<'INSIDE'
set -euo pipefail
stage="$1"
for dir in $TOOLCHAIN_LIBS; do mount -t tmpfs -o size=1m,ro tmpfs "$dir"; done
for product in $PRODUCTS; do
  ldd "$stage/$product" >"$stage/$product.ldd" 2>&1 || { cat "$stage/$product.ldd"; exit 3; }
  if ! env -i LD_LIBRARY_PATH= "$stage/$product" --help >"$stage/$product.help" 2>&1; then
    echo "$product --help failed:"; tail -5 "$stage/$product.help"; exit 4
  fi
done
INSIDE
  TOOLCHAIN_LIBS="$toolchain_libs" PRODUCTS="$products" $(sudo_cmd) unshare --mount --propagation private \
    bash "$stage/inside.sh" "$stage" \
    || fail "the static binaries did not load or start with the toolchain's libraries ($toolchain_libs) hidden"

  local line path package problems="" count
  for product in $products; do
    if grep -q 'not found' "$stage/$product.ldd"; then
      problems+="$product: $(grep 'not found' "$stage/$product.ldd" | tr -s ' \t' ' ')\n"
      continue
    fi
    count=0
    while read -r line; do
      # "libxml2.so.2 => /lib/x86_64-linux-gnu/libxml2.so.2 (0x…)", or the loader itself.
      path="$(printf '%s\n' "$line" | sed -n 's/.*=> \(\/[^ ]*\) (0x.*/\1/p; s/^\(\/[^ ]*\) (0x.*/\1/p')"
      [ -n "$path" ] || continue
      count=$((count + 1))
      package="$(owner_of "$path")"
      if [ -z "$package" ]; then
        problems+="$product: $path belongs to no Debian package\n"
      elif [[ "$allowed" != *" $package "* ]]; then
        problems+="$product: $(basename "$path") comes from $package, which the run stage does not install\n"
      fi
    done <"$stage/$product.ldd"
    log "ok $product: loads $count libraries, all from packages the run stage installs; --help runs without the toolchain"
  done
  [ -z "$problems" ] || fail "$(printf "libraries the image would lack:\n%b" "$problems")"
}

# The monitoring files: the alert rules parse and their unit tests pass, the example scrape
# configuration parses, and every query of the Grafana dashboard parses as PromQL. promtool comes
# from Debian's prometheus package. (That the metrics they name exist is checked against real
# scrapes by Tests/HeraldEndToEndTests/MetricsExpositionTests.swift.)
check_monitoring() {
  command -v promtool >/dev/null 2>&1 || debian_install prometheus
  ensure_venv
  promtool check rules deploy/prometheus/alerts.yml >/dev/null || fail "promtool check rules deploy/prometheus/alerts.yml"
  (cd deploy/prometheus && promtool test rules alerts.test.yml >/dev/null) \
    || fail "promtool test rules deploy/prometheus/alerts.test.yml (run it for the details)"
  promtool check config --syntax-only deploy/prometheus/prometheus.yml >/dev/null \
    || fail "promtool check config deploy/prometheus/prometheus.yml"
  local rules; rules="$(mktemp --suffix .yml)"
  "$venv/bin/python" "$check_py" grafana-rules deploy/grafana/herald.json >"$rules"
  promtool check rules "$rules" >/dev/null || { rm -f "$rules"; fail "deploy/grafana/herald.json: a query does not parse"; }
  local queries; queries="$(grep -c '"record"' "$rules")"; rm -f "$rules"
  log "ok prometheus $(promtool --version 2>&1 | head -1 | grep -o '[0-9][0-9.]*' | head -1): alerts.yml rules and unit tests, prometheus.yml, the $queries queries of grafana/herald.json"
}

case "${1:-}" in
  files) check_files ;;
  monitoring) check_monitoring ;;
  queue) check_queue "${2:-}" ;;
  ldd) check_ldd "${2:-.build}" ;;
  processes) check_processes "${2:-}" ;;
  all) check_files; check_monitoring; check_queue "${2:?usage: deploy-check.sh all BIN_DIR [SCRATCH]}"
    check_processes "$2"; check_ldd "${3:-.build}" ;;
  *) echo "usage: $0 files | monitoring | queue BIN_DIR | processes BIN_DIR | ldd [SCRATCH] | all BIN_DIR [SCRATCH]" >&2; exit 2 ;;
esac
