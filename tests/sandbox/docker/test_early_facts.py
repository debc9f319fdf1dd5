"""The early ping's answer carries the engine's API version and version (#31): the job's first
Docker clients take them instead of asking ``/version`` (~8 ms of the engine's time each, five
times in a trivial run), while the answer is fresh, for the engine it came from, and not once
an engine was lost.

The engine is a stand-in on a Unix socket of the test's own that answers ``/_ping`` the way
dockerd does (``Api-Version``, ``Server: Docker/<version> (linux)``) and ``/version``, and counts
what it was asked.
"""

from __future__ import annotations

import json
import socketserver
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

import cairn._util.engine_ping as engine_ping
from cairn.sandbox.caches import SandboxCaches
from cairn.sandbox.docker.client import engine_version, make_client


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


@pytest.fixture
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """A stand-in docker 20.10 (API 1.41) at ``DOCKER_HOST``; yields the paths it was asked."""
    asked: Counter[str] = Counter()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            path = self.path.split("?")[0]
            asked[path] += 1
            if path == "/_ping":
                body, ctype = b"OK", "text/plain; charset=utf-8"
            elif path.endswith("/version"):
                body = json.dumps({"Version": "20.10.24+dfsg1", "ApiVersion": "1.41"}).encode()
                ctype = "application/json"
            else:
                body, ctype = b"{}", "application/json"
            self.send_response(200)
            self.send_header("Api-Version", "1.41")
            self.send_header("Server", "Docker/20.10.24+dfsg1 (linux)")
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet
            pass

    sock = tmp_path / "engine.sock"
    server = _UnixHTTPServer(str(sock), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    monkeypatch.setenv("DOCKER_HOST", f"unix://{sock}")
    monkeypatch.delenv("DOCKER_TLS_VERIFY", raising=False)
    monkeypatch.setattr(engine_ping, "_early", {})
    monkeypatch.setattr(engine_ping, "_facts", {})
    try:
        yield asked
    finally:
        server.shutdown()
        server.server_close()


def _early_ping() -> None:
    engine_ping.start_early()
    assert engine_ping.take_early(5.0) is True


def _client_facts(caches: SandboxCaches) -> tuple[str, str | None]:
    client = make_client(caches, timeout=10)
    try:
        return client.api.api_version, engine_version(client, caches)
    finally:
        client.close()


def test_the_ping_headers_say_the_api_version_and_the_version() -> None:
    headers = {"api-version": "1.41", "server": "Docker/20.10.24+dfsg1 (linux)"}
    assert engine_ping.facts_from_headers(headers) == ("1.41", "20.10.24+dfsg1")
    # another engine's Server header (or none) says no version: /version is asked then
    assert engine_ping.facts_from_headers({"api-version": "1.41", "server": "Libpod/4.9 (linux)"}) == (
        "1.41",
        None,
    )
    assert engine_ping.facts_from_headers({}) == (None, None)


def test_clients_after_the_early_ping_ask_no_version(engine: Counter[str]) -> None:
    _early_ping()
    assert _client_facts(SandboxCaches()) == ("1.41", "20.10.24+dfsg1")
    assert _client_facts(SandboxCaches()) == ("1.41", "20.10.24+dfsg1")  # a second job's, too
    assert engine == Counter({"/_ping": 1})


def test_without_an_early_ping_the_client_asks_the_engine(engine: Counter[str]) -> None:
    assert _client_facts(SandboxCaches()) == ("1.41", "20.10.24+dfsg1")
    assert engine == Counter({"/version": 1, "/v1.41/version": 1})


def test_a_lost_engine_drops_the_early_facts(engine: Counter[str]) -> None:
    _early_ping()
    caches = SandboxCaches()
    _client_facts(caches)
    caches.engine_lost()  # the engine that answers next may be another: it is asked
    assert engine_ping.early_facts() == (None, None)
    assert _client_facts(caches) == ("1.41", "20.10.24+dfsg1")
    assert engine["/version"] == 1 and engine["/v1.41/version"] == 1


def test_stale_or_other_engine_facts_are_not_taken(
    engine: Counter[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _early_ping()
    assert engine_ping.early_facts() == ("1.41", "20.10.24+dfsg1")
    monkeypatch.setitem(engine_ping._facts, "at", float(engine_ping._facts["at"]) - 11.0)  # type: ignore[arg-type]
    assert engine_ping.early_facts() == (None, None)  # older than EARLY_MAX_AGE_SEC
    _early_ping()
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'another.sock'}")
    assert engine_ping.early_facts() == (None, None)  # not the engine named now
