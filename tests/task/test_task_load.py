"""Issue 2 acceptance lines and the resolved Task/Step shape (design §1, §2)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cairn.errors import TaskFormatError
from cairn.task.findings import Finding
from cairn.task.load import check_task, find_tasks, load_dataset, load_task, task_dirs
from taskfiles import (
    TWO_STEP_TOML,
    line_of,
    single_step_factory,
    two_step_factory,
    write_files,
)


@pytest.fixture
def two_step(tmp_path):
    """Factory writing the two-step task of issue 2 (see taskfiles.two_step_factory)."""
    return two_step_factory(tmp_path)


@pytest.fixture
def single_step(tmp_path):
    """Factory writing a valid single-step task (see taskfiles.single_step_factory)."""
    return single_step_factory(tmp_path)


def errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == "error"]


def warnings(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == "warning"]


# -- acceptance: the two-step task ---------------------------------------------------------------


def test_two_step_task_validates_clean(two_step):
    task_dir = two_step()
    assert check_task(task_dir) == []
    assert check_task(task_dir, strict=True) == []
    task = load_task(task_dir)
    assert task.multi_step is True
    assert task.config.multi_step_reward_strategy == "final"
    assert [s.name for s in task.steps] == ["write", "append"]
    assert [s.index for s in task.steps] == [1, 2]
    write, append = task.steps
    assert write.min_reward == 1.0 and append.min_reward is None
    assert write.agent_timeout_sec == 300 and append.agent_timeout_sec == 300
    assert write.verifier_timeout_sec == 60 and append.verifier_timeout_sec == 60
    assert write.instruction == "Do write.\n"
    assert write.test_sh == task.path / "steps/write/tests/test.sh"
    assert write.solve_sh == task.path / "steps/write/solution/solve.sh"
    assert write.tests_dirs == (task.path / "steps/write/tests",)
    assert write.solution_dirs == (task.path / "steps/write/solution",)
    assert write.dir_name == "01-write" and append.dir_name == "02-append"
    assert task.warnings == ()


def test_missing_step_folder_is_an_error_naming_folder_and_step(two_step):
    task_dir = two_step()
    shutil.rmtree(task_dir / "steps" / "append")
    found = errors(check_task(task_dir))
    assert len(found) == 1
    assert "steps/append" in found[0].text and "`append`" in found[0].text
    assert found[0].path == task_dir / "task.toml"
    assert found[0].line == line_of(task_dir / "task.toml", 'name = "append"')
    with pytest.raises(TaskFormatError) as exc:
        load_task(task_dir)
    assert exc.value.findings == found
    assert "steps/append" in str(exc.value)


def test_undeclared_step_folder_warns_and_strict_makes_it_an_error(two_step):
    task_dir = two_step(extra={"steps/extra/instruction.md": "x\n"})
    found = check_task(task_dir)
    assert errors(found) == []
    [w] = warnings(found)
    assert "steps/extra" in w.text and w.path == task_dir / "steps" / "extra"
    assert load_task(task_dir).warnings == (w,)
    strict = check_task(task_dir, strict=True)
    assert [f.severity for f in strict] == ["error"] and "steps/extra" in strict[0].text
    with pytest.raises(TaskFormatError, match=r"invalid task .*two-steps: 1 error"):
        load_task(task_dir, strict=True)


@pytest.mark.parametrize("bad", ["../x", "a/b", "..", "", ".hidden", "sp ace"])
def test_unsafe_step_name_is_an_error(two_step, bad):
    toml = TWO_STEP_TOML + f'\n[[steps]]\nname = "{bad}"\n'
    task_dir = two_step(toml)
    found = errors(check_task(task_dir))
    assert len(found) == 1
    assert found[0].line == len(toml.splitlines())  # the `name = ...` line
    with pytest.raises(TaskFormatError, match=r"invalid task .*two-steps: 1 error"):
        load_task(task_dir)


def test_duplicate_step_name_is_an_error(two_step):
    toml = TWO_STEP_TOML.replace('name = "append"', 'name = "write"')
    task_dir = two_step(toml)
    found = errors(check_task(task_dir))
    assert any("duplicate step name `write`" in f.text for f in found)
    dup = next(f for f in found if "duplicate" in f.text)
    assert dup.line == len(toml.splitlines())  # the second `name = "write"`


def test_misspelled_environment_key_warns_with_key_and_line(two_step):
    toml = TWO_STEP_TOML.replace(
        'network_mode = "no-network"', 'network_mode = "no-network"\nmemroy_mb = 512'
    )
    task_dir = two_step(toml)
    [w] = check_task(task_dir)
    assert w.severity == "warning"
    assert "memroy_mb" in w.text and "memory_mb" in w.text  # named, with a suggestion
    assert w.line == line_of(task_dir / "task.toml", "memroy_mb")
    assert str(w) == f"{task_dir / 'task.toml'}:{w.line}: warning: {w.text}"
    load_task(task_dir)  # a warning does not stop loading


def test_min_reward_string_is_an_error_with_its_line(two_step):
    toml = TWO_STEP_TOML.replace("min_reward = 1.0", 'min_reward = "high"')
    task_dir = two_step(toml)
    [e] = check_task(task_dir)
    assert e.severity == "error" and "min_reward" in e.text
    assert e.line == line_of(task_dir / "task.toml", 'min_reward = "high"')


def test_min_reward_table_of_numbers_is_valid(two_step):
    toml = TWO_STEP_TOML.replace("min_reward = 1.0", "min_reward = { safety = 1 }")
    task_dir = two_step(toml)
    assert check_task(task_dir) == []
    assert load_task(task_dir).steps[0].min_reward == {"safety": 1.0}


def test_min_reward_table_with_a_string_is_an_error_at_its_line(two_step):
    toml = TWO_STEP_TOML.replace("min_reward = 1.0", 'min_reward = { safety = 1, style = "x" }')
    task_dir = two_step(toml)
    [e] = check_task(task_dir)
    assert "min_reward.style" in e.text
    assert e.line == line_of(task_dir / "task.toml", "min_reward")


def test_embedded_env_template_is_an_error_whole_template_is_valid(two_step):
    bad = TWO_STEP_TOML.replace("[verifier]\n", '[verifier.env]\nTOKEN = "Bearer ${KEY}"\n\n[verifier]\n')
    task_dir = two_step(bad, name="bad")
    [e] = check_task(task_dir)
    assert e.severity == "error" and "TOKEN" in e.text
    assert e.line == line_of(task_dir / "task.toml", "TOKEN")
    good = TWO_STEP_TOML.replace("[verifier]\n", '[verifier.env]\nTOKEN = "${KEY:-x}"\n\n[verifier]\n')
    task = load_task(two_step(good, name="good"))
    assert task.steps[0].verifier_env == {"TOKEN": "${KEY:-x}"}  # kept as a template


def test_agent_timeout_defaults_to_3600_when_unset(two_step):
    toml = TWO_STEP_TOML.replace("[agent]\ntimeout_sec = 300\n", "")
    task = load_task(two_step(toml))
    assert [s.agent_timeout_sec for s in task.steps] == [3600.0, 3600.0]


def test_step_verifier_timeout_falls_back_to_task_level(two_step):
    toml = TWO_STEP_TOML.replace('name = "append"', 'name = "append"\n[steps.verifier]\ntimeout_sec = 5')
    task = load_task(two_step(toml))
    assert [s.verifier_timeout_sec for s in task.steps] == [60.0, 5.0]
    no_task_level = toml.replace("[verifier]\ntimeout_sec = 60\n", "")
    task = load_task(two_step(no_task_level, name="b"))
    assert [s.verifier_timeout_sec for s in task.steps] == [600.0, 5.0]


# -- resolution of steps ------------------------------------------------------------------------


def test_step_fallbacks_users_env_mode_and_files(two_step):
    toml = """\
artifacts = ["/app/task.log"]

[agent]
user = "agent"

[verifier]
user = "root"
environment_mode = "shared"

[verifier.env]
A = "task"
B = "task"

[environment]
network_mode = "no-network"

[[steps]]
name = "write"
artifacts = [{ source = "/app/out.txt", destination = "out.txt" }]
setup_timeout_sec = 30
healthcheck = { command = "true", retries = 1 }
[steps.agent]
user = 1000
timeout_sec = 10
[steps.verifier]
env = { B = "step", C = "step" }

[[steps]]
name = "append"
"""
    task_dir = two_step(
        toml,
        extra={
            "tests/test.sh": "echo 1 > /logs/verifier/reward.txt\n",
            "tests/helper.py": "",
            "solution/solve.sh": "true\n",
            "steps/write/workdir/setup.sh": "true\n",
        },
    )
    shutil.rmtree(task_dir / "steps/append/tests")
    shutil.rmtree(task_dir / "steps/append/solution")
    assert check_task(task_dir) == []
    task = load_task(task_dir)
    write, append = task.steps
    assert (write.agent_user, append.agent_user) == (1000, "agent")
    assert (write.agent_timeout_sec, append.agent_timeout_sec) == (10.0, 3600.0)
    assert write.verifier_user == append.verifier_user == "root"
    assert write.verifier_env == {"A": "task", "B": "step", "C": "step"}
    assert append.verifier_env == {"A": "task", "B": "task"}
    assert write.verifier_mode == append.verifier_mode == "shared"
    root = task.path
    assert write.test_sh == root / "steps/write/tests/test.sh"
    assert append.test_sh == root / "tests/test.sh"
    assert write.tests_dirs == (root / "tests", root / "steps/write/tests")
    assert append.tests_dirs == (root / "tests",)
    assert write.solve_sh == root / "steps/write/solution/solve.sh"
    assert append.solve_sh == root / "solution/solve.sh"
    assert write.solution_dirs == (root / "solution", root / "steps/write/solution")
    assert write.workdir_dir == root / "steps/write/workdir"
    assert write.setup_sh == root / "steps/write/workdir/setup.sh"
    assert append.workdir_dir is None and append.setup_sh is None
    assert [a.source for a in write.artifacts] == ["/app/task.log", "/app/out.txt"]
    assert [a.effective_destination for a in write.artifacts] == ["app/task.log", "out.txt"]
    assert [a.source for a in append.artifacts] == ["/app/task.log"]
    assert write.setup_timeout_sec == 30 and append.setup_timeout_sec == 600
    assert write.healthcheck is not None and write.healthcheck.retries == 1
    assert append.healthcheck is None


def test_separate_verifier_mode_falls_back_to_task_level(two_step):
    toml = TWO_STEP_TOML.replace(
        "[verifier]\ntimeout_sec = 60\n",
        '[verifier]\ntimeout_sec = 60\nenvironment_mode = "separate"\n'
        '[verifier.environment]\ndocker_image = "debian:bookworm-slim"\n',
    )
    task = load_task(two_step(toml))
    assert [s.verifier_mode for s in task.steps] == ["separate", "separate"]
    assert task.steps[1].verifier_environment.docker_image == "debian:bookworm-slim"


def test_single_step_task_is_one_step_named_main(single_step):
    task_dir = single_step(
        toml='[task]\nname = "org/one"\n[agent]\ntimeout_sec = 20\n'
        '[environment]\nnetwork_mode = "no-network"\n'
    )
    assert check_task(task_dir) == []
    task = load_task(task_dir)
    assert task.name == "org/one" and task.slug == "org-one" and not task.multi_step
    [main] = task.steps
    assert main.name == "main" and main.index == 1 and main.dir_name == "01-main"
    assert main.instruction == "Write /app/out.txt.\n"
    assert main.test_sh == task.path / "tests/test.sh"
    assert main.tests_dirs == (task.path / "tests",)
    assert main.solution_dirs == (task.path / "solution",)
    assert main.solve_sh == task.path / "solution/solve.sh"
    assert main.agent_timeout_sec == 20 and main.verifier_timeout_sec == 600
    assert task.path.is_absolute() and task.dockerfile == task.path / "environment/Dockerfile"


def test_task_name_defaults_to_folder_name(single_step):
    assert load_task(single_step(name="my-task")).name == "my-task"


def test_version_alias_and_legacy_allow_internet(single_step):
    task = load_task(single_step(toml='version = "1.0"\n[environment]\nallow_internet = false\n'))
    assert task.config.schema_version == "1.0"
    assert task.environment.effective_network_mode == "no-network"


def test_load_task_of_a_folder_without_task_toml_raises(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(TaskFormatError) as exc:
        load_task(tmp_path / "empty")
    assert "task.toml" in str(exc.value)
    with pytest.raises(TaskFormatError, match=r"invalid task .*missing: 1 error"):
        load_task(tmp_path / "missing")


# -- task.md ------------------------------------------------------------------------------------


def test_task_md_with_toml_front_matter(tmp_path):
    root = write_files(
        tmp_path / "md",
        {
            "task.md": "+++\n[agent]\ntimeout_sec = 12\n[environment]\ndocker_image = "
            '"debian:bookworm-slim"\nmemroy_mb = 3\n+++\nWrite the file.\n',
            "tests/test.sh": "echo 1 > /logs/verifier/reward.txt\n",
        },
    )
    [w] = check_task(root)
    assert w.path == root / "task.md" and w.line == 6 and "memroy_mb" in w.text
    task = load_task(root)
    assert task.steps[0].instruction == "Write the file.\n"
    assert task.steps[0].agent_timeout_sec == 12


def test_task_md_with_yaml_front_matter(tmp_path):
    root = write_files(
        tmp_path / "md",
        {
            "task.md": "---\nagent:\n  timeout_sec: 12\nenvironment:\n  docker_image: x:1\n"
            "  cpus: many\n---\nDo it.\n",
            "tests/test.sh": "echo 1 > /logs/verifier/reward.txt\n",
        },
    )
    [e] = check_task(root)
    assert e.severity == "error" and "environment.cpus" in e.text and e.line == 6
    (root / "task.md").write_text(
        "---\nagent:\n  timeout_sec: 12\nenvironment:\n  docker_image: x:1\n---\nDo it.\n"
    )
    assert load_task(root).steps[0].instruction == "Do it.\n"


def test_task_toml_wins_over_task_md(single_step):
    task_dir = single_step(extra={"task.md": "not even front matter"})
    assert check_task(task_dir) == []


def test_task_md_without_front_matter_is_an_error(tmp_path):
    root = write_files(tmp_path / "md", {"task.md": "just text\n"})
    [e] = check_task(root)
    assert e.path == root / "task.md" and "front-matter" in e.text


# -- datasets -----------------------------------------------------------------------------------


def test_find_tasks_tells_a_task_from_a_dataset(tmp_path, single_step):
    a = single_step(name="b-task")
    b = single_step(name="a-task")
    (tmp_path / "not-a-task").mkdir()
    assert find_tasks(a) == [a]
    assert find_tasks(tmp_path) == [b, a]
    assert task_dirs(tmp_path) == [b, a]
    assert load_dataset(tmp_path) == [b, a]
    assert find_tasks(tmp_path / "not-a-task") == []
    with pytest.raises(TaskFormatError, match=r"not-a-task: not a task \(no task.toml or task.md\)"):
        load_dataset(tmp_path / "not-a-task")


def test_hashes_are_filled_and_follow_content(single_step):
    task_dir = single_step()
    first = load_task(task_dir)
    assert len(first.content_hash) == 64 and len(first.env_hash) == 64
    (task_dir / "tests/test.sh").write_text("echo 0 > /logs/verifier/reward.txt\n")
    second = load_task(task_dir)
    assert second.content_hash != first.content_hash
    assert second.env_hash == first.env_hash  # tests/ is not part of the image
    Path(task_dir / "environment/extra.txt").write_text("x")
    assert load_task(task_dir).env_hash != first.env_hash
