"""The ``llm`` agent through the job's model relay, end to end with ``cairn run`` on the local
backend (issue 25's step 5 seam): exact spend from the relay, the key only upstream, per-step
``model_calls.jsonl``, a per-trial token limit stopping at the crossing call."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from _relayfix import KEY, relay_cairn, relay_job_args

from fake_openai import FakeOpenAI, bash_call, submit_call
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


def _run_job(
    tmp_path: Path, server: FakeOpenAI, *ak: str, flags: tuple[str, ...] = (), n_trials: int = 1
) -> list[Path]:
    p = relay_cairn(*relay_job_args(server.url, tmp_path, *ak, flags=flags))
    trials = sorted(
        (tmp_path / "j" / "trials").iterdir(),
        key=lambda t: json.loads((t / "result.json").read_text())["started_at"],
    )
    assert len(trials) == n_trials, p.stdout + p.stderr
    return trials


def _run(tmp_path: Path, server: FakeOpenAI, *ak: str) -> Path:
    return _run_job(tmp_path, server, *ak)[0]


def _calls(trial: Path, step: str) -> list[dict]:
    path = trial / "steps" / step / "agent" / "model_calls.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_llm_trial_spend_is_the_relays_and_the_key_stays_upstream(tmp_path):
    script = [
        bash_call("echo 1 > /app/a.txt", usage=(120, 30, 20)),
        submit_call(usage=(160, 10)),
        bash_call("echo 2 > /app/b.txt", usage=(200, 25, 50)),
        submit_call(usage=(260, 6)),
    ]
    with FakeOpenAI(script) as server:
        trial = _run(tmp_path, server)
    data = json.loads((trial / "result.json").read_text())
    assert data["outcome"] == "completed", data.get("error")
    assert [s["reward"] for s in data["steps"]] == [1.0, 1.0]
    assert data["tokens"] == {"prompt": 740, "completion": 71, "cached": 70}  # the bill
    assert data["steps"][0]["tokens"] == {"prompt": 280, "completion": 40, "cached": 20}
    # the relay sent the host's key upstream; the agent's client held only the trial token
    assert server.auth == [f"Bearer {KEY}"] * 4
    one, two = _calls(trial, "01-write"), _calls(trial, "02-append")
    assert [c["usage"]["input_tokens"] for c in one] == [120, 160]
    assert [c["usage"]["input_tokens"] for c in two] == [200, 260]
    assert all(c["status"] == 200 and c["model"] == "gpt-4o-mini" for c in one + two)
    price_in, price_out = 1.5e-07, 6e-07  # LiteLLM's map, gpt-4o-mini
    assert data["steps"][0]["cost_usd"] == pytest.approx(
        (280 - 20) * price_in + 20 * 7.5e-08 + 40 * price_out
    )
    for f in trial.rglob("*"):
        if f.is_file():
            assert KEY.encode() not in f.read_bytes(), f


def test_a_trial_token_limit_stops_at_the_crossing_call(tmp_path):
    # 150 tokens a call: call 2 reaches 300 (the limit) and is answered; call 3 is refused
    with FakeOpenAI(default=bash_call("echo x >> /app/a.txt", usage=(120, 30))) as server:
        trial = _run(tmp_path, server, "max_trial_tokens=300")
        assert len(server.requests) == 2
    data = json.loads((trial / "result.json").read_text())
    calls = _calls(trial, "01-write")
    assert [c["status"] for c in calls] == [200, 200, 400]
    assert calls[2]["error"] == "budget_exceeded"
    assert [c["usage"]["input_tokens"] for c in calls[:2]] == [120, 120]
    assert calls[2]["usage"]["input_tokens"] is None  # refused: nothing billed
    step = data["steps"][0]
    assert step["error"]["kind"] == "budget_exceeded", step
    assert step["error"]["category"] == "candidate"
    assert step["error"]["detail"]["crossing_call"] == 2
    assert step["reward"] == 0.0 and data["steps"][1]["source"] == "not-run"


def test_max_cost_usd_stops_the_trial_at_the_call_that_crosses_it(tmp_path):
    # gpt-4o-mini in LiteLLM's map: 120 in + 30 out = 3.6e-05 USD a call; call 2 crosses 7e-05
    with FakeOpenAI(default=bash_call("echo x >> /app/a.txt", usage=(120, 30))) as server:
        trial = _run_job(tmp_path, server, flags=("--max-cost-usd", "0.00007"))[0]
        assert len(server.requests) == 2
    calls = _calls(trial, "01-write")
    assert [c["status"] for c in calls] == [200, 200, 400]
    assert calls[1]["cost_usd"] == pytest.approx(3.6e-05)
    err = json.loads((trial / "result.json").read_text())["steps"][0]["error"]
    assert err["kind"] == "budget_exceeded" and err["detail"]["limit"] == "job_cost_usd"
    assert err["detail"]["crossing_call"] == 2


def test_a_per_trial_limit_leaves_the_other_trials_scored(tmp_path):
    # trial 1 (run first, -n 1) takes the script: 4 small calls, well under the limit;
    # trial 2 gets the default: 150-token calls, stopped at its second
    script = [
        bash_call("echo 1 > /app/a.txt", usage=(20, 5)),
        submit_call(usage=(20, 5)),
        bash_call("echo 2 > /app/b.txt", usage=(20, 5)),
        submit_call(usage=(20, 5)),
    ]
    with FakeOpenAI(script, default=bash_call("echo x >> /app/a.txt", usage=(120, 30))) as server:
        first, second = _run_job(
            tmp_path, server, "max_trial_tokens=300", flags=("-k", "2", "-n", "1"), n_trials=2
        )
    one = json.loads((first / "result.json").read_text())
    two = json.loads((second / "result.json").read_text())
    assert one["outcome"] == "completed" and one["reward"] == 1.0
    # the server never sent a cached-tokens field: unknown, not 0
    assert one["tokens"] == {"prompt": 80, "completion": 20, "cached": None}
    assert two["steps"][0]["error"]["kind"] == "budget_exceeded"
    assert [c["status"] for c in _calls(second, "01-write")] == [200, 200, 400]


def test_a_budget_stopped_step_keeps_its_spend(tmp_path):
    with FakeOpenAI(default=bash_call("echo x >> /app/a.txt", usage=(120, 30))) as server:
        trial = _run(tmp_path, server, "max_trial_tokens=300")
    data = json.loads((trial / "result.json").read_text())
    # the two answered calls' spend stays on the failed step (the server sent no cached field:
    # unknown, not 0, as for a completed trial above)
    assert data["tokens"] == {"prompt": 240, "completion": 60, "cached": None}
    assert data["steps"][0]["error"]["kind"] == "budget_exceeded"
    assert data["steps"][0]["tokens"] == data["tokens"]
