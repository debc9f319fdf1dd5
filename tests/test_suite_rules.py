"""The suite's own rules (issue 28): markers are on every test from collection, so the README's
quick command selects exactly the tests that need neither Docker, namespaces nor faults; under
``CI=true`` a skip for a missing component fails the run, naming what is missing."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = {"docker", "local", "faults", "slow"}

#: dumps the node id and marker names of every collected item after all collection hooks ran:
#: those ``-m`` selected and those it deselected (so one collection gives both)
_DUMP_PLUGIN = """
import json, os, pytest

_DESELECTED = []


def pytest_deselected(items):
    _DESELECTED.extend(items)


def _marks(i):
    spec = getattr(i, "callspec", None)
    backend = spec.params.get("backend") if spec is not None else None
    return sorted({m.name for m in i.iter_markers()}
                  | ({"param:" + backend} if isinstance(backend, str) else set()))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    out = {"selected": {i.nodeid: _marks(i) for i in items},
           "deselected": {i.nodeid: _marks(i) for i in _DESELECTED}}
    with open(os.environ["CAIRN_MARK_DUMP"], "w") as f:
        json.dump(out, f)
"""

#: the modules test_a_module_skipped_at_collection_fails_ci plants under tests/ for a moment (a
#: collection of the suite running beside it, under pytest-xdist, must not pick one up)
_PROBE_GLOB = "test_zz_ci_probe_*.py"


def _readme_quick_command() -> list[str]:
    """The argv of the README's quick command (the one the docs tell users)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(r"`(python3 -m pytest [^`]*-m \"[^\"]+\")`", text)
    assert found, 'README.md names no quick command of the form `python3 -m pytest ... -m "..."`'
    return shlex.split(found.group(1))


def _readme_quick_marker_expression() -> str:
    """The ``-m`` expression of the README's quick command."""
    argv = _readme_quick_command()
    return argv[len(argv) - 1 - argv[::-1].index("-m") + 1]


def test_the_quick_command_runs_on_every_core_with_what_the_test_extra_installs():
    """The README's quick command spreads the tests over the cores (``-n auto``: pytest-xdist),
    and the ``test`` extra installs pytest-xdist."""
    import tomllib

    argv = _readme_quick_command()
    assert argv[argv.index("-n") + 1] == "auto", argv
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    assert any(re.match(r"pytest-xdist\b", dep) for dep in extra), extra


def _collect(tmp_path: Path, *args: str) -> tuple[dict[str, list[str]], list[str]]:
    """Collect the whole suite once in a subprocess: (node id -> marker names of every item,
    node ids that ``args`` select)."""
    (tmp_path / "markdump.py").write_text(_DUMP_PLUGIN)
    dump = tmp_path / "marks.json"
    env = {
        **os.environ,
        "CAIRN_MARK_DUMP": str(dump),
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
    }
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "markdump",
            f"--ignore-glob=tests/{_PROBE_GLOB}",
            *args,
            "tests",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    selected = [line for line in out.stdout.splitlines() if "::" in line]
    dumped = json.loads(dump.read_text())
    assert sorted(dumped["selected"]) == sorted(selected)
    assert not set(dumped["selected"]) & set(dumped["deselected"])
    return {**dumped["selected"], **dumped["deselected"]}, selected


def test_readme_quick_command_selects_exactly_the_tests_without_heavy_markers(tmp_path):
    """Every test the quick command selects carries none of docker/local/faults/slow, every
    test it leaves out carries one, and no backend-parametrised case, no test of a backend's
    own folder and no fault test is among those selected (marks come from collection, not
    from a fixture's set-up)."""
    expr = _readme_quick_marker_expression()
    for marker in ("docker", "local", "faults"):
        assert f"not {marker}" in expr, expr
    marks, selected = _collect(tmp_path, "-m", expr)
    assert len(marks) > 1000 and selected
    light = {nodeid for nodeid, names in marks.items() if not HEAVY & set(names)}
    assert set(selected) == light
    for nodeid in selected:
        assert not {"param:docker", "param:local"} & set(marks[nodeid]), nodeid
        assert not nodeid.startswith("tests/faults/"), nodeid
    for nodeid, names in marks.items():
        if "param:docker" in names:
            assert "docker" in names, nodeid
        if "param:local" in names:
            assert "local" in names, nodeid
        if nodeid.startswith("tests/faults/"):
            assert "faults" in names, nodeid


_DOCKER_CASE = "tests/trial/test_trial.py::test_two_steps_oracle_passes[docker]"


#: third-party plugins the cases below do not use, left out of their pytest runs: their imports
#: are most of a pytest start-up here (hypothesis's alone ~2 s of CPU); the hooks under test
#: are the suite's own (tests/conftest.py)
_UNUSED_PLUGINS = ("-p", "no:hypothesispytest", "-p", "no:benchmark", "-p", "no:anyio")


def _run_case(tmp_path: Path, nodeid: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    """Run one test (or module) in a pytest of its own, ``CI`` unset unless ``env`` sets it."""
    base = {k: v for k, v in os.environ.items() if k != "CI"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *_UNUSED_PLUGINS, *args, nodeid],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_a_skip_for_a_missing_engine_fails_under_ci_and_names_it(tmp_path):
    """With the Docker engine unreachable (DOCKER_HOST at a socket nobody listens on), a
    docker case skips on a developer's machine and fails under ``CI=true``, naming the engine
    and the address it tried."""
    dead = f"unix://{tmp_path}/no-engine.sock"
    dev = _run_case(tmp_path, _DOCKER_CASE, DOCKER_HOST=dead)
    assert dev.returncode == 0, dev.stdout[-2000:]
    assert "1 skipped" in dev.stdout and f"no Docker engine answers at {dead}" in dev.stdout
    ci = _run_case(tmp_path, _DOCKER_CASE, DOCKER_HOST=dead, CI="true")
    assert ci.returncode == 1, ci.stdout[-2000:]
    assert "1 error" in ci.stdout  # the skip happened in set-up: pytest counts it an error
    assert "CI=true: skipped for a reason CI does not allow" in ci.stdout
    assert f"no Docker engine answers at {dead}" in ci.stdout


def test_an_allowlisted_skip_stays_a_skip_under_ci(tmp_path):
    """The skips of testbed's CI_ALLOWED_SKIPS stay skips under ``CI=true``."""
    from testbed import CI_ALLOWED_SKIPS, allowed_skip

    assert CI_ALLOWED_SKIPS and all(why for _pattern, why in CI_ALLOWED_SKIPS)
    assert allowed_skip("set CAIRN_VIEWER_SCREENSHOTS=docs/img to refresh the doc screenshots")
    assert allowed_skip("known conformance gap of backend 'local'")
    assert not allowed_skip("no Docker engine")
    assert not allowed_skip("chromium / chromium-driver not installed (.ci/setup-browser.sh)")


def test_a_module_skipped_at_collection_fails_ci(tmp_path):
    """A module-level skip (``importorskip`` of a missing extra) fails a ``CI=true`` run and the
    summary names the module and the reason; without CI it is a plain skip."""
    probe = ROOT / "tests" / _PROBE_GLOB.replace("*", f"{os.getpid()}_{uuid.uuid4().hex[:8]}")
    probe.write_text(
        'import pytest\n\npytest.importorskip("cairn_no_such_extra_module")\n\n\n'
        "def test_never():\n    raise AssertionError\n"
    )
    try:
        dev = _run_case(tmp_path, str(probe.relative_to(ROOT)))
        assert dev.returncode == pytest.ExitCode.NO_TESTS_COLLECTED, dev.stdout[-2000:]
        assert "1 skipped" in dev.stdout
        ci = _run_case(tmp_path, str(probe.relative_to(ROOT)), CI="true")
        assert ci.returncode == 1, ci.stdout[-2000:]
        assert "modules skipped for a reason CI does not allow" in ci.stdout
        assert "cairn_no_such_extra_module" in ci.stdout
        # the same under pytest-xdist (the README's quick command), where a worker collects
        xdist = _run_case(tmp_path, str(probe.relative_to(ROOT)), "-n", "1", CI="true")
        assert xdist.returncode == 1, xdist.stdout[-2000:]
        assert "modules skipped for a reason CI does not allow" in xdist.stdout
        assert "cairn_no_such_extra_module" in xdist.stdout
    finally:
        probe.unlink()


@pytest.mark.parametrize("name", ["docker", "local"])
def test_backend_probes_say_why(name, monkeypatch):
    """The probes return None or one line that names what is missing; never a bare False."""
    import testbed

    monkeypatch.setattr(testbed, "_MISSING", {})
    if name == "docker":
        monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/cairn-test.sock")
        why = testbed.backend_missing("docker")
        assert why is not None and "unix:///nonexistent/cairn-test.sock" in why
    else:
        monkeypatch.setenv("PATH", "/nonexistent")
        why = testbed.backend_missing("local")
        assert why is not None and "unshare" in why


#: the test files that may spell ``python -m cairn`` themselves, each with its reason; every
#: other test runs the command through tests/helpers/cairncli.py (one environment, one bound
#: on time, stdin closed, stdout and stderr apart)
CAIRN_ARGV_ALLOWED = {
    "tests/helpers/cairncli.py": "the one helper: cairn_argv, run_cairn and start_cairn build that argv",
    "tests/test_suite_rules.py": "the examples the finder below is tested on",
}

_CAIRN_WORDS = re.compile(r"(?:^|\s)-m\s+cairn(?:\s|$)")
#: what every such spelling holds somewhere in its file's text (files without it are not parsed)
_CAIRN_HINT = re.compile(r"[\"']cairn[\"']|-m\s+cairn")


def _cairn_argv_sites(source: str) -> list[int]:
    """Lines of ``source`` that spell ``python -m cairn`` themselves: a list or tuple with the
    items ``"-m", "cairn"`` side by side, or a command string (an f-string too) holding the
    words ``-m cairn``; docstrings and comments aside."""
    import ast

    if not _CAIRN_HINT.search(source):
        return []
    tree = ast.parse(source)
    docstrings = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant | ast.JoinedStr)
    }
    sites = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.List | ast.Tuple):
            words = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            if any(a == "-m" and b == "cairn" for a, b in zip(words, words[1:], strict=False)):
                sites.add(node.lineno)
        elif id(node) not in docstrings:
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
            elif isinstance(node, ast.JoinedStr):
                text = "".join(v.value if isinstance(v, ast.Constant) else " X " for v in node.values)
            else:
                continue
            if _CAIRN_WORDS.search(text):
                sites.add(node.lineno)
    return sorted(sites)


def test_the_cairn_argv_finder_finds_each_spelling():
    """The finder sees a list, a tuple, a ``-S`` flag before ``-m``, a shell string and an
    f-string; not a docstring, a model name (``-m cairn/x``) or ``-m cairn.results.schemas``."""
    found = _cairn_argv_sites(
        '"""Run ``python -m cairn ARGS``."""\n'
        "import sys\n"
        'a = [sys.executable, "-m", "cairn", "run"]\n'
        'b = (sys.executable, "-S", "-m", "cairn")\n'
        'c = "python3 -m cairn tasks check ."\n'
        'd = f"{sys.executable} -m cairn run -p {a}"\n'
        'e = "opencode run -m cairn/claude-x"\n'
        'f = ["python", "-m", "cairn.results.schemas"]\n'
        "def g():\n"
        '    """``python3 -m cairn ARGS`` to its end."""\n'
    )
    assert found == [3, 4, 5, 6]


def test_tests_run_cairn_only_through_the_helper():
    """No test module spells ``python -m cairn`` itself but those of :data:`CAIRN_ARGV_ALLOWED`
    (and each of those still does: the allowlist holds no stale entry)."""
    found = {}
    for path in sorted((ROOT / "tests").rglob("*.py")):
        sites = _cairn_argv_sites(path.read_text(encoding="utf-8"))
        if sites:
            found[path.relative_to(ROOT).as_posix()] = sites
    outside = {f: lines for f, lines in found.items() if f not in CAIRN_ARGV_ALLOWED}
    assert outside == {}, f"run these through tests/helpers/cairncli.py (run_cairn/start_cairn): {outside}"
    assert set(CAIRN_ARGV_ALLOWED) == set(found)
    assert all(CAIRN_ARGV_ALLOWED.values())


#: the test files that may call ``time.sleep`` outside a loop, each with its reason; every
#: other sleep is one wait of a bounded polling loop (a ``while``/``for``), never a fixed pause
#: standing in for an event (issue 28: a file, a log line, a status.json phase, a process state)
BARE_SLEEP_ALLOWED = {
    "tests/helpers/fake_openai.py": "the fake model's slow reply a test asks for (its behaviour, not a wait)",
    "tests/sandbox/docker/test_gateway_hostile.py": (
        "windows for an absence: a packet or frame the gateway let through would land in them; "
        "the assertion is that nothing arrives, so there is nothing positive to wait for"
    ),
}


def _bare_sleep_sites(source: str) -> list[int]:
    """Lines of ``source`` that call ``time.sleep`` (also under ``import time as t`` or ``from
    time import sleep``) outside every ``while``/``for`` loop of the function it is in; code in
    strings (a child process's script) is not code of the file."""
    import ast

    if "sleep" not in source:
        return []
    tree = ast.parse(source)
    modules, names = {"time"}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name == "time"}
        elif isinstance(node, ast.ImportFrom) and node.module == "time":
            names |= {a.asname or a.name for a in node.names if a.name == "sleep"}

    def is_sleep(call: ast.Call) -> bool:
        f = call.func
        if isinstance(f, ast.Attribute):
            return f.attr == "sleep" and isinstance(f.value, ast.Name) and f.value.id in modules
        return isinstance(f, ast.Name) and f.id in names

    sites: set[int] = set()

    def walk(node: ast.AST, in_loop: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                walk(child, False)  # a function's body runs where it is called, not in the loop
            elif isinstance(child, ast.While | ast.For | ast.AsyncFor):
                walk(child, True)
            else:
                if isinstance(child, ast.Call) and is_sleep(child) and not in_loop:
                    sites.add(child.lineno)
                walk(child, in_loop)

    walk(tree, False)
    return sorted(sites)


def test_the_bare_sleep_finder_finds_each_spelling():
    """The finder sees ``time.sleep``, an alias and ``from time import sleep`` outside loops,
    also in a function defined inside a loop; not a sleep in a ``while``/``for`` body, in a
    string (a child's script) or of another module (``asyncio.sleep``)."""
    found = _bare_sleep_sites(
        "import time, asyncio\n"
        "import time as t\n"
        "from time import sleep as nap\n"
        "time.sleep(1)\n"
        "def f():\n"
        "    t.sleep(0.5)\n"
        "    while True:\n"
        "        time.sleep(0.1)\n"
        "        for _ in range(3):\n"
        "            nap(0.1)\n"
        "        def g():\n"
        "            nap(2)\n"
        "    asyncio.sleep(1)\n"
        "    script = 'import time; time.sleep(600)'\n"
        "nap(3)\n"
    )
    assert found == [4, 6, 12, 15]


def test_tests_sleep_only_inside_polling_loops():
    """No test module calls ``time.sleep`` outside a loop but those of
    :data:`BARE_SLEEP_ALLOWED` (and each of those still does: no stale entry)."""
    found = {}
    for path in sorted((ROOT / "tests").rglob("*.py")):
        sites = _bare_sleep_sites(path.read_text(encoding="utf-8"))
        if sites:
            found[path.relative_to(ROOT).as_posix()] = sites
    outside = {f: lines for f, lines in found.items() if f not in BARE_SLEEP_ALLOWED}
    assert outside == {}, f"wait for the event these sleeps stand for (bounded), not a fixed time: {outside}"
    assert set(BARE_SLEEP_ALLOWED) == set(found)
    assert all(BARE_SLEEP_ALLOWED.values())
