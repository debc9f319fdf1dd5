"""Job names are one safe folder name under the jobs folder (plan.check_job_name): an unsafe
``--job-name`` is refused with exit 2 and nothing written by ``cairn run``, ``--dry-run``,
a ``job_name:`` in a config file, ``cairn resume`` and ``cairn regrade``; names Harbor users
give (dates, ``:``, ``%``, spaces, ``#``) keep working.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from cairn.plan import JobConfig, check_job_name
from cairncli import run_cairn
from taskgen import reward_if, write_task
from testbed import local_available

TESTS = Path(__file__).resolve().parents[1]
SRC = TESTS.parent / "src"

UNSAFE = [
    "../escape",
    "..",
    ".",
    "",
    "a/b",
    "/abs",
    "a\\b",
    "nul\x00x",
    "tab\tx",
    "new\nline",
    "-rf",
    ".hidden",
    " padded",
    "padded ",
    "x" * 256,
]
SAFE = ["2026-11-29__12-00-00", "nightly:v2", "a b%2e", "50% #3", "run_1.final", "ünïcode-名前"]


def _cairn(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(TESTS), str(TESTS / "helpers")])}
    return run_cairn(*args, cwd=cwd, env=env)


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("name", UNSAFE)
def test_unsafe_names_are_refused_by_the_job_config(name):
    with pytest.raises(ValueError, match="job name"):
        check_job_name(name)
    with pytest.raises(ValueError, match="job name"):
        JobConfig(paths=(Path("t"),), job_name=name)


@pytest.mark.parametrize("name", SAFE)
def test_names_harbor_users_give_are_kept(name):
    assert check_job_name(name) == name
    assert JobConfig(paths=(Path("t"),), job_name=name).job_name == name


@pytest.fixture
def one_task(tmp_path: Path) -> Path:
    return write_task(
        tmp_path / "tasks", "one", solve="touch /app/done\n", test=reward_if("test -f /app/done")
    )


@pytest.mark.parametrize("name", ["../escape", "", "-rf"])
@pytest.mark.parametrize("dry", [False, True])
def test_cairn_run_refuses_an_unsafe_job_name_and_writes_nothing(tmp_path, one_task, name, dry):
    work = tmp_path / "work"
    work.mkdir()
    before = _tree(tmp_path)
    p = _cairn(
        "run",
        "-p",
        str(one_task),
        "-e",
        "local",
        "-o",
        str(work / "jobs2"),
        "--job-name",
        name,
        *(["--dry-run"] if dry else []),
        cwd=work,
    )
    assert p.returncode == 2, p.stdout + p.stderr
    assert "job name" in p.stderr and "Traceback" not in p.stderr
    assert "problems: none" not in p.stdout
    assert _tree(tmp_path) == before  # no jobs2/, no escape/ beside it


def test_a_job_name_in_a_config_file_is_checked_too(tmp_path, one_task):
    cfg = tmp_path / "job.yaml"
    cfg.write_text(f"paths: [{one_task}]\njob_name: ../escape\njobs_dir: {tmp_path / 'jobs'}\n")
    p = _cairn("run", "-c", str(cfg), "--dry-run", cwd=tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "'../escape'" in p.stderr
    assert not (tmp_path / "jobs").exists() and not (tmp_path / "escape").exists()


@pytest.mark.local
def test_dry_run_accepts_a_name_with_percent_space_and_hash(tmp_path, one_task):
    p = _cairn(
        "run",
        "-p",
        str(one_task),
        "-e",
        "local",
        "-o",
        str(tmp_path / "jobs"),
        "--job-name",
        "a b%2e#1",
        "--dry-run",
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "problems: none" in p.stdout


@pytest.mark.local
@pytest.mark.skipif(not local_available(), reason="local backend unavailable")
def test_resume_and_regrade_refuse_unsafe_names(tmp_path, one_task):
    jobs = tmp_path / "jobs"
    p = _cairn(
        "run", "-p", str(one_task), "-e", "local", "-o", str(jobs), "--job-name", "ok 1%", cwd=tmp_path
    )
    assert p.returncode == 0, p.stdout + p.stderr
    job = jobs / "ok 1%"
    assert (job / "job.json").is_file()

    p = _cairn("regrade", str(job), "--job-name", "../escape", cwd=tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "--job-name" in p.stderr and "'../escape'" in p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["jobs", "tasks"]
    assert [x.name for x in jobs.iterdir()] == ["ok 1%"]

    # a job.json whose recorded name was edited to leave the jobs folder: refused, unchanged
    meta = json.loads((job / "job.json").read_text())
    meta["config"]["job_name"] = "../escape"
    (job / "job.json").write_text(json.dumps(meta))
    before = _tree(tmp_path)
    p = _cairn("resume", str(job), cwd=tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "'../escape'" in p.stderr and "Traceback" not in p.stderr
    assert _tree(tmp_path) == before
