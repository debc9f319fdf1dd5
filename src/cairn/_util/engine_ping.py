"""The Docker engine ping over its Unix socket, with the standard library only (#13).

``cairn run`` asks the engine first whether it answers (design §3.3); done here, that question
waits for no import — neither the Docker SDK (~0.1 s with requests) nor ``cairn.sandbox`` —
and :func:`start_early` can send it from a daemon thread before the options are parsed.
:mod:`cairn.sandbox.auto` takes the answer (:func:`take_early`), or pings itself, through the
Docker SDK when ``DOCKER_HOST`` is not a Unix socket.
"""

from __future__ import annotations

import os
import socket
import threading
import time

EARLY_MAX_AGE_SEC = 10.0
"""How old an early ping's answer may be for :func:`take_early` to give it, seconds."""

_early: dict[str, object] = {}
"""The early ping: ``thread``, ``result`` (a list that gets one bool), ``at``, ``engine``."""


def unix_socket_path() -> str | None:
    """The engine's Unix socket path when ``DOCKER_HOST`` names one (or is unset: the default
    socket) and no TLS is asked for; ``None`` otherwise."""
    host = os.environ.get("DOCKER_HOST", "")
    if os.environ.get("DOCKER_TLS_VERIFY"):
        return None
    if not host:
        return "/var/run/docker.sock"
    if host.startswith("unix://"):
        return host[len("unix://") :] or None
    return None


def ping_unix(path: str, timeout_sec: float) -> bool:
    """``GET /_ping`` over the engine's Unix socket.

    Args:
        path: the socket's path.
        timeout_sec: bound on connecting and on each read, seconds.

    Returns:
        Whether the engine answered ``200`` with the body ``OK``.

    Raises:
        OSError: no connection, or no answer within the timeout.
    """
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


def _engine_key() -> tuple[str, str]:
    return os.environ.get("DOCKER_HOST", ""), os.environ.get("DOCKER_TLS_VERIFY", "")


def _fresh() -> bool:
    return (
        bool(_early)
        and _early["engine"] == _engine_key()
        and time.monotonic() - float(_early["at"]) <= EARLY_MAX_AGE_SEC  # type: ignore[arg-type]
    )


def start_early(timeout_sec: float = 5.0) -> None:
    """Start pinging the engine now, in a daemon thread, when it is on a Unix socket (other
    engines are pinged later, through the SDK). Does nothing while a ping of the same engine
    (``DOCKER_HOST``, ``DOCKER_TLS_VERIFY``) is fresh."""
    path = unix_socket_path()
    if path is None or _fresh():
        return
    result: list[bool] = []

    def run() -> None:
        try:
            result.append(ping_unix(path, timeout_sec))
        except OSError:
            result.append(False)

    t = threading.Thread(target=run, name="cairn-docker-ping", daemon=True)
    _early.update(thread=t, result=result, at=time.monotonic(), engine=_engine_key())
    t.start()


def take_early(timeout_sec: float) -> bool | None:
    """The early ping's answer for the engine named now, used once; ``None`` when there is
    none fresh (the caller pings itself).

    Args:
        timeout_sec: how long after the early ping started an answer still counts, seconds
            (waited for until then).
    """
    if not _fresh():
        return None
    t: threading.Thread = _early["thread"]  # type: ignore[assignment]
    answer: list[bool] = _early["result"]  # type: ignore[assignment]
    t.join(max(0.0, float(_early["at"]) + timeout_sec - time.monotonic()))  # type: ignore[arg-type]
    _early.clear()
    return bool(answer and answer[0])  # no answer within timeout_sec: none
