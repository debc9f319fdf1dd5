"""A task's seed trajectory: the one rule that says whether it is usable (Harbor 0.26 task-level
seeding; docs/agents.md "Seed trajectories").

A task may ship ``trajectory.json`` (an ATIF document, the Agent Trajectory Interchange Format)
beside its first
instruction. :func:`read_seed` reads and checks it; task validation
(:mod:`cairn.task.validate`, so ``cairn tasks check`` and every run's load of the task) and the
agents that load the seed (:func:`cairn.agents.trajectory.load_seed`) all call it, so what the
check reports is exactly what a run refuses.

What is checked (the fields an agent reads when it replays the seed): JSON in UTF-8; an object
whose ``schema_version`` starts with ``ATIF-``; a non-empty ``steps`` list; every step an object
with ``source`` ``system``/``user``/``agent``, a string ``message`` (when given), ``tool_calls``
objects with string ``tool_call_id`` and ``function_name`` and object ``arguments``, and an
``observation`` object whose ``results`` are objects with string ``content``. A problem names
the field (``steps[2].tool_calls[0].function_name``) and, for a file of at most
:data:`~cairn._util.inputfiles.MAX_INPUT_BYTES`, the line of the object it is in.
"""

from __future__ import annotations

import json
import json.decoder
import json.scanner
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cairn._util.inputfiles import MAX_INPUT_BYTES, InputFileError, read_input

SEED_FILE = "trajectory.json"
"""A task's prior agent context: an ATIF trajectory beside the first step's instruction (the
task root for a single-step task, ``steps/<first>/`` for a multi-step one)."""

MAX_SEED_BYTES = 64 << 20
"""The largest seed trajectory read: 64 MiB (a long session's trajectory is a few MiB; the
JSON parser reads 64 MiB in well under a second)."""

SOURCES = ("system", "user", "agent")
"""The ATIF step sources."""


class SeedError(ValueError):
    """A seed trajectory a run refuses.

    Attributes:
        path: the file, as the caller named it.
        reason: what is wrong, without the path (``"not JSON: …"``, ``"step 2 (`steps[1]`) has
            no source …"``).
        line: the 1-based line the problem is on, when known.
    """

    def __init__(self, path: Path | str, reason: str, line: int | None = None) -> None:
        self.path = Path(path)
        self.reason = reason
        self.line = line
        where = f"{path}:{line}" if line is not None else f"{path}"
        super().__init__(f"task trajectory {where}: {reason}")


LineOf = Callable[[Any], int | None]


def _call_problem(call: Any, field: str) -> str | None:
    """What is wrong with one ATIF tool call, naming the field, or ``None``."""
    if not isinstance(call, dict):
        return f"`{field}` is not an object"
    for key in ("tool_call_id", "function_name"):
        if not isinstance(call.get(key), str):
            return f"`{field}.{key}` is missing or not a string"
    if not isinstance(call.get("arguments", {}), dict):
        return f"`{field}.arguments` is not an object"
    return None


def _problem(doc: Any, line_of: LineOf) -> tuple[str, int | None] | None:
    """The first thing wrong with a parsed seed, with the line of the object it is in."""
    if not isinstance(doc, dict) or not str(doc.get("schema_version", "")).startswith("ATIF-"):
        return ('not an ATIF document (no `schema_version` "ATIF-v…" in a top-level object)', line_of(doc))
    steps = doc.get("steps")
    if not isinstance(steps, list) or not steps:
        return "no steps (`steps` must be a non-empty list)", line_of(doc)
    for i, step in enumerate(steps):
        where = f"step {i + 1} (`steps[{i}]`)"
        if not isinstance(step, dict):
            return f"{where} is not an object", line_of(doc)
        line = line_of(step)
        if step.get("source") not in SOURCES:
            return (f"{where} has no source system/user/agent (`source` is {step.get('source')!r})", line)
        if not isinstance(step.get("message", ""), str):
            return f"{where}: `message` is not a string", line
        calls = step.get("tool_calls") or []
        if not isinstance(calls, list):
            return f"{where}: `tool_calls` is not a list", line
        for k, call in enumerate(calls):
            what = _call_problem(call, f"steps[{i}].tool_calls[{k}]")
            if what is not None:
                return (
                    f"{where}: tool_calls need tool_call_id, function_name and arguments (an object): {what}",
                    line_of(call) or line,
                )
        observation = step.get("observation") or {}
        if not isinstance(observation, dict):
            return f"{where}: `observation` is not an object", line
        results = observation.get("results") or []
        if not isinstance(results, list):
            return f"{where}: `observation.results` is not a list", line
        for k, result in enumerate(results):
            if not isinstance(result, dict) or not isinstance(result.get("content", ""), str):
                return (
                    f"{where}: observation.results must be objects with text content "
                    f"(`steps[{i}].observation.results[{k}]`)",
                    line_of(result) or line,
                )
    return None


def _locating_parse(text: str) -> tuple[Any, LineOf]:
    """Parse ``text`` as JSON remembering where each object starts; ``line_of(obj)`` is the
    1-based line of an object of the result (``None`` for anything else)."""
    starts: dict[int, int] = {}
    decoder = json.JSONDecoder()
    plain = decoder.parse_object  # type: ignore[attr-defined]

    def parse_object(s_and_end: tuple[str, int], *args: Any, **kwargs: Any) -> tuple[Any, int]:
        obj, end = plain(s_and_end, *args, **kwargs)
        starts[id(obj)] = s_and_end[1] - 1
        return obj, end

    decoder.parse_object = parse_object  # type: ignore[attr-defined]
    decoder.scan_once = json.scanner.py_make_scanner(decoder)  # type: ignore[attr-defined]
    doc = decoder.decode(text)

    def line_of(obj: Any) -> int | None:
        offset = starts.get(id(obj)) if isinstance(obj, dict) else None
        return None if offset is None else text.count("\n", 0, offset) + 1

    return doc, line_of


def read_seed(path: Path) -> list[dict[str, Any]]:
    """Read and check a task's seed trajectory; return its steps.

    Args:
        path: the ``trajectory.json`` file (as the caller names it; errors name it so).

    Returns:
        The ATIF steps, oldest first: each a dict with ``source`` (``system``, ``user`` or
        ``agent``) and ``message`` (a string), optionally ``tool_calls`` and ``observation``.

    Raises:
        SeedError: the file cannot be read (not a regular file, over :data:`MAX_SEED_BYTES`),
            is not UTF-8 JSON, or is not an ATIF trajectory; the first problem, with its line
            when known.
    """
    try:
        text = read_input(path, limit=MAX_SEED_BYTES).decode("utf-8")
    except InputFileError as exc:
        raise SeedError(path, exc.reason) from None
    except UnicodeDecodeError as exc:
        raise SeedError(path, f"not JSON: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SeedError(path, f"not JSON: {exc.msg} (column {exc.colno})", exc.lineno) from None
    except RecursionError:
        raise SeedError(path, "not JSON: nested too deeply") from None
    problem = _problem(doc, lambda _obj: None)
    if problem is None:
        steps: list[dict[str, Any]] = doc["steps"]
        return steps
    reason, line = problem
    if len(text) <= MAX_INPUT_BYTES:  # locate it (the pure-Python parser: small files only)
        try:
            located, line_of = _locating_parse(text)
            reason, line = _problem(located, line_of) or problem
        except (ValueError, RecursionError):
            pass
    raise SeedError(path, reason, line)


__all__ = ["MAX_SEED_BYTES", "SEED_FILE", "SOURCES", "SeedError", "read_seed"]
