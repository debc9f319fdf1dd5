"""``cairn regrade`` of a judge verifier (issue 22): the new verification's judge spend
(``judge_usage.json``) is recorded apart from the agent's and counts against
``--max-cost-usd``; trials past the limit are copied unchanged."""

from __future__ import annotations

import json

import pytest

from cairn.job.regrade import regrade_job
from cairn.job.run import read_job, run_job
from cairn.plan import JobConfig
from cairn.results.model import Tokens
from cairncli import run_cairn
from taskgen import write_task
from testbed import backend_available


def _verifier(prompt: int, cost: float) -> str:
    usage = json.dumps(
        {"model": "judge-x", "calls": 1, "prompt_tokens": prompt, "completion_tokens": 3, "cost_usd": cost}
    )
    return f"echo '{usage}' > /logs/verifier/judge_usage.json\necho 1 > /logs/verifier/reward.txt\n"


@pytest.mark.docker
@pytest.mark.slow
def test_regrade_records_judge_spend_and_stops_at_max_cost(tmp_path):
    if not backend_available("docker"):
        pytest.skip("no Docker engine")
    task = write_task(tmp_path / "tasks", "judged", test=_verifier(9, 1.0))
    job = run_job(
        JobConfig(
            paths=(task,),
            backend="docker",
            jobs_dir=tmp_path / "jobs",
            job_name=f"rj-{tmp_path.name[-10:]}",
            agent="nop",
            attempts=3,
            n_concurrent=1,
            snapshot_steps=True,
        )
    )
    assert job.summary.judge is not None and job.summary.judge.cost_usd == 3.0
    # the task's judge changed: cheaper per call; the regrade may spend 1.5 USD
    (task / "tests" / "test.sh").write_text("#!/bin/bash\n" + _verifier(7, 0.75))
    out = regrade_job(
        job.job_dir, paths=[task], job_name=f"rj-new-{tmp_path.name[-10:]}", n_concurrent=1, max_cost_usd=1.5
    )
    assert out.stopped_by == "max_cost" and out.judge_cost_usd == 1.5
    derived = read_job(out.job_dir)
    by_status: dict[str, list] = {}
    for r in derived.results:
        by_status.setdefault(r.regrade.status, []).append(r)
    regraded, copied = by_status["regraded"], by_status["not_regradable"]
    assert len(regraded) == 2 and len(copied) == 1
    for r in regraded:  # the new judge's spend, apart from the (zero) agent spend
        step = r.steps[0]
        assert step.judge is not None and step.judge.tokens == Tokens(prompt=7, completion=3)
        assert step.judge.cost_usd == 0.75 and step.judge.models == ["judge-x"]
        assert r.judge is not None and r.judge.cost_usd == 0.75
        assert r.cost_usd is None  # nop spent nothing; a regrade runs no agent
        usage = json.loads(
            (
                out.job_dir / "trials" / r.trial_name / "steps" / "01-main" / "verifier" / "judge_usage.json"
            ).read_text()
        )
        assert usage["prompt_tokens"] == 7
    assert "--max-cost-usd 1.5 reached" in copied[0].regrade.message
    assert copied[0].judge is not None and copied[0].judge.cost_usd == 1.0  # as recorded
    assert derived.summary.judge is not None and derived.summary.judge.cost_usd == 2.5
    assert derived.summary.judge.tokens.prompt == 7 + 7 + 9


def test_regrade_cli_refuses_a_bad_max_cost(tmp_path):
    proc = run_cairn("regrade", str(tmp_path), "--max-cost-usd", "0", timeout=120)
    assert proc.returncode == 2 and "--max-cost-usd must be a positive" in proc.stderr


@pytest.mark.docker
@pytest.mark.slow
def test_regrade_gives_the_judge_its_verifier_opening(tmp_path, monkeypatch):
    """A ``no-network`` judge task regraded from its snapshot: the regrade's sandbox opens the
    judge's host for the verifier (with the run's --add-host), so the new verification
    reaches the scripted judge (reward 1, judge tokens recorded) and nothing else."""
    if not backend_available("docker"):
        pytest.skip("no Docker engine")
    from judge_scripts import JUDGE_SERVER, judge_task
    from nethosts import host_containers

    monkeypatch.setenv("CAIRN_TEST_JUDGE_KEY", "sk-judge-test-123")
    task = judge_task(tmp_path / "tasks")
    with host_containers("judge.test", "other.test", server=JUDGE_SERVER) as addrs:
        job = run_job(
            JobConfig(
                paths=(task,),
                backend="docker",
                jobs_dir=tmp_path / "jobs",
                job_name=f"rjn-{tmp_path.name[-10:]}",
                agent="nop",
                snapshot_steps=True,
                add_hosts=dict(addrs),
            )
        )
        (first,) = job.results
        assert first.reward == 1.0, first.error
        out = regrade_job(job.job_dir, job_name=f"rjn-new-{tmp_path.name[-10:]}")
    (r,) = read_job(out.job_dir).results
    assert r.regrade.status == "regraded" and r.reward == 1.0, r.regrade
    grade = json.loads(
        (out.job_dir / "trials" / r.trial_name / "steps" / "01-main" / "verifier" / "grade.json").read_text()
    )
    assert grade["judge"] == "PASS" and grade["other"] != "reached"
    assert r.steps[0].judge is not None and r.steps[0].judge.tokens.prompt == 321
    assert out.judge_cost_usd == 0.25
