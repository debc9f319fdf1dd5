"""Issue 4: with no Docker daemon reachable, `cairn run -e auto` runs a multi-step example on the
local backend and says so."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cairncli import run_cairn

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.local
@pytest.mark.slow
def test_auto_falls_back_to_local_and_passes(tmp_path):
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/closed.sock"}
    proc = run_cairn(
        "run",
        "-p",
        str(ROOT / "examples" / "two-steps"),
        "-a",
        "oracle",
        "-e",
        "auto",
        "--jobs-dir",
        str(tmp_path / "jobs"),
        "--job-name",
        "j",
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASS reward=1.00" in proc.stdout
    assert "local" in proc.stderr and "warning" in proc.stderr
    assert "stands in for the base image" in proc.stdout  # design §3.2: said, not only recorded
    (result,) = (tmp_path / "jobs" / "j" / "trials").glob("*/result.json")
    data = json.loads(result.read_text())
    assert data["backend"] == "local" and data["passed"] is True
    assert [s["reward"] for s in data["steps"]] == [1.0, 1.0]
