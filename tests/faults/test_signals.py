"""Signals at phases of a trial, driven from the trial's event lines (issue #12).

SIGINT and SIGTERM: running trials are cancelled and recorded ``cancelled``, the process
returns only after every sandbox of the job is gone, exit 1 (docs/cli.md). SIGKILL: nothing
is half-written (every result.json present is whole; the interrupted trials have none),
``cairn clean`` removes what the dead process left. In every case a following ``cairn resume``
completes the job with the scores of a clean run, each trial scored once.
"""

from __future__ import annotations

import json
import signal

import pytest

from faultkit import (
    Proc,
    assert_clean_leaves_nothing,
    assert_one_result_each,
    cairn,
    job_resources,
    need,
    rewards,
    three_step_task,
    wait_for_sandboxes_holding,
)
from taskgen import StepSpec, reward_if, write_task

pytestmark = [pytest.mark.faults, pytest.mark.slow]

PHASES = {
    "start": r"job \S+: started",  # images resolved / sandboxes starting
    "agent": r"environment: \w+, ready",  # step 1's agent is running (it sleeps)
    "step2": r"step 1/3 a: reward",  # step 2 is under way (setup, agent, verifier)
}
CLEAN = {("test/three", a): ("completed", 1.0, [1.0, 1.0, 1.0]) for a in (1, 2)}

CASES = [
    ("local", signal.SIGINT, "agent"),
    ("local", signal.SIGTERM, "step2"),
    ("local", signal.SIGKILL, "start"),
    ("local", signal.SIGKILL, "step2"),
    ("docker", signal.SIGTERM, "agent"),
    ("docker", signal.SIGKILL, "step2"),
]


@pytest.mark.parametrize(
    "backend, sig, phase",
    [
        pytest.param(
            b,
            s,
            p,
            id=f"{b}-{s.name}-{p}",
            marks=[pytest.mark.docker if b == "docker" else pytest.mark.local],
        )
        for b, s, p in CASES
    ],
)
def test_signal_at_phase_then_resume(tmp_path, backend, sig, phase):
    need(backend)
    task = three_step_task(tmp_path / "tasks", pause=1)
    job = tmp_path / "jobs" / "sig"
    run = Proc(
        "run",
        "-p",
        str(task),
        "-e",
        backend,
        "-k",
        "2",
        "-n",
        "2",
        "--jobs-dir",
        "jobs",
        "--job-name",
        "sig",
        cwd=tmp_path,
    )
    try:
        run.wait_line(PHASES[phase])
        run.signal(sig)
        rc = run.finish(timeout=240)
    finally:
        run.kill()
    trials = sorted((job / "trials").glob("*")) if (job / "trials").exists() else []
    written = [t / "result.json" for t in trials if (t / "result.json").exists()]
    for path in written:  # nothing half-written, whatever the signal
        json.loads(path.read_text(encoding="utf-8"))
    if sig == signal.SIGKILL:
        assert rc == -signal.SIGKILL
    else:
        assert rc == 1, run.output
        assert "Traceback" not in run.output
        outcomes = [json.loads(p.read_text(encoding="utf-8"))["outcome"] for p in written]
        assert len(written) == 2 and "cancelled" in outcomes, outcomes
        assert job_resources(job) == [], "the process returned before its sandboxes were gone"
    assert_clean_leaves_nothing(job, tmp_path)
    res = cairn("resume", str(job), cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert rewards(assert_one_result_each(job, set(CLEAN))) == CLEAN
    assert job_resources(job) == []


# ---- signals while the verifier runs and while artifacts are collected ---------------------
# Step 1 of a 2-step task blocks in its verifier (test.sh) or in its collect hook (artifact
# collection) after writing a marker, but only while the host passes FAULT_BLOCK=1 (a
# ${FAULT_BLOCK:-0} template of [environment].env): the test waits for the marker in both
# trials' sandboxes and then signals; the resume, without the variable, runs clean.
MARKER = "/tmp/fault-blocked"
BLOCK = f'if [ "$FAULT_BLOCK" = 1 ]; then touch {MARKER}; sleep 3600; fi\n'
CLEAN2 = {("test/late", a): ("completed", 1.0, [1.0, 1.0]) for a in (1, 2)}

LATE_CASES = [  # each signal in each phase at least once, on both backends between them
    ("local", signal.SIGINT, "verifier"),
    ("local", signal.SIGTERM, "artifacts"),
    ("local", signal.SIGKILL, "verifier"),
    ("docker", signal.SIGINT, "artifacts"),
    ("docker", signal.SIGTERM, "verifier"),
    ("docker", signal.SIGKILL, "artifacts"),
]


def late_task(root, phase: str):
    """Step ``a`` blocks in ``phase`` (``verifier`` or ``artifacts``) under FAULT_BLOCK=1."""
    hook = (
        (
            "[[steps.verifier.collect]]\n"
            'command = "echo a > /logs/artifacts/a.txt; '
            + BLOCK.strip().replace('"', '\\"')
            + '"\ntimeout_sec = 900\n'
        )
        if phase == "artifacts"
        else ""
    )
    a_test = (BLOCK if phase == "verifier" else "") + reward_if("grep -qx a /app/log")
    steps = [
        StepSpec("a", solve="echo a >> /app/log\n", test=a_test, toml_extra=hook),
        StepSpec("b", solve="echo b >> /app/log\n", test=reward_if("grep -qx b /app/log")),
    ]
    task = write_task(root, "late", steps=steps)
    toml = task / "task.toml"
    toml.write_text(
        toml.read_text(encoding="utf-8").replace(
            "[environment]\n", '[environment]\nenv = { FAULT_BLOCK = "${FAULT_BLOCK:-0}" }\n', 1
        ),
        encoding="utf-8",
    )
    return task


@pytest.mark.parametrize(
    "backend, sig, phase",
    [
        pytest.param(
            b,
            s,
            p,
            id=f"{b}-{s.name}-{p}",
            marks=[pytest.mark.docker if b == "docker" else pytest.mark.local],
        )
        for b, s, p in LATE_CASES
    ],
)
def test_signal_in_verifier_or_artifacts_then_resume(tmp_path, backend, sig, phase):
    need(backend)
    task = late_task(tmp_path / "tasks", phase)
    job = tmp_path / "jobs" / "late"
    run = Proc(
        "run",
        "-p",
        str(task),
        "-e",
        backend,
        "-k",
        "2",
        "-n",
        "2",
        "--jobs-dir",
        "jobs",
        "--job-name",
        "late",
        cwd=tmp_path,
        FAULT_BLOCK="1",
    )
    try:
        wait_for_sandboxes_holding(job, MARKER, 2, proc=run)  # both trials blocked in phase
        run.signal(sig)
        rc = run.finish(timeout=240)
    finally:
        run.kill()
    trials = sorted((job / "trials").iterdir())
    assert len(trials) == 2
    for t in trials:  # nothing half-written, whatever the signal
        for name in ("config.json", "steps.json"):
            json.loads((t / name).read_text(encoding="utf-8"))
    written = [t / "result.json" for t in trials if (t / "result.json").exists()]
    if sig == signal.SIGKILL:
        assert rc == -signal.SIGKILL
        assert written == [], "a trial killed in its step 1 has no result: resume re-runs it"
    else:
        assert rc == 1, run.output
        assert "Traceback" not in run.output
        results = [json.loads(p.read_text(encoding="utf-8")) for p in written]
        assert [
            (r["outcome"], r["error"]["kind"], r["error"]["phase"], r["error"]["step"]) for r in results
        ] == [("cancelled", "cancelled", phase, "a")] * 2, results
        assert all(r["reward"] is None and r["steps"][0]["source"] == "not-run" for r in results), results
        assert job_resources(job) == [], "the process returned before its sandboxes were gone"
    assert_clean_leaves_nothing(job, tmp_path)
    res = cairn("resume", str(job), cwd=tmp_path, timeout=300, FAULT_BLOCK=None)
    assert res.returncode == 0, res.stdout + res.stderr
    assert rewards(assert_one_result_each(job, set(CLEAN2))) == CLEAN2
    assert sorted((job / "trials").iterdir()) == trials  # re-run in place, no new folder
    assert job_resources(job) == []
