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
import time
from typing import TextIO

AUTO = "auto"
PING_TIMEOUT_SEC = 2.0
"""How long a Docker engine has to answer a ping before ``auto`` picks local, seconds."""


_early: dict[str, object] = {}
"""The engine ping started early by :func:`start_ping`: ``thread``, ``result`` (list), ``at``."""

EARLY_PING_MAX_AGE_SEC = 10.0
"""How old an early ping's answer may be for :func:`docker_answers` to use it, seconds."""


def _unix_socket_path() -> str | None:
    """The engine's Unix socket path when ``DOCKER_HOST`` names one (or is unset: the default
    socket) and no TLS is asked for; ``None`` otherwise (the SDK then pings)."""
    host = os.environ.get("DOCKER_HOST", "")
    if os.environ.get("DOCKER_TLS_VERIFY"):
        return None
    if not host:
        return "/var/run/docker.sock"
    if host.startswith("unix://"):
        return host[len("unix://"):] or None
    return None


def _ping_unix(path: str, timeout_sec: float) -> bool:
    """``GET /_ping`` over the engine's Unix socket with the standard library (the Docker SDK
    costs ~0.1 s of imports, and this is the first thing ``cairn run`` asks the engine).

    Returns:
        Whether the engine answered ``200 OK``.
    """
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_sec)
        sock.connect(path)
        sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
            if len(data) > 65536:
                break
    head, _, body = data.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].split()
    return len(status) >= 2 and status[1] == b"200" and body.strip() == b"OK"


def _ping(timeout_sec: float, result: list[bool]) -> None:
    try:
        path = _unix_socket_path()
        if path is not None:
            result.append(_ping_unix(path, timeout_sec))
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
    """Start pinging the Docker engine now, in a daemon thread, so that the answer
    :func:`docker_answers` needs later is ready by then (``cairn run`` calls it before it
    validates its options: the ping's round trip overlaps that work). Does nothing while a
    ping of the same engine (``DOCKER_HOST``, ``DOCKER_TLS_VERIFY``) is fresh."""
    if _fresh_early():
        return
    result: list[bool] = []
    t = threading.Thread(target=_ping, args=(timeout_sec, result), name="cairn-docker-ping",
                         daemon=True)
    _early.update(thread=t, result=result, at=time.monotonic(), engine=_engine_key())
    t.start()


def _engine_key() -> tuple[str, str]:
    return os.environ.get("DOCKER_HOST", ""), os.environ.get("DOCKER_TLS_VERIFY", "")


def _fresh_early() -> bool:
    """Whether an early ping exists for the engine named now and is young enough to use."""
    return bool(_early) and _early["engine"] == _engine_key() and \
        time.monotonic() - float(_early["at"]) <= EARLY_PING_MAX_AGE_SEC  # type: ignore[arg-type]


def docker_answers(timeout_sec: float = PING_TIMEOUT_SEC, *, early: bool = False) -> bool:
    """Whether a Docker engine answers a ping within ``timeout_sec`` seconds.

    The ping runs in a daemon thread bounded by the wall-clock timeout, so a daemon that
    accepts the connection but never replies cannot hold the caller longer. Over a Unix socket
    the ping uses the standard library; other ``DOCKER_HOST`` forms go through the Docker SDK.

    Args:
        timeout_sec: how long the engine has to answer, seconds.
        early: take the answer of the ping :func:`start_ping` started for the same engine
            within :data:`EARLY_PING_MAX_AGE_SEC` (waited for until ``timeout_sec`` after it
            started) instead of asking again. Used once: the backend check before a job
            starts; a later caller (the wait for an engine that went away) always asks anew.
    """
    if early and _fresh_early():
        t: threading.Thread = _early["thread"]  # type: ignore[assignment]
        answer: list[bool] = _early["result"]  # type: ignore[assignment]
        t.join(max(0.0, float(_early["at"]) + timeout_sec - time.monotonic()))  # type: ignore[arg-type]
        _early.clear()
        return bool(answer and answer[0])  # no answer within timeout_sec: none
    result: list[bool] = []
    t = threading.Thread(target=_ping, args=(timeout_sec, result), name="cairn-docker-ping",
                         daemon=True)
    t.start()
    t.join(timeout_sec)
    return bool(result and result[0])


def resolve_auto(name: str, *, stream: TextIO | None = None,
                    timeout_sec: float = PING_TIMEOUT_SEC) -> str:
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
    print(f"cairn: warning: no Docker engine answered at {where} within {timeout_sec:g} s; "
          "-e auto: using the local backend (namespaces + overlayfs on this host, for trusted "
          "agents; see docs/local-backend.md)", file=out)
    return "local"
