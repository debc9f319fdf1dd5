"""The backend-agnostic conformance suite (design §3.4) against the local backend.

Every check of :mod:`cairn.sandbox.conformance` runs as its own test; the checks the local
backend knowingly fails (resource limits) are skipped and listed by :func:`test_gaps_listed`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cairn.sandbox import conformance
from cairn.sandbox.base import SandboxSpec
from cairn.sandbox.local.backend import LocalSandbox, find_local_sandboxes
from testbed import local_available

pytestmark = [pytest.mark.local, pytest.mark.skipif(not local_available(), reason="no local sandbox support")]


async def local_leftovers(spec: SandboxSpec) -> list[str]:
    """What is left of a stopped local sandbox: its folder (by marker) or its init process."""
    left = [str(path) for path, marker in find_local_sandboxes() if marker.get("trial_id") == spec.trial_id]
    needle = spec.trial_id.encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"pid1.py" in cmdline and needle in cmdline:
            left.append(f"process {pid}")
    return left


@pytest.mark.parametrize("check", conformance.pytest_params(LocalSandbox))
def test_conformance(check: str, tmp_path: Path) -> None:
    conformance.run_check_sync(check, LocalSandbox, tmp_path, leftovers=local_leftovers)


def test_gaps_listed(capsys: pytest.CaptureFixture[str]) -> None:
    """The declared gaps are real check names and the suite prints them."""
    assert conformance.gaps_of(LocalSandbox) == {"memory_limit", "cpu_limit"}
    conformance.print_gaps(LocalSandbox)
    out = capsys.readouterr().out
    assert "backend 'local' declares 2 known gap(s)" in out
    assert "memory_limit" in out and "cpu_limit" in out
