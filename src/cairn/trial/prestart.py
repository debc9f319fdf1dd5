"""Warm start (``--prestart``, #13): the next trial's sandbox started while an earlier one verifies.

A job runner lends its trials a :class:`PrestartPool` over its plans
(:attr:`cairn.trial.context.JobServices.prestarts`). A trial that
reaches its last step's verifier (or its teardown, when it ends earlier) *offers* its sandbox
spec: the pool then creates and starts a sandbox for the first trial of the same task that has
not begun yet, with that trial's own id in the spec (so the backend labels and names it for
that trial, and ``cairn clean`` treats it like any other job sandbox). When that trial begins,
it *takes* the sandbox if its own spec is equal to the one the sandbox was started with, and
otherwise starts a fresh one as usual. A pre-started sandbox has only been started — no agent,
no verifier, no upload has touched it — so what the trial sees is what a fresh start gives.

Bounds: at most ``limit`` pre-started sandboxes at once (the job's ``-n``), at most one per
waiting trial. Whatever a trial did not take (it never began, it failed before its sandbox, the
job stopped or was interrupted) is removed by :meth:`PrestartPool.release` or, at the latest, by
:meth:`PrestartPool.close`, which the runner awaits before the job ends.

Only the in-process executor pre-starts (a pool of live sandboxes does not cross to Ray
workers).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from cairn._util.aio import shielded
from cairn.plan import TrialPlan
from cairn.sandbox.base import Sandbox, SandboxSpec

log = logging.getLogger("cairn.trial.prestart")


def _task_key(plan: TrialPlan) -> tuple[str, str, str]:
    """Trials whose sandboxes may be alike: same task (folder and content), same backend."""
    return str(plan.task.path), plan.task.content_hash, plan.backend


@dataclass
class Prestarted:
    """One pre-started sandbox, started for the trial named in its spec.

    Attributes:
        sandbox: the sandbox (its spec carries the receiving trial's id).
        begun: ``time.monotonic()`` when its start began.
        began_at: the same moment, wall clock (UTC).
        start_sec: how long its ``start()`` took, seconds (``None`` until it is up).
        task: the start, running as its own task.
    """

    sandbox: Sandbox
    begun: float
    began_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    start_sec: float | None = None
    task: asyncio.Task[None] | None = field(default=None, repr=False)

    async def _bring_up(self) -> None:
        try:
            await self.sandbox.start()
        except BaseException:
            await shielded(self.sandbox.stop())  # a failed or cancelled start leaves nothing
            raise
        self.start_sec = time.monotonic() - self.begun

    async def ready(self) -> BaseException | None:
        """Wait until the sandbox is up.

        Returns:
            ``None`` when it is up; the start's exception when it failed (the sandbox is then
            already removed and the trial starts a fresh one).

        Raises:
            asyncio.CancelledError: the waiting trial was cancelled; the start is cancelled
                too and has finished (removed what it made) before this returns.
        """
        assert self.task is not None
        try:
            await asyncio.shield(self.task)
        except asyncio.CancelledError:
            if self.task.cancelled():
                return asyncio.CancelledError("the pre-start was cancelled")
            self.task.cancel()
            await _settle(self.task)
            raise
        except Exception as exc:  # noqa: BLE001 - any start failure: the trial starts afresh
            return exc
        return None


async def _settle(task: asyncio.Task[None]) -> None:
    """Wait until ``task`` is done, through repeated cancellation of the waiter."""
    while not task.done():
        with contextlib.suppress(BaseException):
            await asyncio.shield(task)


class PrestartPool:
    """The pre-started sandboxes of one job run, keyed by the trial they are for.

    Args:
        plans: the run's trial plans, in the order they queue for a slot.
        limit: at most this many pre-started sandboxes at once (not yet taken).
    """

    def __init__(self, plans: Iterable[TrialPlan], *, limit: int) -> None:
        self.limit = max(1, limit)
        self._waiting: dict[str, TrialPlan] = {p.trial_id: p for p in plans}
        self._held: dict[str, Prestarted] = {}
        self._retiring: set[asyncio.Task[None]] = set()
        self.closed = False
        self.made = 0
        """Pre-starts begun."""
        self.taken = 0
        """Pre-started sandboxes a trial took."""

    def begin(self, plan: TrialPlan) -> None:
        """``plan``'s trial got its slot: no further pre-start is made for it."""
        self._waiting.pop(plan.trial_id, None)

    def offer(self, plan: TrialPlan, cls: type[Sandbox], spec: SandboxSpec) -> str | None:
        """A trial of ``plan``'s task is near its end: pre-start ``spec`` for the next trial of
        the same task that has not begun and has no pre-started sandbox, if the bound allows.

        Args:
            plan: the offering trial.
            cls: its sandbox class.
            spec: the spec its own sandbox was started with.

        Returns:
            The id of the trial the sandbox is started for, or ``None`` (none waits, the bound
            is reached, the pool is closed).
        """
        if self.closed or len(self._held) >= self.limit:
            return None
        key = _task_key(plan)
        nxt = next(
            (p for p in self._waiting.values() if p.trial_id not in self._held and _task_key(p) == key), None
        )
        if nxt is None:
            return None
        entry = Prestarted(cls(dataclasses.replace(spec, trial_id=nxt.trial_id)), begun=time.monotonic())
        entry.task = asyncio.ensure_future(entry._bring_up())
        entry.task.add_done_callback(_quiet)
        self._held[nxt.trial_id] = entry
        self.made += 1
        return nxt.trial_id

    def take(self, plan: TrialPlan, spec: SandboxSpec) -> Prestarted | None:
        """The pre-started sandbox for ``plan``'s trial, if there is one started with exactly
        ``spec`` (the trial's own); one started with another spec is removed.

        The caller owns what it takes: it awaits :meth:`Prestarted.ready` and stops the sandbox
        like one it created.
        """
        self.begin(plan)
        entry = self._held.pop(plan.trial_id, None)
        if entry is None:
            return None
        if entry.sandbox.spec != spec:
            log.info("pre-started sandbox of %s not used: its spec differs", plan.trial_id)
            self._retire(entry)
            return None
        self.taken += 1
        return entry

    def release(self, plan: TrialPlan) -> None:
        """``plan``'s trial is over (or will never begin): remove a sandbox it did not take."""
        self.begin(plan)
        entry = self._held.pop(plan.trial_id, None)
        if entry is not None:
            self._retire(entry)

    def _retire(self, entry: Prestarted) -> None:
        task = asyncio.ensure_future(self._remove(entry))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    @staticmethod
    async def _remove(entry: Prestarted) -> None:
        if entry.task is not None:
            entry.task.cancel()  # a start under way stops and removes what it made
            await _settle(entry.task)
        with contextlib.suppress(Exception):
            await entry.sandbox.stop()  # idempotent; never raises for what is gone

    async def close(self) -> None:
        """Remove every pre-started sandbox no trial took and wait until they are gone (also
        through repeated cancellation; raises ``CancelledError`` afterwards if it was
        cancelled). No pre-start begins afterwards."""
        self.closed = True
        for entry in self._held.values():
            self._retire(entry)
        self._held.clear()
        interrupted = False
        while self._retiring:
            try:
                await asyncio.shield(asyncio.gather(*list(self._retiring), return_exceptions=True))
            except asyncio.CancelledError:
                interrupted = True
        if interrupted:
            raise asyncio.CancelledError


def _quiet(task: asyncio.Task[None]) -> None:
    """Retrieve a pre-start's exception (its trial reads it through ``ready``, or nobody)."""
    if not task.cancelled():
        task.exception()
