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


def _trial(outcome, rewards, *, reward=None, stop=None, stopped_after=None, error=None,
           passed=False):
    steps = [StepResult(index=i, name=n, source="verifier" if r is not None else "not-run",
                        reward=r, rewards=None if r is None else {"reward": r})
             for i, (n, r) in enumerate(zip(NAMES, rewards, strict=False), start=1)]
    return TrialResult(
        trial_id="t-1-0123456789abcdef", trial_name="t__1", task=TaskRef(name="t", content_hash="h"),
        agent=AgentRef(name="nop"), backend="docker", outcome=outcome, error=error,
        reward=reward, passed=passed, steps_total=len(steps),
        steps_run=sum(r is not None for r in rewards), stopped_after=stopped_after,
        stop_reason=stop, timings=TrialTimings(total_sec=9.12), started_at=T0, finished_at=T0,
        steps=steps)


def test_stopped_by_a_gate_names_the_step_and_the_gate():
    r = _trial(Outcome.STOPPED, [1.0, 0.0, None, None, None], reward=0.5,
               stopped_after="diagnose",
               stop=StopReason(kind="min_reward", step="diagnose", key="reward", value=0.0,
                               threshold=1.0))
    assert verdict_line(r) == ("STOPPED after step 2/5 diagnose: reward 0.00 < min_reward 1.0 "
                               "(mean 0.50 over 2 of 5 steps run) in 9.1 s")


def test_stopped_by_a_missing_gate_key():
    r = _trial(Outcome.STOPPED, [1.0, None, None, None, None], reward=1.0,
               stopped_after="collect",
               stop=StopReason(kind="min_reward", step="collect", key="safety", value=None,
                               threshold=0.5))
    assert verdict_line(r).startswith(
        "STOPPED after step 1/5 collect: reward.safety missing (counts as -inf) < "
        "min_reward.safety 0.5 (")


def test_errored_trial_shows_no_reward():
    err = ErrorInfo(kind=ErrorKind.VERIFIER_TIMEOUT, category=category_of(ErrorKind.VERIFIER_TIMEOUT),
                    step="fix", message="verifier exceeded 600 s\nmore")
    r = _trial(Outcome.ERRORED, [1.0, 1.0, None, None, None], reward=1.0, error=err)
    line = verdict_line(r)
    assert line == ("ERRORED at step 3/5 fix: verifier_timeout: verifier exceeded 600 s "
                    "(2 of 5 steps run) in 9.1 s")
    assert "reward" not in line


def test_pass_and_fail():
    assert verdict_line(_trial(Outcome.COMPLETED, [1.0] * 5, reward=1.0, passed=True)) == \
        "PASS reward=1.00 (mean of 5 steps) in 9.1 s"
    assert verdict_line(_trial(Outcome.COMPLETED, [1.0, 1, 1, 1, 0.0], reward=0.8)) == \
        "FAIL reward=0.80 (mean of 5 steps) in 9.1 s"
