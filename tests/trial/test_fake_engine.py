"""The trial engine on the in-memory fake sandbox (tests/helpers/fake_sandbox.py): step order,
stop rules, gates, classification, phases, status.json, timings, events and the job services,
with no Docker engine and no namespaces (fast unit tests: no marker).

Each test writes a real task folder (``taskgen``) and runs :func:`cairn.trial.run.run_trial`
with a :class:`FakeWorld`'s sandbox class; scripts (``solve.sh``, ``test.sh``, an agent's
commands) run through the fake's small interpreter. What only a kernel sandbox proves stays in
tests/trial/test_trial.py on the real backends.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from cairn.agents.base import Agent, AgentContext
from cairn.agents.nop import NopAgent
from cairn.agents.oracle import OracleAgent
from cairn.errors import Category, ErrorKind, ModelError, Phase, SandboxError, SandboxLostError
from cairn.events import Event, EventKind
from cairn.netpolicy import NetworkMode
from cairn.plan import RunOptions, TrialPlan, trial_id
from cairn.results.model import AgentExit, Outcome, StepSource, TrialResult
from cairn.results.store import trial_dir_name
from cairn.sandbox.base import Capabilities, ExecRequest, ExecResult, Sandbox
from cairn.task.load import load_task
from cairn.trial.context import JobServices
from cairn.trial.deferred import drain
from cairn.trial.run import run_trial
from fake_sandbox import PASSED_CONFORMANCE, FakeSandbox, FakeWorld
from taskgen import StepSpec, write_task

REWARD = "/logs/verifier/reward.txt"


def reward_if_file(path: str) -> str:
    """A test.sh rewarding 1 when ``path`` exists, else 0 (in the fake's shell)."""
    return f"test -f {path} && echo 1 > {REWARD} || echo 0 > {REWARD}\n"


class Scripted(Agent):
    """Runs one shell line per step (by step name) in the sandbox; may raise or sleep."""

    name = "scripted"
    ignores_instruction = True

    def __init__(
        self,
        scripts: dict[str, str] | None = None,
        *,
        raise_in: dict[str, BaseException] | None = None,
        hosts: tuple[str, ...] = (),
        on_run: Callable[[AgentContext], None] | None = None,
        setup_error: BaseException | None = None,
    ) -> None:
        super().__init__(None)
        self.scripts = scripts or {}
        self.raise_in = raise_in or {}
        self.hosts = hosts
        self.on_run = on_run
        self.setup_error = setup_error
        self.contexts: list[AgentContext] = []

    def model_hosts(self, agent_env):  # noqa: D102
        return list(self.hosts)

    async def setup(self, sandbox: Sandbox, context: AgentContext) -> None:  # noqa: D102
        if self.setup_error is not None:
            raise self.setup_error

    async def run(self, instruction: str, sandbox: Sandbox, context: AgentContext) -> None:  # noqa: D102
        self.contexts.append(context)
        if self.on_run is not None:
            self.on_run(context)
        script = self.scripts.get(context.step.name)
        if script is not None:
            await sandbox.exec(script)
        err = self.raise_in.get(context.step.name)
        if err is not None:
            raise err


class Run:
    """One trial's outcome on the fake: result, world, folder and events."""

    def __init__(self, result: TrialResult, world: FakeWorld, trial_dir: Path, events: list[Event]) -> None:
        self.result, self.world, self.dir, self.events = result, world, trial_dir, events

    def steps_json(self) -> list[dict]:
        return json.loads((self.dir / "steps.json").read_text())["steps"]

    def step_dir(self, index: int) -> Path:
        return next((self.dir / "steps").glob(f"{index:02d}-*"))


def _plan(
    task_path: Path, tmp_path: Path, agent_name: str, *, attempt: int = 1, **options: object
) -> TrialPlan:
    task = load_task(task_path)
    tid = trial_id(task.name, task.content_hash, agent_name, {}, None, "fake", attempt)
    job_dir = tmp_path / "jobs" / "job"
    return TrialPlan(
        task=task,
        agent_name=agent_name,
        agent_kwargs={},
        model=None,
        backend="fake",
        attempt=attempt,
        trial_id=tid,
        trial_dir=job_dir / "trials" / trial_dir_name(task.name, attempt, tid),
        job_id="fake-job",
        job_dir=job_dir,
        options=RunOptions(**options),
    )


def run(
    tmp_path: Path,
    task_path: Path,
    agent: Agent | None = None,
    *,
    world: FakeWorld | None = None,
    services: JobServices | None = None,
    attempt: int = 1,
    **options: object,
) -> Run:
    world = world or FakeWorld()
    agent = agent or OracleAgent()
    plan = _plan(task_path, tmp_path, agent.name, attempt=attempt, **options)
    events: list[Event] = []
    result = asyncio.run(
        run_trial(plan, services, agent=agent, backend=world.backend(), on_event=events.append)
    )
    return Run(result, world, plan.trial_dir, events)


def two_steps(tmp_path: Path, **first: object) -> Path:
    return write_task(
        tmp_path / "tasks",
        "two",
        steps=[
            StepSpec("write", solve="echo a > /app/a.txt\n", test=reward_if_file("/app/a.txt"), **first),
            StepSpec("append", solve="echo b > /app/b.txt\n", test=reward_if_file("/app/b.txt")),
        ],
    )


# ---- the fake itself -------------------------------------------------------------------------
@pytest.mark.parametrize("check", sorted(PASSED_CONFORMANCE))
def test_the_fake_passes_the_conformance_checks_it_declares(tmp_path, check):
    from cairn.sandbox.conformance import gaps_of, run_check_sync

    world = FakeWorld()
    cls = world.backend()
    assert check not in gaps_of(cls)
    run_check_sync(check, cls, tmp_path)


def test_the_fake_declares_every_other_check_a_gap():
    from cairn.sandbox.conformance import CHECK_NAMES, gaps_of

    assert gaps_of(FakeSandbox) == frozenset(CHECK_NAMES) - PASSED_CONFORMANCE


# ---- step order -----------------------------------------------------------------------------
def test_a_single_step_oracle_passes(tmp_path):
    r = run(
        tmp_path,
        write_task(tmp_path / "tasks", "one", solve="echo x > /app/x\n", test=reward_if_file("/app/x")),
    )
    assert (r.result.outcome, r.result.reward, r.result.passed) == (Outcome.COMPLETED, 1.0, True)
    assert [s.source for s in r.result.steps] == [StepSource.VERIFIER]


def test_steps_run_in_declared_order_in_one_sandbox(tmp_path):
    r = run(tmp_path, two_steps(tmp_path))
    assert [s.name for s in r.result.steps] == ["write", "append"]
    assert [s.reward for s in r.result.steps] == [1.0, 1.0]
    assert len(r.world.ops("start")) == 1 and len(r.world.ops("stop")) == 1
    verifiers = [c for c in r.world.ops("exec") if c.detail == "bash /tests/test.sh"]
    assert len(verifiers) == 2
    assert r.result.steps_run == 2


def test_the_agent_sees_the_earlier_steps_files(tmp_path):
    task = write_task(
        tmp_path / "tasks",
        "keep",
        steps=[
            StepSpec("a", solve="echo a > /app/a.txt\n", test=reward_if_file("/app/a.txt")),
            StepSpec("b", solve="true\n", test=reward_if_file("/app/a.txt")),
        ],
    )
    assert [s.reward for s in run(tmp_path, task).result.steps] == [1.0, 1.0]


def test_steps_json_has_a_row_per_step(tmp_path):
    r = run(tmp_path, two_steps(tmp_path))
    assert [row["name"] for row in r.steps_json()] == ["write", "append"]
    assert [row["source"] for row in r.steps_json()] == ["verifier", "verifier"]


def test_each_step_gets_its_own_instruction_file(tmp_path):
    r = run(tmp_path, two_steps(tmp_path))
    assert (r.step_dir(1) / "instruction.md").read_text() == "Do the step."
    assert (r.step_dir(2) / "instruction.md").is_file()


# ---- stop rules and gates -------------------------------------------------------------------
def test_a_failed_gate_stops_after_its_step(tmp_path):
    r = run(tmp_path, two_steps(tmp_path, min_reward=1.0), NopAgent())
    assert r.result.outcome is Outcome.STOPPED
    assert r.result.stop_reason is not None and r.result.stop_reason.kind == "min_reward"
    assert (r.result.stop_reason.step, r.result.stop_reason.value) == ("write", 0.0)
    assert [s.source for s in r.result.steps] == [StepSource.VERIFIER, StepSource.NOT_RUN]
    assert r.result.steps_run == 1


def test_a_passed_gate_lets_the_next_step_run(tmp_path):
    r = run(tmp_path, two_steps(tmp_path, min_reward=1.0))
    assert [s.source for s in r.result.steps] == [StepSource.VERIFIER, StepSource.VERIFIER]
    assert [(g.key, g.passed) for g in r.result.steps[0].gates] == [("reward", True)]


def test_a_gate_on_the_last_step_stops_nothing(tmp_path):
    task = write_task(
        tmp_path / "tasks",
        "last",
        steps=[
            StepSpec("a", test=f"echo 1 > {REWARD}\n"),
            StepSpec("b", test=f"echo 0 > {REWARD}\n", min_reward=1.0),
        ],
    )
    r = run(tmp_path, task)
    assert r.result.stop_reason is None
    assert r.result.steps[1].gates[0].passed is False


def test_a_table_gate_on_a_missing_key_stops_with_no_value(tmp_path):
    task = write_task(
        tmp_path / "tasks",
        "table",
        steps=[StepSpec("a", test=f"echo 1 > {REWARD}\n", min_reward={"quality": 0.5}), StepSpec("b")],
    )
    r = run(tmp_path, task)
    stop = r.result.stop_reason
    assert stop is not None and (stop.kind, stop.key, stop.value) == ("min_reward", "quality", None)


def test_a_task_error_in_a_step_stops_the_trial(tmp_path):
    task = write_task(tmp_path / "tasks", "missing", steps=[StepSpec("a", test="true\n"), StepSpec("b")])
    r = run(tmp_path, task)
    assert r.result.outcome is Outcome.ERRORED
    assert r.result.error is not None and r.result.error.kind is ErrorKind.REWARD_MISSING
    assert r.result.steps[1].source is StepSource.NOT_RUN


# ---- classification -------------------------------------------------------------------------
def test_setup_sh_failing_in_the_first_step_is_the_tasks_error(tmp_path):
    task = write_task(tmp_path / "tasks", "setup1", steps=[StepSpec("a", workdir={"setup.sh": "exit 3\n"})])
    r = run(tmp_path, task)
    err = r.result.error
    assert err is not None and (err.kind, err.category) == (ErrorKind.SETUP_FAILED, Category.TASK)
    assert err.phase is Phase.SETUP


def test_setup_sh_failing_after_an_agent_ran_is_the_candidates(tmp_path):
    task = write_task(
        tmp_path / "tasks", "setup2", steps=[StepSpec("a"), StepSpec("b", workdir={"setup.sh": "exit 3\n"})]
    )
    r = run(tmp_path, task)
    row = r.result.steps[1]
    assert row.source is StepSource.CANDIDATE_ERROR and row.reward == 0.0
    assert row.error is not None and row.error.category is Category.CANDIDATE


def test_a_failed_step_healthcheck_is_healthcheck_failed(tmp_path):
    task = write_task(
        tmp_path / "tasks",
        "hc",
        steps=[
            StepSpec(
                "a", toml_extra='[steps.healthcheck]\ncommand = "false"\ninterval_sec = 0.01\nretries = 2\n'
            )
        ],
    )
    r = run(tmp_path, task)
    err = r.result.error
    assert err is not None and err.kind is ErrorKind.HEALTHCHECK_FAILED
    assert err.phase is Phase.HEALTHCHECK


def test_a_failed_environment_healthcheck_is_the_tasks_error(tmp_path):
    task = write_task(
        tmp_path / "tasks",
        "envhc",
        toml_extra=('[environment.healthcheck]\ncommand = "false"\ninterval_sec = 0.01\nretries = 2\n'),
    )
    r = run(tmp_path, task)
    err = r.result.error
    assert err is not None and (err.kind, err.category) == (ErrorKind.ENV_HEALTHCHECK_FAILED, Category.TASK)
    assert r.result.steps_run == 0


def test_a_sandbox_that_does_not_start_is_an_infra_error(tmp_path):
    world = FakeWorld(start_error=SandboxError("no room", kind=ErrorKind.START_FAILED))
    r = run(tmp_path, two_steps(tmp_path), world=world)
    err = r.result.error
    assert err is not None and (err.kind, err.category) == (ErrorKind.START_FAILED, Category.INFRA)
    assert err.phase is Phase.ENVIRONMENT
    assert len(world.ops("stop")) == 1  # removed all the same


def test_a_lost_engine_during_the_agent_is_sandbox_lost(tmp_path):
    world = FakeWorld()

    def lose(ctx: AgentContext) -> None:
        world.lost = SandboxLostError("the engine went away")

    r = run(tmp_path, two_steps(tmp_path), Scripted({"write": "true"}, on_run=lose), world=world)
    err = r.result.error
    assert err is not None and (err.kind, err.category) == (ErrorKind.SANDBOX_LOST, Category.INFRA)
    assert r.result.steps[0].source is StepSource.ERROR


def test_an_agent_crash_is_recorded_and_the_verifier_still_runs(tmp_path):
    agent = Scripted({"write": "echo a > /app/a.txt"}, raise_in={"write": RuntimeError("boom")})
    r = run(tmp_path, two_steps(tmp_path), agent)
    row = r.result.steps[0]
    assert (row.agent_exit, row.source, row.reward) == (AgentExit.ERROR, StepSource.VERIFIER, 1.0)
    assert "RuntimeError: boom" in (r.step_dir(1) / "agent" / "agent-error.txt").read_text()


def test_an_agent_timeout_is_recorded_and_the_verifier_still_runs(tmp_path):
    task = write_task(
        tmp_path / "tasks",
        "slow",
        steps=[
            StepSpec("a", test=f"echo 0.5 > {REWARD}\n", toml_extra="[steps.agent]\ntimeout_sec = 0.05\n")
        ],
    )
    r = run(tmp_path, task, Scripted({"a": "sleep 5"}))
    row = r.result.steps[0]
    assert (row.agent_exit, row.reward) == (AgentExit.TIMEOUT, 0.5)
    assert row.timings.agent_sec is not None and row.timings.agent_sec < 2


def test_a_timed_out_agent_leaves_no_process(tmp_path):
    task = write_task(
        tmp_path / "tasks", "procs", steps=[StepSpec("a", toml_extra="[steps.agent]\ntimeout_sec = 0.05\n")]
    )
    world = FakeWorld()
    r = run(tmp_path, task, Scripted({"a": "spawn server; sleep 5"}), world=world)
    assert world.processes == []
    assert "killed 1 process(es) left by the agent phase" in r.result.steps[0].warnings


def test_a_process_restarted_during_the_kill_is_said_not_dropped(tmp_path):
    # a task's own supervisor (not new) restarts what the kill ends: the kill gives up after
    # its rounds, and the step's warnings name what kept running (escaped agent text)
    task = write_task(
        tmp_path / "tasks", "procs", steps=[StepSpec("a", toml_extra="[steps.agent]\ntimeout_sec = 0.05\n")]
    )
    world = FakeWorld(respawn={"worker"})
    r = run(tmp_path, task, Scripted({"a": "spawn worker; spawn other; sleep 5"}), world=world)
    warnings = r.result.steps[0].warnings
    left = [w for w in warnings if "kept running after the kill" in w]
    assert len(left) == 1, warnings
    assert re.fullmatch(r"1 new process\(es\) kept running after the kill \(.*\): \d+ worker", left[0])
    assert [p.cmdline for p in world.processes] == ["worker"]


def test_a_clean_kill_says_nothing_was_left(tmp_path):
    task = write_task(
        tmp_path / "tasks", "procs", steps=[StepSpec("a", toml_extra="[steps.agent]\ntimeout_sec = 0.05\n")]
    )
    r = run(tmp_path, task, Scripted({"a": "spawn worker; sleep 5"}))
    assert not [w for w in r.result.steps[0].warnings if "kept running" in w]


def test_a_model_error_is_classified_as_the_models(tmp_path):
    agent = Scripted(raise_in={"write": ModelError(ErrorKind.MODEL_UNAVAILABLE, "no model")})
    r = run(tmp_path, two_steps(tmp_path), agent)
    err = r.result.error
    assert err is not None and err.kind is ErrorKind.MODEL_UNAVAILABLE
    assert r.result.outcome is Outcome.ERRORED


def test_a_step_whose_model_call_fails_keeps_what_its_agent_spent(tmp_path):
    from cairn.results.model import Tokens

    def spent(context: AgentContext) -> None:
        context.tokens, context.cost_usd = Tokens(prompt=240, completion=60), 0.25

    agent = Scripted(raise_in={"write": ModelError(ErrorKind.BUDGET_EXCEEDED, "over budget")}, on_run=spent)
    r = run(tmp_path, two_steps(tmp_path), agent)
    step = r.result.steps[0]
    assert step.error is not None and step.error.kind is ErrorKind.BUDGET_EXCEEDED
    assert (step.tokens.prompt, step.tokens.completion, step.cost_usd) == (240, 60, 0.25)
    assert r.result.tokens.prompt == 240 and r.result.cost_usd == 0.25


def test_an_agent_setup_failure_is_agent_setup_failed(tmp_path):
    r = run(tmp_path, two_steps(tmp_path), Scripted(setup_error=RuntimeError("no npm")))
    err = r.result.error
    assert err is not None and (err.kind, err.category) == (ErrorKind.AGENT_SETUP_FAILED, Category.INFRA)
    assert err.phase is Phase.AGENT_SETUP and "no npm" in err.message


def test_no_reward_file_is_reward_missing(tmp_path):
    task = write_task(tmp_path / "tasks", "noreward", test="true\n")
    err = run(tmp_path, task).result.error
    assert err is not None and (err.kind, err.category) == (ErrorKind.REWARD_MISSING, Category.TASK)
    assert err.phase is Phase.VERIFIER


def test_an_unparseable_reward_is_reward_parse_error(tmp_path):
    task = write_task(tmp_path / "tasks", "badreward", test=f"echo lots > {REWARD}\n")
    err = run(tmp_path, task).result.error
    assert err is not None and err.kind is ErrorKind.REWARD_PARSE_ERROR


def test_a_verifier_timeout_is_verifier_timeout(tmp_path):
    task = write_task(
        tmp_path / "tasks",
        "vslow",
        toml_extra="[verifier]\ntimeout_sec = 0.05\n",
        test=f"sleep 5\necho 1 > {REWARD}\n",
    )
    err = run(tmp_path, task).result.error
    assert err is not None and err.kind is ErrorKind.VERIFIER_TIMEOUT


def test_a_planted_reward_is_never_read(tmp_path):
    task = write_task(tmp_path / "tasks", "plant", test=f"echo 0 > {REWARD}\n")
    r = run(tmp_path, task, Scripted({"main": f"echo 1 > {REWARD}"}))  # a one-step task's step
    row = r.result.steps[0]
    assert row.reward == 0.0
    assert any("planted-verifier-logs" in w for w in row.warnings)
    assert (r.step_dir(1) / "agent" / "planted-verifier-logs" / "reward.txt").read_text() == "1\n"


def test_no_verify_runs_the_agent_only(tmp_path):
    r = run(tmp_path, two_steps(tmp_path), verify=False)
    assert [s.source for s in r.result.steps] == [StepSource.NOT_RUN, StepSource.NOT_RUN]
    assert r.result.reward is None and r.result.steps_run == 2
    assert not [c for c in r.world.ops("exec") if c.detail == "bash /tests/test.sh"]


def test_the_oracle_gets_the_solution_env_through_its_context(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_SOLUTION_WORD", "swordfish")
    task = write_task(
        tmp_path / "tasks",
        "solenv",
        toml_extra='[solution.env]\nWORD = "${FAKE_SOLUTION_WORD}"\n',
        solve="true\n",
    )
    seen: list[dict[str, str]] = []
    agent = Scripted(on_run=lambda ctx: seen.append(dict(ctx.solution_env)))
    run(tmp_path, task, agent)
    assert seen == [{"WORD": "swordfish"}]


# ---- phases and status.json -----------------------------------------------------------------
def _status(trial_dir: Path) -> dict:
    return json.loads((trial_dir / "status.json").read_text())


def test_status_json_says_agent_while_the_agent_runs(tmp_path):
    seen: list[dict] = []
    agent = Scripted(on_run=lambda ctx: seen.append(_status(ctx.logs_dir.parents[2])))
    run(tmp_path, two_steps(tmp_path), agent)
    assert [(s["phase"], s["step_index"], s["step"]) for s in seen] == [
        ("agent", 1, "write"),
        ("agent", 2, "append"),
    ]


def test_status_json_says_verifier_while_the_verifier_runs(tmp_path):
    world = FakeWorld()
    seen: list[dict] = []
    dirs: list[Path] = []

    def handler(sb: FakeSandbox, req: ExecRequest) -> ExecResult | None:
        if req.argv == ["bash", "/tests/test.sh"] and dirs:
            seen.append(_status(dirs[0]))
        return None

    world.handler = handler
    agent = Scripted(on_run=lambda ctx: dirs.append(ctx.logs_dir.parents[2]))
    run(tmp_path, two_steps(tmp_path), agent, world=world)
    assert [(s["phase"], s["step_index"]) for s in seen] == [("verifier", 1), ("verifier", 2)]


def test_a_cancelled_trial_records_its_step_and_phase(tmp_path):
    task = two_steps(tmp_path)
    world = FakeWorld()
    plan = _plan(task, tmp_path, "scripted")

    async def go() -> None:
        t = asyncio.ensure_future(
            run_trial(plan, agent=Scripted({"write": "sleep 30"}), backend=world.backend())
        )
        for _ in range(500):
            await asyncio.sleep(0.01)
            if any("sleep 30" in c.detail for c in world.ops("exec")):
                break
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t

    asyncio.run(go())
    result = json.loads((plan.trial_dir / "result.json").read_text())
    assert result["outcome"] == "cancelled"
    assert (result["error"]["phase"], result["error"]["step"]) == ("agent", "write")
    assert len(world.ops("stop")) == 1


def test_the_phase_of_a_setup_failure_is_setup(tmp_path):
    task = write_task(tmp_path / "tasks", "sp", steps=[StepSpec("a", workdir={"setup.sh": "exit 1\n"})])
    assert run(tmp_path, task).result.error.phase is Phase.SETUP


# ---- networks -------------------------------------------------------------------------------
def test_an_in_sandbox_agents_model_host_opens_only_its_agent_phase(tmp_path):
    world = FakeWorld()
    run(tmp_path, two_steps(tmp_path), Scripted(hosts=("api.model.test",)), world=world)
    phases = [c.detail.split(":")[0] for c in world.ops("set_network")]
    # step 1 starts in the environment's policy; step 2's setup switches back to it
    assert phases == ["agent", "verifier", "setup", "agent", "verifier"]
    agent_calls = [c for c in world.ops("set_network") if c.detail.startswith("agent")]
    assert all("api.model.test" in c.detail for c in agent_calls)


def test_without_a_filtering_policy_the_network_is_never_switched(tmp_path):
    world = FakeWorld()
    run(tmp_path, two_steps(tmp_path), world=world)
    assert world.ops("set_network") == []


# ---- timings --------------------------------------------------------------------------------
def _spans(row) -> list[str]:
    return [s.phase for s in row.timings.spans]


def test_every_step_phase_has_a_span_in_order(tmp_path):
    r = run(tmp_path, two_steps(tmp_path))
    for row in r.result.steps:
        assert _spans(row) == ["setup", "agent", "artifacts", "verifier"]
        spans = row.timings.spans
        for a, b in zip(spans, spans[1:], strict=False):
            assert b.started_at >= a.finished_at


def test_the_trials_own_phases_have_spans(tmp_path):
    task = write_task(
        tmp_path / "tasks",
        "envspans",
        toml_extra=('[environment.healthcheck]\ncommand = "true"\ninterval_sec = 0.01\n'),
    )
    r = run(tmp_path, task)
    assert [s.phase for s in r.result.timings.spans] == ["environment", "healthcheck", "agent_setup"]
    assert r.result.timings.healthcheck_sec is not None
    assert r.result.timings.environment_sec is not None


def test_a_step_healthcheck_has_a_span_only_when_declared(tmp_path):
    task = write_task(
        tmp_path / "tasks",
        "hcspan",
        steps=[
            StepSpec("a"),
            StepSpec("b", toml_extra='[steps.healthcheck]\ncommand = "true"\ninterval_sec = 0.01\n'),
        ],
    )
    r = run(tmp_path, task)
    assert "healthcheck" not in _spans(r.result.steps[0])
    assert _spans(r.result.steps[1]) == ["setup", "healthcheck", "agent", "artifacts", "verifier"]
    assert r.result.steps[0].timings.healthcheck_sec is None
    assert r.result.steps[1].timings.healthcheck_sec is not None


def test_the_agent_span_lasts_what_agent_sec_says(tmp_path):
    r = run(tmp_path, two_steps(tmp_path), Scripted({"write": "sleep 0.1"}))
    row = r.result.steps[0]
    [span] = [s for s in row.timings.spans if s.phase == "agent"]
    assert (span.finished_at - span.started_at).total_seconds() == pytest.approx(
        row.timings.agent_sec, abs=0.01
    )
    assert row.timings.agent_sec >= 0.1


def test_a_failed_step_keeps_the_spans_it_reached(tmp_path):
    task = write_task(
        tmp_path / "tasks",
        "sick",
        steps=[
            StepSpec(
                "a", toml_extra='[steps.healthcheck]\ncommand = "false"\ninterval_sec = 0.01\nretries = 2\n'
            )
        ],
    )
    row = run(tmp_path, task).result.steps[0]
    assert _spans(row) == ["setup", "healthcheck"]
    assert row.timings.healthcheck_sec is not None


def test_pre_artifacts_has_its_span_and_counts_in_artifacts_sec(tmp_path):
    task = write_task(
        tmp_path / "tasks",
        "pre",
        steps=[StepSpec("a")],
        files={"steps/a/pre_artifacts.sh": "echo p > /logs/artifacts/p.txt\n"},
    )
    row = run(tmp_path, task).result.steps[0]
    assert _spans(row) == ["setup", "agent", "pre_artifacts", "artifacts", "verifier"]
    pre, art = (next(s for s in row.timings.spans if s.phase == p) for p in ("pre_artifacts", "artifacts"))
    total = sum((s.finished_at - s.started_at).total_seconds() for s in (pre, art))
    assert row.timings.artifacts_sec == pytest.approx(total, abs=1e-6)


# ---- artifacts ------------------------------------------------------------------------------
def test_the_agents_artifacts_are_collected_with_a_manifest(tmp_path):
    r = run(tmp_path, two_steps(tmp_path), Scripted({"write": "echo hi > /logs/artifacts/note.txt"}))
    art = r.step_dir(1) / "artifacts"
    assert (art / "note.txt").read_text() == "hi\n"
    manifest = json.loads((art / "manifest.json").read_text())
    assert [(row["source"], row["status"], row["bytes"]) for row in manifest] == [
        ("/logs/artifacts", "copied", 3)
    ]


def test_each_steps_artifacts_are_its_own(tmp_path):
    r = run(tmp_path, two_steps(tmp_path), Scripted({"write": "echo hi > /logs/artifacts/note.txt"}))
    assert any(p.name == "note.txt" for p in (r.step_dir(1) / "artifacts").rglob("*"))
    assert not any(p.name == "note.txt" for p in (r.step_dir(2) / "artifacts").rglob("*"))


# ---- hardened verify ------------------------------------------------------------------------
def test_hardened_verify_kills_the_agents_processes_before_the_verifier(tmp_path):
    world = FakeWorld()
    alive_at_verifier: list[int] = []

    def handler(sb: FakeSandbox, req: ExecRequest) -> ExecResult | None:
        if req.argv == ["bash", "/tests/test.sh"]:
            alive_at_verifier.append(len(world.processes))
        return None

    world.handler = handler
    r = run(
        tmp_path, two_steps(tmp_path), Scripted({"write": "spawn daemon"}), world=world, hardened_verify=True
    )
    assert alive_at_verifier == [0, 0]
    assert "hardened verify: killed 1 agent process(es)" in r.result.steps[0].warnings


def test_without_hardened_verify_the_agents_process_survives(tmp_path):
    world = FakeWorld()
    run(tmp_path, two_steps(tmp_path), Scripted({"write": "spawn daemon"}), world=world)
    assert [p.cmdline for p in world.processes] == ["daemon"]


# ---- events ---------------------------------------------------------------------------------
def test_the_step_and_verdict_lines_are_unchanged(tmp_path):
    r = run(tmp_path, two_steps(tmp_path))
    steps = [e.text for e in r.events if e.kind is EventKind.STEP]
    assert len(steps) == 2
    assert re.fullmatch(
        r"\[test/two\] step 1/2 write: reward 1\.00 \(agent \d+\.\d s, "
        r"verifier \d+\.\d s\)",
        steps[0],
    ), steps[0]
    assert r.events[-1].kind is EventKind.VERDICT
    assert r.events[0].kind is EventKind.ENVIRONMENT
    assert r.events[0].text.startswith("[test/two] environment: fake, ready in ")


def test_a_later_attempts_lines_carry_its_number(tmp_path):
    r = run(tmp_path, two_steps(tmp_path), attempt=2)
    assert all(e.text.startswith("[test/two #2] ") for e in r.events)


def test_a_backend_warning_is_a_warning_event_and_a_result_warning(tmp_path):
    task = write_task(tmp_path / "tasks", "gpu", toml_extra="")
    toml = task / "task.toml"
    toml.write_text(toml.read_text() + "cpus = 2\n")

    class NoCpu(FakeSandbox):
        capabilities = Capabilities(network_modes=frozenset(NetworkMode), cpu_limit=False, memory_limit=True)

    world = FakeWorld()
    NoCpu._world = world
    plan = _plan(task, tmp_path, "oracle")
    events: list[Event] = []
    result = asyncio.run(run_trial(plan, agent=OracleAgent(), backend=NoCpu, on_event=events.append))
    warning = "backend 'fake' cannot apply cpus = 2"
    assert warning in result.warnings
    assert [e.text for e in events if e.kind is EventKind.WARNING] == [f"[test/gpu] warning: {warning}"]


# ---- the job's services ---------------------------------------------------------------------
def test_in_a_job_the_removal_follows_the_result(tmp_path):
    world = FakeWorld()
    services = JobServices(removals=set())
    task = two_steps(tmp_path)
    plan = _plan(task, tmp_path, "oracle")

    async def go() -> tuple[bool, int]:
        await run_trial(plan, services, agent=OracleAgent(), backend=world.backend())
        written_before_stop = (plan.trial_dir / "result.json").is_file()
        pending = len(services.removals or ())
        await drain(services.removals or set())
        return written_before_stop, pending

    written, pending = asyncio.run(go())
    assert written and pending <= 1
    assert len(world.ops("stop")) == 1


def test_prestart_offers_the_spec_when_the_last_verifier_begins(tmp_path):
    from cairn.trial.prestart import PrestartPool

    world = FakeWorld()
    task = two_steps(tmp_path)
    first = _plan(task, tmp_path, "oracle", attempt=1)
    second = _plan(task, tmp_path, "oracle", attempt=2)

    async def go() -> tuple[int, int, int]:
        pool = PrestartPool([first, second], limit=2)
        services = JobServices(prestarts=pool)
        pool.begin(first)
        await run_trial(first, services, agent=OracleAgent(), backend=world.backend())
        made = pool.made
        await run_trial(second, services, agent=OracleAgent(), backend=world.backend())
        await pool.close()
        return made, pool.taken, len(world.ops("start"))

    made, taken, starts = asyncio.run(go())
    assert (made, taken, starts) == (1, 1, 2)  # the second trial took the pre-started one


def test_job_services_open_and_close_their_resources_in_order(tmp_path):
    log: list[str] = []

    class Resource:
        def __init__(self, name: str) -> None:
            self.name = name

        async def open(self) -> None:
            log.append(f"open {self.name}")

        async def aclose(self) -> None:
            log.append(f"close {self.name}")

    services = JobServices.for_job(
        [], prestart=False, limit=1, in_process=True, resources=[Resource("a"), Resource("b")]
    )

    async def go() -> None:
        await services.open()
        await services.aclose()

    asyncio.run(go())
    assert log == ["open a", "open b", "close b", "close a"]
    assert services.pool is not None and services.pool.closed


def test_a_trial_alone_shares_no_pool(tmp_path):
    world = FakeWorld()
    specs: list[object] = []

    def handler(sb: FakeSandbox, req: ExecRequest) -> ExecResult | None:
        specs.append(sb.spec.pool)
        return None

    world.handler = handler
    run(tmp_path, two_steps(tmp_path), world=world)
    assert specs and all(p is None for p in specs)


def test_a_job_lends_its_pool_to_the_trials_sandbox(tmp_path):
    from cairn.sandbox.pools import ResourcePool

    world = FakeWorld()
    pool: ResourcePool[object] = ResourcePool()
    seen: list[object] = []

    def handler(sb: FakeSandbox, req: ExecRequest) -> ExecResult | None:
        seen.append(sb.spec.pool)
        return None

    world.handler = handler
    run(tmp_path, two_steps(tmp_path), world=world, services=JobServices(pool=pool))
    assert seen and all(p is pool for p in seen)


def test_a_failed_steps_row_keeps_what_the_step_warned_before(tmp_path):
    """Review of #34: a warning the step gave (here the hardened kill) stays on its row when a
    later phase of the step fails (here the sandbox, at the verifier)."""
    world = FakeWorld()

    def handler(sb: FakeSandbox, req: ExecRequest) -> ExecResult | None:
        if req.argv == ["bash", "/tests/test.sh"]:
            raise SandboxError("the sandbox broke", kind=ErrorKind.SANDBOX_UNUSABLE)
        return None

    world.handler = handler
    r = run(
        tmp_path, two_steps(tmp_path), Scripted({"write": "spawn daemon"}), world=world, hardened_verify=True
    )
    row = r.result.steps[0]
    assert row.error is not None and row.error.kind is ErrorKind.SANDBOX_UNUSABLE, row
    assert "hardened verify: killed 1 agent process(es)" in row.warnings
    assert "hardened verify: killed 1 agent process(es)" in r.steps_json()[0]["warnings"]


# ---- a fold whose end the engine lost --------------------------------------------------------
class _LostEndOfFold(FakeWorld):
    """A world whose sandboxes fold the verifier as docker does, but lose the end of its
    output: test.sh ran, the fold's clean-up emptied /logs/verifier (or did not, ``cleans``),
    and neither the archive nor the footer reached the host (``FoldedExec.uncertain``)."""

    def __init__(self, cleans: bool) -> None:
        super().__init__()
        self.cleans = cleans

    def backend(self) -> type[FakeSandbox]:  # noqa: D102
        world = self

        class Folding(FakeSandbox):
            _world = world

            async def exec_collect(self, argv, *, collect, into, then_root=None, **kw):  # noqa: D102
                from cairn.sandbox.base import FoldedExec

                result = await self.exec(
                    list(argv), user=kw.get("user"), cwd=kw.get("cwd"), env=kw.get("env")
                )
                if world.cleans:
                    world.remove(collect, contents_only=True)
                return FoldedExec(result, uncertain=True)

        return Folding


def test_a_fold_whose_end_was_lost_and_whose_folder_is_empty_is_infra_not_reward_missing(tmp_path):
    """The faults run's engine restart under load: a retried trial's step read as
    ``reward_missing`` (task error) because the fold's clean-up had emptied /logs/verifier and
    the archive before it was lost; it is the engine's fault, retried as ``sandbox_lost``."""
    task = write_task(tmp_path / "tasks", "one", solve="echo x > /app/x\n", test=reward_if_file("/app/x"))
    r = run(tmp_path, task, world=_LostEndOfFold(cleans=True))
    assert r.result.outcome is Outcome.ERRORED
    assert r.result.error is not None
    assert (r.result.error.kind, r.result.error.category) == (ErrorKind.SANDBOX_LOST, Category.INFRA)
    assert "lost the end of the verifier's exec output" in r.result.error.message


def test_a_fold_whose_end_was_lost_but_whose_folder_is_there_reads_the_reward(tmp_path):
    task = write_task(tmp_path / "tasks", "one", solve="echo x > /app/x\n", test=reward_if_file("/app/x"))
    r = run(tmp_path, task, world=_LostEndOfFold(cleans=False))
    assert (r.result.outcome, r.result.reward) == (Outcome.COMPLETED, 1.0)
