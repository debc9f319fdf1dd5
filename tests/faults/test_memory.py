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
    agent = write_task(
        ds,
        "agent-oom",
        solve="echo ok > /app/before\n" + HOG + "echo after > /app/after\n",
        test=reward_if("test -f /app/before"),
    )
    verifier = write_task(
        ds, "verifier-oom", solve="echo ok > /app/before\n", test=HOG + "echo 1 > /logs/verifier/reward.txt\n"
    )
    for t in (agent, verifier):
        with (t / "task.toml").open("a", encoding="utf-8") as f:
            f.write("memory_mb = 64\n")  # ends [environment], the last table
    res = cairn("run", "-p", str(ds), "-e", "docker", "--jobs-dir", "jobs", "--job-name", "oom", cwd=tmp_path)
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


# The sandbox itself dies of out-of-memory: the phase makes its init (PID 1, docker-init) the
# OOM killer's pick (oom_score_adj 1000, which any process may raise) and then allocates past
# memory_mb in five children of 20 MB each, so no single child outweighs the init. The whole
# container goes with its init.
KILL_SANDBOX = (
    "echo 1000 > /proc/1/oom_score_adj\n"
    "for i in 1 2 3 4 5; do (v=$(head -c 20m /dev/zero | tr '\\0' a); sleep 60) & done\n"
    "wait\n"
)


def test_a_sandbox_killed_by_the_out_of_memory_killer(tmp_path):
    need("docker")
    from faultkit import job_resources
    from taskgen import StepSpec

    ds = tmp_path / "ds"
    # in step 1's agent phase: the agent's doing → sandbox_unusable (candidate), scored 0, the
    # trial stops; never an infra retry
    agent = write_task(
        ds,
        "agent-kills",
        steps=[
            StepSpec(
                "a", solve="echo ok > /app/before\n" + KILL_SANDBOX, test=reward_if("test -f /app/before")
            ),
            StepSpec("b", solve="echo b > /app/b\n", test=reward_if("test -f /app/b")),
        ],
    )
    # in the verifier: the task's error (reward_missing), never retried
    verifier = write_task(
        ds,
        "verifier-kills",
        solve="echo ok > /app/before\n",
        test=KILL_SANDBOX + "echo 1 > /logs/verifier/reward.txt\n",
    )
    for t in (agent, verifier):
        toml = t / "task.toml"
        toml.write_text(
            toml.read_text(encoding="utf-8").replace("[environment]\n", "[environment]\nmemory_mb = 64\n", 1),
            encoding="utf-8",
        )
    res = cairn(
        "run", "-p", str(ds), "-e", "docker", "--jobs-dir", "jobs", "--job-name", "oomkill", cwd=tmp_path
    )
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert "retrying" not in out and "Traceback" not in out, out
    job = tmp_path / "jobs" / "oomkill"
    assert job_resources(job) == [], "a container of the job outlived it"
    rs = assert_one_result_each(job, {("test/agent-kills", 1), ("test/verifier-kills", 1)})
    a, v = rs[("test/agent-kills", 1)], rs[("test/verifier-kills", 1)]
    assert (a["outcome"], a["reward"], a["error"]) == ("stopped", 0.0, None), a
    s1 = a["steps"][0]
    assert (s1["source"], s1["error"]["kind"], s1["error"]["category"]) == (
        "candidate_error",
        "sandbox_unusable",
        "candidate",
    )
    assert "the sandbox ran out of memory (memory_mb = 64)" in s1["error"]["message"]
    assert (
        s1["error"]["detail"]["oom_killed"],
        s1["error"]["detail"]["sandbox_exit_code"],
        s1["error"]["detail"]["from_outside"],
    ) == (True, 137, False)  # the agent's own
    assert a["steps"][1]["source"] == "not-run"
    assert (v["outcome"], v["reward"]) == ("errored", None)
    assert (v["error"]["kind"], v["error"]["category"]) == ("reward_missing", "task")
    assert "the sandbox ran out of memory (memory_mb = 64)" in v["error"]["message"]
    assert v["error"]["detail"]["oom_killed"] is True
    assert v["error"]["detail"]["from_outside"] is False
    assert_clean_leaves_nothing(job, tmp_path)
    again = cairn("resume", str(job), cwd=tmp_path)  # genuine outcomes are never re-run
    assert again.returncode == 1, again.stdout + again.stderr
    assert assert_one_result_each(job, set(rs)) == rs
