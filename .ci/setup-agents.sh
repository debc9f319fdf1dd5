#!/usr/bin/env bash
# npm on the host: `cairn agents prepare` (and the real-CLI tests, which prepare on demand)
# download the agent CLIs from the npm registry once per machine into ~/.cache/cairn/agents.
# The Python agents (aider, mini-swe-agent) get a sealed CPython from Debian's archive
# (`apt-get download` + `dpkg-deb -x`), which needs current package lists: refreshed here when
# older than a day (apt-get download 404s on a superseded version). Idempotent.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
lists=/var/lib/apt/lists
if [ -z "$(find "$lists" -maxdepth 1 -name '*Packages*' -mmin -1440 2>/dev/null | head -n1)" ]; then
  echo "[setup-agents] apt-get update" >&2
  apt-get update -qq
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "[setup-agents] apt-get install npm" >&2
  apt-get install -y -qq npm >/dev/null
fi
