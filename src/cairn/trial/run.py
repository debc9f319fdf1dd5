"""Run one trial: sandbox, agent setup, the steps in order, stop rules, outcome (design §4–§6).

:func:`run_trial` names everything a trial depends on: its plan, the job's
:class:`~cairn.trial.context.JobServices`, the agent and the event sink. Its settings are
resolved once into a frozen :class:`~cairn.trial.context.TrialSettings`; what changes while it
runs lives in one :class:`~cairn.trial.recorder.TrialRecorder`. The trial never writes JSON
itself: it hands values to :mod:`cairn.results.store`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from cairn.agents.base import Agent, AgentContext
from cairn.errors import (
    Category,
    ErrorKind,
    Phase,
    SandboxError,
    SandboxLostError,
    TrialFailure,
    UnsupportedError,
)
from cairn.events import EnvironmentReady, EventKind, EventSink, StepEnded
from cairn.plan import RunOptions, TrialPlan
from cairn.results.aggregate import score_trial, stop_decision, sum_judge
from cairn.results.model import (
    AgentRef,
    ConfigAgent,
    ConfigOptions,
    ConfigTask,
    ErrorInfo,
    StepResult,
    StepSource,
    TaskRef,
    Tokens,
    TrialConfigFile,
    TrialResult,
    TrialTimings,
)
from cairn.results.store import Masker, TrialPaths, TrialStore
from cairn.sandbox import get_backend
from cairn.sandbox.base import Sandbox, SandboxSpec
from cairn.task.envvars import MIN_SECRET_LEN, missing_variables, resolve_env, secret_values
from cairn.task.judge import judge_hosts
from cairn.task.model import Step, Task
from cairn.trial import snapshot as snapshots
from cairn.trial.classify import (
    PHASE_OF,
    as_start_failure,
    as_transfer_failure,
    error_info,
    with_sandbox_end,
)
from cairn.trial.context import JobServices, PhaseNetworks, TrialSettings
from cairn.trial.deferred import stop_sandbox
from cairn.trial.healthcheck import run_healthcheck
from cairn.trial.prestart import Prestarted
from cairn.trial.recorder import TrialRecorder
from cairn.trial.services import check_services
from cairn.trial.step import run_step, strip_canary

if TYPE_CHECKING:  # pragma: no cover
    from cairn.relay.service import RelayAccess
    from cairn.trial.separate_verifier import SeparatePlan


def _enter_hint(sandbox: Sandbox) -> str:
    """How to look inside a kept sandbox (:meth:`Sandbox.connection`), and how to remove it."""
    return f"{sandbox.connection().hint}  (remove it with `cairn clean`)"


def _now() -> datetime:
    return datetime.now(UTC)


def make_agent(plan: TrialPlan) -> Agent:
    """Instantiate the plan's agent through the agent registry."""
    from cairn.agents.registry import create_agent

    return create_agent(plan.agent_name, plan.model, dict(plan.agent_kwargs))


def plan_networks(
    task: Task,
    agent: Agent,
    opts: RunOptions,
    verifier_envs: list[dict[str, str]],
    relay: RelayAccess | None = None,
) -> PhaseNetworks:
    """Each step's agent and verifier policy (docs/network.md): the task's per-phase keys, plus
    the model hosts of an in-sandbox agent (and ``--allow-agent-host``) in agent phases, and an
    LLM judge's API host in verifier phases (:mod:`cairn.task.judge`).

    Args:
        task: the loaded task.
        agent: the trial's agent (its ``model_hosts``).
        opts: the job's run options.
        verifier_envs: each step's resolved verifier env (``--ve`` applied), in step order.
        relay: the trial's way to the job's model relay: for an agent inside the sandbox on
            the relay, the relay's ``ADDRESS:PORT`` is its model opening in agent phases, in
            place of the agent's own model hosts (docs/relay.md).
    """
    on_relay = relay is not None and relay.in_sandbox
    model = [] if on_relay else agent.model_hosts(dict(opts.agent_env))
    hosts = [*model, *opts.agent_hosts]
    endpoints = [relay.opening] if relay is not None and on_relay and relay.opening else []
    agents = {
        s.index: task.agent_network(s).with_model_hosts(hosts).with_model_endpoints(endpoints)
        for s in task.steps
    }
    verifier = {
        s.index: task.verifier_network(s).with_model_hosts(judge_hosts(s.verifier_env, venv))
        for s, venv in zip(task.steps, verifier_envs, strict=True)
        if opts.verify and s.verifier_mode != "separate"
    }
    return PhaseNetworks(environment=task.environment.network_policy, agent=agents, verifier=verifier)


def sandbox_spec(
    task: Task,
    opts: RunOptions,
    networks: PhaseNetworks,
    env: dict[str, str],
    *,
    job_id: str = "adhoc",
    trial_id: str = "adhoc",
    job_dir: Path | None = None,
) -> SandboxSpec:
    """The sandbox spec of a trial of ``task`` (what the backend's capability check sees).

    Args:
        task: the loaded task.
        opts: the job's run options.
        networks: the trial's phase policies (:func:`plan_networks`).
        env: the resolved ``[environment.env]``.
        job_id: the owning job's id.
        trial_id: the trial's id.
        job_dir: the owning job's folder.
    """
    e = task.environment
    return SandboxSpec(
        env_dir=task.env_dir,
        docker_image=e.docker_image,
        workdir=e.workdir,
        cpus=e.cpus,
        memory_mb=e.memory_mb,
        storage_mb=e.storage_mb,
        gpus=e.gpus,
        network_mode=e.effective_network_mode,
        env=env,
        allowed_hosts=networks.environment.allowed_hosts,
        network_phases=networks.phases,
        add_hosts=opts.add_hosts,
        build_timeout_sec=e.build_timeout_sec * opts.timeouts.build,
        force_build=opts.force_build,
        job_id=job_id,
        trial_id=trial_id,
        env_hash=task.env_hash,
        name=task.slug,
        keep=False,
        job_dir=job_dir,
    )


def preflight_refusal(
    task: Task, agent: Agent, opts: RunOptions, backend: str, environ: Mapping[str, str] | None = None
) -> str | None:
    """Why every trial of ``task`` would end ``config_error`` before its sandbox starts, or
    ``None``: the agent refuses the task (skills, MCP servers), or the backend's capability
    check refuses its sandbox (a network policy, GPUs, compose, ...). The job asks once per
    task before it queues any trial (design §3); each trial still checks again.

    Args:
        task: the loaded task.
        agent: an instance of the job's agent.
        opts: the job's run options.
        backend: the resolved backend name.
        environ: where templates resolve (default ``os.environ``; unresolved ones count as
            empty: the job refuses them separately).
    """
    refusal = agent.refusal(task)
    if refusal is not None:
        return refusal
    lenient = dict(os.environ if environ is None else environ)
    for table in [task.environment.env, *(s.verifier_env for s in task.steps)]:
        lenient.update(dict.fromkeys(missing_variables(table, lenient), ""))
    ve = opts.verifier_env
    venvs = [
        {**resolve_env({k: v for k, v in s.verifier_env.items() if k not in ve}, lenient), **ve}
        for s in task.steps
    ]
    env = resolve_env(task.environment.env, lenient)
    spec = sandbox_spec(task, opts, plan_networks(task, agent, opts, venvs), env)
    cls = get_backend(backend, compose=task.compose_file is not None)
    try:
        cls.check(spec)
    except UnsupportedError as exc:
        return str(exc)
    return None


@dataclass(frozen=True)
class Resolved:
    """A trial's inputs once its templates are resolved (design §4.1 step 1).

    Attributes:
        spec: the sandbox spec.
        solution_env: the resolved ``[solution.env]``.
        verifier_envs: each step's resolved verifier env (``--ve`` applied), in step order.
        masker: the trial's secret masker (every resolved secret).
        networks: the phases' network policies.
    """

    spec: SandboxSpec
    solution_env: dict[str, str]
    verifier_envs: list[dict[str, str]]
    masker: Masker
    networks: PhaseNetworks


def resolve_trial(
    plan: TrialPlan,
    agent: Agent,
    environ: Mapping[str, str] | None = None,
    relay: RelayAccess | None = None,
) -> Resolved:
    """Resolve a trial's env templates and build its sandbox spec.

    Args:
        plan: the trial plan.
        agent: the trial's agent (its model hosts open the agent phases).
        environ: where templates resolve (default ``os.environ``).
        relay: the trial's way to the model relay (:func:`plan_networks`).

    Raises:
        TrialFailure: ``config_error`` for a template without its variable.
    """
    task, opts = plan.task, plan.options
    env_of = os.environ if environ is None else environ
    env_t = task.environment.env
    env = resolve_env(env_t, env_of)
    sol_t = task.config.solution.env
    solution_env = resolve_env(sol_t, env_of)
    ve = opts.verifier_env  # --ve: wins over the task's verifier env (Harbor's flag)
    verifier_envs = [
        {**resolve_env({k: v for k, v in s.verifier_env.items() if k not in ve}, env_of), **ve}
        for s in task.steps
    ]
    secrets = set(secret_values(env_t, env)) | set(secret_values(sol_t, solution_env))
    secrets |= {v for v in ve.values() if len(v) >= MIN_SECRET_LEN}
    for s, resolved in zip(task.steps, verifier_envs, strict=True):
        secrets |= set(secret_values(s.verifier_env, resolved))
    networks = plan_networks(task, agent, opts, verifier_envs, relay)
    spec = sandbox_spec(
        task, opts, networks, env, job_id=plan.job_id, trial_id=plan.trial_id, job_dir=plan.job_dir
    )
    return Resolved(
        spec=spec,
        solution_env=solution_env,
        verifier_envs=verifier_envs,
        masker=Masker(secrets),
        networks=networks,
    )


def _plan_separate(
    plan: TrialPlan, spec: SandboxSpec, verifier_envs: list[dict[str, str]]
) -> dict[int, SeparatePlan]:
    """Plan every separate verifier (design §4.6) before anything starts."""
    task, opts = plan.task, plan.options
    if not opts.verify or all(s.verifier_mode != "separate" for s in task.steps):
        return {}
    from cairn.trial.separate_verifier import plan_separate_verifier

    return {
        s.index: plan_separate_verifier(
            task, s, spec, plan.backend, timeout_multiplier=opts.timeouts.build, verifier_env=venv
        )
        for s, venv in zip(task.steps, verifier_envs, strict=True)
        if s.verifier_mode == "separate"
    }


@dataclass(frozen=True)
class _Ready:
    """What a trial starts its sandbox with, once every check before it passed."""

    cls: type[Sandbox]
    spec: SandboxSpec
    settings: TrialSettings


def _prepare(
    plan: TrialPlan,
    agent: Agent,
    rec: TrialRecorder,
    services: JobServices,
    backend: type[Sandbox] | None,
    relay: RelayAccess | None = None,
) -> _Ready | None:
    """Resolve, refuse early, check capabilities, plan separate verifiers and settle the
    trial's settings; ``None`` with :attr:`TrialRecorder.error` set when the trial cannot run
    (a ``config_error`` in the environment phase)."""
    task, opts = plan.task, plan.options
    try:
        r = resolve_trial(plan, agent, relay=relay)
        # --start-step/--from: start from the recorded snapshot (cairn.trial.snapshot)
        spec, rec.forked_from = snapshots.start_spec(r.spec, task, opts, plan.backend)
        spec = dataclasses.replace(spec, caches=services.caches)  # the job's backend memos
    except TrialFailure as exc:
        rec.error = error_info(exc, phase=Phase.ENVIRONMENT)
        return None
    rec.store.masker = r.masker
    rec.networks = r.networks
    refusal = agent.refusal(task)  # skills/MCP servers the agent cannot take
    if refusal is not None:
        rec.error = error_info(TrialFailure(ErrorKind.CONFIG_ERROR, refusal), phase=Phase.ENVIRONMENT)
        return None
    cls = backend or get_backend(plan.backend, compose=task.compose_file is not None)
    try:
        rec.warn(cls.check(spec))  # e.g. a limit the backend cannot apply
        separate = _plan_separate(plan, spec, r.verifier_envs)
    except UnsupportedError as exc:
        rec.error = error_info(TrialFailure(ErrorKind.CONFIG_ERROR, str(exc)), phase=Phase.ENVIRONMENT)
        return None
    except TrialFailure as exc:
        rec.error = error_info(exc, phase=Phase.ENVIRONMENT)
        return None
    masker = r.masker
    extra = set().union(*(p.secrets for p in separate.values())) if separate else set()
    if extra:
        masker = Masker(set(masker.secrets) | extra)
        rec.store.masker = masker
    snapshot = (
        snapshots.snapshot_taker(job_id=plan.job_id, trial_id=plan.trial_id, job_dir=plan.job_dir)
        if opts.snapshot_steps
        else None
    )
    settings = TrialSettings.of(
        opts,
        networks=r.networks,
        verifier_envs=r.verifier_envs,
        mask=masker.mask,
        separate=separate,
        snapshot=snapshot,
        solution_env=r.solution_env,
    )
    spec = dataclasses.replace(spec, keep=opts.keep_sandbox, pool=services.pool)
    return _Ready(cls=cls, spec=spec, settings=settings)


async def _prepare_host(plan: TrialPlan, agent: Agent, ready: _Ready, rec: TrialRecorder) -> _Ready | None:
    """Agent host preparation (issue 15): a cached runtime, bound read-only when possible;
    ``None`` with the trial's error set when it failed."""
    started = time.monotonic()
    try:
        async with rec.phase(Phase.AGENT_SETUP, timed=False):
            mounts = await agent.prepare_host(plan.task, can_mount=ready.cls.capabilities.read_only_mounts)
    except TrialFailure as exc:
        rec.error = error_info(exc, phase=Phase.AGENT_SETUP)
        return None
    rec.host_prepare_sec = time.monotonic() - started
    rec.enter(Phase.ENVIRONMENT)
    if not mounts:
        return ready
    return dataclasses.replace(ready, spec=dataclasses.replace(ready.spec, mounts=tuple(mounts)))


async def _environment(
    plan: TrialPlan, sandbox: Sandbox, ready: _Ready, rec: TrialRecorder, pre: Prestarted | None
) -> Sandbox:
    """The environment phase: start the sandbox, or wait for the pre-started one (a fresh
    one when that failed to come up).

    Returns:
        The sandbox the trial runs in (also :attr:`TrialRecorder.sandbox`).
    """
    started = time.monotonic()
    async with rec.phase(Phase.ENVIRONMENT):
        if pre is not None and (failure := await pre.ready()) is not None:
            rec.log(
                f"the pre-started sandbox did not come up ({type(failure).__name__}: "
                f"{failure}); starting a fresh one"
            )
            sandbox = rec.sandbox = ready.cls(ready.spec)
            pre = None
        if pre is None:
            try:
                await sandbox.start()
            except SandboxError as exc:
                if exc.kind is ErrorKind.SANDBOX_UNUSABLE:
                    raise as_start_failure(exc) from exc
                raise
        else:
            rec.prestart_sec = pre.start_sec
            rec.prestart_began_at = pre.began_at
        rec.environment_sec = time.monotonic() - started
    info = sandbox.sandbox_info()
    rec.info.update({"image_id": info.image_id, "engine_version": info.engine_version})
    rec.send(
        EnvironmentReady(
            tag=rec.tag,
            task=plan.task.name,
            trial_id=plan.trial_id,
            backend=plan.backend,
            seconds=rec.environment_sec,
            prestarted=pre is not None,
            prestart_sec=pre.start_sec if pre is not None else None,
        )
    )
    return sandbox


async def _start(
    plan: TrialPlan,
    agent: Agent,
    sandbox: Sandbox,
    ready: _Ready,
    rec: TrialRecorder,
    pre: Prestarted | None = None,
    on_started: Callable[[Sandbox], Awaitable[None]] | None = None,
) -> Sandbox:
    """Start the sandbox, the environment healthcheck, agent setup.

    ``on_started`` runs once the sandbox is up, before the healthcheck (the model relay's
    per-sandbox opening, :func:`_relay_hook`).

    Returns:
        The sandbox the trial runs in: ``sandbox``, or a fresh one when a pre-started
        sandbox failed to come up.
    """
    sandbox = await _environment(plan, sandbox, ready, rec, pre)
    if on_started is not None:
        await on_started(sandbox)
    hc = plan.task.environment.healthcheck
    if hc is not None:
        async with rec.phase(Phase.ENVIRONMENT, span="healthcheck"):
            out = await run_healthcheck(sandbox, hc, timeout_multiplier=ready.settings.timeouts.default)
        if not out.healthy:
            await check_services(sandbox, when="and the environment never became healthy")
            raise TrialFailure(
                ErrorKind.ENV_HEALTHCHECK_FAILED,
                f"environment healthcheck failed after {out.probes} probes",
                detail={"exit_code": out.last_exit_code, "output_tail": out.last_output},
            )
    started = time.monotonic()
    first = plan.task.steps[0]
    s = ready.settings
    setup_timeout_sec = plan.options.agent_setup_timeout_sec * s.timeouts.agent_setup
    ctx = AgentContext(
        task=plan.task,
        step=first,
        logs_dir=rec.store.paths.root,
        timeout_sec=setup_timeout_sec,
        user=first.agent_user,
        env=dict(s.agent_env),
        solution_env=dict(s.solution_env),
    )
    async with rec.phase(Phase.AGENT_SETUP):
        try:
            async with asyncio.timeout(setup_timeout_sec):
                await agent.setup(sandbox, ctx)
        except (TrialFailure, asyncio.CancelledError):
            raise
        except Exception as exc:  # noqa: BLE001 - any setup failure is agent_setup_failed (infra)
            raise TrialFailure(
                ErrorKind.AGENT_SETUP_FAILED, f"agent setup failed: {type(exc).__name__}: {exc}"
            ) from exc
    rec.agent_setup_sec = time.monotonic() - started + rec.host_prepare_sec
    await check_services(sandbox)  # a start-up service that died fails the trial (#22)
    return sandbox


def _step_failure(rec: TrialRecorder, s: TrialSettings, step: Step, exc: TrialFailure) -> StepResult:
    """Turn a failure raised inside a step into its row (and maybe the trial's error)."""
    phase = PHASE_OF.get(exc.kind) or rec.phase_now
    timings = rec.step_clock.failed_step_timings()
    if isinstance(exc, SandboxLostError):
        rec.error = error_info(exc, step=step, phase=phase, mask=s.mask)
        return StepResult(
            index=step.index,
            name=step.name,
            source=StepSource.ERROR,
            error=rec.error,
            timings=timings,
            warnings=exc.step_warnings,
        )
    if exc.kind is ErrorKind.SANDBOX_UNUSABLE and not rec.after_agent:
        exc = as_transfer_failure(exc)
    info = error_info(exc, step=step, phase=phase, after_agent=rec.after_agent, mask=s.mask)
    tokens, cost_usd = rec.step_spend  # what the agent spent before it failed (a budget stop)
    if info.category is Category.CANDIDATE:
        return StepResult(
            index=step.index,
            name=step.name,
            source=StepSource.CANDIDATE_ERROR,
            reward=0.0,
            rewards={"reward": 0.0},
            passed=False,
            error=info,
            timings=timings,
            tokens=tokens,
            cost_usd=cost_usd,
            warnings=exc.step_warnings,
        )
    rec.error = info
    return StepResult(
        index=step.index,
        name=step.name,
        source=StepSource.ERROR,
        error=info,
        timings=timings,
        tokens=tokens,
        cost_usd=cost_usd,
        warnings=exc.step_warnings,
    )


async def _record_network(sandbox: Sandbox, step: Step, row: StepResult, rec: TrialRecorder) -> StepResult:
    """Hand the gateway's records of this step to the store; the row gets the counts."""
    separate = rec.take_network_records()
    if (rec.networks is None or not rec.networks.filtered) and not separate:
        return row
    try:
        records = [*(await sandbox.network_records()), *separate]
    except (SandboxError, OSError) as exc:
        rec.warning(f"the network record of step {step.name!r} is incomplete: {exc}")
        return row
    counts = rec.store.append_network_records(step.index, step.name, records)
    if counts.denied:
        rec.event(
            f"step {step.index} {step.name}: {counts.denied} connection attempt(s) "
            f"denied ({', '.join(counts.denied_hosts)})"
        )
    return row.model_copy(update={"network": counts})


async def _one_step(
    plan: TrialPlan, agent: Agent, sandbox: Sandbox, step: Step, s: TrialSettings, rec: TrialRecorder
) -> bool:
    """Run one step the agent is to run; False when the trial ends after it (an error, a
    stop rule)."""
    rec.steps_run += 1
    rec.begin_step(step)
    rec.enter(Phase.SETUP, step)
    paths = rec.store.step_dirs(step.index, step.name)
    rec.store.write_instruction(step.index, step.name, strip_canary(step.instruction))
    try:
        row = await run_step(sandbox, agent, step, paths, s, rec, plan.task)
        rec.after_agent = True
    except TrialFailure as exc:
        rec.after_agent = rec.after_agent or rec.trial_baseline is not None
        row = _step_failure(rec, s, step, await with_sandbox_end(exc, sandbox))
    row = await _record_network(sandbox, step, row, rec)
    rec.end_step(row)
    rec.send(step_ended(rec, row, len(plan.task.steps)))
    if rec.error is not None:
        return False
    if row.error is not None and row.source is StepSource.ERROR:
        rec.error = row.error
        return False
    stop = stop_decision(row, step.min_reward, is_last=step.index == len(plan.task.steps), verify=s.verify)
    if stop is not None:
        rec.stop_reason = stop
        return False
    return True


async def _replay(
    plan: TrialPlan, sandbox: Sandbox, step: Step, s: TrialSettings, rec: TrialRecorder
) -> bool:
    """``--start-step``: one earlier step run by the oracle and verified (source
    ``oracle``); False when it failed (the trial's error is then set)."""
    from cairn.agents.oracle import OracleAgent

    rec.begin_step(step)
    paths = rec.store.step_dirs(step.index, step.name)
    try:
        row = await snapshots.replay_step(
            lambda: run_step(sandbox, OracleAgent(), step, paths, s, rec, plan.task), step, verify=s.verify
        )
    except TrialFailure as exc:
        row = _step_failure(rec, s, step, exc)
    rec.trial_baseline = None  # hardened mode: the agent's baseline is its first step
    rec.end_step(row)
    rec.event(
        f"step {step.index}/{len(plan.task.steps)} {step.name}: replayed by the "
        f"oracle"
        + (f", error {row.error.kind.value}: {row.error.message}" if row.error else " (passed; not scored)")
    )
    if rec.error is None and row.error is not None and row.source is StepSource.ERROR:
        rec.error = row.error
    return rec.error is None


async def _steps(
    plan: TrialPlan, agent: Agent, sandbox: Sandbox, s: TrialSettings, rec: TrialRecorder
) -> None:
    """The steps in order, with the stop rules (design §4.3)."""
    first = snapshots.start_index(plan.task, plan.options.start_step)
    rec.artifacts_left = first > 1  # a replayed or forked start may have left some
    for step in plan.task.steps:
        if step.index < first:  # --start-step: replay by the oracle, or forked files
            if plan.options.fork_from is None and not await _replay(plan, sandbox, step, s, rec):
                return
            continue
        if not await _one_step(plan, agent, sandbox, step, s, rec):
            return


def step_ended(rec: TrialRecorder, row: StepResult, n_steps: int) -> StepEnded:
    """The :class:`~cairn.events.StepEnded` event of a finished step's row."""
    t = row.timings
    return StepEnded(
        tag=rec.tag,
        task=rec.task.name,
        trial_id=rec.trial_id,
        index=row.index,
        of=n_steps,
        name=row.name,
        source=row.source.value,
        reward=row.reward,
        rewards=row.rewards,
        error_kind=row.error.kind.value if row.error is not None else None,
        error_message=row.error.message if row.error is not None else None,
        agent_exit=row.agent_exit.value if row.agent_exit else None,
        agent_sec=t.agent_sec,
        verifier_sec=t.verifier_sec,
    )


def _offer(
    plan: TrialPlan, ready: _Ready, rec: TrialRecorder, services: JobServices
) -> Callable[[], None] | None:
    """``--prestart``: the hook that hands this trial's sandbox spec to the job's pool
    (once), which starts a sandbox for the next trial of the task (:mod:`cairn.trial.prestart`)."""
    pool = services.prestarts
    if pool is None:
        return None

    def offer() -> None:
        for_trial = pool.offer(plan, ready.cls, ready.spec)
        if for_trial is not None:
            rec.log(f"pre-starting a sandbox for trial {for_trial}")

    return offer


async def _body(
    plan: TrialPlan,
    agent: Agent,
    services: JobServices,
    rec: TrialRecorder,
    backend: type[Sandbox] | None,
    relay: RelayAccess | None = None,
) -> None:
    """The trial from its checks to its sandbox's removal (design §4.1)."""
    ready = _prepare(plan, agent, rec, services, backend, relay)
    if ready is None:
        return
    ready = await _prepare_host(plan, agent, ready, rec)
    if ready is None:
        return
    rec.on_last_verifier = _offer(plan, ready, rec, services)
    pre = services.prestarts.take(plan, ready.spec) if services.prestarts is not None else None
    sandbox = rec.sandbox = pre.sandbox if pre is not None else ready.cls(ready.spec)
    cancelled = True
    try:
        sandbox = await _start(plan, agent, sandbox, ready, rec, pre, _relay_hook(services, relay))
        await _steps(plan, agent, sandbox, ready.settings, rec)
        cancelled = False
    except TrialFailure as exc:
        cancelled = False
        if exc.kind is not ErrorKind.START_FAILED:  # e.g. agent setup, the healthcheck
            exc = await with_sandbox_end(exc, rec.sandbox or sandbox)
        if rec.error is None:
            rec.error = error_info(
                exc,
                phase=rec.phase_now if exc.kind not in PHASE_OF else None,
                after_agent=rec.after_agent,
                mask=ready.settings.mask,
            )
    finally:
        await _teardown(plan, rec.sandbox or sandbox, rec, services, cancelled=cancelled)


async def _teardown(
    plan: TrialPlan, sandbox: Sandbox, rec: TrialRecorder, services: JobServices, *, cancelled: bool
) -> None:
    """Keep (``--keep-sandbox``, a trial that did not pass, never on Ctrl-C) or remove the
    sandbox; in a job the removal runs after the result is written (cairn.trial.deferred)."""
    keep = plan.options.keep_sandbox
    failed = (
        rec.error is not None
        or rec.stop_reason is not None
        or (plan.options.verify and not all(r.passed for r in rec.rows))
    )
    if keep and failed and not cancelled:
        rec.event(f"sandbox kept for inspection: {_enter_hint(sandbox)}")
    else:
        sandbox.spec = dataclasses.replace(sandbox.spec, keep=False)
    if not cancelled and rec.on_last_verifier is not None:
        offer, rec.on_last_verifier = rec.on_last_verifier, None
        offer()  # --prestart: a trial that ended before its last verifier
    await stop_sandbox(sandbox.stop, cancelled=cancelled, pending=services.removals)


def _relay_hook(
    services: JobServices, relay: RelayAccess | None
) -> Callable[[Sandbox], Awaitable[None]] | None:
    """What makes the job's relay reachable from the trial's started sandbox (a local
    ``no-network`` sandbox's own listener), or ``None`` when nothing is needed."""
    service = services.relay
    if service is None or relay is None or not relay.in_sandbox:
        return None

    async def hook(sandbox: Sandbox) -> None:
        try:
            await service.sandbox_started(relay, sandbox)
        except OSError as exc:
            raise TrialFailure(
                ErrorKind.AGENT_SETUP_FAILED, f"the model relay cannot be opened to the sandbox: {exc}"
            ) from exc

    return hook


SpendSource = Literal["relay", "agent"] | None


def _spend_source(agent: Agent, plan: TrialPlan, relay: RelayAccess | None) -> SpendSource:
    """``relay`` (the relay's exact usage), ``agent`` (a model-driven agent's own report:
    ``--no-relay``, ``--ak relay=off``, an agent not wired to the relay), ``None`` (no model)."""
    if relay is not None:
        return "relay"
    return "agent" if callable(getattr(agent, "relay_wanted", None)) or plan.model is not None else None


def _result(
    plan: TrialPlan,
    agent: Agent,
    rec: TrialRecorder,
    started_at: datetime,
    total_sec: float,
    cancelled: bool,
    spend_source: SpendSource = None,
) -> TrialResult:
    """The trial's result from what the recorder holds."""
    task = plan.task
    strategy = task.config.multi_step_reward_strategy
    error = rec.error
    if cancelled and error is None:
        running = rec.step
        error = ErrorInfo(
            kind=ErrorKind.CANCELLED,
            category=Category.JOB,
            phase=rec.phase_now,
            step=running.name if running else None,
            message="the trial was cancelled" + (f" during step {running.name!r}" if running else ""),
        )
    steps_total = snapshots.agent_steps_total(task, plan.options.start_step)
    n_replayed = sum(r.source is StepSource.ORACLE for r in rec.rows)
    score = score_trial(
        strategy,
        rec.rows,
        steps_total=steps_total + n_replayed,
        stop_reason=rec.stop_reason,
        error=error,
        cancelled=cancelled,
    )
    verify = plan.options.verify
    toks = [r.tokens for r in rec.rows if r.tokens is not None]
    costs = [r.cost_usd for r in rec.rows if r.cost_usd is not None]
    clock = rec.trial_clock
    return TrialResult(
        trial_id=plan.trial_id,
        trial_name=plan.trial_name,
        attempt=plan.attempt,
        task=TaskRef(name=task.name, content_hash=task.content_hash, source=plan.source),
        agent=AgentRef(name=plan.agent_name, version=agent.version, kwargs=dict(plan.agent_kwargs)),
        model=plan.model,
        backend=plan.backend,
        outcome=score.outcome,
        error=score.error,
        reward=score.reward if verify else None,
        rewards=score.rewards if verify else None,
        reward_all_steps=score.reward_all_steps if verify else None,
        passed=score.passed and verify,
        strategy=strategy,
        steps_total=steps_total,
        steps_run=rec.steps_run,
        stopped_after=score.stopped_after,
        stop_reason=score.stop_reason,
        timings=TrialTimings(
            total_sec=total_sec,
            environment_sec=rec.environment_sec,
            agent_setup_sec=rec.agent_setup_sec,
            healthcheck_sec=clock.seconds("healthcheck"),
            spans=list(clock.spans),
            prestarted=rec.prestart_sec is not None,
            prestart_sec=rec.prestart_sec,
            prestart_began_at=rec.prestart_began_at,
        ),
        tokens=Tokens.total(toks),
        cost_usd=sum(costs) if costs else None,
        judge=sum_judge(r.judge for r in rec.rows),
        started_at=started_at,
        finished_at=_now(),
        image_id=rec.info.get("image_id"),
        engine_version=rec.info.get("engine_version"),
        warnings=[*(str(w) for w in task.warnings), *rec.warnings],
        steps=rec.rows,
        start_step=plan.options.start_step,
        forked_from=rec.forked_from,
        spend_source=spend_source,
    )


def _config_file(plan: TrialPlan, agent: Agent) -> TrialConfigFile:
    """config.json: the trial's resolved inputs (design §8)."""
    o = plan.options
    return TrialConfigFile(
        task=ConfigTask(
            name=plan.task.name,
            content_hash=plan.task.content_hash,
            path=str(plan.task.path),
            source=plan.source,
        ),
        agent=ConfigAgent(name=plan.agent_name, kwargs=plan.agent_kwargs, version=agent.version),
        model=plan.model,
        backend=plan.backend,
        attempt=plan.attempt,
        trial_id=plan.trial_id,
        job_id=plan.job_id,
        options=ConfigOptions(
            timeout_multiplier=o.timeout_multiplier,
            verify=o.verify,
            hardened_verify=o.hardened_verify,
            snapshot_steps=o.snapshot_steps,
            start_step=o.start_step,
            fork_from=str(o.fork_from) if o.fork_from else None,
            extra_instructions=list(o.extra_instructions),
            timeout_multipliers=o.given_multipliers,
            resource_overrides=dict(o.resource_overrides),
            extra_artifacts=list(o.extra_artifacts),
        ),
    )


async def run_trial(
    plan: TrialPlan,
    services: JobServices | None = None,
    *,
    agent: Agent | None = None,
    backend: type[Sandbox] | None = None,
    on_event: EventSink | None = None,
) -> TrialResult:
    """Run one trial to its end and write its results (design §4.1).

    Args:
        plan: the trial plan (task, agent, backend, attempt, ids, folders, options).
        services: what the job running the trial lends it (sandbox removals, the warm-start
            pool, reusable sandbox resources); ``None``: a trial run alone
            (:meth:`JobServices.standalone`).
        agent: an agent instance to use instead of creating one from ``plan.agent_name``.
        backend: a sandbox class to use instead of the registered ``plan.backend`` (a test's
            in-memory sandbox).
        on_event: receives each :class:`~cairn.events.Event` (design §9's per-step lines,
            the verdict, warnings).

    Returns:
        The :class:`TrialResult`, also written to ``<trial_dir>/result.json`` (last).

    Raises:
        asyncio.CancelledError: after recording the trial as ``cancelled`` (sandbox removed).
    """
    services = services or JobServices.standalone()
    started_at = _now()
    t0 = time.monotonic()
    agent = agent or make_agent(plan)
    # the job's model relay: a model-driven agent gets its URL and a per-trial token
    relay = None
    if services.relay is not None:
        cls = backend or get_backend(plan.backend, compose=plan.task.compose_file is not None)
        relay = await services.relay.attach(agent, plan.trial_id, plan.backend, cls.host_address)
    store = TrialStore(TrialPaths(plan.trial_dir))
    tag = plan.task.name if plan.attempt == 1 else f"{plan.task.name} #{plan.attempt}"
    rec = TrialRecorder(plan.task, store, on_event, tag=tag, trial_id=plan.trial_id)
    store.create()
    store.write_config(_config_file(plan, agent))
    rec.enter(Phase.ENVIRONMENT)
    store.write_steps(rec.rows)
    cancelled = crashed = False
    try:
        await _body(plan, agent, services, rec, backend, relay)
    except asyncio.CancelledError:
        cancelled = True
        raise
    except BaseException:
        # Not a trial outcome (a bug, or the jobs folder itself failing): write no result, so
        # the trial is not taken for completed and `cairn resume` runs it again (design §8).
        crashed = True
        raise
    finally:
        if services.relay is not None:
            await services.relay.detach(relay)  # the trial's token is dead from here on
        if not crashed:
            rec.warnings.extend(store.mask_files())
            spend = _spend_source(agent, plan, relay)
            result = _result(plan, agent, rec, started_at, time.monotonic() - t0, cancelled, spend)
            store.write_result(result)
            if not cancelled:
                from cairn.results.verdict import verdict_line

                rec.event(verdict_line(result), EventKind.VERDICT)
    return result
