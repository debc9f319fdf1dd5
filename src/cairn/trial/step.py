"""One step's procedure, in design §4.2's exact order, against the Sandbox interface.

1. host folders; 2. copy ``workdir/`` (agent's earlier files kept); 3. ``setup.sh``;
4. step healthcheck; 5. agent phase; 6. end the phase (§4.4); 7. artifacts; 8. verifier.
The stop rules (9.) are applied by :mod:`cairn.trial`, which owns the loop.
"""

from __future__ import annotations

import asyncio
import re
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn.agents.base import Agent, AgentContext
from cairn.errors import (
    ErrorKind,
    ModelError,
    Phase,
    SandboxError,
    TrialFailure,
)
from cairn.layout import AGENT_LOGS_DIR, ARTIFACTS_DIR, VERIFIER_LOGS_DIR
from cairn.results.aggregate import evaluate_gates, primary_reward, step_passed
from cairn.results.model import AgentExit, StepResult, StepSource, StepTimings
from cairn.results.store import write_artifacts_manifest
from cairn.sandbox.base import NetworkPolicy, ProcessInfo, Sandbox, host_boot_clock
from cairn.task.model import MAIN_SERVICE, Step
from cairn.trial.artifacts import collect_step_artifacts
from cairn.trial.classify import error_info, with_end
from cairn.trial.healthcheck import run_healthcheck
from cairn.trial.helper import (
    CLEAR_EVIDENCE_CMD,
    AfterAgent,
    after_agent_argv,
    parse_after_agent,
)
from cairn.trial.pre_artifacts import run_pre_artifacts
from cairn.trial.services import check_services
from cairn.trial.spans import SpanClock
from cairn.trial.survivors import list_survivors, survivors_from, verifier_wider
from cairn.trial.verify import run_verifier

if TYPE_CHECKING:  # pragma: no cover
    from cairn.trial.snapshot import SnapshotHook

_GUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_CANARY_LINE = re.compile(rf"^.*canary.*{_GUID}.*$\n?", re.IGNORECASE | re.MULTILINE)
SETUP_SCRIPT = "/tmp/.cairn-setup.sh"
PYTHON_HOOKS_CMD = (
    "find / -xdev \\( -path /proc -o -path /sys -o -path /tests \\) -prune -o "
    "\\( -name sitecustomize.py -o -name usercustomize.py -o -name conftest.py \\) "
    "-newer /proc/1/cmdline -type f -print -delete 2>/dev/null; "
    "for d in $(python3 -c 'import site,sys; print(\" \".join(site.getsitepackages()+"
    "[site.getusersitepackages()]))' 2>/dev/null); do "
    "find \"$d\" -maxdepth 1 -name '*.pth' -newer /proc/1/cmdline -type f -print -delete "
    "2>/dev/null; done; true")


def strip_canary(text: str) -> str:
    """Remove every line that carries a canary GUID (also inside ``<!-- -->``), design §4.2."""
    return _CANARY_LINE.sub("", text)


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


async def _switch(sandbox: Sandbox, env: StepEnv, policy: NetworkPolicy | None, phase: str
                  ) -> None:
    """Put the sandbox's network into ``policy`` for ``phase`` (no-op without a plan)."""
    if env.networks is not None and policy is not None and env.networks.filtered:
        await sandbox.set_network(policy, phase=phase)


@dataclass
class StepEnv:
    """Per-step inputs the trial resolved once.

    Attributes:
        verifier_env: resolved merged verifier env.
        timeout_multiplier: the timeout multiplier (setup.sh, healthchecks, hooks).
        agent_timeout_multiplier: the factor on the agent phase's timeout
            (``--agent-timeout-multiplier``, else ``timeout_multiplier``).
        verifier_timeout_multiplier: the factor on the verifier's timeout.
        verify: ``False`` under ``--no-verify``.
        hardened: ``--hardened-verify``.
        agent_env: ``--ae`` variables.
        resume_session: ``--resume-agent-session``.
        trial_baseline: processes that existed before the first agent phase (hardened mode).
        mask: secret masker for text written to the host.
        separate: step index → :class:`cairn.trial.separate_verifier.SeparatePlan` for steps verified in a
            separate sandbox (design §4.6).
        phase: the phase the running step is in (kept up to date by :func:`run_step`).
    """

    verifier_env: dict[str, str]
    timeout_multiplier: float = 1.0
    agent_timeout_multiplier: float | None = None
    verifier_timeout_multiplier: float | None = None
    verify: bool = True
    hardened: bool = False
    agent_env: dict[str, str] = field(default_factory=dict)
    resume_session: bool = False
    trial_baseline: Baseline | None = None
    mask: Callable[[str], str] = field(default=lambda s: s)
    separate: dict = field(default_factory=dict)
    phase: Phase = Phase.SETUP
    """Where the running step is (set by :func:`run_step`), for errors and cancellation."""
    snapshot: SnapshotHook | None = None
    """``--snapshot-steps``: the hook of :func:`cairn.trial.snapshot.snapshot_taker`, called
    after the agent phase has ended and before artifacts; ``None`` takes no snapshot."""
    networks: PhaseNetworks | None = None
    """The phases' network policies; the step switches the sandbox between them."""
    separate_records: list[dict] = field(default_factory=list)
    """Connection records of the step's separate verifier sandbox, for the trial's record."""
    sandbox_outlives_trial: bool = False
    """``--keep-sandbox``: the sandbox may be kept after the trial, so the last verifier cleans
    up after itself too (otherwise the sandbox's removal does, design §4.6)."""
    on_phase: Callable[[Phase], None] | None = None
    """Called with each new :attr:`phase` (the trial records it in status.json for the viewer)."""
    clock: SpanClock = field(default_factory=SpanClock)
    """The running step's phase spans (a new clock per step, set by :func:`run_step`)."""
    artifacts_left: bool = False
    """``/logs/artifacts`` may hold files an earlier step's agent, ``pre_artifacts.sh`` or
    hooks left there (collected into that step's artifacts): the next step empties it first, so
    each step's artifacts are its own, as in Harbor, which moves the folder's contents into the
    step's output after every step. ``True`` at the start of a trial begun from a later step."""

    def __setattr__(self, name: str, value: object) -> None:
        super().__setattr__(name, value)
        if name == "phase" and getattr(self, "on_phase", None) is not None:
            self.on_phase(value)  # type: ignore[misc,arg-type]


@dataclass
class StepDirs:
    """The step's host folders."""

    agent: Path
    verifier: Path
    artifacts: Path


@dataclass(frozen=True)
class Baseline:
    """The processes that existed before an agent phase, to tell the agent's from them.

    Either listed (one exec on docker), or — when the sandbox's process start times count the
    host's own boot clock (:attr:`Sandbox.boot_clock`) — a clock tick read on the host: a
    process is new when it started in a later tick. :func:`take_baseline` waits for the next
    tick to begin before it returns, so every process started after it is in a later tick and
    every process started before it is not: the same split a listing makes, without the exec.

    Attributes:
        processes: the listed processes, or ``None``.
        before_tick: the last clock tick (``CLOCK_BOOTTIME`` in ``SC_CLK_TCK`` units) of the
            processes that were there, or ``None``.
    """

    processes: tuple[ProcessInfo, ...] | None = None
    before_tick: int | None = None

    def is_new(self, p: ProcessInfo) -> bool:
        """Whether ``p`` started after the baseline was taken."""
        if self.before_tick is not None:
            return p.start_ticks > self.before_tick
        return p.key not in {q.key for q in self.processes or ()}


async def take_baseline(sandbox: Sandbox) -> Baseline:
    """The baseline of the processes running now.

    On a sandbox that shares the host's boot clock this reads the clock and waits for the next
    tick (at most one tick, 10 ms at the usual 100 Hz) instead of listing processes with an exec.
    """
    if sandbox.boot_clock:
        now, hz = host_boot_clock()
        tick = int(now * hz)
        await asyncio.sleep((tick + 1) / hz - now + 0.0005)
        return Baseline(before_tick=tick)
    return Baseline(processes=tuple(await sandbox.processes()))


async def _kill_new(sandbox: Sandbox, before: Baseline) -> list[ProcessInfo]:
    """SIGKILL every process that is not in ``before`` (by pid and start time); repeat until none.

    Returns:
        The processes killed.
    """
    killed: list[ProcessInfo] = []
    for _ in range(5):
        new = [p for p in await sandbox.processes() if before.is_new(p) and p.pid != 1]
        if not new:
            break
        await sandbox.kill_processes(new)
        killed.extend(new)
        await asyncio.sleep(0.05)
    return killed


async def _kill_for_wider(sandbox: Sandbox, env: StepEnv, before: Baseline, wider: str,
                          warnings: list[str]) -> tuple[list, int, str]:
    """Issue #34 L4 (:mod:`cairn.trial.survivors`): the verifier's openings or secrets go
    beyond the agent's, so record what the agent phase left running and kill every process
    the trial's agent phases started, as ``--hardened-verify`` does, before the network
    switches to the verifier's policy.

    Returns:
        ``(survivors, how many, why they were killed)``.
    """
    listed, total = await list_survivors(sandbox, before)
    killed = await _kill_new(sandbox, env.trial_baseline or before)
    if killed:
        warnings.append(f"killed {len(killed)} agent process(es) before the verifier: its "
                        f"access goes beyond the agent's ({wider})")
    return listed, total, "hardened_verify" if env.hardened else f"verifier_wider: {wider}"


async def _copy_workdir(sandbox: Sandbox, step: Step) -> None:
    """Copy ``steps/<name>/workdir/`` (except setup.sh) into the working dir, owned by the agent user."""
    if step.workdir_dir is None:
        return
    wd = sandbox.workdir
    entries = sorted(p for p in step.workdir_dir.iterdir() if p.name != "setup.sh")
    if not entries:
        return
    await sandbox.exec(["mkdir", "-p", wd], user="root")
    for p in entries:
        await sandbox.upload(p, f"{wd.rstrip('/')}/{p.name}")
    owner = step.agent_user
    if owner is None:
        owner = (await sandbox.exec(["id", "-u"])).stdout.strip() or "0"
    if str(owner) not in ("0", "root"):
        await sandbox.exec(["chown", "-R", str(owner), *[f"{wd.rstrip('/')}/{p.name}" for p in entries]],
                           user="root")


async def _run_setup(sandbox: Sandbox, step: Step, timeout_multiplier: float) -> float:
    """Run ``workdir/setup.sh`` as the agent user in the working dir; returns seconds taken.

    Raises:
        TrialFailure: ``setup_failed`` on non-zero exit or timeout (exit code, stderr tail).
    """
    setup = step.setup_sh
    if setup is None:
        return 0.0
    started = time.monotonic()
    await sandbox.upload(setup, SETUP_SCRIPT)
    await sandbox.exec(["chmod", "755", SETUP_SCRIPT], user="root")
    if b"\r\n" in setup.read_bytes():
        await sandbox.exec(["sed", "-i", "s/\\r$//", SETUP_SCRIPT], user="root")
    timeout = step.setup_timeout_sec * timeout_multiplier
    r = await sandbox.exec(["bash", SETUP_SCRIPT], user=step.agent_user, timeout_sec=timeout)
    await sandbox.exec(["rm", "-f", SETUP_SCRIPT], user="root")
    if not r.ok:
        why = f"timed out after {timeout:g} s" if r.timed_out else f"exited {r.exit_code}"
        raise TrialFailure(ErrorKind.SETUP_FAILED, f"setup.sh of step {step.name!r} {why}",
                           detail={"exit_code": r.exit_code, "timed_out": r.timed_out,
                                   "stderr_tail": r.stderr[-2000:]})
    return time.monotonic() - started


async def _evidence(sandbox: Sandbox, step: Step, agent_dir: Path, *, prepare_tests: bool,
                    size_artifacts: bool, list_processes: bool = False
                    ) -> tuple[list[str], AfterAgent, list[str]]:
    """End-of-agent-phase evidence (§11), with one exec in the common case
    (:mod:`cairn.trial.helper`): remove ``/solution``, find which log folders hold files, move
    planted verifier files aside, maybe prepare the shared verifier's folders and size the
    artifact entries; then bring agent logs and planted files to the host and, only when there
    were any, remove them from the sandbox (one more exec), so the verifier and later agents
    see an empty ``/logs/agent`` as before.

    Args:
        sandbox: the trial's sandbox.
        step: the step (its artifact entries may be sized).
        agent_dir: the step's host ``agent/`` folder.
        prepare_tests: the shared verifier follows with nothing run in between (``/tests``
            removed, ``/logs/verifier`` fresh now).
        size_artifacts: size the step's main-service artifact entries and ``/logs/artifacts``
            (nothing runs in the sandbox between this exec and their collection).
        list_processes: also list the sandbox's processes and users (the survivors of the
            agent phase, issue #29), in the same exec.

    Returns:
        (warnings, the report, the artifact sources it sized, in order).

    Raises:
        SandboxError: the exec or a download failed.
    """
    warnings: list[str] = []
    sources = [*(a.source for a in step.artifacts if (a.service or MAIN_SERVICE).strip()
                 in (MAIN_SERVICE, "")), ARTIFACTS_DIR] if size_artifacts else []
    r = await sandbox.exec(after_agent_argv(sources, prepare_tests=prepare_tests,
                                            list_processes=list_processes), user="root")
    if not r.ok:
        raise SandboxError(f"the after-agent exec failed (exit {r.exit_code}): "
                           f"{r.stderr.strip()[-300:]}")
    report = parse_after_agent(r.stdout, len(sources))
    for d in sorted(report.odd):
        warnings.append(f"the agent replaced {d} by a link or a file; it was recreated empty")
    if AGENT_LOGS_DIR in report.full:
        await sandbox.download(AGENT_LOGS_DIR, agent_dir)
    if report.planted is not None:
        planted = agent_dir / "planted-verifier-logs"
        planted.mkdir(parents=True, exist_ok=True)
        await sandbox.download(report.planted, planted)
        warnings.append(f"the agent wrote into {VERIFIER_LOGS_DIR}; kept as evidence in "
                        "agent/planted-verifier-logs and never read as a reward")
    if AGENT_LOGS_DIR in report.full or report.planted is not None:
        await sandbox.exec(CLEAR_EVIDENCE_CMD, user="root")
    return warnings, report, sources


async def run_step(sandbox: Sandbox, agent: Agent, step: Step, dirs: StepDirs, env: StepEnv,
                   task) -> tuple[StepResult, AgentContext | None]:
    """Run one step (design §4.2 items 2–8) and return its row.

    Failures of design §6's vocabulary raised by the phases are left to the caller (the trial),
    which classifies them; the returned row covers the normal path including verifier errors,
    which are recorded in ``error`` with ``source = error``.

    Raises:
        TrialFailure: ``setup_failed``, ``healthcheck_failed``, a model error, or a sandbox
            error (the trial turns it into the step's row, :func:`cairn.trial.classify.error_info`).
        SandboxLostError: the engine is gone.
    """
    timings: dict[str, Any] = {"setup_sec": None, "agent_sec": None, "verifier_sec": None}
    warnings: list[str] = []
    mask = env.mask
    clock = env.clock = SpanClock()  # timings.spans: the viewer's timeline bars
    timings["spans"] = clock.spans

    # 2-3. workdir and setup.sh (the environment's network; step 1 starts in it)
    env.phase = Phase.SETUP
    if step.index > 1 and env.networks is not None:
        await _switch(sandbox, env, env.networks.environment, "setup")
    clock.begin("setup")
    if step.index > 1 and env.artifacts_left:  # each step's artifacts are its own (§4.5)
        await sandbox.exec(["/bin/sh", "-c", f"find {ARTIFACTS_DIR} -mindepth 1 -delete; "
                            f"mkdir -p {ARTIFACTS_DIR} && chmod 777 {ARTIFACTS_DIR}"], user="root")
        env.artifacts_left = False
    await _copy_workdir(sandbox, step)
    if step.setup_sh is not None:
        timings["setup_sec"] = await _run_setup(sandbox, step, env.timeout_multiplier)
    clock.end()

    # 4. step healthcheck
    env.phase = Phase.HEALTHCHECK
    if step.healthcheck is not None:
        clock.begin("healthcheck")
        hc = await run_healthcheck(sandbox, step.healthcheck, user=step.agent_user,
                                   timeout_multiplier=env.timeout_multiplier)
        clock.end()
        timings["healthcheck_sec"] = clock.seconds("healthcheck")
        if not hc.healthy:
            raise TrialFailure(ErrorKind.HEALTHCHECK_FAILED,
                               f"healthcheck of step {step.name!r} failed after {hc.probes} probes",
                               detail={"exit_code": hc.last_exit_code,
                                       "output_tail": hc.last_output})

    # 5. agent phase
    env.phase = Phase.AGENT
    timeout = step.agent_timeout_sec * (env.agent_timeout_multiplier or env.timeout_multiplier)
    context = AgentContext(task=task, step=step, logs_dir=dirs.agent, timeout_sec=timeout,
                           user=step.agent_user, env=dict(env.agent_env),
                           resume_session=env.resume_session)
    before = await take_baseline(sandbox)
    if env.trial_baseline is None:
        env.trial_baseline = before
    if env.networks is not None:
        await _switch(sandbox, env, env.networks.agent.get(step.index), "agent")
    agent_exit = AgentExit.OK
    clock.begin("agent")
    started = time.monotonic()
    try:
        async with asyncio.timeout(timeout):
            await agent.run(strip_canary(step.instruction), sandbox, context)
    except TimeoutError:
        agent_exit = AgentExit.TIMEOUT
    except (ModelError, SandboxError):
        raise
    except Exception:  # noqa: BLE001 - an agent crash is recorded, the verifier still runs
        agent_exit = AgentExit.ERROR
        (dirs.agent / "agent-error.txt").write_text(mask(traceback.format_exc()), encoding="utf-8")
    timings["agent_sec"] = time.monotonic() - started
    clock.end()
    if agent_exit is AgentExit.OK and context.exit is not None:
        agent_exit = context.exit
    if context.metadata.get("model_retries"):
        warnings.append(f"model calls retried {context.metadata['model_retries']} time(s)")

    # 6. end the agent phase (§4.4): kill what a timed-out or crashed agent started, record
    # what still runs, kill it before a verifier with wider openings (issue #29, #34 L4:
    # cairn.trial.survivors), then close the agent's network openings
    if agent_exit in (AgentExit.TIMEOUT, AgentExit.ERROR):
        killed = await _kill_new(sandbox, before)
        if killed:
            warnings.append(f"killed {len(killed)} process(es) left by the agent phase")
    wider = verifier_wider(step, env)  # issue #29 / #34 L4 (cairn.trial.survivors)
    early = await _kill_for_wider(sandbox, env, before, wider, warnings) \
        if wider is not None else None
    if env.networks is not None:
        after = env.networks.verifier.get(step.index, env.networks.environment)
        await _switch(sandbox, env, after, "verifier" if env.verify else "after-agent")
    # Nothing runs in the sandbox between this exec and the artifacts (no pre_artifacts.sh, no
    # snapshot, no collect hook): it sizes them too; nor before the shared verifier (hardened
    # mode kills the agent's processes first): it prepares /tests and /logs/verifier too.
    quiet = step.pre_artifacts_sh is None and env.snapshot is None and not step.collect
    prepared = quiet and env.verify and step.verifier_mode != "separate" and \
        step.test_sh is not None and not env.hardened
    evidence_warnings, report, sources = await _evidence(
        sandbox, step, dirs.agent, prepare_tests=prepared, size_artifacts=quiet,
        list_processes=early is None)
    warnings.extend(evidence_warnings)
    survivors, survivors_total, survivors_killed = early if early is not None else (
        *survivors_from(report.processes or [], report.users, before),
        "hardened_verify" if env.hardened and env.verify else None)
    # 6a. pre_artifacts.sh (Evolve, #22): hands work on under /logs/artifacts; never fatal
    if step.pre_artifacts_sh is not None:
        clock.begin("pre_artifacts")
        warnings.extend(await run_pre_artifacts(sandbox, step, dirs.agent, mask=mask,
                                                timeout_multiplier=env.timeout_multiplier))
        clock.end()

    # 6b. --snapshot-steps: the end-of-agent files, before artifacts and verifier (design §4.7)
    snapshot = None
    if env.snapshot is not None:
        snapshot, snapshot_warnings = await env.snapshot(sandbox, step)
        warnings.extend(snapshot_warnings)

    # 7. artifacts
    env.phase = Phase.ARTIFACTS
    clock.begin("artifacts")
    manifest, hook_warnings = await collect_step_artifacts(
        sandbox, step.artifacts, step.collect, dirs.artifacts, timeout_multiplier=env.timeout_multiplier,
        logs_artifacts_written=ARTIFACTS_DIR in report.full if quiet else None,
        sized=dict(zip(sources, report.artifacts, strict=True)) if quiet else None)
    warnings.extend(hook_warnings)
    write_artifacts_manifest(dirs.artifacts, manifest)
    env.artifacts_left = not quiet or ARTIFACTS_DIR in report.full
    clock.end()
    timings["artifacts_sec"] = clock.seconds("pre_artifacts", "artifacts")
    for row in manifest:
        if row["status"] != "copied":
            warnings.append(f"artifact {row['source']} not collected: {row['error']}")
        elif row.get("skipped_too_long_count"):  # issue #29 (manifest.json lists them)
            warnings.append(f"artifact {row['source']}: {row['skipped_too_long_count']} "
                            "path(s) too long for the host skipped (listed in manifest.json)")

    # 7a. a start-up service that died while the agent worked fails the trial as the task's
    # error (service_exited, its exit code and log tail), never scored as the agent's (#22)
    await check_services(sandbox, when=f"during step {step.name!r}, after the agent started")

    row = dict(index=step.index, name=step.name, agent_exit=agent_exit, warnings=warnings,
               tokens=context.tokens, cost_usd=context.cost_usd,
               snapshot=snapshot, survivors=survivors, survivors_total=survivors_total,
               survivors_killed=survivors_killed)
    if not env.verify:
        return StepResult(source=StepSource.NOT_RUN, timings=StepTimings(**timings), **row), context

    # 8. verifier
    env.phase = Phase.VERIFIER
    last = task is not None and step.index == len(task.steps)
    if env.hardened:
        killed = await _kill_new(sandbox, env.trial_baseline or before)
        if killed:
            warnings.append(f"hardened verify: killed {len(killed)} agent process(es)")
        await sandbox.exec(PYTHON_HOOKS_CMD, user="root")
    verifier_timeout = step.verifier_timeout_sec * (env.verifier_timeout_multiplier
                                                    or env.timeout_multiplier)
    clock.begin("verifier")
    if step.verifier_mode == "separate":
        from cairn.trial.separate_verifier import run_separate_verifier

        plan = env.separate.get(step.index)
        if plan is None:
            raise TrialFailure(ErrorKind.CONFIG_ERROR,
                               f"step {step.name!r}: separate verifier was not planned")
        v = await run_separate_verifier(plan, step, env=env.verifier_env,
                                        timeout_sec=verifier_timeout,
                                        verifier_dir=dirs.verifier, artifacts_dir=dirs.artifacts,
                                        mask=mask, timeout_multiplier=env.timeout_multiplier)
        env.separate_records = v.network_records
    else:
        v = await run_verifier(sandbox, step, env=env.verifier_env,
                               timeout_sec=verifier_timeout,
                               verifier_dir=dirs.verifier, mask=mask,
                               prepared=prepared, prepared_free_kb=report.free_kb,
                               cleanup=not last or env.sandbox_outlives_trial)
        if v.error is not None:  # a verifier that killed its sandbox (out of memory) says so
            v.error = with_end(v.error, await sandbox.ended())
    clock.end()
    timings["verifier_sec"] = v.elapsed_sec
    warnings.extend(v.warnings)
    row["judge"] = v.judge  # an LLM judge's spend, apart from the agent's (#22)
    if v.error is not None:

        err = error_info(v.error, step=step, phase=Phase.VERIFIER)
        return StepResult(source=StepSource.ERROR, error=err, verifier_exit_code=v.exit_code,
                          reward_file=v.reward_file, timings=StepTimings(**timings),
                          **row), context
    gates = list(evaluate_gates(step.min_reward, v.rewards)) if step.min_reward is not None else []
    return StepResult(
        source=StepSource.VERIFIER, reward=primary_reward(v.rewards), rewards=v.rewards,
        passed=step_passed(step.min_reward, v.rewards, True), verifier_exit_code=v.exit_code,
        reward_file=v.reward_file, timings=StepTimings(**timings), gates=gates, **row), context
