"""The serving loop the scripted model servers share (fake_openai.py, fake_models.py): a
:class:`http.server.ThreadingHTTPServer` on an ephemeral port, served from a daemon thread,
usable as a context manager."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self


class BackgroundServer:
    """A threaded HTTP server bound to ``(host, 0)`` and served in the background.

    Args:
        host: the address to bind.
        handler: the request handler class.
        thread_name: the name of the serving thread (seen in thread dumps).
    """

    def __init__(
        self,
        host: str,
        handler: type[BaseHTTPRequestHandler],
        thread_name: str,
    ) -> None:
        self._server = ThreadingHTTPServer((host, 0), handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None
        self._thread_name = thread_name

    def start(self) -> Self:
        """Serve in a background thread; returns ``self``."""
        self._thread = threading.Thread(
            target=self._server.serve_forever, daemon=True, name=self._thread_name
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
