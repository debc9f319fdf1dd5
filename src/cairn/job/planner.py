"""The job's planning, pure: discovered tasks × attempts, matched against the job folder → what
to do with each trial (design §8).

No I/O here: the caller reads the job folder through :mod:`cairn.results.store` and hands in
what it found (:class:`FolderState`); :func:`plan_trials` returns one :class:`TrialDecision`
per (task, attempt), in task order then attempt order. :mod:`cairn.job.folder` carries the
decisions out on disk and :mod:`cairn.job.runner` runs them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Protocol

from cairn.errors import Category
from cairn.job.discover import TaskEntry
from cairn.plan import JobConfig, trial_id
from cairn.results.model import Outcome, TrialResult


class TrialAction(StrEnum):
    """What the job does with one (task, attempt)."""

    KEEP = "keep"
    """A final result with a genuine score (or an error that is not re-run): kept as it is."""
    RUN = "run"
    """No result yet, or one that is re-run (cancelled, infra error, …)."""
    INVALID = "invalid"
    """The task did not load: a ``config_error`` result is written instead of running."""


@dataclass(frozen=True)
class ExistingTrial:
    """A trial folder found in the job folder, as the caller read it.

    Attributes:
        name: the folder name (``<task-slug>__<attempt>__<id8>``).
        result: its result.json, or ``None`` when it has none (unfinished) or it is unreadable.
        unreadable: why result.json could not be read (``None`` when absent or read).
    """

    name: str
    result: TrialResult | None = None
    unreadable: str | None = None


@dataclass(frozen=True)
class FolderState:
    """What the job folder holds, keyed for the planner.

    Attributes:
        by_name: every trial folder by its name.
        by_prefix: folder names grouped by ``<task-slug>__<attempt>`` (the part before the id),
            to find a (task, attempt) that ran under another trial id.
    """

    by_name: Mapping[str, ExistingTrial] = field(default_factory=dict)
    by_prefix: Mapping[str, Sequence[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class TrialDecision:
    """One (task, attempt) of the job and what to do with it.

    Attributes:
        action: keep, run, or write a config error.
        entry: the discovered task.
        attempt: the 1-based attempt number.
        trial_id: the deterministic trial id (:func:`cairn.plan.trial_id`).
        folder: the trial's folder name.
        kept: the kept result (``KEEP`` only).
        superseded: folders of the same (task, attempt) under another trial id — the task
            changed since; they are moved into this trial's ``attempts/`` (never deleted).
            Empty for ``KEEP``.
        unreadable: why an existing result.json could not be read (it is re-run).
    """

    action: TrialAction
    entry: TaskEntry
    attempt: int
    trial_id: str
    folder: str
    kept: TrialResult | None = None
    superseded: tuple[str, ...] = ()
    unreadable: str | None = None


def should_rerun(old: TrialResult, *, retry_errors: bool) -> bool:
    """design §8: genuine scores never re-run; cancelled trials, infra errors and job-level
    errors (``model_auth_failed``) do; task errors only with ``retry_errors``.

    Args:
        old: the trial's existing result.
        retry_errors: ``cairn resume --retry-errors`` was given.
    """
    if old.outcome in (Outcome.COMPLETED, Outcome.STOPPED):
        return False
    if old.outcome is Outcome.CANCELLED or old.error is None:
        return True
    if old.error.category in (Category.INFRA, Category.JOB):  # e.g. model_auth_failed
        return True
    return retry_errors


class FolderNamer(Protocol):
    """The store's folder-name rule (:func:`cairn.results.store.trial_dir_name`)."""

    def __call__(self, task_name: str, attempt: int, trial_id: str, /) -> str:
        """The folder name (one path component) of the trial ``trial_id``, attempt ``attempt``
        (1-based) of the task ``task_name``."""
        ...


def plan_trials(
    config: JobConfig,
    entries: Sequence[TaskEntry],
    *,
    backend: str,
    folder: FolderState,
    retry_errors: bool = False,
    folder_name: FolderNamer,
) -> list[TrialDecision]:
    """Decide, for every (task, attempt) of the job, whether to keep, run or refuse it.

    Args:
        config: the job config (agent, kwargs, model, attempts).
        entries: the discovered tasks, in job order.
        backend: the resolved backend (part of the trial id).
        folder: what the job folder holds (empty for a fresh job).
        retry_errors: re-run task-category errors too.
        folder_name: the store's folder-name rule, ``(task_name, attempt, trial_id) -> name``.

    Returns:
        One decision per (task, attempt): ``len(entries) * config.attempts`` items.
    """
    out: list[TrialDecision] = []
    overrides = config.task_overrides()
    for e in entries:
        for attempt in range(1, config.attempts + 1):
            tid = trial_id(
                e.name,
                e.content_hash,
                config.agent,
                dict(config.agent_kwargs),
                config.model,
                backend,
                attempt,
                start_step=config.start_step,
                fork_from=Path(config.from_trial).name if config.from_trial else None,
                overrides=overrides,
            )
            name = folder_name(e.name, attempt, tid)
            prefix = name.rsplit("__", 1)[0]
            superseded = tuple(n for n in folder.by_prefix.get(prefix, ()) if n != name)
            found = folder.by_name.get(name)
            if (
                found is not None
                and found.result is not None
                and not should_rerun(found.result, retry_errors=retry_errors)
            ):
                out.append(TrialDecision(TrialAction.KEEP, e, attempt, tid, name, kept=found.result))
                continue
            action = TrialAction.INVALID if e.task is None else TrialAction.RUN
            out.append(
                TrialDecision(
                    action,
                    e,
                    attempt,
                    tid,
                    name,
                    superseded=superseded,
                    unreadable=found.unreadable if found else None,
                )
            )
    return out
