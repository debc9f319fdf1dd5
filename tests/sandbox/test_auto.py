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


def test_closed_socket_selects_local_with_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
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


def _unix_server(path: Path, reply: bytes | None) -> tuple[socket.socket, threading.Thread]:
    """A Unix-socket listener of the test's own: answers each connection with ``reply`` after
    reading the request head, or holds it silently when ``reply`` is None."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(4)
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            data = b""
            while b"\r\n\r\n" not in data and (chunk := c.recv(4096)):
                data += chunk
            held.append(c)
            if reply is not None:
                c.sendall(reply)
                c.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return srv, t


def test_unix_socket_ping_needs_a_200_ok(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The standard-library ping over a Unix socket: ``200`` with body ``OK`` is an engine; a
    500 or a silent listener is not (and the silent one is given up after the timeout)."""
    from cairn._util.engine_ping import ping_unix as _ping_unix

    cases = {
        "ok": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOK",
        "err": b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 2\r\n\r\nOK",
        "silent": None,
    }
    for name, reply in cases.items():
        srv, _ = _unix_server(tmp_path / f"{name}.sock", reply)
        try:
            t0 = time.monotonic()
            if reply is None:
                with pytest.raises(OSError, match="timed out"):
                    _ping_unix(str(tmp_path / f"{name}.sock"), 0.5)
                assert time.monotonic() - t0 < 2.0
            else:
                assert _ping_unix(str(tmp_path / f"{name}.sock"), 2.0) is (name == "ok")
        finally:
            srv.close()
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/err.sock")
    assert docker_answers(1.0) is False


@pytest.mark.docker
def test_unix_socket_ping_answers_on_the_real_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    from cairn._util.engine_ping import ping_unix as _ping_unix
    from cairn._util.engine_ping import unix_socket_path as _unix_socket_path

    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.delenv("DOCKER_TLS_VERIFY", raising=False)
    path = _unix_socket_path()
    assert path == "/var/run/docker.sock"
    if not Path(path).exists():
        pytest.skip("no Docker engine socket here")
    assert _ping_unix(path, 5.0) is True


def test_an_early_ping_is_reused_within_its_age(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``cairn run`` starts the ping first; the backend check later takes its answer instead of
    asking again (one connection), and ignores it once it is too old."""
    import cairn._util.engine_ping as engine_ping
    import cairn.sandbox.auto as auto

    path = tmp_path / "ok.sock"
    served: list[int] = []
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(4)

    def serve() -> None:
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            served.append(1)
            data = b""
            while b"\r\n\r\n" not in data and (chunk := c.recv(4096)):
                data += chunk
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOK")
            c.close()

    threading.Thread(target=serve, daemon=True).start()
    monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
    monkeypatch.setattr(engine_ping, "_early", {})
    try:
        auto.start_ping()
        auto.start_ping()  # idempotent
        assert auto.docker_answers(2.0, early=True) is True
        assert served == [1]
        assert auto.docker_answers(2.0, early=True) is True  # used once: asked again
        assert served == [1, 1]
        auto.start_ping()
        engine_ping._early["thread"].join(5)  # the early ping has been answered
        assert len(served) == 3
        assert auto.docker_answers(2.0) is True  # a caller that does not ask for it: anew
        assert len(served) == 4
        engine_ping._early["at"] = time.monotonic() - engine_ping.EARLY_MAX_AGE_SEC - 1
        assert auto.docker_answers(2.0, early=True) is True  # too old: asked again
        assert len(served) == 5
    finally:
        srv.close()


def test_an_early_ping_of_another_engine_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An answer from the engine DOCKER_HOST named before does not stand for the one it names
    now (a closed socket is no engine, whatever an earlier ping said)."""
    import cairn._util.engine_ping as engine_ping
    import cairn.sandbox.auto as auto

    srv, _ = _unix_server(tmp_path / "ok.sock", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOK")
    monkeypatch.setattr(engine_ping, "_early", {})
    try:
        monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/ok.sock")
        auto.start_ping()
        monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/closed.sock")
        assert auto.docker_answers(1.0, early=True) is False
    finally:
        srv.close()
