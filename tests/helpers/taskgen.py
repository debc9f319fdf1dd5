"""Write real task folders for tests (Harbor layout), so each test states its task in a few lines.

Example::

    path = write_task(tmp_path, "two", steps=[
        StepSpec("write", solve="echo 1 > /app/a.txt", test=REWARD_IF("test -f /app/a.txt"),
                 min_reward=1.0),
        StepSpec("append", ...)])
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

DOCKERFILE = "FROM debian:bookworm-slim\nWORKDIR /app\n"


def reward_if(condition: str) -> str:
    """A test.sh body writing 1 to reward.txt when ``condition`` (shell) holds, else 0."""
    return (
        f"if {condition}; then echo 1 > /logs/verifier/reward.txt; "
        f"else echo 0 > /logs/verifier/reward.txt; fi\n"
    )


def constant_reward(value: float | dict) -> str:
    """A test.sh body writing a constant reward (a number → reward.txt, a dict → reward.json)."""
    if isinstance(value, dict):
        return f"cat > /logs/verifier/reward.json <<'EOF'\n{json.dumps(value)}\nEOF\n"
    return f"echo {value} > /logs/verifier/reward.txt\n"


@dataclass
class StepSpec:
    """One step of a generated task (``None`` fields are not written)."""

    name: str
    instruction: str = "Do the step."
    test: str | None = "echo 1 > /logs/verifier/reward.txt\n"
    solve: str | None = "true\n"
    min_reward: float | dict | None = None
    toml_extra: str = ""
    workdir: dict[str, str] = field(default_factory=dict)


def _toml_value(v) -> str:
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + " }"
    return json.dumps(v)


def write_task(
    root: Path,
    name: str,
    *,
    steps: list[StepSpec] | None = None,
    strategy: str | None = None,
    toml_extra: str = "",
    dockerfile: str = DOCKERFILE,
    network: str = "no-network",
    allowed_hosts: tuple[str, ...] = (),
    root_keys: str = "",
    instruction: str = "Do the task.",
    test: str = "echo 1 > /logs/verifier/reward.txt\n",
    solve: str | None = "true\n",
    files: dict[str, str] | None = None,
) -> Path:
    """Write a task folder ``root/name`` and return its path.

    Args:
        steps: multi-step when given; else a single-step task with ``instruction``/``test``/``solve``.
        strategy: ``multi_step_reward_strategy``.
        toml_extra: TOML appended at the root level before ``[environment]`` (tables allowed).
        dockerfile: environment/Dockerfile content.
        network: ``[environment].network_mode``.
        allowed_hosts: ``[environment].allowed_hosts`` (written when given).
        root_keys: TOML keys of the root table (e.g. ``artifacts = [...]``), written first.
        files: extra files (relative path → content).
    """
    task = root / name
    task.mkdir(parents=True)
    lines = [root_keys] if root_keys else []
    if strategy:
        lines.append(f'multi_step_reward_strategy = "{strategy}"')
    lines.append(f'[task]\nname = "test/{name}"\n')
    lines.append(toml_extra)
    lines.append(f'[environment]\nnetwork_mode = "{network}"')
    if allowed_hosts:
        lines.append("allowed_hosts = [" + ", ".join(f'"{h}"' for h in allowed_hosts) + "]")
    lines.append("")
    (task / "environment").mkdir()
    (task / "environment" / "Dockerfile").write_text(dockerfile)
    if steps is None:
        (task / "instruction.md").write_text(instruction)
        (task / "tests").mkdir()
        (task / "tests" / "test.sh").write_text("#!/bin/bash\n" + test)
        if solve is not None:
            (task / "solution").mkdir()
            (task / "solution" / "solve.sh").write_text("#!/bin/bash\n" + solve)
    else:
        for s in steps:
            lines.append(f'[[steps]]\nname = "{s.name}"')
            if s.min_reward is not None:
                lines.append(f"min_reward = {_toml_value(s.min_reward)}")
            lines.append(s.toml_extra)
            d = task / "steps" / s.name
            d.mkdir(parents=True)
            (d / "instruction.md").write_text(s.instruction)
            if s.test is not None:
                (d / "tests").mkdir()
                (d / "tests" / "test.sh").write_text("#!/bin/bash\n" + s.test)
            if s.solve is not None:
                (d / "solution").mkdir()
                (d / "solution" / "solve.sh").write_text("#!/bin/bash\n" + s.solve)
            for rel, content in s.workdir.items():
                p = d / "workdir" / rel
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_text(content)
    for rel, content in (files or {}).items():
        p = task / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(content)
    (task / "task.toml").write_text(textwrap.dedent("\n".join(lines)) + "\n")
    return task
