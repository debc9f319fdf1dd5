"""``cairn export``: a job's per-step (trajectory, reward) records for training (docs/viewer.md).

One record per *executed* step of every finished trial — a step whose procedure began
(:func:`~cairn.results.aggregate.step_reached`), plus steps replayed by ``--start-step``
(source ``oracle``). Steps not reached are never exported. Records from replayed or errored
steps are kept but marked (``replayed``, ``errored``), never mixed in silently; filters
(``passed_only``, ``min_reward``, ``steps``) apply to the step's own verdict.

Formats (record schema ``cairn.export.step/1``, documented in docs/viewer.md):

- ``jsonl``: one JSON object per line with the fields of :func:`step_records` and
  ``messages`` in OpenAI chat form (``system``/``user``/``assistant`` with ``tool_calls``/
  ``tool``).
- ``sharegpt``: the same metadata with ``conversations`` ``[{from, value}]``
  (``system``/``human``/``gpt``/``function_call``/``observation``).
- ``atif``: one ATIF trajectory per line (the step's ``trajectory.json`` as written, or one
  built from the instruction when the agent wrote none) with the record's metadata under
  ``extra.cairn``.
- ``parquet``: the jsonl columns, nested values as JSON strings (needs ``pyarrow``).
- ``rollouts``: per step, its model calls with token ids, logprobs and a loss mask, the step's
  and the trial's reward and a group id (schema ``cairn.export.rollout/1``,
  :mod:`cairn.results.rollouts`, docs/export.md).

Reads only what :mod:`cairn.results.store` wrote.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from cairn.results.aggregate import step_reached
from cairn.results.model import StepResult, StepSource, TrialResult
from cairn.results.store import TrialPaths, iter_trial_results, read_json

EXPORT_SCHEMA = "cairn.export.step/1"
FORMATS = ("jsonl", "sharegpt", "atif", "parquet", "rollouts")

RECORD_FIELDS = (
    "schema",
    "job",
    "task",
    "trial",
    "trial_id",
    "attempt",
    "step",
    "step_index",
    "steps_total",
    "instruction",
    "messages",
    "reward",
    "rewards",
    "passed",
    "source",
    "replayed",
    "errored",
    "error_kind",
    "error_category",
    "agent_exit",
    "outcome",
    "trial_reward",
    "trial_passed",
    "agent",
    "model",
    "tokens",
    "cost_usd",
    "has_trajectory",
)
"""The fields of a jsonl record, in order."""


@dataclass(frozen=True)
class ExportFilter:
    """Which step records to keep.

    Attributes:
        passed_only: only steps that passed (design §5.2).
        min_reward: only steps whose primary reward is ≥ this (steps without one are dropped).
        steps: only steps with these names (empty: every step).
    """

    passed_only: bool = False
    min_reward: float | None = None
    steps: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Refuse a ``min_reward`` that is not a finite number.

        Raises:
            ValueError: ``min_reward`` is NaN or infinite (NaN would drop every step silently).
        """
        if self.min_reward is not None and not math.isfinite(self.min_reward):
            raise ValueError(f"--min-reward must be a finite number, not {self.min_reward}")

    def keep(self, row: StepResult) -> bool:
        """Whether a step row passes the filter."""
        if self.passed_only and not row.passed:
            return False
        if self.min_reward is not None and (row.reward is None or row.reward < self.min_reward):
            return False
        return not self.steps or row.name in self.steps


def _text(x: Any) -> str:
    if isinstance(x, str):
        return x
    return json.dumps(x, ensure_ascii=False)


def atif_messages(trajectory: dict[str, Any]) -> list[dict[str, Any]]:
    """An ATIF trajectory as OpenAI-style chat messages.

    ``system``/``user`` steps become messages of that role; an ``agent`` step becomes an
    ``assistant`` message (its ``tool_calls`` as ``{id, type: function, function: {name,
    arguments}}`` with arguments as a JSON string; ``reasoning_content`` kept under that key)
    followed by one ``tool`` message per observation result.

    Args:
        trajectory: the parsed trajectory.json.

    Returns:
        The messages, in order.
    """
    out: list[dict[str, Any]] = []
    for s in trajectory.get("steps") or []:
        if not isinstance(s, dict):
            continue
        src = s.get("source")
        msg = s.get("message")
        if src in ("system", "user"):
            out.append({"role": src, "content": _text(msg if msg is not None else "")})
            continue
        m: dict[str, Any] = {"role": "assistant", "content": _text(msg) if msg else ""}
        if s.get("reasoning_content"):
            m["reasoning_content"] = s["reasoning_content"]
        calls = [c for c in s.get("tool_calls") or [] if isinstance(c, dict)]
        if calls:
            m["tool_calls"] = [
                {
                    "id": c.get("tool_call_id"),
                    "type": "function",
                    "function": {"name": c.get("function_name"), "arguments": _text(c.get("arguments", {}))},
                }
                for c in calls
            ]
        out.append(m)
        for r in (s.get("observation") or {}).get("results") or []:
            if isinstance(r, dict):
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": r.get("source_call_id"),
                        "content": _text(r.get("content", "")),
                    }
                )
    return out


def _sharegpt(messages: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    conv: list[dict[str, str]] = []
    for m in messages:
        role = m["role"]
        if role == "system":
            conv.append({"from": "system", "value": m["content"]})
        elif role == "user":
            conv.append({"from": "human", "value": m["content"]})
        elif role == "tool":
            conv.append({"from": "observation", "value": m["content"]})
        else:
            if m.get("content"):
                conv.append({"from": "gpt", "value": m["content"]})
            for c in m.get("tool_calls") or []:
                conv.append(
                    {
                        "from": "function_call",
                        "value": json.dumps(
                            {
                                "name": c["function"]["name"],
                                "arguments": json.loads(c["function"]["arguments"] or "{}")
                                if _is_json(c["function"]["arguments"])
                                else c["function"]["arguments"],
                            },
                            ensure_ascii=False,
                        ),
                    }
                )
    return conv


def _is_json(s: str) -> bool:
    try:
        json.loads(s)
        return True
    except (TypeError, ValueError):
        return False


def _read_optional_text(path: Path) -> str | None:
    if path.is_symlink() or not path.is_file():
        return None
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _trajectory(path: Path) -> dict[str, Any] | None:
    if path.is_symlink() or not path.is_file():
        return None
    try:
        data = read_json(path)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("steps"), list) else None


def job_step_names(job_dir: Path) -> list[str]:
    """The step names of a job's finished trials, each once, in declared order (the order of
    the first trial holding it); every declared step counts, reached or not.

    Args:
        job_dir: the job folder.

    Returns:
        The names; empty when no trial has a readable result.json.
    """
    seen: dict[str, None] = {}
    for rf in iter_trial_results(Path(job_dir)):
        if rf.result is not None:
            for row in rf.result.steps:
                seen.setdefault(row.name, None)
    return list(seen)


def _executed(row: StepResult) -> bool:
    return row.source is StepSource.ORACLE or step_reached(row)


def step_records(
    job_dir: Path, flt: ExportFilter = ExportFilter()
) -> Iterator[tuple[dict[str, Any], dict[str, Any] | None]]:
    """Every executed step of a job's finished trials, as export records.

    Args:
        job_dir: the job folder.
        flt: which steps to keep.

    Yields:
        ``(record, trajectory)``: the record has the :data:`RECORD_FIELDS` (``replayed`` is
        true for source ``oracle``; ``errored`` for a step with an error or source ``error``/
        ``candidate_error``; ``messages`` from the step's trajectory.json, or just the
        instruction as a user message when the agent wrote none); ``trajectory`` is the parsed
        trajectory.json or ``None``. Trials whose result.json cannot be read are skipped (the
        caller can list them with :func:`cairn.results.store.iter_trial_results`).
    """
    job_dir = Path(job_dir)
    for rf in iter_trial_results(job_dir):
        if rf.result is None:
            continue
        r: TrialResult = rf.result
        trial = TrialPaths(rf.path.parent)
        for row in r.steps:
            if not _executed(row) or not flt.keep(row):
                continue
            sp = trial.step(row.index, row.name)
            traj = _trajectory(sp.agent / "trajectory.json")
            instruction = _read_optional_text(sp.instruction)
            messages = atif_messages(traj) if traj else []
            if instruction is None:
                instruction = next((m["content"] for m in messages if m["role"] == "user"), None)
            if not messages and instruction is not None:
                messages = [{"role": "user", "content": instruction}]
            errored = row.error is not None or row.source in (StepSource.ERROR, StepSource.CANDIDATE_ERROR)
            rec = {
                "schema": EXPORT_SCHEMA,
                "job": job_dir.name,
                "task": r.task.name,
                "trial": r.trial_name,
                "trial_id": r.trial_id,
                "attempt": r.attempt,
                "step": row.name,
                "step_index": row.index,
                "steps_total": r.steps_total,
                "instruction": instruction,
                "messages": messages,
                "reward": row.reward,
                "rewards": dict(row.rewards) if row.rewards is not None else None,
                "passed": row.passed,
                "source": row.source.value,
                "replayed": row.source is StepSource.ORACLE,
                "errored": errored,
                "error_kind": row.error.kind.value if row.error else None,
                "error_category": row.error.category.value if row.error else None,
                "agent_exit": row.agent_exit.value if row.agent_exit else None,
                "outcome": r.outcome.value,
                "trial_reward": r.reward,
                "trial_passed": r.passed,
                "agent": r.agent.name,
                "model": r.model,
                "tokens": row.tokens.model_dump() if row.tokens else None,
                "cost_usd": row.cost_usd,
                "has_trajectory": traj is not None,
            }
            yield rec, traj


def _atif_record(rec: dict[str, Any], traj: dict[str, Any] | None) -> dict[str, Any]:
    meta = {k: v for k, v in rec.items() if k not in ("messages", "instruction")}
    if traj is None:
        traj = {
            "schema_version": "ATIF-v1.7",
            "session_id": f"{rec['trial_id']}-{rec['step']}",
            "agent": {"name": rec["agent"], "version": "", "model_name": rec["model"]},
            "steps": (
                [{"step_id": 1, "source": "user", "message": rec["instruction"]}]
                if rec["instruction"] is not None
                else []
            ),
        }
    else:
        traj = dict(traj)
    traj["extra"] = {**(traj.get("extra") or {}), "cairn": meta}
    return traj


def export_job(
    job_dir: Path, fmt: str, out: TextIO | Path | str | None, flt: ExportFilter = ExportFilter()
) -> int:
    """Write a job's step records in one format.

    Args:
        job_dir: the job folder.
        fmt: ``jsonl``, ``sharegpt``, ``atif``, ``parquet`` or ``rollouts``.
        out: a text stream (one JSON document per line) for the line formats; a file path for
            ``parquet``.
        flt: which steps to keep.

    Returns:
        The number of records written.

    Raises:
        ValueError: unknown format, or ``parquet`` without a file path.
        ModuleNotFoundError: ``parquet`` without pyarrow installed.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r} (one of {', '.join(FORMATS)})")
    if fmt == "rollouts":
        from cairn.results.rollouts import export_rollouts

        return export_rollouts(job_dir, out, flt)
    if fmt == "parquet":
        if not isinstance(out, (str, Path)):
            raise ValueError("--format parquet needs -o FILE")
        import pyarrow as pa
        import pyarrow.parquet as pq

        cols: dict[str, list[Any]] = {k: [] for k in RECORD_FIELDS}
        for rec, _ in step_records(job_dir, flt):
            for k in RECORD_FIELDS:
                v = rec[k]
                cols[k].append(json.dumps(v, ensure_ascii=False) if isinstance(v, (dict, list)) else v)
        pq.write_table(pa.table(cols), str(out))
        return len(cols["schema"])
    if out is None or isinstance(out, (str, Path)):
        raise ValueError(f"format {fmt!r} writes to a text stream, not a file path")
    n = 0
    for rec, traj in step_records(job_dir, flt):
        if fmt == "jsonl":
            doc = rec
        elif fmt == "sharegpt":
            doc = {k: v for k, v in rec.items() if k != "messages"}
            doc["conversations"] = _sharegpt(rec["messages"])
        else:
            doc = _atif_record(rec, traj)
        out.write(json.dumps(doc, ensure_ascii=False, allow_nan=False) + "\n")
        n += 1
    return n
