"""The ``docker compose`` command line, run as a child process: finding the CLI (and checking
that Compose v2 answers) and running one command with a bounded output tail.

Used by the compose backend (:mod:`cairn.sandbox.docker.compose`) and by BuildKit image
builds (:mod:`cairn.sandbox.docker.buildkit`), which go through ``docker compose build``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from cairn.errors import UnsupportedError
from cairn.sandbox.caches import SandboxCaches

OUTPUT_TAIL_BYTES = 64 * 1024
"""Output kept per command: the last 64 KiB."""


@dataclass
class ComposeCliMemo:
    """The Compose CLI one job found (:meth:`cairn.sandbox.caches.SandboxCaches.memo`
    ``"docker.compose_cli"``)."""

    path: str | None = None
    """The ``docker`` CLI path once ``docker compose version`` answered."""
    version: str | None = None
    """What ``docker compose version --short`` printed."""


def compose_memo(caches: SandboxCaches) -> ComposeCliMemo:
    """The job's :class:`ComposeCliMemo` in ``caches``."""
    return caches.memo("docker.compose_cli", ComposeCliMemo)


def compose_cli(caches: SandboxCaches | None = None) -> str:
    """The ``docker`` CLI path, after checking that ``docker compose`` (v2) answers.

    Args:
        caches: the job's memos (:attr:`cairn.sandbox.base.SandboxSpec.caches`): the check
            runs once per job; ``None`` checks every time.

    Raises:
        UnsupportedError: no ``docker`` CLI, or no Compose v2 plugin.
    """
    memo = compose_memo(caches) if caches is not None else ComposeCliMemo()
    if memo.path is not None:
        return memo.path
    exe = shutil.which("docker")
    if exe is None:
        raise UnsupportedError(
            "compose environments need the docker CLI with the Compose v2 "
            "plugin (`docker compose`); no `docker` on PATH"
        )
    import subprocess

    try:
        r = subprocess.run(
            [exe, "compose", "version", "--short"],
            capture_output=True,
            encoding="utf-8",
            errors="replace",
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UnsupportedError(f"`docker compose version` failed: {exc}") from None
    if r.returncode != 0 or not r.stdout.strip():
        raise UnsupportedError(
            "compose environments need Docker Compose v2 (`docker compose`); "
            f"`docker compose version` said: {(r.stderr or r.stdout)[-300:]}"
        )
    memo.path, memo.version = exe, r.stdout.strip()
    return exe


async def _run_cli(
    argv: list[str], *, env: dict[str, str], timeout_sec: float, cwd: Path | None = None
) -> tuple[int | None, str]:
    """Run a CLI command in its own process group; (exit code or None on timeout, output tail).

    Cancellation and timeouts kill the whole group.
    """
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env=env,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    chunks: deque[bytes] = deque()
    size = 0

    async def read() -> None:
        nonlocal size
        assert proc.stdout is not None
        while data := await proc.stdout.read(65536):
            chunks.append(data)
            size += len(data)
            while size > OUTPUT_TAIL_BYTES and len(chunks) > 1:
                size -= len(chunks.popleft())

    def kill() -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)

    code: int | None = None
    try:
        async with asyncio.timeout(timeout_sec):
            await read()
            code = await proc.wait()
    except TimeoutError:
        kill()
        await proc.wait()
    except BaseException:
        kill()
        with contextlib.suppress(BaseException):
            await asyncio.shield(proc.wait())
        raise
    return code, b"".join(chunks).decode("utf-8", "replace")[-OUTPUT_TAIL_BYTES:]
