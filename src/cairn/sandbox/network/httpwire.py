"""HTTP/1.x framing for the egress proxy: strict request heads, request bodies, the gateway's
own view of the kernel's routes and addresses.

Standard library only and no cairn import: it runs inside the gateway container next to
``proxy.py`` and ``netpolicy.py`` (copied there verbatim). Everything here reads agent
output, so every parser is strict and bounded (RFC 9112 §2–§7 framing, without the
leniencies a server may grant: no bare LF, no obs-fold, no control characters, one
``Content-Length``, ``Transfer-Encoding`` only as ``chunked``).
"""

from __future__ import annotations

import ipaddress
import socket
import time
from dataclasses import dataclass
from typing import Any

try:  # inside the gateway the policy module sits next to this file
    from netpolicy import canonical_host  # type: ignore[import-not-found, unused-ignore]
except ImportError:  # pragma: no cover - run from the cairn package (tests)
    from cairn.netpolicy import canonical_host

MAX_HEAD_BYTES = 64 * 1024
MAX_LINE_BYTES = 8 * 1024
_TOKEN = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


class BadRequest(ValueError):
    """A request the proxy refuses to parse further (answered with ``400``)."""


class BadTarget(ValueError):
    """A request target that is no proxy target (answered with ``400``).

    Attributes:
        reason: what the record says.
        text: what the client is told.
    """

    def __init__(self, reason: str, text: str) -> None:
        super().__init__(reason)
        self.reason, self.text = reason, text


@dataclass(frozen=True)
class Head:
    """One parsed request head.

    Attributes:
        method: the method, upper case (``GET``, ``CONNECT`` …).
        target: the request target as sent (absolute-form URL or ``host:port``).
        version: ``HTTP/1.0`` or ``HTTP/1.1``.
        headers: ``(name, value)`` pairs in order, values stripped.
    """

    method: str
    target: str
    version: str
    headers: tuple[tuple[str, str], ...]

    def get(self, name: str) -> list[str]:
        """Every value of header ``name`` (case-insensitive)."""
        low = name.lower()
        return [v for k, v in self.headers if k.lower() == low]


def read_head(sock: socket.socket, buf: bytes, deadline: float) -> tuple[bytes | None, bytes]:
    """Read one request head (up to the blank line) from ``sock``, ``buf`` first.

    Args:
        sock: the client socket.
        buf: bytes already read from it.
        deadline: ``time.monotonic()`` value by which the whole head must have arrived.

    Returns:
        (head without the blank line, the bytes after it); head ``None`` when the client
        closed before sending anything more than whitespace.

    Raises:
        TimeoutError: the head was not complete by ``deadline``.
        BadRequest: the head is larger than :data:`MAX_HEAD_BYTES`, or the client closed
            mid-head.
    """
    while b"\r\n\r\n" not in buf:
        if len(buf) > MAX_HEAD_BYTES:
            raise BadRequest("request head too large")
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("request head not complete in time")
        sock.settimeout(left)
        chunk = sock.recv(65536)
        if not chunk:
            if buf.strip():
                raise BadRequest("the client closed in the middle of a request head")
            return None, b""
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    if len(head) > MAX_HEAD_BYTES:
        raise BadRequest("request head too large")
    return head, rest


def parse_head(raw: bytes) -> Head:
    """Parse a request head strictly.

    Raises:
        BadRequest: a control character (other than a tab in a header value), a bare CR or
            LF, a request line not of three parts, a method that is no token, a version
            other than HTTP/1.0 or 1.1, or a header line without a token name.
    """
    text = raw.decode("latin-1")
    lines = text.split("\r\n")
    for line in lines:
        if any(ord(c) < 0x20 and c != "\t" or ord(c) == 0x7F for c in line):
            raise BadRequest("a control character in the request head")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[0] or not parts[1]:
        raise BadRequest("bad request line")
    method, target, version = parts
    if not set(method) <= _TOKEN or version not in ("HTTP/1.0", "HTTP/1.1") or "\t" in target:
        raise BadRequest("bad request line")
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or not set(name) <= _TOKEN:
            raise BadRequest("bad header line")
        headers.append((name, value.strip(" \t")))
    return Head(method.upper(), target, version, tuple(headers))


def body_framing(head: Head) -> tuple[str, int]:
    """How the request's body is framed: ``("length", n)``, ``("chunked", 0)`` or
    ``("none", 0)``.

    Raises:
        BadRequest: both ``Content-Length`` and ``Transfer-Encoding``, more than one or a
            non-numeric ``Content-Length``, or a transfer coding other than ``chunked``.
    """
    lengths = head.get("content-length")
    codings = head.get("transfer-encoding")
    if lengths and codings:
        raise BadRequest("both Content-Length and Transfer-Encoding")
    if codings:
        if len(codings) != 1 or codings[0].lower() != "chunked":
            raise BadRequest("a transfer coding other than chunked")
        return "chunked", 0
    if lengths:
        if len(set(lengths)) != 1 or not lengths[0].isdigit() or len(lengths[0]) > 18:
            raise BadRequest("bad Content-Length")
        return "length", int(lengths[0])
    return "none", 0


class Reader:
    """Reads a socket through a buffer (the bytes already read come first)."""

    def __init__(self, sock: socket.socket, buf: bytes) -> None:
        self.sock = sock
        self.buf = buf

    def _fill(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise BadRequest("the client closed in the middle of a request body")
        self.buf += data

    def line(self) -> bytes:
        """One CRLF-ended line, CRLF included (bounded by :data:`MAX_LINE_BYTES`)."""
        while b"\r\n" not in self.buf:
            if len(self.buf) > MAX_LINE_BYTES:
                raise BadRequest("a chunk line too long")
            self._fill()
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line + b"\r\n"

    def take(self, n: int):  # noqa: ANN201 - a generator of bytes
        """Yield exactly ``n`` bytes, in pieces as they come."""
        while n > 0:
            if not self.buf:
                self._fill()
            piece, self.buf = self.buf[:n], self.buf[n:]
            n -= len(piece)
            yield piece


def body_pieces(reader: Reader, framing: tuple[str, int]):  # noqa: ANN201 - generator
    """Yield the request body's bytes as sent (chunked framing kept), and nothing after it.

    Raises:
        BadRequest: a chunk size line that is not hex, or a chunk not followed by CRLF.
    """
    kind, n = framing
    if kind == "length":
        yield from reader.take(n)
        return
    if kind != "chunked":
        return
    while True:
        line = reader.line()
        size_text = line[:-2].split(b";", 1)[0].strip()
        if not size_text or len(size_text) > 16 or not all(c in b"0123456789abcdefABCDEF" for c in size_text):
            raise BadRequest("bad chunk size")
        size = int(size_text, 16)
        yield line
        if size == 0:
            while True:  # trailers, up to the empty line
                trailer = reader.line()
                yield trailer
                if trailer == b"\r\n":
                    return
        yield from reader.take(size)
        end = reader.line()
        if end != b"\r\n":
            raise BadRequest("a chunk not followed by CRLF")
        yield end


def response_head(raw: bytes) -> bytes:
    """An upstream response head (without its blank line) rewritten for the client: its
    connection headers dropped and ``Connection: close`` added (the proxy serves one request
    per client connection), then the blank line."""
    lines = raw.split(b"\r\n")
    keep = [lines[0]] + [
        x
        for x in lines[1:]
        if x.split(b":", 1)[0].strip().lower() not in (b"connection", b"keep-alive", b"proxy-connection")
    ]
    return b"\r\n".join([*keep, b"Connection: close"]) + b"\r\n\r\n"


def proxy_target(head: Head, entry: dict[str, Any]) -> tuple[str, int, str]:
    """(canonical host, port, origin-form path) of a proxy request: ``CONNECT host:port``
    or an absolute ``http://`` URL; fills ``entry["host"]`` (canonical, else as sent,
    bounded to 255 characters) and ``entry["port"]``.

    Raises:
        BadTarget: an origin-form request, userinfo, a host not in canonical form
            (:func:`netpolicy.canonical_host`), a bad port.
    """
    method, target = head.method, head.target
    if method == "CONNECT":
        authority, path, default = target, "", None
    elif target[:7].lower() == "http://":
        authority, slash, rest = target[7:].partition("/")
        authority, q, query = authority.partition("?")
        path = "/" + rest if slash else ("/?" + query if q else "/")
        default = 80
    else:
        raise BadTarget("not a proxy request", "send absolute-form or CONNECT requests")
    raw_host, port = _split_host_port(authority, default)
    host = canonical_host(raw_host) if raw_host is not None else None
    entry["host"] = host if host is not None else (raw_host or authority)[:255]
    entry["port"] = port
    if "@" in authority:
        raise BadTarget("userinfo in the target", "no userinfo in a target")
    if host is None:
        raise BadTarget("not a host in canonical form", "the target's host is not a valid host")
    if port is None:
        raise BadTarget("bad port", "the target's port is not valid")
    return host, port, path


def _split_host_port(text: str, default: int | None) -> tuple[str | None, int | None]:
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return None, None
        host, rest = text[: end + 1], text[end + 1 :]
        if rest and not rest.startswith(":"):
            return None, None
        port_text = rest[1:]
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    else:
        host, port_text = text, ""
    if not host:
        return None, None
    if not port_text:
        return host, default
    if not port_text.isdigit() or len(port_text) > 5 or not 0 < int(port_text) < 65536:
        return host, None
    return host, int(port_text)


# ---- the gateway's own addresses and routes (Linux /proc) ------------------------------------
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def _hex4(text: str) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(bytes.fromhex(text)[::-1])


def routes(path: str = "/proc/net/route") -> tuple[list[tuple[str, IpNetwork]], set[str], set[IpAddress]]:
    """The routing table: ((interface, network) of every on-link IPv4 and IPv6 route,
    interfaces that carry a default IPv4 route, those routes' next hops). Empty when
    unreadable."""
    nets: list[tuple[str, IpNetwork]] = []
    egress: set[str] = set()
    hops: set[IpAddress] = set()
    try:
        with open(path, encoding="ascii") as f:
            rows = f.read().splitlines()[1:]
    except OSError:
        return nets, egress, hops
    for row in rows:
        cols = row.split()
        if len(cols) < 8:
            continue
        iface, dest, gw, mask = cols[0], _hex4(cols[1]), _hex4(cols[2]), _hex4(cols[7])
        if int(dest) == 0 and int(mask) == 0:
            egress.add(iface)
            if int(gw):
                hops.add(gw)
        elif not int(gw):
            nets.append((iface, ipaddress.IPv4Network(f"{dest}/{mask}", strict=False)))
    nets += _routes6()
    return nets, egress, hops


def _routes6(path: str = "/proc/net/ipv6_route") -> list[tuple[str, IpNetwork]]:
    """(interface, network) of every on-link IPv6 route but the default (``[]`` without
    IPv6)."""
    out: list[tuple[str, IpNetwork]] = []
    try:
        with open(path, encoding="ascii") as f:
            rows = f.read().splitlines()
    except OSError:
        return out
    for row in rows:
        cols = row.split()
        if len(cols) < 10:
            continue
        try:
            dest = ipaddress.IPv6Address(bytes.fromhex(cols[0]))
            plen = int(cols[1], 16)
            hop = ipaddress.IPv6Address(bytes.fromhex(cols[4]))
        except ValueError:
            continue
        if plen == 0 or int(hop) or dest.is_multicast or dest.is_link_local or plen == 128:
            continue  # fe80::/64 is on every interface: it cannot tell a side
        out.append((cols[9], ipaddress.IPv6Network(f"{dest}/{plen}", strict=False)))
    return out


def local_addresses() -> set[IpAddress]:
    """Every address of this network namespace (IPv4 from ``/proc/net/fib_trie``, IPv6 from
    ``/proc/net/if_inet6``); empty when unreadable."""
    out: set[IpAddress] = set()
    try:
        with open("/proc/net/fib_trie", encoding="ascii") as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    for prev, line in zip(lines, lines[1:], strict=False):
        if line.strip() == "/32 host LOCAL" and "|--" in prev:
            try:
                out.add(ipaddress.IPv4Address(prev.split("|--")[1].strip()))
            except ValueError:
                pass
    try:
        with open("/proc/net/if_inet6", encoding="ascii") as f:
            for row in f:
                hexaddr = row.split()[0] if row.split() else ""
                try:
                    out.add(ipaddress.IPv6Address(bytes.fromhex(hexaddr)))
                except ValueError:
                    pass
    except OSError:
        pass
    return out
