"""A real engine restart mid-job, under load (issue #29).

The machine's shared engine is never touched: the test starts a ``dockerd`` of its own
(tests/helpers/owndockerd.py: its own socket, data root, exec root, pid file, address pool and
network namespace, no iptables rules: a second dockerd in the host's namespace deletes the
host's docker0 when it starts again),
copies the base image into it, points cairn at it with ``DOCKER_HOST`` and
kills that daemon while trials run, beside CPU-heavy processes, then starts it again. Running
trials lose their sandbox (``sandbox_lost``, infra), wait for the engine, are retried, and every
trial ends scored exactly once with nothing of the job left on the engine.
"""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

import owndockerd
from faultkit import (
    Proc,
    assert_clean_leaves_nothing,
    assert_one_result_each,
    job_resources,
    rewards,
    three_step_task,
    wait_for_sandboxes_holding,
)

pytestmark = [pytest.mark.faults, pytest.mark.docker, pytest.mark.slow]

N = 8
CLEAN = {("test/three", a): ("completed", 1.0, [1.0, 1.0, 1.0]) for a in range(1, N + 1)}


@pytest.fixture
def engine(monkeypatch):
    why = owndockerd.available()
    if why:
        pytest.skip(why)
    d = owndockerd.OwnDockerd(owndockerd.make_root())
    try:
        d.start()
        d.load_images()
        monkeypatch.setenv("DOCKER_HOST", d.host)  # cairn, its subprocesses and the checks
        yield d
    finally:
        d.close()


@pytest.fixture
def cpu_load():
    """Two CPU-bound processes for the test's duration (ended by pid)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait(30)


@pytest.mark.parametrize(
    ("sig", "when"),
    [(signal.SIGKILL, "step"), (signal.SIGTERM, "step"), (signal.SIGKILL, "start")],
    ids=["crash-in-steps", "restart-in-steps", "crash-as-trials-start"],
)
def test_engine_restarted_mid_job_under_load_scores_every_trial_once(tmp_path, engine, cpu_load, sig, when):
    task = three_step_task(tmp_path / "tasks", pause=2)
    job = tmp_path / "jobs" / "restart"
    run = Proc(
        "run",
        "-p",
        str(task),
        "-e",
        "docker",
        "-k",
        str(N),
        "-n",
        "4",
        "--jobs-dir",
        "jobs",
        "--job-name",
        "restart",
        cwd=tmp_path,
        CAIRN_ENGINE_WAIT_SEC="120",
    )
    try:
        if when == "step":
            run.wait_line(r"environment: docker, ready", timeout=300)
            # inside a step: a trial's agent has written its step's line into /app/log
            wait_for_sandboxes_holding(job, "/app/log", 1, proc=run, timeout=300)
        else:  # while the first trials look up their image and create their containers
            run.wait_line(r"job restart: started", timeout=300)
        engine.stop(sig)  # the real engine goes away while trials run
        # and stays away until the job has seen it gone (a trial waits for it, or retries)
        run.wait_line(r"the Docker engine does not answer|infra error", timeout=300)
        engine.start()  # and comes back with its state
        rc = run.finish(timeout=900)
    finally:
        run.kill()
    out = run.output
    assert rc == 0, out
    assert "Traceback" not in out and "ExceptionGroup" not in out, out
    assert "retrying" in out, out
    assert rewards(assert_one_result_each(job, set(CLEAN))) == CLEAN
    assert job_resources(job) == [], "the job returned with sandboxes left"
    assert_clean_leaves_nothing(job, tmp_path)
