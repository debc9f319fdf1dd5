"""The job summary (design §6, §7): scores over scored trials, errors beside them, never as 0."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cairn.errors import Category, ErrorKind, category_of
from cairn.results.aggregate import primary_reward
from cairn.results.model import (
    AgentRef,
    ErrorInfo,
    JobSummary,
    KeyStat,
    Outcome,
    StepResult,
    TaskRef,
    Tokens,
    TrialResult,
    TrialTimings,
)
from cairn.results.summary import summarize_job

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def make_trial(
    task: str = "t",
    attempt: int = 1,
    outcome: Outcome = Outcome.COMPLETED,
    step_rewards: list[dict | None] | None = None,
    *,
    names: list[str] | None = None,
    reward: float | None = None,
    rewards: dict | None = None,
    reward_all_steps: float | None = None,
    error: ErrorKind | None = None,
    tokens: tuple[int, int, int] = (0, 0, 0),
    cost: float | None = None,
    total_sec: float | None = None,
) -> TrialResult:
    """A TrialResult; ``step_rewards`` None entries are not-run steps."""
    step_rewards = (
        step_rewards if step_rewards is not None else [{"reward": reward}] if reward is not None else [None]
    )
    names = names or [f"s{i}" for i in range(1, len(step_rewards) + 1)]
    steps = [
        StepResult(
            index=i,
            name=n,
            source="verifier" if r is not None else "not-run",
            rewards=r,
            reward=primary_reward(r),
            passed=(primary_reward(r) or 0) >= 1.0,
        )
        for i, (n, r) in enumerate(zip(names, step_rewards, strict=True), start=1)
    ]
    if reward is None and rewards is None and step_rewards and step_rewards[-1] is not None:
        rewards = step_rewards[-1]
        reward = primary_reward(rewards)
    err = None
    if error is not None:
        err = ErrorInfo(kind=error, category=category_of(error), message="x")
    return TrialResult(
        trial_id=f"{task}-{attempt}-0123456789abcdef",
        trial_name=f"{task}__{attempt}",
        attempt=attempt,
        task=TaskRef(name=task, content_hash="h"),
        agent=AgentRef(name="nop"),
        backend="docker",
        outcome=outcome,
        error=err,
        reward=reward,
        rewards=rewards if rewards is not None else ({"reward": reward} if reward is not None else None),
        reward_all_steps=reward_all_steps,
        passed=outcome is Outcome.COMPLETED and reward is not None and reward >= 1.0,
        steps_total=len(steps),
        steps_run=sum(r is not None for r in step_rewards),
        tokens=Tokens(prompt=tokens[0], completion=tokens[1], cached=tokens[2]),
        cost_usd=cost,
        timings=TrialTimings(total_sec=total_sec),
        started_at=T0,
        finished_at=T0,
        steps=steps,
    )


def test_empty_job() -> None:
    s = summarize_job([])
    assert s.n_trials == 0 and s.n_scored == 0
    assert s.outcomes == {o: 0 for o in Outcome}
    assert s.mean_reward is None and s.mean_reward_errors_as_zero is None
    assert s.pass_rate is None and s.pass_at_k == {} and s.tasks == []
    assert s.cost_usd is None and s.timings.total_sec_mean is None


def test_errors_are_counted_beside_scores_never_as_zero() -> None:
    results = [
        make_trial(reward=1.0),
        make_trial(attempt=2, reward=0.5),
        make_trial(attempt=3, outcome=Outcome.STOPPED, reward=0.0),
        make_trial(attempt=4, outcome=Outcome.ERRORED, reward=0.9, error=ErrorKind.REWARD_MISSING),
        make_trial(attempt=5, outcome=Outcome.ERRORED, error=ErrorKind.START_FAILED),
        make_trial(attempt=6, outcome=Outcome.CANCELLED, reward=1.0),
    ]
    s = summarize_job(results)
    assert s.n_trials == 6 and s.n_scored == 3
    assert s.outcomes == {Outcome.COMPLETED: 2, Outcome.STOPPED: 1, Outcome.ERRORED: 2, Outcome.CANCELLED: 1}
    assert s.errors == {ErrorKind.REWARD_MISSING: 1, ErrorKind.START_FAILED: 1, ErrorKind.CANCELLED: 1}
    assert s.error_categories == {Category.TASK: 1, Category.INFRA: 1, Category.JOB: 1}
    assert s.mean_reward == pytest.approx(0.5)  # (1 + 0.5 + 0) / 3
    assert s.mean_reward_errors_as_zero == pytest.approx(1.5 / 5)  # + two errored as 0
    assert s.n_passed == 1 and s.pass_rate == pytest.approx(1 / 3)
    assert s.rewards == {"reward": KeyStat(mean=0.5, n=3)}


def test_metrics_only_trials_are_counted_but_left_out_of_means_and_pass_at_k() -> None:
    results = [make_trial(reward=1.0), make_trial(attempt=2, step_rewards=[{"accuracy": 0.9, "format": 1.0}])]
    s = summarize_job(results)
    assert s.n_scored == 2 and s.n_no_reward == 1
    assert s.mean_reward == 1.0 and s.pass_rate == 1.0
    assert s.pass_at_k == {"1": 1.0}
    assert s.rewards == {
        "reward": KeyStat(mean=1.0, n=1),
        "accuracy": KeyStat(mean=0.9, n=1),
        "format": KeyStat(mean=1.0, n=1),
    }


def test_pass_at_k_per_task_up_to_max_attempts() -> None:
    results = [
        make_trial("a", 1, reward=1.0),
        make_trial("a", 2, reward=0.0),
        make_trial("a", 3, reward=0.0),
        make_trial("b", 1, reward=0.0),
        make_trial("b", 2, outcome=Outcome.ERRORED, error=ErrorKind.BUILD_FAILED),
    ]
    s = summarize_job(results)
    assert s.pass_at_k["1"] == pytest.approx((1 / 3 + 0) / 2)
    assert s.pass_at_k["2"] == pytest.approx(2 / 3)  # only a has n >= 2
    assert s.pass_at_k["3"] == pytest.approx(1.0)
    assert list(s.pass_at_k) == ["1", "2", "3"]


def test_reward_all_steps_mean_over_scored() -> None:
    results = [
        make_trial(reward=0.5, reward_all_steps=0.25),
        make_trial(attempt=2, reward=1.0, reward_all_steps=1.0),
        make_trial(
            attempt=3, outcome=Outcome.ERRORED, reward_all_steps=0.0, error=ErrorKind.VERIFIER_TIMEOUT
        ),
    ]
    assert summarize_job(results).reward_all_steps_mean == pytest.approx(0.625)


def test_per_task_and_per_step() -> None:
    names = ["write", "append", "check"]
    results = [
        make_trial("two", 1, step_rewards=[{"reward": 1.0}, {"reward": 1.0}, {"reward": 1.0}], names=names),
        make_trial(
            "two", 2, Outcome.STOPPED, step_rewards=[{"reward": 0.0}, None, None], names=names, reward=0.0
        ),
        make_trial(
            "two",
            3,
            Outcome.ERRORED,
            step_rewards=[{"reward": 1.0}, None, None],
            names=names,
            error=ErrorKind.REWARD_PARSE_ERROR,
        ),
        make_trial("one", 1, step_rewards=[{"reward": 0.5}], names=["main"]),
    ]
    s = summarize_job(results, {"two": names, "one": ["main"], "never": ["main"]})
    assert [t.name for t in s.tasks] == ["two", "one", "never"]
    two = s.tasks[0]
    assert (two.n_trials, two.n_scored, two.n_passed) == (3, 2, 1)
    assert two.outcomes[Outcome.ERRORED] == 1 and two.mean_reward == pytest.approx(0.5)
    assert [
        (st.index, st.name, st.n_reached, st.n_results, st.n_passed, st.mean_reward) for st in two.steps
    ] == [(1, "write", 2, 2, 1, 0.5), (2, "append", 1, 1, 1, 1.0), (3, "check", 1, 1, 1, 1.0)]
    never = s.tasks[2]
    assert never.n_trials == 0 and never.mean_reward is None
    assert never.steps[0].n_reached == 0 and never.steps[0].mean_reward is None


def test_steps_derived_from_rows_without_declared_steps() -> None:
    results = [
        make_trial(
            "z",
            1,
            step_rewards=[{"reward": 1.0}, None],
            names=["zeta", "alpha"],
            outcome=Outcome.STOPPED,
            reward=1.0,
        ),
        make_trial("a", 1, reward=1.0),
    ]
    s = summarize_job(results)
    assert [t.name for t in s.tasks] == ["a", "z"]
    assert [st.name for st in s.tasks[1].steps] == ["zeta", "alpha"]  # declared order kept


def test_tokens_cost_timings_over_all_trials() -> None:
    results = [
        make_trial(reward=1.0, tokens=(10, 5, 1), cost=0.5, total_sec=2.0),
        make_trial(
            attempt=2, outcome=Outcome.ERRORED, error=ErrorKind.START_FAILED, tokens=(1, 1, 0), total_sec=4.0
        ),
        make_trial(attempt=3, reward=0.0, cost=0.25),
    ]
    s = summarize_job(results)
    assert s.tokens == Tokens(prompt=11, completion=6, cached=1)
    assert s.cost_usd == pytest.approx(0.75)
    assert (s.timings.n, s.timings.total_sec_sum, s.timings.total_sec_mean) == (2, 6.0, 3.0)


def test_summary_roundtrips_through_json() -> None:
    s = summarize_job(
        [
            make_trial(reward=1.0),
            make_trial(attempt=2, outcome=Outcome.ERRORED, error=ErrorKind.REWARD_EMPTY),
        ],
        {"t": ["s1"]},
    )
    assert JobSummary.model_validate_json(s.model_dump_json()) == s


scored_rewards = st.lists(st.floats(min_value=0, max_value=1), min_size=1, max_size=10)


@given(
    scored_rewards,
    st.lists(st.floats(min_value=0, max_value=1), max_size=5),
    st.integers(min_value=0, max_value=5),
)
def test_errored_trials_never_change_scores(rewards, errored_rewards, n_cancelled) -> None:
    scored = [make_trial(attempt=i, reward=r) for i, r in enumerate(rewards, start=1)]
    errored = [
        make_trial(attempt=100 + i, outcome=Outcome.ERRORED, reward=r, error=ErrorKind.REWARD_PARSE_ERROR)
        for i, r in enumerate(errored_rewards)
    ]
    cancelled = [
        make_trial(attempt=200 + i, outcome=Outcome.CANCELLED, reward=1.0) for i in range(n_cancelled)
    ]
    base = summarize_job(scored)
    full = summarize_job(scored + errored + cancelled)
    assert full.mean_reward == pytest.approx(base.mean_reward)
    assert full.pass_rate == pytest.approx(base.pass_rate)
    assert full.pass_at_k == pytest.approx(base.pass_at_k)
    assert full.mean_reward_errors_as_zero == pytest.approx(
        sum(rewards) / (len(rewards) + len(errored_rewards))
    )
    assert full.mean_reward_errors_as_zero <= full.mean_reward + 1e-12
