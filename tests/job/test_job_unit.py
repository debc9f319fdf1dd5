"""Job planning pieces that need no sandbox (design §8, §9): task discovery and filters, the
template preflight, the lock, job.json's masked agent env on resume, reading a job folder
copied from elsewhere, and ``-c job.yaml`` spellings.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
from pathlib import Path

import pytest

from cairn.errors import UsageError
from cairn.job import JobResult, arun_job, read_job, resume_config
from cairn.job.discover import check_templates, config_error_result, discover_tasks
from cairn.lock import JobLock
from cairn.plan import JobConfig
from cairn.results.store import JobPaths, TrialStore
from cairn.task.load import load_task
from taskgen import write_task


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    ds = tmp_path / "ds"
    for n in ("alpha", "alps", "beta"):
        write_task(ds, n)
    broken = write_task(ds, "zeta")
    (broken / "instruction.md").unlink()
    return ds


def names(config: JobConfig) -> list[str]:
    return [e.name for e in discover_tasks(config)]


def test_discover_sorted_broken_kept_and_deduplicated(dataset):
    entries = discover_tasks(JobConfig(paths=(dataset, dataset / "beta")))
    assert [e.name for e in entries] == ["test/alpha", "test/alps", "test/beta", "test/zeta"]
    zeta = entries[-1]
    assert zeta.task is None and "instruction.md" in zeta.error and zeta.content_hash
    assert zeta.steps == ["main"]


def test_two_tasks_with_one_name_are_refused(tmp_path):
    """Two folders holding the same [task].name would share trial ids and folders."""
    ds = tmp_path / "dup"
    write_task(ds, "hello")
    shutil.copytree(ds / "hello", ds / "hello-copy")
    with pytest.raises(UsageError, match="two tasks are named 'test/hello'"):
        discover_tasks(JobConfig(paths=(ds,)))


@pytest.mark.parametrize(
    "include,exclude,expected",
    [
        (("test/al*",), (), ["test/alpha", "test/alps"]),
        (("al*",), ("*ps",), ["test/alpha"]),  # the last part of the name matches too
        ((), ("test/*a",), ["test/alps"]),
        (("beta", "zeta"), (), ["test/beta", "test/zeta"]),  # folder names match
    ],
)
def test_include_exclude_globs(dataset, include, exclude, expected):
    assert names(JobConfig(paths=(dataset,), include=include, exclude=exclude)) == expected


def test_no_task_matched_and_bad_paths(dataset, tmp_path):
    with pytest.raises(UsageError, match="no task matched"):
        discover_tasks(JobConfig(paths=(dataset,), include=("nothing",)))
    with pytest.raises(UsageError, match="no such"):
        discover_tasks(JobConfig(paths=(tmp_path / "missing",)))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="holds no task"):
        discover_tasks(JobConfig(paths=(tmp_path / "empty",)))


def test_check_templates_names_task_and_variable(tmp_path):
    t = write_task(
        tmp_path,
        "k",
        toml_extra='[verifier.env]\nA = "${NEED_A}"\nB = "${OPT:-x}"\n[solution.env]\nC = "${NEED_C}"\n',
    )
    task = load_task(t)
    with pytest.raises(UsageError) as exc:
        check_templates([task], environ={})
    assert "test/k: NEED_A, NEED_C" in str(exc.value)
    check_templates([task], environ={"NEED_A": "1", "NEED_C": "2"})


@pytest.mark.docker
def test_locked_job_refused_before_anything(dataset, tmp_path):
    job_dir = tmp_path / "jobs" / "busy"
    cfg = JobConfig(paths=(dataset,), backend="docker", job_name="busy", jobs_dir=tmp_path / "jobs")
    with JobLock(job_dir), pytest.raises(UsageError, match="already running"):
        asyncio.run(arun_job(cfg))
    assert not (job_dir / "job.json").exists()


def _job_json(job_dir: Path, agent_env: dict) -> None:
    job_dir.mkdir(parents=True)
    cfg = JobConfig(paths=(Path("/x"),), backend="docker").model_dump(mode="json")
    cfg["agent_env"] = agent_env
    (job_dir / "job.json").write_text(
        json.dumps(
            {
                "schema_version": "1.0",
                "job_name": job_dir.name,
                "cairn_version": "0",
                "backend": "docker",
                "config": cfg,
                "started_at": "2026-12-01T00:00:00+00:00",
            }
        )
    )


def test_resume_config_fills_masked_agent_env(tmp_path):
    job = tmp_path / "j"
    _job_json(job, {"TOKEN": "***", "MODE": "***"})
    with pytest.raises(UsageError, match="--ae MODE=..."):
        resume_config(job, agent_env={"TOKEN": "t"}, environ={})
    cfg = resume_config(
        job, agent_env={"TOKEN": "t"}, environ={"MODE": "fast"}, overrides={"n_concurrent": 9}
    )
    assert cfg.agent_env == {"TOKEN": "t", "MODE": "fast"} and cfg.n_concurrent == 9
    assert cfg.backend == "docker"
    with pytest.raises(UsageError, match="not a job folder"):
        resume_config(tmp_path / "nowhere")


def test_read_job_from_a_copied_folder(tmp_path, dataset, caplog):
    cfg = JobConfig(paths=(dataset,))
    entries = {e.name: e for e in discover_tasks(cfg)}
    job = tmp_path / "jobs" / "orig"
    for i, name in enumerate(["test/zeta", "test/alpha"]):
        tid = f"{i:08x}" * 8
        r = config_error_result(entries[name], cfg, backend="docker", attempt=1, trial_id=tid)
        TrialStore(JobPaths(job).trial(name, 1, tid)).create().write_result(r)
    copy = tmp_path / "elsewhere" / "copy"
    shutil.copytree(job, copy)
    bad = copy / "trials" / "broken__1__ffffffff"
    bad.mkdir()
    (bad / "result.json").write_text("{not json")
    with caplog.at_level(logging.ERROR, logger="cairn.job"):
        result = read_job(copy)
    assert "unreadable" in caplog.text  # reported, never silently skipped
    assert result.summary.n_trials == 2 and result.summary.errors == {"config_error": 2}
    assert result.exit_code == 1
    assert JobResult(job_dir=copy, results=[], summary=result.summary).exit_code == 1


def test_config_file_accepts_flag_spellings(tmp_path):
    from cairn.errors import UsageError
    from cairn.job.configfile import read_config_file

    f = tmp_path / "job.yaml"
    f.write_text("p: tasks\nk: 3\nn-concurrent: 2\nno-verify: true\ne: docker\ni: 'org/*'\n")
    assert read_config_file(f).data == {
        "paths": ["tasks"],
        "attempts": 3,
        "n_concurrent": 2,
        "verify": False,
        "backend": "docker",
        "include": ["org/*"],
    }
    f.write_text("- a\n- b\n")
    with pytest.raises(UsageError, match=r"job.yaml: expected a mapping of options"):
        read_config_file(f)


def test_summary_written_again_only_when_it_changed(tmp_path):
    """The job's end rewrites summary.json only when it differs from what this run last wrote
    (#13: one atomic, fsync'ed write fewer per job); a changed summary, or a file gone meanwhile,
    is written again."""
    import os

    from cairn.job.runner import JobRun
    from cairn.results.store import read_summary

    job_dir = tmp_path / "job"
    job = JobRun(JobConfig(paths=("x",)), "local", job_dir, resume=False, retry_errors=False, observer=None)
    summary_json = JobPaths(job_dir).summary_json
    job.write_summary()
    first = os.stat(summary_json).st_ino  # an atomic rewrite replaces the file (a new inode)
    job.write_summary()
    assert os.stat(summary_json).st_ino == first
    job.declared_steps["org/task"] = ["main"]  # the task now appears in the summary
    job.write_summary()
    assert os.stat(summary_json).st_ino != first
    assert [t.name for t in read_summary(job_dir).tasks] == ["org/task"]
    summary_json.unlink()
    job.write_summary()
    assert [t.name for t in read_summary(job_dir).tasks] == ["org/task"]
