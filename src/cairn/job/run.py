"""Jobs: every (task × attempt) of a config, concurrently, with retries and resume (design §8).

Public API (what the CLI calls, and what training loops use):

- :func:`iter_trials` — async iterator yielding each :class:`TrialResult` as it finishes.
- :func:`run_job` / :func:`arun_job` — run a job to its end, return a :class:`JobResult`.
- :func:`resume_job` — run the trials of an existing job that have no genuine score.
- :func:`read_job` — read a job folder (works on folders copied from another machine).

Example (a training loop consuming rewards as they come)::

    async for result in iter_trials(JobConfig(paths=("tasks/",), agent="oracle", attempts=4)):
        learner.update(result.task.name, result.reward)
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from cairn import __version__
from cairn.errors import JobStorageFullError, UsageError
from cairn.events import EventKind, JobObserver
from cairn.job.discover import check_templates, discover_inputs, task_warning_lines
from cairn.job.executors import Executor, get_executor
from cairn.job.folder import (
    apply_decisions,
    check_jobs_dir,
    clean_own_leftovers,
    lock_job,
    resume_config,
    scan_folder,
    undo_empty,
)
from cairn.job.planner import TrialAction, plan_trials
from cairn.job.preflight import artifact_warnings, refuse_unsupported
from cairn.job.runner import JobRun, run_all
from cairn.plan import JobConfig
from cairn.results.model import JobStop, JobSummary, Outcome, TrialResult
from cairn.results.store import (
    iter_trial_results,
    read_job_json,
    remove_partial_installs,
    trial_dir_name,
)
from cairn.results.summary import summarize_job

log = logging.getLogger("cairn.job")


@dataclass
class JobResult:
    """What a finished job returns.

    Attributes:
        job_dir: the job folder.
        results: the latest result of every trial of the job (resumed ones included).
        summary: the job summary (also in summary.json).
        stopped_by: why the job stopped early (:class:`~cairn.results.model.JobStop`), or
            ``None``.
    """

    job_dir: Path
    results: list[TrialResult]
    summary: JobSummary
    stopped_by: JobStop | None = None

    @property
    def exit_code(self) -> int:
        """design §9: 0 when every trial is completed or stopped, else 1."""
        ok = (Outcome.COMPLETED, Outcome.STOPPED)
        return 0 if self.results and all(r.outcome in ok for r in self.results) else 1


def default_job_name(now: datetime | None = None) -> str:
    """``YYYY-MM-DD__HH-MM-SS`` of the start time (local time, as Harbor names jobs)."""
    return (now or datetime.now()).strftime("%Y-%m-%d__%H-%M-%S")


_CREATED_JOBS_DIRS: set[Path] = set()
"""Jobs folders :func:`claim_job_dir` created (removed again with a job that never began)."""


def _unclaim(target: Path) -> None:
    """Remove an empty job folder of a job that never began (and the jobs folder the claim
    created for it, when now empty)."""
    with contextlib.suppress(OSError):
        target.rmdir()
        parent = target.parent.absolute()
        if parent in _CREATED_JOBS_DIRS:
            parent.rmdir()
            _CREATED_JOBS_DIRS.discard(parent)


def claim_job_dir(jobs_dir: Path, now: datetime | None = None) -> Path:
    """Create a fresh job folder under the default name, exclusively.

    Several processes started in the same second into one ``jobs_dir`` each get their own
    folder: the first takes ``YYYY-MM-DD__HH-MM-SS``, the next ``…-2``, ``…-3`` and so on
    (``mkdir`` is atomic, so two processes never take the same name). A name the user gave
    with ``--job-name`` is never claimed this way: there the job lock refuses a second process.

    Args:
        jobs_dir: the folder holding job folders (created if missing).
        now: the start time (default: now).

    Returns:
        The new, empty job folder.

    Raises:
        UsageError: ``jobs_dir`` is refused by :func:`check_jobs_dir`, or no free name is left.
    """
    jobs_dir = Path(jobs_dir)
    check_jobs_dir(jobs_dir)
    if not jobs_dir.is_dir():
        jobs_dir.mkdir(parents=True, exist_ok=True)
        _CREATED_JOBS_DIRS.add(jobs_dir.absolute())
    base = default_job_name(now)
    for n in range(1, 10_000):
        candidate = jobs_dir / (base if n == 1 else f"{base}-{n}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        return candidate
    raise UsageError(f"{jobs_dir}: no free job name for {base}; give one with --job-name")


def _job_dir(config: JobConfig, job_dir: Path | None) -> Path:
    if job_dir is not None:
        return Path(job_dir)
    if config.job_name is None:
        return claim_job_dir(Path(config.jobs_dir))
    check_jobs_dir(Path(config.jobs_dir))
    return Path(config.jobs_dir) / config.job_name


async def iter_trials(
    config: JobConfig,
    *,
    job_dir: Path | None = None,
    resume: bool = False,
    retry_errors: bool = False,
    observer: JobObserver | None = None,
) -> AsyncIterator[TrialResult]:
    """Run a job and yield each :class:`TrialResult` as it finishes (for training loops).

    Results already final in a resumed job are yielded first. At most ``config.n_concurrent``
    trials run at once; an error in one trial never cancels a sibling; a ``model_auth_failed``
    trial or ``max_cost_usd`` stops starting new trials (those are recorded ``cancelled``).
    Cancelling the iteration (Ctrl-C) cancels running trials cleanly (sandboxes removed,
    results ``cancelled``) and records the trials not started as ``cancelled``.

    Args:
        config: the job config.
        job_dir: the job folder; default ``config.jobs_dir / config.job_name`` (the job name
            defaults to the start time).
        resume: use an existing job folder: keep its genuine scores (design §8 resume rules).
        retry_errors: with ``resume``, also re-run task-category errors.
        observer: receives the job's :class:`~cairn.events.Event` lines (also written to
            job.log), the plan's size (``planned``), each trial's start and end, and each
            result before it is yielded (:class:`~cairn.events.JobObserver`).

    Yields:
        Each trial's result, as it finishes.

    Raises:
        UsageError: before anything runs — an unknown executor (or its extra missing, or its
            cluster not answering), no task matched, an unknown backend, an
            unresolved ``${VAR}`` template, the job is locked by another process, the folder
            exists without ``resume``, or a resumed job ran on another backend.
    """
    try:
        executor = get_executor(config)
        executor.open()
    except UsageError:
        if job_dir is not None and not resume:  # a folder the CLI claimed is not left behind
            _unclaim(Path(job_dir))
        raise
    try:
        inner = _iter_trials(
            executor, config, job_dir=job_dir, resume=resume, retry_errors=retry_errors, observer=observer
        )
        async with contextlib.aclosing(inner) as results:
            async for r in results:
                yield r
    finally:
        executor.close()  # the job's model relay closes with its JobServices (run_all)


async def _iter_trials(
    executor: Executor,
    config: JobConfig,
    *,
    job_dir: Path | None,
    resume: bool,
    retry_errors: bool,
    observer: JobObserver | None,
) -> AsyncGenerator[TrialResult, None]:
    """:func:`iter_trials` with its executor open."""
    target = _job_dir(config, job_dir)
    if config.job_name is None and job_dir is None:  # a default name, claimed exclusively
        config = config.model_copy(update={"job_name": target.name})
    try:
        backend = executor.resolve_backend(config.backend)
        config = config.model_copy(
            update={"paths": tuple(Path(p).absolute() for p in config.paths), "backend": backend}
        )
        job = JobRun(
            config,
            backend,
            target,
            resume=resume,
            retry_errors=retry_errors,
            observer=observer,
            executor=executor,
        )
        observer = job.observer
        # datasets and --repo are fetched in a thread (minutes, for a large one) so that
        # Ctrl-C is still heard; its progress lines reach the observer on the loop's thread
        loop = asyncio.get_running_loop()

        def fetch_progress(line: str) -> None:
            loop.call_soon_threadsafe(job.notice, line)

        inputs = await asyncio.to_thread(
            discover_inputs, config, resume_dir=job.job_dir if resume else None, on_event=fetch_progress
        )
        entries = inputs.entries
        job.sources = inputs.sources
        if config.start_step or config.from_trial or config.snapshot_steps:  # design §4.7
            from cairn.trial.snapshot import check_start_options

            check_start_options(config, [e.task for e in entries], backend)
    except UsageError:
        if not resume:  # an empty folder claimed for a default name is not left behind
            _unclaim(target)
        raise
    lock, created = lock_job(job.paths, backend=backend, resume=resume)
    begun = False
    try:
        remove_partial_installs(job.paths)  # a driver that died installing a remote trial
        for e in entries:
            job.declared_steps[e.name] = list(e.steps)
        decisions = plan_trials(
            config,
            entries,
            backend=backend,
            folder=scan_folder(job.paths),
            retry_errors=retry_errors,
            folder_name=trial_dir_name,
        )
        try:
            check_templates(
                (d.entry.task for d in decisions if d.action is TrialAction.RUN and d.entry.task is not None),
                verifier_env=config.verifier_env,
            )
        except UsageError:
            undo_empty(job.paths, created)
            raise
        # capabilities, once per task before any trial is queued (config_error at once)
        decisions, refused = refuse_unsupported(decisions, config, backend)
        begun = True
        job.open_log()
        job.write_job_json()  # first: a job killed from here on can be resumed
        job.notice(
            f"job {job.job_id}: {'resumed' if resume else 'started'} "
            f"(cairn {__version__}, agent {config.agent}"
            + (f", model {config.model}" if config.model else "")
            + f", backend {backend}"
            + (f", executor {executor.name})" if executor.name != "local" else ")")
        )
        for note in inputs.notes:
            job.notice(str(note), EventKind.WARNING if note.warning else EventKind.JOB)
        for line in refused:
            job.notice(line, EventKind.WARNING)
        # each task's validation warnings, once per job, before the first trial (issue 27)
        for line in task_warning_lines(
            d.entry for d in decisions if d.action in (TrialAction.RUN, TrialAction.INVALID)
        ):
            job.notice(line, EventKind.WARNING)
        if config.artifacts:  # the task lint's artifact rules, for the job's --artifact paths
            to_run = {
                d.entry.name: d.entry.task
                for d in decisions
                if d.action is TrialAction.RUN and d.entry.task is not None
            }
            for line in artifact_warnings(config.artifacts, to_run.items()):
                job.notice(f"warning: {line}", EventKind.WARNING)
        if not created:  # a folder this run just created has no earlier run to clean up after
            clean_own_leftovers(job.paths, job.emit, executor.clean)
        if resume:
            _report_torn_summary(job)
        plans, done = apply_decisions(job.paths, config, decisions, backend=backend, emit=job.emit)
        observer.planned(len(plans), len(done))
        for r in done:
            job.record(r, write=False)
        job.write_summary()
        for r in done:
            observer.result(r)
            yield r
        try:
            async with contextlib.aclosing(run_all(job, plans)) as results:
                async for r in results:  # a consumer that stops early cancels the rest cleanly
                    observer.result(r)
                    yield r
        except (OSError, BaseExceptionGroup) as exc:
            full = _storage_full(exc)
            if full is None:
                raise
            job.stopped_by = JobStop.STORAGE_FULL
            raise JobStorageFullError(
                f"the filesystem holding {job.job_dir} is full ({full}); the job stopped, "
                "results already written are kept; free space and run "
                f"`cairn resume {job.job_dir}`"
            ) from None
    finally:
        if begun:
            await _settle_sandboxes(job)
            job.write_summary()
            with contextlib.suppress(Exception):
                job.write_job_json(finished=True)
            job.close_log()
        lock.release()


def _storage_full(exc: BaseException) -> OSError | None:
    """The ENOSPC/EDQUOT error inside ``exc`` (an exception group is searched), else None."""
    import errno

    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = _storage_full(inner)
        if found is not None:
            return found
    if exc.__context__ is not None and exc.__context__ is not exc and isinstance(exc.__context__, OSError):
        return _storage_full(exc.__context__)
    return None


def _report_torn_summary(job: JobRun) -> None:
    """Say so when a resumed job's summary.json cannot be read (it is rebuilt from the trials'
    results right after)."""
    from cairn.results.store import read_summary

    if job.paths.summary_json.exists():
        try:
            read_summary(job.job_dir)
        except (OSError, ValueError) as exc:
            why = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
            job.notice(
                f"{job.paths.summary_json} is unreadable ({why}); rebuilt from the trials' result.json files",
                EventKind.WARNING,
            )


async def _settle_sandboxes(job: JobRun) -> None:
    """Return only once no sandbox of the job is left (removals the engine was still doing
    when a trial ended: an early-stopping consumer, Ctrl-C, SIGTERM); report any that could
    not be removed within the bound (``cairn clean`` removes them later)."""
    from cairn.sandbox.cleanup import settle_job

    try:
        failed = await asyncio.shield(asyncio.to_thread(settle_job, job.job_dir, job.backend))
    except Exception as exc:  # noqa: BLE001 - the trials' results are already on disk
        failed = [f"check failed: {exc}"]
    for line in failed:
        job.notice(
            f"could not remove a sandbox of job {job.job_id}: {line}; "
            "`cairn clean` removes it once the engine allows",
            EventKind.WARNING,
        )


async def arun_job(config: JobConfig, *, job_dir: Path | None = None, **kwargs: Any) -> JobResult:
    """Run a job to its end (async). Arguments as :func:`iter_trials`.

    Returns:
        The :class:`JobResult` read back from the job folder.

    Raises:
        UsageError: as :func:`iter_trials`.
    """
    target = _job_dir(config, job_dir)
    if config.job_name is None:
        config = config.model_copy(update={"job_name": target.name})
    seen: list[TrialResult] = []
    async for result in iter_trials(config, job_dir=target, **kwargs):
        seen.append(result)
    job = read_job(target)
    # a trial whose folder could not be written at all (issue #29) still counts: its
    # internal error reaches the exit code and the summary, not only job.log
    on_disk = {r.trial_id for r in job.results}
    lost = [r for r in seen if r.trial_id not in on_disk]
    if lost:
        results = [*job.results, *lost]
        declared: dict[str, list[str]] = {}
        for r in results:
            declared.setdefault(r.task.name, [s.name for s in r.steps])
        job = dataclasses.replace(job, results=results, summary=summarize_job(results, declared))
    return job


def run_job(config: JobConfig, **kwargs: Any) -> JobResult:
    """Run a job to its end (blocking). Arguments as :func:`arun_job`.

    Returns:
        The :class:`JobResult` read back from the job folder.

    Raises:
        UsageError: as :func:`iter_trials`.
    """
    return asyncio.run(arun_job(config, **kwargs))


def resume_job(
    job_dir: Path,
    *,
    retry_errors: bool = False,
    observer: JobObserver | None = None,
    overrides: Mapping[str, Any] | None = None,
    agent_env: Mapping[str, str] | None = None,
) -> JobResult:
    """Resume a job from its folder (blocking): runs trials with no result.json, cancelled ones
    and infra-errored ones (``retry_errors`` adds task errors). Genuine scores never re-run;
    a task whose content changed since is reported and re-run under a new trial id.

    Args:
        job_dir: the job folder.
        retry_errors: also re-run task-category errors.
        observer: receives events and results (:class:`~cairn.events.JobObserver`).
        overrides: config fields to change (e.g. ``{"n_concurrent": 8}``).
        agent_env: ``--ae`` values (job.json keeps them masked).

    Returns:
        The :class:`JobResult`.

    Raises:
        UsageError: not a job folder, locked by a running process, or as :func:`iter_trials`.
    """
    config = resume_config(
        job_dir,
        agent_env=agent_env,
        overrides=overrides,
        emit=observer.event if observer is not None else None,
    )
    return asyncio.run(
        arun_job(config, job_dir=Path(job_dir), resume=True, retry_errors=retry_errors, observer=observer)
    )


def read_job(job_dir: Path) -> JobResult:
    """Read a job folder from disk: every trial's result.json, the summary recomputed from
    them (so it works on folders copied from another machine).

    Unreadable result.json files are reported through the logger, never silently skipped.

    Args:
        job_dir: the job folder.

    Returns:
        The :class:`JobResult`.
    """
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
    stopped = None
    if (job_dir / "job.json").is_file():
        with contextlib.suppress(OSError, ValueError):
            stopped = read_job_json(job_dir).stopped_by
    return JobResult(
        job_dir=job_dir, results=results, summary=summarize_job(results, declared), stopped_by=stopped
    )
