"""Helpers and fixtures for task-loading tests: the two-step task of issue 2 in a tmp folder.

A plain module (not a conftest.py, which would shadow the root conftest's ``import conftest``);
test modules wrap the factories in their own fixtures.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

TWO_STEP_TOML = """\
multi_step_reward_strategy = "final"

[agent]
timeout_sec = 300

[verifier]
timeout_sec = 60

[environment]
network_mode = "no-network"

[[steps]]
name = "write"
min_reward = 1.0

[[steps]]
name = "append"
"""

TEST_SH = """\
#!/usr/bin/env bash
mkdir -p /logs/verifier
if [ -f /app/out.txt ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""


def write_files(root: Path, files: dict[str, str | bytes]) -> Path:
    """Write ``files`` (relative path → text or bytes) under ``root``; returns ``root``."""
    for rel, content in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)
    return root


def two_step_files(toml: str = TWO_STEP_TOML) -> dict[str, str | bytes]:
    """The files of the acceptance two-step task (steps write and append)."""
    files: dict[str, str | bytes] = {
        "task.toml": toml,
        "environment/Dockerfile": "FROM debian:bookworm-slim\nWORKDIR /app\n",
    }
    for step in ("write", "append"):
        files[f"steps/{step}/instruction.md"] = f"Do {step}.\n"
        files[f"steps/{step}/tests/test.sh"] = TEST_SH
        files[f"steps/{step}/solution/solve.sh"] = "echo x >> /app/out.txt\n"
    return files


def single_step_files(toml: str = '[environment]\nnetwork_mode = "no-network"\n') -> dict:
    """A valid single-step task."""
    return {
        "task.toml": toml,
        "instruction.md": "Write /app/out.txt.\n",
        "environment/Dockerfile": "FROM debian:bookworm-slim\n",
        "tests/test.sh": TEST_SH,
        "solution/solve.sh": "echo x > /app/out.txt\n",
    }


def two_step_factory(tmp_path: Path) -> Callable[..., Path]:
    """A factory ``make(toml=..., name=..., extra={...})`` writing the two-step task in tmp_path."""

    def make(
        toml: str = TWO_STEP_TOML, name: str = "two-steps", extra: dict[str, str | bytes] | None = None
    ) -> Path:
        files = two_step_files(toml)
        files.update(extra or {})
        return write_files(tmp_path / name, files)

    return make


def single_step_factory(tmp_path: Path) -> Callable[..., Path]:
    """A factory ``make(toml=..., extra={...}, drop=[...])`` writing a single-step task."""

    def make(
        toml: str = '[environment]\nnetwork_mode = "no-network"\n',
        name: str = "one",
        extra: dict[str, str | bytes] | None = None,
        drop: tuple[str, ...] = (),
    ) -> Path:
        files = single_step_files(toml)
        files.update(extra or {})
        for rel in drop:
            files.pop(rel)
        return write_files(tmp_path / name, files)

    return make


def line_of(path: Path, needle: str) -> int:
    """1-based line of the first line of ``path`` containing ``needle``."""
    for n, line in enumerate(path.read_text().splitlines(), start=1):
        if needle in line:
            return n
    raise AssertionError(f"{needle!r} not in {path}")
