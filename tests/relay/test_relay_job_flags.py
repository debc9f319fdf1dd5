"""The relay's job-level flags on ``cairn run`` (issue 30): ``--no-relay`` (direct calls, and
result.json says the spend is the agent's own report), ``--max-trial-tokens`` (the relay's
per-trial limit from the job), ``--record-model-bodies``; and their usage errors."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest
from _relayfix import EXAMPLE, KEY, relay_cairn, relay_job_args

from cairn.results.model import TrialResult
from fake_openai import FakeOpenAI, bash_call, submit_call
from testbed import local_available

needs_run = pytest.mark.skipif(
    not local_available()
    or importlib.util.find_spec("litellm") is None
    or importlib.util.find_spec("aiohttp") is None,
    reason="needs local sandbox support and the llm and relay extras",
)


def _cairn(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return relay_cairn(*args, cwd=cwd)


def _run(tmp_path: Path, server: FakeOpenAI, *flags: str) -> tuple[Path, dict]:
    p = relay_cairn(*relay_job_args(server.url, tmp_path, flags=flags))
    (trial,) = (tmp_path / "j" / "trials").iterdir()
    assert (trial / "result.json").is_file(), p.stdout + p.stderr
    return trial, json.loads((trial / "result.json").read_text())


SCRIPT = [
    bash_call("echo 1 > /app/a.txt", usage=(120, 30)),
    submit_call(usage=(160, 10)),
    bash_call("echo 2 > /app/b.txt", usage=(200, 25)),
    submit_call(usage=(260, 6)),
]


@pytest.mark.local
@pytest.mark.slow
@needs_run
@pytest.mark.parametrize("no_relay", [False, True])
def test_result_says_whose_report_the_spend_is(tmp_path, no_relay):
    with FakeOpenAI(SCRIPT) as server:
        trial, data = _run(tmp_path, server, *(["--no-relay"] if no_relay else ["--record-model-bodies"]))
        auth = list(server.auth)
    assert data["outcome"] == "completed" and data["reward"] == 1.0, data.get("error")
    assert data["tokens"]["prompt"] == 740 and data["tokens"]["completion"] == 71
    calls = trial / "steps" / "01-write" / "agent" / "model_calls.jsonl"
    if no_relay:
        assert data["spend_source"] == "agent"
        assert not calls.exists()  # no relay: nothing on the relay's record
    else:
        assert data["spend_source"] == "relay"
        assert auth == [f"Bearer {KEY}"] * 4  # the relay's key, upstream only
        lines = [json.loads(x) for x in calls.read_text().splitlines()]
        assert all(
            isinstance(x["request_body"], dict) and x["request_body"]["messages"] for x in lines
        )  # --record-model-bodies reached the relay
    TrialResult.model_validate(data)


@pytest.mark.local
@pytest.mark.slow
@needs_run
def test_max_trial_tokens_flag_stops_the_trial_at_the_crossing_call(tmp_path):
    with FakeOpenAI(default=bash_call("echo x >> /app/a.txt", usage=(120, 30))) as server:
        trial, data = _run(tmp_path, server, "--max-trial-tokens", "300")
        assert len(server.requests) == 2
    err = data["steps"][0]["error"]
    assert err["kind"] == "budget_exceeded" and err["detail"]["limit"] == "trial_tokens"
    assert err["detail"]["crossing_call"] == 2
    assert data["spend_source"] == "relay"


def test_relay_flags_without_the_relay_are_a_usage_error(tmp_path):
    p = _cairn(
        "run",
        "-p",
        str(EXAMPLE),
        "-a",
        "oracle",
        "--no-relay",
        "--rollout",
        "--max-trial-tokens",
        "5",
        "-o",
        str(tmp_path / "jobs"),
        cwd=tmp_path,
    )
    assert p.returncode == 2, p.stderr
    assert "--rollout, --max-trial-tokens need the model relay; drop --no-relay" in p.stderr
    assert not (tmp_path / "jobs").exists()  # nothing began
    p = _cairn("run", "-p", str(EXAMPLE), "--max-trial-tokens", "0", "-o", str(tmp_path / "j"), cwd=tmp_path)
    assert p.returncode == 2 and "max_trial_tokens" in p.stderr


def test_a_result_written_before_spend_source_existed_still_reads():
    schema = Path(__file__).resolve().parents[2] / "src" / "cairn" / "results" / "schemas"
    data = {
        "trial_id": "t",
        "trial_name": "x__1",
        "task": {"name": "a", "content_hash": "h"},
        "agent": {"name": "llm"},
        "backend": "local",
        "outcome": "completed",
        "steps_total": 1,
        "started_at": "2026-01-01T00:00:00Z",
        "finished_at": "2026-01-01T00:00:01Z",
        "steps": [],
    }
    assert TrialResult.model_validate(data).spend_source is None
    props = json.loads((schema / "result.schema.json").read_text())["properties"]
    assert "spend_source" in props and "spend_source" not in json.loads(
        (schema / "result.schema.json").read_text()
    ).get("required", [])
