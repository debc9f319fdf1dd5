"""Build and write agent trajectories in Harbor's ATIF shape (``ATIF-v1.7``).

The fields cairn writes are listed in docs/agents.md, "Trajectories".

One :class:`Trajectory` is one agent run over one cairn step. Steps are plain dicts in ATIF
field names; :meth:`Trajectory.to_dict` drops ``None`` values and computes ``final_metrics`` as
the sums of the per-step ``metrics`` (deltas).

Resumed sessions (``--resume-agent-session``): the earlier conversation is included at the start
of the new trajectory through :meth:`Trajectory.add_history`. History steps keep their message,
tool calls, observation and timestamp, are renumbered with the file's sequential ``step_id``,
carry ``extra.cairn_history = true`` (and ``extra.cairn_step``, the cairn step they came from),
and lose their ``metrics``: their tokens were counted in the earlier step's file, so each file's
``final_metrics`` equals that cairn step's tokens and cost in result.json.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from cairn._util.jsonio import write_json_atomic
from cairn.task.seed import SEED_FILE, read_seed  # noqa: F401 - SEED_FILE re-exported

ATIF_SCHEMA_VERSION = "ATIF-v1.7"

Source = Literal["system", "user", "agent"]


def utc_now_iso() -> str:
    """The current time as ISO 8601 UTC with milliseconds, e.g. ``2025-10-16T14:30:00.123Z``."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def tool_call(tool_call_id: str, function_name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """An ATIF tool call object.

    Args:
        tool_call_id: the model's id for the call (correlates with ``source_call_id``).
        function_name: the tool name.
        arguments: the parsed arguments (a JSON object).

    Returns:
        ``{tool_call_id, function_name, arguments}``.
    """
    return {"tool_call_id": tool_call_id, "function_name": function_name, "arguments": dict(arguments)}


def step_metrics(
    prompt_tokens: int | None,
    completion_tokens: int | None,
    cached_tokens: int | None = None,
    cost_usd: float | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An ATIF per-step ``metrics`` object (token counts are this turn's deltas).

    Args:
        prompt_tokens: input tokens of the turn, cached ones included.
        completion_tokens: output tokens of the turn.
        cached_tokens: the subset of ``prompt_tokens`` served from a prompt cache.
        cost_usd: the turn's cost in USD, ``None`` when unknown.
        extra: provider-specific values.

    Returns:
        The metrics dict (``None`` values are dropped when written).
    """
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "cached_tokens": cached_tokens,
        "cost_usd": cost_usd,
        "extra": extra or None,
    }


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


class Trajectory:
    """One ATIF trajectory under construction.

    Args:
        session_id: identifies the agent session (kept across resumed cairn steps).
        agent_name: the agent's name (``llm``).
        agent_version: the agent's version string.
        model_name: the default model of the run.
        agent_extra: custom agent configuration recorded under ``agent.extra``.
        extra: root-level custom metadata (``extra``).
    """

    def __init__(
        self,
        *,
        session_id: str,
        agent_name: str,
        agent_version: str,
        model_name: str | None = None,
        agent_extra: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.session_id = session_id
        self.agent = {
            "name": agent_name,
            "version": agent_version,
            "model_name": model_name,
            "extra": agent_extra or None,
        }
        self.extra = extra or None
        self.steps: list[dict[str, Any]] = []

    def add_step(
        self,
        source: Source,
        message: str,
        *,
        tool_calls: list[dict] | None = None,
        observation_results: list[dict] | None = None,
        metrics: dict[str, Any] | None = None,
        model_name: str | None = None,
        reasoning_content: str | None = None,
        extra: dict[str, Any] | None = None,
        timestamp: str | None = None,
    ) -> dict[str, Any]:
        """Append a step and return it (the caller may keep filling its observation).

        Args:
            source: ``system``, ``user`` or ``agent``.
            message: the prompt, instruction or assistant text ("" allowed).
            tool_calls: ATIF tool calls (:func:`tool_call`), agent steps only.
            observation_results: ``[{source_call_id, content}]`` results of those calls.
            metrics: this turn's :func:`step_metrics`, agent steps only.
            model_name: the model that produced the turn.
            reasoning_content: the model's explicit reasoning text, if it returned any.
            extra: custom step metadata.
            timestamp: ISO 8601 UTC; now when omitted.

        Returns:
            The step dict, already in :attr:`steps`.
        """
        step: dict[str, Any] = {
            "step_id": len(self.steps) + 1,
            "timestamp": timestamp or utc_now_iso(),
            "source": source,
            "model_name": model_name,
            "message": message,
            "reasoning_content": reasoning_content,
            "tool_calls": tool_calls or None,
            "observation": (
                {"results": list(observation_results)} if observation_results is not None else None
            ),
            "metrics": metrics,
            "extra": extra or None,
        }
        self.steps.append(step)
        return step

    @staticmethod
    def add_result(step: dict[str, Any], source_call_id: str, content: str) -> None:
        """Append one tool result to ``step``'s observation.

        Args:
            step: an agent step returned by :meth:`add_step`.
            source_call_id: the ``tool_call_id`` the result answers.
            content: the observation text the model was given.
        """
        if step.get("observation") is None:
            step["observation"] = {"results": []}
        step["observation"]["results"].append({"source_call_id": source_call_id, "content": content})

    def add_history(self, steps: list[dict[str, Any]], *, cairn_step: str | None = None) -> None:
        """Append the earlier steps of a resumed session, marked as history.

        Call it before adding this run's own steps.

        Each copy is renumbered, loses ``metrics`` and gets ``extra.cairn_history = true`` (steps
        already marked keep their original ``extra.cairn_step``).

        Args:
            steps: ATIF steps of the earlier conversation, oldest first.
            cairn_step: the name of the cairn step they came from (for unmarked steps).
        """
        for old in steps:
            step = copy.deepcopy(old)
            step["step_id"] = len(self.steps) + 1
            step["metrics"] = None
            extra = dict(step.get("extra") or {})
            if not extra.get("cairn_history"):
                extra["cairn_history"] = True
                extra["cairn_step"] = cairn_step
            step["extra"] = extra
            self.steps.append(step)

    def add_seed(self, steps: list[dict[str, Any]]) -> None:
        """Append a task's seed trajectory (:func:`load_seed`) as the session's opening:
        copies renumbered, without ``metrics`` (no tokens were spent in this trial), marked
        ``extra.cairn_seed = true``. Call it before the step's own instruction.

        Args:
            steps: the seed's ATIF steps, oldest first.
        """
        for old in steps:
            step = copy.deepcopy(old)
            step["step_id"] = len(self.steps) + 1
            step.setdefault("timestamp", utc_now_iso())
            step.setdefault("message", "")
            step["metrics"] = None
            step["extra"] = {**(step.get("extra") or {}), "cairn_seed": True}
            self.steps.append(step)

    def final_metrics(self) -> dict[str, Any]:
        """Sums of the steps' metrics.

        Returns:
            ``{total_prompt_tokens, total_completion_tokens, total_cached_tokens, total_cost_usd,
            total_steps}``; ``total_cost_usd`` is ``None`` when any turn's cost is unknown.
        """
        with_metrics = [s["metrics"] for s in self.steps if s.get("metrics")]
        costs = [m.get("cost_usd") for m in with_metrics]
        return {
            "total_prompt_tokens": sum(m.get("prompt_tokens") or 0 for m in with_metrics),
            "total_completion_tokens": sum(m.get("completion_tokens") or 0 for m in with_metrics),
            "total_cached_tokens": sum(m.get("cached_tokens") or 0 for m in with_metrics),
            "total_cost_usd": None if any(c is None for c in costs) else float(sum(costs)),
            "total_steps": len(self.steps),
        }

    def to_dict(self) -> dict[str, Any]:
        """The trajectory as an ATIF JSON object, ``None`` values omitted."""
        return _drop_none(
            {
                "schema_version": ATIF_SCHEMA_VERSION,
                "session_id": self.session_id,
                "agent": self.agent,
                "steps": self.steps,
                "final_metrics": self.final_metrics(),
                "extra": self.extra,
            }
        )

    def write(self, path: Path) -> None:
        """Write ``trajectory.json`` atomically (temp file in the same folder, fsync, rename).

        Args:
            path: the destination file; its folder is created if missing.

        Raises:
            OSError: the file could not be written.
        """
        write_json_atomic(path, self.to_dict(), make_parents=True)


def load_seed(path: Path) -> list[dict[str, Any]]:
    """Read and check a task's seed trajectory; return its steps.

    The rule is task validation's (:func:`cairn.task.seed.read_seed`): a seed ``cairn tasks
    check`` accepts is one an agent loads, and the other way round.

    Args:
        path: the ``trajectory.json`` file.

    Returns:
        The ATIF steps, oldest first: each a dict with ``source`` (``system``, ``user`` or
        ``agent``) and ``message`` (a string), optionally ``tool_calls`` and ``observation``.

    Raises:
        ValueError: (a :class:`~cairn.task.seed.SeedError`) the file cannot be read, is not
            JSON, or is not an ATIF trajectory (the message names the file, the line when
            known, and the first problem).
    """
    return read_seed(path)


def seed_to_chat(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """ATIF steps as OpenAI-style chat messages (what a LiteLLM agent sends).

    ``system``/``user`` steps become those roles; an ``agent`` step becomes an ``assistant``
    message (its tool calls with JSON-encoded arguments), followed by one ``tool`` message per
    observation result that answers one of its calls. A call left without a result is answered
    ``[no result recorded]`` so the conversation stays valid for the provider.

    Args:
        steps: checked steps (:func:`load_seed`).

    Returns:
        The messages, oldest first.
    """
    import json

    out: list[dict[str, Any]] = []
    for step in steps:
        source, text = step["source"], step.get("message") or ""
        if source in ("system", "user"):
            out.append({"role": source, "content": text})
            continue
        calls = step.get("tool_calls") or []
        msg: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            msg["tool_calls"] = [
                {
                    "id": c["tool_call_id"],
                    "type": "function",
                    "function": {
                        "name": c["function_name"],
                        "arguments": json.dumps(c.get("arguments") or {}),
                    },
                }
                for c in calls
            ]
        out.append(msg)
        answers = {
            r.get("source_call_id"): r.get("content") or ""
            for r in (step.get("observation") or {}).get("results") or []
        }
        for c in calls:
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": c["tool_call_id"],
                    "content": answers.get(c["tool_call_id"], "[no result recorded]"),
                }
            )
    return out
