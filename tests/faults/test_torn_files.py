"""Torn files (simulated power loss): a truncated result.json, summary.json or job.json.

``cairn resume`` re-runs the trial whose result.json is torn, rebuilds summary.json and
job.json, and says which files it could not read; ``cairn report`` never crashes on them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faultkit import (
    assert_clean_leaves_nothing,
    assert_one_result_each,
    cairn,
    need,
    rewards,
    three_step_task,
)
from taskgen import write_task

pytestmark = [pytest.mark.faults, pytest.mark.local]


def _tear(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.fixture
def finished_job(tmp_path):
    """A finished job on the local backend: a 3-step task (2 attempts) and a single-step one."""
    need("local")
    ds = tmp_path / "ds"
    three_step_task(ds)
    write_task(ds, "one")
    res = cairn(
        "run",
        "-p",
        str(ds),
        "-e",
        "local",
        "-k",
        "2",
        "-n",
        "4",
        "--jobs-dir",
        "jobs",
        "--job-name",
        "torn",
        "-i",
        "test/*",
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    job = tmp_path / "jobs" / "torn"
    planned = {(t, a) for t in ("test/three", "test/one") for a in (1, 2)}
    clean = rewards(assert_one_result_each(job, planned))
    return job, planned, clean


def _report_ok(job: Path, cwd: Path) -> tuple[str, str]:
    for fmt in ("markdown", "json"):
        rep = cairn("report", str(job), "--format", fmt, cwd=cwd)
        assert rep.returncode == 0, rep.stdout + rep.stderr
        assert "Traceback" not in rep.stdout + rep.stderr
    return rep.stdout, rep.stderr


def test_torn_result_and_summary_are_rerun_and_rebuilt(finished_job, tmp_path):
    job, planned, clean = finished_job
    victim = next(job.glob("trials/test-three__2__*/result.json"))
    _tear(victim)
    _tear(job / "summary.json")
    out, err = _report_ok(job, tmp_path)
    assert json.loads(out)["n_trials"] == 3  # the torn trial is not counted, nothing crashes
    assert f"unreadable {victim}" in err
    res = cairn("resume", str(job), cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    said = res.stdout + res.stderr
    assert f"unreadable {victim}" in said and "re-running attempt 2" in said
    assert f"{job / 'summary.json'} is unreadable" in said
    assert said.count("PASS reward=1.00") == 1  # only the torn trial ran again
    assert rewards(assert_one_result_each(job, planned)) == clean
    summary = json.loads((job / "summary.json").read_text(encoding="utf-8"))
    assert summary["n_trials"] == 4 and summary["mean_reward"] == 1.0
    assert json.loads(_report_ok(job, tmp_path)[0])["n_trials"] == 4
    assert_clean_leaves_nothing(job, tmp_path)


def test_torn_job_json_is_rebuilt_from_the_trials(finished_job, tmp_path):
    job, planned, clean = finished_job
    _tear(job / "job.json")
    victim = next(job.glob("trials/test-one__1__*/result.json"))
    victim.unlink()  # that trial never finished before the power went
    _report_ok(job, tmp_path)
    res = cairn("resume", str(job), cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    said = res.stdout + res.stderr
    assert f"{job / 'job.json'} is unreadable" in said and "rebuilt from its trials" in said
    assert said.count("PASS reward=1.00") == 1
    meta = json.loads((job / "job.json").read_text(encoding="utf-8"))
    assert meta["backend"] == "local" and meta["config"]["attempts"] == 2
    assert rewards(assert_one_result_each(job, planned)) == clean
    again = cairn("resume", str(job), cwd=tmp_path)  # the rewritten job.json is whole
    assert again.returncode == 0 and "unreadable" not in again.stdout + again.stderr
    assert_clean_leaves_nothing(job, tmp_path)
