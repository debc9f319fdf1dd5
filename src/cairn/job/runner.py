"""The machinery of one job run (SPEC §8): planning against the job folder, the lock,
concurrency, infra retries, the job's stop rules, summary.json and job.log.

:mod:`cairn.job` holds the public API built on it.
"""

from __future__ import annotations

import os

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cairn import __version__
from cairn.job.discover import TaskEntry, cancelled_result, config_error_result
from cairn.errors import Category, ErrorKind, UsageError
from cairn.plan import JobConfig, TrialPlan, trial_id
from cairn.results.model import JobSummary, Outcome, TrialResult
from cairn.results.summary import summarize_job

log = logging.getLogger("cairn.job")
EventSink = Callable[[str], None]

MASKED = "***"
"""What job.json holds instead of an ``--ae`` value (values given on a command line may be
secrets; ``cairn resume`` takes them again from ``--ae`` or the host environment)."""


def resolve_backend(name: str) -> str:
    """``auto`` → ``docker`` when an engine answers within 2 s, else ``local`` (SPEC §3.3,
    :mod:`cairn.sandbox.auto`, which prints the choice on stderr); a named backend is checked
    against the registry.

    Args:
        name: ``auto``, ``docker`` or ``local``.

    Raises:
        UsageError: an unknown backend name, or ``docker`` with no engine answering (checked
            before anything runs: SPEC §9 exit 2).
    """
    from cairn.sandbox import BACKEND_NAMES

    if name == "auto":
        from cairn.sandbox.auto import resolve_backend as resolve_auto

        return resolve_auto(name)
    if name not in BACKEND_NAMES:
        raise UsageError(f"unknown sandbox backend {name!r}; use auto, "
                         + ", ".join(BACKEND_NAMES))
    if name == "docker":
        from cairn.sandbox.auto import docker_answers

        if not docker_answers(5.0):
            raise UsageError("-e docker: no Docker engine answers (DOCKER_HOST="
                             f"{os.environ.get('DOCKER_HOST', 'unix:///var/run/docker.sock')}); "
                             "start one, or use -e local / -e auto")
    return name


class JobRun:
    """One run of a job (fresh or resumed): plans, lock, retries, summary, job.log."""

    def __init__(self, config: JobConfig, backend: str, job_dir: Path, *, resume: bool,
                 retry_errors: bool, on_event: EventSink | None) -> None:
        from cairn.results.store import JobPaths

        self.config = config
        self.backend = backend
        self.job_dir = job_dir.absolute()
        self.paths = JobPaths(self.job_dir)
        self.job_id = self.job_dir.name
        self.resume = resume
        self.retry_errors = retry_errors
        self._sink = on_event
        self._log = None
        self.results: dict[str, TrialResult] = {}
        self.stopped_by: str | None = None
        self.spent_usd = 0.0
        self.declared_steps: dict[str, list[str]] = {}
        self.started_at = datetime.now(UTC)
        self.on_trial_start: Callable[[TrialPlan], None] | None = None
        self.on_trial_end: Callable[[TrialPlan], None] | None = None

    # ---- events -------------------------------------------------------------------------------
    def emit(self, line: str) -> None:
        """Send an event line to the caller and append it to job.log."""
        if self._log is not None:
            with contextlib.suppress(OSError, ValueError):
                stamp = datetime.now(UTC).strftime("%H:%M:%S")
                self._log.write(f"{stamp} {line}\n")
                self._log.flush()
        if self._sink is not None:
            self._sink(line)

    def open_log(self) -> None:
        self._log = open(self.paths.job_log, "a", encoding="utf-8")  # noqa: SIM115

    def close_log(self) -> None:
        if self._log is not None:
            with contextlib.suppress(OSError):
                self._log.close()
            self._log = None

    # ---- planning (read-only) -----------------------------------------------------------------
    def decide(self, entries: list[TaskEntry]) -> list[tuple[str, Any]]:
        """What to do with each (task, attempt), reading only: ``("keep", result)``,
        ``("run", (entry, attempt, id, paths, prior))`` or ``("broken", same)``."""
        from cairn.results.store import read_result

        cfg = self.config
        existing: dict[str, list] = {}
        for p in self.paths.trial_dirs():
            existing.setdefault(p.root.name.rsplit("__", 1)[0], []).append(p)
        out: list[tuple[str, Any]] = []
        for e in entries:
            self.declared_steps[e.name] = list(e.steps)
            for attempt in range(1, cfg.attempts + 1):
                tid = trial_id(e.name, e.content_hash, cfg.agent, dict(cfg.agent_kwargs),
                               cfg.model, self.backend, attempt)
                tp = self.paths.trial(e.name, attempt, tid)
                prior = [p for p in existing.get(tp.root.name.rsplit("__", 1)[0], [])
                         if p.root != tp.root]
                if tp.finished:
                    try:
                        old = read_result(tp.result_json)
                    except (OSError, ValueError) as exc:
                        why = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
                        self.emit(f"[{e.name}] unreadable {tp.result_json} ({why}); "
                                  f"re-running attempt {attempt}")
                        old = None
                    if old is not None and not self.should_rerun(old):
                        out.append(("keep", old))
                        continue
                out.append(("broken" if e.task is None else "run", (e, attempt, tid, tp, prior)))
        return out

    def should_rerun(self, old: TrialResult) -> bool:
        """SPEC §8: genuine scores never re-run; cancelled trials, infra errors and job-level
        errors (``model_auth_failed``) do; task errors only with ``--retry-errors``."""
        if old.outcome in (Outcome.COMPLETED, Outcome.STOPPED):
            return False
        if old.outcome is Outcome.CANCELLED or old.error is None:
            return True
        if old.error.category in (Category.INFRA, Category.JOB):  # e.g. model_auth_failed
            return True
        return self.retry_errors

    # ---- applying the plan (writes) -----------------------------------------------------------
    def apply(self, decisions: list[tuple[str, Any]]) -> tuple[list[TrialPlan], list[TrialResult]]:
        """Write config_error results, move superseded trial folders aside, build the plans."""
        from cairn.results.store import TrialStore, move_attempt_aside

        opts = self.config.run_options()
        cfg = self.config
        plans: list[TrialPlan] = []
        done: list[TrialResult] = []
        for action, item in decisions:
            if action == "keep":
                done.append(item)
                continue
            e, attempt, tid, tp, prior = item
            for old in prior:
                self._supersede(e, attempt, old, tp)
            if action == "broken":
                move_attempt_aside(tp)
                result = config_error_result(e, cfg, backend=self.backend, attempt=attempt,
                                             trial_id=tid)
                TrialStore(tp).create().write_result(result)
                first = (e.error or "").splitlines()[0] if e.error else ""
                self.emit(f"[{e.name}] ERRORED config_error: {first}")
                done.append(result)
                continue
            plans.append(TrialPlan(
                task=e.task, agent_name=cfg.agent, agent_kwargs=dict(cfg.agent_kwargs),
                model=cfg.model, backend=self.backend, attempt=attempt, trial_id=tid,
                trial_dir=tp.root, job_id=self.job_id, job_dir=self.job_dir, options=opts))
        return plans, done

    def _supersede(self, e: TaskEntry, attempt: int, old, tp) -> None:
        """A trial folder of the same (task, attempt) under another id: the task changed since
        (SPEC §8). Reported, and moved into the new trial's ``attempts/`` (never deleted)."""
        from cairn.results.store import read_json

        was = "?"
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            was = str(read_json(old.config_json)["task"]["content_hash"])[:12]
        self.emit(f"[{e.name}] task changed since the last run (content {was} → "
                  f"{e.content_hash[:12]}); attempt {attempt} re-runs as trial "
                  f"{tp.root.name}, the old folder {old.root.name} is kept under its attempts/")
        tp.attempts_dir.mkdir(parents=True, exist_ok=True)
        used = [int(p.name) for p in tp.attempts_dir.iterdir() if p.name.isdigit()]
        old.root.rename(tp.attempt(max(used, default=0) + 1))

    # ---- running ------------------------------------------------------------------------------
    async def run_one(self, plan: TrialPlan) -> TrialResult:
        """Run one trial with automatic retries of infra errors (SPEC §6), attempts kept."""
        from cairn.results.store import TrialPaths, move_attempt_aside
        from cairn.trial.run import run_trial

        tp = TrialPaths(plan.trial_dir)
        delay = self.config.retry_backoff_sec
        runs = 0
        while True:
            runs += 1
            move_attempt_aside(tp)
            result = await run_trial(plan, on_event=self.emit)
            retryable = (result.outcome is Outcome.ERRORED and result.error is not None
                         and result.error.category is Category.INFRA)
            if not retryable or runs > self.config.max_retries or self.stopped_by:
                return result
            if result.error.kind is ErrorKind.SANDBOX_LOST and self.backend == "docker" \
                    and not await wait_for_engine(self.emit, plan.task.name):
                return result  # the engine stayed away: the trial keeps its infra error
            self.emit(f"[{plan.task.name}] infra error {result.error.kind.value}; retrying in "
                      f"{delay:g} s on a fresh sandbox (run {runs + 1} of "
                      f"{self.config.max_retries + 1})")
            await asyncio.sleep(delay)
            delay *= 2

    def write_not_started(self, plan: TrialPlan, why: str) -> TrialResult:
        """Record a trial that never started as ``cancelled``."""
        from cairn.results.store import TrialPaths, TrialStore, move_attempt_aside

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
        before = self.stopped_by
        if result.error is not None and result.error.kind is ErrorKind.MODEL_AUTH_FAILED:
            self.stopped_by = self.stopped_by or "model_auth_failed"
        if self.config.max_cost_usd is not None and self.spent_usd >= self.config.max_cost_usd:
            self.stopped_by = self.stopped_by or "max_cost"
        if self.stopped_by != before:
            self.emit(f"job stopping: {self.stopped_by} (spent ${self.spent_usd:.4f}); no new "
                      "trial starts, the remaining ones are recorded cancelled")
            self.write_job_json()
        if write:
            self.write_summary()

    def summary(self) -> JobSummary:
        return summarize_job(list(self.results.values()), self.declared_steps)

    def write_summary(self) -> None:
        from cairn.results.store import write_summary

        import errno

        try:
            write_summary(self.job_dir, self.summary())
        except (OSError, ValueError) as exc:  # the trials' own files are already on disk
            if getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT):
                if self.stopped_by == "storage_full":
                    return  # said once, by the job (resume rebuilds it)
                raise  # a full disk stops the job (cairn.job.run turns it into one error)
            log.warning("could not write summary.json: %s", exc)

    def write_job_json(self, *, finished: bool = False) -> None:
        """job.json: resolved config (``--ae`` values masked), versions, why it stopped."""
        from cairn.results.store import write_job_json

        cfg = self.config.model_dump(mode="json")
        cfg["agent_env"] = {k: MASKED for k in self.config.agent_env}
        write_job_json(self.job_dir, {
            "job_name": self.job_id, "cairn_version": __version__, "backend": self.backend,
            "engine_version": self.engine_version(), "config": cfg,
            "stopped_by": self.stopped_by, "started_at": self.started_at.isoformat(),
            "finished_at": datetime.now(UTC).isoformat() if finished else None})

    def engine_version(self) -> str | None:
        if self.backend != "docker":
            return None
        if not hasattr(self, "_engine"):
            self._engine = None
            with contextlib.suppress(Exception):
                import docker

                self._engine = docker.from_env(timeout=5).version().get("Version")
        return self._engine


ENGINE_WAIT_SEC = float(os.environ.get("CAIRN_ENGINE_WAIT_SEC", "180"))
"""How long a trial that lost the Docker engine waits for it to answer again before its
retry, seconds (``CAIRN_ENGINE_WAIT_SEC``); past it the trial keeps its ``sandbox_lost``
infra error and ``cairn resume`` re-runs it."""


async def wait_for_engine(emit: EventSink, task: str, wait_sec: float | None = None) -> bool:
    """Wait, with backoff (1 s doubling to 15 s), until the Docker engine answers a ping.

    Args:
        emit: receives one line when the wait starts and one when it ends.
        task: the task name the lines are tagged with.
        wait_sec: the bound, seconds (default :data:`ENGINE_WAIT_SEC`).

    Returns:
        True when the engine answers within the bound, else False.
    """
    from cairn.sandbox.auto import docker_answers

    bound = ENGINE_WAIT_SEC if wait_sec is None else wait_sec
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound
    delay = 1.0
    if await asyncio.to_thread(docker_answers, 5.0):
        return True
    emit(f"[{task}] the Docker engine does not answer; waiting up to {bound:g} s for it")
    while loop.time() < deadline:
        await asyncio.sleep(min(delay, max(0.0, deadline - loop.time())))
        delay = min(delay * 2, 15.0)
        if await asyncio.to_thread(docker_answers, 5.0):
            emit(f"[{task}] the Docker engine answers again")
            return True
    emit(f"[{task}] engine_unavailable: the Docker engine did not answer within {bound:g} s; "
         "the trial keeps its sandbox_lost error (resume re-runs it)")
    return False


def lock_job(job: JobRun, resume: bool):
    """Take the job's lock (creating the folder); refuse a second process or a name clash."""
    from cairn.lock import JobLock

    # a missing or empty folder (one claimed by :func:`cairn.job.run.claim_job_dir`) is this
    # run's own: nothing of an earlier run to clean up, removed again if nothing gets written
    created = not job.job_dir.exists() or not any(job.job_dir.iterdir())
    job.job_dir.mkdir(parents=True, exist_ok=True)
    lock = JobLock(job.job_dir)
    lock.acquire()  # JobLockedError is a UsageError
    if not resume and job.paths.job_json.exists():
        lock.release()
        raise UsageError(f"job folder {job.job_dir} exists; resume it with `cairn resume "
                         f"{job.job_dir}` or choose another --job-name")
    if resume and job.paths.job_json.exists():
        from cairn.results.store import read_json

        previous = None
        with contextlib.suppress(OSError, ValueError, AttributeError):  # torn: rebuilt later
            previous = read_json(job.paths.job_json).get("backend")
        if previous and previous != job.backend:
            lock.release()
            raise UsageError(f"job {job.job_id} ran on backend {previous!r}; refusing to "
                             f"resume it on {job.backend!r} (pass -e {previous})")
    return lock, created


def undo_empty(job: JobRun, created: bool) -> None:
    """Remove a job folder this run created when it stopped before writing anything."""
    if created and job.job_dir.is_dir() and {p.name for p in job.job_dir.iterdir()} <= {"lock"}:
        with contextlib.suppress(OSError):
            (job.job_dir / "lock").unlink()
            job.job_dir.rmdir()


def clean_own_leftovers(job: JobRun) -> None:
    """SPEC §3: a run or resume first removes its own job's left-over sandboxes."""
    from cairn.sandbox.cleanup import clean

    try:
        report = clean(job=job.job_id, own_job_dir=job.job_dir)
    except Exception as exc:  # noqa: BLE001 - cleaning is best-effort; `cairn clean` remains
        log.warning("could not clean left-overs of job %s: %s", job.job_id, exc)
        return
    n = len(report.containers) + len(report.networks) + len(report.folders)
    if n:
        job.emit(f"removed {n} left-over resource(s) of an earlier run of job {job.job_id}")


async def run_all(job: JobRun, plans: list[TrialPlan]) -> AsyncIterator[TrialResult]:
    """Run the plans with at most ``n_concurrent`` at once; yield results as they finish."""
    sem = asyncio.Semaphore(job.config.n_concurrent)
    queue: asyncio.Queue[TrialResult | None] = asyncio.Queue()

    async def one(plan: TrialPlan) -> None:
        started = False
        try:
            async with sem:
                if job.stopped_by:
                    result = job.write_not_started(plan, job.stopped_by)
                else:
                    started = True
                    if job.on_trial_start is not None:
                        job.on_trial_start(plan)
                    try:
                        result = await job.run_one(plan)
                    finally:
                        if job.on_trial_end is not None:
                            job.on_trial_end(plan)
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

    producer = asyncio.create_task(all_of_them())
    try:
        while (item := await queue.get()) is not None:
            yield item
        await producer
    finally:
        if not producer.done():
            job.stopped_by = job.stopped_by or "interrupted"
            producer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await producer


def _record_cancelled(job: JobRun, plan: TrialPlan) -> None:
    """A running trial was cancelled: run_trial wrote its ``cancelled`` result; count it."""
    from cairn.results.store import TrialPaths, read_result

    with contextlib.suppress(OSError, ValueError):
        job.record(read_result(TrialPaths(plan.trial_dir).result_json), write=False)
