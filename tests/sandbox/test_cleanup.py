"""Ownership and cleanup (design §3 "Ownership and cleanup", issue 3): job locks, left-over
detection, and ``cairn clean`` against real containers."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from cairn.lock import JobLock, JobLockedError, is_locked, owner_alive, owner_token
from cairn.sandbox.cleanup import leftover_reason
from cairncli import run_cairn

SRC = str(Path(__file__).resolve().parents[2] / "src")


# ---- locks and owners (no Docker) ---------------------------------------------------------
_HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from cairn.lock import JobLock
    lock = JobLock(Path(sys.argv[1]))
    lock.acquire()
    print("held", flush=True)
    time.sleep(600)
""")


def _spawn(code: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _wait_line(proc: subprocess.Popen, timeout: float = 90) -> str:
    import select

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r, _, _ = select.select([proc.stdout], [], [], 0.5)
        if r:
            line = proc.stdout.readline()
            if line:
                return line.strip()
        if proc.poll() is not None:
            raise AssertionError(f"helper exited {proc.returncode}: {proc.stderr.read()}")
    raise AssertionError("helper did not answer")


def _kill9(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)


def test_job_lock_is_exclusive_and_freed_by_sigkill(tmp_path):
    job = tmp_path / "job"
    assert not is_locked(job)
    holder = _spawn(_HOLDER, str(job))
    try:
        assert _wait_line(holder) == "held"
        assert is_locked(job)
        with pytest.raises(JobLockedError, match="already running"):
            JobLock(job).acquire()
    finally:
        _kill9(holder)
    assert (job / "lock").exists()  # presence means nothing
    assert not is_locked(job)
    with JobLock(job) as lock:
        assert lock.held and is_locked(job)
        with pytest.raises(JobLockedError, match=r"is already running \(pid \d+\)"):
            JobLock(job, wait_sec=0).acquire()
    assert not is_locked(job)


def test_owner_token_identifies_live_and_dead_processes():
    assert owner_alive(owner_token()) is True
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    token = owner_token(proc.pid)
    assert owner_alive(token) is True
    _kill9(proc)
    assert owner_alive(token) is False
    host, pid, ticks = owner_token().rsplit(":", 2)
    assert owner_alive(f"{host}:{pid}:{int(ticks) + 1}") is False  # pid reused by another
    assert owner_alive(f"some-other-host:{pid}:{ticks}") is None
    assert owner_alive("garbage") is None


def test_leftover_rules(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    dead = owner_token(proc.pid).rsplit(":", 1)[0] + ":1"
    live = owner_token()
    running_job = tmp_path / "running"
    finished_job = tmp_path / "finished"
    finished_job.mkdir()
    with JobLock(running_job):
        assert leftover_reason({"cairn.owner": dead}) is None
        assert leftover_reason({"cairn.owner": live}) == "owner running"
        assert leftover_reason({"cairn.owner": "elsewhere:1:1"}) == "owner unknown"
        assert leftover_reason({"cairn.owner": "elsewhere:1:1", "cairn.job_dir": str(finished_job)}) is None
        assert leftover_reason({"cairn.owner": dead, "cairn.job_dir": str(running_job)}) == "job running"
        assert (
            leftover_reason({"cairn.owner": dead, "cairn.job_dir": str(running_job)}, own_job_dir=running_job)
            is None
        )
        assert leftover_reason({"cairn.owner": dead, "cairn.job_dir": str(tmp_path / "gone")}) is None


# ---- against Docker -----------------------------------------------------------------------
_SANDBOX_OWNER = textwrap.dedent("""
    import asyncio, sys
    from pathlib import Path
    from cairn.lock import JobLock
    from cairn.sandbox.base import NetworkMode, SandboxSpec
    from cairn.sandbox.docker.backend import DockerSandbox
    job_dir, job_id, hold = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "lock"
    if hold:
        JobLock(job_dir).acquire()
    async def main():
        sb = DockerSandbox(SandboxSpec(docker_image="debian:bookworm-slim", job_id=job_id,
                                       trial_id=job_dir.name, job_dir=job_dir,
                                       network_mode=NetworkMode.NO_NETWORK))
        await sb.start()
        print(sb.container_id, flush=True)
        await asyncio.sleep(600)
    asyncio.run(main())
""")


def _docker():
    docker = pytest.importorskip("docker")
    return docker, docker.from_env()


def _exists(client, cid: str) -> bool:
    import docker

    try:
        client.api.inspect_container(cid)
        return True
    except docker.errors.NotFound:
        return False


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return run_cairn("clean", *args, env=env)


@pytest.mark.docker
def test_clean_removes_sigkilled_owner_keeps_running_job(tmp_path):
    _, client = _docker()
    job_id = f"cleantest-{uuid.uuid4().hex[:8]}"
    killed = _spawn(_SANDBOX_OWNER, str(tmp_path / "killed"), job_id, "lock")
    running = _spawn(_SANDBOX_OWNER, str(tmp_path / "running"), job_id, "lock")
    # a dead owner inside a job whose lock another live process holds: the job still runs
    orphan_job = tmp_path / "orphan"
    orphan = _spawn(_SANDBOX_OWNER, str(orphan_job), job_id, "nolock")
    try:
        cid_killed, cid_running, cid_orphan = (_wait_line(p) for p in (killed, running, orphan))
        with JobLock(orphan_job):
            _kill9(killed)
            _kill9(orphan)
            assert _exists(client, cid_killed) and _exists(client, cid_orphan)
            res = _cli("--job", job_id)
            assert res.returncode == 0, res.stderr
            assert not _exists(client, cid_killed)
            assert _exists(client, cid_running)
            assert _exists(client, cid_orphan)
            assert "job running" in res.stdout and "removed container" in res.stdout
        res = _cli("--job", job_id)  # the orphan's job has ended now
        assert not _exists(client, cid_orphan)
        assert _exists(client, cid_running)
    finally:
        for p in (killed, running, orphan):
            _kill9(p)
        _cli("--job", job_id)
    assert not _exists(client, cid_running)


@pytest.mark.docker
@pytest.mark.slow
def test_unlabelled_resources_survive_clean_images(tmp_path):
    import asyncio

    from cairn.sandbox.base import NetworkMode, SandboxSpec
    from cairn.sandbox.docker.backend import DockerSandbox

    docker, client = _docker()
    tag = uuid.uuid4().hex[:8]
    net = client.networks.create(f"cairn-unlabelled-{tag}")
    ctr = client.containers.create(
        "debian:bookworm-slim", ["sleep", "600"], name=f"cairn-unlabelled-{tag}", network=net.name
    )
    env = tmp_path / "env"
    env.mkdir()
    (env / "Dockerfile").write_text(f"FROM debian:bookworm-slim\nRUN echo {tag} > /tag\n")

    async def build() -> str:
        async with DockerSandbox(
            SandboxSpec(env_dir=env, job_id=f"cleanimg-{tag}", network_mode=NetworkMode.NO_NETWORK)
        ) as sb:
            return sb.image.ref

    try:
        ctr.start()
        ref = asyncio.run(build())
        assert client.images.get(ref)
        res = _cli("--images", "--job", f"cleanimg-{tag}")  # only this test's job
        assert res.returncode == 0, res.stderr
        ctr.reload()
        assert ctr.status == "running"
        assert client.networks.get(net.id).name == f"cairn-unlabelled-{tag}"
        assert client.images.get("debian:bookworm-slim")
        with pytest.raises(docker.errors.ImageNotFound, match=f"No such image: {re.escape(ref)}"):
            client.images.get(ref)
        assert f"removed image {ref}" in res.stdout
    finally:
        ctr.remove(force=True)
        net.remove()


@pytest.mark.docker
def test_clean_removes_leftover_labelled_volume_keeps_unlabelled(tmp_path):
    """A compose volume of a job that ended (lock free, no owner alive) is removed; an
    unlabelled volume and one of a running job survive."""
    _, client = _docker()
    job_id = f"cleanvol-{uuid.uuid4().hex[:8]}"
    dead_job, live_job = tmp_path / "dead", tmp_path / "live"
    dead_job.mkdir()
    live_job.mkdir()
    left = client.volumes.create(
        f"{job_id}-left", labels={"cairn.job": job_id, "cairn.trial": "t1", "cairn.job_dir": str(dead_job)}
    )
    kept = client.volumes.create(
        f"{job_id}-kept", labels={"cairn.job": job_id, "cairn.trial": "t2", "cairn.job_dir": str(live_job)}
    )
    plain = client.volumes.create(f"{job_id}-plain")
    try:
        with JobLock(live_job):
            res = _cli("--job", job_id)
            assert res.returncode == 0, res.stderr
            names = {v.name for v in client.volumes.list()}
            assert left.name not in names
            assert kept.name in names and plain.name in names
            assert f"removed volume {left.name}" in res.stdout
    finally:
        for v in (kept, plain):
            try:
                v.remove(force=True)
            except Exception:  # noqa: BLE001 - already gone
                pass


def test_a_zombie_owner_counts_as_dead():
    """A SIGKILLed owner whose parent has not reaped it yet (state Z) no longer owns anything."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        token = owner_token(proc.pid)
        assert owner_alive(token) is True
        os.kill(proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # not reaped: a zombie until proc.wait()
            with open(f"/proc/{proc.pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
            time.sleep(0.05)
        assert owner_alive(token) is False
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.docker
def test_settle_job_removes_what_the_job_left_and_reports_what_it_cannot(tmp_path, monkeypatch):
    """settle_job (run by every job after its last trial): removes containers and networks
    labelled with the job folder, leaves other jobs' alone, and reports — within its bound —
    what the engine refuses to remove."""
    from docker.api.client import APIClient

    from cairn.sandbox.cleanup import settle_job

    _, client = _docker()
    job, other = tmp_path / "job", tmp_path / "other"
    made = []
    try:
        for d in (job, job, other):
            made.append(
                client.api.create_container(
                    "debian:bookworm-slim",
                    ["sleep", "600"],
                    labels={"cairn.job": d.name, "cairn.job_dir": str(d)},
                )["Id"]
            )
            client.api.start(made[-1])
        net = client.api.create_network(
            f"cairn-settle-{uuid.uuid4().hex[:6]}", labels={"cairn.job": "job", "cairn.job_dir": str(job)}
        )
        assert settle_job(job, "docker", wait_sec=30) == []
        assert [_exists(client, c) for c in made] == [False, False, True]
        assert client.api.networks(ids=[net["Id"]]) == []

        def refuse(self, container, **kw):
            raise __import__("docker").errors.APIError("refused", explanation="engine says no")

        monkeypatch.setattr(APIClient, "remove_container", refuse)
        started = time.monotonic()
        failed = settle_job(other, "docker", wait_sec=1.0)
        assert time.monotonic() - started < 10
        assert len(failed) == 1 and failed[0].startswith("container ")
        assert failed[0].endswith(": engine says no")
        monkeypatch.undo()
    finally:
        for c in made:
            try:
                client.api.remove_container(c, force=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
    assert settle_job(other, "docker", wait_sec=30) == []
