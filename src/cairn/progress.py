"""What a running job shows (SPEC §9): per-event lines for small jobs, a live progress bar for
many trials on a terminal, plain lines when stdout is not a terminal; with ``--json`` the summary
goes to stdout and everything else to stderr.
"""

from __future__ import annotations

import sys
from typing import TextIO

LIVE_THRESHOLD = 2
"""Jobs with more trials than this show a live bar on a terminal; fewer print event lines."""


class Progress:
    """Receives job events and results; renders them. Rich is imported only for a live bar."""

    def __init__(self, *, json_mode: bool = False, stream: TextIO | None = None) -> None:
        self.json_mode = json_mode
        self.out = sys.stderr if json_mode else (stream or sys.stdout)
        self.live = None
        self.bar = None
        self.task_id = None
        self.total = 0
        self.done = 0
        self.errors = 0
        self.rewards: list[float] = []

    def start(self, to_run: int, already_done: int) -> None:
        """Called once the job is planned: ``to_run`` trials to run, ``already_done`` kept."""
        self.total = to_run + already_done
        if self.out.isatty() and to_run > LIVE_THRESHOLD:
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress

            self.bar = RichProgress(TextColumn("[bold]cairn"), BarColumn(), MofNCompleteColumn(),
                                    TextColumn("{task.description}"), TimeElapsedColumn(),
                                    transient=False)
            self.bar.start()
            self.task_id = self.bar.add_task("", total=self.total)
        if already_done:
            self.event(f"resuming: {already_done} trial(s) kept, {to_run} to run")

    def event(self, line: str) -> None:
        """One event line (per-step lines of SPEC §9)."""
        if self.bar is not None:
            if any(w in line for w in (" PASS ", " FAIL ", "ERRORED", "STOPPED", "retrying")):
                self.bar.console.print(line, highlight=False, markup=False)
            return
        print(line, file=self.out, flush=True)

    def result(self, result) -> None:
        """A trial finished."""
        self.done += 1
        if result.outcome.value in ("errored", "cancelled"):
            self.errors += 1
        elif result.reward is not None:
            self.rewards.append(result.reward)
        if self.bar is not None:
            mean = sum(self.rewards) / len(self.rewards) if self.rewards else None
            desc = f"mean {mean:.2f}" if mean is not None else "mean -"
            self.bar.update(self.task_id, completed=self.done,
                            description=f"{desc}  errors {self.errors}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None

    def finish(self, job) -> None:
        """Print the summary: JSON on stdout with ``--json``, else the report table when the job
        had more than one trial."""
        from cairn.report import render

        if self.json_mode:
            print(render(job, "json"))
            return
        if len(job.results) > 1:
            print(render(job, "text"), file=self.out)
        print(f"results: {job.job_dir}", file=self.out)
