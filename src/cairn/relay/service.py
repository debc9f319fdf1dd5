"""The job's model relay as a job-lifetime resource of the trial engine (:class:`RelayService`,
one of :class:`cairn.trial.context.JobServices`' resources).

How a trial uses it (:func:`cairn.trial.run.run_trial`):

1. :meth:`RelayService.attach` before anything starts: when the trial's agent asks for the
   relay (``relay_wanted()`` returns a :class:`RelayWanted`), the relay starts (first trial
   only), a per-trial token is minted and the agent gets ``use_relay(url, lease)``. ``url`` is
   the relay **as the agent reaches it**: the host's ``http://127.0.0.1:PORT`` for an agent that
   runs on the host (``llm``), the in-sandbox address for one that runs inside the sandbox
   (``RelayWanted.in_sandbox``; docs/relay.md "Reaching the relay from a sandbox").
2. The returned :class:`RelayAccess` says what the sandbox's network must open:
   :attr:`RelayAccess.opening` (``ADDRESS:PORT``, admitted by the egress gateway in agent
   phases, in place of the agent's own model hosts).
3. :meth:`RelayService.sandbox_started` once the sandbox runs (local ``no-network``: a
   listener inside the sandbox's network namespace).
4. :meth:`RelayService.detach` when the trial ends: the token is dead, per-trial listeners close.

The relay starts on the first trial that wants it, so a job whose agent uses no model never
imports aiohttp.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cairn.relay.ledger import Limits, TrialLease

if TYPE_CHECKING:  # pragma: no cover
    from cairn.plan import JobConfig
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
        in_sandbox: the agent calls its model from inside the sandbox (an installed CLI):
            its ``use_relay`` URL is then the relay as the sandbox reaches it, and the trial
            opens exactly that address and port in the agent phases.
        stop_status: the status of a budget refusal (mini-swe-agent needs 401; docs/relay.md).
    """

    provider: str
    upstream: Upstream
    limits: Limits = field(default_factory=Limits)
    record_bodies: bool = False
    rollout: bool = False
    in_sandbox: bool = False
    stop_status: int = 400


@dataclass(frozen=True)
class JobRelayOptions:
    """The job's own relay options (``cairn run`` flags), laid over what each agent asks.

    Attributes:
        rollout: ``--rollout``: token ids and logprobs, whatever the agent asked.
        record_bodies: ``--record-model-bodies``.
        trial_cost_usd: ``--max-trial-cost-usd``; the lower of it and the agent's own wins.
        trial_tokens: ``--max-trial-tokens``; likewise.
        add_hosts: ``--add-host`` (name → address): the relay resolves these names itself
            when it connects to the upstream, as the trial's gateway would have.
    """

    rollout: bool = False
    record_bodies: bool = False
    trial_cost_usd: float | None = None
    trial_tokens: int | None = None
    add_hosts: Mapping[str, str] = field(default_factory=dict)


@dataclass
class RelayAccess:
    """One trial's way to the relay.

    Attributes:
        lease: the trial's token, records and spend.
        url: ``http://HOST:PORT`` as the agent reaches the relay (what ``use_relay`` got).
        in_sandbox: the agent runs inside the sandbox.
        backend: the trial's sandbox backend (``docker``, ``local``, …).
        opening: ``ADDRESS:PORT`` the egress gateway admits in agent phases (docker and
            compose with an in-sandbox agent), else ``None``.
        port: the relay's port in ``url``.
    """

    lease: TrialLease
    url: str
    in_sandbox: bool
    backend: str
    opening: str | None = None
    port: int = 0
    _sites: list[Any] = field(default_factory=list)


def _lower(a: float | None, b: float | None) -> Any:
    return b if a is None else a if b is None else min(a, b)


class RelayService:
    """The job's relay, started on first use, closed at the job's end (a ``JobResource``).

    Args:
        job_max_cost_usd: ``--max-cost-usd``, enforced at the relay across the job's trials.
        options: the job's relay flags (issue 30), laid over each agent's :class:`RelayWanted`.
    """

    def __init__(self, job_max_cost_usd: float | None, options: JobRelayOptions | None = None) -> None:
        self._job_cost = job_max_cost_usd
        self._options = options or JobRelayOptions()
        self._relay: ModelRelay | None = None
        self._lock = asyncio.Lock()
        self._hosts: dict[str, str | None] = {}

    @classmethod
    def for_config(cls, config: JobConfig) -> RelayService | None:
        """The relay service of a job, or ``None`` under ``--no-relay``.

        Args:
            config: the job's config (``max_cost_usd``, ``rollout``, ``record_model_bodies``,
                ``max_trial_cost_usd``, ``max_trial_tokens``, ``relay``).
        """
        if not config.relay:
            return None
        return cls(
            config.max_cost_usd,
            JobRelayOptions(
                rollout=config.rollout,
                record_bodies=config.record_model_bodies,
                trial_cost_usd=config.max_trial_cost_usd,
                trial_tokens=config.max_trial_tokens,
                add_hosts=dict(config.add_hosts),
            ),
        )

    @property
    def relay(self) -> ModelRelay | None:
        """The running relay, if any trial started it."""
        return self._relay

    async def open(self) -> None:
        """Nothing to do: the relay starts with the first trial that wants it."""

    async def attach(
        self,
        agent: Any,
        trial_id: str,
        backend: str = "local",
        host_address: Callable[[], str | None] | None = None,
    ) -> RelayAccess | None:
        """Give a trial's agent the relay's URL and a fresh per-trial token, if it wants them.

        Args:
            agent: the trial's agent instance.
            trial_id: the trial's id.
            backend: the trial's sandbox backend's name (recorded in the access).
            host_address: the backend's ``Sandbox.host_address`` (blocking; asked once per job,
                only for an in-sandbox agent): where its sandboxes reach this machine,
                ``None`` for the loopback.

        Returns:
            The trial's access, or ``None`` when the agent does not use the relay.

        Raises:
            UsageError: aiohttp is missing; a docker sandbox cannot reach the relay (a remote
                engine).
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
            in_sandbox=wanted.in_sandbox,
            stop_status=wanted.stop_status,
        )
        relay = await self._start(wanted)
        host, port, opening = relay.config.host, relay.port, None
        if wanted.in_sandbox and host_address is not None:
            found = await self._host_address(backend, host_address)
            if found is not None:
                host = found
                port = await relay.listen(host)
                opening = f"{host}:{port}"
        lease = relay.open_trial(
            trial_id,
            limits=Limits(
                job_cost_usd=self._job_cost,
                trial_cost_usd=wanted.limits.trial_cost_usd,
                trial_tokens=wanted.limits.trial_tokens,
            ),
        )
        access = RelayAccess(
            lease=lease,
            url=f"http://{host}:{port}",
            in_sandbox=wanted.in_sandbox,
            backend=backend,
            opening=opening,
            port=port,
        )
        agent.use_relay(access.url, lease)
        return access

    async def sandbox_started(self, access: RelayAccess | None, sandbox: Any) -> None:
        """Make the relay reachable from a sandbox that has just started, where that needs a
        per-trial listener: a local sandbox with its own network namespace (``no-network``)
        gets one on ``127.0.0.1:PORT`` inside it.

        Args:
            access: the trial's access (``None``: nothing to do).
            sandbox: the started sandbox.

        Raises:
            OSError: the listener cannot be made.
        """
        if access is None or not access.in_sandbox or access.opening is not None or self._relay is None:
            return
        from cairn.relay.reach import listen_in_netns, same_netns

        pid = getattr(sandbox, "netns_pid", None)
        if not isinstance(pid, int) or same_netns(pid):
            return  # public: the host network, where the relay's loopback listener is
        sock = await listen_in_netns(pid, access.port)
        access._sites.append(await self._relay.serve_socket(sock))

    async def detach(self, access: RelayAccess | None) -> None:
        """End a trial: its token is dead from here on, its own listeners are closed."""
        if access is None or self._relay is None:
            return
        self._relay.revoke(access.lease)
        sites, access._sites = access._sites, []
        for site in sites:
            await self._relay.stop_serving(site)

    async def _host_address(self, backend: str, find: Callable[[], str | None]) -> str | None:
        if backend not in self._hosts:
            self._hosts[backend] = await asyncio.to_thread(find)
        return self._hosts[backend]

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
                        stop_status=wanted.stop_status,
                        add_hosts=self._options.add_hosts,
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


__all__ = ["JobRelayOptions", "RelayAccess", "RelayService", "RelayWanted"]
