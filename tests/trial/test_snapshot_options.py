"""``--start-step`` / ``--from`` / ``--snapshot-steps`` checks made before anything starts, and
how replayed steps count (issue 17): no sandbox needed."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cairn.errors import UsageError
from cairn.job.run import run_job
from cairn.plan import JobConfig, trial_id
from cairn.results.model import AgentRef, Outcome, StepResult, StepSource, TaskRef, TrialResult
from cairn.results.summary import summarize_job
from taskgen import StepSpec, write_task


def cfg(tmp_path, task, **kw) -> JobConfig:
    return JobConfig(paths=(task,), backend="local", jobs_dir=tmp_path / "jobs", job_name="j", **kw)


def test_usage_errors_before_anything_starts(tmp_path):
    task = write_task(tmp_path, "nosol", steps=[StepSpec("a", solve=None), StepSpec("b")])
    with pytest.raises(UsageError, match="no solution/solve.sh"):
        run_job(cfg(tmp_path, task, start_step="b"))
    with pytest.raises(UsageError, match="has no such step"):
        run_job(cfg(tmp_path, task, start_step="zzz"))
    with pytest.raises(UsageError, match="--from needs --start-step"):
        run_job(cfg(tmp_path, task, from_trial=tmp_path))
    with pytest.raises(UsageError, match="not a finished trial folder"):
        run_job(cfg(tmp_path, task, start_step="b", from_trial=tmp_path / "nothing"))
    assert not list((tmp_path / "jobs").rglob("result.json"))


def test_start_step_and_fork_change_the_trial_id_only_when_set():
    base = trial_id("t", "h", "oracle", {}, None, "docker", 1)
    assert trial_id("t", "h", "oracle", {}, None, "docker", 1, start_step=None) == base
    replay = trial_id("t", "h", "oracle", {}, None, "docker", 1, start_step="b")
    fork = trial_id("t", "h", "oracle", {}, None, "docker", 1, start_step="b", fork_from="x")
    assert len({base, replay, fork}) == 3


def test_replayed_steps_are_left_out_of_the_funnel():
    now = datetime.now(UTC)
    rows = [
        StepResult(
            index=1, name="a", source=StepSource.ORACLE, reward=1.0, rewards={"reward": 1.0}, passed=True
        ),
        StepResult(
            index=2,
            name="b",
            source=StepSource.VERIFIER,
            reward=0.0,
            rewards={"reward": 0.0},
            agent_exit="ok",
        ),
    ]
    r = TrialResult(
        trial_id="x",
        trial_name="t__1__x",
        task=TaskRef(name="t", content_hash="h"),
        agent=AgentRef(name="nop"),
        backend="docker",
        outcome=Outcome.COMPLETED,
        reward=0.0,
        steps_total=1,
        steps_run=1,
        started_at=now,
        finished_at=now,
        steps=rows,
        start_step="b",
    )
    (task,) = summarize_job([r], {"t": ["a", "b"]}).tasks
    assert [(s.name, s.n_reached, s.n_replayed, s.mean_reward) for s in task.steps] == [
        ("a", 0, 1, None),
        ("b", 1, 0, 0.0),
    ]
