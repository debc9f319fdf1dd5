"""``-e auto`` (design §3.3): docker when an engine answers within 2 s, else local, printed."""

from __future__ import annotations

import io
import socket
import threading
import time
from pathlib import Path

import pytest

from cairn.sandbox.auto import docker_answers
from cairn.sandbox.auto import resolve_auto as resolve_backend


def test_explicit_backends_pass_through() -> None:
    out = io.StringIO()
    assert resolve_backend("docker", stream=out) == "docker"
    assert resolve_backend("local", stream=out) == "local"
    assert out.getvalue() == ""


def test_closed_socket_selects_local_with_a_warning(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/closed.sock")
    out = io.StringIO()
    t0 = time.monotonic()
    assert resolve_backend("auto", stream=out) == "local"
    assert time.monotonic() - t0 < 2.5
    msg = out.getvalue()
    assert "warning" in msg and "local backend" in msg and "closed.sock" in msg


def test_silent_daemon_is_given_up_after_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """A listener that accepts but never answers: local after ~timeout, not a hang."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{srv.getsockname()[1]}")
    try:
        t0 = time.monotonic()
        assert resolve_backend("auto", stream=io.StringIO(), timeout_sec=1.0) == "local"
        took = time.monotonic() - t0
        assert 0.9 < took < 3.0
    finally:
        stop.set()
        t.join()
        for c in held:
            c.close()
        srv.close()


@pytest.mark.docker
def test_running_engine_selects_docker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    if not docker_answers():
        pytest.skip("no Docker engine here")
    out = io.StringIO()
    assert resolve_backend("auto", stream=out) == "docker"
    assert "docker backend" in out.getvalue()
