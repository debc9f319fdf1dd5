"""Sandbox removal off a job's critical path (#13): after a trial's result is written.

A job runner lends its trials a set of pending removals
(:attr:`cairn.trial.context.JobServices.removals`); a trial that ends normally then hands its
sandbox's ``stop()`` to that set as a task instead of awaiting it, so its result is written and
its concurrency slot freed while the engine removes the container. The runner awaits every such
task before the job ends (:func:`drain`), so nothing is left behind. A cancelled trial, and any
trial run outside a job (no set), awaits its removal itself, as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from cairn._util.aio import shielded


async def stop_sandbox(
    stop: Callable[[], Awaitable[None]], *, cancelled: bool, pending: set[asyncio.Task[None]] | None
) -> None:
    """Remove a trial's sandbox: now (shielded from cancellation) when the trial was cancelled
    or no job collects removals; else as a task the job awaits before it ends.

    Args:
        stop: the sandbox's ``stop`` method.
        cancelled: the trial is being cancelled.
        pending: the job's pending removals, or ``None`` outside a job.
    """
    if pending is None or cancelled:
        await shielded(stop())
        return
    task: asyncio.Task[None] = asyncio.ensure_future(stop())
    pending.add(task)
    task.add_done_callback(pending.discard)


async def drain(pending: set[asyncio.Task[None]]) -> None:
    """Wait until every pending removal has finished, also through repeated cancellation
    (each removal is bounded by the backend's own timeouts); never raises their errors."""
    interrupted = False
    while pending:
        try:
            await asyncio.shield(asyncio.gather(*list(pending), return_exceptions=True))
        except asyncio.CancelledError:
            interrupted = True
    if interrupted:
        raise asyncio.CancelledError
