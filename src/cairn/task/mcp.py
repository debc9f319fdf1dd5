"""A task's MCP servers, ``[[environment.mcp_servers]]`` (Harbor 0.26's shape; issue 22).

Values only: :class:`McpServer` and :func:`parse_mcp_servers` (used by validation and by the
agents, :mod:`cairn.agents.mcp`), :func:`self_downloading` and :func:`remote_host` (``tasks
check`` warnings).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Transport = str
STDIO, SSE, HTTP = "stdio", "sse", "streamable-http"
_ALIASES = {"stdio": STDIO, "sse": SSE, "streamable-http": HTTP, "http": HTTP, "streamable_http": HTTP}


@dataclass(frozen=True)
class McpServer:
    """One MCP server a task declares.

    Attributes:
        name: the server's name (``^[A-Za-z0-9_-]+$``; tools appear under it).
        transport: ``stdio``, ``sse`` or ``streamable-http``.
        command: the program (stdio).
        args: its arguments (stdio).
        env: literal environment variables for the server process (stdio).
        url: the endpoint (sse, streamable-http).
    """

    name: str
    transport: Transport
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    url: str | None = None

    @property
    def argv(self) -> list[str]:
        """``[command, *args]`` of a stdio server."""
        return [self.command or "", *self.args]


def parse_mcp_servers(entries: Sequence[Mapping[str, Any]]) -> list[McpServer]:
    """Read ``[[environment.mcp_servers]]`` entries.

    Args:
        entries: the entries as parsed from task.toml.

    Returns:
        The servers, in declaration order.

    Raises:
        ValueError: an entry without a valid name, an unknown transport, a stdio server
            without ``command``, a remote one without ``url``, a duplicate name, non-string
            args or env values. The message names the entry (1-based).
    """
    out: list[McpServer] = []
    for i, raw in enumerate(entries, 1):
        where = f"mcp_servers entry {i}"
        if not isinstance(raw, Mapping):
            raise ValueError(f"{where}: must be a table")
        name = raw.get("name")
        if not isinstance(name, str) or not name or not all(c.isalnum() or c in "_-" for c in name):
            raise ValueError(f"{where}: `name` must be letters, digits, '_' or '-'")
        where = f"mcp server {name!r}"
        kind = raw.get("transport", raw.get("type"))
        if kind is None:
            kind = STDIO if "command" in raw else HTTP if "url" in raw else None
        transport = _ALIASES.get(str(kind).lower()) if kind is not None else None
        if transport is None:
            raise ValueError(f"{where}: `transport` must be stdio, sse or streamable-http (got {kind!r})")
        args = raw.get("args") or []
        env = raw.get("env") or {}
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ValueError(f"{where}: `args` must be a list of strings")
        if not isinstance(env, Mapping) or not all(isinstance(v, str) for v in env.values()):
            raise ValueError(f"{where}: `env` must be a table of strings")
        command, url = raw.get("command"), raw.get("url")
        if transport == STDIO and (not isinstance(command, str) or not command.strip()):
            raise ValueError(f"{where}: a stdio server needs `command`")
        if transport != STDIO and (not isinstance(url, str) or "://" not in url):
            raise ValueError(f"{where}: a {transport} server needs `url` (http://… or https://…)")
        if any(s.name == name for s in out):
            raise ValueError(f"{where}: declared twice")
        out.append(
            McpServer(
                name=name,
                transport=transport,
                command=command if transport == STDIO else None,
                args=tuple(args),
                env=dict(env),
                url=url if transport != STDIO else None,
            )
        )
    return out


def self_download_command(server: McpServer) -> str | None:
    """How a stdio server that fetches itself at start is launched, or ``None``.

    The downloaders are ``npx``, ``uvx``, ``bunx``, ``pipx run`` and ``npm exec``, also behind
    the wrappers a verifier script's reading sees through (:func:`cairn.task.scan.unwrap_command`:
    ``/usr/bin/env npx …``, ``env -S "npx -y pkg"``, ``timeout 60 uvx …``).

    Args:
        server: one declared server.

    Returns:
        The words as written up to the downloader (``"npx"``, ``"/usr/bin/env npx"``,
        ``"pipx run"``); ``None`` for a remote server or one that runs what the image has.
    """
    from cairn.task.scan import unwrap_command

    if server.transport != STDIO or not server.command:
        return None
    written = server.argv
    _, argv = unwrap_command(written)
    if not argv:
        return None
    prog, args = argv[0].rsplit("/", 1)[-1], argv[1:]
    sub = prog in ("pipx", "npm") and args[:1] == (["run"] if prog == "pipx" else ["exec"])
    if prog not in ("npx", "uvx", "bunx") and not sub:
        return None
    shown = argv[:2] if sub else argv[:1]
    if written[-len(argv) :] == argv:  # the wrappers as written, then the downloader
        shown = written[: len(written) - len(argv) + len(shown)]
    return " ".join(shown)


def self_downloading(server: McpServer) -> bool:
    """Whether a stdio server fetches itself at start (:func:`self_download_command`): under
    ``no-network`` it cannot start."""
    return self_download_command(server) is not None


def remote_host(server: McpServer) -> str | None:
    """The host an ``sse``/``streamable-http`` server's URL names.

    Args:
        server: one declared server.

    Returns:
        The host, lower-case, without a trailing dot or IPv6 brackets (``"127.0.0.1"``,
        ``"mcp"``, ``"api.example.com"``); ``None`` for a stdio server, a URL without a host,
        or one whose host is a ``${VAR}`` template.
    """
    from urllib.parse import urlsplit

    if server.transport == STDIO or not server.url:
        return None
    try:
        host = urlsplit(server.url).hostname
    except ValueError:
        return None
    if not host or "$" in host or "{" in host:
        return None
    return host.lower().rstrip(".")


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` (as :func:`remote_host` gives it) is the sandbox itself: ``localhost``,
    an address of ``127.0.0.0/8``, ``::1``, or the unspecified ``0.0.0.0``/``::`` (which Linux
    connects to the local host)."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return ip.is_loopback or ip.is_unspecified
