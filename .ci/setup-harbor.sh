#!/usr/bin/env bash
# Installs Harbor 0.26 (PyPI `harbor==0.26.*`, never a dependency of cairn) into a virtual
# environment of its own, with CPython 3.12 (pyenv's, else a python3.12 on PATH), for the
# parity tests (tests/test_harbor_parity.py and the other tests that load Harbor's models).
# Prints the path of its `harbor` executable on stdout; .ci/run exports it as CAIRN_HARBOR
# (tests/helpers/harbor_env.py reads it). Idempotent: an environment that holds a 0.26.x is
# kept; a half-built one is removed and built again.
#   CAIRN_HARBOR_VENV   where the environment lives (default ~/.cache/cairn/harbor-0.26)
set -euo pipefail
log() { printf '[setup-harbor] %s\n' "$*" >&2; }

venv="${CAIRN_HARBOR_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/cairn/harbor-0.26}"
ok() {
  [ -f "$venv/.complete" ] && [ -x "$venv/bin/harbor" ] &&
    "$venv/bin/python" -c 'import importlib.metadata as m, sys
sys.exit(0 if m.version("harbor").startswith("0.26.") else 1)' 2>/dev/null
}
if ok; then
  log "harbor $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("harbor"))') in $venv"
  printf '%s\n' "$venv/bin/harbor"
  exit 0
fi

py=""
if command -v pyenv >/dev/null 2>&1; then
  ver="$(pyenv versions --bare 2>/dev/null | grep -E '^3\.12(\.[0-9]+)?$' | sort -V | tail -n1 || true)"
  [ -n "$ver" ] && py="$(pyenv root)/versions/$ver/bin/python3.12"
fi
if [ -z "$py" ] || [ ! -x "$py" ]; then py="$(command -v python3.12 || true)"; fi
if [ -z "$py" ]; then
  log "no CPython 3.12 found (pyenv install 3.12, or apt-get install python3.12)"
  exit 1
fi

log "building $venv with $py ($("$py" --version 2>&1))"
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install -q 'harbor==0.26.*' >&2
"$venv/bin/harbor" --help >/dev/null
touch "$venv/.complete"
log "harbor $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("harbor"))') in $venv"
printf '%s\n' "$venv/bin/harbor"
