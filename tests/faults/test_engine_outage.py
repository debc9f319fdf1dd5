"""The Docker engine goes away mid-job and comes back (issue #12).

The system dockerd is shared and is never restarted here. cairn talks to it through a proxy
socket this test owns (``DOCKER_HOST=unix://<tmp>/engine.sock``); "stopping the engine"
closes that socket and every connection through it, "starting it" opens it again. To cairn
that is an engine restart: running trials lose their sandbox (``sandbox_lost``, infra), each
waits for the engine with backoff before its retry (bounded: ``CAIRN_ENGINE_WAIT_SEC``),
and the job completes. When the engine stays away past the bound, the trials end with a
clear infra error instead of hanging, and ``cairn resume`` completes them later.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

import pytest

from faultkit import (
    Proc,
    assert_clean_leaves_nothing,
    assert_one_result_each,
    cairn,
    job_resources,
    need,
    rewards,
    three_step_task,
)

pytestmark = [pytest.mark.faults, pytest.mark.docker, pytest.mark.slow]


def _engine_socket() -> str:
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        pytest.skip("the engine is not on a unix socket")
    return host[len("unix://") :]


class EngineProxy:
    """A unix-socket proxy to the real engine that can be stopped (all connections cut,
    new ones refused) and started again."""

    def __init__(self, path: Path, target: str) -> None:
        self.path, self.target = path, target
        self.loop = asyncio.new_event_loop()
        self.server: asyncio.AbstractServer | None = None
        self.writers: set[asyncio.StreamWriter] = set()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    async def _pipe(self, reader, writer) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def _client(self, reader, writer) -> None:
        # Registered at accept: a stop while this connection still reaches for the engine must
        # end it too (else it would outlive the "outage", piping to the engine through it).
        self.writers.add(writer)
        try:
            up_r, up_w = await asyncio.open_unix_connection(self.target)
        except OSError:
            self.writers.discard(writer)
            writer.close()
            return
        if writer not in self.writers:  # the proxy stopped meanwhile: the engine is "gone"
            up_w.transport.abort()
            writer.transport.abort()
            return
        self.writers.add(up_w)
        await asyncio.gather(self._pipe(reader, up_w), self._pipe(up_r, writer))
        self.writers -= {writer, up_w}

    async def _start(self) -> None:
        self.server = await asyncio.start_unix_server(self._client, path=str(self.path))

    async def _stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for w in list(self.writers):
            w.transport.abort()
        self.writers.clear()
        self.path.unlink(missing_ok=True)

    def start(self) -> None:
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self.loop).result(10)

    def close(self) -> None:
        if self.server is not None and self.server.is_serving():
            self.stop()
        self.loop.call_soon_threadsafe(self.loop.stop)


@pytest.fixture
def proxy(tmp_path):
    need("docker")
    p = EngineProxy(tmp_path / "engine.sock", _engine_socket())
    p.start()
    try:
        yield p
    finally:
        p.close()


CLEAN = {("test/three", a): ("completed", 1.0, [1.0, 1.0, 1.0]) for a in (1, 2, 3, 4)}


def test_engine_restarted_mid_job_trials_wait_and_retry(tmp_path, proxy):
    task = three_step_task(tmp_path / "tasks", pause=2)
    job = tmp_path / "jobs" / "outage"
    host = f"unix://{proxy.path}"
    run = Proc(
        "run",
        "-p",
        str(task),
        "-e",
        "docker",
        "-k",
        "4",
        "-n",
        "4",
        "--jobs-dir",
        "jobs",
        "--job-name",
        "outage",
        cwd=tmp_path,
        DOCKER_HOST=host,
    )
    try:
        run.wait_line(r"environment: docker, ready", timeout=300)
        proxy.stop()  # the engine goes away while trials run
        run.wait_line(r"the Docker engine does not answer; waiting", timeout=300)
        proxy.start()  # and comes back
        rc = run.finish(timeout=600)
    finally:
        run.kill()
    assert rc == 0, run.output
    assert "Traceback" not in run.output
    assert "retrying" in run.output and "the Docker engine answers again" in run.output
    assert rewards(assert_one_result_each(job, set(CLEAN))) == CLEAN
    assert job_resources(job) == [], "the job returned with sandboxes left"
    assert_clean_leaves_nothing(job, tmp_path)


def test_engine_that_stays_away_is_a_bounded_infra_error(tmp_path, proxy):
    task = three_step_task(tmp_path / "tasks", pause=2)
    job = tmp_path / "jobs" / "gone"
    host = f"unix://{proxy.path}"
    run = Proc(
        "run",
        "-p",
        str(task),
        "-e",
        "docker",
        "-k",
        "2",
        "-n",
        "2",
        "--jobs-dir",
        "jobs",
        "--job-name",
        "gone",
        "--max-retries",
        "1",
        cwd=tmp_path,
        DOCKER_HOST=host,
        CAIRN_ENGINE_WAIT_SEC="8",
    )
    try:
        run.wait_line(r"environment: docker, ready", timeout=300)
        proxy.stop()
        started = time.monotonic()
        rc = run.finish(timeout=300)  # never a hang: the wait is bounded
    finally:
        run.kill()
    assert time.monotonic() - started < 200, run.output
    assert rc == 1, run.output
    assert "engine_unavailable: the Docker engine did not answer within 8 s" in run.output
    results = assert_one_result_each(job, {("test/three", 1), ("test/three", 2)})
    lost = [r for r in results.values() if r["outcome"] == "errored"]
    assert lost and all(r["error"]["category"] == "infra" for r in lost)
    proxy.start()
    assert_clean_leaves_nothing(job, tmp_path)  # what the lost trials left, on the engine
    res = cairn("resume", str(job), cwd=tmp_path, DOCKER_HOST=host)
    assert res.returncode == 0, res.stdout + res.stderr
    assert rewards(assert_one_result_each(job, set(results))) == {
        k: ("completed", 1.0, [1.0, 1.0, 1.0]) for k in results
    }
