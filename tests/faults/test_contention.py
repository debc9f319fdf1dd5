"""Contention (issue #12): two ``cairn resume`` on one job, ``cairn clean`` beside a running
job, three jobs at once sharing one image build."""

from __future__ import annotations

import signal
import threading
import uuid

import pytest

from faultkit import (
    BLOCK_UNTIL_RELEASED,
    MARKER,
    Proc,
    assert_clean_leaves_nothing,
    assert_one_result_each,
    block_template,
    cairn,
    job_resources,
    need,
    release_sandboxes,
    rewards,
    three_step_task,
    wait_for_sandboxes_holding,
)
from taskgen import StepSpec, reward_if, write_task

pytestmark = [pytest.mark.faults, pytest.mark.slow]

CLEAN1 = {("test/three", 1): ("completed", 1.0, [1.0, 1.0, 1.0])}


def blocking_task(root):
    """The 3-step task whose step ``a`` agent blocks (marker, then wait) under FAULT_BLOCK=1:
    the job is certainly still running while the other process acts, however slow the machine
    (a step that merely sleeps may be over before a second cairn has even started)."""
    steps = [
        StepSpec(
            s,
            solve=(BLOCK_UNTIL_RELEASED if s == "a" else "") + f"echo {s} >> /app/log\n",
            test=reward_if(f"grep -qx {s} /app/log"),
        )
        for s in ("a", "b", "c")
    ]
    task = write_task(root, "three", steps=steps)
    block_template(task)
    return task


@pytest.mark.local
def test_a_second_resume_of_a_running_job_exits_2_and_touches_nothing(tmp_path):
    need("local")
    task = blocking_task(tmp_path / "tasks")
    job = tmp_path / "jobs" / "twice"
    run = Proc(
        "run",
        "-p",
        str(task),
        "-e",
        "local",
        "--jobs-dir",
        "jobs",
        "--job-name",
        "twice",
        cwd=tmp_path,
        FAULT_BLOCK="1",
    )
    try:
        wait_for_sandboxes_holding(job, MARKER, 1, proc=run)
        run.signal(signal.SIGKILL)
        run.finish()
    finally:
        run.kill()
    assert_clean_leaves_nothing(job, tmp_path)  # so the marker below is the resume's own
    first = Proc("resume", str(job), cwd=tmp_path, FAULT_BLOCK="1")
    try:
        wait_for_sandboxes_holding(job, MARKER, 1, proc=first)  # blocked in step a's agent
        files = {p: p.read_bytes() for p in job.rglob("*") if p.is_file()}
        second = cairn("resume", str(job), cwd=tmp_path)
        assert second.returncode == 2, second.stdout + second.stderr
        assert "already running" in second.stderr and "Traceback" not in second.stderr
        assert {p: p.read_bytes() for p in job.rglob("*") if p.is_file()} == files
        first.signal(signal.SIGTERM)  # the blocked resume is cancelled …
        assert first.finish() == 1, first.output
    finally:
        first.kill()
    assert job_resources(job) == []
    last = cairn("resume", str(job), cwd=tmp_path, FAULT_BLOCK=None)  # … and the next completes
    assert last.returncode == 0, last.stdout + last.stderr
    assert last.stdout.count("PASS reward=1.00") == 1
    assert rewards(assert_one_result_each(job, set(CLEAN1))) == CLEAN1
    assert_clean_leaves_nothing(job, tmp_path)


@pytest.mark.docker
def test_clean_while_another_job_runs_touches_nothing_of_it(tmp_path):
    need("docker")
    task = blocking_task(tmp_path / "tasks")
    live = tmp_path / "jobs" / "live"
    run = Proc(
        "run",
        "-p",
        str(task),
        "-e",
        "docker",
        "--jobs-dir",
        "jobs",
        "--job-name",
        "live",
        cwd=tmp_path,
        FAULT_BLOCK="1",
    )
    try:
        wait_for_sandboxes_holding(live, MARKER, 1, proc=run)  # blocked in step a's agent
        before = job_resources(live)
        assert before, "the live job has a container"
        res = cairn("clean", cwd=tmp_path)  # every job: the live one must be recognised
        assert res.returncode in (0, 1), res.stdout + res.stderr  # 1: someone else's removal
        assert "Traceback" not in res.stdout + res.stderr
        assert job_resources(live) == before
        assert "(job running)" in res.stdout
        assert release_sandboxes(live) == 1
        assert run.finish() == 0, run.output
    finally:
        run.kill()
    assert rewards(assert_one_result_each(live, set(CLEAN1))) == CLEAN1
    assert job_resources(live) == []


@pytest.mark.docker
def test_three_jobs_at_once_share_one_image_build(tmp_path):
    need("docker")
    import docker

    marker = uuid.uuid4().hex
    task = three_step_task(
        tmp_path / "tasks",
        dockerfile=f"FROM debian:bookworm-slim\nRUN echo {marker} > /built\nWORKDIR /app\n",
    )
    client = docker.from_env(timeout=120)
    # watched live: the engine keeps only its last 256 events, a busy engine overwrites them
    stream = client.events(decode=True, filters={"type": "image"})
    seen: list[dict] = []
    watcher = threading.Thread(target=lambda: seen.extend(stream), daemon=True)
    watcher.start()
    images: set[str] = set()
    runs = [
        Proc(
            "run",
            "-p",
            str(task),
            "-e",
            "docker",
            "--jobs-dir",
            "jobs",
            "--job-name",
            f"share{i}",
            cwd=tmp_path,
        )
        for i in range(3)
    ]
    try:
        codes = [r.finish(timeout=400) for r in runs]
        assert codes == [0, 0, 0], "\n---\n".join(r.output for r in runs)
        stream.close()
        watcher.join(10)
        events = [e for e in seen if e.get("Action") == "tag"]
        images = set()
        for i in range(3):
            (r,) = assert_one_result_each(tmp_path / "jobs" / f"share{i}", set(CLEAN1)).values()
            images.add(r["image_id"])
        assert len(images) == 1, images  # all three jobs ran on one image
        tags = [e for e in events if (e.get("Actor") or {}).get("ID") in images]
        assert len(tags) == 1, tags  # built (and tagged) once, reused by the other two
        for i in range(3):
            job = tmp_path / "jobs" / f"share{i}"
            assert rewards(assert_one_result_each(job, set(CLEAN1))) == CLEAN1
            assert job_resources(job) == []
            assert_clean_leaves_nothing(job, tmp_path)
    finally:
        for r in runs:
            r.kill()
        try:
            for image in images:
                client.images.remove(image, force=True)
        except docker.errors.APIError:
            pass
        client.close()
