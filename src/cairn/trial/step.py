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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cairn.agents.base import Agent, AgentContext
from cairn.errors import (
    ErrorKind,
    ModelError,
    Phase,
    SandboxError,
    TrialFailure,
)
from cairn.events import EventKind
from cairn.layout import AGENT_LOGS_DIR, ARTIFACTS_DIR, VERIFIER_LOGS_DIR
from cairn.results.aggregate import evaluate_gates, primary_reward, step_passed
from cairn.results.model import (
    AgentExit,
    StepResult,
    StepSnapshot,
    StepSource,
    StepTimings,
    Survivor,
)
from cairn.results.store import StepPaths, write_artifacts_manifest
from cairn.sandbox.base import ProcessInfo, Sandbox, host_boot_clock
from cairn.task.model import MAIN_SERVICE, Step, Task
from cairn.trial.artifacts import collect_step_artifacts
from cairn.trial.classify import error_info, with_end
from cairn.trial.context import PhaseNetworks, TrialSettings
from cairn.trial.healthcheck import run_healthcheck
from cairn.trial.helper import (
    CLEAR_EVIDENCE_CMD,
    AfterAgent,
    after_agent_argv,
    parse_after_agent,
    reset_dirs_cmd,
)
from cairn.trial.pre_artifacts import run_pre_artifacts
from cairn.trial.recorder import TrialRecorder
from cairn.trial.services import check_services
from cairn.trial.spans import SpanClock
from cairn.trial.survivors import (
    after_agent_policy,
    clean_cmdline,
    list_survivors,
    setup_wider,
    survivors_from,
    verifier_wider,
)
from cairn.trial.verify import VerifierRun, run_verifier

_GUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_CANARY_LINE = re.compile(rf"^.*canary.*{_GUID}.*$\n?", re.IGNORECASE | re.MULTILINE)
SETUP_SCRIPT = "/tmp/.cairn-setup.sh"
HOOKS_TIMEOUT_SEC = 120.0
"""The bound on the hook clean-up's exec, seconds."""
LEFT_SHOWN = 3
"""How many processes left running after a kill a warning names by command line."""

HOOK_NAMES = "-name 'sitecustomize*' -o -name 'usercustomize*' -o -name conftest.py"
"""The ``find`` names of the start-up hooks :func:`python_hooks_cmd` removes."""


def python_hooks_cmd(since: int | None) -> str:
    """The root shell command that removes the Python start-up hooks an agent planted
    (``--hardened-verify``, design §4.4): ``sitecustomize`` and ``usercustomize`` in any form (a
    module, a package folder, a byte-code or extension file, a symlink), ``conftest.py`` outside
    ``/tests``, and ``*.pth`` in the site folders, each made or changed after the first agent
    phase began: on the root filesystem, and in each site folder and the standard library's
    folder (which may sit on another mount).

    "Made or changed" is the inode's change time (``-newerct``), which a process cannot set
    back (``touch -d`` sets the modification time only), compared with ``since``, the epoch
    second the baseline was taken on the sandbox's clock; without it (a sandbox on another
    clock) with ``/proc/1/cmdline``'s time, as before. The site folders are asked of
    ``python3 -I -S``, which runs no hook: a ``.pth`` the agent planted never runs as root here
    (a fresh-clone attack started a daemon from one, after the kill).

    Args:
        since: the epoch second of the trial's first agent baseline, or ``None``.
    """
    newer = f"-newerct @{since}" if since is not None else "-newer /proc/1/cmdline"
    hooks = HOOK_NAMES
    return (
        f'N="{newer}"; find / -maxdepth 0 $N >/dev/null 2>&1 || N="-newer /proc/1/cmdline"; '
        "find / -xdev \\( -path /proc -o -path /sys -o -path /tests \\) -prune -o "
        f"\\( {hooks} \\) $N -exec rm -rf {{}} + 2>/dev/null; "
        'for d in $(python3 -I -S -c \'import site, sysconfig; print(" ".join(site.getsitepackages()'
        '+[site.getusersitepackages(), sysconfig.get_paths()["stdlib"]]))\' 2>/dev/null); do '
        "find \"$d\" -maxdepth 1 \\( -name '*.pth' -o -name 'sitecustomize*' -o -name 'usercustomize*' \\) "
        "$N -exec rm -rf {} + 2>/dev/null; done; true"
    )


def strip_canary(text: str) -> str:
    """Remove every line that carries a canary GUID (also inside ``<!-- -->``), design §4.2."""
    return _CANARY_LINE.sub("", text)


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
    epoch: int | None = None
    """The epoch second it was taken, on the sandbox's clock (``None``: another clock)."""

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
    epoch = int(time.time()) if sandbox.host_clock else None  # the same kernel's clock
    if sandbox.boot_clock:
        now, hz = host_boot_clock()
        tick = int(now * hz)
        await asyncio.sleep((tick + 1) / hz - now + 0.0005)
        return Baseline(before_tick=tick, epoch=epoch)
    return Baseline(processes=tuple(await sandbox.processes()), epoch=epoch)


async def _kill_new(
    sandbox: Sandbox, before: Baseline, s: TrialSettings, warnings: list[str]
) -> list[ProcessInfo]:
    """SIGKILL every process started since ``before`` (:meth:`Sandbox.kill_since`: stopped
    first, so neither a fork chain nor a process named after the container's keeper escapes;
    review of #34). New processes still running after it (started meanwhile by a process that
    is not new, such as a task's own supervisor restarting what was killed) are said in
    ``warnings``: their count and the first few command lines, escaped and masked (agent text).

    Returns:
        The processes killed, each once.
    """
    killed, left = await sandbox.kill_since(before.before_tick, before.processes or ())
    if left:
        shown = "; ".join(f"{p.pid} {s.mask(clean_cmdline(p.cmdline, 80))}" for p in left[:LEFT_SHOWN])
        more = f" (+{len(left) - LEFT_SHOWN} more)" if len(left) > LEFT_SHOWN else ""
        warnings.append(
            f"{len(left)} new process(es) kept running after the kill (restarted by a process "
            f"that is not new, such as a task's own supervisor): {shown}{more}"
        )
    return killed


async def _kill_for_wider(
    sandbox: Sandbox, s: TrialSettings, rec: TrialRecorder, before: Baseline, wider: str, warnings: list[str]
) -> tuple[list[Survivor], int, str]:
    """Issue #34 L4 (:mod:`cairn.trial.survivors`): the verifier's openings or secrets go
    beyond the agent's, so record what the agent phase left running and kill every process
    the trial's agent phases started, as ``--hardened-verify`` does, before the network
    switches to the verifier's policy.

    Returns:
        ``(survivors, how many, why they were killed)``.
    """
    listed, total = await list_survivors(sandbox, before)
    killed = await _kill_new(sandbox, rec.trial_baseline or before, s, warnings)
    if killed:
        warnings.append(
            f"killed {len(killed)} agent process(es) before the verifier: its "
            f"access goes beyond the agent's ({wider})"
        )
    return listed, total, "hardened_verify" if s.hardened else f"verifier_wider: {wider}"


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
        await sandbox.exec(
            ["chown", "-R", str(owner), *[f"{wd.rstrip('/')}/{p.name}" for p in entries]], user="root"
        )


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
        raise TrialFailure(
            ErrorKind.SETUP_FAILED,
            f"setup.sh of step {step.name!r} {why}",
            detail={"exit_code": r.exit_code, "timed_out": r.timed_out, "stderr_tail": r.stderr[-2000:]},
        )
    return time.monotonic() - started


async def _evidence(
    sandbox: Sandbox,
    step: Step,
    agent_dir: Path,
    *,
    prepare_tests: bool,
    size_artifacts: bool,
    list_processes: bool = False,
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
    sources = (
        [
            *(a.source for a in step.artifacts if (a.service or MAIN_SERVICE).strip() in (MAIN_SERVICE, "")),
            ARTIFACTS_DIR,
        ]
        if size_artifacts
        else []
    )
    r = await sandbox.exec(
        after_agent_argv(sources, prepare_tests=prepare_tests, list_processes=list_processes), user="root"
    )
    if not r.ok:
        raise SandboxError(f"the after-agent exec failed (exit {r.exit_code}): {r.stderr.strip()[-300:]}")
    report = parse_after_agent(r.stdout, len(sources))
    for d in sorted(report.odd):
        warnings.append(f"the agent replaced {d} by a link or a file; it was recreated empty")
    if AGENT_LOGS_DIR in report.full:
        await sandbox.download(AGENT_LOGS_DIR, agent_dir)
    if report.planted is not None:
        planted = agent_dir / "planted-verifier-logs"
        planted.mkdir(parents=True, exist_ok=True)
        await sandbox.download(report.planted, planted)
        warnings.append(
            f"the agent wrote into {VERIFIER_LOGS_DIR}; kept as evidence in "
            "agent/planted-verifier-logs and never read as a reward"
        )
    if AGENT_LOGS_DIR in report.full or report.planted is not None:
        await sandbox.exec(CLEAR_EVIDENCE_CMD, user="root")
    return warnings, report, sources


@dataclass
class _Step:
    """What one step's phases hand each other (a value of :func:`run_step` alone)."""

    step: Step
    paths: StepPaths
    warnings: list[str] = field(default_factory=list)
    setup_sec: float | None = None
    agent_sec: float | None = None
    agent_exit: AgentExit = AgentExit.OK
    context: AgentContext | None = None
    before: Baseline | None = None
    quiet: bool = False
    """Nothing runs in the sandbox between the after-agent exec and the artifacts (no
    pre_artifacts.sh, no snapshot, no collect hook): that exec sizes them too."""
    prepared: bool = False
    """Nor before the shared verifier: the after-agent exec prepared /tests and
    /logs/verifier too."""
    report: AfterAgent | None = None
    sources: list[str] = field(default_factory=list)
    snapshot: StepSnapshot | None = None
    survivors: list[Survivor] = field(default_factory=list)
    """What the agent phase left running (issue 24, :mod:`cairn.trial.survivors`)."""
    survivors_total: int = 0
    survivors_killed: str | None = None
    """Why the survivors were killed before the verifier (``None``: they were not)."""

    def row_fields(self) -> dict[str, Any]:
        """The row fields every step that ran its agent carries (the agent's side)."""
        ctx = self.context
        return {
            "agent_exit": self.agent_exit,
            "warnings": self.warnings,
            "tokens": ctx.tokens if ctx else None,
            "cost_usd": ctx.cost_usd if ctx else None,
            "snapshot": self.snapshot,
            "survivors": self.survivors,
            "survivors_total": self.survivors_total,
            "survivors_killed": self.survivors_killed,
        }

    def timings(self, clock: SpanClock, verifier_sec: float | None = None) -> StepTimings:
        return StepTimings(
            setup_sec=self.setup_sec,
            agent_sec=self.agent_sec,
            verifier_sec=verifier_sec,
            healthcheck_sec=clock.seconds("healthcheck"),
            artifacts_sec=clock.seconds("pre_artifacts", "artifacts"),
            spans=list(clock.spans),
        )


async def _setup_phase(sandbox: Sandbox, st: _Step, s: TrialSettings, rec: TrialRecorder) -> None:
    """2–3. The workdir copy and ``setup.sh``, in the environment's network (step 1 starts in
    it, later steps switch back to it)."""
    step = st.step
    network = s.networks.environment if step.index > 1 and s.networks is not None else None
    if rec.trial_baseline is not None and (wider := setup_wider(step, s)) is not None:
        # before the switch: an earlier agent's left-overs get nothing its phase had not
        killed = await _kill_new(sandbox, rec.trial_baseline, s, st.warnings)
        if killed:
            st.warnings.append(
                f"killed {len(killed)} process(es) earlier agent phases left running before "
                f"this step's set-up: its network goes beyond step {step.index - 1}'s agent "
                f"phase ({wider})"
            )
    async with rec.phase(Phase.SETUP, step, network=network, network_as="setup"):
        if step.index > 1 and rec.artifacts_left:  # each step's artifacts are its own (§4.5)
            await sandbox.exec(["/bin/sh", "-c", reset_dirs_cmd(ARTIFACTS_DIR)], user="root")
            rec.artifacts_left = False
        await _copy_workdir(sandbox, step)
        if step.setup_sh is not None:
            st.setup_sec = await _run_setup(sandbox, step, s.timeouts.default)


async def _healthcheck_phase(sandbox: Sandbox, st: _Step, s: TrialSettings, rec: TrialRecorder) -> None:
    """4. The step's healthcheck (no phase when the step declares none).

    Raises:
        TrialFailure: ``healthcheck_failed``.
    """
    step = st.step
    if step.healthcheck is None:
        return
    async with rec.phase(Phase.HEALTHCHECK, step):
        hc = await run_healthcheck(
            sandbox, step.healthcheck, user=step.agent_user, timeout_multiplier=s.timeouts.default
        )
    if not hc.healthy:
        raise TrialFailure(
            ErrorKind.HEALTHCHECK_FAILED,
            f"healthcheck of step {step.name!r} failed after {hc.probes} probes",
            detail={"exit_code": hc.last_exit_code, "output_tail": hc.last_output},
        )


async def _agent_phase(
    sandbox: Sandbox, agent: Agent, task: Task, st: _Step, s: TrialSettings, rec: TrialRecorder
) -> None:
    """5. The agent phase, under its own network policy; the span times the agent's run.

    Raises:
        ModelError, SandboxError: as the agent raised them (classified by the trial).
    """
    step = st.step
    timeout = step.agent_timeout_sec * s.timeouts.agent
    context = st.context = AgentContext(
        task=task,
        step=step,
        logs_dir=st.paths.agent,
        timeout_sec=timeout,
        user=step.agent_user,
        env=dict(s.agent_env),
        resume_session=s.resume_session,
        solution_env=dict(s.solution_env),
        notify=lambda line: rec.event(line, EventKind.RETRY),
    )  # model retries (issue 27)
    async with rec.phase(Phase.AGENT, step, timed=False):
        st.before = await take_baseline(sandbox)
        if rec.trial_baseline is None:
            rec.trial_baseline = st.before
        if s.networks is not None:
            await rec.switch(s.networks.agent.get(step.index), "agent")
        started = time.monotonic()
        with rec.span("agent", step):
            try:
                async with asyncio.timeout(timeout):
                    await agent.run(strip_canary(step.instruction), sandbox, context)
            except TimeoutError:
                st.agent_exit = AgentExit.TIMEOUT
            except (ModelError, SandboxError):
                rec.step_spend = (context.tokens, context.cost_usd)  # kept in the failed row
                raise
            except Exception:  # noqa: BLE001 - an agent crash is recorded, the verifier still runs
                st.agent_exit = AgentExit.ERROR
                (st.paths.agent / "agent-error.txt").write_text(
                    s.mask(traceback.format_exc()), encoding="utf-8"
                )
        st.agent_sec = time.monotonic() - started
    if st.agent_exit is AgentExit.OK and context.exit is not None:
        st.agent_exit = context.exit
    if st.agent_exit is AgentExit.ERROR and context.metadata.get("agent_error"):
        st.warnings.append(f"agent error: {s.mask(str(context.metadata['agent_error']))}")
    if context.model_retries:
        st.warnings.append(f"model calls retried {context.model_retries} time(s)")


async def _end_agent_phase(sandbox: Sandbox, st: _Step, s: TrialSettings, rec: TrialRecorder) -> None:
    """6. End the agent phase (§4.4): close its network openings, kill what a timed-out or
    crashed agent started, bring the evidence out (one exec), ``pre_artifacts.sh`` (6a) and
    the ``--snapshot-steps`` snapshot (6b)."""
    step = st.step
    if st.agent_exit in (AgentExit.TIMEOUT, AgentExit.ERROR) and st.before is not None:
        killed = await _kill_new(sandbox, st.before, s, st.warnings)
        if killed:
            st.warnings.append(f"killed {len(killed)} process(es) left by the agent phase")
    # what still runs is recorded, and killed before a verifier whose openings or secrets go
    # beyond the agent's, before the network switches to it (issue 24, #34 L4)
    wider = verifier_wider(step, s)
    early = (
        await _kill_for_wider(sandbox, s, rec, st.before, wider, st.warnings)
        if wider is not None and st.before is not None
        else None
    )
    if (after := after_agent_policy(step, s)) is not None:
        await rec.switch(after, "verifier" if s.verify else "after-agent")
    st.quiet = step.pre_artifacts_sh is None and s.snapshot is None and not step.collect
    st.prepared = (
        st.quiet
        and s.verify
        and step.verifier_mode != "separate"
        and step.test_sh is not None
        and not s.hardened
    )
    evidence_warnings, st.report, st.sources = await _evidence(
        sandbox,
        step,
        st.paths.agent,
        prepare_tests=st.prepared,
        size_artifacts=st.quiet,
        list_processes=early is None,
    )
    st.warnings.extend(evidence_warnings)
    if early is not None:
        st.survivors, st.survivors_total, st.survivors_killed = early
    elif st.before is not None:
        st.survivors, st.survivors_total = survivors_from(
            st.report.processes or [], st.report.users, st.before
        )
        st.survivors_killed = "hardened_verify" if s.hardened and s.verify else None
    if step.pre_artifacts_sh is not None:  # 6a. Evolve (#22): never fatal
        with rec.span("pre_artifacts", step):
            st.warnings.extend(
                await run_pre_artifacts(
                    sandbox, step, st.paths.agent, mask=s.mask, timeout_multiplier=s.timeouts.default
                )
            )
    if s.snapshot is not None:  # 6b. the end-of-agent files (design §4.7)
        st.snapshot, snapshot_warnings = await s.snapshot(sandbox, step)
        st.warnings.extend(snapshot_warnings)


async def _artifacts_phase(sandbox: Sandbox, st: _Step, s: TrialSettings, rec: TrialRecorder) -> None:
    """7. Collect the step's artifacts and write their manifest."""
    step, report = st.step, st.report
    quiet = st.quiet and report is not None
    async with rec.phase(Phase.ARTIFACTS, step):
        manifest, hook_warnings = await collect_step_artifacts(
            sandbox,
            step.artifacts,
            step.collect,
            st.paths.artifacts,
            timeout_multiplier=s.timeouts.default,
            logs_artifacts_written=ARTIFACTS_DIR in report.full if quiet and report else None,
            sized=dict(zip(st.sources, report.artifacts, strict=True)) if quiet and report else None,
        )
        st.warnings.extend(hook_warnings)
        # durable (two fsyncs): off the job's event loop, which the other trials share (#31)
        await asyncio.to_thread(write_artifacts_manifest, st.paths.artifacts, manifest)
        rec.artifacts_left = not quiet or (report is not None and ARTIFACTS_DIR in report.full)
    for entry in manifest:
        if entry.status != "copied":
            st.warnings.append(f"artifact {entry.source} not collected: {entry.error}")
        elif entry.skipped_too_long_count:  # issue 24 (manifest.json lists them)
            st.warnings.append(
                f"artifact {entry.source}: {entry.skipped_too_long_count} "
                "path(s) too long for the host skipped (listed in manifest.json)"
            )


async def before_verifier(sandbox: Sandbox, st: _Step, s: TrialSettings, rec: TrialRecorder) -> None:
    """What runs between the end of the agent's work and the verifier phase (the seam for
    checks of the agent's leftovers): under ``--hardened-verify``, kill every process the
    agent phases started and remove planted Python start-up hooks (design §4.4)."""
    if not s.hardened:
        return
    baseline = rec.trial_baseline or st.before
    # the hooks go first, by a command that runs none of them, then every agent process
    hooks = python_hooks_cmd(baseline.epoch if baseline else None)
    # bounded: an exec whose output a planted process holds open would never end otherwise
    await sandbox.exec(hooks, user="root", timeout_sec=HOOKS_TIMEOUT_SEC)
    if baseline is not None:
        killed = await _kill_new(sandbox, baseline, s, st.warnings)
        if killed:
            st.warnings.append(f"hardened verify: killed {len(killed)} agent process(es)")


async def _verifier_phase(sandbox: Sandbox, st: _Step, s: TrialSettings, rec: TrialRecorder) -> VerifierRun:
    """8. The verifier, shared or separate (design §4.6).

    Raises:
        TrialFailure: ``config_error`` when a separate verifier was not planned.
    """
    step = st.step
    timeout = step.verifier_timeout_sec * s.timeouts.verifier
    venv = s.verifier_env(step.index)
    rec.enter(Phase.VERIFIER, step)
    await before_verifier(sandbox, st, s, rec)
    async with rec.phase(Phase.VERIFIER, step):
        if step.verifier_mode == "separate":
            from cairn.trial.separate_verifier import run_separate_verifier

            plan = s.separate.get(step.index)
            if plan is None:
                raise TrialFailure(
                    ErrorKind.CONFIG_ERROR, f"step {step.name!r}: separate verifier was not planned"
                )
            v = await run_separate_verifier(
                plan,
                step,
                env=venv,
                timeout_sec=timeout,
                verifier_dir=st.paths.verifier,
                artifacts_dir=st.paths.artifacts,
                mask=s.mask,
                timeout_multiplier=s.timeouts.default,
            )
            rec.network_records = list(v.network_records)
            return v
        last = step.index == s.n_steps
        report = st.report
        v = await run_verifier(
            sandbox,
            step,
            env=venv,
            timeout_sec=timeout,
            verifier_dir=st.paths.verifier,
            mask=s.mask,
            prepared=st.prepared,
            prepared_free_kb=report.free_kb if report else None,
            cleanup=not last or s.sandbox_outlives_trial,
        )
        if v.error is not None:  # a verifier that killed its sandbox (out of memory) says so
            v.error = with_end(v.error, await sandbox.ended())
        return v


def _verified_row(st: _Step, v: VerifierRun, rec: TrialRecorder) -> StepResult:
    """The row of a step whose verifier ran."""
    step = st.step
    st.warnings.extend(v.warnings)
    row = StepResult(
        index=step.index,
        name=step.name,
        source=StepSource.ERROR,
        **st.row_fields(),
        judge=v.judge,  # an LLM judge's spend, apart from the agent's (#22)
        verifier_exit_code=v.exit_code,
        reward_file=v.reward_file,
        timings=st.timings(rec.step_clock, v.elapsed_sec),
    )
    if v.error is not None:
        return row.model_copy(update={"error": error_info(v.error, step=step, phase=Phase.VERIFIER)})
    gates = list(evaluate_gates(step.min_reward, v.rewards)) if step.min_reward is not None else []
    return row.model_copy(
        update={
            "source": StepSource.VERIFIER,
            "reward": primary_reward(v.rewards),
            "rewards": v.rewards,
            "passed": step_passed(step.min_reward, v.rewards, True),
            "gates": gates,
        }
    )


async def run_step(
    sandbox: Sandbox,
    agent: Agent,
    step: Step,
    paths: StepPaths,
    s: TrialSettings,
    rec: TrialRecorder,
    task: Task,
) -> StepResult:
    """Run one step (design §4.2 items 2–8) and return its row.

    Failures of design §6's vocabulary raised by the phases are left to the caller (the trial),
    which classifies them; the returned row covers the normal path including verifier errors,
    which are recorded in ``error`` with ``source = error``.

    Args:
        sandbox: the trial's sandbox.
        agent: the agent (the oracle, for a replayed step).
        step: the step.
        paths: its host folders.
        s: the trial's settings.
        rec: the trial's recorder (phases, spans, network switch, status.json).
        task: the task.

    Raises:
        TrialFailure: ``setup_failed``, ``healthcheck_failed``, a model error, or a sandbox
            error (the trial turns it into the step's row, :func:`cairn.trial.classify.error_info`).
        SandboxLostError: the engine is gone.
    """
    rec.begin_step(step)
    st = _Step(step=step, paths=paths)
    try:
        await _setup_phase(sandbox, st, s, rec)
        await _healthcheck_phase(sandbox, st, s, rec)
        await _agent_phase(sandbox, agent, task, st, s, rec)
        await _end_agent_phase(sandbox, st, s, rec)
        await _artifacts_phase(sandbox, st, s, rec)
        # 7a. a start-up service that died while the agent worked fails the trial as the task's
        # error (service_exited, its exit code and log tail), never scored as the agent's (#22)
        await check_services(sandbox, when=f"during step {step.name!r}, after the agent started")
        if not s.verify:
            return StepResult(
                index=step.index,
                name=step.name,
                source=StepSource.NOT_RUN,
                **st.row_fields(),
                timings=st.timings(rec.step_clock),
            )
        v = await _verifier_phase(sandbox, st, s, rec)
    except TrialFailure as exc:  # its failure row keeps what the step warned (a kill, …)
        exc.step_warnings = [*st.warnings, *exc.step_warnings]
        raise
    return _verified_row(st, v, rec)


__all__ = ["Baseline", "PhaseNetworks", "run_step", "strip_canary", "take_baseline"]
