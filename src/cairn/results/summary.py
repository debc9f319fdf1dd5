"""The job summary (design §6, §7): trial results → :class:`~cairn.results.JobSummary`. Pure.

Scores — mean rewards, pass rate, pass@k, per-step figures — are computed over *scored*
trials only (outcome ``completed`` or ``stopped``). Errored and cancelled trials are counted
beside them by kind and category and are never folded in as 0, except in the one figure that
says so: ``mean_reward_errors_as_zero`` (scored trials plus every errored trial as 0), so an
agent that breaks verifiers cannot look better than one that does not.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from cairn.errors import Category, ErrorKind
from cairn.results.aggregate import (
    counted_rewards,
    pass_at_k_summary,
    primary_reward,
    step_reached,
    sum_judge,
)
from cairn.results.model import (
    JobSummary,
    KeyStat,
    Outcome,
    StepSource,
    StepSummary,
    TaskSummary,
    TimingSummary,
    Tokens,
    TrialResult,
)

SCORED_OUTCOMES = (Outcome.COMPLETED, Outcome.STOPPED)
"""Outcomes whose trials carry a genuine score (design §6)."""


def is_scored(result: TrialResult) -> bool:
    """Whether a trial counts in scores (outcome ``completed`` or ``stopped``).

    Args:
        result: a trial result.

    Returns:
        The verdict.
    """
    return result.outcome in SCORED_OUTCOMES


def _mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def _outcome_counts(results: Iterable[TrialResult]) -> dict[Outcome, int]:
    counts = {o: 0 for o in Outcome}
    for r in results:
        counts[r.outcome] += 1
    return counts


def _pass_rate(scored: Sequence[TrialResult]) -> float | None:
    with_reward = [r for r in scored if r.reward is not None]
    return sum(r.passed for r in with_reward) / len(with_reward) if with_reward else None


def _step_names(
    task: str, results: Sequence[TrialResult], declared_steps: Mapping[str, Sequence[str]] | None
) -> list[str]:
    if declared_steps is not None and task in declared_steps:
        return list(declared_steps[task])
    names: dict[str, int] = {}
    for r in results:
        for s in r.steps:
            names.setdefault(s.name, s.index)
    return sorted(names, key=lambda n: names[n])


def _step_summary(index: int, name: str, scored: Sequence[TrialResult]) -> StepSummary:
    every = [s for r in scored for s in r.steps if s.name == name]
    rows = [s for s in every if s.source is not StepSource.ORACLE]  # the funnel: agent steps
    counted = [c for c in map(counted_rewards, rows) if c is not None]
    primaries = [p for p in map(primary_reward, counted) if p is not None]
    return StepSummary(
        index=index,
        name=name,
        n_reached=sum(step_reached(s) for s in rows),
        n_results=len(counted),
        n_passed=sum(s.passed for s in rows),
        mean_reward=_mean(primaries),
        n_replayed=len(every) - len(rows),
    )


def _task_summary(
    task: str, results: Sequence[TrialResult], declared_steps: Mapping[str, Sequence[str]] | None
) -> TaskSummary:
    scored = [r for r in results if is_scored(r)]
    names = _step_names(task, results, declared_steps)
    return TaskSummary(
        name=task,
        n_trials=len(results),
        n_scored=len(scored),
        outcomes=_outcome_counts(results),
        n_passed=sum(r.passed for r in scored),
        pass_rate=_pass_rate(scored),
        mean_reward=_mean([r.reward for r in scored if r.reward is not None]),
        reward_all_steps_mean=_mean([r.reward_all_steps for r in scored if r.reward_all_steps is not None]),
        steps=[_step_summary(i, n, scored) for i, n in enumerate(names, start=1)],
    )


def _error_of(result: TrialResult) -> tuple[ErrorKind, Category] | None:
    if result.error is not None:
        return result.error.kind, result.error.category
    if result.outcome is Outcome.CANCELLED:
        return ErrorKind.CANCELLED, Category.JOB
    return None


def summarize_job(
    results: Sequence[TrialResult], declared_steps: Mapping[str, Sequence[str]] | None = None
) -> JobSummary:
    """Summarize a job's trial results (design §6, §7 summary.json).

    Args:
        results: every finished trial of the job (one per result.json).
        declared_steps: for each task name, its declared step names in order; tasks listed
            here appear in the summary (in this order) even without results. Without it,
            steps are taken from the results' step rows and tasks are sorted by name.

    Returns:
        The summary: counts per outcome, error kind and category; means over scored trials
        (primary reward, each key over the trials that carry it, reward_all_steps); the mean
        with errored trials as 0; pass rate and pass@k (k up to the largest number of scored
        attempts of a task) over scored trials with a primary reward; per task and per
        (task, step) figures; token, cost and time totals over all trials.
    """
    scored = [r for r in results if is_scored(r)]
    with_reward = [r for r in scored if r.reward is not None]
    errored = [r for r in results if r.outcome is Outcome.ERRORED]

    errors: dict[ErrorKind, int] = defaultdict(int)
    categories: dict[Category, int] = defaultdict(int)
    for r in results:
        if r.outcome in (Outcome.ERRORED, Outcome.CANCELLED) and (ec := _error_of(r)):
            errors[ec[0]] += 1
            categories[ec[1]] += 1

    key_values: dict[str, list[float]] = defaultdict(list)
    for r in scored:
        for key, value in (r.rewards or {}).items():
            key_values[key].append(value)

    by_task: dict[str, list[TrialResult]] = defaultdict(list)
    for r in results:
        by_task[r.task.name].append(r)
    task_names = list(declared_steps or {})
    task_names += sorted(t for t in by_task if t not in (declared_steps or {}))

    per_task_passes = {
        t: [r.passed for r in rs if is_scored(r) and r.reward is not None] for t, rs in by_task.items()
    }
    per_task_passes = {t: v for t, v in per_task_passes.items() if v}
    k_max = max((len(v) for v in per_task_passes.values()), default=0)

    rewards_sum = math.fsum(r.reward for r in with_reward)  # type: ignore[misc]
    n_with_errors = len(with_reward) + len(errored)
    costs = [r.cost_usd for r in results if r.cost_usd is not None]
    totals = [r.timings.total_sec for r in results if r.timings.total_sec is not None]

    return JobSummary(
        n_trials=len(results),
        n_scored=len(scored),
        n_no_reward=len(scored) - len(with_reward),
        outcomes=_outcome_counts(results),
        errors=dict(sorted(errors.items())),
        error_categories=dict(sorted(categories.items())),
        mean_reward=rewards_sum / len(with_reward) if with_reward else None,
        mean_reward_errors_as_zero=rewards_sum / n_with_errors if n_with_errors else None,
        rewards={k: KeyStat(mean=math.fsum(v) / len(v), n=len(v)) for k, v in key_values.items()},
        reward_all_steps_mean=_mean([r.reward_all_steps for r in scored if r.reward_all_steps is not None]),
        n_passed=sum(r.passed for r in scored),
        pass_rate=_pass_rate(scored),
        pass_at_k=pass_at_k_summary(per_task_passes, k_max),
        tasks=[_task_summary(t, by_task.get(t, []), declared_steps) for t in task_names],
        tokens=Tokens.total(r.tokens for r in results),
        cost_usd=math.fsum(costs) if costs else None,
        judge=sum_judge(r.judge for r in results),
        timings=TimingSummary(n=len(totals), total_sec_sum=math.fsum(totals), total_sec_mean=_mean(totals)),
    )
