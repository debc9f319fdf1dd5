"""The Docker SDK client the backend uses, and what a job learned about the engine behind it.

A module of its own so the image builders (:mod:`~cairn.sandbox.docker.build`,
:mod:`~cairn.sandbox.docker.buildkit`) and the backends share it without importing each other.

An engine's API version, its version string, its own addresses (:func:`~cairn.sandbox.docker.
gateway.engine_addresses`) and what BuildKit builds on it (:func:`~cairn.sandbox.docker.buildkit.
buildkit_support`) cost a round trip each to learn. They are kept in an :class:`EngineFacts` per
engine (``DOCKER_HOST``) in the job's :class:`~cairn.sandbox.caches.SandboxCaches` (memo
``"docker.engine"``), so a job asks once and the next job asks again: an engine restarted,
upgraded or replaced between two jobs of one process (the Python API, a Ray worker) is probed
anew, never described by what an earlier job saw (issue #29). A caller outside a job (a
backend classmethod such as ``engine_version``, a bench) passes a fresh :class:`SandboxCaches` of its
own. No module-level state.

The API version and the version come without a round trip of their own when ``cairn run``'s
early ping answered them (:func:`cairn._util.engine_ping.early_facts`: the ping's headers, at
most 10 s old, for the engine named now, none since an engine was lost): ``/version`` costs the
engine ~8 ms idle, and a trivial run asked it five times (#31).
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import docker
import docker.errors

from cairn._util.engine_ping import early_facts
from cairn.errors import SandboxLostError
from cairn.sandbox.caches import SandboxCaches

if TYPE_CHECKING:
    from cairn.sandbox.docker.buildkit import BuildKitSupport


@dataclass
class EngineFacts:
    """What one job learned about one Docker engine (``None``: not asked yet).

    Attributes:
        host: the engine's ``DOCKER_HOST`` (``""``: the SDK's default socket).
        api_version: the API version the first client detected (later clients skip the
            round trip that detects it).
        version: the engine's version string (``20.10.24+dfsg1``).
        addresses: the engine host's own addresses a container may reach
            (:func:`cairn.sandbox.docker.gateway.engine_addresses`).
        buildkit: what BuildKit builds here (:func:`cairn.sandbox.docker.buildkit.buildkit_support`).
    """

    host: str
    api_version: str | None = None
    version: str | None = None
    addresses: list[str] | None = None
    buildkit: BuildKitSupport | None = None


@dataclass
class EngineMemo:
    """A job's :class:`EngineFacts` by ``DOCKER_HOST`` (memo ``"docker.engine"`` of its
    :class:`~cairn.sandbox.caches.SandboxCaches`)."""

    by_host: dict[str, EngineFacts] = field(default_factory=dict)
    mu: threading.Lock = field(default_factory=threading.Lock, repr=False)


def engine_host() -> str:
    """The engine the SDK's clients talk to: ``DOCKER_HOST``, ``""`` for its default socket."""
    return os.environ.get("DOCKER_HOST", "")


def engine_facts(caches: SandboxCaches, host: str | None = None) -> EngineFacts:
    """The job's facts about one engine, made empty on first use.

    Args:
        caches: the job's memos (:attr:`cairn.sandbox.base.SandboxSpec.caches`), or a fresh
            :class:`SandboxCaches` of a caller outside a job.
        host: the engine's ``DOCKER_HOST``; ``None``: the one in the environment now.

    Returns:
        The same object for every call with these ``caches`` and ``host``.
    """
    memo = caches.memo("docker.engine", EngineMemo)
    key = engine_host() if host is None else host
    with memo.mu:
        facts = memo.by_host.get(key)
        if facts is None:
            facts = memo.by_host[key] = EngineFacts(key)
        return facts


def make_client(caches: SandboxCaches, timeout: int = 300) -> docker.DockerClient:
    """A Docker SDK client from the environment (``DOCKER_HOST`` …), its API version detected
    once per job (``caches``' :class:`EngineFacts`; later clients skip that round trip), or
    taken with the version from the early ping's answer when it is fresh (no round trip).

    Args:
        caches: the job's memos, or a fresh :class:`SandboxCaches` outside a job.
        timeout: the client's per-request timeout, seconds.

    Raises:
        SandboxLostError: no engine answers.
    """
    facts = engine_facts(caches)
    if facts.api_version is None:  # what the early ping's answer said, if it is fresh
        facts.api_version, version = early_facts()
        facts.version = facts.version or version
    try:
        client = docker.DockerClient.from_env(
            version=facts.api_version or "auto", timeout=timeout, max_pool_size=64
        )
    except docker.errors.DockerException as exc:
        raise SandboxLostError(f"Docker engine not reachable: {exc}") from exc
    facts.api_version = client.api.api_version
    return client


def engine_version(client: docker.DockerClient, caches: SandboxCaches) -> str | None:
    """The engine's version string (``20.10.24+dfsg1``), asked once per job.

    Args:
        client: a client of :func:`make_client`.
        caches: the memos ``client`` was made with.

    Returns:
        The version, or ``None`` when the engine did not say (asked again next time).
    """
    facts = engine_facts(caches)
    if facts.version is None:
        with contextlib.suppress(Exception):
            facts.version = str(client.api.version().get("Version"))
    return facts.version


__all__ = ["EngineFacts", "EngineMemo", "engine_facts", "engine_host", "engine_version", "make_client"]
