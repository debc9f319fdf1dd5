"""The task lint of ``cairn tasks check`` (docs/lint.md, issue 19): one failing and one passing
task per rule, each finding checked for its rule id, file and line.

Every task here is written by the test itself (small, static: nothing is built or started).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from cairn.task.findings import Finding
from cairn.task.lint import RULES, RuleSelection, image_pin_problem, interpolate
from cairn.task.load import check_task

TOML = '[task]\nname = "test/lint"\n\n[environment]\nnetwork_mode = "no-network"\n'
DOCKERFILE = "FROM debian:bookworm-slim\nWORKDIR /app\n"
TEST_SH = "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"

LINT_RULES = {
    "compose-privileged",
    "compose-additional-capabilities",
    "compose-external-bind-mount",
    "compose-writable-bind-mount",
    "compose-symlink-bind-mount",
    "compose-external-volume",
    "unpinned-image",
    "agent-image-test-leak",
    "verifier-install-no-network",
    "overlapping-artifacts",
    "artifact-log-overlap",
    "agent-user-root",
    "unpinned-python-dependency",
}
"""The rules issue 19 asks for (each has a failing and a passing task below)."""


def make_task(
    root: Path, toml: str = TOML, files: dict[str, str | None] | None = None, name: str = "t"
) -> Path:
    """A single-step task (instruction, test.sh, environment/Dockerfile) with ``files`` laid
    over it (``None`` removes a default file)."""
    task = root / name
    layout: dict[str, str | None] = {
        "task.toml": toml,
        "instruction.md": "Do it.\n",
        "tests/test.sh": TEST_SH,
        "environment/Dockerfile": DOCKERFILE,
    }
    layout.update(files or {})
    for rel, content in layout.items():
        if content is None:
            continue
        p = task / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(content)
    return task


def lint(task: Path) -> list[tuple[str, str, int | None]]:
    """``(rule, path relative to the task, line)`` of every warning (validation and lint)."""
    found = check_task(task)
    assert not [f for f in found if f.is_error], found
    return [(f.rule, f.path.relative_to(task).as_posix(), f.line) for f in found]


def line_of(path: Path, needle: str, nth: int = 1) -> int:
    """The 1-based line of the ``nth`` line of ``path`` containing ``needle``."""
    hits = [k for k, line in enumerate(path.read_text().splitlines(), start=1) if needle in line]
    assert len(hits) >= nth, (needle, path.read_text())
    return hits[nth - 1]


def rules_of(task: Path) -> list[str]:
    return [r for r, _, _ in lint(task)]


# -- compose ---------------------------------------------------------------------------------

COMPOSE = "environment/docker-compose.yaml"


def compose_task(
    tmp: Path, services: str, extra: str = "", name: str = "t", files: dict[str, str | None] | None = None
) -> Path:
    text = "services:\n  main:\n    build: .\n" + services + extra
    return make_task(tmp, files={COMPOSE: text, **(files or {})}, name=name)


def test_compose_privileged_fails_and_passes(tmp_path):
    bad = compose_task(
        tmp_path, "    privileged: true\n  db:\n    image: postgres:16\n    pid: host\n", name="bad"
    )
    good = compose_task(tmp_path, "  db:\n    image: postgres:16\n", name="good")
    compose = bad / COMPOSE
    assert lint(bad) == [
        ("compose-privileged", COMPOSE, line_of(compose, "privileged")),
        ("compose-privileged", COMPOSE, line_of(compose, "pid: host")),
    ]
    assert lint(good) == []


def test_quoted_or_templated_privileges_are_seen_as_compose_reads_them(tmp_path):
    """`privileged: "true"` and `privileged: ${PRIV:-true}` are privileged to `docker compose
    config`; so are a templated `pid` and `cap_add`. `"false"` and `${PRIV:-false}` are not."""
    bad = compose_task(
        tmp_path,
        '    privileged: "true"\n  db:\n    image: postgres:16\n'
        "    privileged: ${PRIV:-True}\n    pid: ${PID_MODE:-host}\n"
        '    cap_add: ["${CAP:-SYS_ADMIN}"]\n',
        name="bad",
    )
    good = compose_task(
        tmp_path,
        '    privileged: "false"\n  db:\n    image: postgres:16\n    privileged: ${PRIV:-false}\n',
        name="good",
    )
    compose = bad / COMPOSE
    assert lint(bad) == [
        ("compose-privileged", COMPOSE, line_of(compose, 'privileged: "true"')),
        ("compose-privileged", COMPOSE, line_of(compose, "privileged: ${PRIV")),
        ("compose-privileged", COMPOSE, line_of(compose, "pid:")),
        ("compose-additional-capabilities", COMPOSE, line_of(compose, "cap_add")),
    ]
    (cap,) = [f for f in check_task(bad) if f.rule == "compose-additional-capabilities"]
    assert "adds SYS_ADMIN;" in cap.text
    assert lint(good) == []


def test_compose_capabilities_fail_and_pass(tmp_path):
    bad = compose_task(tmp_path, "    cap_add:\n      - NET_ADMIN\n      - SYS_PTRACE\n", name="bad")
    good = compose_task(tmp_path, "    cap_drop:\n      - ALL\n", name="good")
    found = check_task(bad)
    assert [(f.rule, f.line) for f in found] == [
        ("compose-additional-capabilities", line_of(bad / COMPOSE, "cap_add"))
    ]
    assert "NET_ADMIN, SYS_PTRACE" in found[0].text
    assert lint(good) == []


def test_host_bind_mounts_external_volumes_fail_and_project_volumes_pass(tmp_path):
    bad = compose_task(
        tmp_path,
        "    volumes:\n"
        "      - /etc:/host-etc:ro\n"
        "      - ${DATA_ROOT}:/data\n"
        "      - /var/run/docker.sock:/var/run/docker.sock\n"
        "      - shared:/shared\n"
        "      - type: bind\n"
        "        source: ../../outside\n"
        "        target: /o\n"
        "        read_only: true\n",
        extra="volumes:\n  shared:\n    external: true\n",
        name="bad",
    )
    good = compose_task(
        tmp_path,
        "    volumes:\n"
        "      - cache:/cache\n"
        "      - ${HOST_AGENT_LOGS_PATH}:${ENV_AGENT_LOGS_PATH}\n"
        "      - /scratch\n"
        "      - ./data:/data:ro\n"
        "      - type: bind\n"
        "        source: ${CONTEXT_DIR}/data\n"
        "        target: /data2\n"
        "        read_only: true\n",
        extra="volumes:\n  cache: {}\n",
        name="good",
        files={"environment/data/x.txt": "x\n"},
    )
    c = bad / COMPOSE
    assert lint(bad) == [
        ("compose-external-bind-mount", COMPOSE, line_of(c, "/etc:/host-etc")),
        ("compose-external-bind-mount", COMPOSE, line_of(c, "${DATA_ROOT}")),
        ("compose-external-bind-mount", COMPOSE, line_of(c, "docker.sock")),
        ("compose-external-volume", COMPOSE, line_of(c, "shared:/shared")),
        ("compose-external-bind-mount", COMPOSE, line_of(c, "type: bind")),
        ("compose-external-volume", COMPOSE, line_of(c, "external: true")),
    ]
    texts = [f.text for f in check_task(bad)]
    assert "${DATA_ROOT}" in texts[1] and "Docker socket" in texts[2]
    assert lint(good) == []


def test_writable_bind_of_the_task_files_fails_read_only_passes(tmp_path):
    files = {"environment/data/x.txt": "x\n"}
    bad = compose_task(tmp_path, "    volumes:\n      - ./data:/data\n", name="bad", files=files)
    good = compose_task(tmp_path, "    volumes:\n      - ./data:/data:ro\n", name="good", files=files)
    assert lint(bad) == [("compose-writable-bind-mount", COMPOSE, line_of(bad / COMPOSE, "./data:/data"))]
    assert lint(good) == []


def test_symlinked_bind_source_fails_a_real_folder_passes(tmp_path):
    bad = compose_task(
        tmp_path, "    volumes:\n      - ./linked:/data:ro\n", name="bad", files={"shared/x.txt": "x\n"}
    )
    os.symlink("../shared", bad / "environment" / "linked")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    escape = compose_task(tmp_path, "    volumes:\n      - ./out:/data:ro\n", name="escape")
    os.symlink(outside, escape / "environment" / "out")
    good = compose_task(
        tmp_path,
        "    volumes:\n      - ./real:/data:ro\n",
        name="good",
        files={"environment/real/x.txt": "x\n"},
    )
    line = line_of(bad / COMPOSE, "./linked")
    found = check_task(bad)
    assert [(f.rule, f.line) for f in found] == [("compose-symlink-bind-mount", line)]
    assert "environment/linked" in found[0].text and "../shared" in found[0].text
    assert rules_of(escape) == ["compose-symlink-bind-mount", "compose-external-bind-mount"]
    assert lint(good) == []


# -- images ----------------------------------------------------------------------------------


def test_unpinned_images_fail_and_tagged_ones_pass(tmp_path):
    bad = make_task(
        tmp_path,
        TOML.replace("[environment]\n", '[environment]\ndocker_image = "tools:latest"\n'),
        files={
            COMPOSE: "services:\n  main:\n    build: .\n  cache:\n    image: redis\n"
            "  web:\n    image: ${WEB_IMAGE:-nginx:latest}\n",
            "environment/Dockerfile": "FROM python AS build\nFROM build\n",
        },
        name="bad",
    )
    good = make_task(
        tmp_path,
        TOML.replace("[environment]\n", '[environment]\ndocker_image = "tools:1.4"\n'),
        files={
            COMPOSE: "services:\n  main:\n    build: .\n    image: mine\n  cache:\n"
            "    image: redis:7.2@sha256:" + "a" * 64 + "\n  web:\n    image: ${WEB_IMAGE}\n",
            "environment/Dockerfile": "FROM python:3.12-slim AS build\nFROM build\n",
        },
        name="good",
    )
    c = bad / COMPOSE
    assert lint(bad) == [
        ("unpinned-image", "environment/Dockerfile", 1),  # validation's (same rule id)
        ("unpinned-image", COMPOSE, line_of(c, "image: redis")),
        ("unpinned-image", COMPOSE, line_of(c, "nginx:latest")),
        ("unpinned-image", "task.toml", line_of(bad / "task.toml", "docker_image")),
    ]
    assert lint(good) == []


def test_separate_verifier_images_are_checked_too(tmp_path):
    toml = TOML + '\n[verifier]\nenvironment_mode = "separate"\n'
    bad = make_task(tmp_path, toml, files={"tests/Dockerfile": "FROM python:latest\n"}, name="bad")
    good = make_task(tmp_path, toml, files={"tests/Dockerfile": "FROM python:3.12-slim\n"}, name="good")
    assert lint(bad) == [("unpinned-image", "tests/Dockerfile", 1)]
    assert lint(good) == []


@pytest.mark.parametrize(
    ("image", "problem"),
    [
        ("debian", "has no tag"),
        ("localhost:5000/team/img", "has no tag"),
        ("img:latest", "uses `:latest`"),
        ("debian:bookworm-slim", None),
        ("localhost:5000/img:1", None),
        ("img@sha256:" + "0" * 64, None),
        ("scratch", None),
        ("${IMAGE}", None),
    ],
)
def test_image_pin_problem(image, problem):
    assert image_pin_problem(image) == problem


# -- test leak -------------------------------------------------------------------------------

TEST_PY = "def test_answer():\n    assert open('/app/out').read() == '42\\n'\n"


def test_copy_of_a_test_file_into_the_agent_image_fails(tmp_path):
    bad = make_task(
        tmp_path,
        files={
            "tests/test_outputs.py": TEST_PY,
            "environment/checks/test_outputs.py": TEST_PY,  # a copy of the verifier's file
            "environment/Dockerfile": DOCKERFILE + "COPY checks/ /app/checks/\n",
        },
        name="bad",
    )
    good = make_task(
        tmp_path,
        files={
            "tests/test_outputs.py": TEST_PY,
            "environment/tests/fixture.txt": "input data\n",  # environment/tests is not tests/
            "environment/Dockerfile": DOCKERFILE + "COPY tests/ /app/tests/\n",
        },
        name="good",
    )
    found = check_task(bad)
    assert [(f.rule, f.path.relative_to(bad).as_posix(), f.line) for f in found] == [
        ("agent-image-test-leak", "environment/Dockerfile", 3)
    ]
    assert "environment/checks/test_outputs.py" in found[0].text
    assert "tests/test_outputs.py" in found[0].text
    assert lint(good) == []


def test_copy_dotdot_resolves_inside_the_build_context(tmp_path):
    """``COPY ../tests`` in environment/Dockerfile cannot reach the task's tests/: Docker
    cleans a source against the context root (BuildKit copies environment/tests, the classic
    builder refuses the path), so it leaks only when what it names there is the tests' copy."""
    good = make_task(
        tmp_path,
        files={
            "tests/test_outputs.py": TEST_PY,
            "solution/solve.sh": "echo 42 > /app/out\n",
            "environment/tests/fixture.txt": "input data\n",
            "environment/Dockerfile": DOCKERFILE + "COPY ../tests /app/tests/\n"
            "ADD ../../solution /opt/s\nCOPY ../* /app/\n",
        },
        name="good",
    )
    bad = make_task(
        tmp_path,
        files={
            "tests/test_outputs.py": TEST_PY,
            "environment/tests/test_outputs.py": TEST_PY,  # the verifier's file, duplicated
            "environment/Dockerfile": DOCKERFILE + "COPY ../tests /app/tests/\n",
        },
        name="bad",
    )
    assert lint(good) == []
    found = check_task(bad)
    assert [(f.rule, f.path.relative_to(bad).as_posix(), f.line) for f in found] == [
        ("agent-image-test-leak", "environment/Dockerfile", 3)
    ]
    assert "`environment/tests/test_outputs.py`, the same file as `tests/test_outputs.py`" in found[0].text


def test_a_build_context_holding_tests_and_solution_fails(tmp_path):
    bad = make_task(
        tmp_path,
        files={
            COMPOSE: "services:\n  main:\n    build:\n      context: ..\n"
            "      dockerfile: environment/Dockerfile\n",
            "environment/Dockerfile": DOCKERFILE + "COPY . /app\n",
            "solution/solve.sh": "echo 42 > /app/out\n",
        },
        name="bad",
    )
    ignored = make_task(
        tmp_path,
        files={
            COMPOSE: "services:\n  main:\n    build:\n      context: ..\n"
            "      dockerfile: environment/Dockerfile\n",
            "environment/Dockerfile": DOCKERFILE + "COPY environment/app /app\n",
            "environment/app/main.py": "print('hi')\n",
            ".dockerignore": "tests\nsolution/\n",
            "solution/solve.sh": "echo 42 > /app/out\n",
        },
        name="ignored",
    )
    c = bad / COMPOSE
    found = check_task(bad)
    assert [(f.rule, f.path.relative_to(bad).as_posix(), f.line) for f in found] == [
        ("agent-image-test-leak", "environment/Dockerfile", 3),
        ("agent-image-test-leak", COMPOSE, line_of(c, "context: ..")),
    ]
    assert "`solution/`" in found[1].text and "`tests/`" in found[1].text
    assert "`COPY .`" in found[0].text
    assert lint(ignored) == []


def test_a_dockerignore_exception_that_re_includes_a_test_file_is_a_leak(tmp_path):
    """`.dockerignore` with `tests` then `!tests/test.sh` puts test.sh back into the build
    context (Docker reads later lines last): the context holds a test file again."""
    reincluded = make_task(
        tmp_path,
        files={
            COMPOSE: "services:\n  main:\n    build:\n      context: ..\n"
            "      dockerfile: environment/Dockerfile\n",
            "environment/Dockerfile": DOCKERFILE + "COPY . /app\n",
            ".dockerignore": "tests\n!tests/test.sh\nsolution/\n",
            "solution/solve.sh": "echo 42 > /app/out\n",
        },
        name="reincluded",
    )
    found = check_task(reincluded)
    assert [(f.rule, f.path.relative_to(reincluded).as_posix()) for f in found] == [
        ("agent-image-test-leak", "environment/Dockerfile"),
        ("agent-image-test-leak", COMPOSE),
    ]
    assert "`tests/`" in found[1].text and "`solution/`" not in found[1].text


def test_mounting_the_tests_into_the_sandbox_fails(tmp_path):
    bad = compose_task(tmp_path, "    volumes:\n      - ../tests:/opt/t:ro\n", name="bad")
    assert lint(bad) == [("agent-image-test-leak", COMPOSE, line_of(bad / COMPOSE, "../tests"))]


def test_a_step_solution_copied_into_the_image_fails(tmp_path):
    toml = TOML + '\n[[steps]]\nname = "a"\n\n[[steps]]\nname = "b"\n'
    solve_b = "#!/bin/bash\nsed -i 's/version = 1/version = 2/' /app/config.toml\n"
    base = {
        "tests/test.sh": TEST_SH,
        "steps/a/instruction.md": "A\n",
        "steps/b/instruction.md": "B\n",
        "steps/b/solution/solve.sh": solve_b,
        "instruction.md": None,
    }
    bad = make_task(
        tmp_path,
        toml,
        files={
            **base,
            "environment/helper.sh": solve_b,
            "environment/Dockerfile": DOCKERFILE + "COPY helper.sh /usr/local/bin/\n",
        },
        name="bad",
    )
    good = make_task(
        tmp_path,
        toml,
        files={
            **base,
            "environment/helper.sh": "#!/bin/bash\necho helper\n",
            "environment/Dockerfile": DOCKERFILE + "COPY helper.sh /usr/local/bin/\n",
        },
        name="good",
    )
    found = check_task(bad)
    assert [(f.rule, f.line) for f in found] == [("agent-image-test-leak", 3)]
    assert "steps/b/solution/solve.sh" in found[0].text
    assert lint(good) == []


# -- verifier downloads under no-network ------------------------------------------------------


def test_verifier_install_under_no_network_fails_with_network_passes(tmp_path):
    script = (
        "#!/bin/bash\nset -uo pipefail\n"
        "apt-get update && apt-get install -y jq\n"
        "pip install pytest==8.3.4\n"
        "curl -fsSL https://example.org/data.json -o /tmp/d.json\n"
        "curl -fsS http://server:8080/health\n"  # a compose service: no internet needed
        "echo 1 > /logs/verifier/reward.txt\n"
    )
    bad = make_task(tmp_path, files={"tests/test.sh": script}, name="bad")
    public = make_task(
        tmp_path, TOML.replace("no-network", "public"), files={"tests/test.sh": script}, name="public"
    )
    offline = make_task(
        tmp_path,
        files={
            "tests/test.sh": (
                "#!/bin/bash\npip install --no-index --find-links /tests/wheels pytest==8.3.4\n"
                "UV_OFFLINE=1 uv run --with pytest==8.3.4 pytest /tests\n"
            )
        },
        name="offline",
    )
    t = bad / "tests" / "test.sh"
    assert lint(bad) == [
        ("verifier-install-no-network", "tests/test.sh", 3),
        ("verifier-install-no-network", "tests/test.sh", 4),
        ("verifier-install-no-network", "tests/test.sh", line_of(t, "example.org")),
    ]
    assert "`apt-get update`" in check_task(bad)[0].text
    assert lint(public) == []
    assert lint(offline) == []


def test_an_install_through_env_by_path_is_an_install(tmp_path):
    """`/usr/bin/env pip install` and `/usr/bin/sudo apt-get install` are read through their
    wrapper as `env`/`sudo` are."""
    task = make_task(
        tmp_path,
        files={
            "tests/test.sh": (
                "#!/bin/bash\n/usr/bin/env PIP_QUIET=1 pip install pytest==8.3.4\n"
                "/usr/bin/sudo -u root apt-get install -y jq\n"
                "/usr/bin/env -S 'uvx ruff==0.6.0 check /app'\n"
                "/usr/bin/env python3 -c 'print(1)' > /logs/verifier/reward.txt\n"
            )
        },
    )
    assert lint(task) == [
        ("verifier-install-no-network", "tests/test.sh", 2),
        ("verifier-install-no-network", "tests/test.sh", 3),
        ("verifier-install-no-network", "tests/test.sh", 4),
    ]


def test_verifier_network_follows_the_phase_and_each_step(tmp_path):
    toml = (
        '[task]\nname = "test/lint"\n\n[environment]\nnetwork_mode = "public"\n\n'
        '[verifier]\nnetwork_mode = "no-network"\n\n'
        '[[steps]]\nname = "a"\n\n[[steps]]\nname = "b"\n[steps.verifier]\n'
        'network_mode = "public"\n'
    )
    fetch = "#!/bin/bash\nuvx pytest==8.3.4 /tests\necho 1 > /logs/verifier/reward.txt\n"
    task = make_task(
        tmp_path,
        toml,
        files={
            "instruction.md": None,
            "tests/test.sh": None,
            "steps/a/instruction.md": "A\n",
            "steps/a/tests/test.sh": fetch,
            "steps/b/instruction.md": "B\n",
            "steps/b/tests/test.sh": fetch,
        },
    )
    found = check_task(task)
    assert [(f.rule, f.path.relative_to(task).as_posix(), f.line) for f in found] == [
        ("verifier-install-no-network", "steps/a/tests/test.sh", 2)
    ]
    assert found[0].text.startswith("step `a`: ")


def test_separate_verifier_network_comes_from_its_environment(tmp_path):
    script = "#!/bin/bash\nbash -c 'wget -q https://example.org/x'\necho 1 > /logs/verifier/reward.txt\n"
    toml = TOML.replace("no-network", "public") + (
        '\n[verifier]\nenvironment_mode = "separate"\n[verifier.environment]\n'
        'docker_image = "python:3.12-slim"\nnetwork_mode = "no-network"\n'
    )
    bad = make_task(tmp_path, toml, files={"tests/test.sh": script}, name="bad")
    good = make_task(
        tmp_path,
        toml.replace('network_mode = "no-network"\n', ""),
        files={"tests/test.sh": script},
        name="good",
    )
    assert lint(bad) == [("verifier-install-no-network", "tests/test.sh", 2)]
    assert lint(good) == []


def test_uv_run_of_a_script_with_inline_dependencies_needs_the_network(tmp_path):
    check = "# /// script\n# dependencies = [\"pytest==8.3.4\"]\n# ///\nprint('ok')\n"
    task = make_task(
        tmp_path,
        files={
            "tests/check.py": check,
            "tests/test.sh": ("#!/bin/bash\nuv run /tests/check.py && echo 1 > /logs/verifier/reward.txt\n"),
        },
    )
    assert lint(task) == [("verifier-install-no-network", "tests/test.sh", 2)]


# -- artifacts -------------------------------------------------------------------------------


def test_overlapping_artifacts_fail_covered_and_separate_ones_pass(tmp_path):
    bad = make_task(
        tmp_path,
        'artifacts = ["/app/out", { source = "/data", destination = "app/out/data" }]\n' + TOML,
        name="bad",
    )
    good = make_task(tmp_path, 'artifacts = ["/app/out", "/app/out/x.txt", "/app/log"]\n' + TOML, name="good")
    found = check_task(bad)
    assert [(f.rule, f.line) for f in found] == [("overlapping-artifacts", 1)]
    assert "`app/out`" in found[0].text and "`app/out/data`" in found[0].text
    assert lint(good) == []


def test_step_artifacts_overlap_with_the_task_level_ones(tmp_path):
    toml = (
        'artifacts = ["/app/out"]\n' + TOML + '\n[[steps]]\nname = "a"\n'
        'artifacts = [{ source = "/srv/report", destination = "app/out/report" }]\n'
    )
    task = make_task(tmp_path, toml, files={"instruction.md": None, "steps/a/instruction.md": "A\n"})
    found = check_task(task)
    assert [(f.rule, f.line) for f in found] == [
        ("overlapping-artifacts", line_of(task / "task.toml", "/srv/report"))
    ]
    assert "(`artifacts[0]`)" in found[0].text


def test_artifacts_under_logs_fail(tmp_path):
    bad = make_task(
        tmp_path,
        'artifacts = ["/logs/agent/trace.json", "/logs/artifacts/x", "/app/out"]\n' + TOML,
        name="bad",
    )
    good = make_task(tmp_path, 'artifacts = ["/app/out", "/var/log/app.log"]\n' + TOML, name="good")
    assert [(r, line) for r, _, line in lint(bad)] == [
        ("artifact-log-overlap", 1),
        ("artifact-log-overlap", 1),
    ]
    assert lint(good) == []


def test_the_log_overlap_wording_says_under_or_contains_truly(tmp_path):
    """`/logs/verifier` is under /logs; `/` is not: it is the whole filesystem, which contains
    /logs (the task.toml rule and a run's `--artifact` warning say the same)."""
    from cairn.job.preflight import artifact_warnings

    task = make_task(tmp_path, 'artifacts = ["/logs/verifier", "/", "/logs"]\n' + TOML)
    texts = [f.text for f in check_task(task) if f.rule == "artifact-log-overlap"]
    verifier = (
        "`/logs/verifier` is emptied before artifacts are collected (what the agent left "
        "there is kept as planted-verifier-logs), and a separate verifier gets the "
        "artifacts at their paths, over its own logs"
    )
    root = (
        "/logs holds cairn's own folders, which it collects its own way (`/logs/artifacts` "
        "after every step, `/logs/agent` moved to the step's agent/ folder and "
        "`/logs/verifier` emptied before artifacts are collected): the entry copies "
        "`/logs/artifacts` a second time, and a separate verifier gets the files over its "
        "own logs"
    )
    logs = "/logs holds cairn's agent, verifier and artifact folders"
    assert texts == [
        f"artifact `/logs/verifier` is under /logs: {verifier}; write the output somewhere else "
        "(or to /logs/artifacts without an entry)",
        f"artifact `/` is the whole filesystem, which contains /logs: {root}; collect the "
        "folders the output is in instead",
        f"artifact `/logs` is /logs itself: {logs}; write the output somewhere else (or to "
        "/logs/artifacts without an entry)",
    ]
    assert artifact_warnings(["/logs/verifier", "/", "/logs/x", "/app"], []) == [
        f"--artifact /logs/verifier is under /logs: {verifier}; collect the output from "
        "somewhere else (artifact-log-overlap)",
        f"--artifact / is the whole filesystem, which contains /logs: {root}; collect the "
        "folders the output is in instead (artifact-log-overlap)",
        f"--artifact /logs/x is under /logs: {logs}; collect the output from somewhere else "
        "(artifact-log-overlap)",
    ]


# -- agent user ------------------------------------------------------------------------------


def test_root_agent_user_against_the_images_user_fails(tmp_path):
    image = DOCKERFILE + "RUN useradd -m agent\nUSER agent\n"
    toml = TOML + '\n[agent]\nuser = "root"\n'
    bad = make_task(tmp_path, toml, files={"environment/Dockerfile": image}, name="bad")
    root_image = make_task(tmp_path, toml, name="root-image")  # the image is root anyway
    unset = make_task(tmp_path, files={"environment/Dockerfile": image}, name="unset")
    found = check_task(bad)
    assert [(f.rule, f.line) for f in found] == [
        ("agent-user-root", line_of(bad / "task.toml", 'user = "root"'))
    ]
    assert "`USER agent`" in found[0].text
    assert lint(root_image) == []
    assert lint(unset) == []


def test_a_step_that_overrides_a_non_root_agent_user_with_root_fails(tmp_path):
    toml = (
        TOML + '\n[agent]\nuser = "agent"\n\n[[steps]]\nname = "a"\n\n'
        '[[steps]]\nname = "b"\n[steps.agent]\nuser = 0\n'
    )
    task = make_task(
        tmp_path,
        toml,
        files={"instruction.md": None, "steps/a/instruction.md": "A\n", "steps/b/instruction.md": "B\n"},
    )
    found = check_task(task)
    assert [(f.rule, f.line) for f in found] == [("agent-user-root", line_of(task / "task.toml", "user = 0"))]
    assert "steps[1].agent.user" in found[0].text and "'agent'" in found[0].text


def test_compose_main_user_counts_as_the_tasks_word(tmp_path):
    task = make_task(
        tmp_path,
        TOML + '\n[agent]\nuser = "root:root"\n',
        files={COMPOSE: 'services:\n  main:\n    build: .\n    user: "1000:1000"\n'},
    )
    assert [r for r, _, _ in lint(task)] == ["agent-user-root"]


# -- unpinned Python dependencies -------------------------------------------------------------


def test_unpinned_inline_script_dependencies_fail_pinned_pass(tmp_path):
    meta = (
        '# /// script\n# requires-python = ">=3.11"\n# dependencies = [\n'
        '#   "pytest==8.3.4",\n#   "requests>=2",\n#   "numpy",\n# ]\n# ///\n'
        "import requests\n"
    )
    pinned = '# /// script\n# dependencies = ["pytest==8.3.4", "requests===2.32.3"]\n# ///\n'
    bad = make_task(
        tmp_path,
        TOML.replace("no-network", "public"),
        files={
            "tests/test_outputs.py": meta,
            "tests/test.sh": "#!/bin/bash\nuvx pytest /tests && echo 1 > /logs/verifier/reward.txt\n",
        },
        name="bad",
    )
    good = make_task(
        tmp_path,
        TOML.replace("no-network", "public"),
        files={
            "tests/test_outputs.py": pinned,
            "tests/test.sh": (
                "#!/bin/bash\nuvx --with pytest-json-ctrf==0.3.5 pytest==8.3.4 /tests "
                "&& echo 1 > /logs/verifier/reward.txt\n"
            ),
        },
        name="good",
    )
    py = bad / "tests" / "test_outputs.py"
    found = check_task(bad)
    assert [(f.rule, f.path.relative_to(bad).as_posix(), f.line) for f in found] == [
        ("unpinned-python-dependency", "tests/test.sh", 2),
        ("unpinned-python-dependency", "tests/test_outputs.py", line_of(py, '"requests>=2"')),
        ("unpinned-python-dependency", "tests/test_outputs.py", line_of(py, '"numpy"')),
    ]
    assert "`requests>=2`" in found[1].text and "`pytest`" in found[0].text
    assert lint(good) == []


def test_step_test_files_are_read_for_inline_metadata(tmp_path):
    toml = TOML + '\n[[steps]]\nname = "a"\n'
    task = make_task(
        tmp_path,
        toml,
        files={
            "instruction.md": None,
            "steps/a/instruction.md": "A\n",
            "steps/a/tests/test_a.py": '# /// script\n# dependencies = ["pytest>=8"]\n# ///\n',
        },
    )
    assert lint(task) == [("unpinned-python-dependency", "steps/a/tests/test_a.py", 2)]


# -- selection, ids, interpolation ---------------------------------------------------------


def _f(rule: str, severity: str = "warning") -> Finding:
    return Finding(Path("t"), 1, severity, "x", rule)  # type: ignore[arg-type]


def test_selection_by_id_prefix_and_all():
    sel = RuleSelection.parse(["compose"], ["compose-writable-bind-mount"])
    assert sel.keeps(_f("compose-privileged"))
    assert not sel.keeps(_f("compose-writable-bind-mount"))
    assert not sel.keeps(_f("unpinned-image"))
    assert sel.keeps(_f("invalid-task-config", "error"))  # errors are always kept
    assert RuleSelection.parse(["ALL"], ["unpinned"]).keeps(_f("unpinned-image")) is False
    assert RuleSelection.parse(["unpinned-image,agent"], None).keeps(_f("agent-user-root"))
    assert not RuleSelection.parse(None, ["agent-"]).keeps(_f("agent-image-test-leak"))
    with pytest.raises(Exception, match="unknown rule 'compo'"):
        RuleSelection.parse(["compo"], None)  # prefixes are whole words
    with pytest.raises(Exception, match="errors are always reported"):
        RuleSelection.parse(None, ["invalid-task-config"])


def test_every_rule_id_used_in_the_source_is_catalogued():
    src = Path(__file__).resolve().parents[2] / "src" / "cairn"
    used: set[str] = set()
    pattern = re.compile(
        r'rule="([a-z0-9-]+)"|"((?:compose|agent|verifier|overlapping|'
        r'artifact|unpinned|backend|template|unsupported)-[a-z0-9-]+)"'
    )
    for path in [*src.glob("task/*.py"), src / "job" / "preflight.py"]:
        for m in pattern.finditer(path.read_text()):
            used.add(m.group(1) or m.group(2))
    assert used and used <= set(RULES), used - set(RULES)
    assert {r: RULES[r].severity for r in LINT_RULES} == dict.fromkeys(LINT_RULES, "warning")
    for rule in RULES.values():
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)+", rule.id)


def test_interpolation_like_compose():
    vars_ = {"A": "1", "EMPTY": ""}
    assert interpolate("${A}/${B:-x}/$A/$$/${EMPTY:-d}/${EMPTY-d}", vars_) == ("1/x/1/$/d/", [])
    assert interpolate("${NOPE}/y", vars_) == ("${NOPE}/y", ["NOPE"])


def test_compose_variables_match_what_the_run_gives(tmp_path):
    from cairn.sandbox.base import SandboxSpec
    from cairn.sandbox.docker.compose_files import harbor_variables
    from cairn.task.lint import COMPOSE_VARIABLES

    real = harbor_variables(SandboxSpec(env_dir=tmp_path), "p", "img")
    assert set(COMPOSE_VARIABLES) == set(real)
    for key, value in real.items():  # host log "paths" are volume names there and here
        if key.startswith("HOST_") or key.endswith("_LOGS_PATH") and "/" not in value:
            assert "/" not in COMPOSE_VARIABLES[key]


def test_a_harbor_style_compose_file_is_clean(tmp_path):
    """The shape Harbor and Terminal-Bench tasks write: cairn's variables, log volumes."""
    task = make_task(
        tmp_path,
        files={
            COMPOSE: (
                "services:\n"
                "  main:\n"
                "    build:\n"
                "      context: ${CONTEXT_DIR}\n"
                "    image: ${MAIN_IMAGE_NAME}\n"
                '    command: ["sh", "-c", "sleep infinity"]\n'
                "    environment:\n"
                "      - TEST_DIR=${TEST_DIR}\n"
                "    volumes:\n"
                "      - ${HOST_VERIFIER_LOGS_PATH}:${ENV_VERIFIER_LOGS_PATH}\n"
                "      - ${HOST_AGENT_LOGS_PATH}:${ENV_AGENT_LOGS_PATH}\n"
                "      - ${T_BENCH_TASK_LOGS_PATH}:${T_BENCH_CONTAINER_LOGS_PATH}\n"
            )
        },
    )
    assert lint(task) == []


def test_a_task_ignores_rules_in_its_harbor_lint_table(tmp_path):
    toml = TOML + (
        '\n[metadata.harbor.lint]\nignore = ["compose-privileged", "shared-verifier", "invalid-task-files"]\n'
    )
    task = make_task(
        tmp_path,
        toml,
        files={COMPOSE: "services:\n  main:\n    build: .\n    privileged: true\n    cap_add: [NET_ADMIN]\n"},
    )
    assert rules_of(task) == ["compose-additional-capabilities"]


def test_a_step_workdir_holding_a_later_solution_leaks_an_earlier_one_does_not(tmp_path):
    toml = TOML + '\n[[steps]]\nname = "a"\n\n[[steps]]\nname = "b"\n'
    solve_a = "#!/bin/bash\nprintf 'first line of the answer\\n' > /app/answer.txt\n"
    solve_b = "#!/bin/bash\nprintf 'second line of the answer\\n' >> /app/answer.txt\n"
    task = make_task(
        tmp_path,
        toml,
        files={
            "instruction.md": None,
            "steps/a/instruction.md": "A\n",
            "steps/a/solution/solve.sh": solve_a,
            "steps/b/instruction.md": "B\n",
            "steps/b/solution/solve.sh": solve_b,
            "steps/a/workdir/hint.sh": solve_b,  # step b's answer, before step a: a leak
            "steps/b/workdir/start.sh": solve_a,  # step a's answer as step b's start: fine
            "steps/a/workdir/setup.sh": "true\n",
            "solution/noop.sh": "true\n",  # the same bytes, too little to be recognised as a copy
        },
    )
    found = check_task(task)
    assert [(f.rule, f.path.relative_to(task).as_posix(), f.line) for f in found] == [
        ("agent-image-test-leak", "steps/a/workdir/hint.sh", None)
    ]
    assert "steps/b/solution/solve.sh" in found[0].text


def test_the_earlier_warnings_carry_their_ids_and_can_be_ignored(tmp_path):
    """judge/no-network, npx MCP servers and the Harbor rules keep their meaning, now with ids."""
    toml = (
        '[task]\nname = "plain"\n\n[verifier.env]\nOPENAI_API_KEY = "${OPENAI_API_KEY}"\n\n'
        '[environment]\nnetwork_mode = "no-network"\nmemory = "1G"\n\n'
        '[[environment.mcp_servers]]\nname = "fs"\ntransport = "stdio"\ncommand = "npx"\n'
        'args = ["-y", "@modelcontextprotocol/server-filesystem", "/app"]\n'
    )
    task = make_task(tmp_path, toml)
    found = check_task(task)
    t = task / "task.toml"
    assert [(f.rule, f.line) for f in found] == [
        ("mcp-download-no-network", line_of(t, "[[environment.mcp_servers]]")),
        ("judge-no-network", line_of(t, "OPENAI_API_KEY")),
        ("harbor-task-name", line_of(t, 'name = "plain"')),
        ("deprecated-size-key", line_of(t, "memory = ")),
    ]
    assert "npx" in found[0].text and "docker" in found[1].text
    kept = RuleSelection.parse(None, ["judge-no-network", "harbor"]).apply(found)
    assert [f.rule for f in kept] == ["mcp-download-no-network", "deprecated-size-key"]


def test_a_lint_failure_is_one_warning_not_a_crash(tmp_path, monkeypatch):
    import cairn.task.lint as lint_module

    def broken(*_args):
        raise RuntimeError("boom")

    monkeypatch.setattr(lint_module, "lint_task", broken)
    task = make_task(tmp_path)
    found = check_task(task)
    assert [(f.rule, f.severity) for f in found] == [("lint-internal-error", "warning")]
    assert "RuntimeError: boom" in found[0].text
