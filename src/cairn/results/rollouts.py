"""``cairn export --format rollouts``: per executed step, its model calls with token ids,
logprobs and a loss mask, joined to the step's reward and the trial's (docs/export.md).

The token ids come from the model relay's per-step record, ``model_calls.jsonl``
(docs/relay.md), written under ``--rollout`` for OpenAI-compatible servers that return them
(vLLM's ``return_token_ids``, SGLang's). The rewards come from the trial's result.json. Both
are read from the job folder only, so the export works on a job copied from another machine.

A record is one :class:`RolloutStep` per executed step of every finished trial (the steps
:func:`cairn.results.export.step_records` exports, same filters), in the versioned schema
``cairn.export.rollout/1``. Each record carries a ``group_id`` (task × the job's sampling
configuration: every attempt of one task in one job shares it), the unit a GRPO-style trainer
normalises rewards over.

``model_calls.jsonl`` sits in the step's agent folder, which an agent may be able to write
into: every line is read as hostile input. A line that is not a JSON object of the record's
shape is left out and counted (``unreadable_calls``); token ids that are not integers, or
logprobs not aligned with the completion ids, make the call non-trainable (its ids kept as
null), never a crash.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from cairn.results.model import StepResult, StepSource, TrialResult

ROLLOUT_SCHEMA: Final = "cairn.export.rollout/1"
"""The ``schema`` value of every rollout record."""

MODEL_CALLS_FILE = "model_calls.jsonl"
"""The relay's per-step record file, in the step's agent folder."""

MAX_CALL_LINE_BYTES = 64 * 1024 * 1024
"""A ``model_calls.jsonl`` line longer than this is left out (counted as unreadable)."""


def _new_list() -> list[Any]:
    return []


class StepFilter(Protocol):
    """Which steps to keep (:class:`cairn.results.export.ExportFilter` is one)."""

    def keep(self, row: StepResult) -> bool:
        """Whether a step row is kept."""
        ...


class _KeepAll:
    def keep(self, row: StepResult) -> bool:
        del row
        return True


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class RolloutCall(_Record):
    """One generation call of a step, with what a trainer needs of it.

    Token lists are ``null`` when the call has none (no ``--rollout``, a server without the
    extension, another wire protocol than Chat Completions, a refused or failed call).
    """

    seq: int
    """Call number within the trial, from 1 (the relay's ``seq``)."""
    endpoint: str
    """The canonical path the call went to (``/v1/chat/completions``)."""
    model: str | None = None
    """The model the request named."""
    status: int | None = None
    """The HTTP status the agent got (``null``: no answer started)."""
    error: str | None = None
    """The relay's error for the call (``budget_exceeded``, ``incomplete_stream`` …), else null."""
    retry_of: int | None = None
    """``seq`` of the earlier failed call of the trial this call repeats."""
    finish_reason: str | None = None
    """The first choice's finish reason."""
    prompt_token_ids: list[int] | None = None
    """The whole prompt as the server tokenised it (history included), shape ``[P]``."""
    completion_token_ids: list[int] | None = None
    """The sampled completion, shape ``[C]``."""
    logprobs: list[float] | None = None
    """Log-probability (natural log) of each completion token under the sampling policy,
    shape ``[C]``, aligned with ``completion_token_ids``."""
    loss_mask: list[int] | None = None
    """Shape ``[P + C]`` over ``prompt_token_ids + completion_token_ids``: 0 on the prompt,
    1 on the completion of a trainable call, all 0 for a call that is not trainable."""
    trainable: bool = False
    """Whether the call's tokens are for training: a whole answer (status below 400, no
    error, ended as its dialect ends one) with prompt ids, completion ids and logprobs of
    matching lengths."""
    not_trainable_reason: str | None = None
    """Why not, when ``trainable`` is false (``no_token_ids``, ``failed_call``,
    ``logprobs_misaligned``, ``bad_token_ids``)."""
    sampling_params: dict[str, Any] | None = None
    """The sampling parameters actually sent upstream (the relay's record)."""
    usage: dict[str, int | None] | None = None
    """The provider's usage of the call (``input_tokens``, ``output_tokens`` …; null: unknown)."""


class RolloutStep(_Record):
    """One executed step of one trial, as a training record (schema ``cairn.export.rollout/1``)."""

    schema_: Literal["cairn.export.rollout/1"] = Field(ROLLOUT_SCHEMA, alias="schema")
    """Always ``cairn.export.rollout/1``."""
    job: str
    """The job folder's name."""
    task: str
    """The task name."""
    task_hash: str
    """The task's content hash (the task exactly as it ran)."""
    group_id: str
    """``<job>:<task>:<first 12 of the content hash>``: every attempt of this task in this job
    (one agent, one model, one sampling configuration) shares it (:func:`group_id`)."""
    trial: str
    """The trial folder's name."""
    trial_id: str
    """The trial's id."""
    attempt: int
    """The attempt number within the group, from 1."""
    step: str
    """The step name."""
    step_index: int
    """The step's 0-based index."""
    steps_total: int
    """How many steps the task declares."""
    is_last_step: bool
    """Whether no later step of the trial was executed (the trajectory ends here)."""
    reward: float | None
    """The step's primary reward (null when it has none: an errored or unverified step)."""
    rewards: dict[str, float] | None
    """All of the step's reward keys."""
    passed: bool
    """The step's verdict."""
    source: str
    """Where the step's reward came from (``verifier``, ``candidate_error``, ``error``,
    ``oracle``, ``not-run``)."""
    replayed: bool
    """A step replayed by ``--start-step`` (the oracle's, not the agent's: no model calls)."""
    errored: bool
    """The step has an error, or its reward comes from one."""
    error_kind: str | None
    """The step's error kind, if any."""
    error_category: str | None
    """The step's error category (``infra``, ``task``, ``candidate``, ``job``), if any."""
    trial_reward: float | None
    """The trial's reward (the task's aggregate of its step rewards)."""
    trial_passed: bool
    """The trial's verdict."""
    outcome: str
    """How the trial ended."""
    agent: str
    """The agent's name."""
    model: str | None
    """The job's model."""
    calls: list[RolloutCall] = Field(default_factory=_new_list)
    """The step's generation calls, in ``seq`` order (count-tokens and listing calls left out)."""
    complete: bool
    """Every answered call of the step (status below 400, no error) has token ids and
    logprobs; a step with no such call is not complete."""
    n_trainable_tokens: int
    """The sum of the completion lengths of the trainable calls."""
    unreadable_calls: int = 0
    """Lines of the step's ``model_calls.jsonl`` left out as unreadable."""
    has_model_calls: bool
    """Whether the step has a ``model_calls.jsonl`` (none: the agent used no relay)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, populate_by_name=True)

    def as_json(self) -> str:
        """The record as one JSON line (``schema`` under its name, no NaN)."""
        return json.dumps(self.model_dump(mode="json", by_alias=True), ensure_ascii=False, allow_nan=False)


def group_id(job: str, result: TrialResult) -> str:
    """The group a trial belongs to: its task in its job (one sampling configuration).

    Args:
        job: the job folder's name.
        result: the trial's result.

    Returns:
        ``<job>:<task name>:<first 12 characters of the task's content hash>`` (a task whose
        content changed between runs of a resumed job is another group).
    """
    return f"{job}:{result.task.name}:{result.task.content_hash[:12]}"


def _int_list(x: Any) -> list[int] | None:
    if not isinstance(x, list):
        return None
    if not all(type(i) is int for i in x):  # bool is no token id
        return None
    return list(x)


def _float_list(x: Any) -> list[float] | None:
    if not isinstance(x, list):
        return None
    out: list[float] = []
    for v in x:
        if type(v) not in (int, float) or not math.isfinite(v):
            return None
        out.append(float(v))
    return out


def _opt_int(x: Any) -> int | None:
    return x if type(x) is int else None


def _opt_str(x: Any) -> str | None:
    return x if isinstance(x, str) else None


def rollout_call(line: dict[str, Any]) -> RolloutCall | None:
    """One line of ``model_calls.jsonl`` as a :class:`RolloutCall`, or ``None`` for a line that
    is no generation call (count-tokens, listing) or not of the record's shape.

    Args:
        line: the parsed line (hostile input: any JSON value may be there).

    Returns:
        The call; ``None`` to leave it out. Bad token data makes the call non-trainable
        (lists null), it never raises.
    """
    seq, endpoint = line.get("seq"), line.get("endpoint")
    if type(seq) is not int or not isinstance(endpoint, str):
        return None
    if line.get("kind") != "generate":
        return None
    status, error = _opt_int(line.get("status")), _opt_str(line.get("error"))
    raw_ro = line.get("rollout")
    ro: dict[str, Any] = raw_ro if isinstance(raw_ro, dict) else {}
    prompt = _int_list(ro.get("prompt_token_ids"))
    completion = _int_list(ro.get("completion_token_ids"))
    logprobs = _float_list(ro.get("logprobs"))
    answered = status is not None and status < 400 and error is None and line.get("complete") is True
    reason: str | None = None
    if not answered:
        reason = "failed_call"
    elif not ro or all(ro.get(k) is None for k in ("prompt_token_ids", "completion_token_ids", "logprobs")):
        reason = "no_token_ids"
    elif prompt is None or completion is None:
        reason = "bad_token_ids"
    elif logprobs is None or len(logprobs) != len(completion):
        reason = "logprobs_misaligned"
    trainable = reason is None
    mask: list[int] | None = None
    if prompt is not None and completion is not None:
        mask = [0] * len(prompt) + [1 if trainable else 0] * len(completion)
    raw_usage = line.get("usage")
    usage = (
        {k: _opt_int(v) for k, v in raw_usage.items() if isinstance(k, str)}
        if isinstance(raw_usage, dict)
        else None
    )
    sp = ro.get("sampling_params")
    try:
        return RolloutCall(
            seq=seq,
            endpoint=endpoint,
            model=_opt_str(line.get("model")),
            status=status,
            error=error,
            retry_of=_opt_int(line.get("retry_of")),
            finish_reason=_opt_str(ro.get("finish_reason")),
            prompt_token_ids=prompt,
            completion_token_ids=completion,
            logprobs=logprobs,
            loss_mask=mask,
            trainable=trainable,
            not_trainable_reason=reason,
            sampling_params=sp if isinstance(sp, dict) else None,
            usage=usage,
        )
    except ValueError:  # e.g. a sampling parameter that is NaN
        return None


def read_model_calls(path: Path) -> tuple[list[RolloutCall], int]:
    """A step's generation calls from its ``model_calls.jsonl``.

    Args:
        path: the file (a symlink or a missing file reads as no calls).

    Returns:
        ``(calls in seq order, number of unreadable lines)``.
    """
    if path.is_symlink() or not path.is_file():
        return [], 0
    calls: list[RolloutCall] = []
    bad = 0
    try:
        with open(path, "rb") as f:
            for raw in f:
                if not raw.strip():
                    continue
                if len(raw) > MAX_CALL_LINE_BYTES:
                    bad += 1
                    continue
                try:
                    obj = json.loads(raw)
                except ValueError:
                    bad += 1
                    continue
                if not isinstance(obj, dict):
                    bad += 1
                    continue
                if obj.get("kind") in ("count", "list"):
                    continue
                call = rollout_call(obj)
                if call is None:
                    bad += 1
                else:
                    calls.append(call)
    except OSError:
        return calls, bad + 1
    calls.sort(key=lambda c: c.seq)
    return calls, bad


def _executed(row: StepResult) -> bool:
    from cairn.results.aggregate import step_reached

    return row.source is StepSource.ORACLE or step_reached(row)


def rollout_steps(job_dir: Path, flt: StepFilter | None = None) -> Iterator[RolloutStep]:
    """Every executed step of a job's finished trials, as rollout records.

    Args:
        job_dir: the job folder.
        flt: which steps to keep, e.g. an :class:`cairn.results.export.ExportFilter`
            (default: every step).

    Yields:
        One :class:`RolloutStep` per executed step kept by the filter, trial by trial in the
        order :func:`cairn.results.store.iter_trial_results` lists them. Trials without a
        readable result.json are skipped.
    """
    from cairn.results.store import TrialPaths, iter_trial_results

    flt = flt if flt is not None else _KeepAll()
    job_dir = Path(job_dir)
    for rf in iter_trial_results(job_dir):
        if rf.result is None:
            continue
        yield from trial_rollout_steps(job_dir.name, rf.result, TrialPaths(rf.path.parent), flt)


def trial_rollout_steps(
    job: str, r: TrialResult, trial: Any, flt: StepFilter | None = None
) -> Iterator[RolloutStep]:
    """The rollout records of one trial (see :func:`rollout_steps`).

    Args:
        job: the job folder's name.
        r: the trial's result.
        trial: its :class:`cairn.results.store.TrialPaths`.
        flt: which steps to keep (default: every step).

    Yields:
        One :class:`RolloutStep` per executed step kept by the filter.
    """
    flt = flt if flt is not None else _KeepAll()
    executed = [row for row in r.steps if _executed(row)]
    last = executed[-1].index if executed else None
    gid = group_id(job, r)
    for row in executed:
        if not flt.keep(row):
            continue
        sp = trial.step(row.index, row.name)
        path = sp.agent / MODEL_CALLS_FILE
        calls, bad = read_model_calls(path)
        answered = [c for c in calls if c.not_trainable_reason != "failed_call"]
        errored = row.error is not None or row.source in (StepSource.ERROR, StepSource.CANDIDATE_ERROR)
        yield RolloutStep(
            schema=ROLLOUT_SCHEMA,
            job=job,
            task=r.task.name,
            task_hash=r.task.content_hash,
            group_id=gid,
            trial=r.trial_name,
            trial_id=r.trial_id,
            attempt=r.attempt,
            step=row.name,
            step_index=row.index,
            steps_total=r.steps_total,
            is_last_step=row.index == last,
            reward=row.reward,
            rewards=dict(row.rewards) if row.rewards is not None else None,
            passed=row.passed,
            source=row.source.value,
            replayed=row.source is StepSource.ORACLE,
            errored=errored,
            error_kind=row.error.kind.value if row.error else None,
            error_category=row.error.category.value if row.error else None,
            trial_reward=r.reward,
            trial_passed=r.passed,
            outcome=r.outcome.value,
            agent=r.agent.name,
            model=r.model,
            calls=calls,
            complete=bool(answered) and all(c.trainable for c in answered),
            n_trainable_tokens=sum(len(c.completion_token_ids or ()) for c in calls if c.trainable),
            unreadable_calls=bad,
            has_model_calls=path.is_file() and not path.is_symlink(),
        )


def export_rollouts(job_dir: Path, out: Any, flt: StepFilter | None = None) -> int:
    """Write a job's rollout records, one JSON object per line.

    Args:
        job_dir: the job folder.
        out: a text stream.
        flt: which steps to keep (default: every step).

    Returns:
        The number of records written.
    """
    n = 0
    for rec in rollout_steps(job_dir, flt):
        out.write(rec.as_json() + "\n")
        n += 1
    return n
