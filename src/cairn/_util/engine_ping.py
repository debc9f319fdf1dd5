"""The Docker engine ping over its Unix socket, with the standard library only (#13).

``cairn run`` asks the engine first whether it answers (design §3.3); done here, that question
waits for no import — neither the Docker SDK (~0.1 s with requests) nor ``cairn.sandbox`` —
and :func:`start_early` can send it from a daemon thread before the options are parsed.
:mod:`cairn.sandbox.auto` takes the answer (:func:`take_early`), or pings itself, through the
Docker SDK when ``DOCKER_HOST`` is not a Unix socket.

The ping's answer also carries the engine's API version (``Api-Version``) and version
(``Server: Docker/<version> (<os>)``): the facts the Docker SDK otherwise asks ``/version`` for,
a round trip that costs the engine ~8 ms idle (it asks containerd, runc and docker-init for
theirs) against the ping's ~1 ms. :func:`early_facts` gives them to the job's first clients
(#31).
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

_facts: dict[str, object] = {}
"""What the early ping's answer said of the engine: ``api_version``, ``version``, ``at``,
``engine`` (kept after :func:`take_early`, until :func:`forget_early_facts`)."""


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
    return ping_unix_headers(path, timeout_sec) is not None


def ping_unix_headers(path: str, timeout_sec: float) -> dict[str, str] | None:
    """``GET /_ping`` over the engine's Unix socket, with the answer's headers.

    Args:
        path: the socket's path.
        timeout_sec: bound on connecting and on each read, seconds.

    Returns:
        The response headers (names lower-cased) when the engine answered ``200`` with the
        body ``OK``, else ``None``.

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
    first, *lines = head.decode("latin-1").split("\r\n")
    status = first.split()
    if not (len(status) >= 2 and status[1] == "200" and body.strip() == b"OK"):
        return None
    headers: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return headers


def facts_from_headers(headers: dict[str, str]) -> tuple[str | None, str | None]:
    """(API version, engine version) from a Docker engine's ``/_ping`` headers: ``Api-Version``
    and the ``Server: Docker/<version> (<os>)`` every answer of the engine carries (the same
    ``Version`` as ``/version``'s); ``None`` for what the headers do not say (another engine's
    ``Server``, a proxy without them)."""
    api = headers.get("api-version") or None
    server = headers.get("server", "")
    version = None
    if server.startswith("Docker/"):
        version = server[len("Docker/") :].split(" ", 1)[0] or None
    return api, version


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

    at, engine = time.monotonic(), _engine_key()

    def run() -> None:
        try:
            headers = ping_unix_headers(path, timeout_sec)
        except OSError:
            headers = None
        if headers is not None:
            api, version = facts_from_headers(headers)
            _facts.clear()
            _facts.update(api_version=api, version=version, at=at, engine=engine)
        result.append(headers is not None)

    _facts.clear()
    t = threading.Thread(target=run, name="cairn-docker-ping", daemon=True)
    _early.update(thread=t, result=result, at=at, engine=engine)
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


def early_facts() -> tuple[str | None, str | None]:
    """(API version, engine version) the early ping's answer carried, for the engine named
    now, while the answer is at most :data:`EARLY_MAX_AGE_SEC` old and no engine loss was
    noted since (:func:`forget_early_facts`); ``(None, None)`` otherwise (the caller asks the
    engine). Never waits for the ping."""
    facts = dict(_facts)
    if (
        not facts
        or facts["engine"] != _engine_key()
        or time.monotonic() - float(facts["at"]) > EARLY_MAX_AGE_SEC  # type: ignore[arg-type]
    ):
        return None, None
    return facts["api_version"], facts["version"]  # type: ignore[return-value]


def forget_early_facts() -> None:
    """Drop what the early ping said of the engine (the engine was lost: the one that answers
    next may be another)."""
    _facts.clear()
