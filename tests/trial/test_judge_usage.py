"""``judge_usage.json`` (issue 22): read, validated and summed apart from the agent's spend."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from cairn.results.aggregate import sum_judge
from cairn.results.model import JudgeUsage, TaskRef, Tokens, TrialResult
from cairn.results.report import summary_rows
from cairn.results.summary import summarize_job
from cairn.trial.judge import read_judge_usage


def test_reads_one_object_or_a_list_with_aliases(tmp_path):
    (tmp_path / "judge_usage.json").write_text(
        json.dumps(
            [
                {"model": "m1", "calls": 2, "input_tokens": 10, "output_tokens": 3, "cost_usd": 0.5},
                {"model": "m2", "prompt_tokens": 5, "completion_tokens": 1, "cached_tokens": 4},
            ]
        )
    )
    usage, warnings = read_judge_usage(tmp_path)
    assert warnings == []
    assert usage == JudgeUsage(
        tokens=Tokens(prompt=15, completion=4, cached=4), cost_usd=0.5, models=["m1", "m2"], calls=2
    )


def test_absent_is_none_and_bad_files_warn_not_fail(tmp_path):
    assert read_judge_usage(tmp_path) == (None, [])
    for bad in (
        '{"prompt_tokens": -1}',
        '{"cost_usd": "free"}',
        "not json",
        "[1]",
        '{"prompt_tokens": true}',
    ):
        (tmp_path / "judge_usage.json").write_text(bad)
        usage, warnings = read_judge_usage(tmp_path)
        assert usage is None and len(warnings) == 1 and "not counted" in warnings[0]
    (tmp_path / "judge_usage.json").unlink()
    (tmp_path / "judge_usage.json").symlink_to("/etc/passwd")
    usage, warnings = read_judge_usage(tmp_path)
    assert usage is None and "not a regular file" in warnings[0]


def _result(tid: str, judge: JudgeUsage | None, cost: float | None) -> TrialResult:
    now = datetime.now(UTC)
    return TrialResult(
        trial_id=tid,
        trial_name=tid,
        attempt=1,
        task=TaskRef(name="t", content_hash="h"),
        agent={"name": "a"},
        backend="docker",
        outcome="completed",
        steps_total=1,
        started_at=now,
        finished_at=now,
        tokens=Tokens(prompt=100),
        cost_usd=cost,
        judge=judge,
        reward=1.0,
        passed=True,
        steps=[],
    )


def test_summary_keeps_judge_apart_and_sums_costs():
    j = JudgeUsage(tokens=Tokens(prompt=7, completion=2), cost_usd=0.25, models=["m"], calls=1)
    s = summarize_job([_result("a", j, 1.0), _result("b", j, 2.0), _result("c", None, None)])
    assert s.tokens.prompt == 300 and s.cost_usd == 3.0
    assert s.judge == JudgeUsage(tokens=Tokens(prompt=14, completion=4), cost_usd=0.5, models=["m"], calls=2)
    assert ("judge", "2 call(s), prompt 14, completion 4, $0.5000") in summary_rows(s)
    assert sum_judge([None, None]) is None
