"""Healthcheck semantics (design §4.3) against a real sandbox: start period, retries, first success."""

from __future__ import annotations

import asyncio
import time

import pytest

from cairn.sandbox import get_backend
from cairn.sandbox.base import NetworkMode, SandboxSpec
from cairn.task.hashing import env_hash
from cairn.task.model import Healthcheck
from cairn.trial.healthcheck import run_healthcheck

pytestmark = pytest.mark.slow


def _spec(tmp_path):
    env = tmp_path / "env"
    env.mkdir()
    (env / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    return SandboxSpec(
        env_dir=env,
        network_mode=NetworkMode.NO_NETWORK,
        env_hash=env_hash(env, docker_image=None, workdir=None),
        job_id="hc-test",
        trial_id=f"hc-{time.time_ns()}",
        name="hc",
    )


async def _probe(backend: str, tmp_path, check: Healthcheck, delay_sec: float):
    async with get_backend(backend)(_spec(tmp_path)) as sb:
        await sb.exec(f"(sleep {delay_sec}; touch /tmp/up) >/dev/null 2>&1 &")
        started = time.monotonic()
        out = await run_healthcheck(sb, check)
        return out, time.monotonic() - started


def test_failures_inside_start_period_do_not_count(tmp_path, backend):
    check = Healthcheck(
        command="test -f /tmp/up", interval_sec=0.2, start_interval_sec=0.2, start_period_sec=5, retries=1
    )
    out, _ = asyncio.run(_probe(backend, tmp_path, check, 1.0))
    assert out.healthy and out.probes > 1


def test_retries_consecutive_failures_fail_the_check(tmp_path, backend):
    check = Healthcheck(
        command="test -f /tmp/up", interval_sec=0.2, start_interval_sec=0.2, start_period_sec=0, retries=3
    )
    out, elapsed = asyncio.run(_probe(backend, tmp_path, check, 30))
    assert not out.healthy and out.probes == 3 and out.last_exit_code == 1
    assert elapsed < 10


def test_first_success_passes(tmp_path, backend):
    check = Healthcheck(command="true", interval_sec=5, retries=3)
    out, elapsed = asyncio.run(_probe(backend, tmp_path, check, 30))
    assert out.healthy and out.probes == 1 and elapsed < 5
