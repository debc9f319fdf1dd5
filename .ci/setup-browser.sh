#!/usr/bin/env bash
# Installs Debian's headless Chromium and its WebDriver for the viewer's browser tests
# (tests/viewer/test_browser.py drives /usr/bin/chromium through Selenium; no browser is
# downloaded at test time). Idempotent: skips what exists.
set -euo pipefail
log() { printf '[setup-browser] %s\n' "$*" >&2; }

export DEBIAN_FRONTEND=noninteractive
need_apt=()
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need_apt+=(chromium-driver)
if [ ${#need_apt[@]} -gt 0 ]; then
  log "apt-get install ${need_apt[*]}"
  apt-get update -qq
  apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
log "$(chromium --version 2>/dev/null || echo 'chromium missing')"
