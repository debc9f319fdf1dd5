"""``cairn export`` on the example job (a real ``cairn run`` of the llm agent, see conftest.py):
one record per executed step with the step's own rewards; errored steps marked; filters; every
format's shape; the record schema of docs/viewer.md.
"""

from __future__ import annotations

import json

import pytest

from cairn.results.export import RECORD_FIELDS
from cairncli import run_cairn
from viewer_job import env

pytestmark = [pytest.mark.local, pytest.mark.slow]


def _export(job, *args, tmp_path=None) -> list[dict]:
    p = run_cairn("export", str(job), *args, env=env(), timeout=120)
    assert p.returncode == 0, p.stderr
    return [json.loads(line) for line in p.stdout.splitlines()]


def test_jsonl_one_record_per_executed_step(example_job):
    recs = _export(example_job, "--format", "jsonl")
    got = sorted(
        (
            r["task"],
            r["step_index"],
            r["step"],
            r["reward"],
            r["passed"],
            r["source"],
            r["errored"],
            r["outcome"],
        )
        for r in recs
    )
    assert got == [
        ("test/broken", 1, "main", None, False, "error", True, "errored"),
        ("test/chain", 1, "fetch", 1.0, True, "verifier", False, "completed"),
        ("test/chain", 2, "fix", 1.0, True, "verifier", False, "completed"),
        ("test/chain", 3, "ship", 1.0, True, "verifier", False, "completed"),
        ("test/gated", 1, "first", 0.5, False, "verifier", False, "stopped"),  # "second" not run
        ("test/hello", 1, "main", 1.0, True, "verifier", False, "completed"),
    ]
    for r in recs:
        assert list(r) == list(RECORD_FIELDS)
        assert r["schema"] == "cairn.export.step/1" and r["job"] == "example"
        assert r["replayed"] is False and r["attempt"] == 1 and r["agent"] == "llm"
        assert r["has_trajectory"] is True and r["tokens"] == {"prompt": 140, "completion": 25, "cached": 10}
    broken = next(r for r in recs if r["task"] == "test/broken")
    assert (broken["error_kind"], broken["error_category"]) == ("reward_missing", "task")
    fix = next(r for r in recs if r["step"] == "fix")
    assert fix["instruction"] == "CMD: echo 2 > /app/b.txt\n"
    assert fix["rewards"] == {"reward": 1.0} and fix["trial_reward"] == 1.0
    roles = [m["role"] for m in fix["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool"]
    call = fix["messages"][2]["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["name"] == "bash"
    assert json.loads(call["function"]["arguments"]) == {"command": "echo 2 > /app/b.txt"}
    assert fix["messages"][3]["tool_call_id"] == call["id"]
    assert fix["messages"][4]["tool_calls"][0]["function"]["name"] == "submit"


def test_filters(example_job):
    assert sorted(r["step"] for r in _export(example_job, "--passed-only")) == [
        "fetch",
        "fix",
        "main",
        "ship",
    ]
    # records come in trial-folder order: test-chain… before test-gated…
    assert [
        (r["step"], r["reward"]) for r in _export(example_job, "--min-reward", "0.4", "--steps", "first,ship")
    ] == [("ship", 1.0), ("first", 0.5)]
    assert _export(example_job, "--min-reward", "0.6", "--steps", "first") == []


def test_sharegpt_and_atif_shapes(example_job, tmp_path):
    share = _export(example_job, "--format", "sharegpt", "--steps", "fix")
    assert len(share) == 1 and "messages" not in share[0]
    conv = share[0]["conversations"]
    assert [c["from"] for c in conv] == [
        "system",
        "human",
        "function_call",
        "observation",
        "gpt",
        "function_call",
        "observation",
    ]
    assert json.loads(conv[2]["value"]) == {"name": "bash", "arguments": {"command": "echo 2 > /app/b.txt"}}
    assert share[0]["reward"] == 1.0
    atif = _export(example_job, "--format", "atif", "--steps", "first")
    assert len(atif) == 1
    doc = atif[0]
    assert doc["schema_version"] == "ATIF-v1.7"
    assert [s["source"] for s in doc["steps"]][:2] == ["system", "user"]
    meta = doc["extra"]["cairn"]
    assert (meta["task"], meta["step"], meta["reward"], meta["outcome"]) == (
        "test/gated",
        "first",
        0.5,
        "stopped",
    )
    assert "messages" not in meta


def test_parquet_and_output_file(example_job, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "steps.parquet"
    p = run_cairn("export", str(example_job), "--format", "parquet", "-o", str(out), env=env(), timeout=120)
    assert p.returncode == 0, p.stderr
    table = pq.read_table(out)
    assert table.num_rows == 6 and table.column_names == list(RECORD_FIELDS)
    rows = table.to_pylist()
    ship = next(r for r in rows if r["step"] == "ship")
    assert ship["reward"] == 1.0 and json.loads(ship["rewards"]) == {"reward": 1.0}
    jl = tmp_path / "steps.jsonl"
    p = run_cairn("export", str(example_job), "-o", str(jl), env=env(), timeout=120)
    assert p.returncode == 0 and "exported 6 step record(s)" in p.stderr
    assert len(jl.read_text().splitlines()) == 6


def test_bad_arguments(example_job, tmp_path):
    for args, msg in (
        (["--format", "xml"], "--format is one of"),
        (["--format", "parquet"], "needs -o FILE"),
    ):
        p = run_cairn("export", str(example_job), *args, env=env(), timeout=60)
        assert p.returncode == 2 and msg in p.stderr
    p = run_cairn("export", str(tmp_path), env=env(), timeout=60)
    assert p.returncode == 2 and "is not a job folder" in p.stderr


def _run(job, *args):
    return run_cairn("export", str(job), *args, env=env(), timeout=60)


def test_steps_naming_no_step_of_the_job_is_exit_2_and_writes_nothing(example_job, tmp_path):
    out = tmp_path / "steps.jsonl"
    p = _run(example_job, "--steps", "nosuch,nope", "-o", str(out))
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip() == (
        "cairn: error: --steps: the job has no step nosuch, nope; its "
        "steps: main, fetch, fix, ship, first, second"
    )
    assert not out.exists() and not (tmp_path / "steps.jsonl.part").exists()
    p = _run(example_job, "--steps", " , ")
    assert p.returncode == 2 and "--steps names no step" in p.stderr


def test_steps_with_some_unknown_names_warns_and_exports_the_known(example_job):
    p = _run(example_job, "--steps", "fix,nosuch")
    assert p.returncode == 0, p.stderr
    assert [json.loads(line)["step"] for line in p.stdout.splitlines()] == ["fix"]
    assert (
        "cairn: warning: --steps: the job has no step nosuch (its steps: main, fetch, fix, "
        "ship, first, second); exporting fix"
    ) in p.stderr
    assert "exported 1 step record(s)" in p.stderr
    # a declared step no trial reached is a step of the job: no warning, no record
    p = _run(example_job, "--steps", "second")
    assert p.returncode == 0 and p.stdout == "" and "warning" not in p.stderr


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf"])
def test_min_reward_must_be_finite(example_job, value):
    p = _run(example_job, f"--min-reward={value}")
    assert p.returncode == 2, p.stderr
    assert "--min-reward must be a finite number" in p.stderr
    assert p.stdout == "" and "Traceback" not in p.stderr
