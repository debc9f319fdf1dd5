"""What a running job tells its watcher: typed event lines and one observer (design §9).

The trial engine and the job's run loop emit :class:`Event` values; a :class:`JobObserver`
(the CLI's progress display, a training loop, a viewer) receives them together with the trial
life-cycle calls. Typed events carry their facts (:class:`StepEnded` its reward and times,
:class:`TrialWarning` its key, :class:`Retrying` its delay and run, …); :func:`render` is the
one renderer of their line, :attr:`Event.text`, printed on a terminal and appended to
``job.log``. :attr:`Event.kind` lets a display decide what to show, and no consumer reads the
text back.

A plain-value module: it imports nothing from the rest of cairn at run time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, ClassVar, Literal

if TYPE_CHECKING:  # pragma: no cover
    from cairn.plan import TrialPlan
    from cairn.results.model import TrialResult


class Note(str):
    """One note to report when the job starts: the line itself (a ``str``), and whether it is
    a warning (shown as one; the line then starts with ``warning:``), so that no reader
    parses the line to know.

    Attributes:
        warning: a warning, not a choice made.
    """

    warning: bool

    def __new__(cls, text: str, warning: bool = False) -> Note:
        """The note ``text`` (a warning when ``warning``)."""
        note = super().__new__(cls, text)
        note.warning = warning
        return note

    @classmethod
    def warn(cls, text: str) -> Note:
        """A warning note ``warning: text``."""
        return cls(f"warning: {text}", warning=True)


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
    """One event: what it is about and the line it renders to.

    Typed events (the subclasses below) carry the facts and compute :attr:`text` with
    :func:`render`, the one renderer of job.log and the terminal; a plain :class:`Event` is a
    free line (a job notice).

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


@dataclass(frozen=True, kw_only=True)
class _Typed(Event):
    """An event whose line is rendered from its fields (:func:`render`)."""

    kind: EventKind = field(init=False, default=EventKind.TRIAL)
    text: str = field(init=False, default="")
    tag: str
    """The trial's tag in the line: the task name, ``task #n`` after attempt 1."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", self.KIND)
        object.__setattr__(self, "text", render(self))

    KIND: ClassVar[EventKind] = EventKind.TRIAL


@dataclass(frozen=True, kw_only=True)
class TrialLine(_Typed):
    """Any other line about one trial (a sandbox kept for inspection, a replayed step,
    denied connections, the verdict): ``[tag] line``, of ``line_kind``."""

    line: str
    line_kind: EventKind = EventKind.TRIAL

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", self.line_kind)
        object.__setattr__(self, "text", render(self))


@dataclass(frozen=True, kw_only=True)
class TrialWarning(_Typed):
    """Something the user should know that changes no score; shown once per job per
    :attr:`key` (each trial's result.json still records it).

    Attributes:
        key: the warning itself, without the trial's tag (the dedupe key).
    """

    KIND: ClassVar[EventKind] = EventKind.WARNING
    key: str


@dataclass(frozen=True, kw_only=True)
class EnvironmentReady(_Typed):
    """A trial's sandbox is ready.

    Attributes:
        backend: the backend name.
        seconds: how long the start (or the wait for a pre-started sandbox) took.
        prestart_sec: the pre-started sandbox's own start, seconds (``None``: not
            pre-started).
    """

    KIND: ClassVar[EventKind] = EventKind.ENVIRONMENT
    backend: str
    seconds: float
    prestart_sec: float | None = None
    prestarted: bool = False


@dataclass(frozen=True, kw_only=True)
class StepEnded(_Typed):
    """A step ended: its reward or why it scored 0, with agent and verifier times.

    Attributes:
        index: the step's 1-based index.
        of: how many steps the task has.
        name: the step's name.
        source: where its reward came from (``verifier``, ``error``, ``candidate-error``,
            ``not-run``, …, :class:`cairn.results.model.StepSource` values).
        reward: its primary reward, or ``None``.
        rewards: every reward key, or ``None``.
        error_kind: its error's kind, or ``None``.
        error_message: its error's message, or ``None``.
        agent_exit: how the agent phase ended (``ok``, ``timeout``, …), or ``None``.
        agent_sec: the agent phase, seconds.
        verifier_sec: the verifier, seconds.
    """

    KIND: ClassVar[EventKind] = EventKind.STEP
    index: int
    of: int
    name: str
    source: str
    reward: float | None = None
    rewards: Mapping[str, float] | None = None
    error_kind: str | None = None
    error_message: str | None = None
    agent_exit: str | None = None
    agent_sec: float | None = None
    verifier_sec: float | None = None


@dataclass(frozen=True, kw_only=True)
class Retrying(_Typed):
    """An infra error is retried on a fresh sandbox.

    Attributes:
        error_kind: the infra error's kind.
        delay_sec: the wait before the retry, seconds.
        run: the run about to start (2 for the first retry).
        of: the most runs the trial gets (``--max-retries`` + 1).
        cause: the error's first line (bounded to 200 characters), shown in parentheses;
            empty: none shown.
    """

    KIND: ClassVar[EventKind] = EventKind.RETRY
    error_kind: str
    delay_sec: float
    run: int
    of: int
    cause: str = ""


@dataclass(frozen=True, kw_only=True)
class EngineWait(_Typed):
    """A trial that lost the Docker engine waits for it before its retry.

    Attributes:
        state: ``waiting`` (the wait begins), ``back`` (it answers again) or ``gave_up``.
        bound_sec: the longest wait, seconds.
    """

    state: Literal["waiting", "back", "gave_up"]
    bound_sec: float

    def __post_init__(self) -> None:
        kind = EventKind.WARNING if self.state == "gave_up" else EventKind.RETRY
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "text", render(self))


def _step_what(e: StepEnded) -> str:
    if e.source == "candidate-error" and e.error_kind is not None:
        return f"reward 0.00 ({e.error_kind}: {e.error_message})"
    if e.source == "verifier":
        return f"reward {e.reward:.2f}" if e.reward is not None else f"rewards {e.rewards}"
    if e.error_kind is not None:
        return f"error {e.error_kind}: {e.error_message}"
    return "agent only (no verification)"


def _render_step(e: StepEnded) -> str:
    parts = [
        f"agent {e.agent_sec:.1f} s" if e.agent_sec is not None else None,
        f"verifier {e.verifier_sec:.1f} s" if e.verifier_sec is not None else None,
    ]
    extra = ", ".join(p for p in parts if p)
    exit_note = f" [agent {e.agent_exit}]" if e.agent_exit and e.agent_exit != "ok" else ""
    return f"step {e.index}/{e.of} {e.name}: {_step_what(e)}{exit_note}" + (f" ({extra})" if extra else "")


def body(event: Event) -> str:
    """An event's line without its ``[tag]`` (what trial.log records); a plain
    :class:`Event`'s own text."""
    if isinstance(event, TrialLine):
        return event.line
    if isinstance(event, TrialWarning):
        return f"warning: {event.key}"
    if isinstance(event, EnvironmentReady):
        how = (
            ""
            if not event.prestarted
            else (f" (pre-started; its start took {event.prestart_sec or 0.0:.1f} s during an earlier trial)")
        )
        return f"environment: {event.backend}, ready in {event.seconds:.1f} s{how}"
    if isinstance(event, StepEnded):
        return _render_step(event)
    if isinstance(event, Retrying):
        cause = f" ({event.cause})" if event.cause else ""
        return (
            f"infra error {event.error_kind}{cause}; retrying in {event.delay_sec:g} s on a "
            f"fresh sandbox (run {event.run} of {event.of})"
        )
    if isinstance(event, EngineWait):
        if event.state == "waiting":
            return f"the Docker engine does not answer; waiting up to {event.bound_sec:g} s for it"
        if event.state == "back":
            return "the Docker engine answers again"
        return (
            f"engine_unavailable: the Docker engine did not answer within "
            f"{event.bound_sec:g} s; the trial keeps its sandbox_lost error (resume "
            "re-runs it)"
        )
    return event.text


def render(event: Event) -> str:
    """The line of an event, as job.log and the terminal show it (design §9): a typed
    event's ``[tag]`` and :func:`body`; a plain :class:`Event` renders to its own text.

    Args:
        event: any event.
    """
    if isinstance(event, _Typed):
        return f"[{event.tag}] {body(event)}"
    return event.text


def dedupe_key(event: Event) -> str:
    """What makes two warnings the same for a once-per-job display: a trial warning's
    :attr:`TrialWarning.key`, else the line."""
    return event.key if isinstance(event, TrialWarning) else event.text


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
