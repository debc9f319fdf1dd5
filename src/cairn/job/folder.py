"""The job folder (design §7, §8): its lock, what it already holds, carrying the planner's
decisions out on disk, job.json, and the left-overs of earlier runs.

Everything here writes through :mod:`cairn.results.store`; the decisions themselves come from
the pure :func:`cairn.job.planner.plan_trials`.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn import __version__
from cairn.errors import UsageError
from cairn.events import Event, EventKind, EventSink
from cairn.job.discover import config_error_result
from cairn.job.planner import ExistingTrial, FolderState, TrialAction, TrialDecision
from cairn.lock import JobLock
from cairn.plan import JobConfig, TrialPlan
from cairn.results.model import JobMeta, TrialResult

if TYPE_CHECKING:  # pragma: no cover
    from cairn.sandbox.cleanup import CleanReport
from cairn.results.store import (
    JobPaths,
    TrialPaths,
    TrialStore,
    move_attempt_aside,
    move_superseded,
    read_job_json,
    read_json,
    read_result,
    trial_dir_group,
    write_job_json,
)

log = logging.getLogger("cairn.job")

MASKED = "***"
"""What job.json holds instead of an ``--ae`` value (values given on a command line may be
secrets; ``cairn resume`` takes them again from ``--ae`` or the host environment)."""


def lock_job(paths: JobPaths, *, backend: str, resume: bool) -> tuple[JobLock, bool]:
    """Take the job's lock (creating the folder); refuse a second process or a name clash.

    Args:
        paths: the job folder.
        backend: the resolved backend of this run.
        resume: this run resumes an existing job.

    Returns:
        ``(lock, created)``: the held lock, and whether this call created the folder.

    Raises:
        UsageError: locked by another process (:class:`~cairn.errors.JobLockedError`), the
            folder holds a job and ``resume`` is false, or a resumed job ran on another backend.
    """
    # a missing or empty folder (one claimed by :func:`cairn.job.run.claim_job_dir`) is this
    # run's own: nothing of an earlier run to clean up, removed again if nothing gets written
    created = not paths.root.exists() or not any(paths.root.iterdir())
    paths.root.mkdir(parents=True, exist_ok=True)
    lock = JobLock(paths.root)
    lock.acquire()  # JobLockedError is a UsageError
    if not resume and paths.job_json.exists():
        lock.release()
        raise UsageError(f"job folder {paths.root} exists; resume it with `cairn resume "
                         f"{paths.root}` or choose another --job-name")
    if resume and paths.job_json.exists():
        previous = None
        with contextlib.suppress(OSError, ValueError, AttributeError):  # torn: rebuilt later
            previous = read_json(paths.job_json).get("backend")
        if previous and previous != backend:
            lock.release()
            raise UsageError(f"job {paths.root.name} ran on backend {previous!r}; refusing to "
                             f"resume it on {backend!r} (pass -e {previous})")
    return lock, created


def undo_empty(paths: JobPaths, created: bool) -> None:
    """Remove a job folder this run created when it stopped before writing anything."""
    if created and paths.root.is_dir() and {p.name for p in paths.root.iterdir()} <= {"lock"}:
        with contextlib.suppress(OSError):
            (paths.root / "lock").unlink()
            paths.root.rmdir()


def clean_own_leftovers(paths: JobPaths, emit: EventSink,
                        clean: Callable[..., CleanReport] | None = None) -> None:
    """design §3: a run or resume first removes its own job's left-over sandboxes.

    Args:
        paths: the job folder.
        emit: receives the notice of what was removed.
        clean: the clean-up to run (default :func:`cairn.sandbox.cleanup.clean`, this
            machine; an executor passes its own, e.g. every node of a Ray cluster).
    """
    if clean is None:
        from cairn.sandbox.cleanup import clean as clean_here

        clean = clean_here
    job_id = paths.root.name
    try:
        report = clean(job=job_id, own_job_dir=paths.root)
    except Exception as exc:  # noqa: BLE001 - cleaning is best-effort; `cairn clean` remains
        log.warning("could not clean left-overs of job %s: %s", job_id, exc)
        return
    n = len(report.containers) + len(report.networks) + len(report.folders)
    if n:
        emit(Event(EventKind.JOB, f"removed {n} left-over resource(s) of an earlier run of job "
                   f"{job_id}"))


def scan_folder(paths: JobPaths) -> FolderState:
    """Read what the job folder holds, for :func:`~cairn.job.planner.plan_trials`.

    Every trial folder is listed; the result.json of a finished one is read (an unreadable one
    is recorded with its reason, and so re-run).
    """
    by_name: dict[str, ExistingTrial] = {}
    by_prefix: dict[str, list[str]] = {}
    for tp in paths.trial_dirs():
        name = tp.root.name
        by_prefix.setdefault(trial_dir_group(name), []).append(name)
        if not tp.finished:
            by_name[name] = ExistingTrial(name)
            continue
        try:
            by_name[name] = ExistingTrial(name, result=read_result(tp.result_json))
        except (OSError, ValueError) as exc:
            by_name[name] = ExistingTrial(name, unreadable=str(exc))
    return FolderState(by_name=by_name, by_prefix=by_prefix)


def apply_decisions(paths: JobPaths, config: JobConfig, decisions: Sequence[TrialDecision], *,
                    backend: str, emit: EventSink) -> tuple[list[TrialPlan], list[TrialResult]]:
    """Carry the decisions out: move superseded folders aside, write ``config_error`` results
    of invalid tasks, and build the plans of the trials to run.

    Returns:
        ``(plans to run, results already final)``, each in decision order.
    """
    opts = config.run_options()
    plans: list[TrialPlan] = []
    done: list[TrialResult] = []
    for d in decisions:
        e = d.entry
        if d.action is TrialAction.KEEP:
            assert d.kept is not None
            done.append(d.kept)
            continue
        tp = TrialPaths(paths.trials_dir / d.folder)
        if d.unreadable:
            why = (d.unreadable.splitlines() or ["unreadable"])[0][:200]
            emit(Event(EventKind.JOB, f"[{e.name}] unreadable {tp.result_json} ({why}); "
                       f"re-running attempt {d.attempt}", task=e.name))
        for name in d.superseded:
            _supersede(TrialPaths(paths.trials_dir / name), tp, d, emit)
        if d.action is TrialAction.INVALID:
            move_attempt_aside(tp)
            result = config_error_result(e, config, backend=backend, attempt=d.attempt,
                                         trial_id=d.trial_id)
            TrialStore(tp).create().write_result(result)
            first = (e.error or "").splitlines()[0] if e.error else ""
            emit(Event(EventKind.VERDICT, f"[{e.name}] ERRORED config_error: {first}",
                       task=e.name, trial_id=d.trial_id))
            done.append(result)
            continue
        assert e.task is not None
        plans.append(TrialPlan(
            task=config.effective_task(e.task), agent_name=config.agent,
            agent_kwargs=dict(config.agent_kwargs),
            model=config.model, backend=backend, attempt=d.attempt, trial_id=d.trial_id,
            trial_dir=tp.root, job_id=paths.root.name, job_dir=paths.root, options=opts,
            source=e.source))
    return plans, done


def _supersede(old: TrialPaths, new: TrialPaths, d: TrialDecision, emit: EventSink) -> None:
    """A trial folder of the same (task, attempt) under another id: the task changed since
    (design §8). Reported, and moved into the new trial's ``attempts/`` (never deleted)."""
    was = "?"
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        was = str(read_json(old.config_json)["task"]["content_hash"])[:12]
    emit(Event(EventKind.JOB, f"[{d.entry.name}] task changed since the last run (content "
               f"{was} → {d.entry.content_hash[:12]}); attempt {d.attempt} re-runs as trial "
               f"{new.root.name}, the old folder {old.root.name} is kept under its attempts/",
               task=d.entry.name))
    move_superseded(old, new)


def write_job_meta(paths: JobPaths, config: JobConfig, *, backend: str,
                   engine_version: str | None, started_at: datetime,
                   stopped_by: str | None, finished: bool = False,
                   sources: list[dict] | None = None) -> None:
    """Write job.json (:class:`~cairn.results.model.JobMeta`): the resolved config with
    ``--ae`` values masked, versions, why the job stopped, and the resolved datasets and
    repositories (``sources``)."""
    cfg = config.model_dump(mode="json")
    cfg["agent_env"] = {k: MASKED for k in config.agent_env}
    cfg["verifier_env"] = {k: MASKED for k in config.verifier_env}
    write_job_json(paths.root, JobMeta(
        job_name=paths.root.name, cairn_version=__version__, backend=backend,
        engine_version=engine_version, config=cfg, stopped_by=stopped_by,
        started_at=started_at, finished_at=datetime.now(UTC) if finished else None,
        sources=list(sources or [])))


def resume_config(job_dir: Path, *, agent_env: Mapping[str, str] | None = None,
                  environ: Mapping[str, str] | None = None,
                  overrides: Mapping[str, Any] | None = None,
                  emit: EventSink | None = None) -> JobConfig:
    """The config of an existing job, from its job.json, ready to resume.

    ``--ae`` values are masked in job.json; each is taken from ``agent_env``, else from the
    host environment variable of the same name. A job.json that cannot be read (torn by a
    power loss) is rebuilt from the trials' own config.json files — the tasks, agent, model,
    backend and attempts they show — and ``emit`` receives a ``warning`` event saying so
    (the resumed run rewrites job.json).

    Args:
        job_dir: the job folder.
        agent_env: ``--ae`` values given again.
        environ: the host environment (default ``os.environ``).
        overrides: config fields to change (e.g. ``n_concurrent``).
        emit: receives the event naming a job.json that could not be read.

    Raises:
        UsageError: not a job folder (no job.json, or an unreadable one and no readable trial
            config.json to rebuild it from), or a masked ``--ae`` value is not available.
    """
    meta_path = JobPaths(Path(job_dir)).job_json
    if not meta_path.is_file():
        raise UsageError(f"{job_dir} is not a job folder (no job.json)")
    try:
        meta = read_job_json(Path(job_dir))
        cfg = dict(meta.config)
        backend: str | None = meta.backend
    except (OSError, ValueError, KeyError, TypeError) as exc:
        why = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        backend, cfg = _config_from_trials(Path(job_dir), why)
        if emit is not None:
            emit(Event(EventKind.WARNING, f"{meta_path} is unreadable ({why}); the job's config "
                       f"is rebuilt from its trials' config.json ({len(cfg['paths'])} task(s), "
                       f"agent {cfg['agent']!r}, {cfg['attempts']} attempt(s)); job.json is "
                       "rewritten"))
    environ = os.environ if environ is None else environ
    given = dict(agent_env or {})
    env: dict[str, str] = {}
    missing = []
    for k, v in dict(cfg.get("agent_env") or {}).items():
        if k in given:
            env[k] = given.pop(k)
        elif v != MASKED:
            env[k] = v
        elif k in environ:
            env[k] = environ[k]
        else:
            missing.append(k)
    if missing:
        raise UsageError("the job's agent env values are not stored; give them again with "
                         + " ".join(f"--ae {k}=..." for k in missing)
                         + " (or set them in the environment)")
    cfg["agent_env"] = {**env, **given}
    # --ve values are masked the same way; each comes back from the host environment
    ve = dict(cfg.get("verifier_env") or {})
    lost = [k for k, v in ve.items() if v == MASKED and k not in environ]
    if lost:
        raise UsageError("the job's verifier env (--ve) values are not stored; set them in the "
                         "environment to resume: " + ", ".join(lost))
    cfg["verifier_env"] = {k: (environ[k] if v == MASKED else v) for k, v in ve.items()}
    cfg["backend"] = backend or cfg.get("backend", "auto")
    cfg.update(overrides or {})
    try:
        return JobConfig.model_validate(cfg)
    except ValueError as exc:
        raise UsageError(f"{meta_path}: {exc}") from None


def _config_from_trials(job_dir: Path, why: str) -> tuple[str | None, dict[str, Any]]:
    """(backend, config) of a job whose job.json is unreadable, from its trials' config.json.

    Raises:
        UsageError: no trial config.json can be read either.
    """
    rows = []
    for trial in JobPaths(job_dir).trial_dirs():
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            c = read_json(trial.config_json)
            rows.append((str(c["task"]["path"]), c["agent"]["name"], c["agent"].get("kwargs") or {},
                         c.get("model"), c["backend"], int(c["attempt"]), c.get("options") or {}))
    if not rows:
        raise UsageError(f"{job_dir / 'job.json'}: unreadable job.json ({why}) and no trial "
                         "config.json to rebuild it from")
    first = rows[0]
    opts = first[6]
    cfg = {"paths": sorted({r[0] for r in rows}), "agent": first[1], "agent_kwargs": first[2],
           "model": first[3], "backend": first[4], "attempts": max(r[5] for r in rows),
           "job_name": job_dir.name, "jobs_dir": str(job_dir.parent),
           "timeout_multiplier": opts.get("timeout_multiplier", 1.0),
           "verify": opts.get("verify", True), "hardened_verify": opts.get("hardened_verify", False)}
    # what the job changed in its tasks (it enters the trial ids) and its specific multipliers
    cfg["extra_instructions"] = list(opts.get("extra_instructions") or [])
    cfg["artifacts"] = list(opts.get("extra_artifacts") or [])
    for key, value in dict(opts.get("resource_overrides") or {}).items():
        cfg[f"override_{key}"] = value
    for key, value in dict(opts.get("timeout_multipliers") or {}).items():
        cfg[f"{key}_timeout_multiplier"] = value
    return first[4], cfg
