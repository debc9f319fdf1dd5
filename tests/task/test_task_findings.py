"""Every error and warning of design §2, each with the file and line a task author needs."""

from __future__ import annotations

import shutil

import pytest

from cairn.task.load import check_task, load_task
from cairn.task.validate import set_e_risk
from taskfiles import TWO_STEP_TOML, line_of, single_step_factory, two_step_factory


@pytest.fixture
def two_step(tmp_path):
    """Factory writing the two-step task of issue 2 (see taskfiles.two_step_factory)."""
    return two_step_factory(tmp_path)


@pytest.fixture
def single_step(tmp_path):
    """Factory writing a valid single-step task (see taskfiles.single_step_factory)."""
    return single_step_factory(tmp_path)


def only(findings, severity="error"):
    """The single finding of that severity (and no other findings at all)."""
    assert len(findings) == 1, [str(f) for f in findings]
    assert findings[0].severity == severity, str(findings[0])
    return findings[0]


NET = '[environment]\nnetwork_mode = "no-network"\n'


# -- TOML and types -------------------------------------------------------------------------------


def test_invalid_toml_reports_line_and_column(single_step):
    task_dir = single_step(toml="[agent]\ntimeout_sec = = 3\n")
    e = only(check_task(task_dir))
    assert e.path == task_dir / "task.toml" and e.line == 2
    assert "line 2" in e.text and "column" in e.text


def test_task_toml_not_utf8_is_an_error(single_step):
    e = only(check_task(single_step(extra={"task.toml": b"x = '\xff'\n"})))
    assert "UTF-8" in e.text


@pytest.mark.parametrize(
    "toml, key",
    [
        ('[agent]\ntimeout_sec = "300"\n' + NET, "agent.timeout_sec"),
        ("[environment]\nmemory_mb = 1.5\n", "environment.memory_mb"),
        ('[environment]\nnetwork_mode = "wifi"\n', "environment.network_mode"),
        ("[environment]\ncpus = true\n", "environment.cpus"),
        ('multi_step_reward_strategy = "max"\n' + NET, "multi_step_reward_strategy"),
        ("artifacts = [3]\n" + NET, "artifacts[0]"),
        ("[verifier.env]\nPORT = 8080\n" + NET, "verifier.env.PORT"),
        ('[environment.healthcheck]\ncommand = "true"\nretries = "3"\n', "environment.healthcheck.retries"),
        ("[agent]\ntimeout_sec = nan\n" + NET, "agent.timeout_sec"),
        ("[agent]\ntimeout_sec = -1\n" + NET, "agent.timeout_sec"),
        ('[task]\nauthors = ["me"]\n' + NET, "task.authors[0]"),
    ],
)
def test_key_of_wrong_type_is_an_error_at_its_line(single_step, toml, key):
    task_dir = single_step(toml=toml)
    e = only(check_task(task_dir))
    assert key in e.text
    last_key = key.split(".")[-1].split("[")[0]
    assert e.line == line_of(task_dir / "task.toml", last_key)


def test_missing_required_key_is_an_error(single_step):
    task_dir = single_step(toml="[environment.healthcheck]\ninterval_sec = 1\n")
    e = only(check_task(task_dir))
    assert "environment.healthcheck.command" in e.text
    assert e.line == line_of(task_dir / "task.toml", "[environment.healthcheck]")


# -- files --------------------------------------------------------------------------------------


def test_single_step_without_instruction(single_step):
    task_dir = single_step(drop=("instruction.md",))
    e = only(check_task(task_dir))
    assert "instruction.md" in e.text


def test_single_step_without_test(single_step):
    e = only(check_task(single_step(drop=("tests/test.sh",))))
    assert "tests/test.sh" in e.text


def test_step_without_instruction(two_step):
    task_dir = two_step()
    (task_dir / "steps/write/instruction.md").unlink()
    e = only(check_task(task_dir))
    assert "steps/write/instruction.md" in e.text
    assert e.line == line_of(task_dir / "task.toml", 'name = "write"')


def test_step_without_any_test_is_an_error_unless_a_shared_one_exists(two_step):
    task_dir = two_step()
    shutil.rmtree(task_dir / "steps/append/tests")
    e = only(check_task(task_dir))
    assert "steps/append/tests/test.sh" in e.text and "tests/test.sh" in e.text
    (task_dir / "tests").mkdir()
    (task_dir / "tests/test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    assert check_task(task_dir) == []


def test_step_entry_without_name(two_step):
    task_dir = two_step(TWO_STEP_TOML + "\n[[steps]]\nmin_reward = 1\n")
    e = only(check_task(task_dir))
    assert "name" in e.text
    assert e.line == len(TWO_STEP_TOML.splitlines()) + 2


def test_no_environment_definition(single_step):
    task_dir = single_step(drop=("environment/Dockerfile",))
    e = only(check_task(task_dir))
    assert "docker_image" in e.text and "Dockerfile" in e.text


@pytest.mark.parametrize("how", ["image", "compose"])
def test_docker_image_or_compose_is_an_environment_definition(single_step, how):
    if how == "image":
        task_dir = single_step(
            toml='[environment]\ndocker_image = "debian:bookworm-slim"\n', drop=("environment/Dockerfile",)
        )
    else:
        task_dir = single_step(
            extra={
                "environment/docker-compose.yaml": "services:\n  main:\n    image: debian:bookworm-slim\n"
            },
            drop=("environment/Dockerfile",),
        )
    assert check_task(task_dir) == []


# -- artifacts ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "entry, words",
    [
        ('"app/out.txt"', "absolute"),
        ('"/app/../etc/passwd"', ".."),
        ('{ source = "/app/out.txt", destination = "/abs" }', "destination"),
        ('{ source = "/app/out.txt", destination = "a/../../b" }', "destination"),
    ],
)
def test_bad_artifact_paths(single_step, entry, words):
    task_dir = single_step(toml=f"artifacts = [\n  {entry},\n]\n" + NET)
    e = only(check_task(task_dir))
    assert words in e.text and e.line == 2


def test_duplicate_artifact_destinations(two_step):
    toml = TWO_STEP_TOML.replace(
        'name = "append"',
        'name = "append"\nartifacts = [{ source = "/tmp/x/out.txt", destination = "app/out.txt" }]',
    )
    toml = 'artifacts = ["/app/out.txt", "/srv/a.log"]\n' + toml
    task_dir = two_step(toml)
    e = only(check_task(task_dir))
    assert "app/out.txt" in e.text
    assert e.line == line_of(task_dir / "task.toml", "/tmp/x/out.txt")
    task_dir2 = two_step(
        'artifacts = ["/a", { source = "/b", destination = "a" }]\n' + TWO_STEP_TOML, name="dup2"
    )
    assert "'a'" in only(check_task(task_dir2)).text


# -- env templates, os, network -------------------------------------------------------------------


@pytest.mark.parametrize("table", ["environment.env", "verifier.env", "solution.env", "steps.verifier.env"])
def test_embedded_template_in_every_env_table(two_step, table):
    if table == "steps.verifier.env":
        toml = TWO_STEP_TOML + '[steps.verifier.env]\nURL = "http://${HOST}/x"\n'
    else:
        toml = f'[{table}]\nURL = "http://${{HOST}}/x"\n' + TWO_STEP_TOML
    task_dir = two_step(toml)
    e = only(check_task(task_dir))
    assert "URL" in e.text and e.line == line_of(task_dir / "task.toml", "URL =")


@pytest.mark.parametrize("value", ["${A}${B}", "${1X}", "x${A:-1}"])
def test_other_non_whole_templates_are_refused(single_step, value):
    e = only(check_task(single_step(toml=f'[solution.env]\nV = "{value}"\n' + NET)))
    assert "whole value" in e.text


def test_literal_and_whole_templates_are_valid(single_step):
    toml = (
        '[environment.env]\nA = "plain $HOME"\nB = "${B}"\nC = "${C:-}"\n'
        'D = "${D:-a b}"\n[environment]\nnetwork_mode = "no-network"\n'
    )
    toml = toml.replace('[environment]\nnetwork_mode = "no-network"\n', "")
    assert check_task(single_step(toml=toml)) == []


def test_os_other_than_linux(single_step):
    task_dir = single_step(toml='[environment]\nos = "windows"\n')
    e = only(check_task(task_dir))
    assert "windows" in e.text and e.line == 2


def test_allowed_hosts_needs_allowlist(single_step):
    e = only(check_task(single_step(toml='[environment]\nallowed_hosts = ["pypi.org"]\n')))
    assert "allowlist" in e.text and e.line == 2
    ok = single_step(
        name="ok", toml='[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["pypi.org"]\n'
    )
    assert check_task(ok) == []


# -- unknown keys ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "toml, key",
    [
        ("colour = 1\n" + NET, "colour"),
        ('[task]\nnmae = "x"\n' + NET, "nmae"),
        ("[agent]\ntimeout = 3\n" + NET, "timeout"),
        ('[verifier]\nenv_mode = "x"\n' + NET, "env_mode"),
        ("[solution]\nenvs = {}\n" + NET, "envs"),
        ("[environment]\ncpu = 2\n", "cpu"),
        ('[environment.healthcheck]\ncommand = "true"\ninterval = 3\n', "interval"),
        ("[verifier.environment]\nmemroy_mb = 3\n" + NET, "memroy_mb"),
        ('artifacts = [{ source = "/a", dest = "b" }]\n' + NET, "dest"),
        ('[[task.authors]]\nname = "me"\nmail = "x"\n' + NET, "mail"),
    ],
)
def test_unknown_keys_warn_at_every_level(single_step, toml, key):
    task_dir = single_step(toml=toml)
    w = only(check_task(task_dir), "warning")
    assert f"`{key}`" in w.text
    assert w.line == line_of(task_dir / "task.toml", f"{key} =") if f"{key} =" in toml else w.line is not None


@pytest.mark.parametrize(
    "where, key",
    [("entry", "min_rewrd"), ("agent", "timeout"), ("verifier", "timeout"), ("healthcheck", "cmd")],
)
def test_unknown_keys_in_steps_tables(two_step, where, key):
    extra = {
        "entry": f"{key} = 1\n",
        "agent": f"[steps.agent]\n{key} = 1\n",
        "verifier": f"[steps.verifier]\n{key} = 1\n",
        "healthcheck": f'[steps.healthcheck]\ncommand = "true"\n{key} = 1\n',
    }[where]
    task_dir = two_step(TWO_STEP_TOML + extra)
    w = only(check_task(task_dir), "warning")
    assert f"`{key}`" in w.text
    assert w.line == len((TWO_STEP_TOML + extra).splitlines())


def test_free_tables_are_not_checked_for_unknown_keys(two_step):
    toml = (
        'multi_step_reward_strategy = "mean"\n'
        '[metadata]\nanything = { goes = [1, "x"] }\n'
        '[environment.env]\nWHATEVER = "1"\n'
        '[environment]\nnetwork_mode = "no-network"\n'
        'mcp_servers = [{ name = "fs", command = "x", weird = true }]\n'
        + TWO_STEP_TOML.replace('[environment]\nnetwork_mode = "no-network"\n', "")
        .replace('multi_step_reward_strategy = "final"\n', "")
        .replace("min_reward = 1.0", "min_reward = { any_key = 0.5 }")
    )
    assert check_task(two_step(toml)) == []


# -- multi-step warnings --------------------------------------------------------------------------


def test_root_instruction_in_multi_step_task_warns(two_step):
    task_dir = two_step(extra={"instruction.md": "ignored\n"})
    w = only(check_task(task_dir), "warning")
    assert w.path == task_dir / "instruction.md" and "not used" in w.text


@pytest.mark.parametrize(
    "line, warns",
    [
        ("FROM ubuntu", True),
        ("FROM ubuntu:latest", True),
        ("FROM registry.local:5000/img", True),
        ("FROM --platform=linux/amd64 ubuntu:latest AS build", True),
        ("FROM debian:bookworm-slim", False),
        ("FROM registry.local:5000/img:1.2", False),
        ("FROM python@sha256:" + "a" * 64, False),
        ("FROM scratch", False),
        ("FROM ${BASE}", False),
    ],
)
def test_dockerfile_from_without_tag_or_latest(single_step, line, warns):
    task_dir = single_step(extra={"environment/Dockerfile": f"# base\n{line}\nWORKDIR /app\n"})
    found = check_task(task_dir)
    if warns:
        w = only(found, "warning")
        assert w.path == task_dir / "environment/Dockerfile" and w.line == 2
    else:
        assert found == []


def test_from_an_earlier_stage_does_not_warn(single_step):
    text = "FROM debian:bookworm-slim AS base\nRUN true\nFROM base\n"
    assert check_task(single_step(extra={"environment/Dockerfile": text})) == []


@pytest.mark.parametrize(
    "rel",
    [
        "steps/write/tests/test.sh",
        "steps/append/solution/solve.sh",
        "steps/write/workdir/setup.sh",
        "tests/test.sh",
        "solution/solve.sh",
    ],
)
def test_crlf_scripts_warn(two_step, rel):
    task_dir = two_step(extra={rel: b"#!/bin/bash\r\necho 1 > /logs/verifier/reward.txt\r\n"})
    w = only(check_task(task_dir), "warning")
    assert w.path == task_dir / rel and "CRLF" in w.text


def test_set_e_test_warns_with_the_set_line(single_step):
    script = "#!/bin/bash\nset -euo pipefail\npytest /tests\necho 1 > /logs/verifier/reward.txt\n"
    task_dir = single_step(extra={"tests/test.sh": script})
    w = only(check_task(task_dir), "warning")
    assert w.path == task_dir / "tests/test.sh" and w.line == 2 and "set -e" in w.text
    assert [f.severity for f in check_task(task_dir, strict=True)] == ["error"]


@pytest.mark.parametrize(
    "script, line",
    [
        ("set -e\npytest\necho 1 > /logs/verifier/reward.txt\n", 1),
        ("#!/bin/bash -e\npytest\necho 1 > /logs/verifier/reward.txt\n", 1),
        ("set -o errexit\nrun_checks\n", 1),
        ("set -x\nset -e\npython3 /tests/grade.py\n", 2),
        ("set -e\ntrap 'echo 0 > /logs/verifier/reward.txt' EXIT\npytest\n", None),
        ("set -e\nsetup\nset +e\npytest\necho $? > /logs/verifier/reward.txt\n", None),
        ("pytest\necho 1 > /logs/verifier/reward.txt\n", None),
        ("set -u\nset -o pipefail\necho 1 > /logs/verifier/reward.txt\n", None),
        ("# set -e\necho 1 > /logs/verifier/reward.txt\n", None),
    ],
)
def test_set_e_heuristic(script, line):
    assert set_e_risk(script) == line


def test_strict_turns_every_warning_into_an_error(two_step):
    task_dir = two_step(
        extra={"instruction.md": "x", "steps/extra/x": "", "environment/Dockerfile": "FROM ubuntu\n"}
    )
    found = check_task(task_dir)
    assert [f.severity for f in found] == ["warning"] * 3
    assert [f.severity for f in check_task(task_dir, strict=True)] == ["error"] * 3
    assert len(load_task(task_dir).warnings) == 3


def test_steps_of_the_wrong_type_is_one_error_not_a_cascade(single_step):
    task_dir = single_step(toml='steps = "write"\n' + NET, drop=("instruction.md",))
    e = only(check_task(task_dir))
    assert "steps" in e.text and e.line == 1
