"""The Python agents end to end: aider and mini-swe-agent at their pinned PyPI versions, from
sealed Python runtimes (Debian bookworm's CPython 3.11 with the agent, bound read-only at
/opt/cairn-agent), on examples/two-steps in Docker, each driven by the scripted model server
(Chat Completions through LiteLLM) on the docker bridge gateway. The image's own Python is not
used: one test runs an image whose ``python3`` is removed.

The runtimes are prepared on demand into cairn's cache (``cairn agents prepare aider
mini-swe-agent`` ahead of time): the first run on a fresh machine downloads the Python packages
from the Debian archive and the agents from PyPI with uv (aider ~690 MB installed,
mini-swe-agent ~730 MB; 1-2 min each here).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agent_helpers import needs_sandbox
from cli_scripts import (
    COMMANDS,
    FILES,
    JOB_NAME,
    SUBMIT,
    TWO_STEPS,
    USAGE,
    bridge_gateway,
    carries_step1,
    consumes_any,
    public_two_steps,
    run_cli_job,
    two_step_script,
)
from fake_models import FakeModels, Turn

pytestmark = [pytest.mark.docker, pytest.mark.slow, needs_sandbox]

MODEL = "openai/scripted-model"
SECRET = "sk-cairn-test-secret-0123456789"
AGENTS = ("aider", "mini-swe-agent")


@pytest.fixture(scope="session")
def py_runtimes():
    """Both Python runtimes prepared once in the shared cache."""
    from cairn.agents.installed import AIDER, MINI_SWE_AGENT
    from cairn.agents.runtime import prepare_python_runtime

    return {
        spec.name: prepare_python_runtime(spec.name, spec.packaging, spec.version)  # type: ignore[arg-type]
        for spec in (AIDER, MINI_SWE_AGENT)
    }


def _cairn_run(task: Path, agent: str, base_url: str, jobs: Path, *extra: str):
    proc = run_cli_job(
        task, agent, model=MODEL, base_url=base_url, jobs=jobs, env={"OPENAI_API_KEY": SECRET}, extra=extra
    )  # direct mode: the CLI calls the model itself (relay mode: tests/relay)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    job = jobs / JOB_NAME
    (trial,) = (job / "trials").iterdir()
    return job, trial, json.loads((trial / "result.json").read_text())


def _turns(agent: str, step: str) -> list[tuple[int, int, int]]:
    return USAGE[step][:1] if agent == "aider" else USAGE[step]


def _want(agent: str, step: str) -> dict[str, int | None]:
    turns = _turns(agent, step)
    # aider does not report cached tokens for OpenAI-style usage (the scripted server sends
    # them): null in result.json and in ATIF, never 0 (issue 15)
    return {
        "prompt": sum(t[0] for t in turns),
        "completion": sum(t[1] for t in turns),
        "cached": None if agent == "aider" else sum(t[2] for t in turns),
    }


def _check(job: Path, trial: Path, result: dict, agent: str) -> None:
    steps = {s["name"]: s for s in result["steps"]}
    assert [steps[n]["reward"] for n in ("write", "append")] == [1.0, 1.0]
    for name in ("write", "append"):
        assert steps[name]["agent_exit"] == "ok", steps[name]
        assert steps[name]["tokens"] == _want(agent, name), name
        agent_dir = next((trial / "steps").glob(f"*-{name}/agent"))
        traj = json.loads((agent_dir / "trajectory.json").read_text())
        assert traj["schema_version"] == "ATIF-v1.7"
        assert traj["agent"]["name"] == agent
        agent_steps = [s for s in traj["steps"] if s["source"] == "agent"]
        assert [s["metrics"]["prompt_tokens"] for s in agent_steps] == [t[0] for t in _turns(agent, name)]
        assert [s["metrics"]["completion_tokens"] for s in agent_steps] == [t[1] for t in _turns(agent, name)]
        fm = traj["final_metrics"]
        want = _want(agent, name)
        assert (fm["total_prompt_tokens"], fm["total_completion_tokens"]) == (
            want["prompt"],
            want["completion"],
        )
        if agent == "mini-swe-agent":
            calls = [c for s in agent_steps for c in s.get("tool_calls", [])]
            assert [(c["function_name"], c["arguments"]) for c in calls] == [
                ("bash", {"command": COMMANDS[name]}),
                ("bash", {"command": SUBMIT}),
            ]
            assert [s["metrics"].get("cached_tokens") for s in agent_steps] == [t[2] for t in USAGE[name]]
            obs = agent_steps[0]["observation"]["results"]
            assert obs[0]["source_call_id"] == calls[0]["tool_call_id"]
            assert '"returncode": 0' in obs[0]["content"]
            assert traj["extra"]["exit_status"] == "Submitted"
            assert (agent_dir / "mini.traj.json").is_file()
        else:
            # aider has no tools: the reply is a whole-file listing it applies itself
            fname, line = FILES[name]
            assert agent_steps[0]["message"].endswith(f"{fname}\n```\n{line}\n```")
            assert "cached_tokens" not in agent_steps[0]["metrics"]  # not reported: null
            assert traj["extra"]["applied_edits"] == [fname]
            assert (agent_dir / "llm-history.txt").is_file()
        # the step's first user turn is cairn's instruction, exactly
        instruction = (TWO_STEPS / "steps" / name / "instruction.md").read_text()
        assert traj["steps"][0]["source"] == "user"
        assert traj["steps"][0]["message"].strip() == instruction.strip()
    parts = [_want(agent, "write"), _want(agent, "append")]
    total = {
        k: None if any(w[k] is None for w in parts) else sum(w[k] or 0 for w in parts)
        for k in ("prompt", "completion", "cached")
    }
    if agent == "aider":
        assert total["cached"] is None and any(t[2] for t in USAGE["write"])
    assert result["tokens"] == total
    assert json.loads((job / "summary.json").read_text())["tokens"] == total
    for path in job.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


@pytest.mark.parametrize("agent", AGENTS)
def test_python_agent_passes_two_steps_with_exact_tokens(tmp_path, py_runtimes, agent):
    task = public_two_steps(tmp_path / "two-steps")
    with FakeModels(two_step_script(agent), host=bridge_gateway(), consumes=consumes_any) as srv:
        job, trial, result = _cairn_run(task, agent, srv.base_url, tmp_path / "jobs")
        main = srv.main_requests()
    _check(job, trial, result, agent)
    assert srv.script_left == 0
    assert len(main) == (2 if agent == "aider" else 4)
    assert all(r.path == "/v1/chat/completions" for r in main)
    assert {r.body.get("model") for r in main} == {"scripted-model"}
    assert {r.headers.get("authorization") for r in main} == {f"Bearer {SECRET}"}
    # each step is a new conversation: step 2's request does not hold step 1's instruction
    assert carries_step1(main[0].body)
    assert not carries_step1(main[-1].body)
    assert result["timings"]["agent_setup_sec"] < 30


def test_python_agent_under_no_network_reaches_only_its_model(tmp_path, py_runtimes):
    """mini-swe-agent on examples/two-steps as shipped (``no-network``): only the model host is
    reached, through the trial's egress gateway."""
    agent = "mini-swe-agent"
    task = tmp_path / "two-steps"
    shutil.copytree(TWO_STEPS, task)
    addr = bridge_gateway()
    with FakeModels(two_step_script(agent), host=addr, consumes=consumes_any) as srv:
        job, trial, result = _cairn_run(
            task,
            agent,
            f"http://model.test:{srv.port}",
            tmp_path / "jobs",
            "--add-host",
            f"model.test={addr}",
        )
    _check(job, trial, result, agent)
    for name in ("write", "append"):
        (step_dir,) = (trial / "steps").glob(f"*-{name}")
        lines = [json.loads(x) for x in (step_dir / "network.jsonl").read_text().splitlines()]
        assert {(x["host"], x["port"], x["verdict"], x["phase"]) for x in lines} == {
            ("model.test", srv.port, "allowed", "agent")
        }, lines
    assert all(s["network"]["denied"] == 0 for s in result["steps"])


def test_runs_in_an_image_without_python_and_leaks_nothing_into_commands(tmp_path, py_runtimes):
    """mini-swe-agent (its own Python 3.11) in an image whose ``python3`` is removed: the step
    passes, and the commands it runs see neither the runtime's ``LD_LIBRARY_PATH`` nor a
    ``PYTHONHOME``/``PYTHONPATH``, nor a ``python3`` of the runtime on ``PATH`` (so a task's own
    Python, where the image has one, is the one its commands get)."""
    from taskgen import write_task

    probe = (
        'printf "ld=%s home=%s path=%s py=%s\\n" "${LD_LIBRARY_PATH-unset}" '
        '"${PYTHONHOME-unset}" "${PYTHONPATH-unset}" "$(command -v python3 || echo none)" '
        "> /app/out.txt"
    )
    test = (
        'grep -qx "ld=unset home=unset path=unset py=none" /app/out.txt '
        "&& echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
    )
    dockerfile = "FROM debian:bookworm-slim\nRUN rm -f /usr/bin/python3 /usr/bin/python3.*\nWORKDIR /app\n"
    task = write_task(
        tmp_path,
        "no-python",
        dockerfile=dockerfile,
        network="public",
        instruction="Record the environment.",
        test=test,
    )
    script = [
        Turn(text="Probing.", calls=(("bash", {"command": probe}),), usage=(10, 2, 0)),
        Turn(text="Done.", calls=(("bash", {"command": SUBMIT}),), usage=(11, 1, 0)),
    ]
    with FakeModels(script, host=bridge_gateway(), consumes=consumes_any) as srv:
        job, trial, result = _cairn_run(task, "mini-swe-agent", srv.base_url, tmp_path / "jobs")
    out = next((trial / "steps").glob("*/verifier/test-stdout.txt"))
    assert result["reward"] == 1.0, out.read_text()
    assert result["tokens"] == {"prompt": 21, "completion": 3, "cached": 0}
