"""The real agent CLIs end to end: Claude Code, Codex, opencode, Gemini CLI and Qwen Code at
their pinned versions, from the sealed runtime cache, on examples/two-steps in Docker, each
driven by a scripted model server speaking its own wire protocol (tests/helpers/fake_models.py)
on the docker bridge gateway, so the CLI inside the container reaches it.

Kept small for CI time (each CLI costs 20-60 s per trial on 2 cores): one two-step run per CLI
(tokens, trajectory, no resume), ``--resume-agent-session`` for claude-code and codex, one
timeout, and one ``no-network`` run through the egress gateway. The native-log readers are
unit-tested on recorded logs in tests/agents/test_installed.py.

The runtimes are prepared on demand into cairn's cache (``$CAIRN_CACHE_DIR`` or
``~/.cache/cairn``), shared by every test of the session: the first run on a fresh machine
downloads ~400 + 315 + 185 + 290 + 330 MB (the last two with a Node.js) from the npm registry
(30-80 s each here).
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from agent_helpers import needs_sandbox, step_context, task_sandbox
from cairn.agents.registry import create_agent
from cairn.results.model import AgentExit
from cairn.task.load import load_task
from cli_scripts import (
    COMMANDS,
    JOB_NAME,
    STEP1_MARK,
    TWO_STEPS,
    USAGE,
    bridge_gateway,
    carries_step1,
    consumes,
    expected_tokens,
    public_two_steps,
    run_cli_job,
    two_step_script,
)
from fake_models import FakeModels, Turn

pytestmark = [pytest.mark.docker, pytest.mark.slow, needs_sandbox]

AGENTS = {
    "claude-code": ("anthropic/claude-sonnet-4-5", "ANTHROPIC_API_KEY"),
    "codex": ("openai/scripted-model", "OPENAI_API_KEY"),
    "opencode": ("openai/scripted-model", "OPENAI_API_KEY"),
    "gemini-cli": ("google/gemini-2.5-flash", "GEMINI_API_KEY"),
    "qwen-code": ("openai/scripted-model", "OPENAI_API_KEY"),
}
SECRET = "sk-cairn-test-secret-0123456789"
MODEL_VAR = {"claude-code": "ANTHROPIC_MODEL", "gemini-cli": "GEMINI_MODEL", "qwen-code": "OPENAI_MODEL"}
"""The variable each CLI reads its model from when no ``-m`` is given (host pass-through)."""
SHELL_TOOL = {
    "claude-code": "Bash",
    "codex": "exec_command",
    "opencode": "bash",
    "gemini-cli": "run_shell_command",
    "qwen-code": "run_shell_command",
}


@pytest.fixture(scope="session")
def runtimes():
    """Every CLI's runtime prepared once in the shared cache (downloads on a fresh machine)."""
    from cairn.agents.installed import (
        CLAUDE_CODE,
        CODEX,
        GEMINI_CLI,
        OPENCODE,
        QWEN_CODE,
    )
    from cairn.agents.runtime import prepare_runtime

    return {
        spec.name: prepare_runtime(spec.name, spec.packaging, spec.version)
        for spec in (CLAUDE_CODE, CODEX, OPENCODE, GEMINI_CLI, QWEN_CODE)
    }


def _cairn_run(
    task: Path,
    agent: str,
    server: FakeModels,
    jobs: Path,
    *extra: str,
    base_url: str | None = None,
    model_env: dict[str, str] | None = None,
    relay: bool = False,
):
    """``cairn run`` in a subprocess; ``model_env`` replaces ``-m`` by host variables;
    ``relay``: through the job's model relay (cairn's default), else ``--no-relay``."""
    model, key = AGENTS[agent]
    proc = run_cli_job(
        task,
        agent,
        model=None if model_env else model,
        base_url=base_url or server.base_url,
        jobs=jobs,
        env={key: SECRET, **(model_env or {})},
        relay=relay,
        extra=extra,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    job = jobs / JOB_NAME
    (trial,) = (job / "trials").iterdir()
    return job, trial, json.loads((trial / "result.json").read_text())


def _check_two_steps(job: Path, trial: Path, result: dict, agent: str) -> None:
    steps = {s["name"]: s for s in result["steps"]}
    assert [steps[n]["reward"] for n in ("write", "append")] == [1.0, 1.0]
    for name in ("write", "append"):
        assert steps[name]["agent_exit"] == "ok"
        assert steps[name]["tokens"] == expected_tokens(name), name
        traj = json.loads(next((trial / "steps").glob(f"*-{name}/agent/trajectory.json")).read_text())
        own = [
            s
            for s in traj["steps"]
            if not (s.get("extra") or {}).get("cairn_history")
            and not (s.get("extra") or {}).get("cairn_seed")
        ]
        calls = [c for s in own for c in s.get("tool_calls", [])]
        assert [c["function_name"] for c in calls] == [SHELL_TOOL[agent]]
        args = calls[0]["arguments"]
        assert args.get("command", args.get("cmd")) == COMMANDS[name]
        assert [s["metrics"]["prompt_tokens"] for s in own if s.get("metrics")] == [u[0] for u in USAGE[name]]
        fm = traj["final_metrics"]
        want = expected_tokens(name)
        assert (fm["total_prompt_tokens"], fm["total_completion_tokens"], fm["total_cached_tokens"]) == (
            want["prompt"],
            want["completion"],
            want["cached"],
        )
    total = {
        k: expected_tokens("write")[k] + expected_tokens("append")[k]
        for k in ("prompt", "completion", "cached")
    }
    assert result["tokens"] == total
    assert json.loads((job / "summary.json").read_text())["tokens"] == total
    # the API key is in no file cairn wrote (the CLI got it as an environment variable)
    for path in job.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


def _requested_model(req) -> str:
    """The model a request asks for (Gemini names it in the path)."""
    if ":" in req.path and "/models/" in req.path:
        return req.path.split("/models/", 1)[1].split(":", 1)[0]
    return str(req.body.get("model"))


@pytest.mark.parametrize("agent", list(AGENTS))
def test_cli_passes_two_steps_with_exact_tokens(tmp_path, runtimes, agent):
    task = public_two_steps(tmp_path / "two-steps")
    with FakeModels(two_step_script(agent), host=bridge_gateway(), consumes=consumes) as srv:
        job, trial, result = _cairn_run(task, agent, srv, tmp_path / "jobs")
        main = srv.main_requests()
    _check_two_steps(job, trial, result, agent)
    assert len(main) == 4 and srv.script_left == 0
    # -m reached the CLI: every model request names that model (provider prefix dropped)
    assert {_requested_model(r) for r in main} == {AGENTS[agent][0].split("/", 1)[1]}
    # without --resume-agent-session the second step starts a fresh conversation
    assert carries_step1(main[0].body) and not carries_step1(main[2].body)
    assert result["timings"]["agent_setup_sec"] < 30


@pytest.mark.parametrize("agent", ["claude-code", "codex"])
def test_resume_agent_session_carries_the_first_steps_conversation(tmp_path, runtimes, agent):
    task = public_two_steps(tmp_path / "two-steps")
    with FakeModels(two_step_script(agent), host=bridge_gateway(), consumes=consumes) as srv:
        job, trial, result = _cairn_run(task, agent, srv, tmp_path / "jobs", "--resume-agent-session")
        main = srv.main_requests()
    _check_two_steps(job, trial, result, agent)
    assert carries_step1(main[2].body)  # step 2's first request holds step 1's conversation
    traj = json.loads(next((trial / "steps").glob("*-append/agent/trajectory.json")).read_text())
    history = [s for s in traj["steps"] if (s.get("extra") or {}).get("cairn_history")]
    assert [s["source"] for s in history] == ["user", "agent", "agent"]
    assert traj["extra"]["resumed"] is True


@pytest.mark.parametrize("agent", ["claude-code"])
def test_timeout_kills_the_cli_tree_and_keeps_tokens(tmp_path, runtimes, monkeypatch, agent):
    """The model hangs on the second turn: the CLI is killed at its bound with all it started
    (a background sleep from its first tool call too); the first turn's tokens are kept."""
    model, key = AGENTS[agent]
    monkeypatch.setenv(key, SECRET)
    # opencode and the Node bundles (Gemini CLI, Qwen Code) take 10-60 s to start on a loaded 2-core machine
    timeout = 120.0 if agent in ("opencode", "gemini-cli", "qwen-code") else 40.0
    task = load_task(public_two_steps(tmp_path / "two-steps"))
    call = two_step_script(agent)[0].calls[0]
    name, args = call
    bg = "(sleep 987 >/dev/null 2>&1 &) ; printf '1\\n' > /app/a.txt"
    args = {**args, ("cmd" if agent == "codex" else "command"): bg}
    hang = Turn(text="never sent", usage=(1, 1, 0), delay_sec=300)
    script = [Turn(text="Starting.", calls=((name, args),), usage=(1000, 40, 300))]
    # every later request hangs (a CLI that gives up on a slow answer and retries waits again)
    with FakeModels(script, host=bridge_gateway(), consumes=consumes, done_turn=hang) as srv:
        agent_obj = create_agent(agent, model, {"base_url": srv.base_url})

        async def main():
            mounts = await agent_obj.prepare_host(task, can_mount=True)
            async with task_sandbox(task, mounts) as sandbox:
                await agent_obj.setup(sandbox, step_context(task, 1, tmp_path / "setup"))
                ctx = step_context(task, 1, tmp_path, timeout_sec=timeout)
                started = asyncio.get_running_loop().time()
                await agent_obj.run(task.steps[0].instruction, sandbox, ctx)
                elapsed = asyncio.get_running_loop().time() - started
                procs = await sandbox.processes()
                return ctx, elapsed, procs

        ctx, elapsed, procs = asyncio.run(main())
        seen = [(r.path, r.side) for r in srv.requests]
    assert ctx.exit is AgentExit.TIMEOUT, (ctx.metadata, seen)
    assert elapsed < timeout
    left = [
        p.cmdline
        for p in procs
        if "sleep 987" in p.cmdline or agent_obj.spec.binary in p.cmdline.split(" ")[0]
    ]
    assert left == []
    assert ctx.tokens is not None, seen
    assert ctx.tokens.prompt == 1000 and ctx.tokens.cached == 300
    traj = json.loads((ctx.logs_dir / "trajectory.json").read_text())
    calls = [c for s in traj["steps"] for c in s.get("tool_calls", [])]
    assert [c["function_name"] for c in calls] == [SHELL_TOOL[agent]]
    assert (ctx.logs_dir / "stdout.txt").is_file()


@pytest.mark.parametrize("agent", list(AGENTS))
def test_no_network_task_reaches_only_the_model_through_the_gateway(tmp_path, runtimes, agent):
    """examples/two-steps as shipped (``no-network``): the trial's egress gateway opens the
    model host for the agent phases only; every connection the steps record is the model's.

    The CLIs with a model variable get no ``-m`` here but the host's ``ANTHROPIC_MODEL`` /
    ``GEMINI_MODEL`` / ``OPENAI_MODEL``, which must reach them (their requests name it)."""
    task = tmp_path / "two-steps"
    shutil.copytree(TWO_STEPS, task)
    assert 'network_mode = "no-network"' in (task / "task.toml").read_text()
    addr = bridge_gateway()
    var = MODEL_VAR.get(agent)
    env_model = {"gemini-cli": "gemini-2.5-pro"}.get(agent, "env-picked-model")
    with FakeModels(two_step_script(agent), host=addr, consumes=consumes) as srv:
        job, trial, result = _cairn_run(
            task,
            agent,
            srv,
            tmp_path / "jobs",
            "--add-host",
            f"model.test={addr}",
            base_url=f"http://model.test:{srv.port}",
            model_env={var: env_model} if var else None,
        )
        main = srv.main_requests()
    _check_two_steps(job, trial, result, agent)
    assert len(main) == 4 and srv.script_left == 0
    want = env_model if var else AGENTS[agent][0].split("/", 1)[1]
    assert {_requested_model(r) for r in main} == {want}
    # opencode starts an npm install of a plugin package in a fresh HOME (no switch turns it
    # off in 1.18.x, agent-clis notes): the gateway refuses it, the run does not need it
    refused = {"opencode": {"registry.npmjs.org"}}.get(agent, set())
    denied_total = 0
    for name in ("write", "append"):
        (step_dir,) = (trial / "steps").glob(f"*-{name}")
        lines = [json.loads(x) for x in (step_dir / "network.jsonl").read_text().splitlines()]
        allowed = {(x["host"], x["port"], x["phase"]) for x in lines if x["verdict"] == "allowed"}
        assert allowed == {("model.test", srv.port, "agent")}, lines
        denied = [x for x in lines if x["verdict"] != "allowed"]
        assert {x["host"] for x in denied} <= refused, denied
        assert all(x["bytes_in"] == 0 for x in denied), denied
        denied_total += len(denied)
    assert sum(s["network"]["denied"] for s in result["steps"]) == denied_total
    if not refused:
        assert denied_total == 0


@pytest.mark.parametrize("agent", ["claude-code", "codex"])
def test_no_network_task_reaches_only_the_relay(tmp_path, runtimes, agent):
    """The same shipped no-network task through the job's model relay (the default): the gateway
    opens the relay's address and port only, never the model host; the relay reaches the model
    at the job's ``--add-host`` address; the trial's tokens are the relay's (spend_source)."""
    task = tmp_path / "two-steps"
    shutil.copytree(TWO_STEPS, task)
    addr = bridge_gateway()
    with FakeModels(two_step_script(agent), host=addr, consumes=consumes) as srv:
        job, trial, result = _cairn_run(
            task,
            agent,
            srv,
            tmp_path / "jobs",
            "--add-host",
            f"model.test={addr}",
            base_url=f"http://model.test:{srv.port}",
            relay=True,
        )
        main = srv.main_requests()
    _check_two_steps(job, trial, result, agent)
    assert len(main) == 4 and srv.script_left == 0
    assert result["spend_source"] == "relay"
    for name in ("write", "append"):
        (step_dir,) = (trial / "steps").glob(f"*-{name}")
        lines = [json.loads(x) for x in (step_dir / "network.jsonl").read_text().splitlines()]
        allowed = {(x["host"], x["phase"]) for x in lines if x["verdict"] == "allowed"}
        ports = {x["port"] for x in lines if x["verdict"] == "allowed"}
        assert allowed == {(addr, "agent")} and len(ports) == 1 and srv.port not in ports, lines
        assert all(x["host"] != "model.test" for x in lines), lines
        assert (step_dir / "agent" / "model_calls.jsonl").is_file()


SEED = {
    "schema_version": "ATIF-v1.7",
    "session_id": "prior-1",
    "agent": {"name": "someone", "version": "1"},
    "steps": [
        {"step_id": 1, "source": "user", "message": "Earlier: remember the word PELICAN."},
        {
            "step_id": 2,
            "source": "agent",
            "message": "Looking first.",
            "tool_calls": [
                {
                    "tool_call_id": "toolu_prior_1",
                    "function_name": "Bash",
                    "arguments": {"command": "ls /app", "description": "list"},
                }
            ],
            "observation": {"results": [{"source_call_id": "toolu_prior_1", "content": "nothing here"}]},
        },
        {"step_id": 3, "source": "agent", "message": "Noted: PELICAN."},
    ],
}


def test_seed_trajectory_opens_claude_codes_first_session(tmp_path, runtimes):
    """A task's ``steps/<first>/trajectory.json`` becomes a Claude Code session file that step
    1 resumes: its first model request carries the seed's turns (text, tool_use, tool_result)
    before the instruction; step 2 (no --resume-agent-session) starts without them."""
    agent = "claude-code"
    task = public_two_steps(tmp_path / "two-steps")
    (task / "steps" / "write" / "trajectory.json").write_text(json.dumps(SEED))
    with FakeModels(two_step_script(agent), host=bridge_gateway(), consumes=consumes) as srv:
        job, trial, result = _cairn_run(task, agent, srv, tmp_path / "jobs")
        main = srv.main_requests()
    _check_two_steps(job, trial, result, agent)  # tokens: only this trial's
    messages = main[0].body["messages"]
    blob = json.dumps(messages)
    assert "Earlier: remember the word PELICAN." in blob and "Noted: PELICAN." in blob
    uses = [
        b
        for m in messages
        if isinstance(m.get("content"), list)
        for b in m["content"]
        if b.get("type") == "tool_use"
    ]
    results = [
        b
        for m in messages
        if isinstance(m.get("content"), list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]
    assert uses[0]["id"] == "toolu_prior_1" and uses[0]["input"]["command"] == "ls /app"
    assert results[0]["tool_use_id"] == "toolu_prior_1"
    assert blob.index("PELICAN") < blob.index(STEP1_MARK)  # the seed comes first
    assert "PELICAN" not in json.dumps(main[2].body)
    traj = json.loads(next((trial / "steps").glob("*-write/agent/trajectory.json")).read_text())
    seeded = [s for s in traj["steps"] if (s.get("extra") or {}).get("cairn_seed")]
    assert [s["message"] for s in seeded] == [s["message"] for s in SEED["steps"]]
    assert traj["extra"]["seeded_from"] == "trajectory.json"
