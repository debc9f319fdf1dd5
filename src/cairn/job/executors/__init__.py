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
    from cairn.relay.seam import RelaySeam
    from cairn.results.model import TrialResult
    from cairn.sandbox.cleanup import CleanReport
    from cairn.trial.context import JobServices


def _with_spend_source(plan: TrialPlan, result: TrialResult, source: str | None) -> TrialResult:
    """SEAM (issue 30): say in result.json where the trial's spend came from.

    The trial engine wrote result.json without it; it is read back (its stored, masked text),
    given ``spend_source`` and written again atomically. To move into the trial's own result
    once the relay is a job service of the engine.

    Args:
        plan: the trial.
        result: what the engine returned.
        source: ``relay``, ``agent`` or ``None`` (an agent with no model).

    Returns:
        The result with ``spend_source`` set (unchanged when ``source`` is ``None``).
    """
    if source is None or result.spend_source == source:
        return result
    from cairn.results.store import TrialPaths, TrialStore, read_result

    updated = result.model_copy(update={"spend_source": source})
    paths = TrialPaths(plan.trial_dir)
    try:
        stored = read_result(paths.result_json)
        if stored.trial_id == result.trial_id and stored.finished_at == result.finished_at:
            TrialStore(paths).write_result(stored.model_copy(update={"spend_source": source}))
    except (OSError, ValueError):
        pass  # no result.json written (storage full, …): the run loop reports that itself
    return updated


class Executor:
    """Runs trials for a job's run loop. The base class is the in-process ``local`` executor.

    Life cycle: :meth:`open` once before the first trial, :meth:`run_trial` for each trial
    (concurrently, up to ``-n``), :meth:`close` once at the end (also after an error).
    """

    name = "local"

    def __init__(self, config: JobConfig) -> None:
        self.config = config
        # ---- SEAM (issue 25): the job's model relay; moves into JobServices (docs/relay.md)
        self.relay: RelaySeam | None = None
        """Created by the first trial whose agent asks for the relay (no import before)."""

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
        from cairn.trial.run import make_agent, run_trial

        # ---- SEAM (issue 25): a model-driven agent gets the relay and a per-trial token
        agent = make_agent(plan)
        lease = None
        model_driven = callable(getattr(agent, "relay_wanted", None))
        if model_driven and self.config.relay:  # --no-relay: direct calls (issue 30)
            if self.relay is None:
                from cairn.relay.seam import JobRelayOptions, RelaySeam

                c = self.config
                self.relay = RelaySeam(
                    c.max_cost_usd,
                    JobRelayOptions(
                        rollout=c.rollout,
                        record_bodies=c.record_model_bodies,
                        trial_cost_usd=c.max_trial_cost_usd,
                        trial_tokens=c.max_trial_tokens,
                    ),
                )
            lease = await self.relay.attach(agent, plan.trial_id)
        try:
            result = await run_trial(plan, services, agent=agent, on_event=on_event)
        finally:
            if self.relay is not None:
                self.relay.detach(lease)  # the trial's token is dead from here on
        source = (
            "relay" if lease is not None else ("agent" if model_driven or plan.model is not None else None)
        )
        return _with_spend_source(plan, result, source)

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

    async def aclose_services(self) -> None:
        """SEAM (issue 25): stop the job's model relay, if a trial started it (idempotent)."""
        if self.relay is not None:
            await self.relay.aclose()


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
