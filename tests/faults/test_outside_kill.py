"""A docker sandbox killed or removed from outside while the agent works (issue #12).

``docker kill`` by an operator or another program, or ``docker rm -f``, is no fault of the
agent (nor of the task, when it lands in a step's ``setup.sh``): the trial records
``sandbox_lost`` (infra), is retried on a fresh sandbox under ``--max-retries`` and the
retry's result is the trial's. An agent that kills every process
of its own sandbox (``kill -9 -1``: the keeper goes, and the init exits with the same 137 an
outside kill leaves) is still the candidate's failure (``sandbox_unusable``, scored 0, never
retried): only a kill the engine was asked for counts as outside (docs/guarantees.md 7).
The out-of-memory kill of the sandbox keeps its classification (test_memory.py).
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from faultkit import (
    BLOCK_UNTIL_RELEASED,
    MARKER,
    Proc,
    assert_clean_leaves_nothing,
    assert_one_result_each,
    block_template,
    containers_holding,
    job_resources,
    need,
    release_sandboxes,
    wait_for_sandboxes_holding,
)
from taskgen import StepSpec, reward_if, write_task

pytestmark = [pytest.mark.faults, pytest.mark.docker, pytest.mark.slow]

OUTSIDE = {"killed-outside": ["docker", "kill"], "removed-outside": ["docker", "rm", "-f"]}
"""Task whose agent blocks once → the command the test runs on its blocked sandbox."""
IN_SETUP = "killed-in-setup"
"""The task whose step-1 setup.sh blocks (every attempt, until released); ``docker kill``ed."""


def _blocked_containers(job_dir) -> dict[str, str]:
    """Task name → id of the job's running container whose agent is blocked (holds MARKER)."""
    out: dict[str, str] = {}
    for c in containers_holding(job_dir, MARKER):
        for task in (*OUTSIDE, IN_SETUP):
            if any(task in name for name in c["Names"]):
                out[task] = c["Id"]
    return out


def test_a_sandbox_killed_from_outside_is_retried_as_infra(tmp_path):
    need("docker")
    ds = tmp_path / "ds"
    for task in OUTSIDE:  # the agent blocks in its first run of these (job_agents.BlockOnceAgent)
        write_task(ds, task, solve="echo ok > /app/done\n", test=reward_if("test -f /app/done"))
    # the agent's own doing: it kills every process of its sandbox, the whole container goes
    write_task(
        ds,
        "kills-itself",
        solve="echo ok > /app/done\nkill -9 -1\nsleep 30\n",
        test=reward_if("test -f /app/done"),
    )
    block_template(
        write_task(
            ds,
            IN_SETUP,
            steps=[
                StepSpec(
                    "a",
                    solve="echo ok > /app/done\n",
                    test=reward_if("test -f /app/done"),
                    workdir={"setup.sh": BLOCK_UNTIL_RELEASED},
                )
            ],
        )
    )
    markers = tmp_path / "markers"
    markers.mkdir()
    p = Proc(
        "run",
        "-p",
        str(ds),
        "-e",
        "docker",
        "-a",
        "job_agents:BlockOnceAgent",
        "--ak",
        "block=" + ",".join(OUTSIDE),
        "--ak",
        f"marker_dir={markers}",
        "-r",
        "1",
        "-n",
        "4",
        "--jobs-dir",
        "jobs",
        "--job-name",
        "outside",
        cwd=tmp_path,
        FAULT_BLOCK="1",
    )
    job = tmp_path / "jobs" / "outside"
    try:
        wait_for_sandboxes_holding(job, MARKER, len(OUTSIDE) + 1, proc=p)
        blocked = _blocked_containers(job)
        assert set(blocked) == {*OUTSIDE, IN_SETUP}, blocked
        for task, argv in {**OUTSIDE, IN_SETUP: ["docker", "kill"]}.items():  # as an operator
            res = subprocess.run(
                [*argv, blocked[task]], capture_output=True, text=True, timeout=60, check=False
            )
            assert res.returncode == 0, res.stderr
        # the retry of the setup task blocks again (the killed sandboxes no longer run)
        wait_for_sandboxes_holding(job, MARKER, 1, proc=p)
        assert release_sandboxes(job) >= 1
        rc = p.finish()
    finally:
        p.kill()
    out = p.output
    assert rc == 0, out  # every trial ended completed (docs/cli.md): none errored
    assert "Traceback" not in out, out
    for task in (*OUTSIDE, IN_SETUP):
        # the retry line names the kind and its cause (issue 27), then the retry
        assert re.search(rf"\[test/{task}\] infra error sandbox_lost \(.+\); retrying", out), out
    assert "[test/kills-itself] infra error" not in out, out
    assert job_resources(job) == [], "a container of the job outlived it"
    rs = assert_one_result_each(job, {(f"test/{t}", 1) for t in (*OUTSIDE, IN_SETUP, "kills-itself")})
    for task in (*OUTSIDE, IN_SETUP):  # the retry's result is the trial's; the lost run aside
        r = rs[(f"test/{task}", 1)]
        assert (r["outcome"], r["reward"], r["error"]) == ("completed", 1.0, None), r
        trial = next(d for d in (job / "trials").iterdir() if task in d.name)
        lost = json.loads((trial / "attempts" / "1" / "result.json").read_text(encoding="utf-8"))
        assert not (trial / "attempts" / "2").exists()
        err = lost["error"]
        assert (lost["outcome"], err["kind"], err["category"], err["phase"]) == (
            "errored",
            "sandbox_lost",
            "infra",
            "setup" if task == IN_SETUP else "agent",
        ), lost
        assert err["detail"]["from_outside"] is True and err["detail"]["oom_killed"] is False
        if task != "removed-outside":
            assert "killed from outside the sandbox (the engine sent signal 9" in err["message"]
            assert err["detail"]["sandbox_exit_code"] == 137
        else:  # the removal kills it first: the engine may still show it, killed
            assert (
                "removed from outside the sandbox" in err["message"]
                or "killed from outside the sandbox" in err["message"]
            ), err
    own = rs[("test/kills-itself", 1)]
    assert (own["outcome"], own["reward"], own["error"]) == ("completed", 0.0, None), own
    s1 = own["steps"][0]
    assert (s1["source"], s1["error"]["kind"], s1["error"]["category"]) == (
        "candidate_error",
        "sandbox_unusable",
        "candidate",
    ), s1
    assert (s1["error"]["detail"]["from_outside"], s1["error"]["detail"]["sandbox_exit_code"]) == (False, 137)
    trial = next(d for d in (job / "trials").iterdir() if "kills-itself" in d.name)
    assert not (trial / "attempts").exists()  # never retried
    assert_clean_leaves_nothing(job, tmp_path)
