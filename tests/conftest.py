"""Shared fixtures: real sandbox backends and a one-call trial runner."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent / "helpers"))

from testbed import (  # noqa: E402,F401
    allowed_skip,
    backend_available,
    backend_missing,
    ci_strict,
    local_available,
    need_backend,
    run_trial_sync,
    skip_reason,
    validate_result_files,
)

#: the marker a test parametrised over a sandbox backend carries for each backend value
BACKEND_MARKS = {"docker": "docker", "local": "local"}


@pytest.fixture(
    params=[pytest.param("docker", marks=pytest.mark.docker), pytest.param("local", marks=pytest.mark.local)]
)
def backend(request) -> str:
    """Each trial-engine test runs on every backend; the ``[docker]`` case carries the
    ``docker`` marker and ``[local]`` the ``local`` marker from collection on, so
    ``-m "not docker"`` deselects it before it starts."""
    need_backend(request.param)
    return request.param


def pytest_configure(config) -> None:
    """Hypothesis without its per-example wall-clock deadline (200 ms): on a loaded machine an
    example that is simply slow failed as ``DeadlineExceeded`` (no timed unit tests; speed is
    measured in bench/). Only when its plugin loaded hypothesis (a run with
    ``-p no:hypothesispytest`` does not pay for the import)."""
    if "hypothesis" in sys.modules:
        from hypothesis import settings

        settings.register_profile("cairn", deadline=None)
        settings.load_profile("cairn")


def pytest_collection_modifyitems(config, items) -> None:
    """Mark every test parametrised with ``backend=docker|local`` (by the fixture above or
    by a test's own ``parametrize("backend", ...)``) with that backend's marker, at
    collection, before ``-m`` selects; tests under tests/faults/ carry ``faults``."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        value = callspec.params.get("backend") if callspec is not None else None
        if (
            isinstance(value, str)
            and value in BACKEND_MARKS
            and item.get_closest_marker(BACKEND_MARKS[value]) is None
        ):
            item.add_marker(BACKEND_MARKS[value])
        here = Path(__file__).parent
        if item.path.is_relative_to(here / "faults") and item.get_closest_marker("faults") is None:
            item.add_marker(pytest.mark.faults)


def _what_is_missing(reason: str = "") -> str:
    found = [
        f"{name}: {why}"
        for name in ("docker", "local")
        if (why := backend_missing(name)) and why not in reason
    ]
    return ("; probes: " + "; ".join(found)) if found else ""


_UNALLOWED_COLLECTION_SKIPS: list[str] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under ``CI=true`` a test skipped for a reason not in :data:`CI_ALLOWED_SKIPS` fails,
    naming the reason (and what the backend probes found missing)."""
    outcome = yield
    report = outcome.get_result()
    if not ci_strict() or not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = skip_reason(report)
    if allowed_skip(reason):
        return
    report.outcome = "failed"
    report.longrepr = (
        f"CI=true: skipped for a reason CI does not allow (a component .ci/ "
        f"installs is missing?): {reason}{_what_is_missing(reason)}"
    )


def pytest_collectreport(report) -> None:
    """Under ``CI=true`` a module skipped at collection for a reason not allowed is recorded;
    :func:`pytest_sessionfinish` then fails the run and the summary names it. (This hook, not
    ``pytest_make_collect_report``: under pytest-xdist the workers collect, and only this one
    reaches the controlling process, which decides the exit status.)"""
    if ci_strict() and report.skipped:
        reason = skip_reason(report)
        if not allowed_skip(reason):
            _UNALLOWED_COLLECTION_SKIPS.append(f"{report.nodeid}: {reason}")


def pytest_sessionfinish(session, exitstatus) -> None:
    """Fail a CI run whose collection skipped a module for a reason not allowed."""
    if _UNALLOWED_COLLECTION_SKIPS and session.exitstatus in (0, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter) -> None:
    """Name every module that CI's strict-skip rule found skipped at collection."""
    if _UNALLOWED_COLLECTION_SKIPS:
        terminalreporter.section("CI=true: modules skipped for a reason CI does not allow")
        for line in _UNALLOWED_COLLECTION_SKIPS:
            terminalreporter.line(line + _what_is_missing())


def _refuse_constant(name: str):
    raise ValueError(f"non-finite JSON constant {name}")


@functools.cache
def _validator(schema: str):
    """One checked validator per shipped schema (``jsonschema.validate`` re-checks the schema
    itself on every call: most of a fast test's time)."""
    import jsonschema

    from cairn.results.schemas import load_schema

    loaded = load_schema(schema)
    cls = jsonschema.validators.validator_for(loaded)
    cls.check_schema(loaded)
    return cls(loaded)


@pytest.fixture(autouse=True)
def _results_match_schemas(request):
    """Every result.json / steps.json / config.json / summary.json / job.json a test leaves
    under its tmp_path validates
    against the shipped JSON Schemas (issue 5: every result the suite produces)."""
    yield
    if request.node.get_closest_marker("writes_invalid_results"):
        return
    tmp = (getattr(request.node, "funcargs", None) or {}).get("tmp_path")  # None after a Ctrl-C
    if tmp is None or not Path(tmp).is_dir():
        return
    names = {
        "result.json": "result",
        "steps.json": "steps",
        "summary.json": "summary",
        "config.json": "config",
        "job.json": "job",
    }
    for fname, schema in names.items():
        for p in Path(tmp).rglob(fname):
            if fname in ("summary.json", "job.json"):
                if not (p.parent / "trials").is_dir() and not (p.parent / "lock").exists():
                    continue  # only a job folder's own files
            elif "trials" not in p.parts:
                continue  # only files cairn's store wrote under a job folder
            try:
                data = json.loads(p.read_text(), parse_constant=_refuse_constant)
            except (OSError, ValueError):
                continue  # tests that plant broken files check that themselves
            _validator(schema).validate(data)
