"""LLM-judge spend: ``judge_usage.json`` beside the reward file (docs/task-format.md).

A verifier that grades with a model may write ``/logs/verifier/judge_usage.json``::

    {"model": "openai/gpt-4.1-mini", "calls": 1,
     "prompt_tokens": 1200, "completion_tokens": 80, "cached_tokens": 0, "cost_usd": 0.0013}

(``input_tokens``/``output_tokens`` are read as prompt/completion; every key is optional; a list
of such objects is summed). cairn keeps it apart from the agent's tokens and cost in
``result.json`` (step ``judge``, trial ``judge``), the summary and ``--max-cost-usd``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from cairn.results.aggregate import sum_judge
from cairn.results.model import JudgeUsage, Tokens

JUDGE_USAGE_FILE = "judge_usage.json"
_CAP_BYTES = 64 * 1024
_MAX_MODEL_CHARS = 200


def _count(item: dict[str, Any], *names: str) -> int:
    for name in names:
        v = item.get(name)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {v!r}")
        return v
    return 0


def _one(item: Any) -> JudgeUsage:
    if not isinstance(item, dict):
        raise ValueError("each entry must be a JSON object")
    cost = item.get("cost_usd")
    if cost is not None and (
        isinstance(cost, bool) or not isinstance(cost, int | float) or not math.isfinite(cost) or cost < 0
    ):
        raise ValueError(f"cost_usd must be a non-negative number, got {cost!r}")
    model = item.get("model")
    if model is not None and not isinstance(model, str):
        raise ValueError("model must be a string")
    return JudgeUsage(
        tokens=Tokens(
            prompt=_count(item, "prompt_tokens", "input_tokens"),
            completion=_count(item, "completion_tokens", "output_tokens"),
            cached=_count(item, "cached_tokens"),
        ),
        cost_usd=float(cost) if cost is not None else None,
        models=[model[:_MAX_MODEL_CHARS]] if model else [],
        calls=_count(item, "calls"),
    )


def read_judge_usage(verifier_dir: Path) -> tuple[JudgeUsage | None, list[str]]:
    """Read the step's downloaded ``judge_usage.json``.

    Args:
        verifier_dir: the step's host ``verifier/`` folder.

    Returns:
        (the usage, or ``None`` when the file is absent or unreadable; warnings naming what was
        wrong with it). A bad file never fails the step.
    """
    path = verifier_dir / JUDGE_USAGE_FILE
    if not path.exists() and not path.is_symlink():
        return None, []
    if path.is_symlink() or not path.is_file():
        return None, [f"{JUDGE_USAGE_FILE} is not a regular file; judge usage not counted"]
    with path.open("rb") as fh:
        raw = fh.read(_CAP_BYTES + 1)
    if len(raw) > _CAP_BYTES:
        return None, [f"{JUDGE_USAGE_FILE} is larger than {_CAP_BYTES} bytes; not counted"]
    try:
        data = json.loads(raw.decode("utf-8"))
        items = data if isinstance(data, list) else [data]
        usage = sum_judge(_one(item) for item in items)
    except (ValueError, UnicodeDecodeError) as exc:
        return None, [f"{JUDGE_USAGE_FILE} unreadable ({exc}); judge usage not counted"]
    return usage, []
