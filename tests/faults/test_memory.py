"""Memory limit reached (issue #12): ``memory_mb`` small, the agent (or the verifier)
allocates past it.

An agent killed by the out-of-memory killer is the candidate's outcome: the step is scored
(agent exit ``error``, no infra retry) and the verifier still runs because the sandbox
survives. A verifier killed the same way is the task's error (``reward_missing``, category
task), never retried as infra.
"""

from __future__ import annotations

import pytest

from faultkit import assert_clean_leaves_nothing, assert_one_result_each, cairn, need
from taskgen import reward_if, write_task

pytestmark = [pytest.mark.faults, pytest.mark.docker, pytest.mark.slow]

HOG = "v=$(head -c 300m /dev/zero | tr '\\0' a)\n"  # bash holds 300 MB: the OOM killer's pick


def test_out_of_memory_in_the_agent_and_in_the_verifier(tmp_path):
    need("docker")
    ds = tmp_path / "ds"
    agent = write_task(ds, "agent-oom", solve="echo ok > /app/before\n" + HOG
                       + "echo after > /app/after\n", test=reward_if("test -f /app/before"))
    verifier = write_task(ds, "verifier-oom", solve="echo ok > /app/before\n",
                          test=HOG + "echo 1 > /logs/verifier/reward.txt\n")
    for t in (agent, verifier):
        with (t / "task.toml").open("a", encoding="utf-8") as f:
            f.write("memory_mb = 64\n")  # ends [environment], the last table
    res = cairn("run", "-p", str(ds), "-e", "docker", "--jobs-dir", "jobs", "--job-name", "oom",
                cwd=tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr  # one trial errored (docs/cli.md)
    assert "retrying" not in res.stdout + res.stderr  # neither is an infra error
    job = tmp_path / "jobs" / "oom"
    rs = assert_one_result_each(job, {("test/agent-oom", 1), ("test/verifier-oom", 1)})
    a, v = rs[("test/agent-oom", 1)], rs[("test/verifier-oom", 1)]
    assert (a["outcome"], a["reward"], a["error"]) == ("completed", 1.0, None)
    assert a["steps"][0]["agent_exit"] == "error" and a["steps"][0]["verifier_exit_code"] == 0
    assert v["outcome"] == "errored" and v["reward"] is None
    assert (v["error"]["kind"], v["error"]["category"]) == ("reward_missing", "task")
    assert v["steps"][0]["verifier_exit_code"] == 137  # SIGKILL by the OOM killer
    assert_clean_leaves_nothing(job, tmp_path)
    again = cairn("resume", str(job), cwd=tmp_path)  # genuine outcomes are never re-run
    assert again.returncode == 1 and "PASS" not in again.stdout
    assert assert_one_result_each(job, set(rs)) == rs
