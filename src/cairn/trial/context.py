"""What a trial gets from outside, named: its frozen settings and the job's services.

:class:`TrialSettings` is built once per trial from the job's run options and the task (the
resolved per-step verifier envs, the phase networks, the separate-verifier plans); nothing in it
changes while the trial runs. :class:`JobServices` is what the job that runs the trial lends it
for its lifetime: where sandbox removals go (#13), the warm-start pool (``--prestart``), the
pool of reusable sandbox resources (gateway reuse), and any further job-lifetime resource with
its own open and close hooks. A trial run alone gets :meth:`JobServices.standalone` (none of
them). The trial's mutable state lives in :class:`cairn.trial.recorder.TrialRecorder`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from cairn._util.aio import shielded
from cairn.plan import RunOptions, Timeouts
from cairn.sandbox.base import NetworkPolicy
from cairn.sandbox.caches import SandboxCaches
from cairn.trial.deferred import drain

if TYPE_CHECKING:  # pragma: no cover
    from cairn.plan import TrialPlan
    from cairn.relay.service import RelayService
    from cairn.sandbox.pools import ResourcePool
    from cairn.trial.prestart import PrestartPool
    from cairn.trial.separate_verifier import SeparatePlan
    from cairn.trial.snapshot import SnapshotHook


@dataclass(frozen=True)
class PhaseNetworks:
    """The network policy of every phase of a trial (docs/network.md).

    Attributes:
        environment: the environment's policy (start, agent setup, ``setup.sh``, healthchecks).
        agent: step index → the agent phase's policy (model hosts of an in-sandbox agent in).
        verifier: step index → the verifier phase's policy (shared verifier mode only).
    """

    environment: NetworkPolicy
    agent: dict[int, NetworkPolicy] = field(default_factory=dict)
    verifier: dict[int, NetworkPolicy] = field(default_factory=dict)

    @property
    def phases(self) -> tuple[NetworkPolicy, ...]:
        """Every distinct phase policy other than the environment's, reduced."""
        out: list[NetworkPolicy] = []
        for p in (*self.agent.values(), *self.verifier.values()):
            if p.effective() != self.environment.effective() and p.effective() not in out:
                out.append(p.effective())
        return tuple(out)

    @property
    def filtered(self) -> bool:
        """Whether some phase goes through a filtering gateway (an allowlist, a model host,
        or phases that differ): then the trial records every connection attempt."""
        return bool(self.phases) or self.environment.needs_gateway

    def after_agent(self, step: int) -> NetworkPolicy:
        """The policy once step ``step``'s agent phase ended: its verifier's, else the
        environment's."""
        return self.verifier.get(step, self.environment)


def _same(text: str) -> str:
    return text


@dataclass(frozen=True)
class TrialSettings:
    """A trial's inputs, resolved once before its sandbox starts; never changed afterwards.

    Attributes:
        timeouts: the job's timeout multipliers (:class:`cairn.plan.Timeouts`).
        verify: ``False`` under ``--no-verify``.
        hardened: ``--hardened-verify``.
        agent_env: ``--ae`` variables.
        resume_session: ``--resume-agent-session``.
        networks: the phases' network policies (``None``: the sandbox keeps its start policy).
        verifier_envs: step index → the step's resolved verifier env (``--ve`` applied).
        separate: step index → :class:`cairn.trial.separate_verifier.SeparatePlan` for steps
            verified in a separate sandbox (design §4.6).
        snapshot: ``--snapshot-steps``: the hook of
            :func:`cairn.trial.snapshot.snapshot_taker`, called after the agent phase has
            ended and before artifacts; ``None`` takes no snapshot.
        sandbox_outlives_trial: ``--keep-sandbox``: the sandbox may be kept after the trial,
            so the last verifier cleans up after itself too (otherwise the sandbox's removal
            does, design §4.6).
        mask: the secret masker for text written to the host.
        solution_env: the task's resolved ``[solution.env]`` (the oracle's, through
            :class:`cairn.agents.base.AgentContext`).
        n_steps: how many steps the task has (the last one's verifier cleans up less).
    """

    timeouts: Timeouts = field(default_factory=Timeouts)
    verify: bool = True
    hardened: bool = False
    agent_env: Mapping[str, str] = field(default_factory=dict)
    resume_session: bool = False
    networks: PhaseNetworks | None = None
    verifier_envs: Mapping[int, Mapping[str, str]] = field(default_factory=dict)
    separate: Mapping[int, SeparatePlan] = field(default_factory=dict)
    snapshot: SnapshotHook | None = None
    sandbox_outlives_trial: bool = False
    mask: Callable[[str], str] = _same
    solution_env: Mapping[str, str] = field(default_factory=dict)
    n_steps: int = 1

    @classmethod
    def of(
        cls,
        opts: RunOptions,
        *,
        networks: PhaseNetworks | None,
        verifier_envs: Sequence[Mapping[str, str]],
        mask: Callable[[str], str],
        separate: Mapping[int, SeparatePlan] | None = None,
        snapshot: SnapshotHook | None = None,
        solution_env: Mapping[str, str] | None = None,
    ) -> TrialSettings:
        """The settings of a trial under ``opts``.

        Args:
            opts: the job's run options.
            networks: the trial's phase policies.
            verifier_envs: each step's resolved verifier env, in step order.
            mask: the secret masker.
            separate: the separate-verifier plans by step index.
            snapshot: the ``--snapshot-steps`` hook.
            solution_env: the resolved ``[solution.env]``.
        """
        return cls(
            timeouts=opts.timeouts,
            verify=opts.verify,
            hardened=opts.hardened_verify,
            agent_env=dict(opts.agent_env),
            resume_session=opts.resume_agent_session,
            networks=networks,
            verifier_envs={i: dict(v) for i, v in enumerate(verifier_envs, start=1)},
            separate=dict(separate or {}),
            snapshot=snapshot,
            sandbox_outlives_trial=opts.keep_sandbox,
            mask=mask,
            solution_env=dict(solution_env or {}),
            n_steps=len(verifier_envs),
        )

    def verifier_env(self, step: int) -> dict[str, str]:
        """Step ``step``'s resolved verifier env (empty when none was resolved)."""
        return dict(self.verifier_envs.get(step, {}))


class JobResource(Protocol):
    """A resource that lives as long as the job that opened it (a model relay, …).

    :meth:`JobServices.open` opens it before the job's first trial;
    :meth:`JobServices.aclose` closes it after the last trial's removal, in reverse order.
    """

    async def open(self) -> None:
        """Make the resource ready (called once, before any trial)."""

    async def aclose(self) -> None:
        """Release the resource (called once, after every trial; also on Ctrl-C)."""


@dataclass(frozen=True)
class JobServices:
    """What the job running a trial lends it for the job's lifetime.

    Attributes:
        removals: where a trial that ends normally hands its sandbox's removal, so its result
            is written and its slot freed while the engine removes it (#13); ``None``: the
            trial awaits its removal itself.
        prestarts: the warm-start pool (``--prestart``), or ``None``.
        pool: reusable sandbox resources (gateway reuse, :mod:`cairn.sandbox.pools`), handed
            to each sandbox in its spec, or ``None``.
        resources: further job-lifetime resources, opened by :meth:`open` and closed by
            :meth:`aclose` (last opened, first closed).
        caches: the backends' memos and build locks shared by the job's sandboxes
            (:mod:`cairn.sandbox.caches`), handed to each sandbox in its spec; each job (and
            each trial run alone) has its own.
        relay: the job's model relay (:class:`cairn.relay.service.RelayService`), also one of
            :attr:`resources`; ``None``: ``--no-relay``, a trial run alone, a Ray worker —
            model-driven agents then call their model directly.
    """

    removals: set[asyncio.Task[None]] | None = None
    prestarts: PrestartPool | None = None
    pool: ResourcePool[object] | None = None
    resources: tuple[JobResource, ...] = ()
    caches: SandboxCaches = field(default_factory=SandboxCaches)
    relay: RelayService | None = None

    @classmethod
    def standalone(cls) -> JobServices:
        """The services of a trial run outside a job: none."""
        return cls()

    @classmethod
    def for_job(
        cls,
        plans: Sequence[TrialPlan],
        *,
        prestart: bool,
        limit: int,
        in_process: bool,
        resources: Sequence[JobResource] = (),
        relay: RelayService | None = None,
    ) -> JobServices:
        """The services of one job run.

        Args:
            plans: the run's trial plans, in the order they queue.
            prestart: ``--prestart`` (only honoured ``in_process``).
            limit: the job's ``-n`` (the bound on pre-started sandboxes).
            in_process: the trials run in this process (the ``local`` executor): only then
                can they share pools (a Ray worker gets none).
            resources: job-lifetime resources to open and close with the job.
            relay: the job's model relay (in process only; it joins ``resources``).
        """
        from cairn.sandbox.pools import ResourcePool
        from cairn.trial.prestart import PrestartPool

        return cls(
            removals=set(),
            prestarts=PrestartPool(plans, limit=limit) if prestart and in_process else None,
            pool=ResourcePool(takers=len(plans)) if in_process else None,
            resources=(*resources, relay) if relay is not None and in_process else tuple(resources),
            relay=relay if in_process else None,
        )

    async def open(self) -> None:
        """Open the job-lifetime :attr:`resources`, in order."""
        for resource in self.resources:
            await resource.open()

    async def aclose(self) -> None:
        """End the job's services: remove the pre-started sandboxes no trial took, wait for
        every pending sandbox removal, close the resource pool (what it still held is
        labelled: the job's settle step removes it), then close :attr:`resources` in reverse.
        Each stage runs even when an earlier one raised (or was cancelled).

        Raises:
            asyncio.CancelledError: after the stages finished, when one was cancelled.
        """
        try:
            if self.prestarts is not None:
                await self.prestarts.close()
        finally:
            try:
                if self.removals is not None:
                    await drain(self.removals)
            finally:
                try:
                    if self.pool is not None:
                        self.pool.close()
                finally:
                    for resource in reversed(self.resources):
                        await shielded(resource.aclose())


__all__ = ["JobResource", "JobServices", "PhaseNetworks", "TrialSettings"]
