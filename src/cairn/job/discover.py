"""A job's inputs (design §8): task and dataset folders, registry datasets and git
repositories (:mod:`cairn.datasets`) → filtered, loaded tasks; the checks run
before anything starts (design §9 exit 2); the results a job writes without running a sandbox
(``config_error`` for an invalid task, ``cancelled`` for a trial that never started).

Used by :mod:`cairn.job`; no sandbox, no agent, no job folder here.
"""

from __future__ import annotations

import fnmatch
import os
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cairn._util.inputfiles import read_input_text
from cairn.errors import Category, ErrorKind, Phase, TaskFormatError, UsageError
from cairn.events import Note
from cairn.plan import JobConfig, TrialPlan
from cairn.results.model import (
    AgentRef,
    ErrorInfo,
    Outcome,
    StepResult,
    StepSource,
    TaskRef,
    TaskSource,
    TrialResult,
)
from cairn.results.store import trial_dir_name
from cairn.task.model import Task


@dataclass
class TaskEntry:
    """One task found in a job's inputs: loaded, or broken with its findings.

    Attributes:
        path: the task folder (absolute).
        name: the task name (``[task].name``, else the folder name).
        task: the loaded task, or ``None`` when it is invalid.
        error: the validation findings of an invalid task, one per line.
        content_hash: the task's content hash (also computed for an invalid task, so that
            fixing it gives its trials a new id).
        steps: declared step names, in order (``["main"]`` for a single-step task).
        source: where a fetched task came from (dataset, repository, commit); ``None`` for a
            local folder.
    """

    path: Path
    name: str
    task: Task | None = None
    error: str | None = None
    content_hash: str = ""
    steps: list[str] = field(default_factory=list)
    source: TaskSource | None = None


@dataclass
class JobInputs:
    """Everything :func:`discover_inputs` found.

    Attributes:
        entries: the tasks, filtered and limited, in input order.
        sources: job.json's ``sources`` records (one per ``-d`` / ``--repo``; empty without).
        notes: warnings and choices to report when the job starts (a version picked, a
            registry entry with no pin, a registry read from its saved copy).
    """

    entries: list[TaskEntry]
    sources: list[dict[str, Any]] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)


def _matches(entry: TaskEntry, globs: Iterable[str]) -> bool:
    """A glob matches the full task name (``org/name``), its last part, or the folder name."""
    names = {entry.name, entry.name.rsplit("/", 1)[-1], entry.path.name}
    return any(fnmatch.fnmatchcase(n, g) for g in globs for n in names)


def previous_sources(job_dir: Path) -> list[dict[str, Any]] | None:
    """The ``sources`` records of an existing job's job.json (``None`` when it has none)."""
    from cairn.results.store import read_job_json

    try:
        return list(read_job_json(Path(job_dir)).sources)
    except (OSError, ValueError):
        return None


def discover_inputs(
    config: JobConfig, *, resume_dir: Path | None = None, on_event: Callable[[str], None] | None = None
) -> JobInputs:
    """Find, fetch, filter (``-i``/``-x``), limit (``-l``) and load a job's tasks.

    ``-p`` folders come first, then each ``-d`` dataset (registry order), then each
    ``--repo``. Datasets and repositories are resolved to commits and fetched into the task
    cache (:func:`cairn.datasets.resolve.resolve_sources`) before anything starts.

    Args:
        config: the job config.
        resume_dir: the job folder of a resumed job: its recorded sources pin the commits,
            and a dataset that now resolves differently is refused.
        on_event: receives progress lines while fetching.

    Returns:
        The :class:`JobInputs`.

    Raises:
        UsageError: as :func:`discover_tasks`; a :class:`~cairn.errors.DatasetError` for a
            bad dataset, registry, repository, commit or path.
    """
    if not (config.paths or config.datasets or config.repos):
        raise UsageError(
            "give at least one task or dataset folder (-p), dataset (-d) or git repository (--repo)"
        )
    found: list[tuple[Path, TaskSource | None]] = []
    if config.paths:
        found += [(d, None) for d in _folder_tasks(config.paths)]
    nested = nested_notes(config.paths, "-p")
    sources: list[dict[str, Any]] = []
    notes: list[Note] = []
    if config.datasets or config.repos:
        from cairn.datasets.resolve import resolve_sources

        previous = previous_sources(resume_dir) if resume_dir is not None else None
        res = resolve_sources(
            datasets=config.datasets,
            repos=config.repos,
            registry_url=config.registry_url,
            registry_path=config.registry_path,
            repo_path=config.repo_path,
            previous=previous,
            notify=on_event,
        )
        found += [(t.path, t.source) for t in res.tasks]
        sources, notes = res.records, res.notes
    return JobInputs(_load_entries(found, config), sources, [*nested, *notes])


def discover_tasks(config: JobConfig) -> list[TaskEntry]:
    """Find, filter (``-i``/``-x``) and load the tasks of a job (:func:`discover_inputs`
    without a resumed job's records).

    A path is a task folder (it holds task.toml or task.md) or a dataset folder (its immediate
    sub-folders that are tasks, sorted by name). An invalid task becomes an entry with
    ``error`` (the job turns it into a ``config_error`` trial); it never stops the others.
    A task reached twice (the same folder under two ``-p``) is kept once.

    Args:
        config: the job config.

    Returns:
        The entries, in input order.

    Raises:
        UsageError: no path given, a path does not exist or holds no task, or no task matched
            the filters.
    """
    return discover_inputs(config).entries


def _folder_tasks(paths: Iterable[Path]) -> list[Path]:
    """The task folders of ``-p`` paths, in order.

    Raises:
        UsageError: a path does not exist or holds no task.
    """
    from cairn.task.load import find_tasks, nested_datasets

    out: list[Path] = []
    for p in paths:
        p = Path(p).absolute()
        if not p.exists():
            raise UsageError(f"no such task or dataset folder: {p}")
        dirs = find_tasks(p)
        if not dirs:
            down = nested_datasets(p)
            hint = (
                ("; it holds datasets one level down, give them: " + " ".join(f"-p {d}" for d, _ in down))
                if down
                else ""
            )
            raise UsageError(
                f"{p} is not a task folder (no task.toml or task.md) and holds no task folders{hint}"
            )
        out += dirs
    return out


def shown_path(path: Path, base: Path | None = None) -> str:
    """``path`` as a line shows it: relative to ``base`` (default the current directory) when
    under it, else as given."""
    try:
        return str(Path(path).resolve().relative_to((base or Path.cwd()).resolve()))
    except (ValueError, OSError):
        return str(path)


def nested_notes(paths: Iterable[Path], command: str = "-p") -> list[Note]:
    """``warning:`` lines naming the datasets one level down in ``paths`` that a job (or
    ``cairn tasks check``) does not walk, each with how to include it (issue 27).

    Args:
        paths: the folders given (``-p`` or ``tasks check`` arguments).
        command: ``"-p"`` (a job: "add -p DIR") or a command to run on the folder
            (``"cairn tasks check"``).

    Returns:
        One line per such sub-folder; empty when there is none.
    """
    from cairn.task.load import find_tasks, nested_datasets

    out: list[Note] = []
    for p in paths:
        if not find_tasks(Path(p)):
            continue  # a folder with no task at all is refused with the same hint
        for d, n in nested_datasets(Path(p)):
            hint = (
                f"not included: add -p {shown_path(d)}"
                if command == "-p"
                else f"not checked: {command} {shown_path(d)}"
            )
            out.append(
                Note.warn(
                    f"{shown_path(d)} holds {n} task(s) one level down (folders "
                    f"are read one level deep), {hint}"
                )
            )
    return out


def _describe(entry: TaskEntry) -> str:
    s = entry.source
    if s is None:
        return str(entry.path)
    where = f"{s.dataset}@{s.dataset_version} " if s.dataset else ""
    if s.git_url:
        return f"{where}({s.git_url} {s.path or '.'} at {(s.commit or '')[:12]})"
    return f"{where}({entry.path})"


def _load_entries(found: list[tuple[Path, TaskSource | None]], config: JobConfig) -> list[TaskEntry]:
    """Load each task folder once; filter, limit and check names.

    Raises:
        UsageError: no task matched the filters, or two different tasks share a name.
    """
    from cairn.task.hashing import task_content_hash
    from cairn.task.load import load_task

    entries: list[TaskEntry] = []
    seen: set[Path] = set()
    for d, source in found:
        if d in seen:
            continue
        seen.add(d)
        try:
            task = load_task(d, strict=config.strict)
        except TaskFormatError as exc:
            lines = [str(f) for f in exc.findings] or [str(exc)]
            name, steps = _fallback_identity(d)
            entries.append(
                TaskEntry(
                    d,
                    name,
                    error="\n".join(lines),
                    content_hash=task_content_hash(d),
                    steps=steps,
                    source=source,
                )
            )
            continue
        entries.append(
            TaskEntry(
                d,
                task.name,
                task=task,
                content_hash=task.content_hash,
                steps=[s.name for s in task.steps],
                source=source,
            )
        )
    if config.include:
        entries = [e for e in entries if _matches(e, config.include)]
    if config.exclude:
        entries = [e for e in entries if not _matches(e, config.exclude)]
    if config.n_tasks is not None:
        entries = entries[: config.n_tasks]
    if not entries:
        raise UsageError("no task matched the given sources and filters (-p, -d, --repo, -i, -x)")
    names: dict[str, TaskEntry] = {}
    for e in entries:
        if e.name in names and names[e.name].path != e.path:
            raise UsageError(
                f"two tasks are named {e.name!r}: {_describe(names[e.name])} and "
                f"{_describe(e)}; task names identify trials and results — run "
                "them in separate jobs, or rename one ([task].name)"
            )
        names[e.name] = e
    return entries


MAX_WARNING_LINES = 12
"""Task validation warnings a job prints before its first trial, at most (the rest are
counted, with the ``cairn tasks check`` command that lists them)."""


def task_warning_lines(
    entries: Iterable[TaskEntry], *, cwd: Path | None = None, limit: int = MAX_WARNING_LINES
) -> list[str]:
    """The validation warnings of a job's tasks, as the lines a job prints before its first
    trial (issue 27: a typo such as ``min_rewrad`` must not pass a run in silence).

    Each warning prints once per job, grouped by task, as ``path:line: warning: text``
    (paths relative to ``cwd`` when under it). A dataset with more than ``limit`` warnings
    shows the first ``limit`` and one line counting the rest, with the command that lists
    them all.

    Args:
        entries: the job's tasks (invalid ones have no warnings here: their findings are
            their ``config_error``).
        cwd: the folder paths are shown relative to (default the current directory).
        limit: the most warning lines shown.

    Returns:
        The lines, each starting ``warning:`` or ``path:line: warning:``; empty when no task
        has a warning.
    """
    base = (cwd or Path.cwd()).resolve()

    def rel(p: Path) -> str:
        return shown_path(p, base)

    found: list[tuple[TaskEntry, list[str]]] = []
    seen: set[Path] = set()
    errors = 0
    prefix = str(base) + os.sep
    for e in entries:  # a task of k attempts comes k times
        if e.path in seen or (e.task is None and not e.error) or (e.task is not None and not e.task.warnings):
            continue
        seen.add(e.path)
        shown = []
        if e.task is None:  # invalid (under --strict: its promoted warnings)
            for line in (e.error or "").splitlines():
                shown.append(line[len(prefix) :] if line.startswith(prefix) else line)
            errors += len(shown)
        else:
            for w in e.task.warnings:
                where = rel(w.path) + (f":{w.line}" if w.line is not None else "")
                shown.append(f"{where}: warning: {w.text}")
        found.append((e, list(dict.fromkeys(shown))))
    if not found:
        return []
    total = sum(len(ws) for _, ws in found)
    lines: list[str] = []
    hidden: list[TaskEntry] = []
    for e, ws in found:
        room = limit - len(lines)
        if room <= 0:
            hidden.append(e)
            continue
        lines.extend(ws[:room])
        if len(ws) > room:
            hidden.append(e)
    if len(lines) < total:
        folders = " ".join(dict.fromkeys(rel(e.path) for e in hidden))
        lines.append(
            f"warning: {total - len(lines)} more validation finding(s) in "
            f"{len(hidden)} task(s) not shown; list them: cairn tasks check {folders}"
        )
    warned = sum(1 for e, _ in found if e.task is not None)
    if total - errors:
        lines.append(
            f"warning: {total - errors} task validation warning(s) in {warned} "
            "task(s); those tasks run as written (--strict makes warnings errors)"
        )
    if errors:
        lines.append(
            f"warning: {len(found) - warned} invalid task(s) end config_error "
            "without a sandbox (the findings above)"
        )
    return lines


def _fallback_identity(path: Path) -> tuple[str, list[str]]:
    """An invalid task's name and declared steps, read as far as its TOML allows.

    Returns:
        (``[task].name`` or the folder name, the ``[[steps]]`` names or ``["main"]``).
    """
    name, steps = path.name, ["main"]
    try:
        data = tomllib.loads(read_input_text(path / "task.toml"))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):  # InputFileError is one
        return name, steps
    info = data.get("task")
    if isinstance(info, dict) and isinstance(info.get("name"), str) and info["name"]:
        name = info["name"]
    declared = data.get("steps")
    if isinstance(declared, list) and declared:
        names = [s.get("name") for s in declared if isinstance(s, dict)]
        named = [n for n in names if isinstance(n, str) and n]
        if named and len(named) == len(names) and len(set(named)) == len(named):
            steps = named
    return name, steps


def task_templates(task: Task) -> list[Mapping[str, str]]:
    """Every env table of a task that may hold ``${VAR}`` templates (design §1.1)."""
    tables: list[Mapping[str, str]] = [task.environment.env, task.config.solution.env]
    for s in task.steps:
        tables.append(s.verifier_env)
        if s.verifier_environment is not None:
            tables.append(s.verifier_environment.env)
    return tables


def check_templates(
    tasks: Iterable[Task],
    environ: Mapping[str, str] | None = None,
    *,
    verifier_env: Mapping[str, str] | None = None,
) -> None:
    """Check that every ``${VAR}`` template of the given tasks resolves on this host.

    design §9: an unresolved ``${VAR}`` is a job-level error (exit 2), all checked before
    anything starts.

    Args:
        tasks: the tasks about to run.
        environ: the host environment (default ``os.environ``).
        verifier_env: ``--ve`` values; a verifier-env entry they replace needs no host variable.

    Raises:
        UsageError: naming each task and the variables it lacks.
    """
    from cairn.task.envvars import missing_variables

    environ = os.environ if environ is None else environ
    problems: list[str] = []
    for task in tasks:
        missing: set[str] = set()
        verifier_tables = [s.verifier_env for s in task.steps]
        for table in task_templates(task):
            if not any(table is t for t in verifier_tables):
                missing.update(missing_variables(table, environ))
        for s in task.steps:  # a judge credential (or any entry) --ve replaces needs nothing
            kept = {k: v for k, v in s.verifier_env.items() if k not in (verifier_env or {})}
            missing.update(missing_variables(kept, environ))
        if missing:
            problems.append(f"{task.name}: {', '.join(sorted(missing))}")
    if problems:
        raise UsageError(
            "environment variables not set on the host (needed by ${VAR} "
            "templates in task.toml): " + "; ".join(problems)
        )


def _not_run(steps: Iterable[str]) -> list[StepResult]:
    return [StepResult(index=i, name=n, source=StepSource.NOT_RUN) for i, n in enumerate(steps, start=1)]


def config_error_result(
    entry: TaskEntry, config: JobConfig, *, backend: str, attempt: int, trial_id: str
) -> TrialResult:
    """The result of a trial whose task is invalid: outcome ``errored``, kind ``config_error``.

    Args:
        entry: the invalid task (its findings become the message).
        config: the job config (agent, model).
        backend: the resolved backend.
        attempt: 1-based attempt number.
        trial_id: the trial's id.

    Returns:
        The result (not written).
    """
    now = datetime.now(UTC)
    steps = entry.steps or ["main"]
    return TrialResult(
        trial_id=trial_id,
        trial_name=trial_dir_name(entry.name, attempt, trial_id),
        attempt=attempt,
        task=TaskRef(name=entry.name, content_hash=entry.content_hash, source=entry.source),
        agent=AgentRef(name=config.agent, kwargs=dict(config.agent_kwargs)),
        model=config.model,
        backend=backend,
        outcome=Outcome.ERRORED,
        error=ErrorInfo(
            kind=ErrorKind.CONFIG_ERROR,
            category=Category.TASK,
            phase=Phase.ENVIRONMENT,
            message=entry.error or "invalid task",
        ),
        steps_total=len(steps),
        started_at=now,
        finished_at=now,
        steps=_not_run(steps),
    )


def cancelled_result(plan: TrialPlan, why: str) -> TrialResult:
    """The result of a trial that never started because the job stopped (design §6, §8).

    Args:
        plan: the trial's plan.
        why: the reason, e.g. ``interrupted``, ``model_auth_failed``, ``max_cost``.

    Returns:
        An outcome ``cancelled`` result (not written).
    """
    now = datetime.now(UTC)
    task = plan.task
    return TrialResult(
        trial_id=plan.trial_id,
        trial_name=plan.trial_name,
        attempt=plan.attempt,
        task=TaskRef(name=task.name, content_hash=task.content_hash, source=plan.source),
        agent=AgentRef(name=plan.agent_name, kwargs=dict(plan.agent_kwargs)),
        model=plan.model,
        backend=plan.backend,
        outcome=Outcome.CANCELLED,
        error=ErrorInfo(
            kind=ErrorKind.CANCELLED,
            category=Category.JOB,
            message=f"not started: the job stopped early ({why})",
        ),
        strategy=task.config.multi_step_reward_strategy,
        steps_total=len(task.steps),
        started_at=now,
        finished_at=now,
        steps=_not_run(s.name for s in task.steps),
    )
