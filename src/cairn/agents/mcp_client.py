"""The built-in ``llm`` agent's MCP client: a task's stdio MCP servers as model tools.

Each stdio server of ``[[environment.mcp_servers]]`` is launched **inside the sandbox** for the
step (through :meth:`~cairn.sandbox.base.Sandbox.shell_argv`, e.g. ``docker exec -i``, as the
agent user, with the entry's env literals) and spoken to over its stdin/stdout with the ``mcp``
client library (part of the ``llm`` extra). Its tools are offered to the model as
``mcp__<server>__<tool>`` functions next to ``bash`` and ``submit``. Remote (sse,
streamable-http) servers are not offered: the agent runs on the host, where the sandbox's
network policy could not apply, so a task with one is refused unless ``--ak ignore_mcp=true``.

A server's stderr is task-controlled text: it never reaches cairn's terminal. Its last
:data:`STDERR_TAIL_BYTES` are kept (control characters escaped) in the step's agent folder as
``mcp-<server>.stderr.log``, and a server that fails to start is named in ``mcp-errors.txt``
with the escaped tail of its stderr.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cairn._util.tail import TailBuffer
from cairn.agents.mcp import STDIO, McpServer

TOOL_PREFIX = "mcp__"
MAX_RESULT_CHARS = 30_000
STDERR_TAIL_BYTES = 64 * 1024
"""How much of each MCP server's stderr is kept (its last bytes)."""
ERROR_TAIL_CHARS = 2000
"""How much of that tail a start failure's line in ``mcp-errors.txt`` carries."""
_STDERR_JOIN_SEC = 5.0
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def escape_controls(text: str, *, keep_newlines: bool = True) -> str:
    """``text`` with control and bidi characters written as ``\\xNN`` / ``\\uNNNN`` escapes
    (server output shown to a reviewer must not move their cursor or recolour their screen);
    tabs are kept, and newlines too unless ``keep_newlines`` is false (then ``\\n``)."""

    def esc(m: re.Match[str]) -> str:
        c = ord(m.group())
        return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"

    out = _CONTROL.sub(esc, text.replace("\r\n", "\n"))
    return out if keep_newlines else out.replace("\n", "\\n")


class _StderrTail:
    """A pipe for one server's stderr, drained by a thread into a bounded :class:`TailBuffer`.

    :attr:`writer` is handed to ``stdio_client`` as ``errlog``; :meth:`spawned` closes cairn's
    copy of the write end once the process exists, so the reader sees EOF when it exits.
    """

    def __init__(self) -> None:
        r, w = os.pipe()
        self._r = r
        self.writer = os.fdopen(w, "w")
        self.tail = TailBuffer(STDERR_TAIL_BYTES)
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._drain, daemon=True, name="cairn-mcp-stderr")
        self._thread.start()

    def _drain(self) -> None:
        try:
            while chunk := os.read(self._r, 65536):
                with self._lock:
                    self.tail.append(chunk)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                os.close(self._r)

    def spawned(self) -> None:
        """Close cairn's copy of the write end (the child holds its own)."""
        with contextlib.suppress(OSError):
            self.writer.close()

    def text(self, *, wait_sec: float = 0.0) -> str:
        """The kept tail (waiting up to ``wait_sec`` for the server to close its stderr)."""
        if wait_sec:
            self._thread.join(wait_sec)
        with self._lock:
            return self.tail.text()


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
        self._stderr: dict[str, _StderrTail] = {}
        self._log_dir: Path | None = None

    @classmethod
    async def open(
        cls,
        servers: Sequence[McpServer],
        shell_argv: list[str],
        *,
        timeout_sec: float = 30.0,
        log_dir: Path | None = None,
    ) -> McpTools:
        """Start every stdio server and list its tools.

        Args:
            servers: the task's servers (non-stdio ones are skipped).
            shell_argv: a host command that runs a shell inside the sandbox with stdin/stdout
                attached (``Sandbox.shell_argv(user=…, tty=False)``); ``-c <command>`` is added.
            timeout_sec: bound on each server's start and tool listing, seconds.
            log_dir: the step's agent folder: each server's stderr tail is written there as
                ``mcp-<server>.stderr.log`` by :meth:`aclose` (``None``: kept in memory only;
                never printed to cairn's own stderr either way).

        Returns:
            The tools; a server that fails to start is left out and named in :attr:`errors`.
        """
        from mcp import ClientSession
        from mcp.client.stdio import StdioServerParameters, stdio_client

        self = cls()
        self._log_dir = log_dir
        for server in servers:
            if server.transport != STDIO:
                continue
            env = " ".join(f"{k}={shlex.quote(v)}" for k, v in server.env.items())
            inner = f"exec {'env ' + env + ' ' if env else ''}{shlex.join(server.argv)}"
            params = StdioServerParameters(command=shell_argv[0], args=[*shell_argv[1:], "-c", inner])
            errlog = self._stderr[server.name] = _StderrTail()
            try:  # each request is bounded by the session's read timeout (no outer cancel
                # scope: the client's task groups must stay open after this block)
                try:
                    read, write = await self._stack.enter_async_context(
                        stdio_client(params, errlog=errlog.writer)
                    )
                finally:
                    errlog.spawned()
                session = await self._stack.enter_async_context(
                    ClientSession(read, write, read_timeout_seconds=timeout_sec)
                )
                await session.initialize()
                listed = await session.list_tools()
            except Exception as exc:  # noqa: BLE001 - one broken server must not end the step
                tail = escape_controls(errlog.text(wait_sec=_STDERR_JOIN_SEC).strip(), keep_newlines=False)
                if len(tail) > ERROR_TAIL_CHARS:
                    tail = "..." + tail[-ERROR_TAIL_CHARS:]
                self.errors.append(
                    f"MCP server {escape_controls(server.name, keep_newlines=False)!r} did not "
                    f"start: {type(exc).__name__}: "
                    f"{escape_controls(str(exc), keep_newlines=False)}"
                    + (f"; its stderr (last part): {tail}" if tail else "; no stderr")
                )
                continue
            for tool in listed.tools:
                name = _tool_name(server.name, tool.name)
                self._tools[name] = (session, tool.name)
                self.specs.append(
                    {
                        "type": "function",
                        "function": {
                            "name": name,
                            "description": (f"[MCP server {server.name}] " + (tool.description or ""))[:1024],
                            "parameters": tool.input_schema or {"type": "object", "properties": {}},
                        },
                    }
                )
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
            parts.append(
                text
                if isinstance(text, str)
                else json.dumps(block.model_dump(mode="json") if hasattr(block, "model_dump") else str(block))
            )
        text = "\n".join(parts)
        if getattr(result, "is_error", False):
            text = "error: " + text
        return text[:MAX_RESULT_CHARS]

    async def aclose(self) -> None:
        """Stop the servers and write their stderr tails into the log folder (never raises)."""
        with contextlib.suppress(Exception):
            await self._stack.aclose()
        for name, tail in self._stderr.items():
            text = tail.text(wait_sec=_STDERR_JOIN_SEC)
            if self._log_dir is None or not text:
                continue
            safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:80] or "server"
            with contextlib.suppress(OSError):
                self._log_dir.mkdir(parents=True, exist_ok=True)
                head = (
                    f"[earlier output dropped; last {STDERR_TAIL_BYTES // 1024} KiB kept]\n"
                    if tail.tail.truncated
                    else ""
                )
                (self._log_dir / f"mcp-{safe}.stderr.log").write_text(
                    head + escape_controls(text), encoding="utf-8"
                )
