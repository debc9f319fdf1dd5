"""The verdict line (issue #21): what ran and what stopped it; no score for an errored trial."""

from __future__ import annotations

from datetime import UTC, datetime

from cairn.errors import ErrorKind, category_of
from cairn.results.model import (
    AgentRef,
    ErrorInfo,
    Outcome,
    StepResult,
    StopReason,
    TaskRef,
    TrialResult,
    TrialTimings,
)
from cairn.results.verdict import verdict_line

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NAMES = ["collect", "diagnose", "fix", "test", "ship"]


def _trial(outcome, rewards, *, reward=None, stop=None, stopped_after=None, error=None, passed=False):
    steps = [
        StepResult(
            index=i,
            name=n,
            source="verifier" if r is not None else "not-run",
            reward=r,
            rewards=None if r is None else {"reward": r},
        )
        for i, (n, r) in enumerate(zip(NAMES, rewards, strict=False), start=1)
    ]
    return TrialResult(
        trial_id="t-1-0123456789abcdef",
        trial_name="t__1",
        task=TaskRef(name="t", content_hash="h"),
        agent=AgentRef(name="nop"),
        backend="docker",
        outcome=outcome,
        error=error,
        reward=reward,
        passed=passed,
        steps_total=len(steps),
        steps_run=sum(r is not None for r in rewards),
        stopped_after=stopped_after,
        stop_reason=stop,
        timings=TrialTimings(total_sec=9.12),
        started_at=T0,
        finished_at=T0,
        steps=steps,
    )


def test_stopped_by_a_gate_names_the_step_and_the_gate():
    r = _trial(
        Outcome.STOPPED,
        [1.0, 0.0, None, None, None],
        reward=0.5,
        stopped_after="diagnose",
        stop=StopReason(kind="min_reward", step="diagnose", key="reward", value=0.0, threshold=1.0),
    )
    assert verdict_line(r) == (
        "STOPPED after step 2/5 diagnose: reward 0.00 < min_reward 1.0 "
        "(mean 0.50 over 2 of 5 steps run) in 9.1 s"
    )


def test_stopped_by_a_missing_gate_key():
    r = _trial(
        Outcome.STOPPED,
        [1.0, None, None, None, None],
        reward=1.0,
        stopped_after="collect",
        stop=StopReason(kind="min_reward", step="collect", key="safety", value=None, threshold=0.5),
    )
    assert verdict_line(r).startswith(
        "STOPPED after step 1/5 collect: reward.safety missing (counts as -inf) < min_reward.safety 0.5 ("
    )


def test_errored_trial_shows_no_reward():
    err = ErrorInfo(
        kind=ErrorKind.VERIFIER_TIMEOUT,
        category=category_of(ErrorKind.VERIFIER_TIMEOUT),
        step="fix",
        message="verifier exceeded 600 s\nmore",
    )
    r = _trial(Outcome.ERRORED, [1.0, 1.0, None, None, None], reward=1.0, error=err)
    line = verdict_line(r)
    assert line == (
        "ERRORED at step 3/5 fix: verifier_timeout: verifier exceeded 600 s (2 of 5 steps run) in 9.1 s"
    )
    assert "reward" not in line


def test_pass_and_fail():
    assert (
        verdict_line(_trial(Outcome.COMPLETED, [1.0] * 5, reward=1.0, passed=True))
        == "PASS reward=1.00 (mean of 5 steps) in 9.1 s"
    )
    assert (
        verdict_line(_trial(Outcome.COMPLETED, [1.0, 1, 1, 1, 0.0], reward=0.8))
        == "FAIL reward=0.80 (mean of 5 steps) in 9.1 s"
    )


# ------------------------------------------- held by mutation testing (bench/mutation.py)


def _from_disk(r: TrialResult) -> TrialResult:
    """The result as a report reads it: parsed from result.json (strings not interned)."""
    return TrialResult.model_validate_json(r.model_dump_json())


def test_stopped_by_a_step_error_names_its_kind():
    r = _trial(
        Outcome.STOPPED,
        [1.0, 0.0, None, None, None],
        reward=0.5,
        stop=StopReason(kind="step_error", step="diagnose", error_kind=ErrorKind.SETUP_FAILED),
    )
    want = (
        "STOPPED after step 2/5 diagnose: step error setup_failed (mean 0.50 over 2 of 5 steps run) in 9.1 s"
    )
    assert verdict_line(r) == want and verdict_line(_from_disk(r)) == want
    r = _trial(
        Outcome.STOPPED,
        [1.0, 0.0, None, None, None],
        reward=0.5,
        stop=StopReason(kind="step_error", step="diagnose"),
    )
    assert ": step error error (" in verdict_line(r)


def test_a_result_read_from_disk_gives_the_same_verdict():
    gate = _trial(
        Outcome.STOPPED,
        [1.0, 0.0, None, None, None],
        reward=0.5,
        stopped_after="diagnose",
        stop=StopReason(kind="min_reward", step="diagnose", key="reward", value=0.0, threshold=1.0),
    )
    assert verdict_line(_from_disk(gate)) == verdict_line(gate)
    assert "step 2/5 diagnose: reward 0.00 < min_reward 1.0" in verdict_line(_from_disk(gate))


def test_an_error_at_a_step_the_result_does_not_list_and_a_long_message():
    err = ErrorInfo(
        kind=ErrorKind.SANDBOX_LOST,
        category=category_of(ErrorKind.SANDBOX_LOST),
        step="gone",
        message="x" * 400 + "\nsecond line",
    )
    line = verdict_line(_trial(Outcome.ERRORED, [1.0, None, None, None, None], error=err))
    assert line == f"ERRORED at step ?/5 gone: sandbox_lost: {'x' * 300} (1 of 5 steps run) in 9.1 s"


def test_many_steps_all_run_read_from_disk():
    steps = [
        StepResult(index=i, name=f"s{i}", source="verifier", reward=1.0, rewards={"reward": 1.0})
        for i in range(1, 301)
    ]
    r = TrialResult(
        trial_id="t-1-0123456789abcdef",
        trial_name="t__1",
        task=TaskRef(name="t", content_hash="h"),
        agent=AgentRef(name="nop"),
        backend="docker",
        outcome=Outcome.COMPLETED,
        reward=1.0,
        passed=True,
        steps_total=300,
        steps_run=300,
        timings=TrialTimings(total_sec=1.0),
        started_at=T0,
        finished_at=T0,
        steps=steps,
    )
    assert verdict_line(_from_disk(r)) == "PASS reward=1.00 (mean of 300 steps) in 1.0 s"


def test_a_completed_trial_that_ran_fewer_steps_says_how_many():
    r = _trial(Outcome.COMPLETED, [1.0, 1.0, None, None, None], reward=1.0, passed=True)
    assert verdict_line(r) == "PASS reward=1.00 (mean of 2 of 5 steps run) in 9.1 s"


def test_long_step_names_read_from_disk_are_found():
    """pydantic caches short strings, so only names past its 64-character cache tell ``==``
    from ``is``."""
    long = "diagnose-" + "x" * 80
    steps = [
        StepResult(index=1, name="a", source="verifier", reward=1.0, rewards={"reward": 1.0}),
        StepResult(index=2, name=long, source="verifier", reward=0.0, rewards={"reward": 0.0}),
    ]
    r = TrialResult(
        trial_id="t-1-0123456789abcdef",
        trial_name="t__1",
        task=TaskRef(name="t", content_hash="h"),
        agent=AgentRef(name="nop"),
        backend="docker",
        outcome=Outcome.STOPPED,
        reward=0.5,
        steps_total=2,
        steps_run=2,
        stopped_after=long,
        stop_reason=StopReason(kind="min_reward", step=long, key="reward", value=0.0, threshold=1.0),
        timings=TrialTimings(total_sec=1.0),
        started_at=T0,
        finished_at=T0,
        steps=steps,
    )
    assert verdict_line(_from_disk(r)).startswith(f"STOPPED after step 2/2 {long}: reward 0.00")
