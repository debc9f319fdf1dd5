"""A job's pool of reusable sandbox resources (docs/network.md, "Gateway reuse").

A backend may hand a resource it made for one trial (the docker backend: an internal network
with its egress gateway) to a later trial of the same job instead of removing it, when it can
make the resource safe for reuse (policy replaced, every connection of the earlier trial
closed). The job's run loop owns one :class:`ResourcePool` for its lifetime (a job-lifetime
resource of :class:`cairn.trial.context.JobServices`) and hands it to its trials in
:attr:`cairn.sandbox.base.SandboxSpec.pool`; a trial run alone, or on a Ray worker, has no pool
and removes what it made as before. Closing the pool hands back what it still held; the job's
settle step (:func:`cairn.sandbox.cleanup.settle_job`) removes every resource labelled with
the job folder anyway, and ``cairn clean`` finds what a killed process left (the resources
keep their ownership labels).

This module holds no engine calls and no module-level state, so the job layer can make a
pool without naming a backend.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Generic, TypeVar

T = TypeVar("T")


class ResourcePool(Generic[T]):
    """Idle resources of one job, by kind, and the ones on their way back.

    Thread-safe (the counts and lists sit behind a lock); :meth:`take_or_wait` wakes as soon
    as a returning resource is given back or removed instead (no polling).

    Args:
        takers: how many sandbox starts may still take a resource (a job's trial count), or
            ``None`` (unknown: every returned resource is kept, up to the ``limit`` of
            :meth:`give`). Each :meth:`take_or_wait` uses one when it returns. A resource
            beyond what the remaining takers can use is refused (:meth:`expect` and
            :meth:`give` return ``False``), so its trial removes it at once, beside the trials
            still running, not at the job's end (#31: a job's last wave of trials left its
            ``-n`` networks idle for the settle step, which removed them one after another).
    """

    def __init__(self, takers: int | None = None) -> None:
        self._takers = takers
        self._lock = threading.Lock()
        self._idle: dict[str, list[T]] = {}
        self._pending: dict[str, int] = {}
        """Per kind: resources on their way back (their trial's removal is running, #13's
        deferred removal overlaps it with the next trial), which :meth:`take_or_wait` may
        wait for."""
        self._changed: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        self.closed = False

    def _notify(self) -> None:
        with self._lock:
            waiters = list(self._changed)
        for loop, event in waiters:
            if loop.is_closed():
                continue
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # the waiter's loop closed meanwhile
                continue

    def close(self) -> list[T]:
        """Turn reuse off and return the idle resources the pool still held (the caller
        removes them, or lets the job's settle step do it). Idempotent."""
        with self._lock:
            self.closed = True
            items = [item for kind in self._idle.values() for item in kind]
            self._idle.clear()
            self._pending.clear()
        self._notify()
        return items

    def drain(self) -> list[T]:
        """Forget every idle resource and return them, the pool staying open: after the engine
        that made them was lost (:meth:`cairn.sandbox.caches.SandboxCaches.engine_lost`) they
        are gone or unusable, and a trial that took one would spend an attempt on it. The
        caller removes them, or lets the job's settle step do it (they carry its labels)."""
        with self._lock:
            items = [item for kind in self._idle.values() for item in kind]
            self._idle.clear()
        self._notify()
        return items

    def take(self, kind: str) -> T | None:
        """An idle resource of ``kind`` (most recently returned first), or ``None`` when the
        pool is closed or empty."""
        with self._lock:
            items = self._idle.get(kind)
            return items.pop() if items else None

    def give(self, kind: str, item: T, *, limit: int) -> bool:
        """Return ``item`` to the pool for a later trial.

        Args:
            kind: the resource kind (a backend's own name for it).
            item: the resource, already made safe for another trial.
            limit: the most idle resources of this kind the pool keeps.

        Returns:
            ``True`` when the pool took it; ``False`` when it is closed or full, or holds as
            many idle resources of ``kind`` as sandbox starts are left to take them (the caller
            then removes the resource).
        """
        with self._lock:
            if self.closed:
                return False
            items = self._idle.setdefault(kind, [])
            if len(items) >= limit or (self._takers is not None and len(items) >= self._takers):
                return False
            items.append(item)
        self._notify()
        return True

    def expect(self, kind: str) -> bool:
        """Note that a resource of ``kind`` is on its way back (its trial's removal has begun);
        pair every ``True`` with one :meth:`settle`.

        Returns:
            ``True`` when noted; ``False`` when the pool is closed or no sandbox start is left
            to take the resource (nothing to settle: the caller removes it at once).
        """
        with self._lock:
            if self.closed or self._takers == 0:
                return False
            self._pending[kind] = self._pending.get(kind, 0) + 1
            return True

    def settle(self, kind: str) -> None:
        """The resource an :meth:`expect` announced was given back or removed."""
        with self._lock:
            if self._pending.get(kind, 0) > 0:
                self._pending[kind] -= 1
        self._notify()

    def add_takers(self, n: int = 1) -> None:
        """``n`` more sandbox starts will take a resource (a retried trial's new sandbox): a
        no-op when the count is unknown."""
        with self._lock:
            if self._takers is not None:
                self._takers += n

    @property
    def takers(self) -> int | None:
        """How many sandbox starts may still take a resource (``None``: unknown)."""
        with self._lock:
            return self._takers

    def pending(self, kind: str) -> int:
        """How many resources of ``kind`` are on their way back."""
        with self._lock:
            return self._pending.get(kind, 0)

    async def take_or_wait(self, kind: str, *, wait_sec: float) -> T | None:
        """Like :meth:`take`, but when the pool is empty while resources are on their way back
        (:meth:`expect`), wait up to ``wait_sec`` seconds for one of them.

        A job's next trial usually starts while the previous trial's container is still being
        removed (removal is off the critical path); waiting for that removal to hand its
        resource on is cheaper than making a fresh one.

        Returns:
            The resource, or ``None`` when none came back in time (the caller makes a fresh
            one).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_sec
        event = asyncio.Event()
        entry = (loop, event)
        with self._lock:
            self._changed.append(entry)
        try:
            while True:
                event.clear()
                item = self.take(kind)
                left = deadline - loop.time()
                if item is not None or self.pending(kind) == 0 or left <= 0:
                    return item
                try:
                    await asyncio.wait_for(event.wait(), timeout=left)
                except TimeoutError:
                    continue
        finally:
            with self._lock:
                self._changed.remove(entry)
                if self._takers:  # this start has taken its resource or made its own
                    self._takers -= 1


__all__ = ["ResourcePool"]
