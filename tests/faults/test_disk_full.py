"""The host's jobs folder on a full filesystem (issue #12): a small tmpfs as ``--jobs-dir``.

The job stops with one clear error (exit 1, no traceback, no exception group), every
result.json already written stays valid JSON, and ``cairn resume`` after space is freed
completes the job with clean-run scores.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from faultkit import (
    assert_clean_leaves_nothing,
    assert_one_result_each,
    cairn,
    need,
    rewards,
)
from taskgen import write_task

pytestmark = [pytest.mark.faults, pytest.mark.local, pytest.mark.slow]


@pytest.fixture
def small_jobs_dir(tmp_path):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=700k", "tmpfs", str(jobs)],
                             capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        yield jobs
    finally:
        subprocess.run(["umount", "-l", str(jobs)], check=False)


def test_a_full_jobs_folder_stops_the_job_with_one_error_and_resume_completes(
        tmp_path, small_jobs_dir):
    need("local")
    # each trial keeps ~150 kB of agent output: the 700 kB filesystem fills after a few
    task = write_task(tmp_path / "tasks", "big", solve="head -c 150000 /dev/zero | tr '\\0' x\n")
    res = cairn("run", "-p", str(task), "-e", "local", "-k", "6", "-n", "2", "--jobs-dir",
                str(small_jobs_dir), "--job-name", "full", cwd=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert "Traceback" not in out and "ExceptionGroup" not in out
    errors = [ln for ln in out.splitlines() if ln.startswith("cairn: error:")]
    assert len(errors) == 1 and "is full" in errors[0] and "cairn resume" in errors[0], out
    job = small_jobs_dir / "full"
    written = list(job.glob("trials/*/result.json"))
    assert 0 < len(written) < 6, out
    for path in written:
        assert json.loads(path.read_text(encoding="utf-8"))["outcome"] == "completed"
    subprocess.run(["mount", "-o", "remount,size=20m", str(small_jobs_dir)], check=True)
    again = cairn("resume", str(job), cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    planned = {("test/big", a) for a in range(1, 7)}
    assert list(rewards(assert_one_result_each(job, planned)).values()) == [
        ("completed", 1.0, [1.0])] * 6
    assert json.loads((job / "summary.json").read_text(encoding="utf-8"))["n_trials"] == 6
    assert_clean_leaves_nothing(job, tmp_path)
