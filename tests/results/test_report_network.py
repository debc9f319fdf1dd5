"""``cairn report`` counts the egress gateway's denied attempts per step (issue 14)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cairn.results.model import (
    AgentRef,
    NetworkCounts,
    Outcome,
    StepResult,
    TaskRef,
    TrialResult,
    TrialTimings,
)
from cairn.results.report import network_rows, render
from cairn.results.summary import summarize_job

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _trial(name: str, counts: list[NetworkCounts | None]) -> TrialResult:
    steps = [
        StepResult(
            index=i,
            name=f"s{i}",
            source="verifier",
            rewards={"reward": 1.0},
            reward=1.0,
            passed=True,
            network=c,
        )
        for i, c in enumerate(counts, 1)
    ]
    return TrialResult(
        trial_id=name * 4,
        trial_name=name,
        task=TaskRef(name="t", content_hash="h"),
        agent=AgentRef(name="x"),
        backend="docker",
        outcome=Outcome.COMPLETED,
        reward=1.0,
        rewards={"reward": 1.0},
        passed=True,
        steps_total=len(steps),
        steps_run=len(steps),
        timings=TrialTimings(total_sec=1.0),
        started_at=T0,
        finished_at=T0,
        steps=steps,
    )


@dataclass
class _Job:
    job_dir: Path
    summary: object
    results: list
    stopped_by: str | None = None


def test_denied_attempts_per_step_lead_the_network_table():
    results = [
        _trial(
            "t__1__aaaa",
            [
                NetworkCounts(allowed=3),
                NetworkCounts(allowed=1, denied=4, denied_hosts=["answers.example", "10.0.0.9"]),
            ],
        ),
        _trial("t__2__bbbb", [None, None]),  # no gateway: no rows
    ]
    rows = network_rows(results)
    assert rows == [
        ["t__1__aaaa", "2. s2", "4", "1", "answers.example, 10.0.0.9"],
        ["t__1__aaaa", "1. s1", "0", "3", ""],
    ]
    job = _Job(Path("/jobs/j"), summarize_job(results), results)
    text = render(job, "text")
    head = {
        line.split("  ", 2)[1].strip(): line.split("  ", 2)[2].strip()
        for line in text.splitlines()
        if line.startswith("  ") and "  " in line[2:]
    }
    assert head["network denied"] == "4 connection attempts in 1 steps"
    assert "network (egress gateway)" in text and "answers.example" in text
    md = render(job, "markdown")
    assert "| t__1__aaaa | 2. s2 | 4 | 1 | answers.example, 10.0.0.9 |" in md


def test_no_network_section_without_a_gateway():
    results = [_trial("t__1__cccc", [None])]
    text = render(_Job(Path("/jobs/j"), summarize_job(results), results), "text")
    assert "network" not in text
