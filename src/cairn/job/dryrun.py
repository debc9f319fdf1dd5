"""``cairn run --dry-run``: everything a run checks and decides before its first sandbox, and
nothing after (design §8, §9).

The job's inputs are found, fetched into the task cache (datasets, repositories) and loaded;
the backend is resolved; ``${VAR}`` templates, the start options and the backend's capability
check are run against every task; the trials are planned against the job folder (when it
exists) exactly as :func:`cairn.job.run.iter_trials` plans them. No image is built, no sandbox
or agent is started, no job folder is created or locked, nothing is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cairn.errors import UsageError
from cairn.plan import JobConfig


@dataclass(frozen=True)
class PlannedTrial:
    """One (task, attempt) of a dry run.

    Attributes:
        task: the task name.
        attempt: 1-based attempt.
        trial_id: the deterministic trial id.
        folder: the trial folder's name under ``trials/``.
        action: ``run``, ``keep`` (a resume keeps its result) or ``invalid`` (the task does
            not load: a ``config_error`` result would be written).
        kept: for ``keep``, the kept result's outcome and reward (``completed 1.00``).
    """

    task: str
    attempt: int
    trial_id: str
    folder: str
    action: str
    kept: str | None = None


@dataclass
class DryRun:
    """The plan of a job that was not run.

    Attributes:
        backend: the resolved backend.
        executor: where trials would run.
        job_dir: the job folder (``None`` for a default name, claimed at run time).
        existing: whether that folder already holds a job (then the plan is a resume's).
        tasks: the tasks, in job order.
        trials: one row per (task, attempt).
        problems: what would make trials error or the run stop (exit 1): invalid tasks,
            unresolved templates, what the backend refuses, bad start options.
        notes: warnings and choices (a dataset version picked, a limit not applied).
    """

    backend: str
    executor: str
    job_dir: Path | None
    existing: bool
    tasks: list[str]
    trials: list[PlannedTrial] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0 when the run would start with no problem found, else 1."""
        return 1 if self.problems else 0

    def lines(self, attempts: int) -> list[str]:
        """The plan as printed by ``cairn run --dry-run``."""
        n_run = sum(t.action == "run" for t in self.trials)
        n_keep = sum(t.action == "keep" for t in self.trials)
        where = str(self.job_dir) if self.job_dir else "a new folder named at the start time"
        out = [
            "dry run: nothing was built, started or written",
            f"backend: {self.backend} (executor {self.executor})",
            f"job: {where}"
            + (f" (exists: a resume keeps {n_keep}, runs {n_run})" if self.existing else " (new)"),
            f"tasks: {len(self.tasks)}, attempts: {attempts}, trials: {len(self.trials)} "
            f"({n_run} to run, {n_keep} kept, "
            f"{sum(t.action == 'invalid' for t in self.trials)} invalid)",
        ]
        for t in self.trials:
            what = f"keep ({t.kept})" if t.action == "keep" else t.action
            out.append(f"  {t.task}  attempt {t.attempt}  {t.folder}  {what}")
        out += [f"note: {n}" for n in self.notes]
        out += [f"problem: {p}" for p in self.problems]
        out.append("problems: none" if not self.problems else f"problems: {len(self.problems)}")
        return out


def dry_run(config: JobConfig, *, job_dir: Path | None = None, resume: bool = False) -> DryRun:
    """Check and plan a job without running it (see the module docstring).

    Args:
        config: the job config (for ``resume``, the job's own: :func:`cairn.job.folder.
            resume_config`).
        job_dir: the job folder (default ``config.jobs_dir / config.job_name`` when named).
        resume: plan a resume of the job in ``job_dir``: what it keeps and what it runs.
            Without it, a folder holding a job is refused as the run refuses it.

    Returns:
        The :class:`DryRun`.

    Raises:
        UsageError: bad input, as a run would refuse it before anything starts (no task
            matched, an unknown backend or executor, a bad dataset source, a jobs folder that
            is not a folder (:func:`cairn.job.folder.check_jobs_dir`), a job folder that
            exists and is not a job, a job folder that holds a job without ``resume``, a
            ``resume`` of a folder that holds none, a resume on another backend).
    """
    from cairn.job.discover import check_templates, discover_inputs, task_warning_lines
    from cairn.job.folder import (
        backend_refusal,
        check_jobs_dir,
        job_exists_error,
        not_a_job_error,
        scan_folder,
    )
    from cairn.job.planner import FolderState, TrialAction, plan_trials
    from cairn.job.preflight import artifact_warnings, backend_findings, refuse_unsupported
    from cairn.results.store import JobPaths, trial_dir_name
    from cairn.sandbox import resolve_backend
    from cairn.task.findings import ERROR

    if config.executor not in ("local", "ray"):
        raise UsageError(f"unknown executor {config.executor!r}; use local or ray")
    if job_dir is None:
        check_jobs_dir(Path(config.jobs_dir))  # as the run refuses it
    if job_dir is None and config.job_name:
        job_dir = Path(config.jobs_dir) / config.job_name
    root = Path(job_dir) if job_dir is not None else None
    existing = root is not None and (root / "job.json").is_file()
    if root is not None and existing and not resume:
        raise job_exists_error(root)  # what the run refuses, with the same words
    if resume and not existing:
        raise UsageError(f"{root} is not a job folder (no job.json)")
    if root is not None and root.exists() and not existing and any(root.iterdir()):
        raise not_a_job_error(root)
    backend = resolve_backend(config.backend)
    if root is not None and existing and (refusal := backend_refusal(root, backend)):
        raise refusal
    config = config.model_copy(
        update={"paths": tuple(Path(p).absolute() for p in config.paths), "backend": backend}
    )
    inputs = discover_inputs(config, resume_dir=Path(job_dir) if existing and job_dir else None)
    entries = inputs.entries
    plan = DryRun(
        backend=backend,
        executor=config.executor,
        job_dir=job_dir,
        existing=existing,
        tasks=[e.name for e in entries],
        notes=list(inputs.notes),
    )
    if existing:
        plan.notes.append(
            f"{job_dir} holds a job: the plan is what `cairn resume {job_dir}` "
            "(or --resume) does, with the job's stored config"
        )
    if config.start_step or config.from_trial or config.snapshot_steps:
        from cairn.trial.snapshot import check_start_options

        try:
            check_start_options(config, [e.task for e in entries], backend)
        except UsageError as exc:
            plan.problems.append(str(exc))
    folder = scan_folder(JobPaths(Path(job_dir))) if existing and job_dir else FolderState()
    decisions = plan_trials(config, entries, backend=backend, folder=folder, folder_name=trial_dir_name)
    for d in decisions:
        kept = None
        if d.kept is not None:
            reward = f" {d.kept.reward:.2f}" if d.kept.reward is not None else ""
            kept = f"{d.kept.outcome.value}{reward}"
        plan.trials.append(PlannedTrial(d.entry.name, d.attempt, d.trial_id, d.folder, d.action.value, kept))
    for e in entries:
        if e.task is None:
            first = (e.error or "invalid task").splitlines()[0]
            plan.problems.append(f"{e.name}: invalid task ({first})")
            continue
        for f in backend_findings(config.effective_task(e.task), backend):
            (plan.problems if f.severity == ERROR else plan.notes).append(f"{e.name}: {f.text}")
    # the task validation warnings the run prints before its first trial (issue 27)
    plan.notes += list(task_warning_lines(d.entry for d in decisions if d.action is TrialAction.RUN))
    to_run = [d.entry.task for d in decisions if d.action is TrialAction.RUN and d.entry.task is not None]
    if config.artifacts:  # as the run warns at its start
        named = {
            d.entry.name: d.entry.task
            for d in decisions
            if d.action is TrialAction.RUN and d.entry.task is not None
        }
        plan.notes += [f"warning: {w}" for w in artifact_warnings(config.artifacts, named.items())]
    try:
        check_templates(to_run, verifier_env=config.verifier_env)
    except UsageError as exc:
        plan.problems.append(str(exc))
    # the run's capability check (agent × task × backend: MCP servers, skills, network
    # policies the backend cannot enforce, …), as the trials would end config_error
    plan.problems += refuse_unsupported(decisions, config, backend)[1]
    return plan


__all__ = ["DryRun", "PlannedTrial", "dry_run"]
