"""The built-in ``llm`` agent's MCP client: a task's stdio MCP servers as model tools.

Each stdio server of ``[[environment.mcp_servers]]`` is launched **inside the sandbox** for the
step (through :meth:`~cairn.sandbox.base.Sandbox.shell_argv`, e.g. ``docker exec -i``, as the
agent user, with the entry's env literals) and spoken to over its stdin/stdout with the ``mcp``
client library (part of the ``llm`` extra). Its tools are offered to the model as
``mcp__<server>__<tool>`` functions next to ``bash`` and ``submit``. Remote (sse,
streamable-http) servers are not offered: the agent runs on the host, where the sandbox's
network policy could not apply, so a task with one is refused unless ``--ak ignore_mcp=true``.
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
from collections.abc import Sequence
from typing import Any

from cairn.agents.mcp import STDIO, McpServer

TOOL_PREFIX = "mcp__"
MAX_RESULT_CHARS = 30_000


def _tool_name(server: str, tool: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_-]", "_", f"{TOOL_PREFIX}{server}__{tool}")
    return name[:64]


class McpTools:
    """Open MCP sessions and the model-facing view of their tools.

    Use :meth:`open`, then :attr:`specs` (OpenAI function tools), :meth:`handles` and
    :meth:`call`; :meth:`aclose` ends the servers (in the task that opened them).
    """

    def __init__(self) -> None:
        self._stack = contextlib.AsyncExitStack()
        self._tools: dict[str, tuple[Any, str]] = {}  # model name -> (session, MCP tool name)
        self.specs: list[dict[str, Any]] = []
        self.errors: list[str] = []

    @classmethod
    async def open(cls, servers: Sequence[McpServer], shell_argv: list[str],
                   *, timeout_sec: float = 30.0) -> McpTools:
        """Start every stdio server and list its tools.

        Args:
            servers: the task's servers (non-stdio ones are skipped).
            shell_argv: a host command that runs a shell inside the sandbox with stdin/stdout
                attached (``Sandbox.shell_argv(user=…, tty=False)``); ``-c <command>`` is added.
            timeout_sec: bound on each server's start and tool listing, seconds.

        Returns:
            The tools; a server that fails to start is left out and named in :attr:`errors`.
        """
        from mcp import ClientSession
        from mcp.client.stdio import StdioServerParameters, stdio_client

        self = cls()
        for server in servers:
            if server.transport != STDIO:
                continue
            env = " ".join(f"{k}={shlex.quote(v)}" for k, v in server.env.items())
            inner = f"exec {'env ' + env + ' ' if env else ''}{shlex.join(server.argv)}"
            params = StdioServerParameters(command=shell_argv[0],
                                           args=[*shell_argv[1:], "-c", inner])
            try:  # each request is bounded by the session's read timeout (no outer cancel
                # scope: the client's task groups must stay open after this block)
                read, write = await self._stack.enter_async_context(stdio_client(params))
                session = await self._stack.enter_async_context(
                    ClientSession(read, write, read_timeout_seconds=timeout_sec))
                await session.initialize()
                listed = await session.list_tools()
            except Exception as exc:  # noqa: BLE001 - one broken server must not end the step
                self.errors.append(f"MCP server {server.name!r} did not start: "
                                   f"{type(exc).__name__}: {exc}")
                continue
            for tool in listed.tools:
                name = _tool_name(server.name, tool.name)
                self._tools[name] = (session, tool.name)
                self.specs.append({"type": "function", "function": {
                    "name": name,
                    "description": (f"[MCP server {server.name}] " + (tool.description or ""))[:1024],
                    "parameters": tool.input_schema or {"type": "object", "properties": {}}}})
        return self

    def handles(self, name: str) -> bool:
        """Whether ``name`` is one of the MCP tools offered."""
        return name in self._tools

    async def call(self, name: str, arguments: dict[str, Any], *, timeout_sec: float) -> str:
        """Call an MCP tool; returns its text content (or the error) as the observation."""
        session, tool = self._tools[name]
        try:
            result = await session.call_tool(tool, arguments, read_timeout_seconds=timeout_sec)
        except Exception as exc:  # noqa: BLE001 - a failing tool call is the model's observation
            return f"error: MCP tool {tool!r} failed: {type(exc).__name__}: {exc}"
        parts: list[str] = []
        for block in getattr(result, "content", None) or []:
            text = getattr(block, "text", None)
            parts.append(text if isinstance(text, str) else json.dumps(
                block.model_dump(mode="json") if hasattr(block, "model_dump") else str(block)))
        text = "\n".join(parts)
        if getattr(result, "is_error", False):
            text = "error: " + text
        return text[:MAX_RESULT_CHARS]

    async def aclose(self) -> None:
        """Stop the servers (never raises)."""
        with contextlib.suppress(Exception):
            await self._stack.aclose()
