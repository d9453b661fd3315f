# What the project's scripts share to install what they need on a fresh Debian machine.
# Source it: `. "$(dirname "${BASH_SOURCE[0]}")/lib/tools.sh"` from a script in scripts/.

# debian_install PKG...: installs Debian packages, as root or through sudo, quietly and without
# recommended extras. Fails with one line when neither is possible.
debian_install() {
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "not root and no sudo: install the Debian package(s) $* first" >&2; return 1; }
    sudo="sudo"
  fi
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# python_venv DIR REQUIREMENTS: a virtual environment in DIR with exactly REQUIREMENTS (pip
# requirement lines, pinned) installed from PyPI; made again only when REQUIREMENTS change.
python_venv() {
  local venv="$1" requirements="$2"
  mkdir -p "$(dirname "$venv")"
  # Tests that run at once may each ask for the venv: one makes it while the others wait, then
  # find it made. Its requirements file is written last, so a half-made venv is never taken.
  (
    flock 9
    if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/requirements.txt" 2>/dev/null)" = "$requirements" ]; then
      exit 0
    fi
    python3 -c 'import ensurepip, venv' 2>/dev/null || debian_install python3-venv
    rm -rf "$venv"
    python3 -m venv "$venv"
    printf '%s\n' "$requirements" >"$venv/requirements.pending"
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$venv/requirements.pending"
    mv "$venv/requirements.pending" "$venv/requirements.txt"
  ) 9>"$venv.lock"
}
