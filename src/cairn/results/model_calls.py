"""The model relay's per-step call record, ``model_calls.jsonl``, read as typed values.

The relay (:mod:`cairn.relay.ledger`, docs/relay.md) appends one JSON object per model call to
the step's ``agent/model_calls.jsonl``. This module is the one place that file is read: the
viewer's calls pane and ``cairn report``'s sums both take their values from here.

The file sits in the step's agent folder, which an agent may be able to write into, so every
line is hostile input: a line that is not a JSON object of the record's shape (not JSON, a
wrong type, a negative count, NaN, a line over :data:`MAX_LINE_BYTES`) is skipped and counted
(:attr:`CallLog.unreadable`), never a crash; strings stay data (the viewer escapes them).

Sums follow the relay's own rule (:func:`cairn.relay.ledger.summarise`): tokens and cost count
billed calls only (``kind: generate``, answered with a status below 400, not refused by a
budget); a token field is ``None`` only when no billed call knows it, and the cost is ``None``
when any billed call's cost is unknown. Unknown is never a made-up 0.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

MODEL_CALLS_FILE = "model_calls.jsonl"
"""The relay's per-step record file, in the step's agent folder."""

MAX_LINE_BYTES = 64 * 1024 * 1024
"""A line longer than this is skipped (counted as unreadable)."""

TOKEN_KINDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")
"""The token counts of a call's usage, in the order reports show them."""


def _new_list() -> list[Any]:
    return []


class _Line(BaseModel):
    # strict: "200" is no status, true is no token count; unknown keys (a newer relay) ignored
    model_config = ConfigDict(frozen=True, extra="ignore", strict=True, allow_inf_nan=False)


class CallUsage(_Line):
    """A call's token counts as the relay normalised them (``None``: unknown)."""

    input_tokens: int | None = Field(default=None, ge=0)
    """Every billed prompt token, cache reads and writes included."""
    output_tokens: int | None = Field(default=None, ge=0)
    """Every billed completion token, reasoning included."""
    cache_read_tokens: int | None = Field(default=None, ge=0)
    """Prompt tokens read from the provider's cache (part of input)."""
    cache_write_tokens: int | None = Field(default=None, ge=0)
    """Prompt tokens written to the cache (part of input; Anthropic)."""
    reasoning_tokens: int | None = Field(default=None, ge=0)
    """Completion tokens spent on reasoning (part of output)."""


class ModelCall(_Line):
    """One line of ``model_calls.jsonl`` (the fields of :class:`cairn.relay.ledger.CallRecord`)."""

    seq: int = Field(ge=1)
    """Call number within the trial, from 1."""
    time: str
    """When the request arrived, ISO 8601 UTC."""
    trial: str
    """The trial id."""
    step: str | None = None
    """The step name (``None``: no step was open)."""
    endpoint: str
    """The canonical path (``/v1/chat/completions``, ``/v1/messages`` …)."""
    family: str
    """The dialect family: ``anthropic``, ``chat``, ``responses``, ``gemini``."""
    kind: str
    """``generate``, ``count`` or ``list``."""
    model: str | None = None
    """The model the request named."""
    stream: bool = False
    """Whether the client asked for a stream."""
    status: int | None = None
    """The HTTP status the client got (``None``: no answer started)."""
    latency_sec: float | None = Field(default=None, ge=0)
    """Arrival to the last byte sent, seconds."""
    ttfb_sec: float | None = Field(default=None, ge=0)
    """Arrival to the first body byte sent, seconds."""
    usage: CallUsage = Field(default_factory=lambda: CallUsage())
    """The provider's usage."""
    cost_usd: float | None = Field(default=None, ge=0)
    """USD from the price map; ``None`` when the price or the usage is unknown."""
    complete: bool = False
    """The answer ended as its dialect ends a whole answer."""
    retry_of: int | None = None
    """``seq`` of the earlier failed or cut call of the trial this one repeats."""
    error: str | None = None
    """``budget_exceeded``, ``upstream_unreachable``, ``upstream_broke``, ``incomplete_stream``,
    ``aborted``, ``provider: …``, or ``None``."""
    rollout: dict[str, Any] | None = None
    """Token ids and logprobs (``--rollout``), else ``None``."""
    stripped_tools: list[str] | None = None
    """Provider-side tools the relay removed from the request."""
    request_body: Any = None
    """The request (only with ``--record-model-bodies``; secrets masked by the relay)."""
    response_body: Any = None
    """The answer: parsed JSON, or a stream's event text (only with ``--record-model-bodies``)."""
    has_bodies: bool = False
    """Whether the line carried the body fields (recorded with ``--record-model-bodies``)."""

    @property
    def refused(self) -> bool:
        """Refused by a budget at the relay (never reached the upstream)."""
        return self.error == "budget_exceeded"

    @property
    def billed(self) -> bool:
        """Counts in the spend: a generation answered below 400 and not refused."""
        return self.kind == "generate" and not self.refused and self.status is not None and self.status < 400

    @property
    def failed(self) -> bool:
        """No whole answer: no status, a status of 400 or more, or an error."""
        return self.status is None or self.status >= 400 or self.error is not None


class CallSums(BaseModel):
    """What a set of calls adds up to (a step's, a trial's, a job's).

    Token fields and ``cost_usd`` are over billed calls only (:attr:`ModelCall.billed`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    calls: int = 0
    """Every recorded call (count-tokens and listing calls included)."""
    billed: int = 0
    """Generation calls answered below 400 and not refused."""
    errors: int = 0
    """Calls without a whole answer: status ≥ 400 or none, or a relay error (refusals included)."""
    retries: int = 0
    """Calls that repeat an earlier failed or cut call (``retry_of`` set)."""
    refused: int = 0
    """Calls refused by a budget (``budget_exceeded``)."""
    incomplete: int = 0
    """Billed calls whose answer did not end as a whole one (aborted or broken streams)."""
    input_tokens: int | None = None
    """Sum; ``None`` when no billed call knows it."""
    output_tokens: int | None = None
    """Sum; ``None`` when no billed call knows it."""
    cache_read_tokens: int | None = None
    """Sum; ``None`` when no billed call knows it."""
    cache_write_tokens: int | None = None
    """Sum; ``None`` when no billed call knows it."""
    reasoning_tokens: int | None = None
    """Sum; ``None`` when no billed call knows it."""
    cost_usd: float | None = None
    """Sum in USD; ``None`` when any billed call's cost is unknown (0.0 with no billed call)."""
    unreadable: int = 0
    """Lines of the files summed that were skipped as not of the record's shape."""

    @classmethod
    def of(cls, calls: Iterable[ModelCall], unreadable: int = 0) -> CallSums:
        """Sum calls.

        Args:
            calls: the calls.
            unreadable: skipped lines of the files they came from.

        Returns:
            The sums.
        """
        items = list(calls)
        billed = [c for c in items if c.billed]
        tokens: dict[str, int | None] = dict.fromkeys(TOKEN_KINDS)
        for c in billed:
            for k in TOKEN_KINDS:
                v = getattr(c.usage, k)
                if v is not None:
                    tokens[k] = (tokens[k] or 0) + v
        costs = [c.cost_usd for c in billed]
        return cls(
            calls=len(items),
            billed=len(billed),
            errors=sum(1 for c in items if c.failed),
            retries=sum(1 for c in items if c.retry_of is not None),
            refused=sum(1 for c in items if c.refused),
            incomplete=sum(1 for c in billed if not c.complete),
            cost_usd=None if any(x is None for x in costs) else sum(x for x in costs if x is not None),
            unreadable=unreadable,
            **tokens,
        )

    @classmethod
    def total(cls, parts: Iterable[CallSums]) -> CallSums:
        """Add sums up (the same rules: a token field ``None`` when no part knows it, the cost
        ``None`` when any part's is).

        Args:
            parts: the sums to add.

        Returns:
            Their total (all zero for no parts).
        """
        items = list(parts)
        out: dict[str, Any] = {}
        for k in ("calls", "billed", "errors", "retries", "refused", "incomplete", "unreadable"):
            out[k] = sum(getattr(p, k) for p in items)
        for k in TOKEN_KINDS:
            known = [getattr(p, k) for p in items if getattr(p, k) is not None]
            out[k] = sum(known) if known else None
        costs = [p.cost_usd for p in items]
        out["cost_usd"] = None if any(c is None for c in costs) else sum(c for c in costs if c is not None)
        return cls(**out)


class CallLog(BaseModel):
    """One step's ``model_calls.jsonl``, read."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    present: bool
    """Whether the file exists (a regular file, not a symlink)."""
    calls: list[ModelCall] = Field(default_factory=_new_list)
    """The readable calls, in file order (the relay appends each call as it ends)."""
    unreadable: int = 0
    """Lines skipped as not of the record's shape (a read error counts one)."""
    bodies_dropped: bool = False
    """The bodies were not kept (read with ``bodies=False``)."""

    @property
    def sums(self) -> CallSums:
        """What the calls add up to."""
        return CallSums.of(self.calls, self.unreadable)


def parse_call(raw: bytes | str, *, bodies: bool = True) -> ModelCall | None:
    """One line of ``model_calls.jsonl`` as a :class:`ModelCall`.

    Args:
        raw: the line (hostile input).
        bodies: keep ``request_body`` and ``response_body`` (``False``: dropped, for sums).

    Returns:
        The call, or ``None`` when the line is not a JSON object of the record's shape.
    """
    if len(raw) > MAX_LINE_BYTES:
        return None
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    has_bodies = "request_body" in obj or "response_body" in obj
    if not bodies:
        obj.pop("request_body", None)
        obj.pop("response_body", None)
    obj["has_bodies"] = has_bodies
    try:
        return ModelCall.model_validate(obj)
    except (ValidationError, RecursionError):
        return None


def read_calls(path: Path, *, bodies: bool = True) -> CallLog:
    """Read a step's ``model_calls.jsonl``.

    Args:
        path: the file; a missing file or a symlink reads as absent (no calls).
        bodies: keep the recorded bodies (``False`` for sums: less memory).

    Returns:
        The :class:`CallLog`. Never raises for the file's content; an unreadable file counts
        one unreadable line beside whatever was read before the error.
    """
    path = Path(path)
    if path.is_symlink() or not path.is_file():
        return CallLog(present=False)
    calls: list[ModelCall] = []
    bad = 0
    try:
        with open(path, "rb") as f:
            for raw in f:
                if not raw.strip():
                    continue
                call = parse_call(raw, bodies=bodies)
                if call is None:
                    bad += 1
                else:
                    calls.append(call)
    except OSError:
        bad += 1
    return CallLog(present=True, calls=calls, unreadable=bad, bodies_dropped=not bodies)


# ------------------------------------------------------------------------------------------
# Per step, per trial, per job (what ``cairn report`` prints)


class StepCallSums(BaseModel):
    """One step's calls, summed."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    index: int
    """The step's 1-based position."""
    name: str
    """The step's name."""
    record: bool
    """Whether the relay recorded this step (a reached step of a relay trial, or a step with a
    ``model_calls.jsonl``)."""
    sums: CallSums | None = None
    """The step's sums; ``None`` without a record (never a made-up zero)."""


class TrialCallSums(BaseModel):
    """One trial's calls, summed per step and over the trial; or, without a relay record, the
    spend the agent itself reported."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    trial: str
    """The trial folder's name."""
    task: str
    """The task name."""
    spend_source: Literal["relay", "agent"] | None = None
    """result.json's ``spend_source``."""
    record: bool
    """Whether the trial's calls are on the relay's record (``spend_source: relay``, or a
    result older than the field with ``model_calls.jsonl`` files)."""
    sums: CallSums | None = None
    """The trial's sums over its steps; ``None`` without a record."""
    steps: list[StepCallSums] = Field(default_factory=_new_list)
    """Per declared step."""
    agent_tokens: dict[str, int | None] | None = None
    """Without a record: result.json's ``tokens`` (``prompt``, ``completion``, ``cached``), the
    agent's own report; else ``None``."""
    agent_cost_usd: float | None = None
    """Without a record: result.json's ``cost_usd``; else ``None``."""


class JobCallSums(BaseModel):
    """A job's model calls: per trial, and the totals (the ``model_calls`` key of ``cairn report
    --format json``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    trials: list[TrialCallSums] = Field(default_factory=_new_list)
    """Per trial, in trial-folder order."""
    recorded_trials: int = 0
    """Trials whose calls are on the relay's record."""
    total: CallSums | None = None
    """The sum over the recorded trials; ``None`` when none is."""
    agent_reported_trials: int = 0
    """Model-driven trials without a record (their spend is the agent's own report)."""
    agent_tokens: dict[str, int | None] | None = None
    """The sum of those trials' reported tokens (``cached`` ``None`` when any part's is)."""
    agent_cost_usd: float | None = None
    """The sum of those trials' reported cost (``None`` when any is unknown)."""


def trial_call_sums(trial_dir: Path, result: Any) -> TrialCallSums:
    """Sum one finished trial's ``model_calls.jsonl`` files, step by step.

    Args:
        trial_dir: the trial folder.
        result: its :class:`cairn.results.model.TrialResult`.

    Returns:
        The :class:`TrialCallSums`. A trial with ``spend_source: agent`` has no record (the
        relay was not used, so any such file was not written by it); one with
        ``spend_source: relay`` has, and a reached step without a file made no call.
    """
    from cairn.results.aggregate import step_reached
    from cairn.results.model import StepSource
    from cairn.results.store import TrialPaths

    paths = TrialPaths(Path(trial_dir))
    logs: list[tuple[Any, CallLog]] = []
    for row in result.steps:
        logs.append((row, read_calls(paths.step(row.index, row.name).agent / MODEL_CALLS_FILE, bodies=False)))
    source = result.spend_source
    record = source == "relay" or (source is None and any(log.present for _, log in logs))
    steps: list[StepCallSums] = []
    for row, log in logs:
        ran = row.source is not StepSource.ORACLE and step_reached(row)
        has = record and (log.present or ran)
        steps.append(StepCallSums(index=row.index, name=row.name, record=has, sums=log.sums if has else None))
    if not record:
        return TrialCallSums(
            trial=result.trial_name,
            task=result.task.name,
            spend_source=source,
            record=False,
            steps=steps,
            agent_tokens=result.tokens.model_dump(mode="json") if source is not None else None,
            agent_cost_usd=result.cost_usd if source is not None else None,
        )
    return TrialCallSums(
        trial=result.trial_name,
        task=result.task.name,
        spend_source=source,
        record=True,
        sums=CallSums.total(s.sums for s in steps if s.sums is not None),
        steps=steps,
    )


def job_call_sums(job_dir: Path, results: Iterable[Any]) -> JobCallSums:
    """Sum the calls of a job's finished trials.

    Args:
        job_dir: the job folder.
        results: its :class:`cairn.results.model.TrialResult` values.

    Returns:
        The :class:`JobCallSums` (trials sorted by folder name). Trials of agents that use no
        model (``spend_source`` null and no file) are listed with no record and no spend.
    """
    from cairn.results.store import TRIALS

    trials = [
        trial_call_sums(Path(job_dir) / TRIALS / r.trial_name, r)
        for r in sorted(results, key=lambda r: r.trial_name)
    ]
    recorded = [t for t in trials if t.record and t.sums is not None]
    reported = [t for t in trials if not t.record and t.agent_tokens is not None]
    tokens: dict[str, int | None] | None = None
    if reported:
        cached = [t.agent_tokens.get("cached") for t in reported if t.agent_tokens is not None]
        tokens = {
            "prompt": sum((t.agent_tokens or {}).get("prompt") or 0 for t in reported),
            "completion": sum((t.agent_tokens or {}).get("completion") or 0 for t in reported),
            "cached": None if any(c is None for c in cached) else sum(c or 0 for c in cached),
        }
    costs = [t.agent_cost_usd for t in reported]
    return JobCallSums(
        trials=trials,
        recorded_trials=len(recorded),
        total=CallSums.total(t.sums for t in recorded if t.sums is not None) if recorded else None,
        agent_reported_trials=len(reported),
        agent_tokens=tokens,
        agent_cost_usd=(None if any(c is None for c in costs) else sum(c for c in costs if c is not None))
        if reported
        else None,
    )
