"""``cairn export`` on a real ``cairn run --start-step`` (local backend): the steps before the
start step were replayed by the oracle and come out marked ``replayed`` with source ``oracle``
(also through ``--passed-only``), apart from the agent's own step records.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cairncli import run_cairn
from taskgen import StepSpec, reward_if, write_task
from testbed import backend_missing
from viewer_job import cairn, env, local_ready

pytestmark = [pytest.mark.local, pytest.mark.slow]


def _export(job: Path, *args: str) -> list[dict]:
    p = run_cairn("export", str(job), *args, env=env(), timeout=120)
    assert p.returncode == 0, p.stderr
    return [json.loads(line) for line in p.stdout.splitlines()]


@pytest.fixture(scope="module")
def start_step_job(tmp_path_factory) -> Path:
    if not local_ready():
        pytest.skip(f"local backend: {backend_missing('local')}")
    root = tmp_path_factory.mktemp("startstep")
    task = write_task(
        root / "tasks",
        "relay",
        steps=[
            StepSpec(
                "lay",
                instruction="Write /app/a.\n",
                solve="echo a > /app/a\n",
                test=reward_if("test -f /app/a"),
                min_reward=1.0,
            ),
            StepSpec(
                "stack",
                instruction="Write /app/b.\n",
                solve="echo b > /app/b\n",
                test=reward_if("test -f /app/a && test -f /app/b"),
                min_reward=1.0,
            ),
            StepSpec(
                "top",
                instruction="Write /app/c.\n",
                solve="echo c > /app/c\n",
                test=reward_if("test -f /app/b && test -f /app/c"),
            ),
        ],
    )
    p = cairn(
        "run",
        "-p",
        str(task),
        "-a",
        "nop",
        "-e",
        "local",
        "--start-step",
        "top",
        "--jobs-dir",
        str(root / "jobs"),
        "--job-name",
        "from-top",
        cwd=root,
    )
    job = root / "jobs" / "from-top"
    assert (job / "summary.json").is_file(), p.stdout + p.stderr
    return job


def test_replayed_steps_are_exported_marked(start_step_job):
    [result] = [json.loads(p.read_text()) for p in start_step_job.glob("trials/*/result.json")]
    assert [s["source"] for s in result["steps"]] == ["oracle", "oracle", "verifier"]
    recs = _export(start_step_job)
    got = [
        (r["step_index"], r["step"], r["source"], r["replayed"], r["passed"], r["reward"], r["errored"])
        for r in recs
    ]
    assert got == [
        (1, "lay", "oracle", True, True, 1.0, False),  # solve.sh replayed, then verified
        (2, "stack", "oracle", True, True, 1.0, False),
        (3, "top", "verifier", False, False, 0.0, False),  # nop wrote nothing
    ]
    for r in recs:
        assert (r["agent"], r["steps_total"], r["trial_reward"], r["outcome"]) == ("nop", 1, 0.0, "completed")
    # the agent got only its own step's instruction; the oracle's replays had none
    assert [(r["instruction"], r["has_trajectory"]) for r in recs] == [
        (None, False),
        (None, False),
        ("Write /app/c.\n", False),
    ]
    assert recs[2]["messages"] == [{"role": "user", "content": "Write /app/c.\n"}]

    # a filter on the step's verdict keeps the replayed steps that passed — still marked
    passed = _export(start_step_job, "--passed-only")
    assert [(r["step"], r["replayed"]) for r in passed] == [("lay", True), ("stack", True)]
    share = _export(start_step_job, "--format", "sharegpt", "--steps", "stack")
    assert [(r["step"], r["replayed"], r["source"]) for r in share] == [("stack", True, "oracle")]
    atif = _export(start_step_job, "--format", "atif", "--steps", "lay,top")
    assert [(d["extra"]["cairn"]["step"], d["extra"]["cairn"]["replayed"]) for d in atif] == [
        ("lay", True),
        ("top", False),
    ]
