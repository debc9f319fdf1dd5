"""A task's MCP servers (``[[environment.mcp_servers]]``) for the agents that can use them.

Entries (Harbor 0.26's shape)::

    [[environment.mcp_servers]]
    name = "files"
    transport = "stdio"               # "stdio" (default with command), "sse", "streamable-http"
    command = "python3"               # ("http" is read as streamable-http)
    args = ["/opt/mcp/files.py"]
    env = { ROOT = "/app" }           # literals, for the server process

    [[environment.mcp_servers]]
    name = "search"
    transport = "sse"
    url = "http://search.internal:8000/sse"

Stdio servers are launched inside the sandbox by the agent; remote ones are reached by URL,
only as the network policy allows. Each MCP-capable CLI gets them in its native configuration
(:func:`render_claude_code`, :func:`render_codex`, :func:`render_opencode`), written by
:func:`install_mcp_config`, the one hook :class:`cairn.agents.installed.InstalledAgent` calls
before it runs the CLI. An agent that cannot use MCP refuses such a task before start
(:func:`mcp_refusal`) unless ``--ak ignore_mcp=true``.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from cairn.errors import UsageError
from cairn.task.mcp import (  # noqa: F401 - the values, re-exported
    HTTP,
    SSE,
    STDIO,
    McpServer,
    parse_mcp_servers,
    self_downloading,
)

IGNORE_MCP = "ignore_mcp"
"""The ``--ak`` option every agent takes: run an MCP task without giving the agent its servers."""

CLI_TRANSPORTS: dict[str, frozenset[str]] = {
    "claude-code": frozenset({STDIO, SSE, HTTP}),
    "codex": frozenset({STDIO, HTTP}),
    "opencode": frozenset({STDIO, SSE, HTTP}),
}
"""Installed CLI agent → the MCP transports its configuration can express."""

MCP_CONFIG_DIR = "/installed-agent/mcp"
"""Where the rendered configuration files are written inside the sandbox."""


# ---- per-CLI renderers -------------------------------------------------------------------
def render_claude_code(servers: Sequence[McpServer]) -> str:
    """Claude Code's ``--mcp-config`` JSON (the ``.mcp.json`` shape): ``{"mcpServers": {name:
    {"type": "stdio", "command", "args", "env"} | {"type": "sse"|"http", "url"}}}``."""
    table: dict[str, dict[str, Any]] = {}
    for s in servers:
        if s.transport == STDIO:
            table[s.name] = {"type": "stdio", "command": s.command, "args": list(s.args), "env": dict(s.env)}
        else:
            table[s.name] = {"type": "sse" if s.transport == SSE else "http", "url": s.url}
    return json.dumps({"mcpServers": table}, indent=2) + "\n"


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def render_codex(servers: Sequence[McpServer]) -> str:
    """Codex's ``config.toml`` ``[mcp_servers.<name>]`` tables: ``command``/``args``/``env``
    (stdio) or ``url`` (streamable HTTP). Codex has no SSE transport (refused before start)."""
    lines: list[str] = []
    for s in servers:
        lines.append(f"[mcp_servers.{_toml_str(s.name)}]")
        if s.transport == STDIO:
            lines.append(f"command = {_toml_str(s.command or '')}")
            lines.append("args = [" + ", ".join(_toml_str(a) for a in s.args) + "]")
            if s.env:
                lines.append(
                    "env = { "
                    + ", ".join(f"{_toml_str(k)} = {_toml_str(v)}" for k, v in s.env.items())
                    + " }"
                )
        else:
            lines.append(f"url = {_toml_str(s.url or '')}")
        lines.append("")
    return "\n".join(lines)


def render_opencode(servers: Sequence[McpServer]) -> str:
    """opencode's config (``OPENCODE_CONFIG``) ``"mcp"`` block: ``{"type": "local", "command":
    [cmd, *args], "environment"}`` or ``{"type": "remote", "url"}``, each ``enabled``."""
    table: dict[str, dict[str, Any]] = {}
    for s in servers:
        if s.transport == STDIO:
            table[s.name] = {"type": "local", "command": s.argv, "environment": dict(s.env), "enabled": True}
        else:
            table[s.name] = {"type": "remote", "url": s.url, "enabled": True}
    return json.dumps({"$schema": "https://opencode.ai/config.json", "mcp": table}, indent=2) + "\n"


# ---- refusal and the installed agents' hook ----------------------------------------------
def agent_transports(agent: Any) -> frozenset[str] | None:
    """The MCP transports ``agent`` can be given; ``None`` when it needs none (it acts on no
    instruction: oracle, nop). An agent declares its own with ``mcp_transports``, or all of
    them with ``"mcp_servers"`` in its ``task_context``."""
    if getattr(agent, "ignores_instruction", False):
        return None
    own = getattr(agent, "mcp_transports", None)
    if own is not None:
        return frozenset(own)
    if getattr(agent, "name", "") in CLI_TRANSPORTS:
        return CLI_TRANSPORTS[agent.name]
    if "mcp_servers" in getattr(agent, "task_context", frozenset()):
        return frozenset({STDIO, SSE, HTTP})
    return frozenset()


def mcp_refusal(agent: Any, servers: Sequence[McpServer], *, ignore: bool) -> str | None:
    """Why ``agent`` cannot run a task with ``servers``, or ``None`` when it can.

    Args:
        agent: the trial's agent.
        servers: the task's MCP servers.
        ignore: ``--ak ignore_mcp=true`` (then never refused).
    """
    if not servers or ignore:
        return None
    can = agent_transports(agent)
    if can is None:
        return None
    lacking = [s for s in servers if s.transport not in can]
    if not lacking:
        return None
    what = ", ".join(f"{s.name} ({s.transport})" for s in lacking)
    name = getattr(agent, "name", "?")
    if not can:
        return (
            f"agent {name!r} takes no MCP servers: [environment].mcp_servers "
            f"({len(servers)}) would be ignored ({what}); add --ak ignore_mcp=true to run "
            "without them"
        )
    return (
        f"agent {name!r} cannot use the task's MCP server(s) {what}; add "
        "--ak ignore_mcp=true to run without them"
    )


def check_agent_mcp(agent: Any, task: Any, agent_kwargs: Mapping[str, Any]) -> str | None:
    """Before start: why the trial's agent cannot run ``task`` for its MCP servers (an
    unreadable entry, a transport the agent lacks), or ``None``."""
    entries = getattr(getattr(task, "environment", None), "mcp_servers", ()) or ()
    if not entries:
        return None
    try:
        servers = parse_mcp_servers(list(entries))
    except ValueError as exc:
        return f"[environment] {exc}"
    return mcp_refusal(
        agent, servers, ignore=parse_bool_option(IGNORE_MCP, agent_kwargs.get(IGNORE_MCP, False))
    )


TRUE_WORDS = frozenset({"true", "1", "yes", "on"})
FALSE_WORDS = frozenset({"false", "0", "no", "off"})


def parse_bool_option(name: str, value: Any) -> bool:
    """Read a boolean agent option (``--ak NAME=VALUE``, or a YAML value from a job config).

    Args:
        name: the option name (for the message).
        value: ``True``/``False``, or a string: ``true``/``1``/``yes``/``on`` or
            ``false``/``0``/``no``/``off`` (any case, surrounding spaces ignored).

    Returns:
        The boolean.

    Raises:
        UsageError: any other value (``maybe``, ``2``, an empty string); never read as false.
    """
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower() if isinstance(value, str | int) else None
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise UsageError(
        f"agent option {name}={value!r} is not a boolean: use true or false "
        "(also accepted: 1/0, yes/no, on/off)"
    )


def pop_ignore_mcp(kwargs: dict[str, Any]) -> bool:
    """Remove ``ignore_mcp`` from ``--ak`` options (every agent takes it); returns its value.

    Raises:
        UsageError: the value is not a boolean (:func:`parse_bool_option`).
    """
    return parse_bool_option(IGNORE_MCP, kwargs.pop(IGNORE_MCP, False))


async def install_mcp_config(
    agent_name: str, task: Any, sandbox: Any, command: str, *, user: str | int | None, ignore: bool = False
) -> tuple[str, dict[str, str]]:
    """Write the task's MCP servers into the CLI's native configuration inside the sandbox.

    The hook :class:`cairn.agents.installed.InstalledAgent` calls before each run:
    claude-code gets ``--mcp-config <file>`` added to its command; codex gets the tables
    appended to ``$CODEX_HOME/config.toml`` (default ``~/.codex``); opencode gets
    ``OPENCODE_CONFIG`` pointing at the rendered file.

    Args:
        agent_name: the CLI agent's name.
        task: the loaded task (its ``environment.mcp_servers``), or ``None``.
        sandbox: the sandbox.
        command: the CLI command line about to run.
        user: the agent user (who must read the files).
        ignore: ``--ak ignore_mcp=true``: register nothing.

    Returns:
        (the command to run, extra environment variables for it).
    """
    entries = getattr(getattr(task, "environment", None), "mcp_servers", ()) or ()
    if not entries or agent_name not in CLI_TRANSPORTS or ignore:
        return command, {}
    servers = parse_mcp_servers(list(entries))
    import tempfile
    from pathlib import Path

    await sandbox.exec(["mkdir", "-p", MCP_CONFIG_DIR], user="root")
    await sandbox.exec(["chmod", "0755", MCP_CONFIG_DIR], user="root")

    async def put(name: str, text: str) -> str:
        with tempfile.TemporaryDirectory() as tmp:
            p = Path(tmp) / name
            p.write_text(text, encoding="utf-8")
            p.chmod(0o644)
            await sandbox.upload(p, f"{MCP_CONFIG_DIR}/{name}")
        return f"{MCP_CONFIG_DIR}/{name}"

    if agent_name == "claude-code":
        path = await put("claude-code.json", render_claude_code(servers))
        return f"{command} --mcp-config {shlex.quote(path)}", {}
    if agent_name == "opencode":
        return command, {"OPENCODE_CONFIG": await put("opencode.json", render_opencode(servers))}
    path = await put("codex.toml", render_codex(servers))
    # appended once per sandbox (steps run the CLI again), after a marker line
    await sandbox.exec(
        'd="${CODEX_HOME:-$HOME/.codex}"; mkdir -p "$d" && '
        f'{{ grep -qF {shlex.quote(CODEX_MARKER)} "$d/config.toml" 2>/dev/null || '
        f"{{ echo; echo {shlex.quote(CODEX_MARKER)}; cat {shlex.quote(path)}; }} "
        '>> "$d/config.toml"; }',
        user=user,
    )
    return command, {}


CODEX_MARKER = "# MCP servers of the task (written by cairn)"
