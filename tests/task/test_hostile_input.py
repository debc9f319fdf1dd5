"""Hostile or broken task and job files: a clear error naming the file, in bounded time, never a
traceback or a hang (docs/task-format.md "File limits", "Symlinks").

Every command runs as a real ``cairn`` subprocess with a timeout, so a regression to a hang
fails the test instead of stalling the suite.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cairn._util.inputfiles import MAX_INPUT_BYTES, InputFileError, load_yaml, read_input
from cairn.errors import UnsupportedError
from cairn.sandbox.docker.compose_files import check_compose_file
from cairn.task.load import check_task
from cairncli import run_cairn
from taskgen import write_task

TIMEOUT = 90  # seconds; the longest case takes a few seconds on a loaded 2-core machine

COMPOSE = "environment/docker-compose.yaml"


def cairn(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return run_cairn(*args, cwd=cwd, timeout=TIMEOUT, env=dict(os.environ))


def no_traceback(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "RecursionError" not in proc.stdout + proc.stderr


def alias_bomb(prefix: str = "") -> str:
    """Nine anchors of nine aliases each: 9**9 (387 million) nodes once expanded."""
    out = f'{prefix}a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    prev = "a"
    for name in "bcdefghi":
        out += f"{prefix}{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]\n"
        prev = name
    return out


def deep_compose(levels: int = 5000) -> str:
    return "services:\n  main:\n    image: debian:bookworm-slim\n    x: " + "[" * levels + "]" * levels + "\n"


# -- 1. deep nesting ---------------------------------------------------------------------------


def test_deeply_nested_compose_is_a_clear_error_everywhere(tmp_path: Path) -> None:
    task = write_task(tmp_path, "deep", files={COMPOSE: deep_compose()})
    compose = task / COMPOSE
    for env in ("none", "docker"):
        proc = cairn("tasks", "check", "-e", env, str(task))
        no_traceback(proc)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert f"{compose}:4: error: nested more than 100 levels deep" in proc.stdout
    # the backend's own check (what a run calls) says the same, without a traceback
    with pytest.raises(UnsupportedError, match="docker-compose.yaml: nested more than 100"):
        check_compose_file(compose)


@pytest.mark.docker
def test_deeply_nested_compose_is_a_clear_error_in_a_dry_run(tmp_path: Path) -> None:
    """``cairn run --dry-run -e docker`` (its preflight asks the engine) names the file too."""
    task = write_task(tmp_path, "deep", files={COMPOSE: deep_compose()})
    compose = task / COMPOSE
    proc = cairn("run", "-p", str(task), "--dry-run", "-e", "docker", cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "nested more than 100 levels deep" in proc.stdout + proc.stderr
    assert str(compose) in proc.stdout + proc.stderr


# -- 2. FIFOs, alias bombs, sizes ---------------------------------------------------------------

FIFO_PLACES = [
    "environment/docker-compose.yaml",
    "task.toml",
    "tests/test.sh",
    "instruction.md",
    "tests/data.bin",
]


@pytest.mark.docker
def test_a_fifo_is_refused_by_name_without_opening_it(tmp_path: Path) -> None:
    tasks = []
    for k, rel in enumerate(FIFO_PLACES):
        task = write_task(tmp_path, f"fifo{k}")
        (task / rel).unlink(missing_ok=True)
        os.mkfifo(task / rel)
        tasks.append(task)
    proc = cairn("tasks", "check", "-e", "none", *map(str, tasks))
    no_traceback(proc)
    assert proc.returncode == 1
    for task, rel in zip(tasks, FIFO_PLACES, strict=True):
        assert f"{task / rel}: error: is a FIFO, not a regular file" in proc.stdout
    assert "missing" not in proc.stdout  # not reported as absent
    proc = cairn("run", "-p", str(tasks[0]), "--dry-run", "-e", "docker", cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 1
    assert f"{tasks[0] / FIFO_PLACES[0]}: error: is a FIFO" in proc.stdout + proc.stderr


def test_a_fifo_or_folder_test_sh_is_reported_as_what_it_is_not_as_missing(tmp_path: Path) -> None:
    """A shared tests/test.sh (multi-step), a step's own and a single-step task's that is a FIFO
    or a folder gets one error saying so, never also "neither … test.sh exists"."""
    from taskgen import StepSpec

    cases = []
    for kind in ("fifo", "folder"):
        shared = write_task(tmp_path, f"shared-{kind}", steps=[StepSpec("a", test=None)])
        own = write_task(tmp_path, f"own-{kind}", steps=[StepSpec("a", test=None)])
        single = write_task(tmp_path, f"single-{kind}")
        for task, rel in (
            (shared, "tests/test.sh"),
            (own, "steps/a/tests/test.sh"),
            (single, "tests/test.sh"),
        ):
            (task / rel).parent.mkdir(parents=True, exist_ok=True)
            (task / rel).unlink(missing_ok=True)
            os.mkfifo(task / rel) if kind == "fifo" else (task / rel).mkdir()
            cases.append((task, rel, kind))
    for task, rel, kind in cases:
        found = [(f.path, f.text) for f in check_task(task) if f.is_error]
        why = (
            "is a FIFO, not a regular file: a task holds regular files, folders and symlinks "
            "only (cairn does not open it)"
            if kind == "fifo"
            else "is a folder: cairn runs this path as a script, it must be a file"
        )
        assert found == [(task / rel, why)], (rel, found)


def test_tree_hash_does_not_open_a_fifo(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a")
    os.mkfifo(tmp_path / "pipe")
    code = (
        "import sys; from pathlib import Path; from cairn._util.treehash import tree_hash; "
        "print(tree_hash(Path(sys.argv[1])))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=TIMEOUT
    )
    assert proc.returncode == 0 and len(proc.stdout.strip()) == 64, proc.stderr


def test_compose_alias_bomb_is_refused_fast(tmp_path: Path) -> None:
    compose = "services:\n  main:\n    build: .\n" + alias_bomb("x-")
    task = write_task(tmp_path, "bomb", files={COMPOSE: compose})
    proc = cairn("tasks", "check", "-e", "none", str(task))
    no_traceback(proc)
    assert proc.returncode == 1
    assert f"{task / COMPOSE}:10: error: aliases expand to more than 1,000,000 nodes" in proc.stdout


def test_job_file_alias_bomb_and_fifo_are_usage_errors(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(alias_bomb())
    proc = cairn("run", "-c", str(bomb), "--dry-run", cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 2
    assert f"cairn: error: {bomb}:7: aliases expand to more than 1,000,000 nodes" in proc.stderr
    fifo = tmp_path / "job.yaml"
    os.mkfifo(fifo)
    proc = cairn("run", "-c", str(fifo), "--dry-run", cwd=tmp_path)
    assert proc.returncode == 2
    assert f"cairn: error: {fifo}: is a FIFO, not a regular file" in proc.stderr
    proc = cairn("run", "--env-file", str(fifo), "--dry-run", cwd=tmp_path)
    assert proc.returncode == 2
    assert f"--env-file {fifo}: is a FIFO, not a regular file" in proc.stderr
    deep = tmp_path / "deep.yaml"
    deep.write_text("agent: " + "[" * 5000 + "]" * 5000 + "\n")
    proc = cairn("run", "-c", str(deep), "--dry-run", cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 2 and "nested more than 100 levels deep" in proc.stderr


BIG = [("task.toml", 57), ("instruction.md", 40), (COMPOSE, 40)]
"""Files cairn parses for meaning: refused over the cap."""
BIG_RUN = [("tests/test.sh", 120), ("environment/Dockerfile", 45)]
"""Files cairn runs or builds as they are: over the cap only the checks skip them."""


def test_files_over_the_cap_are_refused_by_size(tmp_path: Path) -> None:
    tasks = []
    for k, (rel, mib) in enumerate(BIG + BIG_RUN):
        task = write_task(tmp_path, f"big{k}")
        with (task / rel).open("a") as fh:  # sparse: the size is refused before any byte is read
            fh.truncate(mib << 20)
        tasks.append(task)
    proc = cairn("tasks", "check", "-e", "none", *map(str, tasks))
    no_traceback(proc)
    assert proc.returncode == 1
    for task, (rel, mib) in zip(tasks, BIG + BIG_RUN, strict=True):
        if (rel, mib) in BIG:
            assert f"{task / rel}: error: is {mib}.0 MiB, over cairn's limit of 1.0 MiB" in proc.stdout
        else:
            warning = (
                f"{task / rel}: warning: is {mib}.0 MiB, over the 1 MiB cairn reads for "
                "its checks: not checked (it still runs as it is) [too-big-to-check]"
            )
            assert warning in proc.stdout
            assert f"{task}: ok" in proc.stdout


@pytest.mark.local
def test_a_verifier_over_the_cap_still_runs_and_scores(tmp_path: Path) -> None:
    """A test.sh with 2 MiB of expected data inline is a legal task: it runs (local backend) and
    scores 1; the check only warns that it did not read it."""
    from testbed import local_available

    if not local_available():
        pytest.skip("local backend not available")
    import json

    data = "# expected output line kept inline by a generated verifier\n" * 40_000
    task = write_task(
        tmp_path, "bigtest", test=data + "echo 1 > /logs/verifier/reward.txt\n", solve="true\r\n"
    )
    assert (task / "tests" / "test.sh").stat().st_size > 2 * MAX_INPUT_BYTES
    proc = cairn(
        "run", "-p", str(task), "-a", "oracle", "-e", "local", "-o", str(tmp_path / "jobs"), "--job-name", "j"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASS reward=1.00" in proc.stdout + proc.stderr
    # the run keeps the check's warning with the task's other validation warnings (CRLF here)
    (result,) = (tmp_path / "jobs" / "j" / "trials").glob("*/result.json")
    warnings = json.loads(result.read_text())["warnings"]
    assert (
        f"{task}/tests/test.sh: warning: is 2.3 MiB, over the 1 MiB cairn reads for its "
        "checks: not checked (it still runs as it is)"
    ) in warnings
    assert (
        f"{task}/solution/solve.sh: warning: CRLF line endings (cairn normalises them when "
        "it runs the script; convert the file to LF)"
    ) in warnings


def test_continued_lines_up_to_the_cap_check_in_bounded_time(tmp_path: Path) -> None:
    """A backslash-continued test.sh and Dockerfile just under the cap: linear-time readers."""
    n = MAX_INPUT_BYTES // 7 - 100
    task = write_task(
        tmp_path,
        "cont",
        test="echo \\\n" * n + "x\necho 1 > /logs/verifier/reward.txt\n",
        dockerfile="FROM debian:bookworm-slim\nRUN echo \\\n" + "  a \\\n" * n + "  b\n",
    )
    assert (task / "tests/test.sh").stat().st_size < MAX_INPUT_BYTES
    proc = cairn("tasks", "check", "-e", "none", str(task))  # the timeout bounds it
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith(f"{task}: ok")


def test_job_file_over_the_cap_is_refused(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("n_attempts: 1\n" + "# padding\n" * (MAX_INPUT_BYTES // 10 + 1))
    proc = cairn("run", "-c", str(job), "--dry-run", cwd=tmp_path)
    assert proc.returncode == 2
    assert f"cairn: error: {job}: is 1.0 MiB, over cairn's limit" in proc.stderr


def test_read_input_refuses_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    with pytest.raises(InputFileError, match="is a FIFO") as err:
        read_input(fifo)
    assert err.value.path == fifo
    with pytest.raises(InputFileError, match="is a folder"):
        read_input(tmp_path)
    with pytest.raises(InputFileError, match="cannot read"):
        read_input(tmp_path / "missing")
    small = tmp_path / "s"
    small.write_bytes(b"12345")
    assert read_input(small, limit=5) == b"12345"
    with pytest.raises(InputFileError, match="over cairn's limit"):
        read_input(small, limit=4)


def test_ordinary_anchors_and_merge_keys_keep_working(tmp_path: Path) -> None:
    text = (
        "x-base: &base\n  image: debian:bookworm-slim\n  environment: {A: '1'}\n"
        "x-priv: &priv\n  privileged: true\n"
        "services:\n  main:\n    <<: *base\n    command: sleep infinity\n"
        "  db:\n    <<: [*base, *priv]\n"
    )
    doc = load_yaml(text, "c.yaml")
    assert doc["services"]["main"] == {
        "image": "debian:bookworm-slim",
        "environment": {"A": "1"},
        "command": "sleep infinity",
    }
    assert doc["services"]["db"]["privileged"] is True
    task = write_task(tmp_path, "anchors", files={COMPOSE: text})
    findings = check_task(task)
    assert not [f for f in findings if f.is_error]
    # the lint reads the merged document: the privileged service it got by a merge key
    assert [f.rule for f in findings if "db" in f.text] == ["compose-privileged"]


def test_recursive_alias_is_refused() -> None:
    with pytest.raises(InputFileError, match="alias \\*a refers to a node that contains it"):
        load_yaml("a: &a [1, [2, *a]]\n", "r.yaml")


# -- 3. compose files every backend refuses, without a backend ---------------------------------

REFUSED_COMPOSE = [
    ("services: {}\n", "no service named `main`"),
    ("version: '3'\n", "a compose environment needs a `services` table"),
    ("- main\n", "a compose environment needs a `services` table"),
    ("services:\n  main: [\n", "not readable as YAML"),
]


def test_none_backend_reports_what_every_backend_refuses(tmp_path: Path) -> None:
    tasks = []
    for k, (compose, expected) in enumerate(REFUSED_COMPOSE):
        task = write_task(tmp_path, f"c{k}", files={COMPOSE: compose})
        (task / "environment" / "Dockerfile").unlink()
        with pytest.raises(UnsupportedError) as backend:  # the docker compose backend's check
            check_compose_file(task / COMPOSE)
        assert expected in str(backend.value)
        tasks.append((task, str(backend.value).split(": ", 1)[1]))
    proc = cairn("tasks", "check", "-e", "none", *(str(t) for t, _ in tasks))
    assert proc.returncode == 1, proc.stdout
    for task, reason in tasks:
        line = next(x for x in proc.stdout.splitlines() if str(task / COMPOSE) in x)
        # the backend's reason word for word (YAML errors: up to PyYAML's position text)
        assert reason.split(' in "')[0].replace("\n", " ") in line, (line, reason)


def test_compose_without_main_is_fine_when_cairn_supplies_main(tmp_path: Path) -> None:
    task = write_task(tmp_path, "c", files={COMPOSE: "services:\n  db:\n    image: postgres:16\n"})
    assert not [f for f in check_task(task) if f.is_error]  # main built from the Dockerfile


# -- 5. symlinks -------------------------------------------------------------------------------


def test_symlinked_task_toml(tmp_path: Path) -> None:
    other = write_task(tmp_path, "other")
    outside = write_task(tmp_path, "outside")
    (outside / "task.toml").unlink()
    (outside / "task.toml").symlink_to(other / "task.toml")
    proc = cairn("tasks", "check", "-e", "none", str(outside))
    assert proc.returncode == 1
    assert (
        f"{outside / 'task.toml'}: error: is a symlink to {other / 'task.toml'}, outside the task folder"
    ) in proc.stdout
    dangling = write_task(tmp_path, "dangling")
    (dangling / "task.toml").unlink()
    (dangling / "task.toml").symlink_to("gone.toml")
    proc = cairn("tasks", "check", "-e", "none", str(dangling))
    assert proc.returncode == 1
    assert (
        f"{dangling / 'task.toml'}: error: is a symlink to gone.toml, which does not exist"
    ) in proc.stdout
    inside = write_task(tmp_path, "inside")
    (inside / "task.toml").rename(inside / "real.toml")
    (inside / "task.toml").symlink_to("real.toml")
    proc = cairn("tasks", "check", "-e", "none", str(inside))
    assert proc.returncode == 0 and proc.stdout.strip() == f"{inside}: ok"


def test_symlinked_tests_folder(tmp_path: Path) -> None:
    other = write_task(tmp_path, "other")
    cases = []
    for target in ("inside", "outside", "absolute"):
        task = write_task(tmp_path, target)
        if target == "inside":
            (task / "tests").rename(task / "verifier")
            link = "verifier"
        else:
            shutil.rmtree(task / "tests")
            link = str(other / "tests") if target == "absolute" else "../other/tests"
        (task / "tests").symlink_to(link)
        cases.append((task, link))
    proc = cairn("tasks", "check", "-e", "none", *(str(t) for t, _ in cases))
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        f"{task / 'tests'}: error: is a symlink (to {link}): cairn uploads this folder into "
        "the sandbox without following links, so the sandbox would get the link, not the "
        "files; make it a real folder [invalid-task-files]"
        for task, link in cases
    ]


def test_links_inside_uploaded_folders_that_leave_them_are_errors(tmp_path: Path) -> None:
    """A step's test.sh linked to another step's (``../../b/tests/test.sh``) was ok to the
    check, then uploaded as a link that points at nothing in the sandbox (the verifier: "No
    such file"). Such a link is now an error naming it; a link inside the folder is fine; an
    absolute one is a warning (it points at the sandbox's own path)."""
    from taskgen import StepSpec

    task = write_task(tmp_path, "linked", steps=[StepSpec("a"), StepSpec("b")])
    a_tests = task / "steps" / "a" / "tests"
    (a_tests / "test.sh").unlink()
    (a_tests / "test.sh").symlink_to("../../b/tests/test.sh")
    (task / "steps" / "b" / "tests" / "run.sh").symlink_to("test.sh")  # inside: fine
    (task / "steps" / "b" / "tests" / "py").symlink_to("/usr/bin/python3")
    proc = cairn("tasks", "check", "-e", "none", str(task))
    no_traceback(proc)
    assert proc.returncode == 1, proc.stdout
    leaves = (
        f"{a_tests / 'test.sh'}: error: is a symlink to ../../b/tests/test.sh, which "
        "leaves steps/a/tests/: cairn uploads links as links, so in the sandbox it "
        "points at nothing; copy the file into steps/a/tests/ (or link to one inside it)"
    )
    assert leaves in proc.stdout
    assert "run.sh" not in proc.stdout
    absolute = (
        f"{task / 'steps' / 'b' / 'tests' / 'py'}: warning: is a symlink to "
        "/usr/bin/python3: it is uploaded as a link"
    )
    assert absolute in proc.stdout


def test_symlinked_environment_folder(tmp_path: Path) -> None:
    inside = write_task(tmp_path, "inside")
    (inside / "environment").rename(inside / "env-real")
    (inside / "environment").symlink_to("env-real")
    assert not [f for f in check_task(inside) if f.is_error]  # built from, on the host
    other = write_task(tmp_path, "other")
    outside = write_task(tmp_path, "outside")
    shutil.rmtree(outside / "environment")
    (outside / "environment").symlink_to(other / "environment")
    errors = [f for f in check_task(outside) if f.is_error]
    assert [(f.path, f.text) for f in errors] == [
        (
            outside / "environment",
            f"is a symlink to {other / 'environment'}, outside the task folder: a task must hold "
            "its own files (its content hash and copies keep the link, not what it points to); "
            "copy them in",
        )
    ]


def test_dangling_tests_folder_link_is_not_reported_as_missing_test(tmp_path: Path) -> None:
    task = write_task(tmp_path, "t")
    shutil.rmtree(task / "tests")
    (task / "tests").symlink_to("/nonexistent-cairn-tests")
    errors = [f for f in check_task(task) if f.is_error]
    assert [(f.path, f.text.split(":")[0]) for f in errors] == [
        (task / "tests", "is a symlink (to /nonexistent-cairn-tests)")
    ]
