"""Resolving datasets and repositories through the API, without sandboxes: two concurrent
jobs share one fetch, a registry that went away is read from its saved copy, a resumed job
replays its recorded commits, and the datasets stage imports no later stage (issue 16)."""

from __future__ import annotations

import ast
import json
import multiprocessing
from pathlib import Path

import pytest

from cairn.datasets.cache import TaskCache
from cairn.datasets.resolve import resolve_sources
from cairn.errors import DatasetError
from gitserve import SmartHTTP, bare_clone, commit_all, init_repo
from taskgen import write_task

SRC = Path(__file__).resolve().parents[2] / "src" / "cairn"


@pytest.fixture
def served(tmp_path):
    work = init_repo(tmp_path / "work")
    for n in ("a", "b"):
        write_task(work / "tasks", n)
    c1 = commit_all(work)
    srv = tmp_path / "srv"
    srv.mkdir()
    bare_clone(work, srv / "tasks.git")
    files = tmp_path / "files"
    files.mkdir()
    with SmartHTTP(srv, files) as http:
        reg = [
            {
                "name": "demo",
                "version": "1.0",
                "description": "",
                "tasks": [
                    {"name": n, "git_url": http.url("tasks.git"), "git_commit_id": c1, "path": f"tasks/{n}"}
                    for n in ("a", "b")
                ],
            }
        ]
        (files / "registry.json").write_text(json.dumps(reg))
        yield http, c1, tmp_path


def _resolve(cache_root: str, registry_url: str, q) -> None:
    res = resolve_sources(datasets=["demo@1.0"], registry_url=registry_url, cache=TaskCache(Path(cache_root)))
    q.put([str(t.path) for t in res.tasks])


def test_two_concurrent_jobs_share_one_fetch(served):
    http, _c1, tmp = served
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    procs = [
        ctx.Process(target=_resolve, args=(str(tmp / "cache"), http.file_url("registry.json"), q))
        for _ in range(2)
    ]
    for p in procs:
        p.start()
    got = [q.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert got[0] == got[1] and len(got[0]) == 2
    uploads = [r for r in http.requests if r.endswith("/git-upload-pack")]
    assert len(uploads) == 1  # the second job waited on the lock and found the cached tasks


def test_registry_copy_and_recorded_commits_carry_a_resume_through_an_outage(served):
    http, c1, tmp = served
    cache = TaskCache(tmp / "cache")
    url = http.file_url("registry.json")
    first = resolve_sources(datasets=["demo@1.0"], registry_url=url, cache=cache)
    assert [t.source.commit for t in first.tasks] == [c1, c1]
    http.stop()
    offline = resolve_sources(datasets=["demo@1.0"], registry_url=url, cache=cache)
    assert [t.path for t in offline.tasks] == [t.path for t in first.tasks]
    assert any("using the copy saved on" in n for n in offline.notes)

    import shutil

    shutil.rmtree(tmp / "cache" / "registries")  # no saved copy either: only the job's records
    with pytest.raises(DatasetError, match=f"registry {url} is unreachable"):
        resolve_sources(datasets=["demo@1.0"], registry_url=url, cache=cache)
    replay = resolve_sources(datasets=["demo@1.0"], registry_url=url, cache=cache, previous=first.records)
    assert [(t.path, t.source) for t in replay.tasks] == [(t.path, t.source) for t in first.tasks]
    assert "running the tasks and commits recorded when the job started" in replay.notes[0]
    assert replay.records == first.records


def test_the_datasets_stage_imports_no_later_stage():
    later = ("cairn.job", "cairn.trial", "cairn.sandbox", "cairn.agents", "cairn.cli", "cairn.results.store")
    for f in (SRC / "datasets").glob("*.py"):
        tree = ast.parse(f.read_text())
        mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        mods |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert not {m for m in mods if m.startswith(later)}, f.name


def test_registry_file_tasks_without_git_url_are_folders_next_to_it(tmp_path):
    from cairn.job.discover import discover_inputs
    from cairn.plan import JobConfig

    write_task(tmp_path / "reg" / "local", "one")
    write_task(tmp_path / "reg" / "local", "two")
    f = tmp_path / "reg" / "registry.json"
    f.write_text(
        json.dumps(
            [
                {
                    "name": "loc",
                    "version": "0.1",
                    "description": "",
                    "tasks": [{"name": "two", "path": "local/two"}, {"name": "one", "path": "local/one"}],
                }
            ]
        )
    )
    inputs = discover_inputs(JobConfig(datasets=("loc",), registry_path=f, n_tasks=1))
    (e,) = inputs.entries  # -l 1: the first in registry order
    assert (e.name, e.path) == ("test/two", tmp_path / "reg" / "local" / "two")
    assert e.source.model_dump() == {
        "registry": str(f),
        "dataset": "loc",
        "dataset_version": "0.1",
        "git_url": None,
        "git_ref": None,
        "commit": None,
        "path": "local/two",
    }
    assert inputs.notes == ["dataset loc: no version given, using the highest, loc@0.1"]
    assert inputs.sources[0]["tasks"][0] == {
        "name": "two",
        "git_url": None,
        "git_ref": None,
        "commit": None,
        "path": "local/two",
    }


def test_a_url_registry_cannot_name_a_task_by_path_alone(served):
    http, _c1, tmp = served
    (tmp / "files" / "p.json").write_text(
        json.dumps([{"name": "p", "version": "1", "description": "", "tasks": [{"name": "x", "path": "x"}]}])
    )
    with pytest.raises(
        DatasetError,
        match="dataset p@1: task x has no git_url; a task given by path alone needs a registry file",
    ):
        resolve_sources(
            datasets=["p@1"], registry_url=http.file_url("p.json"), cache=TaskCache(tmp / "cache")
        )


def test_job_yaml_takes_dataset_keys_under_flag_spellings(tmp_path):
    from cairn.job.configfile import read_config_file
    from cairn.plan import JobConfig

    f = tmp_path / "job.yaml"
    f.write_text(
        "d: demo@1.0\nrepo: [https://example.invalid/t.git@v1]\nrepo_path: tasks\n"
        "l: 3\nregistry_url: http://127.0.0.1:1/r.json\n"
    )
    cfg = JobConfig.model_validate(read_config_file(f).data)
    assert (cfg.datasets, cfg.repos, cfg.repo_path, cfg.n_tasks, cfg.registry_url) == (
        ("demo@1.0",),
        ("https://example.invalid/t.git@v1",),
        "tasks",
        3,
        "http://127.0.0.1:1/r.json",
    )
