"""Job-level pools of reusable sandbox resources (docs/network.md, "Gateway reuse").

A backend may hand a resource it made for one trial (the docker backend: an internal network
with its egress gateway) to a later trial of the same job instead of removing it, when it can
make the resource safe for reuse (policy replaced, every connection of the earlier trial
closed). The job opens a pool for its folder before its first trial and closes it after its
last; only then is reuse on, and only in the process that runs the job (the in-process
``local`` executor), so a trial run alone, or on a Ray worker, never finds a pool and
removes what it made as before. Closing a pool hands back what it still held; the job's
settle step (:func:`cairn.sandbox.cleanup.settle_job`) removes every resource labelled with
the job folder anyway, and ``cairn clean`` finds what a killed process left (the resources
keep their ownership labels).

This module holds only the registry (thread-safe; no engine calls), so the job layer can open
and close pools without naming a backend.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

_LOCK = threading.Lock()
_POOLS: dict[str, dict[str, list[Any]]] = {}
_PENDING: dict[str, dict[str, int]] = {}
"""Per job and kind: resources on their way back (their trial's removal is running, #13's
deferred removal overlaps it with the next trial), which :func:`take_or_wait` may wait for."""
_POLL_SEC = 0.02


def _key(job_dir: Path | str) -> str:
    return str(Path(job_dir).absolute())


def open_pool(job_dir: Path | str) -> None:
    """Turn resource reuse on for the trials of the job in ``job_dir`` (idempotent)."""
    with _LOCK:
        _POOLS.setdefault(_key(job_dir), {})


def close_pool(job_dir: Path | str) -> list[Any]:
    """Turn reuse off for the job and return the idle resources the pool still held (the
    caller removes them, or lets the job's settle step do it). Idempotent."""
    with _LOCK:
        kinds = _POOLS.pop(_key(job_dir), {})
        _PENDING.pop(_key(job_dir), None)
    return [item for items in kinds.values() for item in items]


def pool_open(job_dir: Path | str | None) -> bool:
    """Whether the job in ``job_dir`` has an open pool."""
    if job_dir is None:
        return False
    with _LOCK:
        return _key(job_dir) in _POOLS


def take(job_dir: Path | str | None, kind: str) -> Any | None:
    """An idle resource of ``kind`` from the job's pool (most recently returned first), or
    ``None`` when the pool is closed or empty."""
    if job_dir is None:
        return None
    with _LOCK:
        items = _POOLS.get(_key(job_dir), {}).get(kind)
        return items.pop() if items else None


def give(job_dir: Path | str | None, kind: str, item: Any, *, limit: int) -> bool:
    """Return ``item`` to the job's pool for a later trial.

    Args:
        job_dir: the job folder.
        kind: the resource kind (a backend's own name for it).
        item: the resource, already made safe for another trial.
        limit: the most idle resources of this kind the pool keeps.

    Returns:
        ``True`` when the pool took it; ``False`` when it is closed or full (the caller then
        removes the resource).
    """
    if job_dir is None:
        return False
    with _LOCK:
        kinds = _POOLS.get(_key(job_dir))
        if kinds is None:
            return False
        items = kinds.setdefault(kind, [])
        if len(items) >= limit:
            return False
        items.append(item)
        return True


def expect(job_dir: Path | str | None, kind: str) -> bool:
    """Note that a resource of ``kind`` is on its way back to the job's pool (its trial's
    removal has begun); pair every ``True`` with one :func:`settle`.

    Returns:
        ``True`` when noted; ``False`` when the pool is closed (nothing to settle).
    """
    if job_dir is None:
        return False
    with _LOCK:
        if _key(job_dir) not in _POOLS:
            return False
        counts = _PENDING.setdefault(_key(job_dir), {})
        counts[kind] = counts.get(kind, 0) + 1
        return True


def settle(job_dir: Path | str | None, kind: str) -> None:
    """The resource an :func:`expect` announced was given back or removed."""
    if job_dir is None:
        return
    with _LOCK:
        counts = _PENDING.get(_key(job_dir))
        if counts and counts.get(kind, 0) > 0:
            counts[kind] -= 1


def pending(job_dir: Path | str | None, kind: str) -> int:
    """How many resources of ``kind`` are on their way back to the job's pool."""
    if job_dir is None:
        return 0
    with _LOCK:
        return _PENDING.get(_key(job_dir), {}).get(kind, 0)


async def take_or_wait(job_dir: Path | str | None, kind: str, *,
                       wait_sec: float) -> Any | None:
    """Like :func:`take`, but when the pool is empty while resources are on their way back
    (:func:`expect`), wait up to ``wait_sec`` seconds for one of them.

    A job's next trial usually starts while the previous trial's container is still being
    removed (removal is off the critical path); waiting for that removal to hand its resource
    on is cheaper than making a fresh one. Returns ``None`` when none came back in time (the
    caller makes a fresh one).
    """
    deadline = time.monotonic() + wait_sec
    while True:
        item = take(job_dir, kind)
        if item is not None or pending(job_dir, kind) == 0 or time.monotonic() >= deadline:
            return item
        await asyncio.sleep(_POLL_SEC)


__all__ = ["close_pool", "expect", "give", "open_pool", "pending", "pool_open", "settle", "take",
           "take_or_wait"]
