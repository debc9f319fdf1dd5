"""``cairn tasks check`` and ``cairn tasks init`` from the command line (design §2, §9)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import cairn.cli.tasks  # noqa: F401  (importing registers the commands on tasks_app)
from cairn.cli import app
from cairn.task.init import init_task
from cairncli import run_cairn

runner = CliRunner()


def run_cli(*args: str, cwd: Path | None = None):
    old = Path.cwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        return runner.invoke(app, list(args))
    finally:
        os.chdir(old)


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    """A dataset folder of 3 tasks; `b-broken` lacks its second step's folder."""
    root = tmp_path / "dataset"
    root.mkdir()
    init_task("a-good", ["write", "append"], root)
    init_task("b-broken", ["write", "append"], root)
    init_task("c-good", [], root)
    shutil.rmtree(root / "b-broken" / "steps" / "append")
    return root


@pytest.mark.local
def test_dataset_with_one_broken_task(dataset):
    result = run_cli("tasks", "check", str(dataset))
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    toml = dataset / "b-broken" / "task.toml"
    broken = [line for line in lines if line.startswith(f"{toml}:")]
    assert len(broken) == 1 and ": error: " in broken[0] and "steps/append" in broken[0]
    assert f"{dataset / 'a-good'}: ok" in lines
    assert f"{dataset / 'c-good'}: ok" in lines
    assert f"{dataset / 'b-broken'}: ok" not in lines
    assert len(lines) == 3


@pytest.mark.local
def test_clean_tasks_exit_zero_and_print_ok(dataset):
    result = run_cli("tasks", "check", str(dataset / "a-good"), str(dataset / "c-good"))
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [f"{dataset / 'a-good'}: ok", f"{dataset / 'c-good'}: ok"]


def test_relative_paths_are_printed_as_given(dataset):
    result = run_cli("tasks", "check", "b-broken", cwd=dataset)
    assert result.exit_code == 1
    line = result.stdout.splitlines()[0]
    assert line.startswith("b-broken/task.toml:")
    assert line.split(":")[1].isdigit()


@pytest.mark.local
def test_warnings_print_and_strict_turns_them_into_errors(dataset):
    task = dataset / "a-good"
    with (task / "task.toml").open("a") as fh:
        fh.write("\n[verifier.environment]\nmemroy_mb = 1\n")
    result = run_cli("tasks", "check", str(task))
    assert result.exit_code == 0
    n = len((task / "task.toml").read_text().splitlines())
    assert result.stdout.splitlines() == [
        f"{task / 'task.toml'}:{n}: warning: unknown key `memroy_mb` in "
        "[verifier.environment] (did you mean `memory_mb`?) [unknown-config-field]",
        f"{task}: ok (1 warning(s))",
    ]
    strict = run_cli("tasks", "check", "--strict", str(task))
    assert strict.exit_code == 1
    assert strict.stdout.splitlines() == [
        f"{task / 'task.toml'}:{n}: error: unknown key `memroy_mb` in "
        "[verifier.environment] (did you mean `memory_mb`?) [unknown-config-field]"
    ]


def test_a_path_that_is_no_task(tmp_path):
    result = run_cli("tasks", "check", str(tmp_path / "nope"), str(tmp_path))
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        f"{tmp_path / 'nope'}: error: does not exist [invalid-task-files]",
        f"{tmp_path}: error: not a task (no task.toml or task.md) and holds no task folders "
        "[invalid-task-files]",
    ]


@pytest.mark.local
def test_init_writes_skeletons_that_pass_strict_check(tmp_path):
    single = run_cli("tasks", "init", "hello", "--dir", str(tmp_path))
    assert single.exit_code == 0 and "single-step" in single.stdout
    multi = run_cli(
        "tasks", "init", "steps", "--name", "org/steps", "--steps", "a,b,c", "--dir", str(tmp_path)
    )
    assert multi.exit_code == 0 and "3-step" in multi.stdout
    assert sorted(p.name for p in (tmp_path / "steps" / "steps").iterdir()) == ["a", "b", "c"]
    check = run_cli("tasks", "check", "--strict", str(tmp_path))
    assert check.exit_code == 0
    assert check.stdout.splitlines() == [f"{tmp_path / 'hello'}: ok", f"{tmp_path / 'steps'}: ok"]


def test_init_defaults_to_the_current_folder_and_refuses_bad_names(tmp_path):
    assert run_cli("tasks", "init", "here", cwd=tmp_path).exit_code == 0
    assert (tmp_path / "here" / "task.toml").is_file()
    again = run_cli("tasks", "init", "here", cwd=tmp_path)
    assert again.exit_code == 2 and "not empty" in again.stderr
    bad = run_cli("tasks", "init", "x", "--steps", "a,../b", cwd=tmp_path)
    assert bad.exit_code == 2 and not (tmp_path / "x").exists()


@pytest.mark.local
def test_init_accepts_a_path_and_names_the_task_after_its_last_part(tmp_path):
    from cairn.task.load import load_task

    made = run_cli("tasks", "init", "path/to/my-task", cwd=tmp_path)
    assert made.exit_code == 0, made.stderr
    root = tmp_path / "path" / "to" / "my-task"
    assert load_task(root).name == "local/my-task"  # last component, under the default org
    assert f"created single-step task {Path('path/to/my-task')}" in made.stdout
    named = run_cli("tasks", "init", str(tmp_path / "ds" / "fix"), "--name", "org/fix-bug", "--steps", "a,b")
    assert named.exit_code == 0, named.stderr
    assert load_task(tmp_path / "ds" / "fix").name == "org/fix-bug"
    check = run_cli("tasks", "check", "--strict", str(root), str(tmp_path / "ds" / "fix"))
    assert check.exit_code == 0, check.stdout
    bad = run_cli("tasks", "init", "path/to/bad name", cwd=tmp_path)
    assert bad.exit_code == 2 and "invalid task name" in bad.stderr
    assert not (tmp_path / "path" / "to" / "bad name").exists()


@pytest.mark.local
def test_check_through_the_console_entry_point(dataset):
    proc = run_cairn("tasks", "check", str(dataset), timeout=60)
    assert proc.returncode == 1
    assert f"{dataset / 'a-good'}: ok" in proc.stdout.splitlines()
    ok = run_cairn("tasks", "check", str(dataset / "c-good"), timeout=60)
    assert ok.returncode == 0 and ok.stdout == f"{dataset / 'c-good'}: ok\n"
