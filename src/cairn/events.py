"""What a running job tells its watcher: typed event lines and one observer (design §9).

The trial engine and the job's run loop emit :class:`Event` values; a :class:`JobObserver`
(the CLI's progress display, a training loop, a viewer) receives them together with the trial
life-cycle calls. Every event's :attr:`Event.text` is the line printed on a terminal and
appended to ``job.log``; its :attr:`Event.kind` lets a display decide what to show without
reading the text.

A plain-value module: it imports nothing from the rest of cairn at run time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from cairn.plan import TrialPlan
    from cairn.results.model import TrialResult


class EventKind(StrEnum):
    """What an event line is about."""

    JOB = "job"
    """A job-level notice: started/resumed, stopping, left-overs removed, a task changed."""
    ENVIRONMENT = "environment"
    """A trial's sandbox is ready (backend, seconds)."""
    STEP = "step"
    """A step ended: its reward or why it scored 0, with agent and verifier times."""
    VERDICT = "verdict"
    """A trial ended: PASS / FAIL / STOPPED / ERRORED / CANCELLED with its reward."""
    RETRY = "retry"
    """An infra error is retried on a fresh sandbox."""
    WARNING = "warning"
    """Something the user should know that changes no score (a limit the backend ignores …)."""
    TRIAL = "trial"
    """Any other line about one trial (e.g. a sandbox kept for inspection)."""


NOTABLE_KINDS = frozenset({EventKind.JOB, EventKind.VERDICT, EventKind.RETRY})
"""Kinds a compact display (the live bar) still prints."""


@dataclass(frozen=True)
class Event:
    """One event line.

    Attributes:
        kind: what it is about.
        text: the line as printed and logged (``[task] step 1/2 write: reward 1.00 …``).
        task: the task name, for trial events.
        trial_id: the trial id, for trial events.
    """

    kind: EventKind
    text: str
    task: str | None = None
    trial_id: str | None = None

    def __str__(self) -> str:
        return self.text

    @property
    def notable(self) -> bool:
        """Whether a compact display shows it (:data:`NOTABLE_KINDS`)."""
        return self.kind in NOTABLE_KINDS


EventSink = Callable[[Event], None]
"""A callable that receives events."""


class JobObserver:
    """Receives a job's events and trial life cycle; every method is a no-op here, so a
    subclass overrides only what it needs. Calls come from the job's event loop thread.
    """

    def planned(self, to_run: int, already_done: int) -> None:
        """The job is planned: ``to_run`` trials will run, ``already_done`` are kept."""

    def event(self, event: Event) -> None:
        """One event line."""

    def trial_started(self, plan: TrialPlan) -> None:
        """A trial got its slot and starts."""

    def trial_finished(self, plan: TrialPlan) -> None:
        """A started trial ended (its result follows)."""

    def result(self, result: TrialResult) -> None:
        """A trial's final result (also for trials kept from an earlier run)."""
