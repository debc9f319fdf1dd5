"""The job folder (design §7, §8): its lock, what it already holds, carrying the planner's
decisions out on disk, job.json, and the left-overs of earlier runs.

Everything here writes through :mod:`cairn.results.store`; the decisions themselves come from
the pure :func:`cairn.job.planner.plan_trials`.
"""

from __future__ import annotations

import contextlib
import json
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
from cairn.results.model import JobMeta, JobStop, TrialResult

if TYPE_CHECKING:  # pragma: no cover
    from cairn.sandbox.cleanup import CleanReport
from cairn.results.store import (
    JobPaths,
    TrialPaths,
    TrialStore,
    move_attempt_aside,
    move_superseded,
    read_config,
    read_job_json,
    read_result,
    trial_dir_group,
    write_job_json,
)

log = logging.getLogger("cairn.job")

MASKED = "***"
"""What job.json holds instead of an ``--ae`` value (values given on a command line may be
secrets; ``cairn resume`` takes them again from ``--ae`` or the host environment)."""


def check_jobs_dir(jobs_dir: Path) -> None:
    """Refuse a jobs folder (``-o/--jobs-dir``) that cannot hold job folders, before anything
    is created: a file, a symlink to a file, or a dangling symlink. A missing path (created
    later) and a folder — also one reached through a symlink — are accepted.

    Args:
        jobs_dir: the folder holding job folders.

    Raises:
        UsageError: ``jobs_dir`` exists and is not a folder, or is a symlink whose target is
            missing or not a folder (the message names the link's target).
    """
    path = Path(jobs_dir)
    if path.is_dir() or not os.path.lexists(path):
        return
    if path.is_symlink():
        target = os.readlink(path)
        if path.exists():
            raise UsageError(
                f"the jobs folder {path} (-o/--jobs-dir) is a symlink to {target}, "
                "a file, not a folder; point it at a folder or choose another -o"
            )
        raise UsageError(
            f"the jobs folder {path} (-o/--jobs-dir) is a dangling symlink: its "
            f"target {target} does not exist; create that folder or choose "
            "another -o"
        )
    raise UsageError(f"the jobs folder {path} (-o/--jobs-dir) exists and is not a folder; choose another -o")


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
            folder holds a job (or files but no job: :func:`not_a_job_error`) and ``resume``
            is false, or a resumed job ran on another backend.
    """
    # a missing or empty folder (one claimed by :func:`cairn.job.run.claim_job_dir`) is this
    # run's own: nothing of an earlier run to clean up, removed again if nothing gets written
    created = not paths.root.exists() or not any(paths.root.iterdir())
    if not resume and not created and _foreign(paths):  # a Harbor job folder, an export:
        raise not_a_job_error(paths.root)  # never written into (not even a lock file)
    paths.root.mkdir(parents=True, exist_ok=True)
    lock = JobLock(paths.root)
    lock.acquire()  # JobLockedError is a UsageError
    if not resume and paths.job_json.exists():
        lock.release()
        raise job_exists_error(paths.root)

    if resume and (refusal := backend_refusal(paths.root, backend)) is not None:
        lock.release()
        raise refusal
    return lock, created


def backend_refusal(root: Path, backend: str) -> UsageError | None:
    """The refusal of a resume of the job in ``root`` on another backend than the one it ran
    on, or ``None`` (no job.json, a torn one — rebuilt later — or the same backend)."""
    previous = None
    with contextlib.suppress(OSError, ValueError):
        previous = read_job_json(Path(root)).backend
    if previous and previous != backend:
        return UsageError(
            f"job {Path(root).name} ran on backend {previous!r}; refusing to "
            f"resume it on {backend!r} (pass -e {previous})"
        )
    return None


def _foreign(paths: JobPaths) -> bool:
    """Whether an existing folder holds files but no cairn job: no job.json, no trials/, and
    more than a run killed at its start leaves (the lock, job.log, a job.json temp file)."""
    if paths.job_json.exists() or paths.trials_dir.is_dir():
        return False
    try:
        names = {p.name for p in paths.root.iterdir()}
    except OSError:
        return False
    return any(
        n not in ("lock", "job.log") and not (n.startswith(".job.json.") and n.endswith(".tmp"))
        for n in names
    )


def not_a_job_error(root: Path) -> UsageError:
    """The refusal of a new run (or its dry run) into a folder that holds files but no cairn
    job (no job.json, no trials/): a Harbor job folder, an export, anything else."""
    return UsageError(
        f"{Path(root).absolute()} exists and is not a job folder; choose another --job-name (or -o)"
    )


def job_exists_error(root: Path) -> UsageError:
    """The refusal of a new run (or its dry run) whose job folder already holds a job."""
    root = Path(root).absolute()
    return UsageError(
        f"job folder {root} exists; resume it with `cairn resume {root}` (or "
        "--resume) or choose another --job-name"
    )


def undo_empty(paths: JobPaths, created: bool) -> None:
    """Remove a job folder this run created when it stopped before writing anything."""
    if created and paths.root.is_dir() and {p.name for p in paths.root.iterdir()} <= {"lock"}:
        with contextlib.suppress(OSError):
            (paths.root / "lock").unlink()
            paths.root.rmdir()


def clean_own_leftovers(
    paths: JobPaths, emit: EventSink, clean: Callable[..., CleanReport] | None = None
) -> None:
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
        emit(Event(EventKind.JOB, f"removed {n} left-over resource(s) of an earlier run of job {job_id}"))


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


def apply_decisions(
    paths: JobPaths, config: JobConfig, decisions: Sequence[TrialDecision], *, backend: str, emit: EventSink
) -> tuple[list[TrialPlan], list[TrialResult]]:
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
            emit(
                Event(
                    EventKind.JOB,
                    f"[{e.name}] unreadable {tp.result_json} ({why}); re-running attempt {d.attempt}",
                    task=e.name,
                )
            )
        for name in d.superseded:
            _supersede(TrialPaths(paths.trials_dir / name), tp, d, config, backend, emit)
        if d.action is TrialAction.INVALID:
            move_attempt_aside(tp)
            result = config_error_result(e, config, backend=backend, attempt=d.attempt, trial_id=d.trial_id)
            TrialStore(tp).create().write_result(result)
            first = (e.error or "").splitlines()[0] if e.error else ""
            emit(
                Event(
                    EventKind.VERDICT,
                    f"[{e.name}] ERRORED config_error: {first}",
                    task=e.name,
                    trial_id=d.trial_id,
                )
            )
            done.append(result)
            continue
        assert e.task is not None
        plans.append(
            TrialPlan(
                task=config.effective_task(e.task),
                agent_name=config.agent,
                agent_kwargs=dict(config.agent_kwargs),
                model=config.model,
                backend=backend,
                attempt=d.attempt,
                trial_id=d.trial_id,
                trial_dir=tp.root,
                job_id=paths.root.name,
                job_dir=paths.root,
                options=opts,
                source=e.source,
            )
        )
    return plans, done


def _supersede(
    old: TrialPaths, new: TrialPaths, d: TrialDecision, config: JobConfig, backend: str, emit: EventSink
) -> None:
    """A trial folder of the same (task, attempt) under another id: the task, or an input of
    the trial id, changed since (design §8). Reported with what changed, old → new, and moved
    into the new trial's ``attempts/`` (never deleted)."""
    emit(
        Event(
            EventKind.JOB,
            f"[{d.entry.name}] {_what_changed(old, d, config, backend)}; "
            f"attempt {d.attempt} re-runs as trial {new.root.name}, the old folder "
            f"{old.root.name} is kept under its attempts/",
            task=d.entry.name,
        )
    )
    move_superseded(old, new)


_NONE = object()


def _shown(value: Any) -> str:
    return "none" if value is _NONE else _short(value)


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, sort_keys=True, default=str) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _what_changed(old: TrialPaths, d: TrialDecision, config: JobConfig, backend: str) -> str:
    """The trial-id inputs (:func:`cairn.plan.trial_id`) that differ between the old folder's
    config.json and this run, as ``what old → new`` (content hashes to 12 digits)."""
    try:
        c = read_config(old.config_json)
        opts = c.options
        was: dict[str, Any] = {
            "content": c.task.content_hash[:12],
            "agent": c.agent.name,
            "agent kwargs": dict(c.agent.kwargs or {}),
            "model": c.model,
            "backend": c.backend,
            "start step": opts.start_step,
            "from": Path(opts.fork_from).name if opts.fork_from else None,
            "extra instructions": list(opts.extra_instructions),
            "resource overrides": dict(opts.resource_overrides),
        }
    except (OSError, ValueError):
        return (
            f"the trial id changed since the last run ({old.root.name.rsplit('__', 1)[-1]} "
            f"→ {d.trial_id[:8]}; the old config.json is unreadable)"
        )
    now: dict[str, Any] = {
        "content": d.entry.content_hash[:12],
        "agent": config.agent,
        "agent kwargs": dict(config.agent_kwargs),
        "model": config.model,
        "backend": backend,
        "start step": config.start_step,
        "from": Path(config.from_trial).name if config.from_trial else None,
        "extra instructions": list(config.extra_instructions),
        "resource overrides": {
            k.removeprefix("override_"): v
            for k, v in config.task_overrides().items()
            if k.startswith("override_")
        },
    }
    diffs = [
        f"{k} {_short(was[k])} → {_short(now[k])}"
        for k in now
        if json.dumps(was[k], sort_keys=True, default=str) != json.dumps(now[k], sort_keys=True, default=str)
    ]
    if diffs and diffs[0].startswith("content "):
        head = "task changed since the last run"
    elif diffs:
        head = "the trial's options changed since the last run (the task did not)"
    else:
        return (
            f"the trial id changed since the last run ({old.root.name.rsplit('__', 1)[-1]} "
            f"→ {d.trial_id[:8]}, with the same task and options: an older cairn's ids)"
        )
    return f"{head} ({', '.join(diffs)})"


def write_job_meta(
    paths: JobPaths,
    config: JobConfig,
    *,
    backend: str,
    engine_version: str | None,
    started_at: datetime,
    stopped_by: JobStop | None,
    finished: bool = False,
    sources: list[dict[str, Any]] | None = None,
) -> None:
    """Write job.json (:class:`~cairn.results.model.JobMeta`): the resolved config with
    ``--ae`` values masked, versions, why the job stopped, and the resolved datasets and
    repositories (``sources``)."""
    cfg = config.model_dump(mode="json")
    cfg["agent_env"] = {k: MASKED for k in config.agent_env}
    cfg["verifier_env"] = {k: MASKED for k in config.verifier_env}
    write_job_json(
        paths.root,
        JobMeta(
            job_name=paths.root.name,
            cairn_version=__version__,
            backend=backend,
            engine_version=engine_version,
            config=cfg,
            stopped_by=stopped_by,
            started_at=started_at,
            finished_at=datetime.now(UTC) if finished else None,
            sources=list(sources or []),
        ),
    )


def resume_config(
    job_dir: Path,
    *,
    agent_env: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    emit: EventSink | None = None,
    verifier_env: Mapping[str, str] | None = None,
    keep_lost_verifier_env: bool = False,
) -> JobConfig:
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
        verifier_env: ``--ve`` values given again (``cairn run --resume``), over the host
            environment; keys the job has no ``--ve`` for are left out.
        overrides: config fields to change (e.g. ``n_concurrent``).
        emit: receives the event naming a job.json that could not be read.
        keep_lost_verifier_env: leave a masked ``--ve`` value that is neither given again nor
            in the host environment masked (``***``) instead of refusing it; the caller
            (:func:`resume_with_options`) refuses it after naming the options that differ.

    Raises:
        UsageError: not a job folder (no job.json, or an unreadable one and no readable trial
            config.json to rebuild it from), or a masked ``--ae`` (or, unless
            ``keep_lost_verifier_env``, ``--ve``) value is not available.
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
            emit(
                Event(
                    EventKind.WARNING,
                    f"{meta_path} is unreadable ({why}); the job's config "
                    f"is rebuilt from its trials' config.json ({len(cfg['paths'])} task(s), "
                    f"agent {cfg['agent']!r}, {cfg['attempts']} attempt(s)); job.json is "
                    "rewritten",
                )
            )
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
        raise UsageError(
            "the job's agent env values are not stored; give them again with "
            + " ".join(f"--ae {k}=..." for k in missing)
            + " (or set them in the environment)"
        )
    cfg["agent_env"] = {**env, **given}
    # --ve values are masked the same way; each comes back from the host environment
    ve = dict(cfg.get("verifier_env") or {})
    given_ve = {k: v for k, v in (verifier_env or {}).items() if k in ve}
    again = {**{k: environ[k] for k in ve if k in environ}, **given_ve}
    lost = [k for k, v in ve.items() if v == MASKED and k not in again]
    if lost and not keep_lost_verifier_env:
        raise _lost_verifier_env(lost)
    cfg["verifier_env"] = {
        k: (again.get(k, MASKED) if v == MASKED or k in given_ve else v) for k, v in ve.items()
    }
    cfg["backend"] = backend or cfg.get("backend", "auto")
    cfg.update(overrides or {})
    try:
        return JobConfig.model_validate(cfg)
    except ValueError as exc:
        raise UsageError(f"{meta_path}: {exc}") from None


def _lost_verifier_env(keys: Sequence[str]) -> UsageError:
    """The refusal of a resume whose masked ``--ve`` values ``keys`` are not available."""
    return UsageError(
        "the job's verifier env (--ve) values are not stored; set them in the "
        "environment to resume: " + ", ".join(keys)
    )


RESUME_OVERRIDES = ("n_concurrent", "max_cost_usd", "executor", "ray_address")
"""Config fields a resume may change (``cairn resume -n/--max-cost-usd/--executor/
--ray-address``); every other field is the job's own."""

_PATH_FIELDS = ("registry_path", "from_trial", "jobs_dir")


def resume_with_options(
    job_dir: Path,
    given: Mapping[str, Any],
    *,
    environ: Mapping[str, str] | None = None,
    emit: EventSink | None = None,
) -> JobConfig:
    """``cairn run --resume`` (or ``-c job.yaml --resume``): the job's stored config, as
    :func:`resume_config` gives it, checked against the options given (design §8: a resume
    re-reads the job's configuration; Harbor 0.26 refuses to resume a job folder "with a
    different config" the same way, ``harbor.job.Job._maybe_init_existing_job``).

    The given options may repeat the job's own values, and may change what ``cairn resume``
    lets change: :data:`RESUME_OVERRIDES`, ``agent_env`` (values given again, as ``--ae``) and
    the values of the job's ``verifier_env`` keys (masked in job.json). ``job_name`` and
    ``jobs_dir`` name the job. Any other difference is refused: job.json is never rewritten
    with another config.

    Args:
        job_dir: the job folder.
        given: the options of the command line and its ``-c`` files, as JobConfig keys (only
            those given; defaults are not options).
        environ: the host environment (default ``os.environ``).
        emit: receives the warning of a torn job.json (:func:`resume_config`).

    Returns:
        The config the resume runs with.

    Raises:
        UsageError: not a job folder, a masked env value not given again, or an option that
            differs from the job's (each named with the job's value and the given one).
        pydantic.ValidationError: a given option is not a JobConfig field or not valid.
    """
    given = {k: v for k, v in given.items() if k not in ("job_name", "jobs_dir")}
    overrides = {k: given.pop(k) for k in RESUME_OVERRIDES if k in given}
    agent_env = dict(given.pop("agent_env", None) or {})
    ve = dict(given.pop("verifier_env", None) or {})
    stored = resume_config(
        job_dir,
        agent_env=agent_env,
        environ=environ,
        overrides=overrides,
        emit=emit,
        verifier_env=ve,
        keep_lost_verifier_env=True,
    )
    diffs: list[str] = []
    # a --ve key the job has no --ve for differs from it (the values are secrets: masked here
    # as in job.json); named before the job's own masked values that were not given again
    for key in sorted(set(ve) - set(stored.verifier_env)):
        diffs.append(f"verifier_env.{key}: the job's none, given {MASKED}")
    wanted = JobConfig.model_validate({**stored.model_dump(), **given})
    mine, theirs = stored.model_dump(mode="json"), wanted.model_dump(mode="json")
    for k in given:
        if k not in JobConfig.model_fields:
            continue
        a, b = mine[k], theirs[k]
        if k == "paths":
            b = [str(Path(p).absolute()) for p in b]
            a = [str(Path(p).absolute()) for p in a]
        elif k in _PATH_FIELDS and a is not None and b is not None:
            a, b = str(Path(a).absolute()), str(Path(b).absolute())
        elif k == "backend" and b == "auto":
            continue  # auto picks; the lock check refuses another backend than the job's
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):  # name the keys that differ
            for sub in sorted(set(a) | set(b), key=str):
                if a.get(sub, _NONE) != b.get(sub, _NONE):
                    diffs.append(
                        f"{k}.{sub}: the job's {_shown(a.get(sub, _NONE))}, given {_shown(b.get(sub, _NONE))}"
                    )
        else:
            diffs.append(f"{k}: the job's {_short(a)}, given {_short(b)}")
    if diffs:
        raise UsageError(
            f"--resume continues {Path(job_dir)} with the config it was started with "
            f"(job.json), and the options given differ from it: {'; '.join(diffs)}. Resume "
            f"it as it is (`cairn resume {Path(job_dir)}`, or the same command without those "
            "options), or run the new options as a new job (another --job-name)"
        )
    if lost := [k for k, v in stored.verifier_env.items() if v == MASKED]:
        raise _lost_verifier_env(lost)
    return stored


def _config_from_trials(job_dir: Path, why: str) -> tuple[str | None, dict[str, Any]]:
    """(backend, config) of a job whose job.json is unreadable, from its trials' config.json.

    Raises:
        UsageError: no trial config.json can be read either.
    """
    rows = []
    for trial in JobPaths(job_dir).trial_dirs():
        with contextlib.suppress(OSError, ValueError):
            c = read_config(trial.config_json)
            rows.append(
                (
                    c.task.path,
                    c.agent.name,
                    dict(c.agent.kwargs or {}),
                    c.model,
                    c.backend,
                    c.attempt,
                    c.options.model_dump(mode="json"),
                )
            )
    if not rows:
        raise UsageError(
            f"{job_dir / 'job.json'}: unreadable job.json ({why}) and no trial config.json to rebuild it from"
        )
    first = rows[0]
    opts = first[6]
    cfg = {
        "paths": sorted({r[0] for r in rows}),
        "agent": first[1],
        "agent_kwargs": first[2],
        "model": first[3],
        "backend": first[4],
        "attempts": max(r[5] for r in rows),
        "job_name": job_dir.name,
        "jobs_dir": str(job_dir.parent),
        "timeout_multiplier": opts.get("timeout_multiplier", 1.0),
        "verify": opts.get("verify", True),
        "hardened_verify": opts.get("hardened_verify", False),
    }
    # what the job changed in its tasks (it enters the trial ids) and its specific multipliers
    cfg["extra_instructions"] = list(opts.get("extra_instructions") or [])
    cfg["artifacts"] = list(opts.get("extra_artifacts") or [])
    for key, value in dict(opts.get("resource_overrides") or {}).items():
        cfg[f"override_{key}"] = value
    for key, value in dict(opts.get("timeout_multipliers") or {}).items():
        cfg[f"{key}_timeout_multiplier"] = value
    return first[4], cfg
