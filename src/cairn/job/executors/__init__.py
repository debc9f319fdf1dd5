"""Executors: where a job's trials run (``--executor``, design §8).

The job's run loop (:mod:`cairn.job.runner`) plans, retries, counts and stores; an
:class:`Executor` only runs one trial and hands its result back. ``local`` runs the trial in
this process (:func:`cairn.trial.run.run_trial`); ``ray`` runs it as a task on a Ray cluster's
worker node (:mod:`cairn.job.executors.ray`, the optional extra ``cairn-eval[ray]``). Executors
are looked up by name and imported lazily, so nothing imports Ray unless it is asked for.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

from cairn.errors import UsageError
from cairn.events import EventSink

if TYPE_CHECKING:  # pragma: no cover
    from cairn.plan import JobConfig, TrialPlan
    from cairn.results.model import TrialResult
    from cairn.sandbox.cleanup import CleanReport
    from cairn.trial.context import JobServices


class Executor:
    """Runs trials for a job's run loop. The base class is the in-process ``local`` executor.

    Life cycle: :meth:`open` once before the first trial, :meth:`run_trial` for each trial
    (concurrently, up to ``-n``), :meth:`close` once at the end (also after an error).
    """

    name = "local"

    def __init__(self, config: JobConfig) -> None:
        self.config = config

    def open(self) -> None:
        """Connect to wherever trials run (no-op in process).

        Raises:
            UsageError: the executor cannot be used (a missing extra, no cluster).
        """

    def resolve_backend(self, name: str) -> str:
        """Resolve ``-e`` (``auto``/``docker``/``local``) to the backend trials run on.

        Raises:
            UsageError: no such backend, or none available where trials run.
        """
        from cairn.sandbox import resolve_backend

        return resolve_backend(name)

    async def run_trial(
        self, plan: TrialPlan, on_event: EventSink, services: JobServices | None = None
    ) -> TrialResult:
        """Run one trial to its end and store it in ``plan.trial_dir`` (result.json last).

        Args:
            plan: the trial.
            on_event: receives the trial's events as they happen.
            services: the job's services lent to the trial (this process's pools).

        Returns:
            The trial's result; infra trouble is an ``errored`` result of category ``infra``
            (the run loop retries those), never an exception.
        """
        from cairn.trial.run import run_trial

        # the job's model relay is one of ``services`` (JobServices.relay): the trial engine
        # attaches the trial's agent to it and writes spend_source into result.json
        return await run_trial(plan, services, on_event=on_event)

    def clean(
        self,
        *,
        job: str | None = None,
        own_job_dir: Path | None = None,
        images: bool = False,
        snapshots: bool = False,
    ) -> CleanReport:
        """Remove left-over sandboxes where trials run (``cairn clean``, design §3).

        Args:
            job: only this job's resources (its id or folder name).
            own_job_dir: a job folder whose lock the caller holds.
            images: also remove unused cairn images.
            snapshots: also remove step snapshots of jobs that are not running.
        """
        from cairn.sandbox.cleanup import clean

        return clean(job=job, own_job_dir=own_job_dir, images=images, snapshots=snapshots)

    def close(self) -> None:
        """Release what :meth:`open` took (idempotent)."""


_EXECUTORS: dict[str, str] = {
    "local": "cairn.job.executors:Executor",
    "ray": "cairn.job.executors.ray:RayExecutor",
}
EXECUTOR_NAMES = tuple(_EXECUTORS)
"""The ``--executor`` values."""


def get_executor(config: JobConfig) -> Executor:
    """The executor named by ``config.executor``, not yet opened.

    Raises:
        UsageError: an unknown executor name, or its optional extra is not installed.
    """
    try:
        target = _EXECUTORS[config.executor]
    except KeyError:
        raise UsageError(
            f"unknown executor {config.executor!r}; use " + " or ".join(EXECUTOR_NAMES)
        ) from None
    module_name, _, attr = target.partition(":")
    cls: type[Executor] = getattr(importlib.import_module(module_name), attr)
    return cls(config)


__all__ = ["EXECUTOR_NAMES", "Executor", "get_executor"]
