"""An exec's first output frames survive the HTTP upgrade (cairn.sandbox.docker.exec_stream).

A scripted engine on loopback speaks the Docker API's ``POST /exec/{id}/start`` upgrade and
sends the ``101`` response and the first frames in one write, as a loaded engine does when the
command prints at once. docker-py reads the response headers through a buffered reader and
then hands out the raw socket (docker-py #425, #3332), so those frames sit in a buffer nobody
reads: the verifier fold's start line was lost that way, and a reward read as missing. cairn
reads through the response's own reader and gets every frame; the SDK's own call, beside it,
shows the loss it avoids.
"""

from __future__ import annotations

import socket
import struct
import threading

import docker

from cairn.sandbox.docker.exec_stream import ExecStream, exec_output

UPGRADE = (
    b"HTTP/1.1 101 UPGRADED\r\n"
    b"Content-Type: application/vnd.docker.raw-stream\r\n"
    b"Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n"
)


def _frame(stream: int, data: bytes) -> bytes:
    return struct.pack(">BxxxL", stream, len(data)) + data


class ScriptedEngine:
    """Answers every request on a loopback port with the upgrade and ``first`` in one
    ``sendall``, then ``rest`` in a second write, then closes."""

    def __init__(self, first: bytes, rest: bytes) -> None:
        self.first, self.rest = first, rest
        self.srv = socket.create_server(("127.0.0.1", 0))
        self.port = self.srv.getsockname()[1]
        self.paths: list[str] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.srv.accept()
            except OSError:
                return
            with conn:
                req = b""
                while b"\r\n\r\n" not in req:
                    req += conn.recv(65536)
                head, _, body = req.partition(b"\r\n\r\n")
                length = next(
                    (
                        int(h.split(b":")[1])
                        for h in head.split(b"\r\n")
                        if h.lower().startswith(b"content-length")
                    ),
                    0,
                )
                while len(body) < length:
                    body += conn.recv(65536)
                self.paths.append(head.split(b" ")[1].decode())
                conn.sendall(UPGRADE + self.first)
                conn.sendall(self.rest)

    def api(self) -> docker.APIClient:
        return docker.APIClient(base_url=f"tcp://127.0.0.1:{self.port}", version="1.41", timeout=10)

    def close(self) -> None:
        self.srv.close()


FIRST = _frame(1, b"TOKEN:start\n") + _frame(2, b"early err\n")
REST = _frame(1, b"TOKEN:out 0\n") + _frame(1, b"TOKEN:tar - - - 0\n")


def test_the_exec_stream_keeps_the_frames_that_came_with_the_upgrade():
    engine = ScriptedEngine(FIRST, REST)
    try:
        stream = ExecStream(engine.api(), "abc123", 1 << 20)
        stream.run()
        assert stream.stdout.data() == b"TOKEN:start\nTOKEN:out 0\nTOKEN:tar - - - 0\n"
        assert stream.stderr.data() == b"early err\n"
        out, err = exec_output(engine.api(), "abc123")
        assert (out, err) == (b"TOKEN:start\nTOKEN:out 0\nTOKEN:tar - - - 0\n", b"early err\n")
        assert engine.paths == ["/v1.41/exec/abc123/start"] * 2
    finally:
        engine.close()


def test_the_sdks_own_read_loses_them_which_is_what_cairn_avoids():
    engine = ScriptedEngine(FIRST, REST)
    try:
        out, err = engine.api().exec_start("abc123", demux=True)
        # the SDK's read skipped the frames its HTTP reader had buffered with the headers
        assert b"TOKEN:start\n" not in (out or b"") and b"early err\n" not in (err or b"")
    finally:
        engine.close()
