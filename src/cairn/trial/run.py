"""Run one trial: sandbox, agent setup, the steps in order, stop rules, outcome (design §4–§6).

``trial.py`` never writes JSON itself: it hands values to :mod:`cairn.results.store`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

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
from cairn.events import Event, EventKind, EventSink
from cairn.plan import RunOptions, TrialPlan
from cairn.results.aggregate import score_trial, stop_decision, sum_judge
from cairn.results.model import (
    AgentRef,
    ConfigAgent,
    ConfigOptions,
    ConfigTask,
    ErrorInfo,
    ForkRef,
    StepResult,
    StepSource,
    StopReason,
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
from cairn.trial.deferred import stop_sandbox
from cairn.trial.healthcheck import run_healthcheck
from cairn.trial.prestart import PRESTARTS, Prestarted
from cairn.trial.services import check_services
from cairn.trial.spans import SpanClock
from cairn.trial.step import PhaseNetworks, StepDirs, StepEnv, run_step, strip_canary


def _enter_hint(sandbox: Sandbox) -> str:
    """How to look inside a kept sandbox, and how to remove it."""
    info = sandbox.info
    if info.get("container_id"):
        how = f"docker exec -it {str(info['container_id'])[:12]} bash"
    else:
        how = f"{sandbox.name} sandbox {info}"
    return f"{how}  (remove it with `cairn clean`)"


def _now() -> datetime:
    return datetime.now(UTC)


def make_agent(plan: TrialPlan) -> Agent:
    """Instantiate the plan's agent through the agent registry."""
    from cairn.agents.registry import create_agent

    return create_agent(plan.agent_name, plan.model, dict(plan.agent_kwargs))


def plan_networks(task: Task, agent: Agent, opts: RunOptions,
                  verifier_envs: list[dict[str, str]]) -> PhaseNetworks:
    """Each step's agent and verifier policy (docs/network.md): the task's per-phase keys, plus
    the model hosts of an in-sandbox agent (and ``--allow-agent-host``) in agent phases, and an
    LLM judge's API host in verifier phases (:mod:`cairn.task.judge`).

    Args:
        task: the loaded task.
        agent: the trial's agent (its ``model_hosts``).
        opts: the job's run options.
        verifier_envs: each step's resolved verifier env (``--ve`` applied), in step order.
    """
    hosts = [*agent.model_hosts(dict(opts.agent_env)), *opts.agent_hosts]
    agents = {s.index: task.agent_network(s).with_model_hosts(hosts) for s in task.steps}
    verifier = {s.index: task.verifier_network(s).with_model_hosts(
                    judge_hosts(s.verifier_env, venv))
                for s, venv in zip(task.steps, verifier_envs, strict=True)
                if opts.verify and s.verifier_mode != "separate"}
    return PhaseNetworks(environment=task.environment.network_policy, agent=agents,
                         verifier=verifier)


def sandbox_spec(task: Task, opts: RunOptions, networks: PhaseNetworks, env: dict[str, str], *,
                 job_id: str = "adhoc", trial_id: str = "adhoc",
                 job_dir: Path | None = None) -> SandboxSpec:
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
        env_dir=task.env_dir, docker_image=e.docker_image, workdir=e.workdir,
        cpus=e.cpus, memory_mb=e.memory_mb, storage_mb=e.storage_mb, gpus=e.gpus,
        network_mode=e.effective_network_mode, env=env,
        allowed_hosts=networks.environment.allowed_hosts,
        network_phases=networks.phases, add_hosts=opts.add_hosts,
        build_timeout_sec=e.build_timeout_sec * opts.timeouts.build,
        force_build=opts.force_build, job_id=job_id, trial_id=trial_id,
        env_hash=task.env_hash, name=task.slug, keep=False, job_dir=job_dir)


def preflight_refusal(task: Task, agent: Agent, opts: RunOptions, backend: str,
                      environ: Mapping[str, str] | None = None) -> str | None:
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
    venvs = [{**resolve_env({k: v for k, v in s.verifier_env.items() if k not in ve}, lenient),
              **ve} for s in task.steps]
    env = resolve_env(task.environment.env, lenient)
    spec = sandbox_spec(task, opts, plan_networks(task, agent, opts, venvs), env)
    cls = get_backend(backend, compose=task.compose_file is not None)
    try:
        cls.check(spec)
    except UnsupportedError as exc:
        return str(exc)
    return None


class _TrialRun:
    """The mutable state of one running trial; :func:`run_trial` is its only user."""

    def __init__(self, plan: TrialPlan, agent: Agent, on_event: EventSink | None) -> None:
        self.plan = plan
        self.task = plan.task
        self.agent = agent
        self.emit: EventSink = on_event or (lambda event: None)
        self.store = TrialStore(TrialPaths(plan.trial_dir))
        self.rows: list[StepResult] = [
            StepResult(index=s.index, name=s.name, source=StepSource.NOT_RUN) for s in self.task.steps]
        self.error: ErrorInfo | None = None
        self.stop_reason: StopReason | None = None
        self.phase = Phase.ENVIRONMENT
        self.after_agent = False
        self.steps_run = 0
        self.masker = Masker(())
        self.warnings: list[str] = []
        self.info: dict[str, str | None] = {"image_id": None, "engine_version": None}
        self.timings: dict[str, float | None] = {"environment_sec": None, "agent_setup_sec": None}
        self.clock = SpanClock()  # timings.spans of the trial's own phases (viewer timeline)
        self.separate: dict = {}
        self.host_prepare_sec = 0.0
        self.step_env: StepEnv | None = None
        self.current_step: Step | None = None
        self.forked_from: ForkRef | None = None
        self.solution_env: dict[str, str] = {}
        self.networks: PhaseNetworks | None = None
        self.sandbox: Sandbox | None = None
        self._offer_args: tuple[type[Sandbox], SandboxSpec] | None = None
        self._offered = False  # --prestart: this trial offered its spec (once)
        self.prestart_sec: float | None = None
        self.prestart_began_at: datetime | None = None

    # ---- live status for `cairn view` (status.json; advisory) --------------------------------
    @property
    def phase(self) -> Phase:
        """The trial's current phase; each change is recorded in status.json."""
        return self._phase

    @phase.setter
    def phase(self, value: Phase) -> None:
        self._phase = value
        self._record_phase(value)

    def _record_phase(self, value: Phase) -> None:
        step = getattr(self, "current_step", None)
        where = (value, step.index if step else None)
        if where != getattr(self, "_status_at", None):  # a repeated phase is not rewritten
            self._status_at = where
            self.store.write_status(value, step.index if step else None,
                                    step.name if step else None)
        if value is Phase.VERIFIER and step is not None and step.index == len(self.task.steps):
            self._offer()  # --prestart: the last verifier runs; the next trial's sandbox starts

    def _offer(self) -> None:
        """``--prestart``: hand this trial's sandbox spec to the job's pool (once), which starts
        a sandbox for the next trial of the task (:mod:`cairn.trial.prestart`)."""
        pool = PRESTARTS.get()
        if pool is None or self._offered or self._offer_args is None:
            return
        self._offered = True
        cls, spec = self._offer_args
        for_trial = pool.offer(self.plan, cls, spec)
        if for_trial is not None:
            self.log(f"pre-starting a sandbox for trial {for_trial}")
    # ---- end live status ---------------------------------------------------------------------

    def log(self, line: str) -> None:
        self.store.append_log(line)

    def event(self, line: str, kind: EventKind = EventKind.TRIAL) -> None:
        """Log a line in trial.log and emit it as ``[task] line`` (``[task #n]`` after attempt 1)."""
        self.log(line)
        tag = self.task.name if self.plan.attempt == 1 else f"{self.task.name} #{self.plan.attempt}"
        self.emit(Event(kind, f"[{tag}] {line}", task=self.task.name, trial_id=self.plan.trial_id))

    # ---- set-up ------------------------------------------------------------------------------
    def _resolve(self) -> tuple[SandboxSpec, dict[str, str], list[dict[str, str]]]:
        """Resolve env templates (design §4.1 step 1) and build the sandbox spec."""
        task, opts = self.task, self.plan.options
        environ = os.environ
        env_t = task.environment.env
        env = resolve_env(env_t, environ)
        sol_t = task.config.solution.env
        solution_env = resolve_env(sol_t, environ)
        ve = opts.verifier_env  # --ve: wins over the task's verifier env (Harbor's flag)
        verifier_envs = [{**resolve_env({k: v for k, v in s.verifier_env.items() if k not in ve},
                                        environ), **ve} for s in task.steps]
        secrets = set(secret_values(env_t, env)) | set(secret_values(sol_t, solution_env))
        secrets |= {v for v in ve.values() if len(v) >= MIN_SECRET_LEN}
        for s, resolved in zip(task.steps, verifier_envs, strict=True):
            secrets |= set(secret_values(s.verifier_env, resolved))
        self.masker = Masker(secrets)
        self.store.masker = self.masker
        self.networks = plan_networks(task, self.agent, opts, verifier_envs)
        spec = sandbox_spec(task, opts, self.networks, env, job_id=self.plan.job_id,
                            trial_id=self.plan.trial_id, job_dir=self.plan.job_dir)
        return spec, solution_env, verifier_envs

    async def _record_network(self, sandbox: Sandbox, step: Step, row: StepResult) -> StepResult:
        """Hand the gateway's records of this step to the store; the row gets the counts."""
        separate = self.step_env.separate_records if self.step_env is not None else []
        if self.step_env is not None:
            self.step_env.separate_records = []
        if (self.networks is None or not self.networks.filtered) and not separate:
            return row
        try:
            records = [*(await sandbox.network_records()), *separate]
        except (SandboxError, OSError) as exc:
            self.event(f"warning: the network record of step {step.name!r} is incomplete: {exc}",
                       EventKind.WARNING)
            return row
        counts = self.store.append_network_records(step.index, step.name, records)
        if counts.denied:
            self.event(f"step {step.index} {step.name}: {counts.denied} connection attempt(s) "
                       f"denied ({', '.join(counts.denied_hosts)})")
        return row.model_copy(update={"network": counts})

    # ---- the body ----------------------------------------------------------------------------
    async def body(self) -> None:
        try:
            spec, solution_env, verifier_envs = self._resolve()
            # --start-step/--from: start from the recorded snapshot (cairn.trial.snapshot)
            spec, self.forked_from = snapshots.start_spec(spec, self.task, self.plan.options,
                                                          self.plan.backend)
        except TrialFailure as exc:
            self.error = error_info(exc, phase=Phase.ENVIRONMENT)
            return
        self.solution_env = solution_env
        refusal = self.agent.refusal(self.task)  # skills/MCP servers the agent cannot take
        if refusal is not None:
            self.error = error_info(TrialFailure(ErrorKind.CONFIG_ERROR, refusal),
                                    phase=Phase.ENVIRONMENT)
            return
        cls = get_backend(self.plan.backend, compose=self.task.compose_file is not None)
        try:
            for warning in cls.check(spec):  # e.g. a limit the backend cannot apply
                self.warnings.append(warning)
                self.event(f"warning: {warning}", EventKind.WARNING)
            self.separate = self._plan_separate(spec, verifier_envs)
        except UnsupportedError as exc:
            self.error = error_info(TrialFailure(ErrorKind.CONFIG_ERROR, str(exc)),
                                    phase=Phase.ENVIRONMENT)
            return
        except TrialFailure as exc:
            self.error = error_info(exc, phase=Phase.ENVIRONMENT)
            return
        if hasattr(self.agent, "solution_env"):
            self.agent.solution_env = solution_env
        # agent host preparation (issue 15): a cached runtime, bound read-only when possible
        self.phase = Phase.AGENT_SETUP
        started = time.monotonic()
        try:
            prepare = getattr(self.agent, "prepare_host", None)
            mounts = await prepare(self.task, can_mount=cls.capabilities.read_only_mounts) \
                if prepare is not None else ()
        except TrialFailure as exc:
            self.error = error_info(exc, phase=Phase.AGENT_SETUP)
            return
        self.host_prepare_sec = time.monotonic() - started
        self.phase = Phase.ENVIRONMENT
        if mounts:
            spec = dataclasses.replace(spec, mounts=tuple(mounts))
        keep = self.plan.options.keep_sandbox
        spec = dataclasses.replace(spec, keep=keep)
        self._offer_args = (cls, spec)
        pool = PRESTARTS.get()
        pre = pool.take(self.plan, spec) if pool is not None else None
        sandbox = self.sandbox = pre.sandbox if pre is not None else cls(spec)
        cancelled = True
        try:
            sandbox = await self._start(sandbox, pre)
            await self._steps(sandbox, verifier_envs)
            cancelled = False
        except TrialFailure as exc:
            cancelled = False
            if exc.kind is not ErrorKind.START_FAILED:  # e.g. agent setup, the healthcheck
                exc = await with_sandbox_end(exc, self.sandbox or sandbox)
            self._record_failure(exc)
        finally:
            sandbox = self.sandbox or sandbox  # a fresh one if the pre-started one failed
            # --keep-sandbox keeps the sandbox of a trial that did not pass (never on Ctrl-C).
            verified = self.plan.options.verify
            failed = self.error is not None or self.stop_reason is not None or (
                verified and not all(r.passed for r in self.rows))
            if keep and failed and not cancelled:
                self.event(f"sandbox kept for inspection: {_enter_hint(sandbox)}")
            else:
                sandbox.spec = dataclasses.replace(sandbox.spec, keep=False)
            if not cancelled:
                self._offer()  # --prestart: a trial that ended before its last verifier
            # in a job, removal runs after the result is written (cairn.trial.deferred)
            await stop_sandbox(sandbox.stop, cancelled=cancelled)

    def _plan_separate(self, spec: SandboxSpec, verifier_envs: list[dict[str, str]]) -> dict:
        """Plan every separate verifier (design §4.6) before anything starts; adds their secrets
        to the masker."""
        if not self.plan.options.verify or all(s.verifier_mode != "separate"
                                               for s in self.task.steps):
            return {}
        from cairn.trial.separate_verifier import plan_separate_verifier

        plans = {s.index: plan_separate_verifier(self.task, s, spec, self.plan.backend,
                                                 timeout_multiplier=self.plan.options.timeouts.build,
                                                 verifier_env=venv)
                 for s, venv in zip(self.task.steps, verifier_envs, strict=True)
                 if s.verifier_mode == "separate"}
        extra = set().union(*(p.secrets for p in plans.values())) if plans else set()
        if extra:
            self.masker = Masker(set(self.masker.secrets) | extra)
            self.store.masker = self.masker
        return plans

    async def _start(self, sandbox: Sandbox, pre: Prestarted | None = None) -> Sandbox:
        """Start the sandbox (or wait for the pre-started one), healthcheck, agent setup.

        Returns:
            The sandbox the trial runs in: ``sandbox``, or a fresh one when a pre-started
            sandbox failed to come up (also set as :attr:`sandbox`).
        """
        started = time.monotonic()
        self.phase = Phase.ENVIRONMENT
        self.clock.begin("environment")
        if pre is not None and (failure := await pre.ready()) is not None:
            self.log(f"the pre-started sandbox did not come up ({type(failure).__name__}: "
                     f"{failure}); starting a fresh one")
            assert self._offer_args is not None
            sandbox = self.sandbox = self._offer_args[0](self._offer_args[1])
            pre = None
        if pre is None:
            try:
                await sandbox.start()
            except SandboxError as exc:
                if exc.kind is ErrorKind.SANDBOX_UNUSABLE:
                    raise as_start_failure(exc) from exc
                raise
        else:
            self.prestart_sec = pre.start_sec
            self.prestart_began_at = pre.began_at
        self.timings["environment_sec"] = time.monotonic() - started
        self.clock.end()
        self.info.update({k: v for k, v in sandbox.info.items() if k != "backend"})
        how = "" if pre is None else \
            f" (pre-started; its start took {pre.start_sec or 0.0:.1f} s during an earlier trial)"
        self.event(f"environment: {self.plan.backend}, ready in "
                   f"{self.timings['environment_sec']:.1f} s{how}", EventKind.ENVIRONMENT)
        hc = self.task.environment.healthcheck
        if hc is not None:
            self.clock.begin("healthcheck")
            out = await run_healthcheck(sandbox, hc, timeout_multiplier=self.plan.options.timeouts.default)
            self.clock.end()
            if not out.healthy:
                await check_services(sandbox, when="and the environment never became healthy")
                raise TrialFailure(ErrorKind.ENV_HEALTHCHECK_FAILED,
                                   f"environment healthcheck failed after {out.probes} probes",
                                   detail={"exit_code": out.last_exit_code,
                                           "output_tail": out.last_output})
        self.phase = Phase.AGENT_SETUP
        self.clock.begin("agent_setup")
        started = time.monotonic()
        first = self.task.steps[0]
        setup_timeout_sec = (self.plan.options.agent_setup_timeout_sec
                             * self.plan.options.timeouts.agent_setup)
        ctx = AgentContext(task=self.task, step=first, logs_dir=self.store.paths.root,
                           timeout_sec=setup_timeout_sec,
                           user=first.agent_user, env=dict(self.plan.options.agent_env))
        try:
            async with asyncio.timeout(setup_timeout_sec):
                await self.agent.setup(sandbox, ctx)
        except (TrialFailure, asyncio.CancelledError):
            raise
        except Exception as exc:  # noqa: BLE001 - any setup failure is agent_setup_failed (infra)
            raise TrialFailure(ErrorKind.AGENT_SETUP_FAILED,
                               f"agent setup failed: {type(exc).__name__}: {exc}") from exc
        self.timings["agent_setup_sec"] = time.monotonic() - started + self.host_prepare_sec
        self.clock.end()
        await check_services(sandbox)  # a start-up service that died fails the trial (#22)
        return sandbox

    async def _steps(self, sandbox: Sandbox, verifier_envs: list[dict[str, str]]) -> None:
        opts = self.plan.options
        steps = self.task.steps
        env = StepEnv(verifier_env={}, timeouts=opts.timeouts,
                      verify=opts.verify,
                      hardened=opts.hardened_verify, agent_env=dict(opts.agent_env),
                      resume_session=opts.resume_agent_session, mask=self.masker.mask,
                      separate=self.separate, networks=self.networks,
                      sandbox_outlives_trial=opts.keep_sandbox, on_phase=self._record_phase)
        self.step_env = env
        if opts.snapshot_steps:  # --snapshot-steps (cairn.trial.snapshot)
            env.snapshot = snapshots.snapshot_taker(job_id=self.plan.job_id,
                                                    trial_id=self.plan.trial_id,
                                                    job_dir=self.plan.job_dir)
        first = snapshots.start_index(self.task, opts.start_step)
        env.artifacts_left = first > 1  # a replayed or forked start may have left some
        for step, venv in zip(steps, verifier_envs, strict=True):
            env.verifier_env = venv
            if step.index < first:  # --start-step: replay by the oracle, or forked files
                if opts.fork_from is None and not await self._replay(sandbox, step, env):
                    return
                continue
            self.steps_run += 1
            self.current_step = step
            self._phase = Phase.SETUP
            env.phase = Phase.SETUP  # on_phase records it in status.json
            sp = self.store.step_dirs(step.index, step.name)
            self.store.write_instruction(step.index, step.name, strip_canary(step.instruction))
            dirs = StepDirs(agent=sp.agent, verifier=sp.verifier, artifacts=sp.artifacts)
            try:
                row, _ = await run_step(sandbox, self.agent, step, dirs, env, self.task)
                self.after_agent = True
            except TrialFailure as exc:
                self.after_agent = self.after_agent or env.trial_baseline is not None
                exc = await with_sandbox_end(exc, sandbox)
                row = self._step_failure(step, exc)
                row = row.model_copy(update={"timings": env.clock.failed_step_timings()})
            self.current_step = None
            row = await self._record_network(sandbox, step, row)
            self.rows[step.index - 1] = row
            self.store.write_steps(self.rows)
            self._step_event(step, row)
            if self.error is not None:
                return
            if row.error is not None and row.source is StepSource.ERROR:
                self.error = row.error
                return
            stop = stop_decision(row, step.min_reward, is_last=step.index == len(steps),
                                 verify=opts.verify)
            if stop is not None:
                self.stop_reason = stop
                return

    async def _replay(self, sandbox: Sandbox, step: Step, env: StepEnv) -> bool:
        """``--start-step``: one earlier step run by the oracle and verified (source
        ``oracle``); False when it failed (the trial's error is then set)."""
        from cairn.agents.oracle import OracleAgent

        oracle = OracleAgent()
        oracle.solution_env = self.solution_env
        self.current_step = step
        sp = self.store.step_dirs(step.index, step.name)
        dirs = StepDirs(agent=sp.agent, verifier=sp.verifier, artifacts=sp.artifacts)
        try:
            row = await snapshots.replay_step(run_step, sandbox, oracle, step, dirs, env,
                                              self.task)
        except TrialFailure as exc:
            row = self._step_failure(step, exc)
            row = row.model_copy(update={"timings": env.clock.failed_step_timings()})
        env.trial_baseline = None  # hardened mode: the agent's baseline is its first step
        self.current_step = None
        self.rows[step.index - 1] = row
        self.store.write_steps(self.rows)
        self.event(f"step {step.index}/{len(self.task.steps)} {step.name}: replayed by the "
                   f"oracle" + (f", error {row.error.kind.value}: {row.error.message}"
                                if row.error else " (passed; not scored)"))
        if self.error is None and row.error is not None and row.source is StepSource.ERROR:
            self.error = row.error
        return self.error is None

    def _step_failure(self, step: Step, exc: TrialFailure) -> StepResult:
        """Turn a failure raised inside a step into its row (and maybe the trial's error)."""
        phase = PHASE_OF.get(exc.kind) or (self.step_env.phase if self.step_env else None)
        if isinstance(exc, SandboxLostError):
            self.error = error_info(exc, step=step, phase=phase, mask=self.masker.mask)
            return StepResult(index=step.index, name=step.name, source=StepSource.ERROR,
                              error=self.error)
        if exc.kind is ErrorKind.SANDBOX_UNUSABLE and not self.after_agent:
            exc = as_transfer_failure(exc)
        info = error_info(exc, step=step, phase=phase, after_agent=self.after_agent,
                          mask=self.masker.mask)
        if info.category is Category.CANDIDATE:
            return StepResult(index=step.index, name=step.name, source=StepSource.CANDIDATE_ERROR,
                              reward=0.0, rewards={"reward": 0.0}, passed=False, error=info)
        self.error = info
        return StepResult(index=step.index, name=step.name, source=StepSource.ERROR, error=info)

    def _record_failure(self, exc: TrialFailure) -> None:
        if self.error is None:
            self.error = error_info(exc, phase=self.phase if exc.kind not in PHASE_OF else None,
                                    after_agent=self.after_agent, mask=self.masker.mask)

    def _step_event(self, step: Step, row: StepResult) -> None:
        n = len(self.task.steps)
        t = row.timings
        if row.source is StepSource.CANDIDATE_ERROR and row.error is not None:
            what = f"reward 0.00 ({row.error.kind.value}: {row.error.message})"
        elif row.source is StepSource.VERIFIER:
            what = f"reward {row.reward:.2f}" if row.reward is not None else \
                f"rewards {row.rewards}"
        elif row.error is not None:
            what = f"error {row.error.kind.value}: {row.error.message}"
        else:
            what = "agent only (no verification)"
        parts = [f"agent {t.agent_sec:.1f} s" if t.agent_sec is not None else None,
                 f"verifier {t.verifier_sec:.1f} s" if t.verifier_sec is not None else None]
        extra = ", ".join(p for p in parts if p)
        exit_note = f" [agent {row.agent_exit.value}]" if row.agent_exit and \
            row.agent_exit.value != "ok" else ""
        self.event(f"step {step.index}/{n} {step.name}: {what}{exit_note}"
                   + (f" ({extra})" if extra else ""), EventKind.STEP)

    # ---- result ------------------------------------------------------------------------------
    def _timings(self, total_sec: float) -> TrialTimings:
        self.clock.end()  # a phase that raised still shows where the trial stopped
        return TrialTimings(total_sec=total_sec, environment_sec=self.timings["environment_sec"],
                            agent_setup_sec=self.timings["agent_setup_sec"],
                            healthcheck_sec=self.clock.seconds("healthcheck"),
                            spans=list(self.clock.spans),
                            prestarted=self.prestart_sec is not None,
                            prestart_sec=self.prestart_sec,
                            prestart_began_at=self.prestart_began_at)

    def result(self, started_at: datetime, total_sec: float, cancelled: bool) -> TrialResult:
        task = self.task
        strategy = task.config.multi_step_reward_strategy
        error = self.error
        if cancelled and error is None:
            running = self.current_step
            phase = self.step_env.phase if running is not None and self.step_env else self.phase
            error = ErrorInfo(kind=ErrorKind.CANCELLED, category=Category.JOB, phase=phase,
                              step=running.name if running else None,
                              message="the trial was cancelled"
                              + (f" during step {running.name!r}" if running else ""))
        steps_total = snapshots.agent_steps_total(task, self.plan.options.start_step)
        n_replayed = sum(r.source is StepSource.ORACLE for r in self.rows)
        score = score_trial(strategy, self.rows, steps_total=steps_total + n_replayed,
                            stop_reason=self.stop_reason, error=error, cancelled=cancelled)
        verify = self.plan.options.verify
        toks = [r.tokens for r in self.rows if r.tokens is not None]
        costs = [r.cost_usd for r in self.rows if r.cost_usd is not None]
        return TrialResult(
            trial_id=self.plan.trial_id, trial_name=self.plan.trial_name,
            attempt=self.plan.attempt,
            task=TaskRef(name=task.name, content_hash=task.content_hash,
                         source=self.plan.source),
            agent=AgentRef(name=self.plan.agent_name, version=self.agent.version,
                           kwargs=dict(self.plan.agent_kwargs)),
            model=self.plan.model, backend=self.plan.backend, outcome=score.outcome,
            error=score.error, reward=score.reward if verify else None,
            rewards=score.rewards if verify else None,
            reward_all_steps=score.reward_all_steps if verify else None,
            passed=score.passed and verify, strategy=strategy, steps_total=steps_total,
            steps_run=self.steps_run, stopped_after=score.stopped_after,
            stop_reason=score.stop_reason,
            timings=self._timings(total_sec),
            tokens=Tokens.total(toks),
            cost_usd=sum(costs) if costs else None, judge=sum_judge(r.judge for r in self.rows),
            started_at=started_at, finished_at=_now(),
            image_id=self.info.get("image_id"), engine_version=self.info.get("engine_version"),
            warnings=[*self.task_warnings(), *self.warnings], steps=self.rows,
            start_step=self.plan.options.start_step, forked_from=self.forked_from)

    def task_warnings(self) -> list[str]:
        return [str(w) for w in self.task.warnings]


async def run_trial(plan: TrialPlan, *, agent: Agent | None = None,
                    on_event: EventSink | None = None) -> TrialResult:
    """Run one trial to its end and write its results (design §4.1).

    Args:
        plan: the trial plan (task, agent, backend, attempt, ids, folders, options).
        agent: an agent instance to use instead of creating one from ``plan.agent_name``.
        on_event: receives each :class:`~cairn.events.Event` (design §9's per-step lines,
            the verdict, warnings).

    Returns:
        The :class:`TrialResult`, also written to ``<trial_dir>/result.json`` (last).

    Raises:
        asyncio.CancelledError: after recording the trial as ``cancelled`` (sandbox removed).
    """
    started_at = _now()
    t0 = time.monotonic()
    run = _TrialRun(plan, agent or make_agent(plan), on_event)
    run.store.create()
    run.store.write_config(TrialConfigFile(
        task=ConfigTask(name=plan.task.name, content_hash=plan.task.content_hash,
                        path=str(plan.task.path), source=plan.source),
        agent=ConfigAgent(name=plan.agent_name, kwargs=plan.agent_kwargs,
                          version=run.agent.version),
        model=plan.model, backend=plan.backend, attempt=plan.attempt,
        trial_id=plan.trial_id, job_id=plan.job_id,
        options=ConfigOptions(timeout_multiplier=plan.options.timeout_multiplier,
                              verify=plan.options.verify,
                              hardened_verify=plan.options.hardened_verify,
                              snapshot_steps=plan.options.snapshot_steps,
                              start_step=plan.options.start_step,
                              fork_from=str(plan.options.fork_from) if plan.options.fork_from
                              else None,
                              extra_instructions=list(plan.options.extra_instructions),
                              timeout_multipliers=plan.options.given_multipliers,
                              resource_overrides=dict(plan.options.resource_overrides),
                              extra_artifacts=list(plan.options.extra_artifacts))))
    run.store.write_steps(run.rows)
    cancelled = crashed = False
    try:
        await run.body()
    except asyncio.CancelledError:
        cancelled = True
        raise
    except BaseException:
        # Not a trial outcome (a bug, or the jobs folder itself failing): write no result, so
        # the trial is not taken for completed and `cairn resume` runs it again (design §8).
        crashed = True
        raise
    finally:
        if not crashed:
            run.warnings.extend(run.store.mask_files())
            result = run.result(started_at, time.monotonic() - t0, cancelled)
            run.store.write_result(result)
            if not cancelled:
                from cairn.results.verdict import verdict_line

                run.event(verdict_line(result), EventKind.VERDICT)
    return result
