"""``cairn report`` sums the relay's record of model calls per step, per trial and per job (text,
markdown and JSON), over job folders made by ``cairn run`` (tests/helpers/calls_job.py); a
``--no-relay`` trial shows the agent's own spend with its ``spend_source`` and no call columns."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from cairncli import run_cairn
from calls_job import calls_jobs, trials_of
from testbed import local_available

pytestmark = [
    pytest.mark.local,
    pytest.mark.slow,
    pytest.mark.skipif(not local_available(), reason="no local sandbox support"),
    pytest.mark.skipif(
        importlib.util.find_spec("litellm") is None or importlib.util.find_spec("aiohttp") is None,
        reason="needs the llm and relay extras",
    ),
]

SRC = Path(__file__).resolve().parents[2] / "src"
PRICE_IN, PRICE_CACHED, PRICE_OUT = 1.5e-07, 7.5e-08, 6e-07  # LiteLLM's map, gpt-4o-mini


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    return calls_jobs(tmp_path_factory.mktemp("calls-jobs"))


def _report(job: Path, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(SRC), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    p = run_cairn("report", str(job), *args, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


def _cost(prompt: int, completion: int, cached: int | None) -> float:
    c = cached or 0
    return (prompt - c) * PRICE_IN + c * PRICE_CACHED + completion * PRICE_OUT


def test_json_sums_equal_the_servers_bill_per_step_trial_and_job(jobs):
    report = json.loads(_report(jobs.relay, "--format", "json"))
    assert report["n_trials"] == 2  # summary.json's content is all still there
    mc = report["model_calls"]
    first, second = trials_of(jobs.relay)
    by_trial = {t["trial"]: t for t in mc["trials"]}
    one, two = by_trial[first.name], by_trial[second.name]
    bill = jobs.billed["relay"]  # the 200 answers, in request order: trial 1's four, then trial 2's
    assert jobs.requests["relay"] == 9  # one 500, then eight answers
    assert one["spend_source"] == "relay" and one["record"] is True
    s1 = one["sums"]
    assert (s1["calls"], s1["billed"], s1["errors"], s1["retries"]) == (5, 4, 1, 1)
    assert s1["input_tokens"] == sum(b[0] for b in bill[:4]) == 740
    assert s1["output_tokens"] == sum(b[1] for b in bill[:4]) == 71
    assert s1["cache_read_tokens"] == 70
    assert s1["cache_write_tokens"] is None and s1["reasoning_tokens"] is None  # never sent: unknown
    assert s1["cost_usd"] == pytest.approx(sum(_cost(*b) for b in bill[:4]))
    w, a = one["steps"]
    assert (w["name"], w["sums"]["calls"], w["sums"]["retries"], w["sums"]["input_tokens"]) == (
        "write",
        3,
        1,
        280,
    )
    assert (a["name"], a["sums"]["calls"], a["sums"]["input_tokens"]) == ("append", 2, 460)
    s2 = two["sums"]
    assert (s2["calls"], s2["errors"], s2["input_tokens"], s2["output_tokens"]) == (4, 0, 460, 50)
    assert s2["cache_read_tokens"] is None  # this trial's answers had no cached field
    # each trial's and step's sums equal what the relay put in result.json
    for trial in (first, second):
        res = json.loads((trial / "result.json").read_text())
        t = by_trial[trial.name]
        assert t["sums"]["input_tokens"] == res["tokens"]["prompt"]
        assert t["sums"]["output_tokens"] == res["tokens"]["completion"]
        assert t["sums"]["cache_read_tokens"] == res["tokens"]["cached"]
        assert t["sums"]["cost_usd"] == pytest.approx(res["cost_usd"])
        for row, st in zip(res["steps"], t["steps"], strict=True):
            assert st["sums"]["input_tokens"] == row["tokens"]["prompt"]
            assert st["sums"]["cost_usd"] == pytest.approx(row["cost_usd"])
    total = mc["total"]
    assert mc["recorded_trials"] == 2 and mc["agent_reported_trials"] == 0
    assert (total["calls"], total["errors"], total["retries"]) == (9, 1, 1)
    assert total["input_tokens"] == sum(b[0] for b in bill) == 1200
    assert total["cache_read_tokens"] == 70  # known for trial 1 only: the sum of what is known
    assert total["cost_usd"] == pytest.approx(sum(_cost(*b) for b in bill))
    assert total["cost_usd"] == pytest.approx(report["cost_usd"])


def test_text_and_markdown_show_the_sums(jobs):
    first, second = trials_of(jobs.relay)
    text = _report(jobs.relay)
    assert "model calls          9 in 2 trial(s) (relay record): errors 1, retries 1; input 1200" in text
    rows = {
        line.split()[0]: line.split()
        for line in text.splitlines()
        if line.startswith(("cairn-", "  1.", "  2."))
    }
    assert rows[first.name][1:6] == ["5", "1", "1", "740", "71"]
    assert rows[first.name][-1] == "relay"
    assert rows[second.name][1:8] == ["4", "0", "0", "460", "50", "?", "?"]  # cached unknown: "?"
    md = _report(jobs.relay, "--format", "markdown")
    assert "## model calls" in md
    assert f"| {first.name} | 5 | 1 | 1 | 740 | 71 | 70 | ? | ? |" in md


def test_an_unpriced_model_has_unknown_cost_not_zero(jobs):
    mc = json.loads(_report(jobs.hostile, "--format", "json"))["model_calls"]
    (t,) = mc["trials"]
    assert t["sums"]["input_tokens"] == 260 and t["sums"]["cost_usd"] is None
    assert mc["total"]["cost_usd"] is None
    assert "cost ?" in _report(jobs.hostile)


def test_a_no_relay_trial_shows_its_agents_spend_and_no_call_columns(jobs):
    (trial,) = trials_of(jobs.direct)
    assert not list(trial.rglob("model_calls.jsonl"))
    res = json.loads((trial / "result.json").read_text())
    assert res["spend_source"] == "agent"
    mc = json.loads(_report(jobs.direct, "--format", "json"))["model_calls"]
    (t,) = mc["trials"]
    assert t["record"] is False and t["sums"] is None
    assert all(st["record"] is False and st["sums"] is None for st in t["steps"])
    assert t["agent_tokens"] == res["tokens"] == {"prompt": 390, "completion": 30, "cached": 120}
    assert t["agent_cost_usd"] == pytest.approx(res["cost_usd"])
    assert mc["total"] is None and mc["recorded_trials"] == 0 and mc["agent_reported_trials"] == 1
    text = _report(jobs.direct)
    assert "model calls " not in text.split("\n\n")[0]  # no relay total: none was recorded
    assert "agent-reported spend  1 trial(s) without a relay record (spend_source agent)" in text
    row = next(line for line in text.splitlines() if line.startswith(trial.name)).split()
    assert row[1:4] == ["-", "-", "-"]  # no calls recorded: not zero
    assert row[4:7] == ["390", "30", "120"]
    assert "agent (its own report; no relay record)" in text
