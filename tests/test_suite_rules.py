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
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = {"docker", "local", "faults", "slow"}

#: dumps every collected item's node id and marker names after all collection hooks ran
_DUMP_PLUGIN = """
import json, os, pytest

@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    out = {}
    for i in items:
        spec = getattr(i, "callspec", None)
        backend = spec.params.get("backend") if spec is not None else None
        out[i.nodeid] = sorted({m.name for m in i.iter_markers()}
                               | ({"param:" + backend} if isinstance(backend, str) else set()))
    with open(os.environ["CAIRN_MARK_DUMP"], "w") as f:
        json.dump(out, f)
"""


def _readme_quick_marker_expression() -> str:
    """The ``-m`` expression of the README's quick command (the one the docs tell users)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(r"`(python3 -m pytest -m \"[^\"]+\")`", text)
    assert found, 'README.md names no quick command of the form `python3 -m pytest -m "..."`'
    argv = shlex.split(found.group(1))
    return argv[len(argv) - 1 - argv[::-1].index("-m") + 1]


def _collect(tmp_path: Path, *args: str) -> tuple[dict[str, list[str]], list[str]]:
    """Collect the whole suite in a subprocess: (node id -> marker names of every item,
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
    return json.loads(dump.read_text()), selected


def test_readme_quick_command_selects_exactly_the_tests_without_heavy_markers(tmp_path):
    """Every test the quick command selects carries none of docker/local/faults/slow, every
    test it leaves out carries one, and no backend-parametrised case, no test of a backend's
    own folder and no fault test is among those selected (marks come from collection, not
    from a fixture's set-up)."""
    expr = _readme_quick_marker_expression()
    for marker in ("docker", "local", "faults"):
        assert f"not {marker}" in expr, expr
    marks, _ = _collect(tmp_path)
    _, selected = _collect(tmp_path, "-m", expr)  # (its dump holds only the selected items)
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


def _run_case(tmp_path: Path, nodeid: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k != "CI"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", nodeid],
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
    probe = ROOT / "tests" / f"test_zz_ci_probe_{os.getpid()}.py"
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
