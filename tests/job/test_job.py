"""Jobs through the Python API on Docker (design §6, §7, §8; issue 6): streaming results,
infra retries with earlier attempts kept, the job's stop rules, invalid tasks, changed tasks
on resume, summary.json after each trial.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from cairn.errors import UsageError
from cairn.events import JobObserver
from cairn.job.run import iter_trials, read_job, resume_job, run_job
from cairn.plan import JobConfig
from taskgen import reward_if, write_task

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(autouse=True)
def _docker():
    from testbed import backend_available

    if not backend_available("docker"):
        pytest.skip("no Docker engine")


def config(tmp_path: Path, *paths: Path, **kw) -> JobConfig:
    kw.setdefault("job_name", "job")
    return JobConfig(paths=tuple(paths), backend="docker", jobs_dir=tmp_path / "jobs", **kw)


def test_iter_trials_yields_each_result_as_it_finishes(tmp_path):
    ds = tmp_path / "ds"
    write_task(ds, "slow", solve="sleep 8; touch /app/done\n", test=reward_if("test -f /app/done"))
    write_task(ds, "fast", solve="touch /app/done\n", test=reward_if("test -f /app/done"))
    job = tmp_path / "jobs" / "job"
    seen: list[tuple[str, float, bool, int]] = []

    async def training_loop():
        async for r in iter_trials(config(tmp_path, ds, n_concurrent=2)):
            slow_done = any(job.glob("trials/test-slow__*/result.json"))
            summary = json.loads((job / "summary.json").read_text())
            seen.append((r.task.name, r.reward, slow_done, summary["n_trials"]))

    asyncio.run(training_loop())
    assert [s[0] for s in seen] == ["test/fast", "test/slow"]
    assert seen[0][1] == 1.0 and seen[1][1] == 1.0
    assert seen[0][2] is False  # the fast result arrived while the slow trial still ran
    assert [s[3] for s in seen] == [1, 2]  # summary.json rewritten after each trial


def test_invalid_task_is_config_error_and_others_run(tmp_path):
    ds = tmp_path / "ds"
    write_task(ds, "good")
    bad = write_task(ds, "bad")
    (bad / "tests" / "test.sh").unlink()  # single-step task without its verifier
    result = run_job(config(tmp_path, ds))
    by_name = {r.task.name: r for r in result.results}
    assert by_name["test/good"].outcome.value == "completed" and by_name["test/good"].reward == 1
    err = by_name["test/bad"].error
    assert by_name["test/bad"].outcome.value == "errored"
    assert err.kind.value == "config_error" and err.category.value == "task"
    assert "test.sh" in err.message
    assert result.exit_code == 1
    assert result.summary.errors == {"config_error": 1}


def test_infra_error_is_retried_and_earlier_attempt_kept(tmp_path):
    task = write_task(tmp_path / "tasks", "t", solve="touch /app/done\n", test=reward_if("test -f /app/done"))
    marker = tmp_path / "setup-failed-once"
    result = run_job(
        config(
            tmp_path,
            task,
            agent="job_agents:FlakySetupAgent",
            agent_kwargs={"marker": str(marker)},
            retry_backoff_sec=0.1,
        )
    )
    (r,) = result.results
    assert r.outcome.value == "completed" and r.reward == 1.0 and marker.exists()
    trial = result.job_dir / "trials" / r.trial_name
    first = json.loads((trial / "attempts" / "1" / "result.json").read_text())
    assert first["outcome"] == "errored"
    assert first["error"]["kind"] == "agent_setup_failed"
    assert first["error"]["category"] == "infra"
    assert "simulated" in first["error"]["message"]
    assert not (trial / "attempts" / "2").exists()
    assert result.exit_code == 0


def test_infra_error_without_retries_stays_errored_and_resume_reruns_it(tmp_path):
    task = write_task(tmp_path / "tasks", "t")
    marker = tmp_path / "marker"
    cfg = config(
        tmp_path,
        task,
        agent="job_agents:FlakySetupAgent",
        agent_kwargs={"marker": str(marker)},
        max_retries=0,
    )
    (r,) = run_job(cfg).results
    assert r.error.kind.value == "agent_setup_failed" and r.outcome.value == "errored"
    resumed = resume_job(tmp_path / "jobs" / "job")  # infra errors re-run on resume
    (r2,) = resumed.results
    assert r2.outcome.value == "completed" and r2.trial_id == r.trial_id
    assert resumed.exit_code == 0


def test_max_cost_stops_starting_trials(tmp_path):
    task = write_task(tmp_path / "tasks", "t")
    result = run_job(
        config(tmp_path, task, agent="job_agents:CostlyAgent", attempts=4, n_concurrent=1, max_cost_usd=1.5)
    )
    outcomes = sorted((r.attempt, r.outcome.value) for r in result.results)
    assert outcomes == [(1, "completed"), (2, "completed"), (3, "cancelled"), (4, "cancelled")]
    assert result.stopped_by == "max_cost"
    meta = json.loads((result.job_dir / "job.json").read_text())
    assert meta["stopped_by"] == "max_cost"
    assert result.summary.cost_usd == pytest.approx(2.0)
    assert result.exit_code == 1


def test_model_auth_failure_stops_the_job(tmp_path):
    task = write_task(tmp_path / "tasks", "t")
    result = run_job(config(tmp_path, task, agent="job_agents:AuthFailAgent", attempts=3, n_concurrent=1))
    by_attempt = {r.attempt: r for r in result.results}
    assert by_attempt[1].error.kind.value == "model_auth_failed"
    assert [by_attempt[a].outcome.value for a in (2, 3)] == ["cancelled", "cancelled"]
    assert result.stopped_by == "model_auth_failed" and result.exit_code == 1
    # a resume (say, with the key fixed) re-runs the auth failure and the cancelled trials
    again = resume_job(result.job_dir)
    first = result.job_dir / "trials" / by_attempt[1].trial_name
    assert (first / "attempts" / "1" / "result.json").is_file()
    assert again.stopped_by == "model_auth_failed"  # the key is still bad: stopped again


class _Collect(JobObserver):
    """Keeps every event line."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines

    def event(self, event) -> None:
        self.lines.append(event.text)


def test_changed_task_reruns_under_new_id(tmp_path):
    task = write_task(tmp_path / "tasks", "t")
    events: list[str] = []
    first = run_job(config(tmp_path, task))
    (old,) = first.results
    (task / "tests" / "test.sh").write_text("#!/bin/bash\necho 0.5 > /logs/verifier/reward.txt\n")
    again = resume_job(tmp_path / "jobs" / "job", observer=_Collect(events))
    (new,) = again.results
    assert new.trial_id != old.trial_id and new.task.content_hash != old.task.content_hash
    assert new.reward == 0.5
    assert any(
        f"task changed since the last run (content {old.task.content_hash[:12]} → "
        f"{new.task.content_hash[:12]})" in e
        for e in events
    )
    trials = sorted(p.name for p in (tmp_path / "jobs" / "job" / "trials").iterdir())
    assert trials == [new.trial_name]  # one trial per (task, attempt) in the job
    kept = tmp_path / "jobs" / "job" / "trials" / new.trial_name / "attempts" / "1"
    assert json.loads((kept / "result.json").read_text())["trial_id"] == old.trial_id
    assert read_job(tmp_path / "jobs" / "job").summary.n_trials == 1


def test_genuine_scores_never_rerun_and_job_name_clash_refused(tmp_path):
    task = write_task(tmp_path / "tasks", "t")
    first = run_job(config(tmp_path, task))
    path = first.job_dir / "trials" / first.results[0].trial_name / "result.json"
    before, st = path.read_bytes(), path.stat()
    resume_job(first.job_dir, retry_errors=True)
    assert path.read_bytes() == before
    # never rewritten: an atomic rewrite (temp file + os.replace) would be a new inode
    assert (path.stat().st_ino, path.stat().st_mtime_ns) == (st.st_ino, st.st_mtime_ns)
    with pytest.raises(UsageError, match="exists"):
        run_job(config(tmp_path, task))  # same job name, no resume


def test_resume_refuses_another_backend(tmp_path):
    task = write_task(tmp_path / "tasks", "t")
    run_job(config(tmp_path, task))
    with pytest.raises(UsageError, match="backend"):
        resume_job(tmp_path / "jobs" / "job", overrides={"backend": "local"})


def test_training_loop_that_stops_early_cancels_the_rest(tmp_path):
    import contextlib

    import docker

    task = write_task(tmp_path / "tasks", "t", test="sleep 3; echo 1 > /logs/verifier/reward.txt\n")
    # all six start together, so the cancellation finds them running (a cancellation that
    # lands inside container creation is test_job_cancel.py's reported backend bug)
    cfg = config(tmp_path, task, attempts=6, n_concurrent=6, agent="nop")
    job = tmp_path / "jobs" / "job"

    async def loop():
        async with contextlib.aclosing(iter_trials(cfg)) as trials:
            async for r in trials:
                return r

    first = asyncio.run(loop())
    assert first.outcome.value == "completed"
    rs = read_job(job).results
    assert len(rs) == 6  # every trial has a result: the rest were cancelled, none left running
    assert any(r.outcome.value == "cancelled" for r in rs)
    client = docker.from_env()
    try:
        left = client.api.containers(all=True, filters={"label": f"cairn.job_dir={job}"})
    finally:
        client.close()
    assert left == []
    assert json.loads((job / "job.json").read_text())["stopped_by"] == "interrupted"


def test_an_early_stopping_consumer_waits_for_slow_container_removals(tmp_path, monkeypatch):
    """Issue #12: on a loaded engine a forced removal is answered before the container is gone
    (here: the first ``remove`` of each container fails with 409 "removal in progress", and
    the engine removes it only once cairn has looked again and found it still there, as a busy
    dockerd does). Closing iter_trials must not return before every container of the job is
    gone."""
    import contextlib
    import threading

    import docker
    import docker.errors
    from docker.api.client import APIClient

    real_remove = APIClient.remove_container
    real_inspect = APIClient.inspect_container
    refused: dict[str, threading.Event] = {}  # container → "cairn looked again after the 409"
    lock = threading.Lock()
    removers: list[threading.Thread] = []

    def slow_remove(self, container, *args, **kwargs):
        with lock:
            first = container not in refused
            looked = refused.setdefault(container, threading.Event())
        if not first:
            return real_remove(self, container, *args, **kwargs)

        def later():  # the engine's own removal, done once cairn is waiting for it (bounded)
            looked.wait(120)
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                real_remove(self, container, *args, **kwargs)

        t = threading.Thread(target=later, daemon=True)
        removers.append(t)
        t.start()
        raise docker.errors.APIError(
            "conflict", explanation=f"removal of container {container} is already in progress"
        )

    def watched_inspect(self, container, *args, **kwargs):
        found = real_inspect(self, container, *args, **kwargs)  # still there: cairn sees it
        with lock:
            looked = refused.get(container)
        if looked is not None:
            looked.set()
        return found

    monkeypatch.setattr(APIClient, "remove_container", slow_remove)
    monkeypatch.setattr(APIClient, "inspect_container", watched_inspect)
    task = write_task(tmp_path / "tasks", "t", test="sleep 2; echo 1 > /logs/verifier/reward.txt\n")
    cfg = config(tmp_path, task, attempts=4, n_concurrent=4, agent="nop")
    job = tmp_path / "jobs" / "job"

    async def loop():
        async with contextlib.aclosing(iter_trials(cfg)) as trials:
            async for r in trials:
                return r

    first = asyncio.run(loop())
    client = docker.from_env()
    try:
        left = client.api.containers(all=True, filters={"label": f"cairn.job_dir={job}"})
    finally:
        client.close()
    for looked in refused.values():  # a removal cairn never waited for is done now
        looked.set()
    for t in removers:
        t.join(60)
    assert first.outcome.value == "completed"
    assert [c["Names"] for c in left] == []
    assert len(read_job(job).results) == 4
