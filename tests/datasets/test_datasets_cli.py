"""Datasets by name and git repositories, end to end through ``cairn`` (issue 16 acceptance).

Every repository and the registry are served by the test itself on 127.0.0.1 (``git daemon``,
``git http-backend`` behind a local HTTP server, and ``file://``); nothing reaches the
internet. Trials run on the local backend (tiny tasks, about a second each).
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from cairncli import run_cairn
from gitserve import GitDaemon, SmartHTTP, bare_clone, commit_all, free_port, git, init_repo, push
from taskgen import constant_reward, reward_if, write_task

pytestmark = [pytest.mark.local]

TESTS = Path(__file__).resolve().parents[1]
SRC = TESTS.parent / "src"


@pytest.fixture(autouse=True)
def _local():
    from testbed import backend_available

    if not backend_available("local"):
        pytest.skip("local backend not available")


def cairn(*args: str, cwd: Path, cache: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), str(TESTS / "helpers")]),
        "CAIRN_CACHE_DIR": str(cache),
    }
    p = run_cairn(*args, cwd=cwd, env=env, timeout=timeout)
    assert "Traceback" not in p.stderr, p.stderr
    p.out = p.stdout + p.stderr  # event lines go to stdout off a terminal, errors to stderr
    return p


def results(job: Path) -> dict[str, dict]:
    """task name → result.json of each trial of a job (one attempt)."""
    out = {}
    for f in sorted(job.glob("trials/*/result.json")):
        r = json.loads(f.read_text())
        out.setdefault(r["task"]["name"], r)
    return out


@dataclass
class World:
    root: Path
    work: Path
    srv: Path
    files: Path
    c1: str
    c2: str
    daemon: GitDaemon
    http: SmartHTTP

    @property
    def file_url(self) -> str:
        return f"file://{self.srv / 'tasks.git'}"

    def registry(self, datasets: list[dict], name: str = "registry.json") -> str:
        (self.files / name).write_text(json.dumps(datasets))
        return self.http.file_url(name)

    def run(self, *args: str, job: str = "job") -> subprocess.CompletedProcess:
        return cairn(
            "run",
            *args,
            "-a",
            "oracle",
            "-e",
            "local",
            "--jobs-dir",
            str(self.root / "jobs"),
            "--job-name",
            job,
            cwd=self.root,
            cache=self.root / "cache",
        )


def _task(name: str, url: str, commit: str | None, path: str | None = None) -> dict:
    t = {"name": name, "git_url": url, "path": path or f"tasks/{name}"}
    if commit is not None:
        t["git_commit_id"] = commit
    return t


@pytest.fixture
def world(tmp_path):
    """tasks.git: commit c1 (hello, bye, count pass with the oracle) and c2 (hello scores
    0.5), served by git daemon and smart HTTP; demo@1.0 pins c1 over git://, http:// and
    file://; demo@2.0 pins c2."""
    work = init_repo(tmp_path / "work")
    write_task(work / "tasks", "hello", solve="echo hi > /app/out\n", test=reward_if("grep -q hi /app/out"))
    write_task(work / "tasks", "bye", solve="echo bye > /app/out\n", test=reward_if("grep -q bye /app/out"))
    write_task(
        work / "tasks", "count", solve="seq 3 > /app/out\n", test=reward_if("test $(wc -l < /app/out) = 3")
    )
    (work / "README.md").write_text("tasks\n")
    c1 = commit_all(work, "v1")
    (work / "tasks" / "hello" / "tests" / "test.sh").write_text("#!/bin/bash\n" + constant_reward(0.5))
    c2 = commit_all(work, "v2")
    srv = tmp_path / "srv"
    srv.mkdir()
    bare_clone(work, srv / "tasks.git")
    files = tmp_path / "files"
    files.mkdir()
    with GitDaemon(srv) as daemon, SmartHTTP(srv, files) as http:
        w = World(tmp_path, work, srv, files, c1, c2, daemon, http)
        w.registry(
            [
                {
                    "name": "demo",
                    "version": "1.0",
                    "description": "three tiny tasks",
                    "tasks": [
                        _task("hello", daemon.url("tasks.git"), c1),
                        _task("bye", http.url("tasks.git"), c1),
                        _task("count", w.file_url, c1),
                    ],
                },
                {
                    "name": "demo",
                    "version": "2.0",
                    "description": "hello scores 0.5",
                    "tasks": [_task(n, daemon.url("tasks.git"), c2) for n in ("hello", "bye", "count")],
                },
            ]
        )
        yield w


def test_dataset_runs_from_three_transports_then_from_the_cache_offline(world):
    reg = world.http.file_url("registry.json")
    p = world.run("-d", "demo@1.0", "--registry-url", reg, job="first")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "shallow" in p.out and "fetching" in p.out
    job = world.root / "jobs" / "first"
    res = results(job)
    assert {n: r["reward"] for n, r in res.items()} == {"test/hello": 1.0, "test/bye": 1.0, "test/count": 1.0}
    assert res["test/bye"]["task"]["source"] == {
        "registry": reg,
        "dataset": "demo",
        "dataset_version": "1.0",
        "git_url": world.http.url("tasks.git"),
        "git_ref": None,
        "commit": world.c1,
        "path": "tasks/bye",
    }
    assert res["test/count"]["task"]["source"]["git_url"] == world.file_url
    meta = json.loads((job / "job.json").read_text())
    (rec,) = meta["sources"]
    assert (rec["kind"], rec["name"], rec["version"], rec["registry"]) == ("dataset", "demo", "1.0", reg)
    assert [(t["name"], t["commit"]) for t in rec["tasks"]] == [
        ("hello", world.c1),
        ("bye", world.c1),
        ("count", world.c1),
    ]
    assert meta["config"]["datasets"] == ["demo@1.0"]

    report = cairn("report", str(job), cwd=world.root, cache=world.root / "cache")
    assert report.returncode == 0
    assert f"demo@1.0 from {reg}" in report.stdout
    assert f"{world.daemon.url('tasks.git')} @ {world.c1[:12]}" in report.stdout

    world.daemon.stop()
    world.http.stop()
    moved = world.root / "srv-gone"
    world.srv.rename(moved)  # file:// gone too
    p = world.run("-d", "demo@1.0", "--registry-url", reg, job="offline")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "fetching" not in p.out
    assert f"registry {reg} is unreachable" in p.out and "using the copy saved" in p.out
    assert {n: r["reward"] for n, r in results(world.root / "jobs" / "offline").items()} == {
        "test/hello": 1.0,
        "test/bye": 1.0,
        "test/count": 1.0,
    }


def test_two_versions_pinned_to_two_commits_score_as_on_their_commit(world):
    reg = world.http.file_url("registry.json")
    p1 = world.run("-d", "demo@1.0", "--registry-url", reg, job="v1")
    p2 = world.run("-d", "demo", "--registry-url", reg, job="v2")
    assert p1.returncode == 0 and p2.returncode == 0, p1.stderr + p2.stderr
    assert "dataset demo: no version given, using the highest, demo@2.0 (also: 1.0)" in p2.out
    v1, v2 = results(world.root / "jobs" / "v1"), results(world.root / "jobs" / "v2")
    assert v1["test/hello"]["reward"] == 1.0 and v2["test/hello"]["reward"] == 0.5
    assert v1["test/hello"]["task"]["source"]["commit"] == world.c1
    assert v2["test/hello"]["task"]["source"]["commit"] == world.c2
    assert v2["test/hello"]["task"]["source"]["dataset_version"] == "2.0"
    assert v1["test/hello"]["task"]["content_hash"] != v2["test/hello"]["task"]["content_hash"]
    assert v1["test/bye"]["task"]["content_hash"] == v2["test/bye"]["task"]["content_hash"]

    both = world.run("-d", "demo@1.0", "-d", "demo@2.0", "--registry-url", reg, job="both")
    assert both.returncode == 2
    assert "two tasks are named 'test/hello': demo@1.0" in both.out
    assert "run them in separate jobs" in both.out


def test_force_push_does_not_change_what_a_resumed_job_runs(world):
    url = world.daemon.url("tasks.git")
    p = world.run("--repo", f"{url}@main", "--repo-path", "tasks", job="repo")
    assert p.returncode == 0, p.stdout + p.stderr
    job = world.root / "jobs" / "repo"
    first = results(job)
    assert {n: r["reward"] for n, r in first.items()} == {
        "test/hello": 0.5,
        "test/bye": 1.0,
        "test/count": 1.0,
    }  # main is c2
    assert first["test/hello"]["task"]["source"] == {
        "registry": None,
        "dataset": None,
        "dataset_version": None,
        "git_url": url,
        "git_ref": "main",
        "commit": world.c2,
        "path": "tasks/hello",
    }
    hello_result = next(job.glob("trials/test-hello__*/result.json"))
    hello_result.unlink()  # the trial is unfinished: resume runs it again

    git("reset", "-q", "--hard", world.c1, cwd=world.work)
    (world.work / "tasks" / "hello" / "tests" / "test.sh").write_text("#!/bin/bash\n" + constant_reward(0.25))
    c3 = commit_all(world.work, "rewritten")
    push(world.work, world.srv / "tasks.git", force=True)
    assert git("ls-remote", url, "main", cwd=world.root).split()[0] == c3

    r = cairn("resume", str(job), cwd=world.root, cache=world.root / "cache-empty")
    assert r.returncode == 0, r.stderr
    assert f"running commit {world.c2}, resolved when the job started" in r.out
    again = results(job)
    assert again["test/hello"]["reward"] == 0.5  # as on c2, not 0.25 as on c3
    assert again["test/hello"]["task"]["source"]["commit"] == world.c2
    assert again["test/hello"]["task"]["content_hash"] == first["test/hello"]["task"]["content_hash"]


def test_filters_limits_attempts_and_local_folders_mix_with_datasets(world, tmp_path):
    reg = world.http.file_url("registry.json")
    extra = write_task(tmp_path / "mine", "extra")
    p = world.run(
        "-d",
        "demo@1.0",
        "--registry-url",
        reg,
        "-p",
        str(extra),
        "-x",
        "*hello",
        "-l",
        "2",
        "-k",
        "2",
        job="mixed",
    )
    assert p.returncode == 0, p.stdout + p.stderr
    trials = sorted(
        f.parent.name.split("__")[0] + "#" + f.parent.name.split("__")[1]
        for f in (world.root / "jobs" / "mixed").glob("trials/*/result.json")
    )
    # -p first, then the dataset in registry order; hello excluded; the first 2 kept; 2 each
    assert trials == ["test-bye#1", "test-bye#2", "test-extra#1", "test-extra#2"]
    res = results(world.root / "jobs" / "mixed")
    assert res["test/extra"]["task"]["source"] is None


def test_entry_without_pin_warns_and_records_the_commit_used(world):
    reg = world.registry(
        [
            {
                "name": "nopin",
                "version": "1",
                "description": "",
                "tasks": [_task("count", world.daemon.url("tasks.git"), None)],
            }
        ],
        "nopin.json",
    )
    p = world.run("-d", "nopin@1", "--registry-url", reg, job="nopin")
    assert p.returncode == 0, p.stdout + p.stderr
    assert (
        f"warning: dataset nopin@1: task count has no git_commit_id pin; using "
        f"{world.daemon.url('tasks.git')} HEAD = {world.c2} (recorded in job.json)"
    ) in p.out
    src = results(world.root / "jobs" / "nopin")["test/count"]["task"]["source"]
    assert (src["commit"], src["git_ref"]) == (world.c2, "HEAD")
    meta = json.loads((world.root / "jobs" / "nopin" / "job.json").read_text())
    assert meta["sources"][0]["tasks"][0]["commit"] == world.c2


def test_one_broken_task_is_its_config_error(world):
    (world.work / "tasks" / "hello" / "tests" / "test.sh").unlink()  # no verifier
    c3 = commit_all(world.work, "broken hello")
    push(world.work, world.srv / "tasks.git")
    reg = world.registry(
        [
            {
                "name": "half",
                "version": "1",
                "description": "",
                "tasks": [_task("hello", world.file_url, c3), _task("bye", world.file_url, c3)],
            }
        ],
        "half.json",
    )
    p = world.run("-d", "half@1", "--registry-url", reg, job="half")
    assert p.returncode == 1, p.stdout + p.stderr
    res = results(world.root / "jobs" / "half")
    assert res["test/hello"]["error"]["kind"] == "config_error"
    assert res["test/hello"]["task"]["source"]["commit"] == c3
    assert res["test/bye"]["reward"] == 1.0


def test_resume_refuses_a_dataset_whose_resolution_changed(world, tmp_path):
    reg_file = tmp_path / "reg.json"
    reg_file.write_text(
        json.dumps(
            [
                {
                    "name": "demo",
                    "version": "1.0",
                    "description": "",
                    "tasks": [_task("hello", world.file_url, world.c1)],
                }
            ]
        )
    )
    p = world.run("-d", "demo@1.0", "--registry-path", str(reg_file), job="pinned")
    assert p.returncode == 0, p.stdout + p.stderr
    reg_file.write_text(
        json.dumps(
            [
                {
                    "name": "demo",
                    "version": "1.0",
                    "description": "",
                    "tasks": [_task("hello", world.file_url, world.c2)],
                }
            ]
        )
    )
    r = cairn("resume", str(world.root / "jobs" / "pinned"), cwd=world.root, cache=world.root / "cache")
    assert r.returncode == 2
    assert (
        f"dataset demo@1.0 in registry {reg_file} resolves differently than when this job "
        "started (tasks or commits changed: hello)"
    ) in r.out


def _error_cases(w: World) -> list[tuple[list[str], str]]:
    dead = f"git://127.0.0.1:{free_port()}/tasks.git"
    reg = w.registry(
        [
            {"name": "gone", "version": "1", "description": "", "tasks": [_task("hello", dead, w.c1)]},
            {
                "name": "nocommit",
                "version": "1",
                "description": "",
                "tasks": [_task("hello", w.daemon.url("tasks.git"), "f" * 40)],
            },
            {
                "name": "nopath",
                "version": "1",
                "description": "",
                "tasks": [_task("hello", w.file_url, w.c1, "tasks/nothing")],
            },
            {
                "name": "notask",
                "version": "1",
                "description": "",
                "tasks": [_task("all", w.http.url("tasks.git"), w.c1, "tasks")],
            },
        ],
        "errors.json",
    )
    return [
        (
            ["-d", "nopth@1", "--registry-url", reg],
            f"unknown dataset 'nopth' in registry {reg}; did you mean nopath, notask?",
        ),
        (["-d", "gone@7", "--registry-url", reg], f"unknown version gone@7 in registry {reg}; versions: 1"),
        (
            ["-d", "demo@1.0", "--registry-url", f"http://127.0.0.1:{free_port()}/registry.json"],
            "/registry.json is unreachable: [Errno 111] Connection refused",
        ),
        (["-d", "gone@1", "--registry-url", reg], f"repository {dead} is unreachable: "),
        (
            ["-d", "nocommit@1", "--registry-url", reg],
            f"commit {'f' * 40} does not exist in repository {w.daemon.url('tasks.git')}",
        ),
        (
            ["-d", "nopath@1", "--registry-url", reg],
            f"dataset nopath@1: task hello: path 'tasks/nothing' at commit {w.c1} of "
            f"{w.file_url} does not exist",
        ),
        (
            ["-d", "notask@1", "--registry-url", reg],
            f"dataset notask@1: task all: path 'tasks' at commit {w.c1} of "
            f"{w.http.url('tasks.git')} is not a task (no task.toml or task.md)",
        ),
        (
            ["--repo", f"{w.daemon.url('tasks.git')}@nope"],
            f"repository {w.daemon.url('tasks.git')} has no branch or tag 'nope'",
        ),
        (
            ["--repo", w.file_url, "--repo-path", "docs"],
            f"repository {w.file_url}: path 'docs' at commit {w.c2} does not exist",
        ),
    ]


def test_each_bad_source_exits_2_before_anything_runs(world):
    for i, (args, message) in enumerate(_error_cases(world)):
        p = world.run(*args, job=f"bad{i}")
        assert p.returncode == 2, (args, p.stdout + p.stderr)
        assert message in p.out, (args, p.stdout + p.stderr)
        assert not (world.root / "jobs" / f"bad{i}").exists()  # no job, no trial, no sandbox
    assert (
        "did you mean demo"
        in world.run("-d", "dmo@1.0", "--registry-url", world.http.file_url("registry.json")).out
    )


def test_datasets_list_download_export_and_cache_clean(world, tmp_path):
    reg = world.http.file_url("registry.json")
    cache = world.root / "cache"
    ls = cairn("datasets", "list", "--registry-url", reg, cwd=world.root, cache=cache)
    assert ls.returncode == 0, ls.stderr
    assert ls.stdout.splitlines() == [
        "demo@1.0      3 tasks  three tiny tasks",
        "demo@2.0      3 tasks  hello scores 0.5",
    ]
    out = tmp_path / "exported"
    dl = cairn(
        "datasets", "download", "demo@2.0", "--registry-url", reg, "-o", str(out), cwd=world.root, cache=cache
    )
    assert dl.returncode == 0, dl.stderr
    assert sorted(p.name for p in out.iterdir()) == ["bye", "count", "hello"]
    exported = out / "hello" / "tests" / "test.sh"
    assert "0.5" in exported.read_text() and os.access(exported, os.W_OK)
    assert os.stat(exported).st_mode & 0o200  # a plain, writable copy
    assert len(list((cache / "objects").iterdir())) == 3

    p = world.run("-d", "demo@1.0", "--registry-url", reg, job="keeps")  # needs c1's hello
    assert p.returncode == 0, p.stdout + p.stderr
    cl = cairn("cache", "clean", "--jobs-dir", str(world.root / "jobs"), cwd=world.root, cache=cache)
    assert cl.returncode == 0, cl.stderr
    # c2's hello (only downloaded) goes; c1's three tasks (bye and count are the same bytes
    # at c2) stay, because job "keeps" refers to them
    removed = [ln for ln in cl.stdout.splitlines() if ln.startswith("removed ")]
    assert len(removed) == 1 and removed[0].endswith("/hello")
    assert len(list((cache / "objects").iterdir())) == 3  # hello@c1, bye, count
    again = world.run("-d", "demo@1.0", "--registry-url", reg, job="after-clean")
    assert again.returncode == 0 and "fetching" not in again.out
    cl = cairn("cache", "clean", "--all", cwd=world.root, cache=cache)
    assert cl.returncode == 0 and not (cache / "objects").exists()
