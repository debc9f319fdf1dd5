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
)

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


@pytest.mark.parametrize("backend, sig, phase", [
    pytest.param(b, s, p, id=f"{b}-{s.name}-{p}",
                 marks=[pytest.mark.docker if b == "docker" else pytest.mark.local])
    for b, s, p in CASES])
def test_signal_at_phase_then_resume(tmp_path, backend, sig, phase):
    need(backend)
    task = three_step_task(tmp_path / "tasks", pause=1)
    job = tmp_path / "jobs" / "sig"
    run = Proc("run", "-p", str(task), "-e", backend, "-k", "2", "-n", "2", "--jobs-dir", "jobs",
               "--job-name", "sig", cwd=tmp_path)
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
