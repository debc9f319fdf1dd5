"""cairn's egress filtering proxy: the program the per-trial gateway container runs.

Standard library only; it runs as a script inside the gateway (``python3 proxy.py serve``) with
:mod:`cairn.netpolicy` copied next to it as ``netpolicy.py``. The sandbox reaches the outside
only through it (``HTTP_PROXY``/``HTTPS_PROXY``); a direct connection has no route.

What it does:

- ``CONNECT host:port`` (HTTPS and any TLS): the host is checked against the policy *by the name
  the client gave* (no TLS interception); allowed → a blind byte tunnel, else ``403``;
- absolute-form HTTP requests (``GET http://host/path``): checked the same way, forwarded with
  ``Connection: close`` (one request per upstream connection), the response piped back;
- names are resolved here, only for allowed hosts: first through the host map of the state
  file (``hosts``, what ``--add-host`` and the tests pass), else the gateway's resolver;
- anything else (no request line, an origin-form request, a bad port) is refused with ``400``.

Every connection attempt is one JSON line on stdout, written when it ends: ``time`` (ISO 8601
UTC, when it was made), ``generation`` (of the state it was made under), ``phase``,
``method``, ``host``, ``port``, ``verdict`` (``allowed`` /
``denied``), ``reason`` (for refusals and upstream failures), ``bytes_out`` (client →
upstream) and ``bytes_in`` (upstream → client). Host names are logged as the client sent them
(bounded to 255 characters), since they are agent output.

Policy switches: the state file holds ``{"generation", "phase", "policy", "hosts"}``. A
watcher thread polls it every 10 ms (and every new connection checks it first); a new
generation replaces the policy, closes every tunnel opened under an earlier generation (a
verifier never inherits an agent's openings) and writes the generation to
``<state>.applied``. The backend copies a new state file in and waits for that
acknowledgement; ``proxy.py set-state STATE JSON`` does the same from inside.
"""

from __future__ import annotations

import json
import os
import select
import socket
import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any

try:  # inside the gateway the policy module sits next to this file
    from netpolicy import NetworkPolicy, normalize_host
except ImportError:  # pragma: no cover - run from the cairn package (tests)
    from cairn.netpolicy import NetworkPolicy, normalize_host

LISTEN_PORT = 3128
MAX_HEAD_BYTES = 64 * 1024
CONNECT_TIMEOUT_SEC = 10.0
IDLE_TIMEOUT_SEC = 600.0
POLL_SEC = 0.01
_HOP_HEADERS = frozenset({"proxy-connection", "proxy-authorization", "connection", "keep-alive",
                          "te", "trailer", "upgrade"})


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class State:
    """The current policy, phase and host map, replaced whole by the watcher."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.generation = int(data.get("generation", 0))
        self.phase = str(data.get("phase", ""))
        self.policy = NetworkPolicy.from_json(data.get("policy") or {"mode": "no-network"})
        self.hosts = {normalize_host(k): str(v) for k, v in (data.get("hosts") or {}).items()}


class Proxy:
    """The proxy's shared state: the policy, the open tunnels, the log."""

    def __init__(self, state_path: str) -> None:
        self.state_path = state_path
        self.state = State(_read_json(state_path))
        self.lock = threading.Lock()
        self.out_lock = threading.Lock()
        self.reload_lock = threading.Lock()
        self.open: dict[int, tuple[int, list[socket.socket]]] = {}
        self._stamp = _stamp(state_path)

    # ---- the record ------------------------------------------------------------------------
    def record(self, entry: dict[str, Any]) -> None:
        """Write one JSON line on stdout (the backend reads the gateway's output)."""
        line = json.dumps(entry, ensure_ascii=True, separators=(",", ":"))
        with self.out_lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    # ---- policy switches ---------------------------------------------------------------------
    def watch(self) -> None:
        """Poll the state file every :data:`POLL_SEC` (the backend may also replace it
        without exec, by copying a file in)."""
        while True:
            time.sleep(POLL_SEC)
            self.reload()

    def reload(self) -> None:
        """Take a changed state file: a new generation replaces the policy and closes every
        tunnel opened under an earlier one; ``<state>.applied`` then names the generation.
        A file read half-written is ignored and read again on the next call."""
        with self.reload_lock:
            stamp = _stamp(self.state_path)
            if stamp == self._stamp:
                return
            try:
                new = State(_read_json(self.state_path))
            except (OSError, ValueError):
                return
            self._stamp = stamp
            with self.lock:
                old_gen = self.state.generation
                self.state = new
                stale = [socks for gen, socks in self.open.values() if gen != new.generation]
            if new.generation != old_gen:
                for socks in stale:
                    for sock in socks:
                        _close(sock)
            _write_atomic(self.state_path + ".applied", str(new.generation))

    # ---- one client connection ---------------------------------------------------------------
    def handle(self, client: socket.socket) -> None:
        """Serve one client connection to its end, then record it (one thread each)."""
        self.reload()  # a switch the backend finished is seen by every later connection
        with self.lock:
            state = self.state
        entry: dict[str, Any] = {"time": _now_iso(), "generation": state.generation,
                                 "phase": state.phase, "method": None,
                                 "host": None, "port": None, "verdict": "denied",
                                 "reason": None, "bytes_out": 0, "bytes_in": 0}
        upstream: socket.socket | None = None
        try:
            client.settimeout(30)
            head, rest = _read_head(client)
            if head is None:
                entry["reason"] = "no request"
                return
            method, target, version, headers = _parse_head(head)
            entry["method"] = method[:16]
            host, port, path = _target(method, target, headers)
            entry["host"], entry["port"] = (host[:255] if host else host), port
            if host is None or port is None:
                entry["reason"] = "not a proxy request"
                _reply(client, 400, "cairn gateway: send absolute-form or CONNECT requests")
                return
            if not state.policy.admits(host):
                entry["reason"] = f"not allowed ({state.policy.mode.value})"
                _reply(client, 403, f"cairn gateway: {host} is not allowed in this phase")
                return
            addr = state.hosts.get(normalize_host(host), normalize_host(host))
            try:
                upstream = socket.create_connection((addr, port), timeout=CONNECT_TIMEOUT_SEC)
            except OSError as exc:
                entry["verdict"] = "allowed"
                entry["reason"] = f"upstream unreachable: {exc.strerror or exc}"[:200]
                _reply(client, 502, f"cairn gateway: cannot reach {host}:{port}")
                return
            entry["verdict"] = "allowed"
            with self.lock:
                if self.state.generation != state.generation:  # switched while connecting
                    entry["verdict"], entry["reason"] = "denied", "phase ended"
                    _reply(client, 403, "cairn gateway: the phase ended")
                    return
                self.open[id(client)] = (state.generation, [client, upstream])
            if method == "CONNECT":
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                first = rest
            else:
                first = _origin_request(method, path, version, headers) + rest
            if first:
                upstream.sendall(first)
                entry["bytes_out"] += len(first)
            out, inn = _pipe(client, upstream)
            entry["bytes_out"] += out
            entry["bytes_in"] += inn
        except (OSError, ValueError) as exc:
            entry["reason"] = entry["reason"] or f"{type(exc).__name__}: {exc}"[:200]
        finally:
            with self.lock:
                self.open.pop(id(client), None)
            _close(client)
            if upstream is not None:
                _close(upstream)
            self.record(entry)


def _stamp(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _read_json(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict):
        raise ValueError("state is not an object")
    return data


def _write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}.{threading.get_ident()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass


def _read_head(sock: socket.socket) -> tuple[bytes | None, bytes]:
    buf = b""
    while b"\r\n\r\n" not in buf:
        if len(buf) > MAX_HEAD_BYTES:
            raise ValueError("request head too large")
        chunk = sock.recv(65536)
        if not chunk:
            return None, b""
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    return head, rest


def _parse_head(head: bytes) -> tuple[str, str, str, list[tuple[str, str]]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3:
        raise ValueError("bad request line")
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers.append((name.strip(), value.strip()))
    return parts[0].upper(), parts[1], parts[2], headers


def _split_host_port(text: str, default: int | None) -> tuple[str | None, int | None]:
    text = text.strip()
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return None, None
        host, rest = text[1:end], text[end + 1:]
        port_text = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    else:
        host, port_text = text, ""
    if not host:
        return None, None
    if not port_text:
        return host, default
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        return host, None
    return host, int(port_text)


def _target(method: str, target: str, headers: list[tuple[str, str]]
            ) -> tuple[str | None, int | None, str]:
    """(host, port, origin-form path) of a proxy request; host ``None`` when it is none."""
    if method == "CONNECT":
        host, port = _split_host_port(target, None)
        return host, port, ""
    lower = target.lower()
    if lower.startswith("http://"):
        rest = target[7:]
        authority, slash, path = rest.partition("/")
        authority = authority.rpartition("@")[2]
        host, port = _split_host_port(authority, 80)
        return host, port, "/" + path if slash else "/"
    return None, None, ""


def _origin_request(method: str, path: str, version: str, headers: list[tuple[str, str]]) -> bytes:
    out = [f"{method} {path} {version}"]
    out += [f"{k}: {v}" for k, v in headers if k.lower() not in _HOP_HEADERS]
    out.append("Connection: close")
    return ("\r\n".join(out) + "\r\n\r\n").encode("latin-1")


def _reply(sock: socket.socket, code: int, text: str) -> None:
    reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}[code]
    body = (text + "\n").encode()
    try:
        sock.sendall(f"HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain\r\n"
                     f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
    except OSError:
        pass


def _pipe(a: socket.socket, b: socket.socket) -> tuple[int, int]:
    """Copy bytes both ways until both sides are done; (a → b bytes, b → a bytes)."""
    a.settimeout(None)
    b.settimeout(None)
    counts = {a.fileno(): 0, b.fileno(): 0}
    peer = {a: b, b: a}
    live = [a, b]
    while live:
        ready, _, _ = select.select(live, [], [], IDLE_TIMEOUT_SEC)
        if not ready:
            break
        for s in ready:
            try:
                data = s.recv(65536)
            except OSError:
                data = b""
            if not data:
                live.remove(s)
                try:
                    peer[s].shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                if s is b:  # the upstream finished: nothing more can flow
                    live.clear()
                continue
            try:
                peer[s].sendall(data)
            except OSError:
                live.clear()
                break
            counts[s.fileno()] += len(data)
    return counts.get(a.fileno(), 0), counts.get(b.fileno(), 0)


def serve(state_path: str, port: int = LISTEN_PORT, initial: str | None = None,
          bind: str = "any") -> None:
    """Serve forever.

    Args:
        state_path: the state file (created from ``initial`` when given).
        port: the TCP port.
        initial: the first state as JSON text.
        bind: ``any`` (``0.0.0.0`` and ``[::]``), or ``primary``: only the address this
            host name resolves to — in a container, the network it was created on (the
            sandbox's), so nothing on the egress network can use the proxy.
    """
    if initial is not None:
        State(json.loads(initial))
        os.makedirs(os.path.dirname(state_path) or ".", exist_ok=True)
        _write_atomic(state_path, initial)
    proxy = Proxy(state_path)
    listeners = []
    addrs: list[tuple[socket.AddressFamily, str]] = [(socket.AF_INET, "0.0.0.0"),
                                                     (socket.AF_INET6, "::")]
    if bind == "primary":
        addrs = [(socket.AF_INET, socket.gethostbyname(socket.gethostname()))]
    for family, addr in addrs:
        try:
            s = socket.socket(family, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            s.bind((addr, port))
            s.listen(128)
            listeners.append(s)
        except OSError:
            if family == socket.AF_INET:
                raise
    threading.Thread(target=proxy.watch, daemon=True, name="watch").start()
    _write_atomic(state_path + ".applied", str(proxy.state.generation))
    proxy.record({"event": "ready", "generation": proxy.state.generation, "port": port})
    while True:
        ready, _, _ = select.select(listeners, [], [])
        for s in ready:
            try:
                client, _ = s.accept()
            except OSError:
                continue
            threading.Thread(target=proxy.handle, args=(client,), daemon=True).start()


def set_state(state_path: str, text: str, timeout_sec: float = 10.0) -> int:
    """Write a new state atomically and wait until the proxy applied it; 0 on success."""
    data = json.loads(text)
    State(data)  # validate before it replaces anything
    _write_atomic(state_path, json.dumps(data))
    deadline = time.monotonic() + timeout_sec
    want = str(int(data.get("generation", 0)))
    while time.monotonic() < deadline:
        try:
            with open(state_path + ".applied", encoding="utf-8") as f:
                if f.read().strip() == want:
                    return 0
        except OSError:
            pass
        time.sleep(POLL_SEC)
    print(f"the proxy did not apply generation {want} within {timeout_sec:g} s", file=sys.stderr)
    return 1


def main(argv: list[str]) -> int:
    """``serve STATE [PORT [INITIAL_JSON [any|primary]]]`` or ``set-state STATE JSON``."""
    if 2 <= len(argv) <= 5 and argv[0] == "serve":
        serve(argv[1], int(argv[2]) if len(argv) > 2 else LISTEN_PORT,
              argv[3] if len(argv) > 3 else None, argv[4] if len(argv) > 4 else "any")
        return 0
    if len(argv) == 3 and argv[0] == "set-state":
        return set_state(argv[1], argv[2])
    print("usage: proxy.py serve STATE [PORT [JSON [any|primary]]] | set-state STATE JSON", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
