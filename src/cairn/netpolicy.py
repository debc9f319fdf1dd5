"""Network policy values (design §1.1, §3): modes, allowlist entries, and one phase's policy.

A shared value module: it imports nothing from cairn and nothing outside the standard library,
because the same file runs inside the egress gateway container next to
:mod:`cairn.sandbox.network.proxy` (copied there verbatim, no cairn installed). The task format
(:mod:`cairn.task.model`), validation, the backends and the proxy all use these values, so an
entry means the same thing everywhere.

Allowlist entries (``allowed_hosts``):

- a host name, ``example.com``: that name only (case-insensitive, a trailing dot ignored);
- a wildcard, ``*.example.com``: any name *below* ``example.com`` (``a.example.com``,
  ``a.b.example.com``), not ``example.com`` itself and not ``example.com.evil``;
- an IPv4 or IPv6 address, ``10.1.2.3`` / ``2001:db8::1`` (IPv6 also as ``[2001:db8::1]``);
- a CIDR, ``10.0.0.0/8`` / ``2001:db8::/32``: addresses inside it only.

A name entry never admits an address and an address entry never admits a name: the proxy
decides on what the client asked for, before any resolution, so a name cannot be used to
reach an address outside the list (and the other way round).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class NetworkMode(StrEnum):
    """``network_mode`` of ``[environment]``, ``[agent]`` or ``[verifier]`` (design §1.1)."""

    PUBLIC = "public"
    NO_NETWORK = "no-network"
    ALLOWLIST = "allowlist"


class EntryKind(StrEnum):
    """What an allowlist entry names."""

    HOST = "host"
    WILDCARD = "wildcard"
    ADDRESS = "address"
    NETWORK = "network"


_LABEL_RE = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def normalize_host(host: str) -> str:
    """A host as the proxy compares it: lower case, no trailing dot, IPv6 brackets removed."""
    h = host.strip().lower()
    if h.startswith("[") and h.endswith("]"):
        h = h[1:-1]
    return h[:-1] if h.endswith(".") and not h.endswith("..") else h


def parse_address(host: str) -> IpAddress | None:
    """``host`` as an IP address, or ``None`` when it is a name.

    Examples: ``"10.0.0.1"`` → ``IPv4Address('10.0.0.1')``; ``"[::1]"`` → ``IPv6Address('::1')``;
    ``"example.com"`` → ``None``.
    """
    try:
        return ipaddress.ip_address(normalize_host(host))
    except ValueError:
        return None


def _is_host_name(name: str) -> bool:
    if not name or len(name) > 253:
        return False
    labels = name.split(".")
    if not all(_LABEL_RE.match(label) for label in labels):
        return False
    return not labels[-1].isdigit()  # "1.2.3.999" is a broken address, not a name


def canonical_host(text: str) -> str | None:
    """The one form of a host a request names, or ``None`` when ``text`` is not a host.

    Strict: no control, space or non-ASCII characters, no IPv6 zone (``%``), no empty or
    over-long label. A name comes back lower case without its trailing dot; an IPv4 address
    in dotted decimal (``ipaddress``' form: no octal, hex or short forms, which stay names and
    are refused by the resolver check of the proxy); an IPv6 address, bracketed or not, in
    its compressed form without brackets.

    Examples: ``"Up.Test."`` → ``"up.test"``; ``"[::FFFF:1.2.3.4]"`` → ``"::ffff:102:304"``;
    ``"1.2.3.4\\x00.wild.test"`` → ``None``; ``"a b"`` → ``None``.
    """
    if not isinstance(text, str) or not text or len(text) > 255:
        return None
    if any(not 0x20 < ord(c) < 0x7F for c in text) or "%" in text:
        return None
    h = text.lower()
    if h.startswith("[") or ":" in h:
        inner = h[1:-1] if h.startswith("[") and h.endswith("]") else h
        try:
            return str(ipaddress.IPv6Address(inner))
        except ValueError:
            return None
    if h.endswith("."):
        h = h[:-1]
    try:
        return str(ipaddress.IPv4Address(h))
    except ValueError:
        pass
    return h if _is_host_name(h) else None


def special_address(addr: IpAddress) -> str | None:
    """Why a name must not lead to ``addr`` unless the list names the address itself
    (loopback, link-local, unspecified, multicast, broadcast); ``None`` when it may.
    IPv4-mapped IPv6 addresses are judged as their IPv4 address."""
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    if addr.is_loopback:
        return "loopback"
    if addr.is_link_local:
        return "link-local"
    if addr.is_unspecified or (addr.version == 4 and addr in _THIS_NET):
        return "unspecified"
    if addr.is_multicast or (addr.version == 4 and addr == _BROADCAST):
        return "multicast"
    return None


_THIS_NET = ipaddress.IPv4Network("0.0.0.0/8")
_BROADCAST = ipaddress.IPv4Address("255.255.255.255")


@dataclass(frozen=True)
class AllowEntry:
    """One parsed ``allowed_hosts`` entry.

    Attributes:
        text: the entry as written.
        kind: what it names.
        name: the normalised host name (``HOST``) or the suffix without ``*.`` (``WILDCARD``).
        network: the address (as a one-address network) or the CIDR (``ADDRESS``, ``NETWORK``).
    """

    text: str
    kind: EntryKind
    name: str = ""
    network: IpNetwork | None = None

    @classmethod
    def parse(cls, text: str) -> AllowEntry:
        """Parse one entry.

        Raises:
            ValueError: the entry is not a host name, ``*.wildcard``, address or CIDR (the
                message says why; ports, schemes and paths are refused, as is ``*`` alone).
        """
        if not isinstance(text, str):
            raise ValueError(f"{text!r} is not a string")
        raw = text.strip()
        if not raw:
            raise ValueError("an empty entry")
        if "://" in raw or any(c in raw for c in " \t?#@"):
            raise ValueError(
                f"{text!r} is not a host: give a name, *.wildcard, address or "
                "CIDR, without scheme, path or spaces"
            )
        if "/" in raw:
            try:
                net = ipaddress.ip_network(raw, strict=False)
            except ValueError:
                raise ValueError(f"{text!r} is not a CIDR (address/prefix length)") from None
            return cls(text=text, kind=EntryKind.NETWORK, network=net)
        addr = parse_address(raw)
        if addr is not None:
            return cls(text=text, kind=EntryKind.ADDRESS, network=ipaddress.ip_network(addr))
        name = normalize_host(raw)
        if name.startswith("*."):
            suffix = name[2:]
            if not _is_host_name(suffix) or "*" in suffix:
                raise ValueError(
                    f"{text!r} is not a wildcard: `*.` must be followed by a host name (e.g. *.example.com)"
                )
            return cls(text=text, kind=EntryKind.WILDCARD, name=suffix)
        if "*" in name:
            raise ValueError(f"{text!r}: a wildcard is only allowed as a whole first label (`*.example.com`)")
        if ":" in name:
            raise ValueError(
                f"{text!r} is not a host: ports are not part of an entry "
                "(every port of an allowed host is allowed)"
            )
        if not _is_host_name(name):
            raise ValueError(f"{text!r} is not a valid host name")
        return cls(text=text, kind=EntryKind.HOST, name=name)

    def admits(self, host: str) -> bool:
        """Whether this entry admits ``host`` (a name or an address literal)."""
        addr = parse_address(host)
        if addr is not None:
            return self.network is not None and addr.version == self.network.version and addr in self.network
        name = normalize_host(host)
        if self.kind is EntryKind.HOST:
            return name == self.name
        if self.kind is EntryKind.WILDCARD:
            return name.endswith("." + self.name) and len(name) > len(self.name) + 1
        return False


def parse_allowlist(entries: Any) -> tuple[AllowEntry, ...]:
    """Parse every entry of ``allowed_hosts``.

    Raises:
        ValueError: the first bad entry, with its 0-based index in the message.
    """
    out = []
    for i, text in enumerate(entries or ()):
        try:
            out.append(AllowEntry.parse(text))
        except ValueError as exc:
            raise ValueError(f"entry {i}: {exc}") from None
    return tuple(out)


@dataclass(frozen=True)
class NetworkPolicy:
    """What one phase of a trial may reach.

    Attributes:
        mode: the phase's mode.
        allowed_hosts: the allowlist entries as written (``ALLOWLIST`` only).
        model_hosts: hosts an in-sandbox agent's model lives on, admitted on top of ``mode``
            (the agent phase only; also under ``no-network``, where they are all it reaches).
        model_endpoints: ``ADDRESS:PORT`` openings admitted on top of ``mode`` at that port
            only, asked for by that address literal (the job's model relay, docs/relay.md):
            unlike a host entry they open one port of an address, also one of the engine
            host's.
    """

    mode: NetworkMode
    allowed_hosts: tuple[str, ...] = ()
    model_hosts: tuple[str, ...] = ()
    model_endpoints: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        parse_allowlist(self.allowed_hosts)
        parse_allowlist(self.model_hosts)
        for e in self.model_endpoints:
            parse_endpoint(e)

    @property
    def entries(self) -> tuple[AllowEntry, ...]:
        """The parsed entries this policy admits (allowlist entries, then model hosts)."""
        hosts = self.allowed_hosts if self.mode is NetworkMode.ALLOWLIST else ()
        return parse_allowlist((*hosts, *self.model_hosts))

    @property
    def needs_gateway(self) -> bool:
        """Whether enforcing this policy needs a filtering gateway (some but not all hosts)."""
        return self.mode is NetworkMode.ALLOWLIST or (
            self.mode is NetworkMode.NO_NETWORK and bool(self.model_hosts or self.model_endpoints)
        )

    def admits(self, host: str, port: int | None = None) -> bool:
        """Whether a connection to ``host`` (name or address literal) is allowed; with
        ``port``, also a :attr:`model_endpoints` opening of exactly that address and port."""
        if self.mode is NetworkMode.PUBLIC:
            return True
        if port is not None and self.admits_endpoint(host, port):
            return True
        return any(e.admits(host) for e in self.entries)

    def admits_endpoint(self, host: str, port: int) -> bool:
        """Whether ``host`` (an address literal as the client asked) at ``port`` is one of the
        :attr:`model_endpoints`."""
        addr = _literal(host)
        return addr is not None and any(parse_endpoint(e) == (addr, port) for e in self.model_endpoints)

    def names_address(self, addr: IpAddress) -> bool:
        """Whether an address or CIDR entry of this policy names ``addr`` explicitly (what
        lets a name lead to a loopback, link-local or engine-host address)."""
        return any(
            e.kind in (EntryKind.ADDRESS, EntryKind.NETWORK) and e.admits(str(addr)) for e in self.entries
        )

    def with_model_hosts(self, hosts: tuple[str, ...] | list[str]) -> NetworkPolicy:
        """This policy with ``hosts`` admitted as model hosts (duplicates dropped)."""
        merged = tuple(dict.fromkeys((*self.model_hosts, *hosts)))
        return NetworkPolicy(self.mode, self.allowed_hosts, merged, self.model_endpoints)

    def with_model_endpoints(self, endpoints: tuple[str, ...] | list[str]) -> NetworkPolicy:
        """This policy with ``ADDRESS:PORT`` openings added (duplicates dropped)."""
        merged = tuple(dict.fromkeys((*self.model_endpoints, *endpoints)))
        return NetworkPolicy(self.mode, self.allowed_hosts, self.model_hosts, merged)

    def effective(self) -> NetworkPolicy:
        """The policy reduced to what it admits: ``public`` drops its lists (it admits all),
        ``no-network`` its allowlist (it admits only model hosts). Two policies that admit the
        same are equal once reduced."""
        if self.mode is NetworkMode.PUBLIC:
            return NetworkPolicy(NetworkMode.PUBLIC)
        endpoints = tuple(sorted(set(self.model_endpoints)))
        if self.mode is NetworkMode.NO_NETWORK:
            return NetworkPolicy(NetworkMode.NO_NETWORK, (), tuple(sorted(set(self.model_hosts))), endpoints)
        return NetworkPolicy(
            self.mode,
            tuple(sorted(set(self.allowed_hosts))),
            tuple(sorted(set(self.model_hosts))),
            endpoints,
        )

    def describe(self) -> str:
        """A short human text: ``allowlist [a.test, *.b.test] + model [api.x]``."""
        text = self.mode.value
        if self.mode is NetworkMode.ALLOWLIST:
            text += f" [{', '.join(self.allowed_hosts)}]"
        if self.model_hosts:
            text += f" + model [{', '.join(self.model_hosts)}]"
        if self.model_endpoints:
            text += f" + relay [{', '.join(self.model_endpoints)}]"
        return text

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (what the gateway reads)."""
        return {
            "mode": self.mode.value,
            "allowed_hosts": list(self.allowed_hosts),
            "model_hosts": list(self.model_hosts),
            "model_endpoints": list(self.model_endpoints),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NetworkPolicy:
        """The inverse of :meth:`to_json`.

        Raises:
            ValueError: an unknown mode or a bad entry.
        """
        return cls(
            NetworkMode(data.get("mode", "no-network")),
            tuple(data.get("allowed_hosts") or ()),
            tuple(data.get("model_hosts") or ()),
            tuple(data.get("model_endpoints") or ()),
        )


def host_of_url(url: str) -> str | None:
    """The host of an ``http(s)://host[:port]/…`` URL (or a bare ``host[:port]``), normalised;
    ``None`` when there is none.

    Examples: ``"https://api.openai.com/v1"`` → ``"api.openai.com"``;
    ``"http://[::1]:8080"`` → ``"::1"``; ``"localhost:4000"`` → ``"localhost"``.
    """
    from urllib.parse import urlsplit

    text = url.strip()
    if not text:
        return None
    if "://" not in text:
        text = "//" + text
    try:
        host = urlsplit(text).hostname
    except ValueError:
        return None
    return normalize_host(host) if host else None


def _literal(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def parse_endpoint(text: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    """``"172.17.0.1:41234"`` or ``"[fd00::1]:41234"`` → (address, port).

    Raises:
        ValueError: not an address literal with a port in 1–65535.
    """
    host, sep, port_text = str(text).rpartition(":")
    addr = _literal(host) if sep and (":" not in host or host.startswith("[")) else None
    if addr is None or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"{text!r} is not ADDRESS:PORT (an IP address and a port)")
    return addr, int(port_text)
