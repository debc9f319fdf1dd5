"""Sandbox removal off a job's critical path, awaited before the job ends (#13, design §12).

In a job, a trial's container is removed after its result.json is written; the job returns
only when every removal has finished, so nothing is left behind. Outside a job, and when a
trial is cancelled, the removal is awaited in place.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest

from cairn.trial.deferred import drain, stop_sandbox
from faultkit import job_resources
from taskgen import reward_if, write_task


def _stopper(log: list[str], delay: float = 0.05):
    async def stop() -> None:
        log.append("stop started")
        await asyncio.sleep(delay)
        log.append("stop done")

    return stop


def test_outside_a_job_the_removal_is_awaited_in_place():
    log: list[str] = []

    async def trial() -> None:
        await stop_sandbox(_stopper(log), cancelled=False, pending=None)
        log.append("result written")

    asyncio.run(trial())
    assert log == ["stop started", "stop done", "result written"]


def test_in_a_job_the_removal_follows_the_result_and_the_job_waits_for_it():
    log: list[str] = []

    async def job() -> None:
        pending: set[asyncio.Task[None]] = set()
        await stop_sandbox(_stopper(log), cancelled=False, pending=pending)
        log.append("result written")
        assert len(pending) == 1
        await drain(pending)
        log.append("job ended")
        assert pending == set()

    asyncio.run(job())
    assert log == ["result written", "stop started", "stop done", "job ended"]


def test_a_cancelled_trial_awaits_its_removal_even_in_a_job():
    log: list[str] = []

    async def job() -> None:
        pending: set[asyncio.Task[None]] = set()
        await stop_sandbox(_stopper(log), cancelled=True, pending=pending)
        log.append("result written")
        assert pending == set()

    asyncio.run(job())
    assert log == ["stop started", "stop done", "result written"]


def test_drain_outlasts_a_cancellation_then_raises_it():
    """Ctrl-C while removals are pending: they still finish, then the cancellation goes on."""
    log: list[str] = []

    async def job() -> None:
        pending: set[asyncio.Task[None]] = set()
        await stop_sandbox(_stopper(log, delay=0.3), cancelled=False, pending=pending)
        waiter = asyncio.ensure_future(drain(pending))
        await asyncio.sleep(0.05)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        log.append("drain returned")

    asyncio.run(job())
    assert log == ["stop started", "stop done", "drain returned"]


@pytest.mark.docker
def test_a_job_removes_every_container_after_writing_each_result(tmp_path):
    """On docker: each trial's container is destroyed after its result.json was written (the
    engine's destroy event is later than the file), and none is left when the job returns."""
    from testbed import backend_available

    if not backend_available("docker"):
        pytest.skip("no docker")
    import docker

    from cairn.job.run import run_job
    from cairn.plan import JobConfig

    name = f"defer-{uuid.uuid4().hex[:8]}"
    task = write_task(
        tmp_path / "tasks", name, solve="touch /app/done\n", test=reward_if("test -f /app/done")
    )
    client = docker.from_env()
    destroyed: dict[str, int] = {}
    stream = client.events(
        decode=True, since=time.time() - 1, filters={"type": "container", "event": "destroy"}
    )

    job_dir = (tmp_path / "jobs" / "job").absolute()

    def listen() -> None:  # the engine is shared: only this job's containers count
        for e in stream:
            attrs = e.get("Actor", {}).get("Attributes", {}) or {}
            if attrs.get("cairn.job_dir") == str(job_dir) and attrs.get("cairn.trial"):
                destroyed[attrs["cairn.trial"]] = int(e["timeNano"])
                if len(destroyed) >= 3:
                    return

    th = threading.Thread(target=listen, daemon=True)
    th.start()
    try:
        result = run_job(
            JobConfig(
                paths=(task,),
                backend="docker",
                jobs_dir=tmp_path / "jobs",
                job_name="job",
                attempts=3,
                n_concurrent=3,
            )
        )
        assert job_resources(job_dir) == [], "the job returned with sandboxes left"
        th.join(30)
    finally:
        stream.close()
        client.close()
    assert [r.reward for r in result.results] == [1.0, 1.0, 1.0]
    for r in result.results:
        (result_json,) = job_dir.rglob(f"{r.trial_name}/result.json")
        written = result_json.stat().st_mtime_ns
        assert r.trial_id in destroyed, f"no destroy event for {r.trial_id}"
        assert destroyed[r.trial_id] >= written, "the container went before the result"
