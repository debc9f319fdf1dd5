"""Jobs: every (task × attempt) of a config, concurrently, with retries and resume (SPEC §8).

Public API (what the CLI calls, and what training loops use):

- :func:`iter_trials` — async iterator yielding each :class:`TrialResult` as it finishes.
- :func:`run_job` — runs a job to its end, returns a :class:`JobResult`.
- :func:`resume_job` — runs the trials of an existing job that have no genuine score.
- :func:`read_job` — reads a job folder (works on folders copied from another machine).
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from cairn import __version__
from cairn.errors import (
    Category,
    ErrorKind,
    Phase,
    TaskFormatError,
    UsageError,
)
from cairn.plan import JobConfig, TrialPlan, trial_id
from cairn.results import (
    AgentRef,
    ErrorInfo,
    JobSummary,
    Outcome,
    StepResult,
    StepSource,
    TaskRef,
    TrialResult,
)
from cairn.summary import summarize_job
from cairn.task.model import Task

log = logging.getLogger("cairn.job")
EventSink = Callable[[str], None]


@dataclass
class JobResult:
    """What a finished job returns.

    Attributes:
        job_dir: the job folder.
        results: the latest result of every trial of the job (resumed ones included).
        summary: the job summary (also in summary.json).
        stopped_by: ``model_auth_failed`` / ``max_cost`` when the job stopped early, else None.
    """

    job_dir: Path
    results: list[TrialResult]
    summary: JobSummary
    stopped_by: str | None = None

    @property
    def exit_code(self) -> int:
        """SPEC §9: 0 when every trial is completed or stopped, else 1."""
        ok = (Outcome.COMPLETED, Outcome.STOPPED)
        return 0 if self.results and all(r.outcome in ok for r in self.results) else 1


@dataclass
class _Entry:
    """One task found in the inputs: loaded, or broken with its findings."""

    path: Path
    name: str
    task: Task | None = None
    error: str | None = None
    content_hash: str = ""
    steps: list[str] = field(default_factory=list)


def discover_tasks(config: JobConfig) -> list[_Entry]:
    """Find, filter and load the tasks of ``config.paths`` (task or dataset folders).

    A broken task becomes an entry with ``error`` (it turns into a ``config_error`` trial); it
    never stops the others.

    Raises:
        UsageError: a path does not exist, or no task matched.
    """
    from cairn.task.hashing import task_content_hash
    from cairn.task.load import is_task_dir, load_task, task_dirs

    entries: list[_Entry] = []
    for p in config.paths:
        p = Path(p).resolve()
        if not p.exists():
            raise UsageError(f"no such task or dataset folder: {p}")
        dirs = [p] if is_task_dir(p) else task_dirs(p)
        for d in dirs:
            try:
                task = load_task(d)
                entries.append(_Entry(d, task.name, task=task, content_hash=task.content_hash,
                                      steps=[s.name for s in task.steps]))
            except TaskFormatError as exc:
                lines = [str(f) for f in exc.findings] or [str(exc)]
                entries.append(_Entry(d, _fallback_name(d), error="\n".join(lines),
                                      content_hash=task_content_hash(d)))
    if config.include:
        entries = [e for e in entries if any(fnmatch.fnmatch(e.name, g) for g in config.include)]
    if config.exclude:
        entries = [e for e in entries if not any(fnmatch.fnmatch(e.name, g) for g in config.exclude)]
    if not entries:
        raise UsageError("no task matched the given paths and filters")
    return entries


def _fallback_name(path: Path) -> str:
    """A broken task's name: ``[task].name`` if the TOML parses that far, else the folder name."""
    import tomllib

    try:
        return str(tomllib.loads((path / "task.toml").read_text())["task"]["name"])
    except Exception:  # noqa: BLE001 - the folder name is the documented default
        return path.name


def _config_error_result(plan_id: str, name: str, entry: _Entry, config: JobConfig,
                         backend: str, attempt: int) -> TrialResult:
    now = datetime.now(timezone.utc)
    return TrialResult(
        trial_id=plan_id, trial_name=f"{_slug(name)}__{attempt}__{plan_id[:8]}", attempt=attempt,
        task=TaskRef(name=name, content_hash=entry.content_hash),
        agent=AgentRef(name=config.agent, kwargs=dict(config.agent_kwargs)), model=config.model,
        backend=backend, outcome=Outcome.ERRORED,
        error=ErrorInfo(kind=ErrorKind.CONFIG_ERROR, category=Category.TASK,
                        phase=Phase.ENVIRONMENT, message=entry.error or "invalid task"),
        steps_total=max(len(entry.steps), 1), started_at=now, finished_at=now,
        steps=[StepResult(index=1, name="main", source=StepSource.NOT_RUN)])


def _slug(name: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9._-]", "-", name)


def default_job_name(now: datetime | None = None) -> str:
    """``YYYY-MM-DD__HH-MM-SS`` of the start time (local time, as Harbor names jobs)."""
    return (now or datetime.now()).strftime("%Y-%m-%d__%H-%M-%S")


class _Job:
    """One job run (fresh or resumed): plans, lock, retries, summary. Used by :func:`iter_trials`."""

    def __init__(self, config: JobConfig, *, job_dir: Path | None, resume: bool,
                 retry_errors: bool, on_event: EventSink | None) -> None:
        from cairn.store import JobPaths

        self.config = config
        name = config.job_name or default_job_name()
        self.paths = JobPaths(Path(job_dir) if job_dir else Path(config.jobs_dir) / name)
        self.job_dir = self.paths.root.resolve()
        self.paths = JobPaths(self.job_dir)
        self.job_id = self.job_dir.name
        self.resume = resume
        self.retry_errors = retry_errors
        self.emit = on_event or (lambda line: None)
        self.results: dict[str, TrialResult] = {}
        self.stopped_by: str | None = None
        self.spent_usd = 0.0
        self.backend = config.backend
        self.declared_steps: dict[str, list[str]] = {}

    # ---- planning -----------------------------------------------------------------------------
    def plan(self, entries: list[_Entry]) -> tuple[list[TrialPlan], list[TrialResult]]:
        """Trial plans to run and results already final (resume), in task order."""
        from cairn.store import read_result

        cfg = self.config
        opts = cfg.run_options()
        to_run: list[TrialPlan] = []
        done: list[TrialResult] = []
        existing = {p.root.name.rsplit("__", 1)[0]: p for p in self.paths.trial_dirs()}
        for e in entries:
            self.declared_steps[e.name] = e.steps
            for attempt in range(1, cfg.attempts + 1):
                tid = trial_id(e.name, e.content_hash, cfg.agent, dict(cfg.agent_kwargs),
                               cfg.model, self.backend, attempt)
                tp = self.paths.trial(e.name, attempt, tid)
                prior = existing.get(f"{_slug(e.name)}__{attempt}")
                if prior is not None and prior.root != tp.root:
                    self.emit(f"[{e.name}] task changed since the last run (attempt {attempt}); "
                              f"re-running under a new trial id")
                if tp.finished:
                    try:
                        old = read_result(tp.result_json)
                    except (OSError, ValueError) as exc:
                        self.emit(f"[{e.name}] unreadable result.json ({exc}); re-running")
                        old = None
                    if old is not None and not self._should_rerun(old):
                        done.append(old)
                        continue
                if e.task is None:
                    done.append(self._config_error(tid, e, attempt, tp))
                    continue
                to_run.append(TrialPlan(
                    task=e.task, agent_name=cfg.agent, agent_kwargs=dict(cfg.agent_kwargs),
                    model=cfg.model, backend=self.backend, attempt=attempt, trial_id=tid,
                    trial_dir=tp.root, job_id=self.job_id, job_dir=self.job_dir, options=opts))
        return to_run, done

    def _should_rerun(self, old: TrialResult) -> bool:
        """SPEC §8: genuine scores never re-run; cancelled and infra errors do; task errors
        only with ``--retry-errors``."""
        if old.outcome in (Outcome.COMPLETED, Outcome.STOPPED):
            return False
        if old.outcome is Outcome.CANCELLED:
            return True
        if old.error is not None and old.error.category is Category.TASK:
            return self.retry_errors
        return True

    def _config_error(self, tid: str, e: _Entry, attempt: int, tp) -> TrialResult:
        from cairn.store import TrialStore, move_attempt_aside

        move_attempt_aside(tp)
        result = _config_error_result(tid, e.name, e, self.config, self.backend, attempt)
        TrialStore(tp).create().write_result(result)
        self.emit(f"[{e.name}] ERRORED config_error: {e.error.splitlines()[0] if e.error else ''}")
        return result

    # ---- running ------------------------------------------------------------------------------
    async def run_one(self, plan: TrialPlan) -> TrialResult:
        """Run one trial with automatic retries of infra errors (SPEC §6), attempts kept."""
        from cairn.store import TrialPaths, move_attempt_aside
        from cairn.trial import run_trial

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
            self.emit(f"[{plan.task.name}] infra error {result.error.kind.value}; retrying in "
                      f"{delay:g} s (run {runs + 1} of {self.config.max_retries + 1})")
            await asyncio.sleep(delay)
            delay *= 2

    def record(self, result: TrialResult) -> None:
        from cairn.store import write_summary

        self.results[result.trial_id] = result
        self.spent_usd += result.cost_usd or 0.0
        if result.error is not None and result.error.kind is ErrorKind.MODEL_AUTH_FAILED:
            self.stopped_by = "model_auth_failed"
        if self.config.max_cost_usd is not None and self.spent_usd >= self.config.max_cost_usd:
            self.stopped_by = self.stopped_by or "max_cost"
        write_summary(self.job_dir, self.summary())

    def summary(self) -> JobSummary:
        return summarize_job(list(self.results.values()), self.declared_steps)

    def write_job_json(self) -> None:
        from cairn.store import write_job_json

        cfg = self.config.model_dump(mode="json")
        write_job_json(self.job_dir, {"job_name": self.job_dir.name, "cairn_version": __version__,
                                      "backend": self.backend, "config": cfg,
                                      "engine_version": self.engine_version()})

    def engine_version(self) -> str | None:
        if self.backend != "docker":
            return None
        try:
            import docker

            return docker.from_env(timeout=5).version().get("Version")
        except Exception:  # noqa: BLE001 - recorded when known, never fatal
            return None


async def iter_trials(config: JobConfig, *, job_dir: Path | None = None, resume: bool = False,
                      retry_errors: bool = False, on_event: EventSink | None = None,
                      on_start: Callable[[int, int], None] | None = None
                      ) -> AsyncIterator[TrialResult]:
    """Run a job and yield each :class:`TrialResult` as it finishes (for training loops).

    Results already final in a resumed job are yielded first. At most ``config.n_concurrent``
    trials run at once; an error in one trial never cancels a sibling; a ``model_auth_failed``
    trial or ``max_cost_usd`` stops starting new trials (the rest are recorded ``cancelled``).

    Args:
        config: the job config.
        job_dir: an existing job folder (resume); default ``jobs_dir/job_name``.
        resume: re-use finished trials of the job (SPEC §8 resume rules).
        retry_errors: with ``resume``, also re-run task-category errors.
        on_event: receives human-readable event lines.
        on_start: called once with (trials to run, trials already final).

    Raises:
        UsageError: no task matched, the job is locked by another process, or the backend of a
            resumed job differs.
    """
    from cairn.lock import JobLock, JobLockedError

    job = _Job(config, job_dir=job_dir, resume=resume, retry_errors=retry_errors,
               on_event=on_event)
    job.backend = _resolve_backend(config.backend)
    if job.paths.job_json.exists() and not resume:
        raise UsageError(f"job folder {job.job_dir} exists; use `cairn resume {job.job_dir}` "
                         "or another --job-name")
    if resume and job.paths.job_json.exists():
        from cairn.store import read_json

        previous = read_json(job.paths.job_json).get("backend")
        if previous and previous != job.backend:
            raise UsageError(f"job {job.job_dir.name} ran on backend {previous!r}; refusing to "
                             f"resume it on {job.backend!r} (pass -e {previous})")
    entries = discover_tasks(config)
    job.job_dir.mkdir(parents=True, exist_ok=True)
    try:
        lock = JobLock(job.job_dir)
        lock.acquire()
    except JobLockedError as exc:
        raise UsageError(str(exc)) from exc
    try:
        _clean_own_leftovers(job)
        job.write_job_json()
        plans, done = job.plan(entries)
        if on_start:
            on_start(len(plans), len(done))
        for r in done:
            job.record(r)
            yield r
        queue: asyncio.Queue[TrialResult | None] = asyncio.Queue()
        producer = asyncio.create_task(_run_all(job, plans, queue))
        try:
            while True:
                item = await queue.get()
                if item is None:
                    break
                yield item
            await producer
        finally:
            if not producer.done():
                producer.cancel()
                try:
                    await producer
                except (asyncio.CancelledError, Exception):  # noqa: BLE001
                    pass
            write_summary_safely(job)
    finally:
        lock.release()


def _resolve_backend(name: str) -> str:
    """``auto`` → docker or local (SPEC §3.3); a named backend is checked against the registry.

    Raises:
        UsageError: an unknown backend name.
    """
    from cairn.sandbox import BACKEND_NAMES

    if name == "auto":
        from cairn.sandbox.auto import resolve_backend

        return resolve_backend(name)
    if name not in BACKEND_NAMES:
        raise UsageError(f"unknown sandbox backend {name!r}; use auto, "
                         + ", ".join(BACKEND_NAMES))
    return name


def write_summary_safely(job: _Job) -> None:
    from cairn.store import write_summary

    try:
        write_summary(job.job_dir, job.summary())
    except Exception as exc:  # noqa: BLE001 - the trials' own files are already on disk
        log.warning("could not write summary.json: %s", exc)


def _clean_own_leftovers(job: _Job) -> None:
    """SPEC §3: a run or resume first removes its own job's left-over sandboxes."""
    from cairn.clean import clean

    try:
        report = clean(job=job.job_id, own_job_dir=job.job_dir)
    except Exception as exc:  # noqa: BLE001 - no engine reachable: nothing of ours to clean there
        log.info("left-over check skipped: %s", exc)
        return
    if report.removed:
        job.emit(f"removed {report.removed} left-over resource(s) of job {job.job_id}")


async def _run_all(job: _Job, plans: list[TrialPlan], queue: asyncio.Queue) -> None:
    sem = asyncio.Semaphore(job.config.n_concurrent)

    async def one(plan: TrialPlan) -> None:
        async with sem:
            if job.stopped_by:
                result = _cancelled_result(plan, job.stopped_by)
                from cairn.store import TrialPaths, TrialStore, move_attempt_aside

                move_attempt_aside(TrialPaths(plan.trial_dir))
                TrialStore(TrialPaths(plan.trial_dir)).create().write_result(result)
            else:
                result = await job.run_one(plan)
            job.record(result)
            await queue.put(result)

    try:
        async with asyncio.TaskGroup() as tg:
            for plan in plans:
                tg.create_task(one(plan))
    finally:
        await queue.put(None)


def _cancelled_result(plan: TrialPlan, why: str) -> TrialResult:
    now = datetime.now(timezone.utc)
    task = plan.task
    return TrialResult(
        trial_id=plan.trial_id, trial_name=plan.trial_name, attempt=plan.attempt,
        task=TaskRef(name=task.name, content_hash=task.content_hash),
        agent=AgentRef(name=plan.agent_name, kwargs=dict(plan.agent_kwargs)), model=plan.model,
        backend=plan.backend, outcome=Outcome.CANCELLED,
        error=ErrorInfo(kind=ErrorKind.CANCELLED, category=Category.JOB,
                        message=f"not started: the job stopped early ({why})"),
        strategy=task.config.multi_step_reward_strategy, steps_total=len(task.steps),
        started_at=now, finished_at=now,
        steps=[StepResult(index=s.index, name=s.name, source=StepSource.NOT_RUN)
               for s in task.steps])


async def arun_job(config: JobConfig, **kwargs) -> JobResult:
    """Async :func:`run_job`; same arguments as :func:`iter_trials`."""
    job_dir = kwargs.get("job_dir")
    if job_dir is None and config.job_name is None:
        config = config.model_copy(update={"job_name": default_job_name()})
    on_result = kwargs.pop("on_result", None)
    async for result in iter_trials(config, **kwargs):
        if on_result is not None:
            on_result(result)
    return read_job(Path(job_dir) if job_dir else Path(config.jobs_dir) / config.job_name)


def run_job(config: JobConfig, **kwargs) -> JobResult:
    """Run a job to its end (blocking). Arguments as :func:`iter_trials`.

    Returns:
        The :class:`JobResult` read back from the job folder.
    """
    return asyncio.run(arun_job(config, **kwargs))


def resume_job(job_dir: Path, *, retry_errors: bool = False, on_event: EventSink | None = None,
               overrides: dict | None = None) -> JobResult:
    """Resume a job from its folder: runs trials with no result.json, cancelled ones and
    infra-errored ones (``retry_errors`` adds task errors). Genuine scores are never re-run.

    Raises:
        UsageError: not a job folder, or locked by a running process.
    """
    from cairn.store import read_json

    job_dir = Path(job_dir)
    meta_path = job_dir / "job.json"
    if not meta_path.is_file():
        raise UsageError(f"{job_dir} is not a job folder (no job.json)")
    meta = read_json(meta_path)
    cfg = dict(meta["config"])
    cfg.update(overrides or {})
    cfg["backend"] = meta.get("backend") or cfg.get("backend", "auto")
    config = JobConfig.model_validate(cfg)
    return asyncio.run(arun_job(config, job_dir=job_dir, resume=True, retry_errors=retry_errors,
                                on_event=on_event))


def read_job(job_dir: Path) -> JobResult:
    """Read a job folder from disk (every result.json; the summary recomputed from them).

    Unreadable result.json files are reported through the logger, never silently skipped.
    """
    from cairn.store import iter_trial_results, read_json

    job_dir = Path(job_dir)
    results: list[TrialResult] = []
    for rf in iter_trial_results(job_dir):
        if rf.result is None:
            log.error("unreadable %s: %s", rf.path, rf.error)
            continue
        results.append(rf.result)
    declared: dict[str, list[str]] = {}
    for r in results:
        declared.setdefault(r.task.name, [s.name for s in r.steps])
    meta = job_dir / "job.json"
    stopped = None
    if meta.is_file():
        stopped = read_json(meta).get("stopped_by")
    return JobResult(job_dir=job_dir, results=results, summary=summarize_job(results, declared),
                     stopped_by=stopped)
