"""The job's capability check runs once per task before any trial is queued (issue 14):
a task the backend cannot enforce ends ``config_error`` at once, the others run."""

from __future__ import annotations

import json
import time

import pytest

from cairn.errors import ErrorKind
from cairn.job import run_job
from cairn.plan import JobConfig
from cairn.results.model import Outcome
from cairn.sandbox.local.backend import LocalSandbox
from cairncli import run_cairn
from taskgen import write_task


def _gpu_task(tmp_path, name="gpu"):
    task = write_task(tmp_path, name)
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace("[environment]\n", "[environment]\ngpus = 1\n"))
    return task


def _allowlist_task(tmp_path, name="allow"):
    task = write_task(tmp_path, name, network="allowlist")
    toml = task / "task.toml"
    toml.write_text(
        toml.read_text().replace(
            'network_mode = "allowlist"\n', 'network_mode = "allowlist"\nallowed_hosts = ["allowed.test"]\n'
        )
    )
    return task


def test_a_task_the_backend_cannot_enforce_is_refused_once_per_job(tmp_path, monkeypatch):
    """local cannot enforce an allowlist: its 3 trials are config_error, checked once, and
    no sandbox was ever started for them."""
    task = _allowlist_task(tmp_path)
    calls = []
    real = LocalSandbox.check.__func__

    def counting(cls, spec):
        calls.append(spec.network_mode)
        return real(cls, spec)

    monkeypatch.setattr(LocalSandbox, "check", classmethod(counting))
    cfg = JobConfig(
        paths=(task,), backend="local", agent="nop", attempts=3, jobs_dir=tmp_path / "jobs", job_name="j"
    )
    started = time.monotonic()
    result = run_job(cfg)
    took = time.monotonic() - started
    assert len(result.results) == 3
    for r in result.results:
        assert r.outcome is Outcome.ERRORED
        assert r.error.kind is ErrorKind.CONFIG_ERROR
        assert "need the egress gateway: use -e docker" in r.error.message
    assert len(calls) == 1  # once per task, not once per trial
    assert result.exit_code == 1
    assert took < 20
    log = (tmp_path / "jobs" / "j" / "job.log").read_text()
    assert "test/allow: refused before start" in log
    for trial in (tmp_path / "jobs" / "j" / "trials").iterdir():
        assert not (trial / "trial.log").exists()  # no trial ever started


def test_the_agents_model_host_counts_in_the_job_check(tmp_path):
    """A no-network task is fine on local for nop, but --allow-agent-host puts a host in the
    agent phase that only the gateway could admit: refused at job level, with that reason."""
    task = write_task(tmp_path, "plain")
    cfg = JobConfig(
        paths=(task,),
        backend="local",
        agent="nop",
        attempts=2,
        jobs_dir=tmp_path / "jobs",
        job_name="j",
        agent_hosts=("model.test",),
    )
    result = run_job(cfg)
    assert [r.error.kind for r in result.results] == [ErrorKind.CONFIG_ERROR] * 2
    assert "egress gateway" in result.results[0].error.message


@pytest.mark.docker
def test_cli_refused_task_fails_fast_and_the_others_run(tmp_path):
    """docker takes no GPUs: that task's trials are config_error before anything is queued,
    the other task runs; `cairn run` exits 1 (an errored trial, cli.md)."""
    gpu = _gpu_task(tmp_path)
    ok = write_task(tmp_path, "fine")
    proc = run_cairn(
        "run",
        "-p",
        str(gpu),
        "-p",
        str(ok),
        "-a",
        "oracle",
        "-e",
        "docker",
        "-k",
        "2",
        "-n",
        "1",
        "--jobs-dir",
        str(tmp_path / "jobs"),
        "--job-name",
        "j",
        timeout=600,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "test/gpu: refused before start" in proc.stdout + proc.stderr
    results = [json.loads(p.read_text()) for p in (tmp_path / "jobs" / "j" / "trials").glob("*/result.json")]
    by_task: dict[str, list[dict]] = {}
    for r in results:
        by_task.setdefault(r["task"]["name"], []).append(r)
    assert [r["error"]["kind"] for r in by_task["test/gpu"]] == ["config_error"] * 2
    assert (
        "GPU" in by_task["test/gpu"][0]["error"]["message"]
        or "gpu" in by_task["test/gpu"][0]["error"]["message"]
    )
    assert [r["outcome"] for r in by_task["test/fine"]] == ["completed"] * 2
