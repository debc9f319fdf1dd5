"""The run loop of one job (design §8): concurrency, infra retries, the job's stop rules,
summary.json and job.log.

Planning is :mod:`cairn.job.planner` (pure), the folder work :mod:`cairn.job.folder`, and the
public entry points :mod:`cairn.job.run`.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
from collections.abc import AsyncGenerator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from cairn.errors import Category, ErrorKind
from cairn.events import EngineWait, Event, EventKind, EventSink, JobObserver, Retrying, dedupe_key
from cairn.job.contain import contain_trial
from cairn.job.discover import cancelled_result
from cairn.job.executors import Executor
from cairn.job.folder import write_job_meta
from cairn.plan import JobConfig, TrialPlan
from cairn.results.model import JobStop, JobSummary, Outcome, TrialResult
from cairn.results.store import (
    JobPaths,
    TrialPaths,
    TrialStore,
    move_attempt_aside,
    read_result,
    write_summary,
)
from cairn.results.summary import summarize_job
from cairn.sandbox import get_backend
from cairn.sandbox.base import Sandbox
from cairn.trial.context import JobServices

if TYPE_CHECKING:  # pragma: no cover
    from cairn.relay.service import RelayService

log = logging.getLogger("cairn.job")


class JobRun:
    """One run of a job (fresh or resumed): infra retries, the job's stop rules, summary.json
    and job.log (planning is :mod:`cairn.job.planner`, the lock :mod:`cairn.job.folder`)."""

    def __init__(
        self,
        config: JobConfig,
        backend: str,
        job_dir: Path,
        *,
        resume: bool,
        retry_errors: bool,
        observer: JobObserver | None,
        executor: Executor | None = None,
    ) -> None:
        self.config = config
        self.executor = executor or Executor(config)
        """Where the trials run (``--executor``; default in this process)."""
        self.backend = backend
        self.job_dir = job_dir.absolute()
        self.paths = JobPaths(self.job_dir)
        self.job_id = self.job_dir.name
        self.resume = resume
        self.retry_errors = retry_errors
        self.observer = observer or JobObserver()
        self._log: TextIO | None = None
        self.results: dict[str, TrialResult] = {}
        self.stopped_by: JobStop | None = None
        self.spent_usd = 0.0
        self.declared_steps: dict[str, list[str]] = {}
        self.started_at = datetime.now(UTC)
        self._engine_version: str | None = None
        self._engine_known = False
        self._warned: set[str] = set()  # trial warnings already shown (once per job)
        self.sources: list[dict[str, Any]] = []  # job.json "sources": resolved datasets and repositories
        self._summary_on_disk: JobSummary | None = None  # what the last write_summary wrote

    # ---- events -------------------------------------------------------------------------------
    def emit(self, event: Event) -> None:
        """Append an event's line to job.log and hand the event to the observer.

        A trial's warning (a :class:`~cairn.events.TrialWarning`: a limit the backend cannot
        apply, an ignored ``# syntax=`` line) reaches the observer once per job, by its key;
        later copies go to job.log only (each trial's result.json still records its
        warnings).
        """
        shown = True
        if event.kind is EventKind.WARNING:
            key = dedupe_key(event)
            shown = key not in self._warned
            self._warned.add(key)
        if self._log is not None:
            with contextlib.suppress(OSError, ValueError):
                stamp = datetime.now(UTC).strftime("%H:%M:%S")
                self._log.write(f"{stamp} {event.text}\n")
                self._log.flush()
        if shown:
            self.observer.event(event)

    def notice(self, text: str, kind: EventKind = EventKind.JOB, task: str | None = None) -> None:
        """Emit a job-level line."""
        self.emit(Event(kind, text, task=task))

    def open_log(self) -> None:
        """Open ``job.log`` for appending (a resumed job adds to the earlier runs' lines).

        Raises:
            OSError: the job folder is not writable.
        """
        self._log = open(self.paths.job_log, "a", encoding="utf-8")  # noqa: SIM115 - stays open for the whole run; close_log() closes it

    def close_log(self) -> None:
        """Close ``job.log`` (idempotent; a close error is ignored: the lines were flushed)."""
        if self._log is not None:
            with contextlib.suppress(OSError):
                self._log.close()
            self._log = None

    # ---- running ------------------------------------------------------------------------------
    async def run_one(self, plan: TrialPlan, services: JobServices | None = None) -> TrialResult:
        """Run one trial with automatic retries of infra errors (design §6), attempts kept.

        A trial that lost its engine (``sandbox_lost``) waits for it (:func:`wait_for_engine`);
        once it answers, the job's backend memos are dropped
        (:meth:`~cairn.sandbox.caches.SandboxCaches.engine_lost`) and its idle pooled resources
        forgotten (:meth:`~cairn.sandbox.pools.ResourcePool.drain`) before the retry, so no
        fact about the engine that went away describes the one that came back, and no gateway
        it made is handed to the retry.

        Args:
            plan: the trial.
            services: the job's services lent to each run of it.
        """
        tp = TrialPaths(plan.trial_dir)
        delay = self.config.retry_backoff_sec
        runs = 0
        while True:
            runs += 1
            move_attempt_aside(tp)
            result = await self.executor.run_trial(plan, self.emit, services)
            error = result.error if result.outcome is Outcome.ERRORED else None
            if (
                error is None
                or error.category is not Category.INFRA  # not retryable
                or runs > self.config.max_retries
                or self.stopped_by
                or error.detail.get("unreachable")
            ):  # a model host that is not there
                return result
            if error.kind is ErrorKind.SANDBOX_LOST:
                if not await wait_for_engine(get_backend(self.backend), self.emit, plan.task.name):
                    return result  # the engine stayed away: the trial keeps its infra error
                if services is not None:  # the engine that answers now is asked anew
                    services.caches.engine_lost()
                    if services.pool is not None:  # and nothing the lost one made is reused
                        services.pool.drain()
            cause = (error.message.splitlines() or [""])[0][:200]
            self.emit(
                Retrying(
                    tag=plan.task.name,
                    task=plan.task.name,
                    error_kind=error.kind.value,
                    delay_sec=delay,
                    run=runs + 1,
                    of=self.config.max_retries + 1,
                    cause=cause,
                )
            )
            if services is not None and services.pool is not None:
                services.pool.add_takers(1)  # the retry starts a sandbox of its own
            await asyncio.sleep(delay)
            delay *= 2

    def write_not_started(self, plan: TrialPlan, why: str) -> TrialResult:
        """Record a trial that never started as ``cancelled``."""
        tp = TrialPaths(plan.trial_dir)
        move_attempt_aside(tp)
        result = cancelled_result(plan, why)
        TrialStore(tp).create().write_result(result)
        return result

    def record(self, result: TrialResult, *, write: bool = True) -> None:
        """Count a finished trial: stop rules of the job, summary.json rewritten (unless
        ``write`` is false: the caller writes it once for a batch)."""
        self.results[result.trial_id] = result
        self.spent_usd += result.cost_usd or 0.0
        if result.judge is not None:  # an LLM judge's spend counts against --max-cost-usd
            self.spent_usd += result.judge.cost_usd or 0.0
        before = self.stopped_by
        if result.error is not None and result.error.kind is ErrorKind.MODEL_AUTH_FAILED:
            self.stopped_by = self.stopped_by or JobStop.MODEL_AUTH_FAILED
        if (
            result.error is not None
            and result.error.kind is ErrorKind.MODEL_UNAVAILABLE
            and result.error.detail.get("unreachable")
        ):  # every trial would meet the same host
            self.stopped_by = self.stopped_by or JobStop.MODEL_UNREACHABLE
        if self.config.max_cost_usd is not None and self.spent_usd >= self.config.max_cost_usd:
            self.stopped_by = self.stopped_by or JobStop.MAX_COST
        if self.stopped_by != before:
            self.notice(
                f"job stopping: {self.stopped_by} (spent ${self.spent_usd:.4f}); no new "
                "trial starts, the remaining ones are recorded cancelled"
            )
            self.write_job_json()
        if write:
            self.write_summary()

    def write_job_json(self, *, finished: bool = False) -> None:
        """job.json: resolved config (``--ae`` values masked), versions, why it stopped."""
        if not self._engine_known:  # asked once per run: an engine round trip
            self._engine_version = get_backend(self.backend).engine_version()
            self._engine_known = True
        write_job_meta(
            self.paths,
            self.config,
            backend=self.backend,
            engine_version=self._engine_version,
            started_at=self.started_at,
            stopped_by=self.stopped_by,
            finished=finished,
            sources=self.sources,
        )

    def summary(self) -> JobSummary:
        """The job's summary (design §7) over the results recorded so far; every task of the
        job appears, in job order, also before any of its trials has a result."""
        return summarize_job(list(self.results.values()), self.declared_steps)

    def write_summary(self) -> None:
        """Rewrite ``summary.json`` from :meth:`summary`; a write error is logged, not raised
        (the trials' own files are already on disk) — except a full filesystem (ENOSPC,
        EDQUOT), which stops the job (:mod:`cairn.job.run` turns it into one
        :class:`~cairn.errors.JobStorageFullError`).

        A summary equal to the one this run last wrote, with the file still there, is not
        written again (the job's end after its last trial): the file holds it, durably.

        Raises:
            OSError: ENOSPC/EDQUOT, unless the job already stopped for it.
        """
        summary = self.summary()
        if summary == self._summary_on_disk and self.paths.summary_json.is_file():
            return
        self._summary_on_disk = None
        try:
            write_summary(self.job_dir, summary)
            self._summary_on_disk = summary
        except (OSError, ValueError) as exc:  # the trials' own files are already on disk
            if getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT):
                if self.stopped_by is JobStop.STORAGE_FULL:
                    return  # said once, by the job (resume rebuilds it)
                raise  # a full disk stops the job (cairn.job.run turns it into one error)
            log.warning("could not write summary.json: %s", exc)


ENGINE_WAIT_SEC = float(os.environ.get("CAIRN_ENGINE_WAIT_SEC", "180"))
"""How long a trial that lost the Docker engine waits for it to answer again before its
retry, seconds (``CAIRN_ENGINE_WAIT_SEC``); past it the trial keeps its ``sandbox_lost``
infra error and ``cairn resume`` re-runs it."""


async def wait_for_engine(
    backend: type[Sandbox], emit: EventSink, task: str, wait_sec: float | None = None
) -> bool:
    """Wait, with backoff (1 s doubling to 15 s), until the backend's engine answers a ping
    (:meth:`Sandbox.engine_answers`; a backend without an engine answers at once).

    Args:
        backend: the trial's sandbox class.
        emit: receives one event when the wait starts and one when it ends.
        task: the task name the lines are tagged with.
        wait_sec: the bound, seconds (default :data:`ENGINE_WAIT_SEC`).

    Returns:
        True when the engine answers within the bound, else False.
    """
    bound = ENGINE_WAIT_SEC if wait_sec is None else wait_sec
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound
    delay = 1.0
    if await backend.engine_answers(5.0):
        return True
    emit(EngineWait(tag=task, task=task, state="waiting", bound_sec=bound))
    while loop.time() < deadline:
        await asyncio.sleep(min(delay, max(0.0, deadline - loop.time())))
        delay = min(delay * 2, 15.0)
        if await backend.engine_answers(5.0):
            emit(EngineWait(tag=task, task=task, state="back", bound_sec=bound))
            return True
    emit(EngineWait(tag=task, task=task, state="gave_up", bound_sec=bound))
    return False


def job_relay(config: JobConfig, plans: Sequence[TrialPlan]) -> RelayService | None:
    """The job's model relay service, or ``None``: ``--no-relay``, or no plan's agent can use
    one (its class has no ``relay_wanted``: oracle, nop). Then nothing of :mod:`cairn.relay`
    is imported (#31's relay guard: an oracle job pays nothing for the relay).

    Args:
        config: the job's config.
        plans: the job's trial plans.

    Raises:
        UsageError: a plan names an agent that cannot be resolved.
    """
    from cairn.agents.registry import get_agent_class

    if not config.relay or not any(
        callable(getattr(get_agent_class(name), "relay_wanted", None))
        for name in {p.agent_name for p in plans}
    ):
        return None
    from cairn.relay.service import RelayService

    return RelayService.for_config(config)


async def run_all(job: JobRun, plans: list[TrialPlan]) -> AsyncGenerator[TrialResult, None]:
    """Run the plans with at most ``n_concurrent`` at once; yield results as they finish."""
    sem = asyncio.Semaphore(job.config.n_concurrent)
    queue: asyncio.Queue[TrialResult | None] = asyncio.Queue()
    # the job's services: deferred removals, --prestart's sandboxes started ahead for waiting
    # trials and the reusable gateways (these two in this process only)
    services = JobServices.for_job(
        plans,
        prestart=job.config.prestart,
        limit=job.config.n_concurrent,
        in_process=job.executor.name == "local",
        relay=job_relay(job.config, plans),  # the job's model relay (docs/relay.md)
    )
    pool = services.prestarts
    if job.config.prestart and pool is None:
        job.notice(
            f"--prestart applies to the in-process executor only; ignored under "
            f"--executor {job.executor.name}",
            EventKind.WARNING,
        )

    async def one(plan: TrialPlan) -> None:
        started = False
        try:
            async with sem:
                if pool is not None:
                    pool.begin(plan)
                if job.stopped_by:
                    result = job.write_not_started(plan, job.stopped_by)
                else:
                    started = True
                    job.observer.trial_started(plan)
                    try:  # issue #29: an exception escaping the trial is its own error
                        result = await contain_trial(plan, lambda p: job.run_one(p, services), job.emit)
                    finally:
                        job.observer.trial_finished(plan)
                if pool is not None:
                    pool.release(plan)  # a pre-started sandbox the trial did not take
        except asyncio.CancelledError:
            if not started:  # never began: no sandbox; the summary is written once after
                job.record(job.write_not_started(plan, "interrupted"), write=False)
            else:
                _record_cancelled(job, plan)
            raise
        job.record(result)
        queue.put_nowait(result)

    async def all_of_them() -> None:
        try:
            async with asyncio.TaskGroup() as tg:
                for plan in plans:
                    tg.create_task(one(plan))
        finally:
            queue.put_nowait(None)

    # sandbox removals run after each trial's result is written; the job's end waits for them
    await services.open()
    producer = asyncio.create_task(all_of_them())
    try:
        while (item := await queue.get()) is not None:
            yield item
        await producer
    finally:
        try:
            if not producer.done():
                job.stopped_by = job.stopped_by or JobStop.INTERRUPTED
                producer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await producer
        finally:
            # what no trial took is removed, every removal awaited, the pools closed
            await services.aclose()


def _record_cancelled(job: JobRun, plan: TrialPlan) -> None:
    """A running trial was cancelled: run_trial wrote its ``cancelled`` result; count it."""
    with contextlib.suppress(OSError, ValueError):
        job.record(read_result(TrialPaths(plan.trial_dir).result_json), write=False)
