"""A trial that starts while the engine is away gets ``sandbox_lost`` (infra: waited for and
retried), never the SDK's raw ``ConnectionError`` (issue #29: under load, trials starting during
a real dockerd restart reached the image lookup, and that error ended the whole job with
``ExceptionGroup: unhandled errors in a TaskGroup``). No engine needed: the socket is absent."""

from __future__ import annotations

import asyncio

import docker
import pytest

from cairn.errors import SandboxLostError
from cairn.sandbox.base import SandboxSpec
from cairn.sandbox.docker.build import ensure_image


def test_an_image_lookup_without_an_engine_is_sandbox_lost(tmp_path):
    client = docker.DockerClient(base_url=f"unix://{tmp_path}/no-engine.sock", version="1.41", timeout=5)
    spec = SandboxSpec(env_dir=None, docker_image="debian:bookworm-slim")
    try:
        with pytest.raises(SandboxLostError, match="looking up image debian:bookworm-slim"):
            asyncio.run(ensure_image(client, spec))
    finally:
        client.close()


def test_a_build_tag_lookup_without_an_engine_is_sandbox_lost(tmp_path):
    env = tmp_path / "environment"
    env.mkdir()
    (env / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    client = docker.DockerClient(base_url=f"unix://{tmp_path}/no-engine.sock", version="1.41", timeout=5)
    spec = SandboxSpec(env_dir=env, env_hash="0" * 64)
    try:
        with pytest.raises(SandboxLostError, match=r"^looking up image .*: Docker engine not reachable: "):
            asyncio.run(ensure_image(client, spec))
    finally:
        client.close()
