"""ATIF trajectories: field shape, None omission, metric sums, history marking, atomic writes."""

from __future__ import annotations

import json
import re

from cairn.agents.trajectory import ATIF_SCHEMA_VERSION, Trajectory, step_metrics, tool_call

ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def _sample() -> Trajectory:
    t = Trajectory(session_id="s1", agent_name="llm", agent_version="0.1.0", model_name="openai/gpt-4o-mini")
    t.add_step("system", "You are an agent.")
    t.add_step("user", "Write a file.")
    s = t.add_step(
        "agent",
        "",
        tool_calls=[tool_call("c1", "bash", {"command": "ls"})],
        metrics=step_metrics(100, 20, 30, 0.5),
    )
    Trajectory.add_result(s, "c1", "exit_code: 0")
    t.add_step(
        "agent",
        "Done.",
        tool_calls=[tool_call("c2", "submit", {})],
        observation_results=[{"source_call_id": "c2", "content": "Submitted."}],
        metrics=step_metrics(150, 10, None, 0.25),
    )
    return t


def test_atif_shape_and_final_metrics(tmp_path):
    t = _sample()
    path = tmp_path / "agent" / "trajectory.json"
    t.write(path)
    data = json.loads(path.read_text())
    assert data["schema_version"] == ATIF_SCHEMA_VERSION == "ATIF-v1.7"
    assert data["session_id"] == "s1"
    assert data["agent"] == {"name": "llm", "version": "0.1.0", "model_name": "openai/gpt-4o-mini"}
    assert [s["step_id"] for s in data["steps"]] == [1, 2, 3, 4]
    assert [s["source"] for s in data["steps"]] == ["system", "user", "agent", "agent"]
    assert all(ISO_UTC.match(s["timestamp"]) for s in data["steps"])
    agent_step = data["steps"][2]
    assert agent_step["tool_calls"] == [
        {"tool_call_id": "c1", "function_name": "bash", "arguments": {"command": "ls"}}
    ]
    assert agent_step["observation"] == {"results": [{"source_call_id": "c1", "content": "exit_code: 0"}]}
    # None values are omitted, not written as null
    assert "tool_calls" not in data["steps"][0] and "metrics" not in data["steps"][1]
    assert "cached_tokens" not in data["steps"][3]["metrics"]
    assert "null" not in path.read_text()
    assert data["final_metrics"] == {
        "total_prompt_tokens": 250,
        "total_completion_tokens": 30,
        "total_cached_tokens": 30,
        "total_cost_usd": 0.75,
        "total_steps": 4,
    }
    assert not [p for p in path.parent.iterdir() if p.name != "trajectory.json"]  # no temp files


def test_unknown_cost_makes_total_cost_absent():
    t = Trajectory(session_id="s", agent_name="llm", agent_version="1")
    t.add_step("agent", "a", metrics=step_metrics(10, 5, None, 0.1))
    t.add_step("agent", "b", metrics=step_metrics(10, 5, None, None))
    fm = t.to_dict()["final_metrics"]
    assert "total_cost_usd" not in fm
    assert fm["total_prompt_tokens"] == 20


def test_history_steps_are_renumbered_marked_and_carry_no_metrics():
    first = _sample()
    second = Trajectory(session_id="s1", agent_name="llm", agent_version="0.1.0")
    second.add_history(first.steps, cairn_step="write")
    second.add_step("user", "Now append.")
    second.add_step("agent", "", metrics=step_metrics(300, 7, 0, 0.1))
    data = second.to_dict()
    assert [s["step_id"] for s in data["steps"]] == [1, 2, 3, 4, 5, 6]
    history = data["steps"][:4]
    assert all(s["extra"] == {"cairn_history": True, "cairn_step": "write"} for s in history)
    assert all("metrics" not in s for s in history)
    assert history[2]["tool_calls"][0]["tool_call_id"] == "c1"
    assert data["final_metrics"]["total_prompt_tokens"] == 300
    assert data["final_metrics"]["total_steps"] == 6
    # marking is idempotent: a third step keeps the original origin
    third = Trajectory(session_id="s1", agent_name="llm", agent_version="0.1.0")
    third.add_history(second.steps, cairn_step="append")
    origins = [s["extra"]["cairn_step"] for s in third.to_dict()["steps"]]
    assert origins == ["write"] * 4 + ["append"] * 2
    assert first.steps[2]["metrics"]["prompt_tokens"] == 100  # the source is not modified
