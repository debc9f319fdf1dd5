"""The floor plan, checked on the source (docs/architecture.md draws the same table).

Every module of ``src/cairn`` belongs to one *room* (a stage package, a backend package or a
shared value module); :data:`LAYERS` says which rooms each room may import. Imports at module
level and inside functions both count; those under ``if TYPE_CHECKING:`` do not (they never
run). On top of the table: no import cycle between modules, the Docker SDK only under
``cairn.sandbox``, nothing but ``__main__`` imports the CLI, the engine never names a backend
module (backends are reached through the registry), and the trial loop hands JSON to the store.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "cairn"

GROUND = {"cairn.errors", "cairn._util", "cairn.layout", "cairn.events", "cairn.netpolicy"}
"""Value modules every room may import; they import nothing of cairn but each other."""

LAYERS: dict[str, set[str]] = {
    "cairn.errors": set(),
    "cairn.layout": set(),
    "cairn.events": set(),
    "cairn.netpolicy": set(),
    "cairn._util": set(),
    "cairn.lock": set(),
    "cairn.sandbox": {"cairn.lock"},
    "cairn.sandbox.docker": {"cairn.sandbox", "cairn.lock"},
    "cairn.sandbox.local": {"cairn.sandbox", "cairn.lock"},
    "cairn.sandbox.conformance": {"cairn.sandbox"},
    "cairn.sandbox.cleanup": {"cairn.sandbox", "cairn.sandbox.docker", "cairn.sandbox.local", "cairn.lock"},
    "cairn.task": {"cairn.sandbox"},
    "cairn.plan": {"cairn.task", "cairn.sandbox"},
    "cairn.results": {"cairn.task", "cairn.plan"},
    "cairn.relay": {"cairn.results"},
    "cairn.agents": {"cairn.results", "cairn.task", "cairn.plan", "cairn.sandbox", "cairn.relay"},
    "cairn.trial": {"cairn.agents", "cairn.results", "cairn.task", "cairn.plan", "cairn.sandbox"},
    "cairn.datasets": {"cairn.results", "cairn.task", "cairn.lock"},
    "cairn.job": {
        "cairn.trial",
        "cairn.agents",
        "cairn.results",
        "cairn.task",
        "cairn.plan",
        "cairn.sandbox",
        "cairn.sandbox.cleanup",
        "cairn.lock",
        "cairn.datasets",
        "cairn.relay",
    },
    "cairn.viewer": {"cairn.job", "cairn.results", "cairn.task", "cairn.plan"},
    "cairn.cli": {
        "cairn.job",
        "cairn.trial",
        "cairn.agents",
        "cairn.results",
        "cairn.task",
        "cairn.plan",
        "cairn.sandbox",
        "cairn.sandbox.cleanup",
        "cairn.lock",
        "cairn.datasets",
        "cairn.viewer",
    },
    "cairn.__main__": {"cairn.cli"},
    "cairn": set(),
}
"""Room → the rooms it may import (besides itself and :data:`GROUND`)."""


def _module(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULE_FILES = {_module(p): p for p in SRC.rglob("*.py")}


def _room(module: str) -> str:
    """The longest :data:`LAYERS` key that is the module or a package above it."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        candidate = ".".join(parts[:n])
        if candidate in LAYERS:
            return candidate
    raise KeyError(module)


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _imports(path: Path) -> set[str]:
    """Every cairn module a file imports (resolved to a module file), not under TYPE_CHECKING."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    skip = _type_checking_lines(tree)
    names: set[str] = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    out: set[str] = set()
    for name in names:
        if not (name == "cairn" or name.startswith("cairn.")):
            continue
        while name not in MODULE_FILES and "." in name:  # `from pkg import name` → pkg
            name = name.rsplit(".", 1)[0]
        if name in MODULE_FILES:
            out.add(name)
    return out


IMPORTS = {m: _imports(p) for m, p in MODULE_FILES.items()}

BACKEND_PACKAGES = sorted(
    f"cairn.sandbox.{p.name}"
    for p in (SRC / "sandbox").iterdir()
    if (p / "__init__.py").is_file() and p.name != "conformance"
)
"""The backend packages, derived from the tree (``cairn.sandbox.docker``, ``…local``)."""


def test_every_module_has_a_room():
    rooms = {}
    for m in MODULE_FILES:
        try:
            rooms[m] = _room(m)
        except KeyError:
            rooms[m] = None
    assert [m for m, r in rooms.items() if r is None] == []


def test_imports_follow_the_layer_table():
    offenders = {}
    for m, imps in IMPORTS.items():
        room = _room(m)
        allowed = LAYERS[room] | GROUND | {room}
        if room in GROUND:
            allowed = GROUND
        if room == "cairn":
            allowed = {"cairn"}
        bad = sorted(i for i in imps if _room(i) not in allowed and i != "cairn")
        if bad:
            offenders[m] = bad
    assert offenders == {}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles_between_modules():
    graph = {m: {i for i in imps if i != m} for m, imps in IMPORTS.items()}
    assert _cycles(graph) == []


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_docker_sdk_only_under_sandbox():
    users = set()
    for m, p in MODULE_FILES.items():
        tree = ast.parse(p.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Import) and any(a.name.split(".")[0] == "docker" for a in node.names)
            ) or (
                isinstance(node, ast.ImportFrom)
                and node.level == 0
                and node.module
                and node.module.split(".")[0] == "docker"
            ):
                users.add(m)
    assert users and {m for m in users if not m.startswith("cairn.sandbox.")} == set()


def test_ray_only_in_the_ray_executor():
    """issue 20: Ray is an optional extra; only ``cairn.job.executors.ray`` imports it."""
    users = set()
    for m, p in MODULE_FILES.items():
        tree = ast.parse(p.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Import) and any(a.name.split(".")[0] == "ray" for a in node.names)) or (
                isinstance(node, ast.ImportFrom)
                and node.level == 0
                and node.module
                and node.module.split(".")[0] == "ray"
            ):
                users.add(m)
    assert users == {"cairn.job.executors.ray"}


def test_nothing_imports_the_cli():
    offenders = {
        m
        for m, imps in IMPORTS.items()
        if any(i.startswith("cairn.cli") for i in imps)
        and not m.startswith("cairn.cli")
        and m != "cairn.__main__"
    }
    assert offenders == set()


@pytest.mark.parametrize("room", ["cairn.agents", "cairn.trial", "cairn.job"])
def test_the_engine_reaches_backends_only_through_the_registry(room):
    assert BACKEND_PACKAGES  # derived from the tree, so a new backend is covered too
    leaks = {
        m: sorted(i for i in imps if any(i == b or i.startswith(b + ".") for b in BACKEND_PACKAGES))
        for m, imps in IMPORTS.items()
        if _room(m) == room
    }
    assert {m: v for m, v in leaks.items() if v} == {}


def test_trial_loop_writes_no_json_itself():
    for module in ("cairn.trial.run", "cairn.trial.step"):
        text = MODULE_FILES[module].read_text(encoding="utf-8")
        assert "json.dump" not in text and "write_json_atomic" not in text, module


def test_tests_take_shared_helpers_from_tests_helpers_not_conftest():
    """``from conftest import …`` is ambiguous once a sub-folder has its own conftest.py (a run
    that loaded tests/viewer/conftest.py first handed its module to every such import)."""
    tests = SRC.parents[1] / "tests"
    offenders = []
    for path in tests.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module == "conftest"
                or isinstance(node, ast.Import)
                and any(a.name == "conftest" for a in node.names)
            ):
                offenders.append(f"{path.relative_to(tests)}:{node.lineno}")
    assert offenders == []


#: the longest a function of the trial engine may be, lines (issue #28: the trial room stays
#: readable; run_step had grown to 181)
TRIAL_FUNCTION_MAX_LINES = 80


def test_no_function_of_the_trial_engine_is_longer_than_80_lines():
    long = []
    for path in sorted((SRC / "trial").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > TRIAL_FUNCTION_MAX_LINES:
                    long.append(f"{path.relative_to(SRC)}:{node.lineno} {node.name} ({size} lines)")
    assert not long, long
