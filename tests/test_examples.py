"""The tasks under examples/: they validate strictly, their verifiers agree with their shipped
files, the oracle scores 1.0 on every step and the nop agent fails them.

The fast tests run anywhere; the end-to-end ones need a Docker engine (``docker`` marker) and
build the example images (``slow``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from cairn.task.load import check_paths, find_tasks, load_task

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
EXAMPLE_PATHS = (EXAMPLES / "two-steps", EXAMPLES / "incident", EXAMPLES / "dataset")
INCIDENT = EXAMPLES / "incident"
ALL_TASKS = [t for p in EXAMPLE_PATHS for t in find_tasks(p)]


def test_every_example_task_passes_strict_check() -> None:
    results = check_paths(list(EXAMPLE_PATHS), strict=True)
    assert [str(f) for r in results for f in r.findings] == []
    assert sorted(Path(r.path).name for r in results) == sorted(t.name for t in ALL_TASKS)
    assert all(r.ok for r in results)


@pytest.mark.local
def test_cli_tasks_check_strict_exits_0() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from cairn.cli import main; main()",
            "tasks",
            "check",
            "--strict",
            *map(str, EXAMPLE_PATHS),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count(": ok") == len(ALL_TASKS)


def test_dataset_mixes_single_and_multi_step_tasks() -> None:
    tasks = [load_task(t) for t in find_tasks(EXAMPLES / "dataset")]
    assert {t.multi_step for t in tasks} == {True, False}
    assert all(t.environment.effective_network_mode.value == "no-network" for t in tasks)


# -- the incident example's verifier agrees with its environment -----------------------------


def _incident_checker():
    spec = importlib.util.spec_from_file_location("incident_check", INCIDENT / "tests" / "incident_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def incident_files(tmp_path):
    """The incident environment's files laid out on the host, and the checker pointed at them."""
    log = tmp_path / "service.log"
    subprocess.run([sys.executable, str(INCIDENT / "environment" / "gen_log.py"), str(log)], check=True)
    config = tmp_path / "service.json"
    config.write_text((INCIDENT / "environment" / "app" / "config" / "service.json").read_text())
    mod = _incident_checker()
    mod.LOG, mod.CONFIG = log, config
    mod.RUNBOOK = INCIDENT / "environment" / "app" / "docs" / "runbook.md"
    return mod, log, config


def test_incident_pins_match_the_shipped_files(incident_files) -> None:
    mod, log, config = incident_files
    assert hashlib.sha256(log.read_bytes()).hexdigest() == mod.LOG_SHA256
    assert hashlib.sha256(mod.RUNBOOK.read_bytes()).hexdigest() == mod.RUNBOOK_SHA256
    assert mod.canonical_sha256(json.loads(config.read_text())) == mod.ORIGINAL_CONFIG_SHA256


def test_incident_log_is_a_real_puzzle(incident_files) -> None:
    mod, log, _ = incident_files
    lines = log.read_text().splitlines()
    assert 300 <= len(lines) <= 1000
    events = [e for e in mod.log_entries() if e["level"] in ("ERROR", "FATAL")]
    stamps = [e["ts"] for e in events]
    assert stamps != sorted(stamps), "the file must not already be in timestamp order"
    assert len(set(stamps)) == len(stamps)
    assert any(line.startswith(" ") for line in lines), "continuation lines are part of it"
    assert any("ERROR" in line and " INFO " in line for line in lines), "a grep trap"
    diagnosis = mod.diagnosis_from(mod.expected_evidence())
    assert diagnosis["code"] == "E_UPSTREAM_TIMEOUT"
    assert diagnosis["config_key"] == "upstream.timeout_ms" and diagnosis["bad_value"] == 50
    assert mod.runbook_standard_value("upstream.timeout_ms") == 2500


@pytest.mark.parametrize("timeout_ms, status", [(50, "FAIL"), (2500, "OK"), (6000, "FAIL")])
def test_incident_replay_script_matches_the_checker(incident_files, timeout_ms, status) -> None:
    mod, log, config = incident_files
    cfg = json.loads(config.read_text())
    cfg["upstream"]["timeout_ms"] = timeout_ms
    config.write_text(json.dumps(cfg))
    proc = subprocess.run(
        [
            sys.executable,
            str(INCIDENT / "steps" / "validate" / "workdir" / "replay.py"),
            "--config",
            str(config),
            "--log",
            str(log),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.stdout == mod.expected_replay(cfg)
    assert proc.stdout.splitlines()[-1].startswith(f"status: {status}")
    assert proc.returncode == (0 if status == "OK" else 1)


# -- end to end on docker --------------------------------------------------------------------


def _run(paths, agent: str, tmp_path: Path, name: str):
    from cairn.job.run import run_job
    from cairn.plan import JobConfig

    config = JobConfig(
        paths=tuple(paths),
        agent=agent,
        backend="docker",
        jobs_dir=tmp_path,
        job_name=name,
        n_concurrent=2,
        max_retries=0,
    )
    return run_job(config)


def _docker_ready() -> None:
    from testbed import backend_available

    if not backend_available("docker"):
        pytest.skip("no Docker engine, or the docker backend is not built")


@pytest.mark.docker
@pytest.mark.slow
def test_oracle_scores_1_on_every_example_step(tmp_path) -> None:
    _docker_ready()
    job = _run(EXAMPLE_PATHS, "oracle", tmp_path, "oracle")
    by_task = {r.task.name: r for r in job.results}
    assert sorted(by_task) == sorted(load_task(t).name for t in ALL_TASKS)
    for name, r in by_task.items():
        assert r.outcome.value == "completed", (name, r.error)
        assert r.reward == 1.0 and r.passed, (name, r.reward)
        assert r.reward_all_steps == 1.0, name
        assert [s.reward for s in r.steps] == [1.0] * len(r.steps), (name, r.steps)
        assert all(s.passed and s.source.value == "verifier" for s in r.steps), name
    incident = by_task["cairn/incident"]
    assert [s.name for s in incident.steps] == ["evidence", "diagnose", "repair", "validate", "postmortem"]
    assert incident.rewards == {"reward": 1.0, "checks": 1.0}
    trial_dir = job.job_dir / "trials" / incident.trial_name
    replay = trial_dir / "steps" / "04-validate" / "artifacts" / "app" / "incident" / "replay.txt"
    assert replay.read_text().splitlines()[-1] == "status: OK"
    assert job.exit_code == 0


@pytest.mark.docker
@pytest.mark.slow
def test_nop_fails_every_example_and_stops_the_incident_after_evidence(tmp_path) -> None:
    _docker_ready()
    job = _run(EXAMPLE_PATHS, "nop", tmp_path, "nop")
    assert len(job.results) == len(ALL_TASKS)
    for r in job.results:
        assert r.outcome.value in ("completed", "stopped"), (r.task.name, r.error)
        assert not r.passed and r.reward == 0.0, (r.task.name, r.reward)
    incident = next(r for r in job.results if r.task.name == "cairn/incident")
    assert incident.outcome.value == "stopped"
    assert incident.stopped_after == "evidence"
    assert incident.steps_run == 1
    assert incident.stop_reason.kind == "min_reward"
    assert incident.reward_all_steps == 0.0
    assert [s.source.value for s in incident.steps] == ["verifier"] + ["not-run"] * 4
    chain = next(r for r in job.results if r.task.name == "cairn/config-chain")
    assert chain.stopped_after == "create"
    assert job.exit_code == 0
