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
from taskgen import StepSpec, reward_if, write_task

pytestmark = [pytest.mark.faults, pytest.mark.local, pytest.mark.slow]


@pytest.fixture
def small_jobs_dir(tmp_path):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=700k", "tmpfs", str(jobs)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        yield jobs
    finally:
        subprocess.run(["umount", "-l", str(jobs)], check=False)


def test_a_full_jobs_folder_stops_the_job_with_one_error_and_resume_completes(tmp_path, small_jobs_dir):
    need("local")
    # each trial keeps ~150 kB of agent output: the 700 kB filesystem fills after a few
    task = write_task(tmp_path / "tasks", "big", solve="head -c 150000 /dev/zero | tr '\\0' x\n")
    res = cairn(
        "run",
        "-p",
        str(task),
        "-e",
        "local",
        "-k",
        "6",
        "-n",
        "2",
        "--jobs-dir",
        str(small_jobs_dir),
        "--job-name",
        "full",
        cwd=tmp_path,
    )
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
    assert list(rewards(assert_one_result_each(job, planned)).values()) == [("completed", 1.0, [1.0])] * 6
    assert json.loads((job / "summary.json").read_text(encoding="utf-8"))["n_trials"] == 6
    assert_clean_leaves_nothing(job, tmp_path)


# ---- a full disk inside the sandbox ---------------------------------------------------------
# The local backend keeps every sandbox's writes (its overlay upper folders) under
# $CAIRN_LOCAL_DIR: on a 16 MB tmpfs the sandbox's own disk is small, the jobs folder is not.
# (docker: storage_mb needs overlay2 on xfs with project quotas, which this engine lacks; see
# docs/guarantees.md.)
FILL = 'head -c 200m /dev/zero > {path}; echo "fill exit $?"\n'


@pytest.fixture
def small_sandbox_disk(tmp_path, monkeypatch):
    disk = tmp_path / "sandbox-disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(disk)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    monkeypatch.setenv("CAIRN_LOCAL_DIR", str(disk))  # this process (the checks) and cairn's
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def _run_one(tmp_path, ds, name: str, rc: int):
    # One job per task: a job's end waits for its sandboxes' removal, so the next job's sandbox
    # starts on an empty disk (inside one job the removal overlaps the next trial, #13 — a full
    # disk then is the next test's case).
    res = cairn(
        "run",
        "-p",
        str(ds / name),
        "-e",
        "local",
        "-n",
        "1",
        "--jobs-dir",
        "jobs",
        "--job-name",
        name,
        cwd=tmp_path,
    )
    out = res.stdout + res.stderr
    assert res.returncode == rc, out  # 1: a trial errored; 0: it ran (stopped) (docs/cli.md)
    assert "Traceback" not in out and "retrying" not in out, out
    job = tmp_path / "jobs" / name
    rs = assert_one_result_each(job, {(f"test/{name}", 1)})
    return job, rs, rs[(f"test/{name}", 1)]


def _whole_and_clean(job, tmp_path, small_sandbox_disk, rs, rc: int):
    # the host's jobs folder is untouched by the sandbox's full disk: whole files throughout
    summary = json.loads((job / "summary.json").read_text(encoding="utf-8"))
    assert summary["n_trials"] == 1
    for f in job.rglob("*.json"):
        json.loads(f.read_text(encoding="utf-8"))
    assert not list((small_sandbox_disk / "local").glob("*")), "a sandbox folder was left"
    assert_clean_leaves_nothing(job, tmp_path)
    again = cairn("resume", str(job), cwd=tmp_path)  # genuine outcomes are never re-run
    assert again.returncode == rc, again.stdout + again.stderr
    assert assert_one_result_each(job, set(rs)) == rs


def test_a_full_disk_inside_the_sandbox_is_the_fault_of_whoever_filled_it(tmp_path, small_sandbox_disk):
    need("local")

    ds = tmp_path / "ds"
    # the agent fills the sandbox's disk in step 1: its verifier cannot leave a reward → the
    # agent's failure (sandbox_unusable, candidate): step 1 scores 0 and the trial stops
    write_task(
        ds,
        "agent-fills",
        steps=[
            StepSpec("a", solve=FILL.format(path="/app/fill"), test=reward_if("test -f /app/fill")),
            StepSpec("b", solve="echo b > /app/b\n", test=reward_if("test -f /app/b")),
        ],
    )
    # the verifier fills it: the task's error (its reward cannot be written), never retried
    write_task(
        ds,
        "verifier-fills",
        solve="echo ok > /app/ok\n",
        test=FILL.format(path="/tmp/fill") + reward_if("test -f /app/ok"),
    )

    job, rs, a = _run_one(tmp_path, ds, "agent-fills", 0)
    assert (a["outcome"], a["reward"], a["error"]) == ("stopped", 0.0, None), a
    assert (a["stop_reason"]["kind"], a["stop_reason"]["error_kind"]) == ("step_error", "sandbox_unusable")
    s1, s2 = a["steps"]
    assert (s1["source"], s1["reward"], s1["error"]["kind"], s1["error"]["category"]) == (
        "candidate_error",
        0.0,
        "sandbox_unusable",
        "candidate",
    )
    assert "disk was full when the verifier started" in s1["error"]["message"]
    assert s1["error"]["detail"]["free_kb"] < 64 and s2["source"] == "not-run"
    _whole_and_clean(job, tmp_path, small_sandbox_disk, rs, 0)

    job, rs, v = _run_one(tmp_path, ds, "verifier-fills", 1)
    assert (v["outcome"], v["reward"]) == ("errored", None), v
    assert (v["error"]["kind"], v["error"]["category"], v["error"]["phase"]) in [
        ("reward_empty", "task", "verifier"),
        ("reward_missing", "task", "verifier"),
    ], v["error"]
    assert "No space left on device" in v["error"]["detail"]["stderr_tail"]
    _whole_and_clean(job, tmp_path, small_sandbox_disk, rs, 1)


def test_no_room_to_start_a_sandbox_is_a_start_failure_not_a_completed_trial(tmp_path, small_sandbox_disk):
    """A sandbox that cannot be set up for want of space (here: the disk where local sandboxes
    live is already full) is ``start_failed`` (infra, retried, then errored), never a trial
    "completed" with no step run, and not taken for a full jobs folder."""
    need("local")
    filler = small_sandbox_disk / "filler"
    subprocess.run(["sh", "-c", f"head -c 64m /dev/zero > {filler}"], check=False)
    task = write_task(tmp_path / "tasks", "t", solve="echo ok > /app/ok\n")
    res = cairn(
        "run",
        "-p",
        str(task),
        "-e",
        "local",
        "--max-retries",
        "1",
        "--jobs-dir",
        "jobs",
        "--job-name",
        "nostart",
        cwd=tmp_path,
    )
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert "Traceback" not in out and "jobs" not in "".join(
        ln for ln in out.splitlines() if ln.startswith("cairn: error:")
    ), out
    job = tmp_path / "jobs" / "nostart"
    r = assert_one_result_each(job, {("test/t", 1)})[("test/t", 1)]
    assert (r["outcome"], r["error"]["kind"], r["error"]["category"]) == (
        "errored",
        "start_failed",
        "infra",
    ), r
    assert "No space left on device" in r["error"]["message"], r["error"]
    assert len(list(job.glob("trials/*/attempts/*"))) == 1  # the one retry, recorded apart
    filler.unlink()
    again = cairn("resume", str(job), cwd=tmp_path)  # an infra error is run again on resume
    assert again.returncode == 0, again.stdout + again.stderr
    assert rewards(assert_one_result_each(job, {("test/t", 1)}))[("test/t", 1)][:2] == ("completed", 1.0)
