"""Scoring as pure functions (design §5.2–§5.4, §6): step rewards → trial reward → outcome.

Nothing here does I/O. The trial loop calls, per step, :func:`evaluate_gates`,
:func:`step_passed` and :func:`stop_decision`; at the end :func:`score_trial` (or the pieces it is
made of: :func:`trial_rewards`, :func:`reward_all_steps`, :func:`trial_outcome`,
:func:`trial_passed`). pass@k is here too; :func:`summarize_job` lives in :mod:`cairn.results.summary`
and is re-exported here.

Which steps count (design §5.3): a step *has a result* when its source is ``verifier`` (with
rewards) or ``candidate_error`` (scored ``{"reward": 0.0}``). Steps with source ``error``,
``not-run`` or ``oracle`` (replayed by ``--start-step``) never count.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from cairn.errors import Category, ErrorKind
from cairn.results.model import (
    ErrorInfo,
    Gate,
    JudgeUsage,
    Outcome,
    StepResult,
    StepSource,
    StopReason,
    Tokens,
)

Strategy = Literal["mean", "final"]
MinReward = float | Mapping[str, float]

PRIMARY_KEY = "reward"
"""The key a step's primary reward is read from (design §5.2); also the label of number gates."""

PASS_THRESHOLD = 1.0
"""A primary reward ≥ this passes (design §5.2)."""


def candidate_error_rewards() -> dict[str, float]:
    """The rewards of a step that failed for a candidate reason (design §6): ``{"reward": 0.0}``.

    Returns:
        A fresh dict the trial loop stores as the step's ``rewards`` (with ``reward`` 0.0).
    """
    return {PRIMARY_KEY: 0.0}


def primary_reward(rewards: Mapping[str, float] | None) -> float | None:
    """A step's primary reward (design §5.2).

    Args:
        rewards: the step's rewards, or ``None`` without a verifier result.

    Returns:
        ``rewards["reward"]`` if present; else the only value when there is exactly one key;
        else ``None`` (metrics only, or no rewards).
    """
    if not rewards:
        return None
    if PRIMARY_KEY in rewards:
        return rewards[PRIMARY_KEY]
    if len(rewards) == 1:
        return next(iter(rewards.values()))
    return None


def _mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def evaluate_gates(min_reward: MinReward | None, rewards: Mapping[str, float] | None) -> list[Gate]:
    """Evaluate a step's ``min_reward`` gates (design §5.4 rule 4).

    Args:
        min_reward: a number (gates the primary reward, recorded under key ``reward``), a table
            ``{key: threshold}`` (gates each named key, in table order), or ``None``.
        rewards: the step's rewards, or ``None`` when it has no verifier result.

    Returns:
        One :class:`Gate` per gated key: ``passed`` is ``value >= threshold``; a missing key
        (or missing primary reward, or no rewards at all) has ``value`` ``None``, counts as −∞
        and fails. An empty list when there is no gate.
    """
    if min_reward is None:
        return []
    if isinstance(min_reward, Mapping):
        targets = [(key, float(t), (rewards or {}).get(key)) for key, t in min_reward.items()]
    else:
        targets = [(PRIMARY_KEY, float(min_reward), primary_reward(rewards))]
    return [
        Gate(key=key, value=value, threshold=threshold, passed=value is not None and value >= threshold)
        for key, threshold, value in targets
    ]


def step_passed(min_reward: MinReward | None, rewards: Mapping[str, float] | None, has_result: bool) -> bool:
    """Whether a step passes (design §5.2).

    Args:
        min_reward: the step's gate (number or table), or ``None``. An empty table counts as no
            gate.
        rewards: the step's rewards.
        has_result: whether the step has a *verifier* result (a candidate-error 0 is not one,
            so such a step never passes).

    Returns:
        ``True`` when the step has a verifier result and every gate passes, or, without
        gates, its primary reward is ≥ 1.0.
    """
    if not has_result or rewards is None:
        return False
    gates = evaluate_gates(min_reward, rewards)
    if gates:
        return all(g.passed for g in gates)
    primary = primary_reward(rewards)
    return primary is not None and primary >= PASS_THRESHOLD


def step_reached(step: StepResult) -> bool:
    """Whether the step's procedure began (it counts in ``steps_run``).

    Args:
        step: a step row.

    Returns:
        ``True`` unless the step is ``not-run`` with no agent exit, no error and no timings
        (under ``--no-verify`` a step whose agent ran keeps source ``not-run`` but is reached).
    """
    if step.source is not StepSource.NOT_RUN:
        return True
    t = step.timings
    return (
        step.agent_exit is not None
        or step.error is not None
        or any(v is not None for v in (t.setup_sec, t.agent_sec, t.verifier_sec))
    )


def counted_rewards(step: StepResult) -> dict[str, float] | None:
    """The rewards a step contributes to aggregation, or ``None`` when it has no result.

    Args:
        step: a step row.

    Returns:
        The verifier's rewards for source ``verifier``; ``{"reward": 0.0}`` for
        ``candidate_error`` (its stored rewards when the loop stored some); else ``None``.
    """
    if step.source is StepSource.VERIFIER:
        return dict(step.rewards) if step.rewards is not None else None
    if step.source is StepSource.CANDIDATE_ERROR:
        return dict(step.rewards) if step.rewards is not None else candidate_error_rewards()
    return None


def trial_rewards(
    strategy: Strategy, steps: Sequence[StepResult]
) -> tuple[dict[str, float] | None, float | None]:
    """A trial's rewards and primary reward from its steps (design §5.3).

    Args:
        strategy: ``mean`` — each key averaged over the steps with a result (a step with a
            result but without the key counts 0 for it; steps without a result are not in the
            denominator); ``final`` — the last reached step's rewards, ``None`` when that step
            has no result.
        steps: the step rows in declared order.

    Returns:
        ``(rewards, reward)``: ``rewards`` maps each key to its aggregate (``None`` when no
        step counts); ``reward`` is the strategy applied to the steps' primary rewards
        (``None`` when a counted step has none, or none counts).

    Raises:
        ValueError: on an unknown strategy.
    """
    if strategy == "final":
        reached = [s for s in steps if step_reached(s) and s.source is not StepSource.ORACLE]
        if not reached:
            return None, None
        last = counted_rewards(reached[-1])
        return (last, primary_reward(last)) if last is not None else (None, None)
    if strategy != "mean":
        raise ValueError(f"unknown multi_step_reward_strategy {strategy!r}")
    counted = [r for r in map(counted_rewards, steps) if r is not None]
    if not counted:
        return None, None
    keys = list(dict.fromkeys(k for r in counted for k in r))
    rewards = {k: math.fsum(r.get(k, 0.0) for r in counted) / len(counted) for k in keys}
    primaries = [primary_reward(r) for r in counted]
    reward = None if any(p is None for p in primaries) else _mean(primaries)  # type: ignore[arg-type]
    return rewards, reward


def reward_all_steps(steps: Sequence[StepResult], steps_total: int) -> float | None:
    """The mean primary reward over *all declared* steps, unreached ones counted 0 (design §5.3).

    Args:
        steps: the step rows (may be fewer than ``steps_total``; missing rows count 0).
        steps_total: the number of declared steps. Steps with source ``oracle`` (replayed by
            ``--start-step``) are left out of both the sum and the count.

    Returns:
        The mean, or ``None`` when no step has a result, when a step with a result has no
        primary reward, or when no step is left to count.
    """
    counted = [r for r in map(counted_rewards, steps) if r is not None]
    denominator = steps_total - sum(s.source is StepSource.ORACLE for s in steps)
    if not counted or denominator <= 0:
        return None
    primaries = [primary_reward(r) for r in counted]
    if any(p is None for p in primaries):
        return None
    return math.fsum(primaries) / denominator  # type: ignore[arg-type]


def stop_decision(
    step: StepResult, min_reward: MinReward | None, is_last: bool, verify: bool
) -> StopReason | None:
    """Apply the stop rules after a step (design §5.4).

    Args:
        step: the finished step's row.
        min_reward: the step's gate, or ``None``.
        is_last: whether it is the last declared step (its gates are recorded, they stop
            nothing).
        verify: ``False`` under ``--no-verify`` (no gate applies).

    Returns:
        ``None`` to continue; ``StopReason(kind="step_error")`` when the step has an error and
        no verifier result (rule 1); ``StopReason(kind="min_reward")`` naming the first failing
        gate's key, value (``None`` = missing) and threshold (rule 4).
    """
    if is_last:
        return None
    failed_step = step.source in (StepSource.ERROR, StepSource.CANDIDATE_ERROR)
    if step.source is not StepSource.VERIFIER and (step.error is not None or failed_step):
        return StopReason(
            kind="step_error", step=step.name, error_kind=step.error.kind if step.error is not None else None
        )
    if min_reward is None or not verify:
        return None
    for gate in evaluate_gates(min_reward, step.rewards):
        if not gate.passed:
            return StopReason(
                kind="min_reward", step=step.name, key=gate.key, value=gate.value, threshold=gate.threshold
            )
    return None


def trial_error(steps: Iterable[StepResult]) -> ErrorInfo | None:
    """The error that makes a trial ``errored``, taken from its steps.

    Args:
        steps: the step rows.

    Returns:
        The first step error that is not of category ``candidate`` (with ``step`` filled in),
        or ``None``.
    """
    for s in steps:
        if s.error is not None and s.error.category is not Category.CANDIDATE:
            err = s.error
            return err if err.step is not None else err.model_copy(update={"step": s.name})
    return None


def trial_outcome(
    *,
    steps: Sequence[StepResult],
    stop_reason: StopReason | None,
    error: ErrorInfo | None = None,
    cancelled: bool = False,
) -> Outcome:
    """A trial's outcome (design §6).

    Args:
        steps: the step rows.
        stop_reason: what :func:`stop_decision` returned for the step the loop stopped after,
            or ``None`` when it ran to the end.
        error: a trial-level error (environment, agent setup …), or ``None``.
        cancelled: whether the trial was interrupted.

    Returns:
        ``cancelled`` when interrupted (or the error kind is ``cancelled``); ``errored`` when
        ``error`` or a step error has a category other than ``candidate``; ``stopped`` when a
        stop rule ended it early; else ``completed``.
    """
    if cancelled or (error is not None and error.kind is ErrorKind.CANCELLED):
        return Outcome.CANCELLED
    if error is not None and error.category is not Category.CANDIDATE:
        return Outcome.ERRORED
    if trial_error(steps) is not None or any(s.source is StepSource.ERROR for s in steps):
        return Outcome.ERRORED
    if stop_reason is not None:
        return Outcome.STOPPED
    return Outcome.COMPLETED


def trial_passed(outcome: Outcome, reward: float | None) -> bool:
    """Whether a trial passes (design §5.2): outcome ``completed`` and ``reward`` ≥ 1.0.

    Args:
        outcome: the trial's outcome.
        reward: the trial's primary reward.

    Returns:
        The verdict; a stopped, errored or cancelled trial never passes.
    """
    return outcome is Outcome.COMPLETED and reward is not None and reward >= PASS_THRESHOLD


@dataclass(frozen=True)
class TrialScore:
    """Everything :func:`score_trial` decides, field names as in result.json.

    Attributes:
        outcome: the outcome.
        error: the trial error (given, or the first non-candidate step error), ``None`` unless
            errored or cancelled.
        reward: the primary reward (strategy applied).
        rewards: every key aggregated.
        reward_all_steps: mean over all declared steps, unreached counted 0.
        passed: whether the trial passes.
        steps_run: steps whose procedure began.
        stopped_after: the step the trial stopped after (only when ``stopped``).
        stop_reason: why (only when ``stopped``).
    """

    outcome: Outcome
    error: ErrorInfo | None
    reward: float | None
    rewards: dict[str, float] | None
    reward_all_steps: float | None
    passed: bool
    steps_run: int
    stopped_after: str | None
    stop_reason: StopReason | None


def score_trial(
    strategy: Strategy,
    steps: Sequence[StepResult],
    *,
    steps_total: int | None = None,
    stop_reason: StopReason | None = None,
    error: ErrorInfo | None = None,
    cancelled: bool = False,
) -> TrialScore:
    """Score a finished trial: rewards, outcome and passing in one call (design §5.3, §6).

    Rewards are computed from whatever steps have results also when the trial errored or was
    cancelled (reports and summaries leave those trials out of the scores).

    Args:
        strategy: ``mean`` or ``final``.
        steps: one row per declared step, in order.
        steps_total: declared steps (default ``len(steps)``).
        stop_reason: the stop rule that ended the trial early, or ``None``.
        error: a trial-level error, or ``None``.
        cancelled: whether the trial was interrupted.

    Returns:
        The :class:`TrialScore`.
    """
    total = len(steps) if steps_total is None else steps_total
    rewards, reward = trial_rewards(strategy, steps)
    outcome = trial_outcome(steps=steps, stop_reason=stop_reason, error=error, cancelled=cancelled)
    if error is None and outcome in (Outcome.ERRORED, Outcome.CANCELLED):
        error = trial_error(steps)
    stopped = outcome is Outcome.STOPPED
    return TrialScore(
        outcome=outcome,
        error=error if outcome in (Outcome.ERRORED, Outcome.CANCELLED) else None,
        reward=reward,
        rewards=rewards,
        reward_all_steps=reward_all_steps(steps, total),
        passed=trial_passed(outcome, reward),
        steps_run=sum(step_reached(s) for s in steps),
        stopped_after=stop_reason.step if stopped and stop_reason is not None else None,
        stop_reason=stop_reason if stopped else None,
    )


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimator 1 − C(n−c, k)/C(n, k) (design §5.2).

    Args:
        n: scored attempts of one task (≥ 1).
        c: how many of them passed (0 ≤ c ≤ n).
        k: attempts drawn (1 ≤ k ≤ n).

    Returns:
        The probability that at least one of k attempts drawn without replacement passes,
        in [0, 1].

    Raises:
        ValueError: when the arguments violate the bounds above.
    """
    if not (n >= 1 and 0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass_at_k needs n >= 1, 0 <= c <= n, 1 <= k <= n; got {n=}, {c=}, {k=}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_at_k_summary(per_task: Mapping[str, Sequence[bool]], k_max: int) -> dict[str, float]:
    """pass@k for k = 1 … ``k_max``, each averaged over the tasks with n ≥ k (design §5.2).

    Args:
        per_task: for each task, the pass verdict of each of its scored attempts that have a
            primary reward (metrics-only trials are left out by the caller).
        k_max: the largest k (usually the number of attempts per task).

    Returns:
        ``{"1": p1, "2": p2, …}``; a k no task has enough attempts for is left out.
    """
    out: dict[str, float] = {}
    for k in range(1, k_max + 1):
        values = [pass_at_k(len(v), sum(v), k) for v in per_task.values() if len(v) >= k]
        if values:
            out[str(k)] = math.fsum(values) / len(values)
    return out


__all__ = [
    "PASS_THRESHOLD",
    "PRIMARY_KEY",
    "TrialScore",
    "candidate_error_rewards",
    "counted_rewards",
    "evaluate_gates",
    "pass_at_k",
    "pass_at_k_summary",
    "primary_reward",
    "reward_all_steps",
    "score_trial",
    "step_passed",
    "step_reached",
    "stop_decision",
    "trial_error",
    "trial_outcome",
    "trial_passed",
    "trial_rewards",
]


def sum_judge(usages: Iterable[JudgeUsage | None]) -> JudgeUsage | None:
    """Sum judge usages (``None`` entries skipped); ``None`` when there is none.

    The cost is the sum of the reported costs, ``None`` when none reported one.
    """
    got = [u for u in usages if u is not None]
    if not got:
        return None
    costs = [u.cost_usd for u in got if u.cost_usd is not None]
    models: list[str] = []
    for u in got:
        models.extend(m for m in u.models if m not in models)
    return JudgeUsage(
        tokens=Tokens.total(u.tokens for u in got),
        cost_usd=math.fsum(costs) if costs else None,
        models=models,
        calls=sum(u.calls for u in got),
    )
