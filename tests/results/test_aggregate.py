"""Scoring (design §5.2–§5.4, §6) as pure functions, including issue 5's examples at this level."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from cairn.errors import Category, ErrorKind, Phase, category_of
from cairn.results.aggregate import (
    candidate_error_rewards,
    counted_rewards,
    evaluate_gates,
    pass_at_k,
    pass_at_k_summary,
    primary_reward,
    reward_all_steps,
    score_trial,
    step_passed,
    step_reached,
    stop_decision,
    trial_error,
    trial_outcome,
    trial_passed,
    trial_rewards,
)
from cairn.results.model import (
    AgentExit,
    ErrorInfo,
    Gate,
    Outcome,
    StepResult,
    StepSource,
    StepTimings,
    StopReason,
)

# ------------------------------------------------------------------------------ helpers


def row(
    index: int,
    source: str = "verifier",
    rewards: dict | None = None,
    *,
    name: str | None = None,
    error: ErrorInfo | None = None,
    agent_exit: AgentExit | None = AgentExit.OK,
) -> StepResult:
    """A step row as the trial loop would build it."""
    if source == "not-run":
        agent_exit = None
    return StepResult(
        index=index,
        name=name or f"s{index}",
        source=StepSource(source),
        rewards=rewards,
        reward=primary_reward(rewards),
        error=error,
        agent_exit=agent_exit,
    )


def err(kind: ErrorKind, step_index: int = 1, step: str | None = None) -> ErrorInfo:
    return ErrorInfo(
        kind=kind,
        category=category_of(kind, step_index=step_index, after_agent=step_index > 1),
        phase=Phase.VERIFIER,
        step=step,
        message=str(kind),
    )


@dataclass
class Spec:
    """One declared step of a simulated trial: what its verifier (or its failure) yields."""

    name: str
    rewards: dict | None = None
    error: ErrorKind | None = None
    min_reward: float | dict | None = None
    agent_exit: AgentExit = AgentExit.OK


def simulate(strategy: str, specs: list[Spec], *, verify: bool = True):
    """The trial loop's scoring, composed from the pure functions exactly as trial.py uses them."""
    rows: list[StepResult] = []
    stop: StopReason | None = None
    for i, sp in enumerate(specs, start=1):
        if stop is not None:
            rows.append(StepResult(index=i, name=sp.name, source=StepSource.NOT_RUN))
            continue
        error = None
        if sp.error is not None:
            error = ErrorInfo(
                kind=sp.error, category=category_of(sp.error, step_index=i), step=sp.name, message="boom"
            )
            if error.category is Category.CANDIDATE:
                source, rewards = StepSource.CANDIDATE_ERROR, candidate_error_rewards()
            else:
                source, rewards = StepSource.ERROR, None
        elif not verify:
            source, rewards = StepSource.NOT_RUN, None
        else:
            source, rewards = StepSource.VERIFIER, sp.rewards
        has_verifier = source is StepSource.VERIFIER
        r = StepResult(
            index=i,
            name=sp.name,
            source=source,
            rewards=rewards,
            reward=primary_reward(rewards),
            error=error,
            agent_exit=sp.agent_exit,
            gates=evaluate_gates(sp.min_reward, rewards) if has_verifier and verify else [],
            passed=step_passed(sp.min_reward, rewards, has_verifier),
        )
        rows.append(r)
        stop = stop_decision(r, sp.min_reward, is_last=i == len(specs), verify=verify)
    return score_trial(strategy, rows, steps_total=len(specs), stop_reason=stop), rows


# ------------------------------------------------------------------------------ §5.2


@pytest.mark.parametrize(
    ("rewards", "primary"),
    [
        (None, None),
        ({}, None),
        ({"reward": 0.3}, 0.3),
        ({"reward": 0.3, "other": 1.0}, 0.3),
        ({"accuracy": 0.9}, 0.9),  # the single key
        ({"accuracy": 0.9, "format": 1.0}, None),  # metrics only
    ],
)
def test_primary_reward(rewards, primary) -> None:
    assert primary_reward(rewards) == primary


def test_number_gate_gates_the_primary_reward_under_key_reward() -> None:
    assert evaluate_gates(0.5, {"reward": 0.5}) == [
        Gate(key="reward", value=0.5, threshold=0.5, passed=True)
    ]  # >= passes
    assert evaluate_gates(0.5, {"reward": 0.25}) == [
        Gate(key="reward", value=0.25, threshold=0.5, passed=False)
    ]
    assert evaluate_gates(1, {"accuracy": 1.0}) == [
        Gate(key="reward", value=1.0, threshold=1.0, passed=True)
    ]  # single key is primary
    assert evaluate_gates(0.0, {"a": 1.0, "b": 1.0}) == [
        Gate(key="reward", value=None, threshold=0.0, passed=False)
    ]  # no primary: -inf


def test_table_gates_each_key_and_missing_is_minus_infinity() -> None:
    gates = evaluate_gates({"safety": 1.0, "reward": 0.5}, {"reward": 1.0})
    assert gates == [
        Gate(key="safety", value=None, threshold=1.0, passed=False),
        Gate(key="reward", value=1.0, threshold=0.5, passed=True),
    ]
    assert evaluate_gates({"x": -100.0}, {"reward": 1}) == [
        Gate(key="x", value=None, threshold=-100.0, passed=False)
    ]


def test_gates_without_rewards_all_fail_and_no_gate_is_empty() -> None:
    assert evaluate_gates({"a": 0.0, "b": 0.0}, None) == [
        Gate(key="a", value=None, threshold=0.0, passed=False),
        Gate(key="b", value=None, threshold=0.0, passed=False),
    ]
    assert evaluate_gates(None, {"reward": 1.0}) == []


@pytest.mark.parametrize(
    ("min_reward", "rewards", "has_result", "passed"),
    [
        (None, {"reward": 1.0}, True, True),
        (None, {"reward": 1.5}, True, True),
        (None, {"reward": 0.99}, True, False),
        (None, {"a": 1.0, "b": 1.0}, True, False),  # metrics only: no primary, no pass
        (None, {"score": 1.0}, True, True),  # single key
        (0.5, {"reward": 0.5}, True, True),  # gates decide, not the 1.0 rule
        (0.5, {"reward": 0.4}, True, False),
        ({"a": 0.5, "b": 0.5}, {"a": 0.6, "b": 0.5}, True, True),
        ({"a": 0.5, "b": 0.5}, {"a": 0.6}, True, False),
        ({}, {"reward": 1.0}, True, True),  # empty table = no gate
        ({}, {"reward": 0.5}, True, False),
        (None, {"reward": 1.0}, False, False),  # no verifier result never passes
        (0.0, {"reward": 0.0}, False, False),  # e.g. candidate-error 0
        (None, None, True, False),
    ],
)
def test_step_passed(min_reward, rewards, has_result, passed) -> None:
    assert step_passed(min_reward, rewards, has_result) is passed


@pytest.mark.parametrize(
    ("outcome", "reward", "passed"),
    [
        (Outcome.COMPLETED, 1.0, True),
        (Outcome.COMPLETED, 1.2, True),
        (Outcome.COMPLETED, 0.999, False),
        (Outcome.COMPLETED, None, False),
        (Outcome.STOPPED, 1.0, False),  # a stopped trial never passes
        (Outcome.ERRORED, 1.0, False),
        (Outcome.CANCELLED, 1.0, False),
    ],
)
def test_trial_passed(outcome, reward, passed) -> None:
    assert trial_passed(outcome, reward) is passed


# ------------------------------------------------------------------------------ §5.3


def test_counted_rewards_by_source() -> None:
    assert counted_rewards(row(1, "verifier", {"reward": 0.5})) == {"reward": 0.5}
    assert counted_rewards(row(1, "verifier", None)) is None
    assert counted_rewards(row(1, "candidate_error", None)) == {"reward": 0.0}
    assert counted_rewards(row(1, "candidate_error", {"reward": 0.0})) == {"reward": 0.0}
    assert counted_rewards(row(1, "error", None)) is None
    assert counted_rewards(row(1, "not-run", None)) is None
    assert counted_rewards(row(1, "oracle", {"reward": 1.0})) is None


def test_mean_over_keys_spec_example() -> None:
    # acceptance: {correctness 1, evidence 1}, {correctness 0.5}, (no result)
    steps = [
        row(1, rewards={"correctness": 1, "evidence": 1}),
        row(2, rewards={"correctness": 0.5}),
        row(3, "not-run"),
    ]
    rewards, reward = trial_rewards("mean", steps)
    assert rewards == {"correctness": 0.75, "evidence": 0.5}
    assert reward is None  # step 1 has two keys and no "reward": no primary


def test_mean_no_result_step_not_in_denominator_for_every_kind_of_no_result() -> None:
    for no_result in (
        row(2, "error", None, error=err(ErrorKind.REWARD_MISSING, 2)),
        row(2, "not-run"),
        row(2, "verifier", None),
    ):
        rewards, reward = trial_rewards(
            "mean", [row(1, rewards={"reward": 1.0}), no_result, row(3, rewards={"reward": 0.0})]
        )
        assert rewards == {"reward": 0.5}
        assert reward == 0.5


def test_mean_candidate_error_counts_as_zero() -> None:
    steps = [row(1, rewards={"reward": 1.0}), row(2, "candidate_error", {"reward": 0.0}), row(3, "not-run")]
    assert trial_rewards("mean", steps) == ({"reward": 0.5}, 0.5)
    assert trial_rewards("final", steps) == ({"reward": 0.0}, 0.0)


def test_mean_primary_none_when_a_counted_step_has_none() -> None:
    steps = [row(1, rewards={"reward": 1.0}), row(2, rewards={"a": 1.0, "b": 0.0})]
    rewards, reward = trial_rewards("mean", steps)
    assert rewards == {"reward": 0.5, "a": 0.5, "b": 0.0}
    assert reward is None


def test_mean_primary_uses_each_steps_own_primary() -> None:
    # step 1's primary is its single key "score"; step 2's is "reward"
    rewards, reward = trial_rewards("mean", [row(1, rewards={"score": 0.4}), row(2, rewards={"reward": 0.8})])
    assert rewards == {"score": 0.2, "reward": 0.4}
    assert reward == pytest.approx(0.6)


def test_mean_excludes_oracle_replayed_steps() -> None:
    steps = [row(1, "oracle", {"reward": 1.0}), row(2, rewards={"reward": 0.0})]
    assert trial_rewards("mean", steps) == ({"reward": 0.0}, 0.0)
    assert trial_rewards("final", steps) == ({"reward": 0.0}, 0.0)


def test_no_result_at_all() -> None:
    for strategy in ("mean", "final"):
        assert trial_rewards(strategy, []) == (None, None)
        assert trial_rewards(strategy, [row(1, "not-run"), row(2, "not-run")]) == (None, None)
        assert trial_rewards(strategy, [row(1, "error", None, error=err(ErrorKind.REWARD_EMPTY))]) == (
            None,
            None,
        )


def test_final_is_last_executed_step() -> None:
    steps = [row(1, rewards={"reward": 1.0, "x": 0.5}), row(2, rewards={"reward": 0.25}), row(3, "not-run")]
    assert trial_rewards("final", steps) == ({"reward": 0.25}, 0.25)


def test_final_is_none_when_last_executed_step_has_no_result() -> None:
    steps = [row(1, rewards={"reward": 1.0}), row(2, "error", None, error=err(ErrorKind.VERIFIER_TIMEOUT, 2))]
    assert trial_rewards("final", steps) == (None, None)  # an error, never silently 0


def test_final_metrics_only() -> None:
    assert trial_rewards("final", [row(1, rewards={"a": 0.9, "b": 1.0})]) == ({"a": 0.9, "b": 1.0}, None)


def test_unknown_strategy() -> None:
    with pytest.raises(ValueError, match="median"):
        trial_rewards("median", [row(1, rewards={"reward": 1.0})])  # type: ignore[arg-type]


def test_reward_all_steps() -> None:
    # design §5.3: 5 steps, 1 then 0-and-stop -> Harbor mean 0.5 but reward_all_steps 0.2
    steps = [
        row(1, rewards={"reward": 1.0}),
        row(2, rewards={"reward": 0.0}),
        *[row(i, "not-run") for i in (3, 4, 5)],
    ]
    assert trial_rewards("mean", steps)[1] == 0.5
    assert reward_all_steps(steps, 5) == pytest.approx(0.2)
    assert reward_all_steps(steps[:2], 5) == pytest.approx(0.2)  # missing rows count 0
    assert reward_all_steps(
        [row(1, rewards={"reward": 0.25}), row(2, "not-run"), row(3, "not-run")], 3
    ) == pytest.approx(0.25 / 3)
    assert reward_all_steps([row(1, "candidate_error", {"reward": 0.0})], 1) == 0.0


def test_reward_all_steps_none_cases() -> None:
    assert reward_all_steps([], 3) is None
    assert reward_all_steps([row(1, "not-run")], 1) is None
    assert reward_all_steps([row(1, rewards={"a": 1.0, "b": 1.0})], 1) is None
    assert reward_all_steps([row(1, rewards={"reward": 1.0})], 0) is None


def test_reward_all_steps_leaves_oracle_steps_out() -> None:
    steps = [row(1, "oracle", {"reward": 1.0}), row(2, rewards={"reward": 1.0}), row(3, "not-run")]
    assert reward_all_steps(steps, 3) == pytest.approx(0.5)


def test_step_reached() -> None:
    assert step_reached(row(1, "verifier", {"reward": 1.0}))
    assert step_reached(row(1, "error", None))
    assert not step_reached(row(1, "not-run"))
    # --no-verify: the agent ran, the verifier part is not-run
    assert step_reached(StepResult(index=1, name="a", source="not-run", agent_exit="ok"))
    assert step_reached(StepResult(index=1, name="a", source="not-run", timings=StepTimings(setup_sec=0.1)))


# ------------------------------------------------------------------------------ §5.4


def test_rule1_error_without_verifier_result_stops() -> None:
    e = err(ErrorKind.SETUP_FAILED, 2)
    stop = stop_decision(
        row(2, "candidate_error", {"reward": 0.0}, error=e), None, is_last=False, verify=True
    )
    assert stop == StopReason(kind="step_error", step="s2", error_kind=ErrorKind.SETUP_FAILED)
    e = err(ErrorKind.REWARD_PARSE_ERROR, 1)
    stop = stop_decision(row(1, "error", None, error=e), 0.5, is_last=False, verify=False)
    assert stop == StopReason(kind="step_error", step="s1", error_kind=ErrorKind.REWARD_PARSE_ERROR)


def test_rule2_and_rule3_continue() -> None:
    zero = row(1, rewards={"reward": 0.0})
    assert stop_decision(zero, None, is_last=False, verify=True) is None
    assert stop_decision(zero, 1.0, is_last=False, verify=False) is None
    assert stop_decision(row(1, "not-run"), 1.0, is_last=False, verify=False) is None


def test_rule4_failing_gate_stops_naming_key_value_threshold() -> None:
    assert stop_decision(row(1, rewards={"reward": 0.25}), 0.5, is_last=False, verify=True) == StopReason(
        kind="min_reward", step="s1", key="reward", value=0.25, threshold=0.5
    )
    assert stop_decision(
        row(1, rewards={"reward": 1.0}), {"reward": 0.5, "safety": 1}, is_last=False, verify=True
    ) == StopReason(kind="min_reward", step="s1", key="safety", value=None, threshold=1.0)
    assert stop_decision(row(1, rewards={"reward": 0.5}), 0.5, is_last=False, verify=True) is None


def test_agent_timeout_with_result_follows_rules_2_to_4() -> None:
    timed_out = row(1, rewards={"reward": 1.0}, agent_exit=AgentExit.TIMEOUT)
    assert stop_decision(timed_out, 1.0, is_last=False, verify=True) is None
    crashed = row(1, rewards={"reward": 0.0}, agent_exit=AgentExit.ERROR)
    assert stop_decision(crashed, 1.0, is_last=False, verify=True).kind == "min_reward"
    assert stop_decision(crashed, None, is_last=False, verify=True) is None


def test_last_step_stops_nothing() -> None:
    assert stop_decision(row(3, rewards={"reward": 0.0}), 1.0, is_last=True, verify=True) is None
    assert (
        stop_decision(
            row(3, "error", None, error=err(ErrorKind.REWARD_MISSING, 3)), None, is_last=True, verify=True
        )
        is None
    )


# ------------------------------------------------------------------------------ §6


def test_trial_outcome() -> None:
    ok = [row(1, rewards={"reward": 1.0})]
    assert trial_outcome(steps=ok, stop_reason=None) is Outcome.COMPLETED
    stop = StopReason(kind="min_reward", step="s1", key="reward", value=0.0, threshold=1.0)
    assert trial_outcome(steps=ok, stop_reason=stop) is Outcome.STOPPED
    task_err = err(ErrorKind.BUILD_FAILED)
    assert trial_outcome(steps=[], stop_reason=None, error=task_err) is Outcome.ERRORED
    assert trial_outcome(steps=ok, stop_reason=None, cancelled=True) is Outcome.CANCELLED
    assert trial_outcome(steps=ok, stop_reason=None, error=err(ErrorKind.CANCELLED)) is Outcome.CANCELLED
    bad = [row(1, rewards={"reward": 1.0}), row(2, "error", None, error=err(ErrorKind.REWARD_MISSING, 2))]
    assert trial_outcome(steps=bad, stop_reason=None) is Outcome.ERRORED
    assert (
        trial_outcome(
            steps=bad,
            stop_reason=StopReason(kind="step_error", step="s2", error_kind=ErrorKind.REWARD_MISSING),
        )
        is Outcome.ERRORED
    )
    cand = [row(1, "candidate_error", {"reward": 0.0}, error=err(ErrorKind.SETUP_FAILED, 2))]
    assert trial_outcome(steps=cand, stop_reason=None) is Outcome.COMPLETED


def test_trial_error_fills_step_name_and_skips_candidate_errors() -> None:
    steps = [
        row(1, "candidate_error", {"reward": 0.0}, error=err(ErrorKind.SANDBOX_UNUSABLE)),
        row(2, "error", None, name="check", error=err(ErrorKind.REWARD_EMPTY, 2)),
    ]
    got = trial_error(steps)
    assert got is not None and got.kind is ErrorKind.REWARD_EMPTY and got.step == "check"
    assert trial_error([row(1, rewards={"reward": 1.0})]) is None


# ------------------------------------------------------------------------------ issue 5 examples


def test_two_step_oracle_passes() -> None:
    score, rows = simulate(
        "final", [Spec("write", {"reward": 1.0}, min_reward=1.0), Spec("append", {"reward": 1.0})]
    )
    assert [r.reward for r in rows] == [1.0, 1.0]
    assert (score.outcome, score.reward, score.passed) == (Outcome.COMPLETED, 1.0, True)
    assert score.steps_run == 2 and score.stop_reason is None and score.stopped_after is None


def test_two_step_nop_stops_after_write() -> None:
    score, rows = simulate(
        "final", [Spec("write", {"reward": 0.0}, min_reward=1.0), Spec("append", {"reward": 1.0})]
    )
    assert score.outcome is Outcome.STOPPED
    assert score.stopped_after == "write"
    assert score.stop_reason == StopReason(
        kind="min_reward", step="write", key="reward", value=0.0, threshold=1.0
    )
    assert rows[1].source is StepSource.NOT_RUN
    assert score.reward == 0.0 and score.steps_run == 1 and not score.passed


def test_example_a_three_constant_steps_no_gates() -> None:
    specs = [Spec("one", {"reward": 1.0}), Spec("two", {"reward": 0.0}), Spec("three", {"reward": 0.5})]
    mean, _ = simulate("mean", specs)
    final, _ = simulate("final", specs)
    assert mean.reward == pytest.approx(0.5) and final.reward == 0.5
    assert mean.reward_all_steps == pytest.approx(0.5)
    assert mean.outcome is final.outcome is Outcome.COMPLETED
    assert not mean.passed


def test_example_b_gate_on_step_1_stops() -> None:
    score, rows = simulate(
        "mean",
        [
            Spec("one", {"reward": 0.25}, min_reward=0.5),
            Spec("two", {"reward": 0.0}),
            Spec("three", {"reward": 0.5}),
        ],
    )
    assert score.outcome is Outcome.STOPPED and score.steps_run == 1
    assert score.reward == 0.25
    assert score.reward_all_steps == pytest.approx(0.0833, abs=1e-4)
    assert [r.source for r in rows] == [StepSource.VERIFIER, StepSource.NOT_RUN, StepSource.NOT_RUN]
    assert rows[0].gates == [Gate(key="reward", value=0.25, threshold=0.5, passed=False)]
    assert not rows[0].passed


def test_example_c_missing_gated_key_is_minus_infinity() -> None:
    score, _ = simulate(
        "mean",
        [
            Spec("one", {"reward": 1.0}, min_reward={"safety": 1}),
            Spec("two", {"reward": 0.0}),
            Spec("three", {"reward": 0.5}),
        ],
    )
    assert score.outcome is Outcome.STOPPED
    assert score.reward == 1.0
    assert score.stop_reason is not None and score.stop_reason.key == "safety"
    assert score.stop_reason.value is None and score.stop_reason.threshold == 1.0
    assert not score.passed


def test_example_d_final_step_without_reward_errors() -> None:
    score, rows = simulate(
        "final",
        [
            Spec("one", {"reward": 1.0}),
            Spec("two", {"reward": 0.0}),
            Spec("three", error=ErrorKind.REWARD_MISSING),
        ],
    )
    assert score.reward is None and score.rewards is None
    assert score.outcome is Outcome.ERRORED and not score.passed
    assert score.error is not None
    assert (score.error.kind, score.error.category, score.error.step) == (
        ErrorKind.REWARD_MISSING,
        Category.TASK,
        "three",
    )
    assert score.stop_reason is None and score.stopped_after is None
    assert rows[2].source is StepSource.ERROR


def test_example_e_failing_gate_on_last_step_stops_nothing() -> None:
    score, rows = simulate(
        "mean",
        [
            Spec("one", {"reward": 1.0}),
            Spec("two", {"reward": 1.0}),
            Spec("three", {"reward": 0.5}, min_reward=1.0),
        ],
    )
    assert score.outcome is Outcome.COMPLETED and score.stop_reason is None
    assert rows[2].gates == [Gate(key="reward", value=0.5, threshold=1.0, passed=False)]
    assert not rows[2].passed and rows[0].passed
    assert score.steps_run == 3


def test_setup_failed_on_step_2_is_candidate_zero_and_stops() -> None:
    score, rows = simulate(
        "mean",
        [
            Spec("one", {"reward": 1.0}),
            Spec("two", error=ErrorKind.SETUP_FAILED),
            Spec("three", {"reward": 1.0}),
        ],
    )
    assert rows[1].source is StepSource.CANDIDATE_ERROR and rows[1].reward == 0.0
    assert rows[1].error.category is Category.CANDIDATE and not rows[1].passed
    assert rows[2].source is StepSource.NOT_RUN
    assert score.outcome is Outcome.STOPPED and score.error is None
    assert score.stop_reason == StopReason(kind="step_error", step="two", error_kind=ErrorKind.SETUP_FAILED)
    assert score.reward == 0.5 and score.reward_all_steps == pytest.approx(1 / 3)


def test_setup_failed_on_step_1_is_task_error() -> None:
    score, rows = simulate("mean", [Spec("one", error=ErrorKind.SETUP_FAILED), Spec("two", {"reward": 1.0})])
    assert score.outcome is Outcome.ERRORED
    assert score.error.kind is ErrorKind.SETUP_FAILED and score.error.category is Category.TASK
    assert score.reward is None and rows[1].source is StepSource.NOT_RUN
    assert score.steps_run == 1


def test_candidate_error_on_last_step_completes_with_zero() -> None:
    score, _ = simulate(
        "final", [Spec("one", {"reward": 1.0}), Spec("two", error=ErrorKind.HEALTHCHECK_FAILED)]
    )
    assert score.outcome is Outcome.COMPLETED and score.reward == 0.0 and not score.passed


def test_no_verify_completes_with_null_reward() -> None:
    score, rows = simulate(
        "mean", [Spec("one", {"reward": 0.0}, min_reward=1.0), Spec("two", {"reward": 1.0})], verify=False
    )
    assert score.outcome is Outcome.COMPLETED
    assert score.reward is None and score.reward_all_steps is None and not score.passed
    assert score.steps_run == 2 and all(r.gates == [] for r in rows)


def test_score_trial_cancelled_keeps_partial_rewards_but_never_passes() -> None:
    steps = [row(1, rewards={"reward": 1.0}), row(2, "not-run")]
    score = score_trial("mean", steps, cancelled=True)
    assert score.outcome is Outcome.CANCELLED and score.reward == 1.0 and not score.passed
    assert score.stop_reason is None


# ------------------------------------------------------------------------------ pass@k


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (1, 1, 1, 1.0),
        (1, 0, 1, 0.0),
        (4, 2, 1, 0.5),
        (4, 2, 2, 1 - 1 / 6),  # 1 - C(2,2)/C(4,2)
        (4, 2, 3, 1.0),  # n - c < k
        (5, 1, 2, 1 - 6 / 10),
        (10, 0, 10, 0.0),
        (10, 10, 1, 1.0),
    ],
)
def test_pass_at_k_values(n, c, k, expected) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_matches_brute_force() -> None:
    for n in range(1, 7):
        for c in range(n + 1):
            outcomes = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                draws = list(itertools.combinations(outcomes, k))
                brute = sum(any(d) for d in draws) / len(draws)
                assert pass_at_k(n, c, k) == pytest.approx(brute)


@pytest.mark.parametrize(("n", "c", "k"), [(0, 0, 1), (3, 4, 1), (3, -1, 1), (3, 1, 0), (3, 1, 4)])
def test_pass_at_k_bad_arguments(n, c, k) -> None:
    with pytest.raises(ValueError, match=r"pass_at_k needs n >= 1, 0 <= c <= n, 1 <= k <= n; got n="):
        pass_at_k(n, c, k)


def test_pass_at_k_summary_averages_over_tasks_with_enough_attempts() -> None:
    got = pass_at_k_summary({"a": [True, False, False], "b": [True], "c": [False, False]}, 3)
    assert got["1"] == pytest.approx((1 / 3 + 1 + 0) / 3)
    assert got["2"] == pytest.approx(((1 - 1 / 3) + 0) / 2)  # b has n=1 < 2
    assert got["3"] == pytest.approx(1.0)  # only a
    assert list(got) == ["1", "2", "3"]
    assert pass_at_k_summary({"a": [True]}, 3) == {"1": 1.0}
    assert pass_at_k_summary({}, 3) == {}


# ------------------------------------------------------------------------------ properties

finite = st.floats(min_value=-10, max_value=10, allow_nan=False, allow_infinity=False)
step_rows = st.lists(
    st.one_of(
        st.builds(lambda v: ("verifier", {"reward": v}), finite),
        st.just(("candidate_error", {"reward": 0.0})),
        st.just(("not-run", None)),
        st.just(("error", None)),
    ),
    min_size=1,
    max_size=8,
).map(lambda specs: [row(i, src, rw) for i, (src, rw) in enumerate(specs, start=1)])


@given(step_rows)
def test_mean_lies_between_min_and_max_of_counted(steps) -> None:
    counted = [counted_rewards(s)["reward"] for s in steps if counted_rewards(s) is not None]
    _, reward = trial_rewards("mean", steps)
    if not counted:
        assert reward is None
    else:
        assert min(counted) - 1e-9 <= reward <= max(counted) + 1e-9


@given(step_rows, st.randoms())
def test_mean_ignores_order_and_unreached_steps(steps, rnd) -> None:
    shuffled = list(steps)
    rnd.shuffle(shuffled)
    base = trial_rewards("mean", steps)
    again = trial_rewards("mean", shuffled)
    extra = trial_rewards("mean", [*steps, row(99, "not-run")])
    assert again[1] == pytest.approx(base[1]) if base[1] is not None else again[1] is None
    assert extra == base


@given(step_rows, st.integers(min_value=0, max_value=5))
def test_reward_all_steps_is_mean_scaled_by_share_of_counted_steps(steps, extra_declared) -> None:
    total = len(steps) + extra_declared
    n_counted = sum(counted_rewards(s) is not None for s in steps)
    _, mean = trial_rewards("mean", steps)
    all_steps = reward_all_steps(steps, total)
    if n_counted == 0:
        assert all_steps is None
    else:
        assert all_steps == pytest.approx(mean * n_counted / total)
        if mean >= 0:
            assert all_steps <= mean + 1e-9


@given(step_rows)
def test_final_equals_the_last_reached_step(steps) -> None:
    reached = [s for s in steps if s.source is not StepSource.NOT_RUN]
    rewards, reward = trial_rewards("final", steps)
    if not reached or counted_rewards(reached[-1]) is None:
        assert (rewards, reward) == (None, None)
    else:
        assert rewards == counted_rewards(reached[-1]) and reward == rewards["reward"]


@given(
    st.integers(min_value=1, max_value=30).flatmap(
        lambda n: st.tuples(st.just(n), st.integers(min_value=0, max_value=n))
    )
)
def test_pass_at_k_bounded_and_monotone(nc) -> None:
    n, c = nc
    values = [pass_at_k(n, c, k) for k in range(1, n + 1)]
    assert all(0.0 <= v <= 1.0 for v in values)
    assert all(a <= b + 1e-12 for a, b in itertools.pairwise(values))  # monotone in k
    assert values[0] == pytest.approx(c / n)  # pass@1 = c/n
    if c < n:
        assert all(
            pass_at_k(n, c, k) <= pass_at_k(n, c + 1, k) + 1e-12 for k in range(1, n + 1)
        )  # monotone in c


@given(
    st.dictionaries(
        st.text(min_size=1, max_size=3), st.lists(st.booleans(), min_size=1, max_size=6), max_size=5
    ),
    st.integers(min_value=1, max_value=8),
)
def test_pass_at_k_summary_in_unit_interval(per_task, k_max) -> None:
    got = pass_at_k_summary(per_task, k_max)
    assert all(0.0 <= v <= 1.0 for v in got.values())
    n_max = max((len(v) for v in per_task.values()), default=0)
    assert list(got) == [str(k) for k in range(1, min(k_max, n_max) + 1)]


@given(
    st.dictionaries(st.sampled_from(["a", "b", "c", "reward"]), finite, min_size=1),
    st.dictionaries(
        st.sampled_from(["a", "b", "c", "reward"]), st.floats(min_value=-10, max_value=10), min_size=1
    ),
)
def test_gates_pass_exactly_when_value_at_least_threshold(rewards, table) -> None:
    assume(all(not math.isnan(v) for v in table.values()))
    gates = evaluate_gates(table, rewards)
    assert [g.key for g in gates] == list(table)
    for g in gates:
        assert g.passed is (g.key in rewards and rewards[g.key] >= table[g.key])


# ------------------------------------------- held by mutation testing (bench/mutation.py)


@pytest.mark.parametrize("strategy", ["best", "average", "Final", "", "median", "mean "])
def test_an_unknown_strategy_is_refused_whatever_it_sorts_like(strategy):
    """Only ``mean`` and ``final`` exist; a name that sorts before ``final`` is not ``final``."""
    steps = [StepResult(index=1, name="a", source="verifier", reward=1.0, rewards={"reward": 1.0})]
    with pytest.raises(ValueError, match=f"unknown multi_step_reward_strategy {strategy!r}"):
        trial_rewards(strategy, steps)  # type: ignore[arg-type]


def test_judge_usages_sum_skipping_none_and_an_empty_list_is_none():
    from cairn.results.aggregate import sum_judge
    from cairn.results.model import JudgeUsage, Tokens

    a = JudgeUsage(tokens=Tokens(prompt=10, completion=2, cached=0), cost_usd=0.5, models=["m1"], calls=1)
    b = JudgeUsage(
        tokens=Tokens(prompt=5, completion=1, cached=0), cost_usd=None, models=["m1", "m2"], calls=2
    )
    total = sum_judge([a, None, b])
    assert total is not None
    assert (total.tokens.prompt, total.tokens.completion, total.cost_usd, total.models, total.calls) == (
        15,
        3,
        0.5,
        ["m1", "m2"],
        3,
    )
    assert sum_judge([]) is None and sum_judge([None]) is None


def test_a_strategy_read_from_a_file_is_compared_by_value():
    """``mean`` and ``final`` built at run time (as read from task.toml, not interned) score
    as the literals do."""
    steps = [row(1, rewards={"reward": 1.0}), row(2, rewards={"reward": 0.0})]
    mean, final = "".join(["me", "an"]), "".join(["fin", "al"])
    assert trial_rewards(mean, steps) == ({"reward": 0.5}, 0.5)  # type: ignore[arg-type]
    assert trial_rewards(final, steps) == ({"reward": 0.0}, 0.0)  # type: ignore[arg-type]


def test_all_steps_reward_is_none_when_no_declared_step_is_left_to_count():
    """More replayed (oracle) rows than declared steps is inconsistent input: no mean, never a
    mean over a negative count."""
    steps = [
        row(1, "oracle", {"reward": 1.0}),
        row(2, "oracle", {"reward": 1.0}),
        row(3, rewards={"reward": 1.0}),
    ]
    assert reward_all_steps(steps, 2) is None
    assert reward_all_steps(steps, 1) is None
    assert reward_all_steps(steps, 3) == 1.0


def test_an_errored_trial_names_no_step_it_stopped_after():
    """A stop rule handed in with a trial-level error: the trial errored, it did not stop."""
    steps = [row(1, rewards={"reward": 0.0}), row(2, "not-run")]
    stop = StopReason(kind="min_reward", step="s1", key="reward", value=0.0, threshold=1.0)
    err = ErrorInfo(
        kind=ErrorKind.SANDBOX_LOST, category=Category.INFRA, phase=Phase.VERIFIER, message="lost"
    )
    score = score_trial("mean", steps, stop_reason=stop, error=err)
    assert score.outcome is Outcome.ERRORED
    assert (score.stopped_after, score.stop_reason) == (None, None)


# ------------------------------------------------------------------------------ mutation kills


def test_a_verifier_or_oracle_row_is_reached_whatever_else_it_carries() -> None:
    """A scored row (verifier, oracle) counts as reached even without agent fields or timings
    (a row read back from a regrade or an older result.json): only ``not-run`` looks further."""
    for source in ("verifier", "oracle"):
        bare = StepResult(index=1, name="a", source=source, rewards={"reward": 1.0}, reward=1.0)
        assert bare.agent_exit is None and step_reached(bare), source
    for source in ("error", "candidate_error"):
        assert step_reached(StepResult(index=1, name="a", source=source))


def test_a_step_error_stops_the_trial_from_either_sign() -> None:
    """Rule 1 stops on a row without a verifier result that carries an error, or whose source
    says it failed, each alone (not only both)."""
    infra = err(ErrorKind.START_FAILED)
    not_run_with_error = row(1, "not-run", error=infra)
    stop = stop_decision(not_run_with_error, None, is_last=False, verify=True)
    assert stop is not None and stop.kind == "step_error" and stop.error_kind is ErrorKind.START_FAILED
    for source in ("error", "candidate_error"):
        failed_without_error = row(1, source)
        stop = stop_decision(failed_without_error, None, is_last=False, verify=True)
        assert stop is not None and stop.kind == "step_error" and stop.error_kind is None, source
    assert stop_decision(row(1, "not-run"), None, is_last=False, verify=True) is None


def test_a_trial_errors_on_a_step_error_or_an_error_sourced_step_alone() -> None:
    """``errored`` when a step carries a non-candidate error, or a step's source is ``error``,
    each alone (not only both)."""
    error_row_without_error = row(1, "error")
    assert trial_outcome(steps=[error_row_without_error], stop_reason=None) is Outcome.ERRORED
    infra_on_a_not_run_row = row(1, "not-run", error=err(ErrorKind.START_FAILED))
    assert trial_error([infra_on_a_not_run_row]) is not None
    assert trial_outcome(steps=[infra_on_a_not_run_row], stop_reason=None) is Outcome.ERRORED
    assert trial_outcome(steps=[row(1, rewards={"reward": 1.0})], stop_reason=None) is Outcome.COMPLETED


def test_the_enum_orders_the_declared_equivalent_mutants_rely_on() -> None:
    """bench/mutation_equivalent.toml declares mutants equivalent because of how these StrEnums
    sort; a new member that sorts otherwise makes them real, and this fails first."""
    assert all(c > Category.CANDIDATE for c in Category if c is not Category.CANDIDATE)
    assert all(o < Outcome.STOPPED for o in Outcome if o is not Outcome.STOPPED)
    others = [s for s in StepSource if s is not StepSource.VERIFIER]
    assert all(s < StepSource.VERIFIER for s in others)
    assert all(s > StepSource.CANDIDATE_ERROR for s in StepSource if s is not StepSource.CANDIDATE_ERROR)


def test_score_trial_takes_its_options_by_keyword_only() -> None:
    """``steps_total`` and the rest are keyword-only: a positional 3 (steps_total? a stop
    reason?) is refused, never read as the wrong option."""
    rows = [row(1, rewards={"reward": 1.0})]
    with pytest.raises(TypeError, match="positional argument"):
        score_trial("mean", rows, 3)  # type: ignore[misc]
    assert score_trial("mean", rows, steps_total=3).reward_all_steps == pytest.approx(1 / 3)


def test_a_scored_row_with_an_error_does_not_stop_the_trial_by_rule_1() -> None:
    """Rule 1 is for rows without a verifier result: a verifier-sourced row that also carries
    an error (its reward stands) is judged by its gates, not stopped as a step error."""
    scored = row(1, rewards={"reward": 1.0}, error=err(ErrorKind.VERIFIER_TIMEOUT))
    assert stop_decision(scored, None, is_last=False, verify=True) is None


def test_a_trial_level_candidate_error_does_not_make_the_trial_errored() -> None:
    """Only a non-candidate error makes a trial ``errored`` (design §6): a budget stop (a
    candidate error given at trial level) leaves the outcome to the steps."""
    budget = err(ErrorKind.BUDGET_EXCEEDED)
    assert budget.category is Category.CANDIDATE
    steps = [row(1, rewards={"reward": 1.0})]
    assert trial_outcome(steps=steps, stop_reason=None, error=budget) is Outcome.COMPLETED
    infra = err(ErrorKind.START_FAILED)
    assert trial_outcome(steps=steps, stop_reason=None, error=infra) is Outcome.ERRORED


def test_an_errored_trial_keeps_the_trial_level_error_it_was_given() -> None:
    """score_trial takes a step's error only when no trial-level error was given."""
    given = err(ErrorKind.START_FAILED)
    score = score_trial("mean", [row(1, "not-run")], error=given)
    assert score.outcome is Outcome.ERRORED and score.error == given
    step_error = err(ErrorKind.SETUP_FAILED, step="s1")
    failed = row(1, "error", error=step_error)
    assert score_trial("mean", [failed], error=given).error == given
    assert score_trial("mean", [failed]).error == step_error


def test_a_trial_score_is_frozen() -> None:
    import dataclasses

    score = score_trial("mean", [row(1, rewards={"reward": 1.0})])
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign"):
        score.reward = 0.0  # type: ignore[misc]
