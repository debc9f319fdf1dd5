"""The rules of direction of CONVENTIONS.md, checked on the source: value modules import nothing
upstream, agents and the verifier know only the Sandbox interface, the trial loop hands JSON to
the store, nothing imports the CLI."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "cairn"
BACKENDS = ("cairn.sandbox.docker", "cairn.sandbox.docker_build", "cairn.sandbox.docker_exec",
            "cairn.sandbox.local", "cairn.sandbox.compose")


def _module(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Every cairn module a file imports, at module level or inside functions."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return {m for m in out if m == "cairn" or m.startswith("cairn.")}


MODULES = {_module(p): _imports(p) for p in SRC.rglob("*.py")}


def _importers(prefixes: tuple[str, ...]) -> dict[str, set[str]]:
    return {m: {i for i in imps if i.startswith(prefixes)} for m, imps in MODULES.items()
            if any(i.startswith(prefixes) for i in imps)}


def test_errors_imports_nothing_from_cairn():
    assert MODULES["cairn.errors"] == set()


@pytest.mark.parametrize("value_module", ["cairn.task.model", "cairn.results", "cairn.plan"])
def test_value_modules_import_nothing_upstream(value_module):
    upstream = ("cairn.trial", "cairn.step", "cairn.job", "cairn.store", "cairn.cli",
                "cairn.verify", "cairn.agents", *BACKENDS)
    assert not {i for i in MODULES[value_module] if i.startswith(upstream)}


def test_nothing_imports_the_cli():
    offenders = {m for m in _importers(("cairn.cli",)) if not m.startswith("cairn.cli")
                 and m != "cairn.__main__"}
    assert offenders == set()


def test_agents_verifier_and_engine_know_only_the_interface():
    engine = [m for m in MODULES if m.startswith("cairn.agents") or m in (
        "cairn.verify", "cairn.step", "cairn.trial", "cairn.artifacts", "cairn.healthcheck",
        "cairn.job", "cairn.job_runner", "cairn.separate")]
    leaks = {m: {i for i in MODULES[m] if any(i == b or i.startswith(b + ".") for b in BACKENDS)}
             for m in engine}
    assert {m: v for m, v in leaks.items() if v} == {}


def test_trial_loop_writes_no_json_itself():
    for name in ("trial.py", "step.py"):
        text = (SRC / name).read_text()
        assert "json.dump" not in text and "write_json_atomic" not in text, name
