"""cairn's egress filtering proxy: the program the per-trial gateway container runs.

Standard library only; it runs as a script inside the gateway (``python3 proxy.py serve``) with
:mod:`cairn.netpolicy` and :mod:`.httpwire` copied next to it. The sandbox reaches the outside
only through it (``HTTP_PROXY``/``HTTPS_PROXY``); a direct connection has no route, and the
gateway itself forwards nothing at the IP layer (docs/network.md).

What it does, for each client connection:

- the client must be on one of the trial's networks: its address must lie on an on-link
  route of an interface that carries no default route (the egress leg's side is refused), or
  in the state's ``peers`` when given;
- one request head is read, bounded in size and in total time (:data:`HEAD_TIMEOUT_SEC`),
  and parsed strictly (:mod:`.httpwire`); the host must be in the one canonical form of
  :func:`netpolicy.canonical_host` (no control or space characters, no userinfo);
- only then is the policy read: a connection is served under the generation it was
  accepted in and only while that generation is in force (a switch cuts every accepted
  connection, finished or not, so a head written in one phase is never served in the next);
- the host is checked against the policy by its canonical form, then resolved *here* (the
  state's host map, the operator's ``--add-host``, else the resolver); an address the
  resolver gives for a name is refused when it is loopback, link-local, unspecified,
  multicast, or an address of the gateway or the engine host, unless an address or CIDR
  entry names it; the proxy connects to that address itself, never to a string;
- ``CONNECT host:port`` → a blind byte tunnel (no TLS interception; the TLS server name is
  not compared with the CONNECT host, docs/network.md says why);
- an absolute-form request (``GET http://host/path``) → that one request with its body
  (``Content-Length`` or chunked), ``Host`` set to the target and ``Connection: close``
  upstream; the response goes back with ``Connection: close``. Requests the client
  pipelined behind it are not served, each recorded on its own;
- anything else → ``400``.

Every request is one JSON line on stdout, written when it ends: ``time`` (ISO 8601 UTC, when
the connection was accepted), ``generation`` and ``phase`` (of the state it was decided and
its upstream contacted under), ``conn`` (the connection's number) and ``request`` (1 for the
first request of a connection, 2… for pipelined ones), ``peer`` (the client's address and
port), ``method``, ``host``, ``port``, ``address`` (the address actually connected to, or
``null``), ``verdict`` (``allowed``: the policy admitted the host and the address it
resolved to — ``address`` says where it went, ``null`` when the upstream could not be
reached / ``denied``: nothing was contacted),
``reason`` (refusals, upstream failures, a cut), ``cut`` (``true`` when a phase switch
closed it), ``bytes_out`` (client → upstream) and ``bytes_in`` (upstream → client). Host
names are logged in canonical form, else as sent (bounded to 255 characters).
These are the fields of :class:`cairn.results.model.ConnectionRecord` (this script has the
standard library only, so it writes plain JSON; the host's store validates each record against
the model before it appends it to ``network.jsonl``, and a test holds the two field sets equal).

Policy switches: the state file holds ``{"generation", "phase", "policy", "hosts"}`` and
optionally ``"local_addresses"`` (the engine host's addresses, refused as targets of names)
and ``"peers"`` (CIDRs of allowed clients, for a proxy not in a container). A watcher thread
polls it every 10 ms (and every request head checks it first); a new generation replaces the
policy, cuts every connection accepted under an earlier one, waits (bounded) until their
records are written, and then writes the generation to ``<state>.applied``. The backend copies
a new state file in and waits for that acknowledgement; ``proxy.py set-state STATE JSON`` does
the same from inside.
"""

from __future__ import annotations

import ipaddress
import json
import os
import select
import socket
import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any

try:  # inside the gateway the helper modules sit next to this file
    import httpwire as wire  # type: ignore[import-not-found, unused-ignore]
    from netpolicy import NetworkPolicy, canonical_host, special_address  # type: ignore[import-not-found, unused-ignore]  # noqa: E501
except ImportError:  # pragma: no cover - run from the cairn package (tests)
    from cairn.netpolicy import NetworkPolicy, canonical_host, special_address
    from cairn.sandbox.network import httpwire as wire

LISTEN_PORT = 3128
HEAD_TIMEOUT_SEC = 10.0
"""The most a client may take to send a whole request head, from its connection's accept."""
CONNECT_TIMEOUT_SEC = 10.0
IDLE_TIMEOUT_SEC = 600.0
POLL_SEC = 0.01
CUT_WAIT_SEC = 3.0
"""How long a switch waits for the connections it cut to write their records."""
_HOP_HEADERS = frozenset(
    {
        "proxy-connection",
        "proxy-authorization",
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
        "host",
        "expect",
    }
)
IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Refused(Exception):  # noqa: N818 - a verdict, not an error
    """A request refused with an HTTP status (the reason is recorded)."""

    def __init__(self, code: int, reason: str, text: str) -> None:
        super().__init__(reason)
        self.code, self.reason, self.text = code, reason, text


class State:
    """The current policy, phase, host map and address lists, replaced whole by the watcher."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.generation = int(data.get("generation", 0))
        self.phase = str(data.get("phase", ""))
        self.policy = NetworkPolicy.from_json(data.get("policy") or {"mode": "no-network"})
        self.hosts: dict[str, IpAddress] = {}
        for k, v in (data.get("hosts") or {}).items():
            name = canonical_host(str(k))
            try:
                addr = ipaddress.ip_address(str(v).strip("[]"))
            except ValueError:
                continue  # the backend validates --add-host; never resolve a mapped string
            if name is not None:
                self.hosts[name] = addr
        self.local: set[IpAddress] = {ipaddress.ip_address(a) for a in data.get("local_addresses") or ()}
        peers = data.get("peers")
        self.peers = None if peers is None else [ipaddress.ip_network(p, strict=False) for p in peers]


class Proxy:
    """The proxy's shared state: the policy, the accepted connections, the log."""

    def __init__(self, state_path: str) -> None:
        self.state_path = state_path
        self.state = State(_load_state_file(state_path))
        self.lock = threading.Condition()
        self.out_lock = threading.Lock()
        self.reload_lock = threading.Lock()
        self.open: dict[int, tuple[int, list[socket.socket]]] = {}
        self.cut: set[int] = set()
        self.next_conn = 0
        self.pending: list[set[int]] = []
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
        without exec, by copying a file in), and acknowledge what was applied."""
        while True:
            time.sleep(POLL_SEC)
            self.reload(block=True)
            self._acknowledge()

    def reload(self, block: bool = False) -> None:
        """Take a changed state file: a new generation replaces the policy and cuts every
        connection accepted under an earlier one (sockets shut down; their own threads close
        them and write their records). A file read half-written is ignored and read again on
        the next call. Without ``block`` (a client's thread) it does nothing while another
        thread reloads."""
        if not self.reload_lock.acquire(blocking=block):
            return
        try:
            stamp = _stamp(self.state_path)
            if stamp == self._stamp:
                return
            try:
                data = json.loads(stamp or b"")
                if not isinstance(data, dict):
                    raise ValueError("state is not an object")
                new = State(data)
            except (ValueError, TypeError):
                return  # half-written: read again next time
            self._stamp = stamp
            with self.lock:
                old_gen = self.state.generation
                self.state = new
                stale = {cid: socks for cid, (gen, socks) in self.open.items() if gen != new.generation}
                self.cut |= set(stale)
                self.pending.append(set(stale) if new.generation != old_gen else set())
            for socks in stale.values():
                for sock in socks:
                    _shutdown(sock)
        finally:
            self.reload_lock.release()

    def _acknowledge(self) -> None:
        """Once the connections a switch cut have written their records (bounded by
        :data:`CUT_WAIT_SEC`), name the generation in force in ``<state>.applied``."""
        with self.lock:
            pending, self.pending = self.pending, []
            if not pending:
                return
            stale = set().union(*pending)
            deadline = time.monotonic() + CUT_WAIT_SEC
            while any(c in self.open for c in stale):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.lock.wait(left)
            gen = self.state.generation
        _write_atomic(self.state_path + ".applied", str(gen))

    # ---- clients -------------------------------------------------------------------------------
    def peer_ok(self, peer: str, state: State) -> bool:
        """Whether ``peer`` (an address) is a client of this trial: inside ``state.peers``
        when given, else on an on-link route of an interface without a default route."""
        try:
            addr = ipaddress.ip_address(peer.split("%")[0])
        except ValueError:
            return False
        if addr.is_link_local:  # the same prefix on every side; the sandbox uses the alias
            return False
        if state.peers is not None:
            return any(addr.version == n.version and addr in n for n in state.peers)
        nets, egress, _ = wire.routes()
        return any(iface not in egress and addr.version == net.version and addr in net for iface, net in nets)

    def accept(self, client: socket.socket, peer: tuple[Any, ...]) -> None:
        """Take one accepted connection: refuse a peer from outside the trial's networks at
        once (recorded), else serve it on its own thread."""
        with self.lock:
            self.next_conn += 1
            cid = self.next_conn
            state = self.state
            self.open[cid] = (state.generation, [client])
        entry = self._entry(cid, state, peer)
        if not self.peer_ok(str(peer[0]), state):
            entry["reason"] = f"peer {peer[0]} is not on the trial's networks"
            self._finish(cid, client, None, entry)
            return
        threading.Thread(target=self.handle, args=(cid, client, entry), daemon=True).start()

    def _entry(self, cid: int, state: State, peer: tuple[Any, ...]) -> dict[str, Any]:
        return {
            "time": _now_iso(),
            "generation": state.generation,
            "phase": state.phase,
            "conn": cid,
            "request": 1,
            "peer": f"{peer[0]}:{peer[1]}",
            "method": None,
            "host": None,
            "port": None,
            "address": None,
            "verdict": "denied",
            "reason": None,
            "cut": False,
            "bytes_out": 0,
            "bytes_in": 0,
        }

    def _current(self, cid: int) -> State:
        """The state in force, when connection ``cid`` was accepted under it.

        Raises:
            Refused: a switch came since (the connection belongs to an ended phase).
        """
        with self.lock:
            gen = self.open.get(cid, (None, []))[0]
            state = self.state
        if gen != state.generation or cid in self.cut:
            raise Refused(403, "phase ended", "cairn gateway: the phase ended")
        return state

    def _finish(
        self, cid: int, client: socket.socket, upstream: socket.socket | None, entry: dict[str, Any]
    ) -> None:
        with self.lock:
            cut = cid in self.cut
        if cut:
            entry["cut"] = True
            entry["reason"] = entry["reason"] or "cut at a phase switch"
        _close(client)
        if upstream is not None:
            _close(upstream)
        self.record(entry)
        with self.lock:  # after the record: a switch waits for it
            self.open.pop(cid, None)
            self.cut.discard(cid)
            self.lock.notify_all()

    # ---- one client connection ---------------------------------------------------------------
    def handle(self, cid: int, client: socket.socket, entry: dict[str, Any]) -> None:
        """Serve one client connection's request, then record it (one thread each)."""
        upstream: socket.socket | None = None
        rest = b""
        started = False  # bytes of an answer went to the client: no error reply after that
        try:
            head_raw, rest = wire.read_head(client, b"", time.monotonic() + HEAD_TIMEOUT_SEC)
            if head_raw is None:
                entry["reason"] = "no request"
                return
            self.reload()  # a switch written but not yet seen applies to this head
            state = self._current(cid)
            entry["generation"], entry["phase"] = state.generation, state.phase
            head = wire.parse_head(head_raw)
            entry["method"] = head.method[:16]
            host, port, path = _target(head, entry)
            if not state.policy.admits(host, port):
                raise Refused(
                    403,
                    f"not allowed ({state.policy.mode.value})",
                    f"cairn gateway: {host} is not allowed in this phase",
                )
            addrs = self._resolve(host, port, state, entry)
            upstream = self._connect(cid, addrs, port, entry)
            started = True
            if head.method == "CONNECT":
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                if rest:
                    upstream.sendall(rest)
                    entry["bytes_out"] += len(rest)
                out, inn = _pipe(client, upstream)
                entry["bytes_out"] += out
                entry["bytes_in"] += inn
            else:
                rest = self._one_request(client, upstream, head, host, port, path, rest, entry)
                self._pipelined(cid, rest, entry)
        except Refused as exc:
            entry["reason"] = entry["reason"] or exc.reason
            if not started:
                _reply(client, exc.code, exc.text)
        except wire.BadRequest as exc:
            entry["reason"] = entry["reason"] or f"bad request: {exc}"
            if not started:
                _reply(client, 400, f"cairn gateway: {exc}")
        except TimeoutError as exc:
            entry["reason"] = entry["reason"] or f"timed out: {exc}"[:200]
        except (OSError, ValueError) as exc:
            entry["reason"] = entry["reason"] or f"{type(exc).__name__}: {exc}"[:200]
        finally:
            self._finish(cid, client, upstream, entry)

    def _resolve(self, host: str, port: int, state: State, entry: dict[str, Any]) -> list[IpAddress]:
        """The addresses ``host`` may be reached at (see the module docstring); the entry's
        verdict becomes ``allowed`` once the policy admits what it resolves to.

        Raises:
            Refused: 502 when it does not resolve, 403 when every address is refused.
        """
        literal = _address(host)
        if literal is not None:
            entry["verdict"] = "allowed"
            return [literal]  # the policy admitted this very address
        if host in state.hosts:
            entry["verdict"] = "allowed"
            return [state.hosts[host]]  # the operator's --add-host names the address
        try:  # a numeric form the resolver would read as an address (0x7f000001) is no name
            socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
            raise Refused(
                400,
                "a numeric host that is not an address in canonical form",
                f"cairn gateway: {host} is not a host name",
            )
        except socket.gaierror:
            pass
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as exc:
            entry["verdict"] = "allowed"  # admitted; the name just does not resolve
            raise Refused(
                502, f"does not resolve: {exc}"[:200], f"cairn gateway: cannot resolve {host}"
            ) from None
        own = wire.local_addresses() | wire.routes()[2] | state.local
        good: list[IpAddress] = []
        why: list[str] = []
        for info in infos:
            addr = ipaddress.ip_address(str(info[4][0]).split("%")[0])
            mapped = addr.ipv4_mapped if isinstance(addr, ipaddress.IPv6Address) else None
            reason = special_address(addr) or (
                "the gateway's or engine host's own" if addr in own or mapped in own else None
            )
            if reason is not None and not state.policy.names_address(addr):
                why.append(f"{addr} ({reason})")
            elif addr not in good:
                good.append(addr)
        if not good:
            raise Refused(
                403,
                f"resolves only to refused addresses: {', '.join(why)}"[:200],
                f"cairn gateway: {host} resolves to an address not allowed",
            )
        entry["verdict"] = "allowed"
        return good

    def _connect(self, cid: int, addrs: list[IpAddress], port: int, entry: dict[str, Any]) -> socket.socket:
        """Connect to the first of ``addrs`` that answers, each attempt only while the
        connection's generation is in force (the socket is registered first, so a switch
        during the attempt cuts it).

        Raises:
            Refused: 403 when the phase ended, 502 when no address answers.
        """
        deadline = time.monotonic() + CONNECT_TIMEOUT_SEC
        last = ""
        for addr in addrs:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            sock = socket.socket(socket.AF_INET6 if addr.version == 6 else socket.AF_INET, socket.SOCK_STREAM)
            with self.lock:
                gen = self.open.get(cid, (None, []))[0]
                if gen != self.state.generation or cid in self.cut:
                    sock.close()
                    entry["verdict"] = "denied"  # nothing was contacted
                    raise Refused(403, "phase ended", "cairn gateway: the phase ended")
                self.open[cid][1].append(sock)
            sock.settimeout(left)
            try:
                sock.connect((str(addr), port))
            except OSError as exc:
                last = exc.strerror or str(exc)
                with self.lock:
                    self.open[cid][1].remove(sock)
                sock.close()
                continue
            entry["address"] = str(addr)
            self._current(cid)  # a switch while connecting: nothing is sent
            return sock
        raise Refused(
            502,
            f"upstream unreachable: {last or 'timed out'}"[:200],
            f"cairn gateway: cannot reach {entry['host']}:{port}",
        )

    def _one_request(
        self,
        client: socket.socket,
        upstream: socket.socket,
        head: wire.Head,
        host: str,
        port: int,
        path: str,
        rest: bytes,
        entry: dict[str, Any],
    ) -> bytes:
        """Forward one absolute-form request (head, then its body as framed) and pipe the
        response back; returns what the client sent after the request (pipelined)."""
        framing = wire.body_framing(head)
        authority = f"[{host}]" if ":" in host else host
        authority += "" if port == 80 else f":{port}"
        lines = [f"{head.method} {path} {head.version}", f"Host: {authority}"]
        lines += [f"{k}: {v}" for k, v in head.headers if k.lower() not in _HOP_HEADERS]
        lines.append("Connection: close")
        out = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        upstream.settimeout(IDLE_TIMEOUT_SEC)
        client.settimeout(IDLE_TIMEOUT_SEC)
        upstream.sendall(out)
        entry["bytes_out"] += len(out)
        reader = wire.Reader(client, rest)
        try:
            for piece in wire.body_pieces(reader, framing):
                upstream.sendall(piece)
                entry["bytes_out"] += len(piece)
        except BrokenPipeError:
            pass  # the upstream answered early and closed: its answer still goes back
        buf = b""
        while b"\r\n\r\n" not in buf and len(buf) <= wire.MAX_HEAD_BYTES:
            chunk = upstream.recv(65536)
            if not chunk:
                break
            buf += chunk
        if b"\r\n\r\n" in buf and buf.startswith(b"HTTP/"):
            rhead, _, body = buf.partition(b"\r\n\r\n")
            client.sendall(wire.response_head(rhead) + body)
        else:
            client.sendall(buf)
        entry["bytes_in"] += len(buf)
        while chunk := upstream.recv(65536):
            client.sendall(chunk)
            entry["bytes_in"] += len(chunk)
        return reader.buf

    def _pipelined(self, cid: int, rest: bytes, first: dict[str, Any]) -> None:
        """Record every request head the client pipelined after the first one, each on its
        own line; none is served (the response said ``Connection: close``)."""
        n = 1
        while rest.strip() and n < 64:
            n += 1
            head_raw, _, rest = rest.partition(b"\r\n\r\n")
            entry = {
                **first,
                "request": n,
                "method": None,
                "host": None,
                "port": None,
                "address": None,
                "verdict": "denied",
                "bytes_out": 0,
                "bytes_in": 0,
                "reason": "pipelined: one request per connection, not served",
            }
            try:
                head = wire.parse_head(head_raw)
                entry["method"] = head.method[:16]
                _target(head, entry)
                framing = wire.body_framing(head)
                if framing[0] == "length":
                    rest = rest[framing[1] :]
                elif framing[0] == "chunked":
                    rest = b""  # not followed further: it is not served anyway
            except (wire.BadRequest, Refused) as exc:
                entry["reason"] = f"pipelined, not served: {exc}"[:200]
                rest = b""
            self.record(entry)


def _target(head: wire.Head, entry: dict[str, Any]) -> tuple[str, int, str]:
    """(canonical host, port, origin-form path) of a proxy request; fills the entry's
    ``host`` and ``port`` (:func:`httpwire.proxy_target`).

    Raises:
        Refused: 400 for an origin-form request, userinfo, a bad host or port.
    """
    try:
        return wire.proxy_target(head, entry)
    except wire.BadTarget as exc:
        raise Refused(400, exc.reason, f"cairn gateway: {exc.text}") from None


def _address(host: str) -> IpAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _stamp(path: str) -> bytes | None:
    """The state file's content (a few hundred bytes), what a change is told by: the
    backend's copy keeps whole-second times from its archive, so two states written in one
    second with one size would look alike by ``stat``."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def _load_state_file(path: str) -> dict[str, Any]:
    """The gateway's policy state file (the proxy runs alone in its container: no cairn)."""
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


def _shutdown(s: socket.socket) -> None:
    """Wake every thread blocked on ``s`` (EOF) without closing the descriptor: only the
    owning thread closes it, so a descriptor number is never reused under another thread."""
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _close(s: socket.socket) -> None:
    _shutdown(s)
    try:
        s.close()
    except OSError:
        pass


def _reply(sock: socket.socket, code: int, text: str) -> None:
    reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}[code]
    body = (text + "\n").encode()
    try:
        sock.sendall(
            f"HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
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


def serve(state_path: str, port: int = LISTEN_PORT, initial: str | None = None, bind: str = "any") -> None:
    """Serve forever.

    Args:
        state_path: the state file (created from ``initial`` when given).
        port: the TCP port.
        initial: the first state as JSON text.
        bind: ``any`` (``0.0.0.0`` and ``[::]``), or ``primary``: only the address this
            host name resolves to — in a container, the network it was created on (the
            sandbox's). Either way a client must pass :meth:`Proxy.peer_ok` (a packet for
            that address arriving on the egress leg is dropped by ``rp_filter`` when spoofed
            and refused by the peer check otherwise).
    """
    if initial is not None:
        State(json.loads(initial))
        os.makedirs(os.path.dirname(state_path) or ".", exist_ok=True)
        _write_atomic(state_path, initial)
    proxy = Proxy(state_path)
    listeners = []
    addrs: list[tuple[socket.AddressFamily, str]] = [(socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")]
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
                client, peer = s.accept()
            except OSError:
                continue
            proxy.accept(client, peer)


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
        serve(
            argv[1],
            int(argv[2]) if len(argv) > 2 else LISTEN_PORT,
            argv[3] if len(argv) > 3 else None,
            argv[4] if len(argv) > 4 else "any",
        )
        return 0
    if len(argv) == 3 and argv[0] == "set-state":
        return set_state(argv[1], argv[2])
    print("usage: proxy.py serve STATE [PORT [JSON [any|primary]]] | set-state STATE JSON", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
