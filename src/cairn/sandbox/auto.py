"""``-e auto`` (design §3.3): docker when a Docker engine answers within 2 s, else local.

The chosen backend is printed on stderr, with a warning when it is local. The Docker engine is
found the way the Docker SDK finds it (``DOCKER_HOST``, ``DOCKER_TLS_VERIFY``,
``DOCKER_CERT_PATH``, else the default socket), so pointing ``DOCKER_HOST`` at a closed socket
selects local.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import TextIO

from cairn._util.engine_ping import ping_unix, start_early, take_early, unix_socket_path

AUTO = "auto"
PING_TIMEOUT_SEC = 2.0
"""How long a Docker engine has to answer a ping before ``auto`` picks local, seconds."""


def _ping(timeout_sec: float, result: list[bool]) -> None:
    try:
        path = unix_socket_path()
        if path is not None:
            result.append(ping_unix(path, timeout_sec))
            return
        import docker

        client = docker.from_env(timeout=max(1, int(timeout_sec + 0.999)))
        try:
            result.append(bool(client.ping()))
        finally:
            client.close()
    except Exception:  # noqa: BLE001 - any failure means "no engine here"
        result.append(False)


def start_ping(timeout_sec: float = 5.0) -> None:
    """Start pinging the Docker engine now (:func:`cairn._util.engine_ping.start_early`), so
    that the answer the backend check needs later is ready by then."""
    start_early(timeout_sec)


def docker_answers(timeout_sec: float = PING_TIMEOUT_SEC, *, early: bool = False) -> bool:
    """Whether a Docker engine answers a ping within ``timeout_sec`` seconds.

    The ping runs in a daemon thread bounded by the wall-clock timeout, so a daemon that
    accepts the connection but never replies cannot hold the caller longer. Over a Unix
    socket the ping uses the standard library (:mod:`cairn._util.engine_ping`); other
    ``DOCKER_HOST`` forms go through the Docker SDK.

    Args:
        timeout_sec: how long the engine has to answer, seconds.
        early: take the answer of the ping :func:`start_ping` started for the same engine
            within :data:`~cairn._util.engine_ping.EARLY_MAX_AGE_SEC` instead of asking again.
            Used once: the backend check before a job starts; a later caller (the wait for an
            engine that went away) always asks anew.
    """
    if early:
        answer = take_early(timeout_sec)
        if answer is not None:
            return answer
    result: list[bool] = []
    t = threading.Thread(target=_ping, args=(timeout_sec, result), name="cairn-docker-ping", daemon=True)
    t.start()
    t.join(timeout_sec)
    return bool(result and result[0])


def resolve_auto(name: str, *, stream: TextIO | None = None, timeout_sec: float = PING_TIMEOUT_SEC) -> str:
    """Resolve ``auto`` to ``docker`` or ``local`` by pinging the engine (no other checks;
    :func:`cairn.sandbox.resolve_backend` is the one entry point that also validates names).

    Args:
        name: ``docker``, ``local`` (returned as is) or ``auto``.
        stream: where the choice is printed (default stderr).
        timeout_sec: how long the Docker engine has to answer, seconds.

    Returns:
        ``docker`` when a Docker engine answered, else ``local``; any other ``name`` unchanged.
    """
    if name != AUTO:
        return name
    out = stream if stream is not None else sys.stderr
    if docker_answers(timeout_sec, early=True):
        print("cairn: -e auto: using the docker backend (a Docker engine answered)", file=out)
        return "docker"
    where = os.environ.get("DOCKER_HOST") or "the default Docker socket"
    print(
        f"cairn: warning: no Docker engine answered at {where} within {timeout_sec:g} s; "
        "-e auto: using the local backend (namespaces + overlayfs on this host, for trusted "
        "agents; see docs/local-backend.md)",
        file=out,
    )
    return "local"
