"""The ``llm`` agent through the real trial engine on the two-step example (examples/two-steps).

The engine creates the agent from its name through the registry (``-a llm -m … --ak …``), runs
both steps in one sandbox, verifies them, and writes result.json with tokens per step and per
trial. The model is the scripted server in tests/helpers/fake_openai.py.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path

import pytest

if importlib.util.find_spec("litellm") is None:  # not imported here: cairn sets its env first
    pytest.skip("LiteLLM is not installed (pip install 'cairn-eval[llm]')", allow_module_level=True)

from agent_helpers import BACKEND, needs_sandbox  # noqa: E402
from cairn.plan import RunOptions, TrialPlan, trial_id  # noqa: E402
from cairn.task.load import load_task  # noqa: E402
from cairn.trial.run import run_trial  # noqa: E402
from fake_openai import FakeOpenAI, bash_call, error, submit_call  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "two-steps"
MODEL = "openai/gpt-4o-mini"

pytestmark = [needs_sandbox, pytest.mark.docker]


@pytest.fixture(autouse=True)
def _api_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-test-key")


def _run(tmp_path: Path, server: FakeOpenAI, **options):
    task = load_task(EXAMPLE)
    kwargs = {"api_base": server.url, "retry_base_delay_sec": "0.01", **options.pop("agent_kwargs", {})}
    tid = trial_id(task.name, task.content_hash, "llm", kwargs, MODEL, BACKEND, 1)
    job_dir = tmp_path / "job"
    plan = TrialPlan(
        task=task,
        agent_name="llm",
        agent_kwargs=kwargs,
        model=MODEL,
        backend=BACKEND,
        attempt=1,
        trial_id=tid,
        trial_dir=job_dir / "trials" / f"{task.slug}__1__{tid[:8]}",
        job_id="test-" + tid[:8],
        job_dir=job_dir,
        options=RunOptions(**options),
    )
    result = asyncio.run(run_trial(plan))
    return result, json.loads((plan.trial_dir / "result.json").read_text()), plan.trial_dir


def _script():
    return [
        bash_call("echo 1 > /app/a.txt", usage=(120, 30, 20)),
        submit_call(usage=(160, 10)),
        bash_call("echo 2 > /app/b.txt", usage=(200, 25, 50)),
        submit_call(usage=(260, 6)),
    ]


@pytest.mark.parametrize("resume", [False, True], ids=["fresh", "resumed"])
def test_two_step_example_scored_with_tokens(tmp_path, resume):
    with FakeOpenAI(_script()) as server:
        result, data, trial_dir = _run(tmp_path, server, resume_agent_session=resume)
    assert data["outcome"] == "completed"
    assert [s["reward"] for s in data["steps"]] == [1.0, 1.0]
    assert [s["agent_exit"] for s in data["steps"]] == ["ok", "ok"]
    # tokens per step equal the scripted usage sums, and the trial sums the steps
    assert data["steps"][0]["tokens"] == {"prompt": 280, "completion": 40, "cached": 20}
    assert data["steps"][1]["tokens"] == {"prompt": 460, "completion": 31, "cached": 50}
    assert data["tokens"] == {"prompt": 740, "completion": 71, "cached": 70}
    assert data["cost_usd"] == pytest.approx(data["steps"][0]["cost_usd"] + data["steps"][1]["cost_usd"])
    assert data["cost_usd"] > 0
    # each step's trajectory lists its own tool calls
    for step_dir, command in (("01-write", "echo 1 > /app/a.txt"), ("02-append", "echo 2 > /app/b.txt")):
        traj = json.loads((trial_dir / "steps" / step_dir / "agent" / "trajectory.json").read_text())
        own = [
            c
            for s in traj["steps"]
            if not s.get("extra", {}).get("cairn_history")
            for c in s.get("tool_calls", [])
        ]
        assert [c["function_name"] for c in own] == ["bash", "submit"]
        assert own[0]["arguments"] == {"command": command}
    # step 2's conversation holds step 1's messages only when resumed
    step2 = json.dumps(server.messages(2))
    assert ("Write the single line `1`" in step2) is resume
    assert "Keep `/app/a.txt` as it is" in step2


def test_max_turns_is_recorded_and_the_verifier_still_runs(tmp_path):
    with FakeOpenAI(default=bash_call("ls", usage=(10, 1))) as server:
        _, data, _ = _run(tmp_path, server, agent_kwargs={"max_turns": "2"})
    first = data["steps"][0]
    assert first["agent_exit"] == "max_turns"
    assert first["source"] == "verifier" and first["reward"] == 0.0
    assert first["tokens"] == {"prompt": 20, "completion": 2, "cached": 0}
    assert data["outcome"] == "stopped"  # min_reward 1.0 on step 1 gates step 2


def test_rate_limits_are_retried_and_the_trial_completes(tmp_path):
    script = [error(429), error(429), *_script()]
    with FakeOpenAI(script) as server:
        _, data, _ = _run(tmp_path, server)
    assert data["outcome"] == "completed"
    assert [s["reward"] for s in data["steps"]] == [1.0, 1.0]
    assert len(server.requests) == 6


def test_auth_failure_errors_the_trial_never_scores_it(tmp_path):
    with FakeOpenAI(default=error(401, "invalid api key")) as server:
        _, data, _ = _run(tmp_path, server)
    assert data["outcome"] == "errored"
    assert data["error"]["kind"] == "model_auth_failed"
    assert data["reward"] is None
    assert len(server.requests) == 1


SEED = {
    "schema_version": "ATIF-v1.7",
    "session_id": "prior-1",
    "agent": {"name": "someone", "version": "1"},
    "steps": [
        {"step_id": 1, "source": "user", "message": "Earlier: note the secret word PELICAN."},
        {
            "step_id": 2,
            "source": "agent",
            "message": "Checking the folder.",
            "tool_calls": [
                {"tool_call_id": "call_prior_1", "function_name": "bash", "arguments": {"command": "ls /app"}}
            ],
            "observation": {
                "results": [{"source_call_id": "call_prior_1", "content": "exit code 0\nnothing here"}]
            },
            "metrics": {"prompt_tokens": 999, "completion_tokens": 99},
        },
        {"step_id": 3, "source": "agent", "message": "Noted: PELICAN."},
    ],
}


def test_task_seed_trajectory_opens_the_first_steps_session(tmp_path):
    """A task's ``steps/<first>/trajectory.json`` (Harbor's task-level seeding) is the opening of
    step 1's conversation — before its instruction — and not of step 2's; its turns are in
    step 1's trajectory marked ``cairn_seed`` without tokens (none were spent here)."""
    import shutil

    task_dir = tmp_path / "two-steps"
    shutil.copytree(EXAMPLE, task_dir)
    (task_dir / "steps" / "write" / "trajectory.json").write_text(json.dumps(SEED))
    with FakeOpenAI(_script()) as server:
        kwargs = {"api_base": server.url, "retry_base_delay_sec": "0.01"}
        task = load_task(task_dir)
        assert task.seed_trajectory == task_dir / "steps" / "write" / "trajectory.json"
        tid = trial_id(task.name, task.content_hash, "llm", kwargs, MODEL, BACKEND, 1)
        job_dir = tmp_path / "job"
        plan = TrialPlan(
            task=task,
            agent_name="llm",
            agent_kwargs=kwargs,
            model=MODEL,
            backend=BACKEND,
            attempt=1,
            trial_id=tid,
            trial_dir=job_dir / "trials" / f"x__1__{tid[:8]}",
            job_id="test-" + tid[:8],
            job_dir=job_dir,
            options=RunOptions(),
        )
        asyncio.run(run_trial(plan))
        data = json.loads((plan.trial_dir / "result.json").read_text())
        first = server.messages(0)
        step2 = server.messages(2)
    assert [s["reward"] for s in data["steps"]] == [1.0, 1.0]
    # the model's first request: system, the seed as chat messages, then the instruction
    assert [m["role"] for m in first] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert first[1]["content"] == "Earlier: note the secret word PELICAN."
    assert first[2]["tool_calls"][0]["id"] == "call_prior_1"
    assert json.loads(first[2]["tool_calls"][0]["function"]["arguments"]) == {"command": "ls /app"}
    assert first[3] == {
        "role": "tool",
        "tool_call_id": "call_prior_1",
        "content": "exit code 0\nnothing here",
    }
    assert "Write the single line `1`" in first[5]["content"]
    assert "PELICAN" not in json.dumps(step2)  # step 2 starts fresh (no resume)
    # tokens: only what this trial spent (the seed's 999 are not counted)
    assert data["steps"][0]["tokens"] == {"prompt": 280, "completion": 40, "cached": 20}
    traj = json.loads((plan.trial_dir / "steps" / "01-write" / "agent" / "trajectory.json").read_text())
    seeded = [s for s in traj["steps"] if (s.get("extra") or {}).get("cairn_seed")]
    assert [s["message"] for s in seeded] == [s["message"] for s in SEED["steps"]]
    assert all("metrics" not in s for s in seeded)
    assert [s["step_id"] for s in traj["steps"]] == list(range(1, len(traj["steps"]) + 1))
    assert traj["final_metrics"]["total_prompt_tokens"] == 280
