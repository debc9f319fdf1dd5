"""What a running job shows (design §9).

- On a terminal, a job with more than :data:`LIVE_THRESHOLD` trials to run shows a live bar
  (done/total, running, mean reward so far, errors); only verdict lines and job-level notices
  scroll above it.
- Otherwise every event is printed as a plain line (the per-step lines of a one-trial run).
- With ``--json`` everything here goes to stderr, so stdout carries only the summary JSON.

Rich is imported only when a live bar is shown.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TextIO

from cairn.events import Event, EventKind, JobObserver

if TYPE_CHECKING:  # rich is imported only when the live bar is shown
    from rich.progress import Progress as RichProgress
    from rich.progress import TaskID

LIVE_THRESHOLD = 2
"""Jobs with more trials than this to run show a live bar on a terminal."""


class LinePrinter(JobObserver):
    """An observer that prints every event line to a stream (e.g. ``cairn tasks sanity``)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def event(self, event: Event) -> None:
        """Print the event's line to the stream, flushed at once (a sanity run is watched live)."""
        print(event.text, file=self.stream, flush=True)


class Progress(JobObserver):
    """Receives job events and results (a :class:`~cairn.events.JobObserver`); renders them.

    Args:
        json_mode: ``--json``: write to stderr (stdout is for the summary JSON).
        stream: where to write (default stdout, or stderr in JSON mode).
        resume: a resumed job (then trials kept from earlier runs are announced).
        quiet: ``-q``: no live bar and no per-trial lines (only job-level notices and
            warnings, then the summary), as Harbor's ``--quiet``.
    """

    def __init__(
        self,
        *,
        json_mode: bool = False,
        stream: TextIO | None = None,
        resume: bool = False,
        quiet: bool = False,
    ) -> None:
        self.json_mode = json_mode
        self.resume = resume
        self.quiet = quiet
        self.out = stream or (sys.stderr if json_mode else sys.stdout)
        self.bar: RichProgress | None = None
        self.task_id: TaskID | None = None
        self.total = 0
        self.done = 0
        self.running = 0
        self.errors = 0
        self.rewards: list[float] = []

    def planned(self, to_run: int, already_done: int) -> None:
        """Called once the job is planned: ``to_run`` trials to run, ``already_done`` kept."""
        self.total = to_run + already_done
        if already_done and self.resume:
            self.event(Event(EventKind.JOB, f"resuming: {already_done} trial(s) kept, {to_run} to run"))
        isatty = getattr(self.out, "isatty", lambda: False)
        if isatty() and to_run > LIVE_THRESHOLD and not self.quiet:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress

            self.bar = RichProgress(
                TextColumn("[bold]cairn"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.description}"),
                TimeElapsedColumn(),
                console=Console(file=self.out),
                transient=False,
            )
            self.bar.start()
            self.task_id = self.bar.add_task("", total=self.total)
            self._refresh()

    def event(self, event: Event) -> None:
        """One event (per-step lines of design §9, verdicts, job notices): printed as a line;
        under the live bar only the notable kinds (verdicts, retries, job notices)."""
        if self.quiet and event.kind not in (EventKind.JOB, EventKind.WARNING):
            return
        if self.bar is not None:
            if event.notable:
                self.bar.console.print(event.text, highlight=False, markup=False)
            return
        print(event.text, file=self.out, flush=True)

    def notice(self, text: str) -> None:
        """Print a job-level line of the CLI's own (e.g. an interruption)."""
        self.event(Event(EventKind.JOB, text))

    def trial_started(self, plan) -> None:
        """A trial acquired its slot and starts."""
        self.running += 1
        self._refresh()

    def result(self, result) -> None:
        """A trial finished (or was kept from an earlier run)."""
        self.done += 1
        if result.outcome.value in ("errored", "cancelled"):
            self.errors += 1
        elif result.reward is not None:
            self.rewards.append(result.reward)
        self._refresh()

    def trial_finished(self, plan) -> None:
        """A started trial ended (its result follows)."""
        self.running = max(0, self.running - 1)
        self._refresh()

    def _refresh(self) -> None:
        if self.bar is None or self.task_id is None:
            return
        mean = sum(self.rewards) / len(self.rewards) if self.rewards else None
        desc = (
            f"running {self.running}  mean {mean:.2f}"
            if mean is not None
            else f"running {self.running}  mean -"
        ) + f"  errors {self.errors}"
        self.bar.update(self.task_id, completed=self.done, description=desc)

    def close(self) -> None:
        """Stop the live bar (idempotent)."""
        if self.bar is not None:
            self.bar.stop()
            self.bar = None

    def finish(self, job) -> None:
        """Print the summary: JSON on stdout with ``--json``; else the report table when the
        job had more than one trial, then where the results are. The report module (and its
        model-call sums) is imported only when it renders: a one-trial run prints no table (#31)."""
        if not self.json_mode and len(job.results) <= 1:
            print(f"results: {job.job_dir}", file=self.out, flush=True)
            return
        from cairn.results.report import render

        if self.json_mode:
            print(render(job, "json"), flush=True)
            return
        print(render(job, "text"), file=self.out)
        print(f"results: {job.job_dir}", file=self.out, flush=True)
