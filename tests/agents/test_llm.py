"""The built-in ``llm`` agent against a scripted OpenAI-compatible server and a real sandbox.

Real HTTP through the real client (LiteLLM → openai SDK → httpx) to tests/helpers/fake_openai.py
on 127.0.0.1; real commands in a real sandbox (docker by default).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import time

import pytest

if importlib.util.find_spec("litellm") is None:  # not imported here: cairn sets its env first
    pytest.skip("LiteLLM is not installed (pip install 'cairn-eval[llm]')", allow_module_level=True)

from agent_helpers import needs_sandbox, step_context, task_sandbox  # noqa: E402
from cairn.agents.llm import (  # noqa: E402
    LlmAgent,
    LlmOptions,
    _import_litellm,
    format_exec_result,
)
from cairn.errors import ErrorKind, ModelError, UsageError  # noqa: E402
from cairn.results.model import AgentExit, Tokens  # noqa: E402
from cairn.sandbox.base import ExecResult  # noqa: E402
from cairn.task.load import load_task  # noqa: E402
from fake_openai import (  # noqa: E402
    FakeOpenAI,
    bash_call,
    completion,
    error,
    submit_call,
)
from taskgen import StepSpec, reward_if, write_task  # noqa: E402

FAST = {"retry_base_delay_sec": "0.01"}
WRITE = "Write the word hello into out.txt in the working directory."
APPEND = "Append a line with the word world to out.txt."


@pytest.fixture(autouse=True)
def _api_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-test-key")


@pytest.fixture
def two_steps(tmp_path):
    """The two-step write/append task."""
    return load_task(
        write_task(
            tmp_path / "tasks",
            "write-append",
            steps=[
                StepSpec("write", instruction=WRITE, test=reward_if('[ "$(cat /app/out.txt)" = hello ]')),
                StepSpec(
                    "append",
                    instruction=APPEND,
                    test=reward_if('[ "$(cat /app/out.txt)" = "$(printf "hello\\nworld")" ]'),
                ),
            ],
        )
    )


def _trajectory(ctx) -> dict:
    return json.loads((ctx.logs_dir / "trajectory.json").read_text())


def _tool_calls(traj: dict) -> list[tuple[str, dict]]:
    return [
        (c["function_name"], c["arguments"])
        for s in traj["steps"]
        for c in s.get("tool_calls", [])
        if not s.get("extra", {}).get("cairn_history")
    ]


def _two_step_script() -> list:
    return [
        bash_call("echo hello > out.txt", usage=(120, 30, 20)),
        submit_call(usage=(160, 10)),
        bash_call("echo world >> out.txt", usage=(200, 25, 50)),
        bash_call("cat out.txt", usage=(230, 8)),
        submit_call(usage=(260, 6)),
    ]


async def _two_steps(task, root, server, *, resume: bool, model: str = "openai/gpt-4o-mini"):
    agent = LlmAgent(model, api_base=server.url, **FAST)
    async with task_sandbox(task) as sandbox:
        ctx1 = step_context(task, 1, root, resume_session=resume)
        await agent.run(task.steps[0].instruction, sandbox, ctx1)
        ctx2 = step_context(task, 2, root, resume_session=resume)
        await agent.run(task.steps[1].instruction, sandbox, ctx2)
        content = (await sandbox.exec("cat out.txt")).stdout
    return ctx1, ctx2, content


# ---- acceptance: two steps, fresh vs resumed sessions, token sums ------------------------
@needs_sandbox
@pytest.mark.docker
def test_two_steps_fresh_sessions(two_steps, tmp_path):
    with FakeOpenAI(_two_step_script()) as server:
        ctx1, ctx2, content = asyncio.run(_two_steps(two_steps, tmp_path, server, resume=False))
    assert content == "hello\nworld\n"
    assert ctx1.exit is None and ctx2.exit is None  # ended by submit
    # each step's trajectory lists the tool calls it made
    t1, t2 = _trajectory(ctx1), _trajectory(ctx2)
    assert _tool_calls(t1) == [("bash", {"command": "echo hello > out.txt"}), ("submit", {})]
    assert _tool_calls(t2) == [
        ("bash", {"command": "echo world >> out.txt"}),
        ("bash", {"command": "cat out.txt"}),
        ("submit", {}),
    ]
    assert [s["source"] for s in t2["steps"]] == ["system", "user", "agent", "agent", "agent"]
    assert t2["steps"][3]["observation"]["results"][0]["content"] == "exit_code: 0\nstdout:\nhello\nworld"
    assert t1["session_id"] != t2["session_id"]
    # fresh session: step 2's conversation does not contain step 1's messages
    step2_first_request = json.dumps(server.messages(2))
    assert APPEND in step2_first_request
    assert WRITE not in step2_first_request and "echo hello" not in step2_first_request
    # tokens equal the scripted usage sums, per step; cost from the local cost map
    assert ctx1.tokens == Tokens(prompt=280, completion=40, cached=20)
    assert ctx2.tokens == Tokens(prompt=690, completion=39, cached=50)
    fm1, fm2 = t1["final_metrics"], t2["final_metrics"]
    assert (fm1["total_prompt_tokens"], fm1["total_completion_tokens"], fm1["total_cached_tokens"]) == (
        280,
        40,
        20,
    )
    assert (fm2["total_prompt_tokens"], fm2["total_completion_tokens"], fm2["total_cached_tokens"]) == (
        690,
        39,
        50,
    )
    assert ctx1.cost_usd is not None and ctx1.cost_usd > 0
    assert fm1["total_cost_usd"] == pytest.approx(ctx1.cost_usd)
    assert fm2["total_cost_usd"] == pytest.approx(ctx2.cost_usd)


@needs_sandbox
@pytest.mark.docker
def test_two_steps_resumed_session(two_steps, tmp_path):
    with FakeOpenAI(_two_step_script()) as server:
        ctx1, ctx2, content = asyncio.run(_two_steps(two_steps, tmp_path, server, resume=True))
    assert content == "hello\nworld\n"
    # resumed: step 2's first request carries step 1's conversation, tool results included
    messages = server.messages(2)
    assert [m["role"] for m in messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "user",
    ]
    assert messages[1]["content"] == WRITE and messages[-1]["content"] == APPEND
    t1, t2 = _trajectory(ctx1), _trajectory(ctx2)
    assert t1["session_id"] == t2["session_id"]
    history = [s for s in t2["steps"] if s.get("extra", {}).get("cairn_history")]
    assert len(history) == len(t1["steps"]) == 4
    assert all(s["extra"]["cairn_step"] == "write" and "metrics" not in s for s in history)
    assert [s["step_id"] for s in t2["steps"]] == list(range(1, len(t2["steps"]) + 1))
    assert _tool_calls(t2) == [
        ("bash", {"command": "echo world >> out.txt"}),
        ("bash", {"command": "cat out.txt"}),
        ("submit", {}),
    ]
    # the file's totals are this step's tokens only (history was counted in step 1)
    assert ctx2.tokens == Tokens(prompt=690, completion=39, cached=50)
    assert t2["final_metrics"]["total_prompt_tokens"] == 690


# ---- acceptance: max_turns, big output, tool timeout ------------------------------------
@needs_sandbox
@pytest.mark.docker
def test_never_finishing_model_hits_max_turns(two_steps, tmp_path):
    async def main():
        agent = LlmAgent("openai/cairn-unknown-model", api_base=server.url, max_turns="3", **FAST)
        async with task_sandbox(two_steps) as sandbox:
            ctx = step_context(two_steps, 1, tmp_path)
            await agent.run("Loop forever.", sandbox, ctx)
        return ctx

    with FakeOpenAI(default=bash_call("echo again", usage=(50, 5))) as server:
        ctx = asyncio.run(main())
    assert ctx.exit is AgentExit.MAX_TURNS
    assert len(server.requests) == 3
    assert ctx.tokens == Tokens(prompt=150, completion=15, cached=0)
    assert ctx.cost_usd is None  # unknown model: tokens counted, cost unknown
    traj = _trajectory(ctx)
    assert len(_tool_calls(traj)) == 3
    assert "total_cost_usd" not in traj["final_metrics"]


@needs_sandbox
@pytest.mark.docker
@pytest.mark.slow
def test_huge_output_and_tool_timeout_are_observations(two_steps, tmp_path):
    script = [
        bash_call("head -c 50000000 /dev/zero | tr '\\0' x; echo; echo LAST-LINE"),
        bash_call("sleep 30; echo never", timeout_sec=2),
        bash_call("echo still-here"),
        submit_call(),
    ]

    async def main():
        agent = LlmAgent("openai/gpt-4o-mini", api_base=server.url, max_output_bytes="4096", **FAST)
        async with task_sandbox(two_steps) as sandbox:
            ctx = step_context(two_steps, 1, tmp_path)
            started = time.monotonic()
            await agent.run("Print a lot.", sandbox, ctx)
            return ctx, time.monotonic() - started

    with FakeOpenAI(script) as server:
        ctx, elapsed = asyncio.run(main())
    assert ctx.exit is None  # the agent continued to submit
    assert elapsed < 25  # the sleeping command was killed at its 2 s timeout
    results = [
        r["content"] for s in _trajectory(ctx)["steps"] for r in s.get("observation", {}).get("results", [])
    ]
    big, slow, after = results[0], results[1], results[2]
    assert "[output truncated: only the last 4096 bytes of stdout are shown]" in big
    assert big.rstrip().endswith("LAST-LINE") and len(big) < 6000
    assert "timed out after 2 s and was killed" in slow and "never" not in slow
    assert after == "exit_code: 0\nstdout:\nstill-here"
    # the model was sent the bounded observation, not 50 MB
    assert max(len(json.dumps(r)) for r in server.requests) < 40_000


# ---- acceptance: model errors -------------------------------------------------------------
@needs_sandbox
@pytest.mark.docker
def test_rate_limited_twice_then_success_counts_retries(two_steps, tmp_path):
    script = [
        error(429, "slow down"),
        error(429, "slow down", headers={"Retry-After": "1"}),
        bash_call("echo ok > out.txt"),
        submit_call(),
    ]

    async def main():
        agent = LlmAgent("openai/gpt-4o-mini", api_base=server.url, **FAST)
        async with task_sandbox(two_steps) as sandbox:
            ctx = step_context(two_steps, 1, tmp_path)
            _import_litellm()
            started = time.monotonic()
            await agent.run(WRITE, sandbox, ctx)
            elapsed = time.monotonic() - started
            return ctx, (await sandbox.exec("cat out.txt")).stdout, elapsed

    with FakeOpenAI(script) as server:
        ctx, content, elapsed = asyncio.run(main())
    assert content == "ok\n" and ctx.exit is None
    assert elapsed >= 1.0  # the server's Retry-After was honoured
    assert ctx.metadata["model_retries"] == 2
    assert len(server.requests) == 4  # no hidden retries inside the client
    assert ctx.tokens == Tokens(prompt=20, completion=10, cached=0)
    assert _trajectory(ctx)["steps"][2]["extra"] == {"model_retries": 2}


@needs_sandbox
@pytest.mark.docker
def test_auth_failure_raises_at_once_and_keeps_trajectory(two_steps, tmp_path):
    async def main():
        agent = LlmAgent("openai/gpt-4o-mini", api_base=server.url, **FAST)
        async with task_sandbox(two_steps) as sandbox:
            ctx = step_context(two_steps, 1, tmp_path)
            with pytest.raises(ModelError) as info:
                await agent.run(WRITE, sandbox, ctx)
            return ctx, info.value

    with FakeOpenAI([error(401, "invalid api key")], default=submit_call()) as server:
        ctx, exc = asyncio.run(main())
    assert exc.kind is ErrorKind.MODEL_AUTH_FAILED
    assert "authentication failed" in str(exc)
    assert len(server.requests) == 1  # never retried
    assert "model_retries" not in ctx.metadata
    traj = _trajectory(ctx)
    assert [s["source"] for s in traj["steps"]] == ["system", "user"]
    assert ctx.tokens == Tokens()


@needs_sandbox
@pytest.mark.docker
def test_server_errors_beyond_retries_are_model_unavailable(two_steps, tmp_path):
    async def main():
        agent = LlmAgent("openai/gpt-4o-mini", api_base=server.url, model_retries="2", **FAST)
        async with task_sandbox(two_steps) as sandbox:
            ctx = step_context(two_steps, 1, tmp_path)
            with pytest.raises(ModelError) as info:
                await agent.run(WRITE, sandbox, ctx)
            return ctx, info.value

    with FakeOpenAI(default=error(500, "upstream down")) as server:
        ctx, exc = asyncio.run(main())
    assert exc.kind is ErrorKind.MODEL_UNAVAILABLE
    assert "after 2 retries" in str(exc)
    assert len(server.requests) == 3 and ctx.metadata["model_retries"] == 2


# ---- cancellation by the step timeout, bad tool calls, nudges ---------------------------
@needs_sandbox
@pytest.mark.docker
def test_cancellation_keeps_trajectory_and_tokens(two_steps, tmp_path):
    script = [
        bash_call("echo started > out.txt", usage=(40, 4)),
        bash_call("sleep 60", usage=(60, 6), timeout_sec=120),
    ]

    async def main():
        agent = LlmAgent("openai/gpt-4o-mini", api_base=server.url, **FAST)
        async with task_sandbox(two_steps) as sandbox:
            ctx = step_context(two_steps, 1, tmp_path, resume_session=True)
            _import_litellm()  # the first import takes seconds; keep it out of the timeout
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(5):
                    await agent.run(WRITE, sandbox, ctx)
            # the session stays usable: the interrupted call got an answer
            ctx2 = step_context(two_steps, 2, tmp_path, resume_session=True)
            await agent.run(APPEND, sandbox, ctx2)
            return ctx

    with FakeOpenAI(script, default=submit_call(usage=(70, 7))) as server:
        ctx = asyncio.run(main())
    assert ctx.tokens == Tokens(prompt=100, completion=10, cached=0)
    traj = _trajectory(ctx)
    calls = _tool_calls(traj)
    assert calls[-1] == ("bash", {"command": "sleep 60", "timeout_sec": 120})
    last = traj["steps"][-1]["observation"]["results"][-1]["content"]
    assert last.startswith("[not run: the step ended")
    resumed = server.messages(2)
    assert resumed[-2]["role"] == "tool" and resumed[-2]["content"].startswith("[not run")


@needs_sandbox
@pytest.mark.docker
def test_bad_tool_calls_and_text_turns_become_observations(two_steps, tmp_path):
    script = [
        completion("I think I am done."),
        completion(None, [("python", {"code": "1"}), ("bash", {"timeout_sec": 3})]),
        completion(
            None,
            [("bash", {"command": "exit 3"}), ("submit", {}), ("bash", {"command": "echo late > late.txt"})],
        ),
    ]

    async def main():
        agent = LlmAgent("openai/gpt-4o-mini", api_base=server.url, **FAST)
        async with task_sandbox(two_steps) as sandbox:
            ctx = step_context(two_steps, 1, tmp_path)
            await agent.run(WRITE, sandbox, ctx)
            return ctx, (await sandbox.exec("test -e late.txt")).exit_code

    with FakeOpenAI(script) as server:
        ctx, late_exists = asyncio.run(main())
    assert ctx.exit is None and late_exists == 1  # nothing ran after submit
    traj = _trajectory(ctx)
    nudge = traj["steps"][3]
    assert nudge["source"] == "user" and nudge["extra"] == {"cairn_nudge": True}
    results = [r["content"] for s in traj["steps"] for r in s.get("observation", {}).get("results", [])]
    assert results[0].startswith("error: unknown tool 'python'")
    assert results[1].startswith("error: `bash` needs a non-empty string argument `command`")
    assert results[2] == "exit_code: 3"
    assert results[3].startswith("Submitted.")
    assert results[4] == "[not run: submit was called earlier in this turn]"
    assert len(server.requests) == 3


# ---- units: options and observation formatting ------------------------------------------
def test_options_parse_strings():
    opts = LlmOptions.parse(
        {"api_base": "http://x/v1", "temperature": "0.2", "max_turns": "7", "command_timeout_sec": "30"}
    )
    assert (opts.api_base, opts.temperature, opts.max_turns, opts.command_timeout_sec) == (
        "http://x/v1",
        0.2,
        7,
        30.0,
    )
    with pytest.raises(UsageError, match="must not be negative"):
        LlmOptions.parse({"model_retries": "-1"})


def test_format_exec_result():
    ok = ExecResult(0, "a\n", "")
    assert format_exec_result(ok, 10, 1000) == "exit_code: 0\nstdout:\na"
    failed = ExecResult(2, "", "boom\n")
    assert format_exec_result(failed, 10, 1000) == "exit_code: 2\nstderr:\nboom"
    timed = ExecResult(None, "partial\n", "", timed_out=True)
    text = format_exec_result(timed, 5, 1000)
    assert text.startswith("[command timed out after 5 s and was killed") and "partial" in text
    # a backend that ignored the bound is still cut to the tail, and says so
    long = ExecResult(0, "x" * 5000 + "END", "")
    text = format_exec_result(long, 5, 1000)
    assert "[output truncated: only the last 1000 bytes of stdout are shown]" in text
    assert text.endswith("END") and len(text) < 1200
