"""The one mutable object of a running trial: where it is, what it recorded, what it said.

:meth:`TrialRecorder.phase` is the trial's only phase switch: entering a phase sets it, writes
status.json (advisory, for ``cairn view``), switches the sandbox's network when asked, and opens
the phase's timing span (``timings.spans``, the viewer's timeline bars); leaving it closes the
span, also when the phase raised, so a failed phase is still drawn. The step rows, the trial's
error and stop reason, its warnings and timings live here too; :mod:`cairn.trial.run` turns
them into the :class:`~cairn.results.model.TrialResult`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cairn.errors import Phase
from cairn.events import Event, EventKind, EventSink, TrialLine, TrialWarning, body
from cairn.results.model import ErrorInfo, ForkRef, StepResult, StepSource, StopReason, Tokens
from cairn.results.store import TrialStore
from cairn.sandbox.base import NetworkPolicy, Sandbox
from cairn.task.model import Step, Task
from cairn.trial.spans import SpanClock

if TYPE_CHECKING:  # pragma: no cover
    from cairn.trial.context import PhaseNetworks
    from cairn.trial.step import Baseline


def _ignore(event: Event) -> None:
    return None


class TrialRecorder:
    """Where a trial is and what it recorded so far (its only mutable state).

    Args:
        task: the trial's task.
        store: the trial folder's store (status.json, trial.log).
        emit: receives the trial's events (``None``: dropped).
        tag: the trial's tag in event lines (``task``, ``task #n`` after attempt 1).
        trial_id: the trial id events carry.

    Attributes:
        phase_now: the phase the trial is in.
        step: the step running now (``None`` outside steps).
        rows: one row per step of the task (``not_run`` until it ran).
        error: the trial's error, once there is one.
        stop_reason: why the steps stopped early (a gate, a failed step), if they did.
        after_agent: an agent phase has run (a later sandbox failure may be the agent's).
        steps_run: steps the agent ran (replayed steps not counted).
        warnings: the trial's own warnings (result.json ``warnings``).
        info: the sandbox's ``image_id`` and ``engine_version``.
        environment_sec: the sandbox start, seconds (``None`` until it ran).
        agent_setup_sec: the agent's host preparation and ``setup()``, seconds.
        host_prepare_sec: the host preparation part of it, seconds.
        prestart_sec: the pre-started sandbox's start, seconds (``None``: not pre-started).
        prestart_began_at: when that start began (UTC).
        forked_from: the recorded trial a ``--from`` trial started from.
        trial_clock: the trial's own phase spans (environment, healthcheck, agent setup).
        step_clock: the running step's phase spans (a new clock per step).
        sandbox: the trial's sandbox once made (the network switch acts on it).
        networks: the phases' network policies (``None``: never switched).
        trial_baseline: the processes that existed before the first agent phase (hardened
            mode kills every later one before each verifier).
        artifacts_left: ``/logs/artifacts`` may hold files an earlier step's agent,
            ``pre_artifacts.sh`` or hooks left there: the next step empties it first, so each
            step's artifacts are its own, as in Harbor. ``True`` at the start of a trial begun
            from a later step.
        network_records: connection records of the running step's separate verifier sandbox,
            for the trial's network record.
        on_last_verifier: called once when the last step's verifier phase begins (the
            ``--prestart`` offer); ``None`` does nothing.
    """

    def __init__(
        self,
        task: Task,
        store: TrialStore,
        emit: EventSink | None = None,
        *,
        tag: str | None = None,
        trial_id: str | None = None,
    ) -> None:
        self.task = task
        self.store = store
        self.emit: EventSink = emit or _ignore
        self.tag = tag or task.name
        self.trial_id = trial_id
        self.phase_now = Phase.ENVIRONMENT
        self.step: Step | None = None
        self._status_at: tuple[Phase, int | None] | None = None
        self.rows: list[StepResult] = [
            StepResult(index=s.index, name=s.name, source=StepSource.NOT_RUN) for s in task.steps
        ]
        self.error: ErrorInfo | None = None
        self.stop_reason: StopReason | None = None
        self.after_agent = False
        self.steps_run = 0
        self.warnings: list[str] = []
        self.info: dict[str, str | None] = {"image_id": None, "engine_version": None}
        self.environment_sec: float | None = None
        self.agent_setup_sec: float | None = None
        self.host_prepare_sec = 0.0
        self.prestart_sec: float | None = None
        self.prestart_began_at: datetime | None = None
        self.forked_from: ForkRef | None = None
        self.trial_clock = SpanClock()
        self.step_clock = SpanClock()
        self.sandbox: Sandbox | None = None
        self.networks: PhaseNetworks | None = None
        self.trial_baseline: Baseline | None = None
        self.artifacts_left = False
        self.network_records: list[Mapping[str, Any]] = []
        self.step_spend: tuple[Tokens | None, float | None] = (None, None)
        """The running step's agent spend (tokens, USD) as the agent reported it, kept for the
        row of a step that fails after its agent ran (a budget stop keeps what it spent)."""
        self.on_last_verifier: Callable[[], None] | None = None

    # ---- the phase switch ------------------------------------------------------------------
    @asynccontextmanager
    async def phase(
        self,
        phase: Phase,
        step: Step | None = None,
        *,
        network: NetworkPolicy | None = None,
        network_as: str | None = None,
        span: str | None = None,
        timed: bool = True,
    ) -> AsyncIterator[None]:
        """Run the body as ``phase`` (of ``step``, or of the trial itself).

        On entry: the phase is set, status.json written (a repeated place is not rewritten),
        the network switched to ``network`` (when the trial's sandbox filters, see
        :meth:`switch`), and the phase's span opened; on exit, also by an exception, the span
        is closed. The phase stays set after the body (an error raised later is classified in
        it until the next phase begins).

        Args:
            phase: the phase.
            step: the step it belongs to; ``None`` for the trial's own phases.
            network: the policy the phase runs under, or ``None`` to keep the current one.
            network_as: the phase name the gateway records the switch under (default the
                phase's own).
            span: the span's name (default the phase's value).
            timed: ``False`` when the body times itself with :meth:`span` (the agent phase
                times only the agent's run).

        Raises:
            SandboxError: the network switch failed.
        """
        self.enter(phase, step)
        if network is not None:
            await self.switch(network, network_as or phase.value)
        if not timed:
            yield
            return
        with self.span(span or phase.value, step):
            yield

    @contextmanager
    def span(self, name: str, step: Step | None = None) -> Iterator[None]:
        """Time the body as span ``name`` of ``step`` (or of the trial); the span is closed
        also when the body raises."""
        clock = self.step_clock if step is not None else self.trial_clock
        clock.begin(name)
        try:
            yield
        finally:
            clock.end()

    def enter(self, phase: Phase, step: Step | None = None) -> None:
        """Set the phase (and the running step) and record it in status.json."""
        self.phase_now = phase
        if step is not None:
            self.step = step
        where = (phase, self.step.index if self.step else None)
        if where != self._status_at:
            self._status_at = where
            self.store.write_status(
                phase, self.step.index if self.step else None, self.step.name if self.step else None
            )
        last = len(self.task.steps)
        if (
            phase is Phase.VERIFIER
            and self.step is not None
            and self.step.index == last
            and self.on_last_verifier is not None
        ):
            offer, self.on_last_verifier = self.on_last_verifier, None
            offer()

    async def switch(self, policy: NetworkPolicy | None, phase: str) -> None:
        """Put the sandbox's network into ``policy`` for ``phase`` (a no-op without a
        sandbox, without a policy, or when no phase filters).

        Raises:
            SandboxError: the backend could not switch.
        """
        nets = self.networks
        if self.sandbox is not None and policy is not None and nets is not None and nets.filtered:
            await self.sandbox.set_network(policy, phase=phase)

    # ---- steps -----------------------------------------------------------------------------
    def begin_step(self, step: Step) -> None:
        """A step begins: a fresh span clock, no separate-verifier records yet."""
        self.step = step
        self.step_clock = SpanClock()
        self.network_records = []
        self.step_spend = (None, None)

    def end_step(self, row: StepResult) -> None:
        """The running step ended with ``row``: record it and write steps.json."""
        self.rows[row.index - 1] = row
        self.store.write_steps(self.rows)
        self.step = None

    def take_network_records(self) -> list[Mapping[str, Any]]:
        """The separate verifier's connection records of the step, handed over once."""
        records, self.network_records = self.network_records, []
        return records

    # ---- log and events --------------------------------------------------------------------
    def log(self, line: str) -> None:
        """Append a line to trial.log."""
        self.store.append_log(line)

    def send(self, event: Event) -> None:
        """Log a trial event's line in trial.log (without the tag) and emit it."""
        self.log(body(event))
        self.emit(event)

    def event(self, line: str, kind: EventKind = EventKind.TRIAL) -> None:
        """Log a line in trial.log and emit it as a :class:`TrialLine` (``[tag] line``)."""
        self.send(
            TrialLine(tag=self.tag, line=line, line_kind=kind, task=self.task.name, trial_id=self.trial_id)
        )

    def warning(self, key: str) -> None:
        """Emit a :class:`TrialWarning` (``[tag] warning: key``), not recorded in the result."""
        self.send(TrialWarning(tag=self.tag, key=key, task=self.task.name, trial_id=self.trial_id))

    def warn(self, warnings: Sequence[str]) -> None:
        """Record trial warnings (result.json ``warnings``) and emit each."""
        for warning in warnings:
            self.warnings.append(warning)
            self.warning(warning)


__all__ = ["TrialRecorder"]
