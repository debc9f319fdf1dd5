"""The Docker SDK client the backend uses, and the engine's version: made once per process.

A module of its own so the image builders (:mod:`~cairn.sandbox.docker.build`,
:mod:`~cairn.sandbox.docker.buildkit`) and the backends share it without importing each other.
"""

from __future__ import annotations

import contextlib

import docker
import docker.errors

from cairn.errors import SandboxLostError

_API_VERSION: str | None = None
_ENGINE_VERSION: str | None = None


def make_client(timeout: int = 300) -> docker.DockerClient:
    """A Docker SDK client from the environment (``DOCKER_HOST`` …), API version detected once
    per process (later clients skip the engine round trip that detects it).

    Args:
        timeout: the client's per-request timeout, seconds.

    Raises:
        SandboxLostError: no engine answers.
    """
    global _API_VERSION
    try:
        client = docker.DockerClient.from_env(
            version=_API_VERSION or "auto", timeout=timeout, max_pool_size=64
        )
    except docker.errors.DockerException as exc:
        raise SandboxLostError(f"Docker engine not reachable: {exc}") from exc
    _API_VERSION = client.api.api_version
    return client


def engine_version(client: docker.DockerClient) -> str | None:
    """The engine's version string (``20.10.24+dfsg1``), cached per process."""
    global _ENGINE_VERSION
    if _ENGINE_VERSION is None:
        with contextlib.suppress(Exception):
            _ENGINE_VERSION = str(client.api.version().get("Version"))
    return _ENGINE_VERSION
