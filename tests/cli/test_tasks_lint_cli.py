"""``cairn tasks check`` lint options from the command line: ``--select``, ``--ignore``,
``--json``, ``--strict`` and ``cairn tasks rules`` (docs/lint.md, issue 19)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import cairn.cli.tasks  # noqa: F401  (importing registers the commands on tasks_app)
from cairn.cli import app
from cairn.results.schemas import validate
from cairn.task.init import init_task
from cairn.task.lint import RULES
from cairncli import run_cairn

runner = CliRunner()

COMPOSE = (
    "services:\n"
    "  main:\n"
    "    build: .\n"
    "    privileged: true\n"
    "    volumes:\n"
    "      - ./data:/data\n"
    "  cache:\n"
    "    image: redis\n"
)


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    """`bad` (three lint warnings in its compose file) and `clean`, both from `tasks init`."""
    root = tmp_path / "ds"
    init_task("bad", [], root)
    init_task("clean", [], root)
    env = root / "bad" / "environment"
    (env / "docker-compose.yaml").write_text(COMPOSE)
    (env / "data").mkdir()
    return root


def cli(*args: str):
    return runner.invoke(app, ["tasks", "check", "-e", "none", *args])


def test_lint_warnings_print_with_file_line_and_rule_and_exit_zero(dataset):
    result = cli(str(dataset))
    assert result.exit_code == 0, result.stdout
    compose = dataset / "bad" / "environment" / "docker-compose.yaml"
    lines = result.stdout.splitlines()
    assert [line.split(": warning: ")[0] for line in lines[:3]] == [
        f"{compose}:4",
        f"{compose}:6",
        f"{compose}:8",
    ]
    assert [line.rsplit(" ", 1)[1] for line in lines[:3]] == [
        "[compose-privileged]",
        "[compose-writable-bind-mount]",
        "[unpinned-image]",
    ]
    assert COMPOSE.splitlines()[3].strip() == "privileged: true"  # line 4 is that key
    assert lines[3:] == [f"{dataset / 'bad'}: ok (3 warning(s))", f"{dataset / 'clean'}: ok"]


def test_strict_makes_lint_warnings_errors(dataset):
    result = cli("--strict", str(dataset))
    assert result.exit_code == 1
    assert sum(": error: " in line for line in result.stdout.splitlines()) == 3
    assert f"{dataset / 'bad'}: ok" not in result.stdout
    assert f"{dataset / 'clean'}: ok" in result.stdout
    ignored = cli("--strict", "--ignore", "compose,unpinned-image", str(dataset))
    assert ignored.exit_code == 0, ignored.stdout
    assert ignored.stdout.splitlines() == [f"{dataset / 'bad'}: ok", f"{dataset / 'clean'}: ok"]


def test_select_keeps_only_the_named_rules_and_prefixes(dataset):
    only = cli("--select", "compose-privileged", str(dataset / "bad"))
    assert [line.rsplit(" ", 1)[1] for line in only.stdout.splitlines()[:-1]] == ["[compose-privileged]"]
    prefix = cli("--select", "compose", "--ignore", "compose-privileged", str(dataset / "bad"))
    assert [line.rsplit(" ", 1)[1] for line in prefix.stdout.splitlines()[:-1]] == [
        "[compose-writable-bind-mount]"
    ]
    repeated = cli("--select", "unpinned-image", "--select", "compose-privileged", str(dataset / "bad"))
    assert len(repeated.stdout.splitlines()) == 3
    extended = cli(
        "--select", "unpinned-image", "--extend-select", "compose-privileged", str(dataset / "bad")
    )
    assert [line.rsplit(" ", 1)[1] for line in extended.stdout.splitlines()[:-1]] == [
        "[compose-privileged]",
        "[unpinned-image]",
    ]
    alone = cli("--extend-select", "compose-privileged", str(dataset / "bad"))
    assert len(alone.stdout.splitlines()) == 4  # every rule is on already
    assert cli("--extend-select", "nope", str(dataset)).exit_code == 2


def test_errors_survive_select_and_bad_rules_are_usage_errors(dataset):
    (dataset / "clean" / "instruction.md").unlink()
    result = cli("--select", "compose-privileged", str(dataset / "clean"))
    assert result.exit_code == 1
    assert "[invalid-task-files]" in result.stdout and "instruction.md" in result.stdout
    unknown = cli("--ignore", "no-such-rule", str(dataset))
    assert unknown.exit_code == 2 and "unknown rule 'no-such-rule'" in unknown.stderr
    assert unknown.stdout == ""
    error_rule = cli("--ignore", "invalid-task-files", str(dataset))
    assert error_rule.exit_code == 2 and "errors are always reported" in error_rule.stderr


def test_json_output_matches_its_schema_and_the_text(dataset):
    result = cli("--json", str(dataset))
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    validate("check", doc)
    assert doc["schema_version"] == 1 and doc["ok"] is True and doc["strict"] is False
    assert doc["counts"] == {"error": 0, "warning": 3}
    bad, clean = doc["tasks"]
    assert (bad["path"], bad["ok"], clean["findings"]) == (str(dataset / "bad"), True, [])
    compose = str(dataset / "bad" / "environment" / "docker-compose.yaml")
    assert [(f["rule"], f["severity"], f["path"], f["line"]) for f in bad["findings"]] == [
        ("compose-privileged", "warning", compose, 4),
        ("compose-writable-bind-mount", "warning", compose, 6),
        ("unpinned-image", "warning", compose, 8),
    ]
    assert "privileged: true" in bad["findings"][0]["message"]
    strict = json.loads(cli("--json", "--strict", "--select", "unpinned", str(dataset)).stdout)
    validate("check", strict)
    assert strict["ok"] is False and strict["counts"] == {"error": 1, "warning": 0}
    assert strict["tasks"][0]["ok"] is False and strict["tasks"][1]["ok"] is True


def test_json_through_the_console_script_exit_code(dataset):
    proc = run_cairn("tasks", "check", "-e", "none", "--json", "--strict", str(dataset), timeout=60)
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["counts"]["error"] == 3


def test_rules_lists_every_rule():
    text = runner.invoke(app, ["tasks", "rules"])
    assert text.exit_code == 0
    assert [line.split()[0] for line in text.stdout.splitlines()] == list(RULES)
    doc = json.loads(runner.invoke(app, ["tasks", "rules", "--json"]).stdout)
    assert {r["rule"]: r["severity"] for r in doc} == {r.id: r.severity for r in RULES.values()}


def test_every_rule_is_documented():
    docs = (Path(__file__).resolve().parents[2] / "docs" / "lint.md").read_text()
    missing = [r for r in RULES if f"`{r}`" not in docs]
    assert missing == []
