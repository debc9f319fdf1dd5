"""``cairn export --format rollouts`` on a ``--rollout`` job (issue 30): the ``llm`` agent on the
local backend through the relay, against a scripted OpenAI-compatible server that returns
vLLM's token ids and logprobs; every step's record holds that step's calls' ids, joined to
that step's reward and the trial's, with one group id per task."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import pytest
from _relayfix import EXAMPLE, relay_cairn

from cairn.results.rollouts import ROLLOUT_SCHEMA, RolloutStep, read_model_calls, rollout_call
from fake_openai import FakeOpenAI, bash_call, submit_call
from testbed import local_available


def needs_run(f):
    """The markers of a test that runs the ``llm`` agent on the local backend."""
    for mark in (
        pytest.mark.local,
        pytest.mark.slow,
        pytest.mark.skipif(not local_available(), reason="no local sandbox support"),
        pytest.mark.skipif(
            importlib.util.find_spec("litellm") is None or importlib.util.find_spec("aiohttp") is None,
            reason="needs the llm and relay extras",
        ),
    ):
        f = mark(f)
    return f


def _cairn(*args: str) -> subprocess.CompletedProcess:
    return relay_cairn(*args)


@needs_run
@pytest.mark.parametrize("flag", ["--ak", "--rollout"])
def test_every_steps_record_holds_its_calls_token_ids_joined_to_its_reward(tmp_path, flag):
    # attempt 1: step 1 right (1.0), step 2 wrong (0.0); attempt 2: both right
    script = [
        bash_call("echo 1 > /app/a.txt", usage=(120, 30)),
        submit_call(usage=(160, 10)),
        bash_call("echo 3 > /app/b.txt", usage=(200, 25)),
        submit_call(usage=(260, 6)),
        bash_call("echo 1 > /app/a.txt", usage=(120, 30)),
        submit_call(usage=(160, 10)),
        bash_call("echo 2 > /app/b.txt", usage=(200, 25)),
        submit_call(usage=(260, 6)),
    ]
    rollout = ["--ak", "rollout=on"] if flag == "--ak" else ["--rollout"]
    with FakeOpenAI(script) as server:
        p = _cairn(
            "run",
            "-p",
            str(EXAMPLE),
            "-a",
            "llm",
            "-m",
            "openai/gpt-4o-mini",
            "--ak",
            f"api_base={server.url}",
            "--ak",
            "retry_base_delay_sec=0.01",
            *rollout,
            "-e",
            "local",
            "-o",
            str(tmp_path),
            "--job-name",
            "j",
            "-r",
            "0",
            "-k",
            "2",
            "-n",
            "1",
        )
        sent = list(server.token_ids)
        asked = [r.get("return_token_ids") for r in server.requests]
    assert asked == [True] * 8, p.stdout + p.stderr
    assert len(sent) == 8
    out = tmp_path / "rollouts.jsonl"
    e = _cairn("export", str(tmp_path / "j"), "--format", "rollouts", "-o", str(out))
    assert e.returncode == 0, e.stderr
    assert "exported 4 step record(s)" in e.stderr
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    for r in recs:
        RolloutStep.model_validate(r)  # the versioned schema holds
    recs.sort(key=lambda r: (r["attempt"], r["step_index"]))
    assert [(r["attempt"], r["step"], r["reward"], r["trial_reward"]) for r in recs] == [
        (1, "write", 1.0, 0.0),
        (1, "append", 0.0, 0.0),
        (2, "write", 1.0, 1.0),
        (2, "append", 1.0, 1.0),
    ]
    assert {r["schema"] for r in recs} == {ROLLOUT_SCHEMA}
    assert len({r["group_id"] for r in recs}) == 1 and recs[0]["group_id"].startswith("j:cairn/two-steps:")
    assert [r["is_last_step"] for r in recs] == [False, True, False, True]
    # the server's calls in order: trial 1's four (two a step), then trial 2's
    for i, r in enumerate(recs):
        assert r["complete"] is True and r["has_model_calls"] is True
        assert len(r["calls"]) == 2
        for j, call in enumerate(r["calls"]):
            prompt, completion, logprobs = sent[2 * i + j]
            assert call["prompt_token_ids"] == prompt
            assert call["completion_token_ids"] == completion
            assert call["logprobs"] == logprobs
            assert call["loss_mask"] == [0] * len(prompt) + [1] * len(completion)
            assert call["trainable"] is True and call["sampling_params"]["logprobs"] is True
        assert r["n_trainable_tokens"] == sum(len(sent[2 * i + j][1]) for j in range(2))
    # the step's second call saw a longer history than its first: a longer prompt
    assert len(recs[0]["calls"][1]["prompt_token_ids"]) > len(recs[0]["calls"][0]["prompt_token_ids"])
    _run_the_docs_grpo_example(out, tmp_path)


def _run_the_docs_grpo_example(rollouts: Path, tmp_path: Path) -> None:
    """docs/export.md's worked GRPO example, run on this export as written."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "export.md").read_text()
    code = doc.split("### Worked example: GRPO")[1].split("```python\n")[1].split("```")[0]
    ns: dict = {}
    cwd = os.getcwd()
    os.chdir(rollouts.parent)
    try:
        exec(compile(code, "docs/export.md", "exec"), ns)  # noqa: S102 - our own docs
    finally:
        os.chdir(cwd)
    batch = ns["batch"]
    # step 1 passed in both attempts: advantage 0; step 2: attempt 1 failed, attempt 2 passed
    assert sorted({(ex["step"], ex["attempt"], round(ex["advantage"], 3)) for ex in batch}) == [
        ("append", 1, -1.0),
        ("append", 2, 1.0),
        ("write", 1, 0.0),
        ("write", 2, 0.0),
    ]
    assert len(batch) == 8  # two trainable calls a step
    assert ns["grpo_loss"](batch, lambda ex: ex["old_logprobs"]) == pytest.approx(
        -sum(ex["advantage"] * sum(ex["loss_mask"]) for ex in batch)
        / sum(sum(ex["loss_mask"]) for ex in batch),
        abs=1e-6,
    )


def _line(**kw) -> dict:
    base = {
        "seq": 1,
        "endpoint": "/v1/chat/completions",
        "kind": "generate",
        "status": 200,
        "complete": True,
        "error": None,
        "model": "m",
        "rollout": {
            "prompt_token_ids": [1, 2],
            "completion_token_ids": [3, 4, 5],
            "logprobs": [-0.1, -0.2, -0.3],
            "finish_reason": "stop",
            "sampling_params": {"logprobs": True},
        },
    }
    base.update(kw)
    return base


def test_calls_with_bad_token_data_are_kept_out_of_training_not_crashed_on(tmp_path):
    ok = rollout_call(_line())
    assert ok is not None and ok.trainable and ok.loss_mask == [0, 0, 1, 1, 1]
    short = rollout_call(
        _line(rollout={"prompt_token_ids": [1], "completion_token_ids": [3, 4], "logprobs": [-0.1]})
    )
    assert short is not None and not short.trainable
    assert short.not_trainable_reason == "logprobs_misaligned" and short.loss_mask == [0, 0, 0]
    bools = rollout_call(
        _line(rollout={"prompt_token_ids": [True], "completion_token_ids": [3], "logprobs": [-0.1]})
    )
    assert bools is not None and bools.not_trainable_reason == "bad_token_ids"
    assert bools.prompt_token_ids is None and bools.loss_mask is None
    nan = rollout_call(
        _line(rollout={"prompt_token_ids": [1], "completion_token_ids": [3], "logprobs": [float("nan")]})
    )
    assert nan is not None and nan.not_trainable_reason == "logprobs_misaligned"
    refused = rollout_call(_line(status=400, error="budget_exceeded", complete=False, rollout=None))
    assert refused is not None and refused.not_trainable_reason == "failed_call"
    assert rollout_call(_line(rollout=None)).not_trainable_reason == "no_token_ids"  # type: ignore[union-attr]
    f = tmp_path / "model_calls.jsonl"
    f.write_text(
        "\n".join(
            [
                json.dumps(_line(seq=2)),
                "{not json",
                "[1, 2]",
                json.dumps({"seq": "x", "kind": "generate"}),
                json.dumps({"seq": 3, "kind": "count", "endpoint": "/c"}),
                json.dumps(_line(seq=1)),
            ]
        )
        + "\n"
    )
    calls, bad = read_model_calls(f)
    assert [c.seq for c in calls] == [1, 2] and bad == 3
    link = tmp_path / "link.jsonl"
    link.symlink_to(f)
    assert read_model_calls(link) == ([], 0)
