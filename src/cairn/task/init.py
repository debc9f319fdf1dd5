"""``cairn tasks init``: write a runnable task skeleton (design §2).

The skeleton passes ``cairn tasks check --strict``; its oracle passes every step and a nop run
scores 0. Single-step: the agent writes ``hello`` to ``/app/hello.txt``. Multi-step (``steps``
given): step *k* appends its own name as a line to ``/app/log.txt`` and its verifier checks the
whole file, so each step depends on the state the earlier steps left — the point of a
multi-step task.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from cairn.errors import UsageError
from cairn.task.model import STEP_NAME_RE

DOCKERFILE = """\
FROM debian:bookworm-slim
WORKDIR /app
"""

_TEST_HEADER = """\
#!/usr/bin/env bash
# Verifier: writes 1 to /logs/verifier/reward.txt when the check passes, else 0.
# No `set -e`: a failing command must not end the script before the reward is written.
mkdir -p /logs/verifier
"""

_SINGLE_TEST = (
    _TEST_HEADER
    + """\
if [ "$(cat /app/hello.txt 2>/dev/null)" = "hello" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""
)

_SINGLE_SOLVE = """\
#!/usr/bin/env bash
# Oracle solution: run by `cairn run -a oracle`.
echo hello > /app/hello.txt
"""

_SINGLE_INSTRUCTION = """\
Create the file `/app/hello.txt` containing the single line `hello`.
"""


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


DEFAULT_ORG = "local"
"""The org ``cairn tasks init`` gives a task name written without one."""


def _task_toml(name: str, steps: Sequence[str]) -> str:
    lines = [
        'schema_version = "1.4"',
    ]
    if steps:
        lines.append('multi_step_reward_strategy = "mean"')
    lines += [
        "",
        "[task]",
        f"name = {_toml_str(name)}",
        'description = "A skeleton written by `cairn tasks init`; edit it."',
        "",
        "[agent]",
        "timeout_sec = 600.0",
        "",
        "[verifier]",
        "timeout_sec = 120.0",
        "",
        "[environment]",
        'network_mode = "no-network"',
        "cpus = 1",
        "memory_mb = 1024",
    ]
    for step in steps:
        lines += [
            "",
            "[[steps]]",
            f"name = {_toml_str(step)}",
            "min_reward = 1.0  # stop the trial when this step does not pass",
        ]
    return "\n".join(lines) + "\n"


def _step_files(steps: Sequence[str], k: int) -> dict[str, str]:
    name = steps[k]
    expected = "".join(f"{s}\\n" for s in steps[: k + 1])
    before = ", ".join(f"`{s}`" for s in steps[:k])
    context = f" The file already holds the lines {before} from the earlier steps; keep them." if k else ""
    test = (
        _TEST_HEADER
        + f"""\
expected="$(printf '{expected}')"
if [ -f /app/log.txt ] && [ "$(cat /app/log.txt)" = "$expected" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""
    )
    return {
        f"steps/{name}/instruction.md": f"Append the line `{name}` to the file `/app/log.txt` (create it if needed).{context}\n",  # noqa: E501
        f"steps/{name}/tests/test.sh": test,
        f"steps/{name}/solution/solve.sh": f"#!/usr/bin/env bash\n# Oracle solution of step {name}.\necho {name} >> /app/log.txt\n",  # noqa: E501
    }


def skeleton_files(name: str, steps: Sequence[str] = ()) -> dict[str, str]:
    """The files of a task skeleton.

    Args:
        name: the task name (``[task].name``).
        steps: step names for a multi-step task; empty for a single-step task.

    Returns:
        Relative path → text.
    """
    files = {"task.toml": _task_toml(name, steps), "environment/Dockerfile": DOCKERFILE}
    if not steps:
        files.update(
            {
                "instruction.md": _SINGLE_INSTRUCTION,
                "tests/test.sh": _SINGLE_TEST,
                "solution/solve.sh": _SINGLE_SOLVE,
            }
        )
    for k in range(len(steps)):
        files.update(_step_files(steps, k))
    return files


def init_task(
    name: str, steps: Sequence[str] = (), parent: Path = Path("."), *, root: Path | None = None
) -> Path:
    """Write a task skeleton into ``root`` (default ``parent/<last part of name>``).

    Args:
        name: the task name, ``org/name`` or ``name`` (then written as ``local/name``, since
            Harbor 0.26 loads only ``org/name``); the folder is the part after the ``/``.
        steps: step names for a multi-step task (each valid and unique); empty for single-step.
        parent: the folder to create the task in (when ``root`` is not given).
        root: the task folder itself, any path (missing parents are created); the task name
            is still ``name``.

    Returns:
        The new task folder.

    Raises:
        UsageError: an invalid task or step name, a duplicate step, or a target folder that
            already exists and is not empty.
    """
    parts = name.split("/")
    folder = parts[-1]
    if len(parts) > 2 or not all(STEP_NAME_RE.match(p) for p in parts):
        raise UsageError(
            f"invalid task name {name!r}: use letters, digits, `.`, `_` and `-` (optionally `org/` in front)"
        )
    steps = [s.strip() for s in steps]
    for s in steps:
        if not STEP_NAME_RE.match(s):
            raise UsageError(
                f"invalid step name {s!r}: use letters, digits, `.`, `_` and `-`, "
                "starting with a letter or digit"
            )
    dupes = sorted({s for s in steps if steps.count(s) > 1})
    if dupes:
        raise UsageError(f"duplicate step name(s): {', '.join(dupes)}")
    root = Path(parent) / folder if root is None else Path(root)
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise UsageError(f"{root} already exists and is not empty")
    # Harbor 0.26 loads only `org/name` task names: a bare name gets the org `local`.
    full_name = name if len(parts) == 2 else f"{DEFAULT_ORG}/{name}"
    for rel, text in skeleton_files(full_name, steps).items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        if rel.endswith(".sh"):
            target.chmod(0o755)
    return root
