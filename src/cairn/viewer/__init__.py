"""``cairn view``: a web viewer over job folders, live while a job runs, and a static bundle.

Modules: :mod:`~cairn.viewer.data` (reads what :mod:`cairn.results.store` wrote: a cached light
index per job, one trial in full, safe file paths), :mod:`~cairn.viewer.pages` (page contexts),
:mod:`~cairn.viewer.render` (Jinja2, autoescape on; URL builders), :mod:`~cairn.viewer.app` (the
Starlette app), :mod:`~cairn.viewer.bundle` (the static site) and :func:`serve`.

Needs starlette, uvicorn and jinja2, part of cairn's base install (issue 27; ``[view]`` is
kept as an empty extra); the bundle needs
only jinja2. See docs/viewer.md.
"""

from __future__ import annotations

import gc
import ipaddress
import socket
import sys
from collections.abc import Callable
from pathlib import Path

LOOPBACK = "127.0.0.1"


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (``127.0.0.0/8``, ``::1``, ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind(host: str = LOOPBACK, port: int = 8321) -> socket.socket:
    """Open the listening socket (``port`` 0 picks a free one).

    Raises:
        OSError: the address is in use or cannot be bound.
        ValueError: ``port`` is outside 0-65535.
    """
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} is outside 0-65535")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def serve(
    root: Path, host: str = LOOPBACK, port: int = 8321, on_ready: Callable[[str], None] | None = None
) -> None:
    """Serve the viewer until interrupted.

    Binds ``127.0.0.1`` by default; any other address gets a warning on stderr, since the
    pages show everything the agents and verifiers wrote.

    Args:
        root: a jobs folder or one job folder.
        host: the address to bind.
        port: the TCP port (0: any free port).
        on_ready: called with the URL once the socket is bound (before serving).

    Raises:
        FileNotFoundError: ``root`` is not a folder.
        OSError: the socket cannot be bound.
        ValueError: ``port`` is outside 0-65535.
    """
    import uvicorn

    from cairn.viewer.app import create_app
    from cairn.viewer.data import TrialQuery

    app = create_app(root)
    if not is_loopback(host):
        print(
            f"cairn view: warning: listening on {host}, not loopback: anyone who can reach "
            "this address can read every log, trajectory and artifact of these jobs",
            file=sys.stderr,
            flush=True,
        )
    sock = bind(host, port)
    actual = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    index = app.state.library
    from cairn.viewer.render import warm_templates

    for d in index.job_dirs():  # warm the per-job index and summary so the first page is fast
        job = index.job(d.name)
        if job is not None:
            job.refresh()
            job.summary()
            job.facets()
            job.query(TrialQuery())  # the job page's default order, kept for its first request
    warm_templates()
    gc.collect()
    gc.freeze()  # the index built so far is long-lived: keep it out of later collections
    if on_ready is not None:
        on_ready(f"http://{shown}:{actual}/")
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    server.run(sockets=[sock])
