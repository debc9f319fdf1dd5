"""The egress proxy (cairn.sandbox.network.proxy) run as the gateway runs it, on loopback:
HTTP forwarding and CONNECT by name, refusals, the JSON record, and policy switches that cut
open tunnels. Upstream is an HTTP server this test starts on 127.0.0.1."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import cairn.sandbox.network.proxy as proxy_mod

PROXY = Path(proxy_mod.__file__)


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        body = f"hello {self.headers.get('Host')} {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def setup(tmp_path):
    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    port = _free_port()
    state = tmp_path / "state.json"
    initial = {"generation": 0, "phase": "agent",
               "policy": {"mode": "allowlist", "allowed_hosts": ["up.test", "*.wild.test"]},
               "hosts": {"up.test": "127.0.0.1", "a.wild.test": "127.0.0.1",
                         "other.test": "127.0.0.1"}}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-u", str(PROXY), "serve", str(state), str(port),
                             json.dumps(initial)], stdout=subprocess.PIPE, env=env, text=True)
    assert proc.stdout is not None
    assert json.loads(proc.stdout.readline())["event"] == "ready"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler(
        {"http": f"http://127.0.0.1:{port}", "https": f"http://127.0.0.1:{port}"}))
    yield {"port": port, "up": upstream.server_address[1], "state": state, "proc": proc,
           "open": opener.open, "env": env}
    proc.kill()
    proc.wait(10)
    upstream.shutdown()


def _records(proc, n: int) -> list[dict]:
    out = []
    while len(out) < n:
        line = proc.stdout.readline()
        assert line, "proxy ended"
        item = json.loads(line)
        if "verdict" in item:
            out.append(item)
    return out


def _connect(port: int, target: str) -> tuple[socket.socket, bytes]:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1)
        if not chunk:
            break
        head += chunk
    return s, head


def test_http_by_name_allowed_and_denied(setup):
    # The proxy records a connection when it ends, on that connection's thread, so two
    # connections' records may come in either order: each record is read before the next
    # request goes out (the CI run of b3c8331 saw other.test's and wild.test's swap).
    up = setup["up"]
    body = setup["open"](f"http://up.test:{up}/x?y=1", timeout=10).read().decode()
    assert body == f"hello up.test:{up} /x?y=1"
    recs = _records(setup["proc"], 1)
    assert setup["open"](f"http://a.wild.test:{up}/", timeout=10).read().startswith(b"hello")
    recs += _records(setup["proc"], 1)
    for url in (f"http://other.test:{up}/", f"http://wild.test:{up}/",
                f"http://127.0.0.1:{up}/"):
        with pytest.raises(urllib.error.HTTPError) as err:
            setup["open"](url, timeout=10)
        assert err.value.code == 403
        recs += _records(setup["proc"], 1)
    assert [(r["host"], r["verdict"]) for r in recs] == [
        ("up.test", "allowed"), ("a.wild.test", "allowed"), ("other.test", "denied"),
        ("wild.test", "denied"), ("127.0.0.1", "denied")]
    assert recs[0]["phase"] == "agent" and recs[0]["port"] == up and recs[0]["bytes_in"] > 0
    assert recs[2]["reason"] == "not allowed (allowlist)"


def test_connect_tunnel_and_refusals(setup):
    # Each connection's record is read before the next connection opens: the proxy writes a
    # record when its connection ends, so two connections' records may come in either order.
    port, up = setup["port"], setup["up"]
    s, head = _connect(port, f"up.test:{up}")
    assert head.startswith(b"HTTP/1.1 200")
    s.sendall(b"GET /t HTTP/1.0\r\nHost: up.test\r\n\r\n")
    data = b""
    while chunk := s.recv(4096):
        data += chunk
    assert data.endswith(b"hello up.test /t")
    s.close()
    recs = _records(setup["proc"], 1)
    s, head = _connect(port, f"other.test:{up}")
    assert head.startswith(b"HTTP/1.1 403")
    s.close()
    recs += _records(setup["proc"], 1)
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    raw.sendall(b"GET /origin-form HTTP/1.1\r\nHost: up.test\r\n\r\n")
    assert raw.recv(100).startswith(b"HTTP/1.1 400")
    raw.close()
    recs += _records(setup["proc"], 1)
    assert [(r["method"], r["verdict"]) for r in recs] == [
        ("CONNECT", "allowed"), ("CONNECT", "denied"), ("GET", "denied")]
    assert recs[0]["bytes_out"] > 0 and recs[0]["bytes_in"] > 0
    assert recs[2]["reason"] == "not a proxy request"


def test_switch_applies_at_once_and_cuts_open_tunnels(setup):
    port, up = setup["port"], setup["up"]
    s, head = _connect(port, f"up.test:{up}")
    assert head.startswith(b"HTTP/1.1 200")
    new = {"generation": 1, "phase": "verifier", "policy": {"mode": "no-network"},
           "hosts": {"up.test": "127.0.0.1"}}
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, str(PROXY), "set-state", str(setup["state"]),
                        json.dumps(new)], env=setup["env"], capture_output=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - t0 < 5
    s.settimeout(10)
    assert s.recv(100) == b""  # the agent phase's tunnel is gone
    s.close()
    recs = _records(setup["proc"], 1)  # before the next request: records come as threads end
    with pytest.raises(urllib.error.HTTPError) as err:
        setup["open"](f"http://up.test:{up}/", timeout=10)
    assert err.value.code == 403
    recs += _records(setup["proc"], 1)
    assert (recs[0]["phase"], recs[0]["verdict"]) == ("agent", "allowed")
    assert (recs[1]["phase"], recs[1]["verdict"]) == ("verifier", "denied")


def test_hostile_host_names_stay_data(setup):
    port = setup["port"]
    s, head = _connect(port, "\x1b[31mevil\u202e.test:443")
    assert head.startswith(b"HTTP/1.1 403")
    s.close()
    rec = _records(setup["proc"], 1)[0]
    assert rec["verdict"] == "denied" and "evil" in rec["host"]
