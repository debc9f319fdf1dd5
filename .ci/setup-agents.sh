#!/usr/bin/env bash
# npm on the host: `cairn agents prepare` (and the real-CLI tests, which prepare on demand)
# download the agent CLIs from the npm registry once per machine into ~/.cache/cairn/agents.
# Idempotent: skips what exists.
set -euo pipefail
if ! command -v npm >/dev/null 2>&1; then
  echo "[setup-agents] apt-get install npm" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq npm >/dev/null
fi
