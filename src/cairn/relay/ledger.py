"""Per-trial tokens, the spend ledger, budgets and the call records (no sockets).

A :class:`TrialLease` is one trial's access to the model: a random token the agent presents
instead of a provider key, the step its calls are recorded under, and what it has spent. Its
token is dead once :meth:`TrialLease.revoke` ran (the trial ended).

Budget semantics (docs/relay.md): a call is admitted while the trial's and the job's spend are
under their limits; the call whose usage reaches or passes a limit is answered normally (its
cost is known only once it finished) and recorded as the crossing call; every later call of
that trial (job limit: of every trial) is refused in the provider's error shape. Calls already
in flight when a limit is crossed finish, so spend can pass a limit by the calls in flight.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cairn.relay.usage import Usage, sum_usage


@dataclass(frozen=True)
class Limits:
    """Spend limits checked at the relay (``None``: no limit).

    Attributes:
        job_cost_usd: the whole job's model spend (``--max-cost-usd``), USD.
        trial_cost_usd: one trial's model spend, USD.
        trial_tokens: one trial's tokens, input plus output.
    """

    job_cost_usd: float | None = None
    trial_cost_usd: float | None = None
    trial_tokens: int | None = None


@dataclass(frozen=True)
class BudgetStop:
    """Why a trial's model was closed.

    Attributes:
        limit: ``job_cost_usd``, ``trial_cost_usd`` or ``trial_tokens``.
        limit_value: the limit.
        spent: what had been spent when it was crossed (USD or tokens).
        crossing_call: the ``seq`` of the call that crossed it (``None``: another trial's
            call crossed the job limit).
    """

    limit: str
    limit_value: float
    spent: float
    crossing_call: int | None

    def message(self) -> str:
        """The sentence the refused calls carry."""
        unit = "tokens" if self.limit == "trial_tokens" else "USD"
        return (
            f"cairn relay: budget exceeded ({self.limit} limit {self.limit_value:g} {unit}, "
            f"spent {self.spent:g} {unit}); no more model calls in this trial"
        )

    def as_dict(self) -> dict[str, Any]:
        """The stop as a JSON object."""
        return {
            "limit": self.limit,
            "limit_value": self.limit_value,
            "spent": self.spent,
            "crossing_call": self.crossing_call,
        }


@dataclass
class CallRecord:
    """One model call, as written to a step's ``model_calls.jsonl``.

    Attributes:
        seq: 1-based call number within the trial.
        time: when the request arrived, ISO 8601 UTC.
        trial: the trial id.
        step: the step name (``None`` when no step was open).
        endpoint: the canonical path (``/v1/messages``, ``/v1beta/models/M:generateContent``).
        family: the dialect family.
        kind: ``generate``, ``count`` or ``list``.
        model: the model named in the request.
        stream: whether the client asked for a stream.
        status: the HTTP status the client got (``None``: no answer started).
        latency_sec: request arrival to the last byte sent.
        ttfb_sec: request arrival to the first byte of the answer's body sent.
        usage: the provider's usage (``None`` fields: unknown).
        cost_usd: from the price map; ``None`` when the model's price or the usage is unknown.
        complete: the answer ended as the dialect ends a whole answer.
        retry_of: ``seq`` of an earlier failed or incomplete call with the same request.
        error: ``budget_exceeded``, ``upstream_unreachable``, ``aborted``, the provider's
            in-stream error, or ``None``.
        rollout: token ids and logprobs (with ``--rollout``), else ``None``.
        stripped_tools: provider-side tools removed from the request (web search, code
            execution, remote MCP), when the trial does not allow them; else ``None``.
        request_body / response_body: only with the record-bodies option, secrets masked.
    """

    seq: int
    time: str
    trial: str
    step: str | None
    endpoint: str
    family: str
    kind: str
    model: str | None
    stream: bool
    status: int | None = None
    latency_sec: float | None = None
    ttfb_sec: float | None = None
    usage: Usage = field(default_factory=Usage)
    cost_usd: float | None = None
    complete: bool = False
    retry_of: int | None = None
    error: str | None = None
    rollout: dict[str, Any] | None = None
    stripped_tools: list[str] | None = None
    request_body: Any = None
    response_body: Any = None

    def as_dict(self) -> dict[str, Any]:
        """The record as one JSON object (the line of ``model_calls.jsonl``)."""
        out = {k: v for k, v in self.__dict__.items() if k not in ("usage",)}
        out["usage"] = self.usage.as_dict()
        if out["request_body"] is None and out["response_body"] is None:
            del out["request_body"], out["response_body"]
        return out


@dataclass(frozen=True)
class StepCalls:
    """What one step's model calls add up to.

    Attributes:
        calls: the step's call records, in order.
        usage: the sum over billed calls (``generate``).
        cost_usd: the sum; ``None`` when any billed call's cost is unknown.
        incomplete_calls: billed calls that did not end as a whole answer (aborted or broken
            streams); their usage is what arrived before the cut, unknown parts ``None``.
    """

    calls: tuple[CallRecord, ...]
    usage: Usage
    cost_usd: float | None
    incomplete_calls: int

    @property
    def billed_calls(self) -> int:
        """How many of the calls were billed (the ones :attr:`usage` sums)."""
        return sum(1 for c in self.calls if is_billed(c))


def is_billed(call: CallRecord) -> bool:
    """Whether a call is billed: a generation answered below 400, not refused by a budget."""
    return (
        call.kind == "generate"
        and call.error != "budget_exceeded"
        and call.status is not None
        and call.status < 400
    )


def summarise(calls: list[CallRecord]) -> StepCalls:
    """Sum a list of call records (billed calls only; refused calls cost nothing)."""
    billed = [c for c in calls if is_billed(c)]
    costs = [c.cost_usd for c in billed]
    return StepCalls(
        tuple(calls),
        sum_usage(c.usage for c in billed),
        None if any(c is None for c in costs) else sum(c for c in costs if c is not None),
        sum(1 for c in billed if not c.complete),
    )


def _now_iso() -> str:
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


class JobLedger:
    """The job-wide spend and the job cost limit."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.cost_usd = 0.0
        self.stop: BudgetStop | None = None


class TrialLease:
    """One trial's token, its step, its records and its spend.

    Args:
        trial_id: the trial's id.
        ledger: the job's ledger.
        limits: this trial's limits (the job's by default).
        on_stop: called once with the :class:`BudgetStop` when a limit closes the model.

    Attributes:
        token: the per-trial token the agent presents (in any accepted auth header).
        records: every call of the trial, in order.
        stop: why the model was closed, or ``None``.
    """

    def __init__(
        self,
        trial_id: str,
        ledger: JobLedger,
        limits: Limits,
        on_stop: Callable[[BudgetStop], None] | None = None,
    ) -> None:
        self.trial_id = trial_id
        self.token = "cairn-" + secrets.token_urlsafe(32)
        self._ledger = ledger
        self.limits = limits
        self._on_stop = on_stop
        self.records: list[CallRecord] = []
        self.stop: BudgetStop | None = None
        self.cost_usd = 0.0
        self.tokens = 0
        self.revoked = False
        self.provider_tools = False
        """Whether provider-side tools (web search, code execution, remote MCP) may pass: only
        when the trial's agent phase has a public network (they reach the internet from the
        provider, past the sandbox's policy). Off by default: they are stripped."""
        self.write_errors: list[str] = []
        """Records that could not be appended to their step's file (kept in :attr:`records`)."""
        self._step: str | None = None
        self._path: Path | None = None
        self._step_start = 0
        self._failed: dict[str, int] = {}
        self._digests: dict[int, str] = {}

    # ---- steps ---------------------------------------------------------------------------
    def begin_step(self, name: str, calls_path: Path | None) -> None:
        """Record the next calls under step ``name``, appended to ``calls_path`` (JSONL).

        Args:
            name: the step's name.
            calls_path: the step's ``model_calls.jsonl`` (the caller, i.e. the store, decides
                where); ``None`` keeps the records in memory only.
        """
        self._step, self._path = name, calls_path
        self._step_start = len(self.records)

    def end_step(self) -> StepCalls:
        """Close the current step; return what its calls add up to."""
        calls = self.records[self._step_start :]
        self._step, self._path = None, None
        self._step_start = len(self.records)
        return summarise(calls)

    def totals(self) -> StepCalls:
        """What every call of the trial adds up to."""
        return summarise(self.records)

    # ---- calls -----------------------------------------------------------------------------
    def blocked(self) -> BudgetStop | None:
        """The stop that refuses the next call, if any (this trial's or the job's)."""
        return self.stop or self._ledger.stop

    def refuse(self, stop: BudgetStop) -> None:
        """Adopt ``stop`` (the job's) as this trial's when a call of it is refused."""
        if self.stop is None:
            self.stop = stop
            if self._on_stop is not None:
                self._on_stop(stop)

    def new_call(
        self, *, endpoint: str, family: str, kind: str, model: str | None, stream: bool, request_key: bytes
    ) -> CallRecord:
        """Open the record of an arriving call.

        Args:
            endpoint: the canonical path.
            family: the dialect family.
            kind: ``generate``, ``count`` or ``list``.
            model: the model named in the request.
            stream: whether the client asked for a stream.
            request_key: the request's path and body bytes; an identical earlier request that
                failed or was cut short makes this one its retry.
        """
        digest = hashlib.sha256(request_key).hexdigest()
        rec = CallRecord(
            seq=len(self.records) + 1,
            time=_now_iso(),
            trial=self.trial_id,
            step=self._step,
            endpoint=endpoint,
            family=family,
            kind=kind,
            model=model,
            stream=stream,
            retry_of=self._failed.get(digest),
        )
        self._digests[rec.seq] = digest
        self.records.append(rec)
        return rec

    def finish_call(self, rec: CallRecord) -> None:
        """Account a finished call: spend, limits, retry bookkeeping, its JSONL line."""
        digest = self._digests.pop(rec.seq, None)
        ok = (
            rec.status is not None
            and rec.status < 400
            and rec.error is None
            and (rec.complete or rec.kind != "generate")
        )
        if digest is not None:
            if ok:
                self._failed.pop(digest, None)
            else:  # a budget refusal too: a client sending it again is retrying it
                self._failed[digest] = rec.seq
        if rec.kind == "generate" and rec.error != "budget_exceeded":
            self.tokens += rec.usage.total_tokens
            if rec.cost_usd is not None:
                self.cost_usd += rec.cost_usd
                self._ledger.cost_usd += rec.cost_usd
            self._check(rec.seq)
        if self._path is not None:
            line = json.dumps(rec.as_dict(), separators=(",", ":"), default=str) + "\n"
            try:
                with open(self._path, "a", encoding="utf-8") as fh:
                    fh.write(line)
            except OSError as exc:  # the record stays in memory; the call was answered
                self.write_errors.append(f"{self._path}: {exc}")

    def _check(self, seq: int) -> None:
        lim, job = self.limits, self._ledger
        if (
            job.stop is None
            and job.limits.job_cost_usd is not None
            and job.cost_usd >= job.limits.job_cost_usd
        ):
            job.stop = BudgetStop("job_cost_usd", job.limits.job_cost_usd, job.cost_usd, seq)
        if self.stop is not None:
            return
        stop = None
        if lim.trial_cost_usd is not None and self.cost_usd >= lim.trial_cost_usd:
            stop = BudgetStop("trial_cost_usd", lim.trial_cost_usd, self.cost_usd, seq)
        elif lim.trial_tokens is not None and self.tokens >= lim.trial_tokens:
            stop = BudgetStop("trial_tokens", lim.trial_tokens, self.tokens, seq)
        elif job.stop is not None:
            stop = job.stop
        if stop is not None:
            self.stop = stop
            if self._on_stop is not None:
                self._on_stop(stop)
