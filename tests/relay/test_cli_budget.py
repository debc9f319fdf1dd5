"""Budgets mid-trial with a real agent CLI through the job's model relay (issue 30): Claude Code
on examples/two-steps, local backend, against the scripted Anthropic server, whose first
main-loop answer is billed enough to cross the limit.

- ``--max-cost-usd``: the crossing call is answered, every call after it is refused by the
  relay (the server sees none of them), Claude Code stops on the refusal (400,
  ``x-should-retry: false``), and the trial ends with ``budget_exceeded`` naming the job limit
  and the crossing call; the spend up to the stop is kept.
- ``--max-trial-tokens`` in a job of two trials: the trial that crosses it stops the same way,
  the other trial is scored (both steps pass).

Claude Code is the fastest of the CLIs here (about 10 s a trial through the relay).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from cairn.results.model import TrialResult
from cairn.results.store import read_job_json, read_result
from cli_scripts import (
    JOB_NAME,
    USAGE,
    BilledModels,
    consumes,
    consumes_any,
    public_two_steps,
    run_cli_job,
    two_step_script,
)
from fake_models import Turn
from testbed import local_available

pytestmark = [
    pytest.mark.local,
    pytest.mark.slow,
    pytest.mark.skipif(not local_available(), reason="no local sandbox support"),
    pytest.mark.skipif(importlib.util.find_spec("aiohttp") is None, reason="needs the relay extra"),
]

AGENT = "claude-code"
MODEL = "anthropic/claude-sonnet-4-5"
"""Priced in LiteLLM's map: 3e-6 USD per input token, 15e-6 per output token."""
SECRET = "sk-cairn-budget-host-only-5b1e0c7d92"
SIDE = Turn(text="Scripted title", usage=(50, 7, 5))
BIG = (10000, 1000, 0)
"""The crossing answer's usage: 10000 * 3e-6 + 1000 * 15e-6 = 0.045 USD, 11000 tokens."""


def _big_turn() -> Turn:
    return Turn(
        text="Running the write command.",
        calls=(("Bash", {"command": "printf '1\\n' > /app/a.txt", "description": "write"}),),
        usage=BIG,
    )


def _run(tmp_path: Path, server: BilledModels, *extra: str) -> tuple[Path, str]:
    task = public_two_steps(tmp_path / "two-steps")
    jobs = tmp_path / "jobs"
    proc = run_cli_job(
        task,
        AGENT,
        model=MODEL,
        base_url=server.base_url,
        jobs=jobs,
        env={"ANTHROPIC_API_KEY": SECRET, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        backend="local",
        relay=True,
        extra=["--max-retries", "0", "-n", "1", *extra],
    )
    return jobs / JOB_NAME, proc.stdout[-3000:] + proc.stderr[-3000:]


def _calls(trial: Path) -> list[dict[str, Any]]:
    """The relay's records of a trial, every step, by ``seq``."""
    out = [
        json.loads(line)
        for f in (trial / "steps").glob("*/agent/model_calls.jsonl")
        for line in f.read_text().splitlines()
    ]
    return sorted(out, key=lambda c: c["seq"])


def _check_stopped(trial: Path, result: TrialResult, limit: str, why: str) -> dict[str, Any]:
    """The trial stopped at its crossing call with ``budget_exceeded``; returns the error's
    detail. Checks the relay's record: the crossing call was answered, every generation after
    it was refused, and the refused calls cost nothing."""
    assert result.steps, why
    first = result.steps[0]
    assert first.error is not None, (first, why)
    assert first.error.kind == "budget_exceeded", (first.error, why)
    assert first.error.category == "candidate"
    # the trial stopped after that step, on its error; the later step never ran
    assert result.outcome == "stopped" and result.stopped_after == "write"
    assert result.stop_reason is not None and result.stop_reason.kind == "step_error"
    assert result.stop_reason.error_kind == "budget_exceeded"
    assert first.reward == 0.0 and result.steps_run == 1
    assert [s.reward for s in result.steps[1:]] == [None]
    detail = first.error.detail
    assert detail["limit"] == limit
    calls = _calls(trial)
    crossing = detail["crossing_call"]
    by_seq = {c["seq"]: c for c in calls}
    assert by_seq[crossing]["status"] == 200 and by_seq[crossing]["error"] is None
    assert by_seq[crossing]["usage"]["input_tokens"] == BIG[0]
    after = [c for c in calls if c["seq"] > crossing and c["kind"] == "generate"]
    assert after, "Claude Code made no call after the crossing one: nothing was refused"
    assert all(c["error"] == "budget_exceeded" and c["status"] == 400 for c in after), after
    # never upstream: no usage, no cost
    assert all(set(c["usage"].values()) == {None} and c["cost_usd"] is None for c in after), after
    # Claude Code stopped on the refusal: it sends a refused request once more at most (the
    # record links the resend, measured: 2 of its 6 refused calls), never a resend of a
    # resend, and it reported the relay's error as its end
    resends = [c for c in after if c["retry_of"] is not None]
    assert all(by_seq[c["retry_of"]]["retry_of"] is None for c in resends), after
    assert len(after) <= 2 * (len(after) - len(resends)) and len(after) <= 10, after
    out = (trial / "steps" / "01-write" / "agent" / "stdout.txt").read_text()
    assert '"api_error_status":400' in out and "cairn relay: budget exceeded" in out, out[-2000:]
    return detail


def test_max_cost_usd_stops_the_cli_trial_at_the_crossing_call(tmp_path):
    script = [_big_turn(), *two_step_script(AGENT)[1:]]
    with BilledModels(script, consumes=consumes, side_turn=SIDE, done_turn=Turn(text="Done.")) as srv:
        job, why = _run(tmp_path, srv, "--max-cost-usd", "0.04")
        main = srv.main_requests()
        left = srv.script_left
    (trial_json,) = (job / "trials").glob("*/result.json")
    result = read_result(trial_json)
    detail = _check_stopped(trial_json.parent, result, "job_cost_usd", why)
    assert detail["limit_value"] == 0.04 and detail["spent"] >= 0.045
    # the server answered the crossing call and nothing of the main loop after it
    assert len(main) == 1 and left == len(script) - 1, (len(main), left)
    # the spend up to the stop is kept, and it is the server's bill
    assert result.spend_source == "relay"
    spent = result.tokens.model_dump(include={"prompt", "completion", "cached"})
    assert spent == srv.billed()  # aider: its second step, refused only, read no cache
    assert result.cost_usd == pytest.approx(0.045)
    assert read_job_json(job).stopped_by == "max_cost"
    assert SECRET.encode() not in b"".join(f.read_bytes() for f in job.rglob("*") if f.is_file())


def test_a_per_trial_token_limit_stops_one_cli_trial_and_the_job_scores_the_other(tmp_path):
    # the first trial to run (-n 1) gets the big answer; the other one the plain two steps
    # (6296 tokens plus side calls, under the limit)
    script = [_big_turn(), *two_step_script(AGENT)]
    with BilledModels(script, consumes=consumes, side_turn=SIDE, done_turn=Turn(text="Done.")) as srv:
        job, why = _run(tmp_path, srv, "-k", "2", "--max-trial-tokens", "8000")
        left = srv.script_left
    results = {p.parent: read_result(p) for p in (job / "trials").glob("*/result.json")}
    assert len(results) == 2, why
    stopped = [(t, r) for t, r in results.items() if r.outcome == "stopped"]
    scored = [(t, r) for t, r in results.items() if r.outcome != "stopped"]
    assert len(stopped) == 1 and len(scored) == 1, {t.name: r.outcome for t, r in results.items()}
    (trial, result), (_, other) = stopped[0], scored[0]
    detail = _check_stopped(trial, result, "trial_tokens", why)
    assert detail["limit_value"] == 8000 and detail["spent"] >= sum(BIG[:2])
    assert result.tokens.model_dump(include={"prompt", "completion", "cached"}) == dict(
        zip(("prompt", "completion", "cached"), BIG, strict=True)
    )
    # the other trial is scored in full, on the rest of the script
    assert other.outcome == "completed" and [s.reward for s in other.steps] == [1.0, 1.0], other.steps
    assert other.tokens.prompt == sum(u[0] for step in USAGE.values() for u in step)
    # both trials' tokens are the server's bill; the job was not stopped
    both = {k: result.tokens.model_dump()[k] + other.tokens.model_dump()[k] for k in srv.billed()}
    assert both == srv.billed()
    assert left == 0
    assert read_job_json(job).stopped_by is None


OTHERS = {
    "codex": ("openai/scripted-model", "OPENAI_API_KEY"),
    "opencode": ("openai/scripted-model", "OPENAI_API_KEY"),
    "gemini-cli": ("google/gemini-2.5-flash", "GEMINI_API_KEY"),
    "qwen-code": ("openai/scripted-model", "OPENAI_API_KEY"),
    "aider": ("openai/scripted-model", "OPENAI_API_KEY"),
    "mini-swe-agent": ("openai/scripted-model", "OPENAI_API_KEY"),
}
"""The other installed CLIs, each with the model and key its wire needs."""


@pytest.mark.parametrize("agent", list(OTHERS))
def test_every_cli_stops_on_the_relays_refusal(tmp_path, agent):
    """A per-trial token limit crossed by the first main-loop answer: the CLI's next call is
    refused in its wire's shape (mini-swe-agent: 401, the others 400), the CLI stops instead
    of retrying, and the trial ends ``budget_exceeded`` at that step; the server never sees a
    main-loop call after the crossing one. aider makes no second call in its first step (its
    one answer is the edit), so its refusal comes in the second step."""
    model, key = OTHERS[agent]
    script = two_step_script(agent)
    # a cache count the server reports (Gemini's wire omits a zero count: unknown, not 0)
    script[0] = dataclasses.replace(script[0], usage=(*BIG[:2], 2000))
    picks = consumes_any if agent in ("aider", "mini-swe-agent") else consumes
    with BilledModels(script, consumes=picks, side_turn=SIDE, done_turn=Turn(text="Done.")) as srv:
        proc = run_cli_job(
            public_two_steps(tmp_path / "two-steps"),
            agent,
            model=model,
            base_url=srv.base_url,
            jobs=tmp_path / "jobs",
            env={key: SECRET, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
            backend="local",
            relay=True,
            extra=["--max-retries", "0", "--max-trial-tokens", "8000"],
        )
        main = srv.main_requests()
    why = proc.stdout[-3000:] + proc.stderr[-3000:]
    (trial_json,) = (tmp_path / "jobs" / JOB_NAME / "trials").glob("*/result.json")
    result = read_result(trial_json)
    assert len(main) == 1, (len(main), why)  # the crossing call only
    if agent == "aider":  # refused in its last step: the trial ran every step
        stop = "append"
        assert result.outcome == "completed" and result.steps[0].reward == 1.0, (result.outcome, why)
        assert result.steps[1].reward == 0.0
    else:
        stop = "write"
        assert result.outcome == "stopped" and result.stopped_after == stop, (result.outcome, why)
        assert result.stop_reason is not None and result.stop_reason.error_kind == "budget_exceeded"
    (err,) = [s.error for s in result.steps if s.error is not None]
    assert err.kind == "budget_exceeded" and err.step == stop and err.detail["limit"] == "trial_tokens"
    calls = _calls(trial_json.parent)
    crossing = err.detail["crossing_call"]
    (big,) = [c for c in calls if c["seq"] == crossing]
    assert big["status"] == 200 and big["usage"]["input_tokens"] == BIG[0], big
    after = [c for c in calls if c["seq"] > crossing and c["kind"] == "generate"]
    status = 401 if agent == "mini-swe-agent" else 400
    assert after and all(c["error"] == "budget_exceeded" and c["status"] == status for c in after), after
    assert all(c["retry_of"] is None for c in after), [(c["seq"], c["retry_of"]) for c in after]
    spent = result.tokens.model_dump(include={"prompt", "completion", "cached"})
    assert spent == srv.billed()  # aider: its second step, refused only, read no cache
