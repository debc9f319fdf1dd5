"""When each phase of a trial and of its steps ran: the ``timings.spans`` of result.json and
steps.json, which the viewer's trial timeline draws (a bar per phase at its real offset)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from cairn.results.model import PhaseSpan, StepTimings


class SpanClock:
    """Records :class:`~cairn.results.model.PhaseSpan` values, one phase open at a time.

    A span starts at the wall clock (UTC) and lasts what the monotonic clock measured, so a
    wall-clock jump does not bend a duration.

    Attributes:
        spans: the closed spans, in the order they began.
    """

    def __init__(self) -> None:
        self.spans: list[PhaseSpan] = []
        self._open: tuple[str, datetime, float] | None = None

    def begin(self, phase: str) -> None:
        """Open a span for ``phase`` (closing the one still open)."""
        self.end()
        self._open = (phase, datetime.now(UTC), time.monotonic())

    def end(self) -> None:
        """Close the open span, if any (a phase that raised is closed by its caller's
        failure handling, so it is still drawn)."""
        if self._open is None:
            return
        phase, started, t0 = self._open
        self._open = None
        self.spans.append(
            PhaseSpan(
                phase=phase,
                started_at=started,
                finished_at=started + timedelta(seconds=time.monotonic() - t0),
            )
        )

    def seconds(self, *phases: str) -> float | None:
        """Seconds the closed spans of ``phases`` lasted together; ``None`` when none ran."""
        found = [(s.finished_at - s.started_at).total_seconds() for s in self.spans if s.phase in phases]
        return sum(found) if found else None

    def failed_step_timings(self) -> StepTimings:
        """The timings of a step that raised part-way: the spans so far (the open one closed
        now) and the durations they give (``setup_sec`` stays ``None``: it counts
        ``setup.sh`` alone, which the setup span does not separate)."""
        self.end()
        return StepTimings(
            agent_sec=self.seconds("agent"),
            verifier_sec=self.seconds("verifier"),
            healthcheck_sec=self.seconds("healthcheck"),
            artifacts_sec=self.seconds("pre_artifacts", "artifacts"),
            spans=list(self.spans),
        )
