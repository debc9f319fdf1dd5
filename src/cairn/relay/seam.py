"""SEAM (issue 25, step 5): the job's model relay as a job-lifetime resource of the in-process
executor, for agents that ask for it (today the ``llm`` agent).

This module is the whole wiring and is meant to move into the engine's ``JobServices`` value
once that exists; docs/relay.md ("Wiring") lists the call sites:

- :class:`cairn.job.executors.Executor` holds one :class:`RelaySeam` for the job; its
  ``run_trial`` creates the trial's agent, calls :meth:`RelaySeam.attach` before the trial
  and :meth:`RelaySeam.detach` after it (the trial's token dies there);
- :func:`cairn.job.run.iter_trials` awaits :meth:`RelaySeam.aclose` at the job's end;
- an agent opts in with two methods: ``relay_wanted() -> RelayWanted | None`` and
  ``use_relay(url, lease)`` (:class:`cairn.agents.llm.LlmAgent`).

The relay starts on the first trial that wants it (so a job whose agent uses no model never
imports aiohttp) and serves every later trial of the job.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cairn.relay.ledger import Limits, TrialLease

if TYPE_CHECKING:
    from cairn.relay.server import ModelRelay, Upstream


@dataclass(frozen=True)
class RelayWanted:
    """What an agent asks of the job's relay.

    Attributes:
        provider: ``openai``, ``anthropic`` or ``gemini``: whose wire and auth header it uses.
        upstream: where the relay forwards, with the provider key (the agent never sees it).
        limits: the per-trial limits (the job's cost limit comes from the job).
        record_bodies: record request and response bodies, secrets masked.
        rollout: ask for and record token ids and logprobs.
    """

    provider: str
    upstream: Upstream
    limits: Limits = field(default_factory=Limits)
    record_bodies: bool = False
    rollout: bool = False


@dataclass(frozen=True)
class JobRelayOptions:
    """The job's own relay options (``cairn run`` flags), laid over what each agent asks.

    Attributes:
        rollout: ``--rollout``: token ids and logprobs, whatever the agent asked.
        record_bodies: ``--record-model-bodies``.
        trial_cost_usd: ``--max-trial-cost-usd``; the lower of it and the agent's own wins.
        trial_tokens: ``--max-trial-tokens``; likewise.
    """

    rollout: bool = False
    record_bodies: bool = False
    trial_cost_usd: float | None = None
    trial_tokens: int | None = None


def _lower(a: float | None, b: float | None) -> Any:
    return b if a is None else a if b is None else min(a, b)


class RelaySeam:
    """The job's relay, started on first use, closed at the job's end.

    Args:
        job_max_cost_usd: ``--max-cost-usd``, enforced at the relay across the job's trials.
        options: the job's relay flags (issue 30), laid over each agent's :class:`RelayWanted`.
    """

    def __init__(self, job_max_cost_usd: float | None, options: JobRelayOptions | None = None) -> None:
        self._job_cost = job_max_cost_usd
        self._options = options or JobRelayOptions()
        self._relay: ModelRelay | None = None
        self._lock = asyncio.Lock()

    @property
    def relay(self) -> ModelRelay | None:
        """The running relay, if any trial started it."""
        return self._relay

    async def attach(self, agent: Any, trial_id: str) -> TrialLease | None:
        """Give a trial's agent the relay's URL and a fresh per-trial token, if it wants them.

        Args:
            agent: the trial's agent instance.
            trial_id: the trial's id.

        Returns:
            The trial's lease, or ``None`` when the agent does not use the relay.

        Raises:
            UsageError: aiohttp is missing.
            OSError: the relay's port cannot be bound.
        """
        wanted_of = getattr(agent, "relay_wanted", None)
        wanted = wanted_of() if callable(wanted_of) else None
        if not isinstance(wanted, RelayWanted):
            return None
        o = self._options
        wanted = RelayWanted(
            provider=wanted.provider,
            upstream=wanted.upstream,
            limits=Limits(
                trial_cost_usd=_lower(wanted.limits.trial_cost_usd, o.trial_cost_usd),
                trial_tokens=_lower(wanted.limits.trial_tokens, o.trial_tokens),
            ),
            record_bodies=wanted.record_bodies or o.record_bodies,
            rollout=wanted.rollout or o.rollout,
        )
        relay = await self._start(wanted)
        lease = relay.open_trial(
            trial_id,
            limits=Limits(
                job_cost_usd=self._job_cost,
                trial_cost_usd=wanted.limits.trial_cost_usd,
                trial_tokens=wanted.limits.trial_tokens,
            ),
        )
        agent.use_relay(relay.url, lease)
        return lease

    def detach(self, lease: TrialLease | None) -> None:
        """End a trial: its token is dead from here on."""
        if lease is not None and self._relay is not None:
            self._relay.revoke(lease)

    async def _start(self, wanted: RelayWanted) -> ModelRelay:
        async with self._lock:
            if self._relay is None:
                from cairn.relay.server import ModelRelay, RelayConfig

                relay = ModelRelay(
                    RelayConfig(
                        upstreams={wanted.provider: wanted.upstream},
                        limits=Limits(job_cost_usd=self._job_cost),
                        record_bodies=wanted.record_bodies,
                        rollout=wanted.rollout,
                    )
                )
                await relay.start()
                self._relay = relay
            return self._relay

    async def aclose(self) -> None:
        """Stop the relay (every token dies); idempotent."""
        relay, self._relay = self._relay, None
        if relay is not None:
            await asyncio.shield(relay.aclose())
