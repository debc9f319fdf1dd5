"""The backends' memos and build locks belong to a job (:mod:`cairn.sandbox.caches`), not
to the process: two jobs in one process learn each fact on their own."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import pickle
from pathlib import Path

import pytest

from cairn.errors import BuildError, ErrorKind, UnsupportedError
from cairn.sandbox.base import SandboxSpec
from cairn.sandbox.caches import SandboxCaches
from cairn.sandbox.docker import build, compose_cli
from cairn.sandbox.local.layer import LayerMemo
from cairn.trial.context import JobServices


def test_two_jobs_do_not_share_backend_memos() -> None:
    a = JobServices.for_job([], prestart=False, limit=1, in_process=True)
    b = JobServices.for_job([], prestart=False, limit=1, in_process=True)
    err = BuildError(ErrorKind.BUILD_FAILED, "RUN false")
    build.build_memo(a.caches).failures["h1"] = (0.0, err)
    build.build_memo(a.caches).force_built.add("h1")
    assert build.build_memo(a.caches).failures["h1"][1] is err
    assert build.build_memo(b.caches).failures == {}
    assert build.build_memo(b.caches).force_built == set()
    assert JobServices.standalone().caches is not JobServices.standalone().caches


def test_a_spec_derived_from_another_keeps_its_caches_and_equality_ignores_them() -> None:
    spec = SandboxSpec(env_dir=Path("env"), trial_id="t1")
    derived = dataclasses.replace(spec, trial_id="t2")
    assert derived.caches is spec.caches
    assert SandboxSpec(trial_id="t1").caches is not SandboxSpec(trial_id="t1").caches
    assert SandboxSpec(trial_id="t1") == dataclasses.replace(spec, env_dir=None)


def test_a_copy_for_another_process_starts_empty() -> None:
    caches = SandboxCaches()
    caches.memo("local.layer", LayerMemo).force_built.add("k")
    for other in (pickle.loads(pickle.dumps(caches)), copy.deepcopy(caches)):
        assert isinstance(other, SandboxCaches)
        assert other.memo("local.layer", LayerMemo).force_built == set()
    assert caches.memo("local.layer", LayerMemo).force_built == {"k"}


def test_build_locks_are_per_caches_and_per_event_loop() -> None:
    a, b = SandboxCaches(), SandboxCaches()

    async def locks() -> tuple[asyncio.Lock, asyncio.Lock, asyncio.Lock]:
        return a.lock("env"), a.lock("env"), b.lock("env")

    first, again, other = asyncio.run(locks())
    assert first is again
    assert other is not first
    (next_loop, _, _) = asyncio.run(locks())
    assert next_loop is not first


def test_compose_cli_is_checked_once_per_job(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # a `docker` on PATH that answers `compose version --short` and counts its calls
    calls = tmp_path / "calls"
    exe = tmp_path / "docker"
    exe.write_text(f'#!/bin/sh\necho x >> "{calls}"\necho 2.99.0\n')
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    job_a, job_b = SandboxCaches(), SandboxCaches()
    assert compose_cli.compose_cli(job_a) == str(exe)
    assert compose_cli.compose_cli(job_a) == str(exe)
    assert compose_cli.compose_memo(job_a).version == "2.99.0"
    assert len(calls.read_text().split()) == 1
    assert compose_cli.compose_memo(job_b).version is None
    compose_cli.compose_cli(job_b)
    assert len(calls.read_text().split()) == 2
    exe.write_text("#!/bin/sh\nexit 1\n")
    with pytest.raises(UnsupportedError):
        compose_cli.compose_cli(SandboxCaches())
    assert compose_cli.compose_cli(job_a) == str(exe)  # job_a's answer stays job_a's
