"""The trial timeline over a real run (local backend, the oracle agent): the store records when
every phase ran (``timings.spans``: environment, environment healthcheck, agent setup; per
step setup, healthcheck, agent, pre_artifacts.sh, artifacts, verifier) and the trial page draws
a bar for each, in order, at its recorded offset and with its recorded duration — also for a
step whose healthcheck failed.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from taskgen import StepSpec, constant_reward, write_task
from testbed import backend_missing
from viewer_job import cairn, console_errors, local_ready, trial_dir, view_server

pytestmark = [pytest.mark.local, pytest.mark.slow]

EPS = 0.002  # the page prints offsets in full; datetimes keep microseconds


def _secs(span: dict) -> float:
    return (
        datetime.fromisoformat(span["finished_at"]) - datetime.fromisoformat(span["started_at"])
    ).total_seconds()


@pytest.fixture(scope="module")
def timeline_job(tmp_path_factory) -> Path:
    if not local_ready():
        pytest.skip(f"local backend: {backend_missing('local')}")
    root = tmp_path_factory.mktemp("timeline")
    tasks = root / "tasks"
    env_hc = '[environment.healthcheck]\ncommand = "sleep 0.3; true"\ninterval_sec = 0.1\n'
    write_task(
        tasks,
        "phases",
        toml_extra=env_hc,
        steps=[
            StepSpec("first", solve="sleep 0.2\n", test=constant_reward(1.0)),
            StepSpec(
                "second",
                solve="sleep 0.2\n",
                test=constant_reward(1.0),
                toml_extra='[steps.healthcheck]\ncommand = "sleep 0.25; true"\ninterval_sec = 0.1\n',
            ),
        ],
        files={"steps/second/pre_artifacts.sh": "#!/bin/bash\nsleep 0.2\necho p > /logs/artifacts/p.txt\n"},
    )
    write_task(
        tasks,
        "sick",
        steps=[
            StepSpec(
                "only",
                test=constant_reward(1.0),
                toml_extra='[steps.healthcheck]\ncommand = "sleep 0.1; false"\n'
                "interval_sec = 0.1\nretries = 2\n",
            ),
        ],
    )
    p = cairn(
        "run",
        "-p",
        str(tasks),
        "-a",
        "oracle",
        "-e",
        "local",
        "-n",
        "2",
        "--jobs-dir",
        str(root / "jobs"),
        "--job-name",
        "tl",
        cwd=root,
    )
    job = root / "jobs" / "tl"
    assert (job / "summary.json").is_file(), p.stdout + p.stderr
    return job


def _bars(browser, base: str, trial: Path) -> list[dict]:
    from selenium.webdriver.common.by import By

    # The browser is shared: leave the previous test's page (a live job page keeps polling its
    # server, which is gone) and drop what it logged, so only this page's errors count.
    browser.get("about:blank")
    console_errors(browser)
    browser.get(f"{base}jobs/tl/trials/{trial.name}/")
    out = [
        {
            "phase": g.get_attribute("data-phase"),
            "step": g.get_attribute("data-step"),
            "start": float(g.get_attribute("data-start")),
            "sec": float(g.get_attribute("data-sec")),
        }
        for g in browser.find_elements(By.CSS_SELECTOR, "svg.timeline g.seg")
    ]
    assert [e for e in console_errors(browser) if "favicon" not in e["message"]] == []
    return out


def test_every_phase_has_a_bar_in_order_with_its_recorded_duration(timeline_job, browser):
    trial = trial_dir(timeline_job, "phases")
    result = json.loads((trial / "result.json").read_text())
    rows = {r["name"]: r for r in result["steps"]}
    with view_server(timeline_job) as base:
        bars = _bars(browser, base, trial)

    trial_bars = [b for b in bars if not b["step"]]
    assert [b["phase"] for b in trial_bars] == ["environment", "healthcheck", "agent_setup"]
    assert [b["phase"] for b in bars if b["step"] == "first"] == ["setup", "agent", "artifacts", "verifier"]
    assert [b["phase"] for b in bars if b["step"] == "second"] == [
        "setup",
        "healthcheck",
        "agent",
        "pre_artifacts",
        "artifacts",
        "verifier",
    ]
    # one after the other on one time axis: trial phases, then step 1, then step 2
    ordered = (
        trial_bars + [b for b in bars if b["step"] == "first"] + [b for b in bars if b["step"] == "second"]
    )
    assert ordered[0]["start"] >= 0
    for a, b in zip(ordered, ordered[1:], strict=False):
        assert b["start"] >= a["start"] + a["sec"] - EPS, (a, b)

    # each bar is as long as the span the store wrote, and the spans agree with the figures
    spans = {("", s["phase"]): s for s in result["timings"]["spans"]}
    for name, row in rows.items():
        spans.update({(name, s["phase"]): s for s in row["timings"]["spans"]})
    for b in bars:
        assert b["sec"] == pytest.approx(_secs(spans[(b["step"], b["phase"])]), abs=1e-6)
    by = {(b["step"], b["phase"]): b["sec"] for b in bars}
    assert by[("", "healthcheck")] >= 0.3
    assert result["timings"]["healthcheck_sec"] == pytest.approx(by[("", "healthcheck")], abs=1e-6)
    assert by[("second", "healthcheck")] >= 0.25
    assert rows["second"]["timings"]["healthcheck_sec"] == pytest.approx(
        by[("second", "healthcheck")], abs=1e-6
    )
    assert rows["first"]["timings"]["healthcheck_sec"] is None
    assert by[("second", "pre_artifacts")] >= 0.2
    assert rows["second"]["timings"]["artifacts_sec"] == pytest.approx(
        by[("second", "pre_artifacts")] + by[("second", "artifacts")], abs=1e-6
    )
    for name in ("first", "second"):
        assert by[(name, "agent")] >= 0.2
        assert by[(name, "agent")] == pytest.approx(rows[name]["timings"]["agent_sec"], abs=0.01)
        # the verifier phase: /tests upload, test.sh (verifier_sec), reading the reward
        assert by[(name, "verifier")] >= rows[name]["timings"]["verifier_sec"]


def test_a_failed_step_healthcheck_keeps_its_bar(timeline_job, browser):
    trial = trial_dir(timeline_job, "sick")
    result = json.loads((trial / "result.json").read_text())
    [row] = result["steps"]
    assert row["error"]["kind"] == "healthcheck_failed"
    assert [s["phase"] for s in row["timings"]["spans"]] == ["setup", "healthcheck"]
    assert row["timings"]["healthcheck_sec"] >= 0.2  # two probes of 0.1 s and a pause
    with view_server(timeline_job) as base:
        bars = _bars(browser, base, trial)
    assert [b["phase"] for b in bars if b["step"] == "only"] == ["setup", "healthcheck"]
    assert [b["sec"] for b in bars if b["phase"] == "healthcheck"] == pytest.approx(
        [row["timings"]["healthcheck_sec"]], abs=1e-6
    )


def _strip_spans(trial: Path) -> dict:
    """Make a trial folder look like one from before ``timings.spans`` (durations only)."""
    result = json.loads((trial / "result.json").read_text())
    result["timings"].pop("spans", None)
    for row in result["steps"]:
        row["timings"].pop("spans", None)
    (trial / "result.json").write_text(json.dumps(result))
    steps = json.loads((trial / "steps.json").read_text())
    for row in steps["steps"]:
        row["timings"].pop("spans", None)
    (trial / "steps.json").write_text(json.dumps(steps))
    return result


def test_an_older_result_without_spans_still_draws_healthcheck_and_artifacts(timeline_job, browser, tmp_path):
    """A job folder written before spans existed: the bars come from the recorded durations,
    laid end to end, and still include the environment healthcheck (the trial's own
    ``healthcheck_sec``) and each step's healthcheck and artifacts phases."""
    import shutil

    from selenium.webdriver.common.by import By

    old = tmp_path / "jobs" / "old"
    shutil.copytree(timeline_job, old, ignore=shutil.ignore_patterns("lock"))
    trial = trial_dir(old, "phases")
    result = _strip_spans(trial)
    rows = {r["name"]: r for r in result["steps"]}
    with view_server(old) as base:
        browser.get("about:blank")
        console_errors(browser)
        browser.get(f"{base}jobs/old/trials/{trial.name}/")
        bars = [
            {
                "phase": g.get_attribute("data-phase"),
                "step": g.get_attribute("data-step"),
                "sec": float(g.get_attribute("data-sec")),
            }
            for g in browser.find_elements(By.CSS_SELECTOR, "svg.timeline g.seg")
        ]
        assert [e for e in console_errors(browser) if "favicon" not in e["message"]] == []
    assert [b["phase"] for b in bars if not b["step"]] == ["environment", "healthcheck", "agent_setup"]
    by = {(b["step"], b["phase"]): b["sec"] for b in bars}
    assert by[("", "healthcheck")] == pytest.approx(result["timings"]["healthcheck_sec"])
    assert by[("", "healthcheck")] >= 0.3
    second = rows["second"]["timings"]
    assert by[("second", "healthcheck")] == pytest.approx(second["healthcheck_sec"])
    assert by[("second", "artifacts")] == pytest.approx(second["artifacts_sec"])
    assert by[("first", "artifacts")] == pytest.approx(rows["first"]["timings"]["artifacts_sec"])
