"""Test hosts for network-policy tests: containers this machine starts, serving HTTP (port 80)
and HTTPS (port 443, a self-signed certificate made here with openssl), answering every
request with ``host=<name>`` so a test sees which host it reached, and printing one line per
request (``req PEER METHOD PATH``, :func:`requests_seen`). Nothing leaves the machine.

Use :func:`host_containers` as a context manager; it removes the containers (and the certificate
folder) however the test ends.
"""

from __future__ import annotations

import contextlib
import io
import subprocess
import tarfile
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

IMAGE = "python:3.12-slim"
LABEL = "cairn.test-host"

SERVER = r"""
import http.server, ssl, sys, threading
name = sys.argv[1]
class H(http.server.BaseHTTPRequestHandler):
    def _answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        data = f"host={name} path={self.path} body={body.decode(errors='replace')}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    do_GET = do_POST = _answer
    def log_message(self, *a):
        what = f"{getattr(self, 'command', None)} {getattr(self, 'path', None)}"
        print(f"req {self.client_address[0]} {what}", flush=True)
http80 = http.server.ThreadingHTTPServer(("0.0.0.0", 80), H)
https = http.server.ThreadingHTTPServer(("0.0.0.0", 443), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain("/srv/cert.pem", "/srv/key.pem")
https.socket = ctx.wrap_socket(https.socket, server_side=True)
threading.Thread(target=https.serve_forever, daemon=True).start()
print("serving", flush=True)
http80.serve_forever()
"""


def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class HostAddrs(dict):
    """name → IPv4 address, plus :attr:`ids`: name → container id (to read its output)."""

    ids: dict[str, str]


@contextlib.contextmanager
def host_containers(*names: str, network: str = "bridge", server: str = SERVER) -> Iterator[HostAddrs]:
    """Start one server container per name on ``network``.

    ``server`` is the script each runs as ``python3 -u /srv/server.py NAME`` (default
    :data:`SERVER`); it must print ``serving`` once it listens.

    Yields:
        name → IPv4 address of its container on ``network`` (:class:`HostAddrs`).
    """
    import docker

    client = docker.from_env()
    api = client.api
    ids: list[str] = []
    with tempfile.TemporaryDirectory(prefix="cairn-nethost-") as tmp:
        key, cert = Path(tmp, "key.pem"), Path(tmp, "cert.pem")
        subprocess.run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-subj",
                "/CN=cairn-test",
                "-keyout",
                str(key),
                "-out",
                str(cert),
            ],
            check=True,
            capture_output=True,
        )
        payload = _tar(
            {
                "srv/key.pem": key.read_bytes(),
                "srv/cert.pem": cert.read_bytes(),
                "srv/server.py": server.encode(),
            }
        )
        try:
            for name in names:
                c = api.create_container(
                    IMAGE,
                    ["python3", "-u", "/srv/server.py", name],
                    name=f"cairn-testhost-{name.replace('.', '-')}-{uuid.uuid4().hex[:6]}",
                    labels={LABEL: "1"},
                    detach=True,
                    host_config=api.create_host_config(network_mode=network),
                )
                ids.append(c["Id"])
                api.put_archive(c["Id"], "/", payload)
                api.start(c["Id"])
            addrs = HostAddrs()
            addrs.ids = dict(zip(names, ids, strict=True))
            for name, cid in zip(names, ids, strict=True):
                for _ in range(300):
                    if b"serving" in api.logs(cid):
                        break
                    import time

                    time.sleep(0.05)
                info = api.inspect_container(cid)
                addrs[name] = info["NetworkSettings"]["Networks"][network]["IPAddress"]
            yield addrs
        finally:
            for cid in ids:
                with contextlib.suppress(Exception):
                    api.remove_container(cid, force=True)
            client.close()


def requests_seen(addrs: HostAddrs, name: str) -> list[str]:
    """The ``req PEER METHOD PATH`` lines the :data:`SERVER` of host ``name`` printed so far."""
    import docker

    client = docker.from_env()
    try:
        out = client.api.logs(addrs.ids[name]).decode(errors="replace")
    finally:
        client.close()
    return [line for line in out.splitlines() if line.startswith("req ")]
