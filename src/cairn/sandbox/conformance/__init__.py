"""The backend-agnostic conformance suite (design §3.4).

Every sandbox backend runs the same behavioural checks: files, exec, users, cwd, env, timeouts,
process-tree kill, output caps, big and oddly named files, symlinks, network modes, resource
limits, cleanup and step snapshots. A check is an async function of a :class:`CheckContext`; it talks to the
backend only through :class:`~cairn.sandbox.base.Sandbox`.

A backend declares the checks it knowingly fails in its ``known_conformance_gaps`` ClassVar; the
suite skips them and :func:`format_gaps` lists them. A test module runs every check as its own
test::

    from cairn.sandbox import conformance
    from cairn.sandbox.docker.backend import DockerSandbox

    @pytest.mark.parametrize("check", conformance.pytest_params(DockerSandbox))
    def test_conformance(check, tmp_path):
        conformance.run_check_sync(check, DockerSandbox, tmp_path)

The environment the checks use is written by the suite itself (:data:`BASE_DOCKERFILE`): it uses
only ``FROM``/``RUN``/``WORKDIR``/``ENV``, so Dockerfile-subset backends can build it too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cairn.sandbox.base import Sandbox
from cairn.sandbox.conformance.context import (
    BASE_DOCKERFILE,
    CONFORMANCE_JOB_ID,
    CheckContext,
    ConformanceFailure,
    LeftoverProbe,
    SandboxFactory,
)
from cairn.sandbox.conformance.exec_checks import (
    check_build_failed,
    check_cwd,
    check_env,
    check_exec_background_returns,
    check_exec_concurrent,
    check_exec_stdout_stderr_separate,
    check_exec_timeout,
    check_exec_timeout_as_user,
    check_exec_timeout_kills_tree,
    check_logs_dirs_fresh,
    check_output_cap,
    check_processes_and_kill,
    check_stop_fast,
    check_stop_removes_everything,
    check_users,
)
from cairn.sandbox.conformance.file_checks import (
    check_big_file_256mib,
    check_cpu_limit,
    check_download_stays_inside_target,
    check_memory_limit,
    check_network_allowlist,
    check_network_none,
    check_network_public,
    check_odd_names,
    check_symlink_not_followed,
    check_upload_download_roundtrip,
    check_upload_many,
)
from cairn.sandbox.conformance.snapshot_checks import check_snapshot_roundtrip

CHECK_TIMEOUT_SEC = 240.0
"""Bound on one check, seconds (the first one may build the suite's image)."""


class CheckSkipped(Exception):
    """Raised by :func:`run_check` for a check the backend declares as a known gap."""


# ---- registry -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Check:
    """One named conformance check.

    Attributes:
        name: stable name (used in ``known_conformance_gaps``).
        func: the async check.
        slow: whether it takes more than a few seconds.
    """

    name: str
    func: Callable[[CheckContext], Awaitable[None]]
    slow: bool = False

    @property
    def doc(self) -> str:
        """First line of the check's docstring."""
        return (self.func.__doc__ or "").strip().splitlines()[0]


CHECKS: tuple[Check, ...] = (
    Check("exec_stdout_stderr_separate", check_exec_stdout_stderr_separate),
    Check("exec_concurrent", check_exec_concurrent),
    Check("exec_background_returns", check_exec_background_returns),
    Check("exec_timeout", check_exec_timeout),
    Check("exec_timeout_kills_tree", check_exec_timeout_kills_tree),
    Check("exec_timeout_as_user", check_exec_timeout_as_user),
    Check("output_cap", check_output_cap),
    Check("users", check_users),
    Check("cwd", check_cwd),
    Check("env", check_env),
    Check("logs_dirs_fresh", check_logs_dirs_fresh),
    Check("upload_download_roundtrip", check_upload_download_roundtrip),
    Check("upload_many", check_upload_many),
    Check("odd_names", check_odd_names),
    Check("symlink_not_followed", check_symlink_not_followed),
    Check("download_stays_inside_target", check_download_stays_inside_target),
    Check("big_file_256mib", check_big_file_256mib, slow=True),
    Check("processes_and_kill", check_processes_and_kill),
    Check("network_none", check_network_none),
    Check("network_public", check_network_public),
    Check("network_allowlist", check_network_allowlist),
    Check("memory_limit", check_memory_limit),
    Check("cpu_limit", check_cpu_limit),
    Check("build_failed", check_build_failed),
    Check("stop_fast", check_stop_fast),
    Check("stop_removes_everything", check_stop_removes_everything),
    Check("snapshot_roundtrip", check_snapshot_roundtrip),
)
"""Every check, in a stable order."""

CHECK_NAMES: tuple[str, ...] = tuple(c.name for c in CHECKS)
_BY_NAME = {c.name: c for c in CHECKS}


def gaps_of(backend: type[Sandbox]) -> frozenset[str]:
    """The checks ``backend`` declares it fails.

    Raises:
        ValueError: a declared gap names no check (a typo would silently hide nothing).
    """
    gaps = frozenset(getattr(backend, "known_conformance_gaps", frozenset()))
    unknown = gaps - set(CHECK_NAMES)
    if unknown:
        raise ValueError(f"{backend.__name__}.known_conformance_gaps names unknown checks: {sorted(unknown)}")
    return gaps


def format_gaps(backend: type[Sandbox]) -> str:
    """A human listing of ``backend``'s known gaps, one line per check."""
    gaps = gaps_of(backend)
    name = getattr(backend, "name", backend.__name__)
    if not gaps:
        return f"conformance: backend {name!r} declares no known gaps"
    lines = [f"conformance: backend {name!r} declares {len(gaps)} known gap(s):"]
    lines += [f"  - {g}: {_BY_NAME[g].doc}" for g in CHECK_NAMES if g in gaps]
    return "\n".join(lines)


def print_gaps(backend: type[Sandbox]) -> None:
    """Print :func:`format_gaps` on stdout."""
    print(format_gaps(backend))


async def run_check(
    name: str,
    make_sandbox: SandboxFactory,
    tmp_path: Path,
    *,
    leftovers: LeftoverProbe | None = None,
    base_spec: dict[str, Any] | None = None,
    gaps: frozenset[str] = frozenset(),
) -> None:
    """Run one check.

    Args:
        name: a name from :data:`CHECK_NAMES`.
        make_sandbox: factory of unstarted sandboxes (a backend class works).
        tmp_path: a fresh host folder for the check.
        leftovers: optional probe of what a stopped sandbox left behind.
        base_spec: SandboxSpec fields applied to every spec the check makes.
        gaps: names to skip (the backend's declared gaps).

    Raises:
        CheckSkipped: ``name`` is in ``gaps``.
        ConformanceFailure: the backend misbehaved (an AssertionError).
        KeyError: no check has that name.
    """
    check = _BY_NAME[name]
    if name in gaps:
        raise CheckSkipped(f"{name}: known conformance gap")
    ctx = CheckContext(
        make_sandbox=make_sandbox,
        tmp=tmp_path,
        check_name=name,
        leftovers=leftovers,
        base_spec=dict(base_spec or {}),
    )
    async with asyncio.timeout(CHECK_TIMEOUT_SEC):
        await check.func(ctx)


def run_check_sync(name: str, make_sandbox: SandboxFactory, tmp_path: Path, **kwargs: Any) -> None:
    """:func:`run_check` in a fresh event loop (for plain pytest tests)."""
    asyncio.run(run_check(name, make_sandbox, tmp_path, **kwargs))


@dataclass(frozen=True)
class SuiteReport:
    """Outcome of :func:`run_suite`: names passed, failed (with message) and skipped."""

    passed: list[str]
    failed: dict[str, str]
    skipped: list[str]


async def run_suite(
    backend: type[Sandbox],
    tmp_path: Path,
    *,
    make_sandbox: SandboxFactory | None = None,
    leftovers: LeftoverProbe | None = None,
    names: Sequence[str] | None = None,
) -> SuiteReport:
    """Run every check (or ``names``) one after another against ``backend`` and print gaps.

    Returns:
        A :class:`SuiteReport`.
    """
    gaps = gaps_of(backend)
    report = SuiteReport([], {}, [])
    for name in names or CHECK_NAMES:
        d = tmp_path / name
        d.mkdir(parents=True, exist_ok=True)
        try:
            await run_check(name, make_sandbox or backend, d, leftovers=leftovers, gaps=gaps)
        except CheckSkipped:
            report.skipped.append(name)
        except Exception as exc:  # noqa: BLE001 - a report collects every failure
            report.failed[name] = f"{type(exc).__name__}: {exc}"
        else:
            report.passed.append(name)
    print_gaps(backend)
    return report


def pytest_params(backend: type[Sandbox]) -> list[Any]:
    """Every check as a ``pytest.param``: known gaps carry a skip mark, slow ones ``slow``.

    Use with ``@pytest.mark.parametrize("check", pytest_params(Backend))``.
    """
    import pytest

    gaps = gaps_of(backend)
    params = []
    for c in CHECKS:
        marks: list[Any] = []
        if c.slow:
            marks.append(pytest.mark.slow)
        if c.name in gaps:
            marks.append(
                pytest.mark.skip(reason=f"known conformance gap of backend {getattr(backend, 'name', '?')!r}")
            )
        params.append(pytest.param(c.name, id=c.name, marks=marks))
    return params


__all__ = [
    "BASE_DOCKERFILE",
    "CHECKS",
    "CHECK_NAMES",
    "CONFORMANCE_JOB_ID",
    "Check",
    "CheckContext",
    "CheckSkipped",
    "ConformanceFailure",
    "LeftoverProbe",
    "SandboxFactory",
    "SuiteReport",
    "format_gaps",
    "gaps_of",
    "print_gaps",
    "pytest_params",
    "run_check",
    "run_check_sync",
    "run_suite",
]
