"""Installed CLI agents without a sandbox: command lines, model-endpoint configuration, option
checks, no-network tasks (not refused), the runtime cache, and the native-log readers on hostile input.

The real CLIs run end to end in tests/agents/test_cli_agents.py.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cairn.agents.cli_logs import read_claude, read_codex, read_opencode
from cairn.agents.installed import (
    CLAUDE_CODE,
    HOME_DIR,
    ClaudeCodeAgent,
    CodexAgent,
    OpenCodeAgent,
)
from cairn.agents.runtime import (
    MANIFEST,
    AgentPrepareError,
    find_runtime,
    list_runtimes,
    prepare_runtime,
    runtime_dir,
)
from cairn.errors import ErrorKind, TrialFailure
from cairn.task.load import load_task
from taskgen import StepSpec, write_task

STEP_DIR = "/tmp/cairn-agent/logs/01-a"


# ---- command lines and endpoint configuration ---------------------------------------------
def test_claude_command_model_resume_and_base_url(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-host-key-123456")
    agent = ClaudeCodeAgent("anthropic/claude-sonnet-4-5", base_url="http://10.0.0.1:8080/v1")
    cmd = agent._command(STEP_DIR, None)
    # -p is a switch; the instruction comes on stdin (a word starting with "-" is an option)
    assert cmd == (
        "claude -p --verbose --output-format stream-json "
        "--dangerously-skip-permissions --model claude-sonnet-4-5"
    )
    assert agent.reads_stdin
    assert agent._command(STEP_DIR, "sess-1").endswith("--resume sess-1")
    from cairn.agents.base import AgentContext

    ctx = AgentContext(
        task=None,
        step=None,
        logs_dir=Path("."),
        timeout_sec=10,  # type: ignore
        env={"ANTHROPIC_API_KEY": "sk-ae-wins-123456"},
    )
    env = agent._env(ctx)
    assert env["ANTHROPIC_BASE_URL"] == "http://10.0.0.1:8080"  # without /v1
    assert env["ANTHROPIC_API_KEY"] == "sk-ae-wins-123456"  # --ae over the host environment
    assert env["IS_SANDBOX"] == "1" and env["DISABLE_TELEMETRY"] == "1"
    assert env["HOME"] == HOME_DIR
    assert "sk-" not in cmd  # keys never on the command line


def test_codex_config_has_a_responses_provider_without_websockets():
    agent = CodexAgent("openai/scripted", base_url="http://10.0.0.1:8080")
    toml = agent._config_files()[".codex/config.toml"]
    import tomllib

    cfg = tomllib.loads(toml)
    assert cfg["model_provider"] == "cairn"
    prov = cfg["model_providers"]["cairn"]
    assert prov["base_url"] == "http://10.0.0.1:8080/v1"
    assert prov["wire_api"] == "responses" and prov["supports_websockets"] is False
    assert prov["env_key"] == "OPENAI_API_KEY"
    assert cfg["features"]["plugins"] is False and cfg["analytics"]["enabled"] is False
    assert agent._command(STEP_DIR, "th-1").endswith("--model scripted resume th-1 -")
    # without base_url: the built-in provider, no custom block
    assert "model_providers" not in tomllib.loads(CodexAgent(None)._config_files()[".codex/config.toml"])


def test_opencode_custom_provider_and_model_flag():
    agent = OpenCodeAgent("anthropic/claude-x", base_url="http://10.0.0.1:8080/v1")
    cfg = json.loads(agent._cli_env()["OPENCODE_CONFIG_CONTENT"])
    prov = cfg["provider"]["cairn"]
    assert prov["npm"] == "@ai-sdk/openai-compatible"
    assert prov["options"] == {"baseURL": "http://10.0.0.1:8080/v1", "apiKey": "{env:ANTHROPIC_API_KEY}"}
    assert list(prov["models"]) == ["claude-x"]
    assert cfg["permission"]["bash"] == "allow"
    assert cfg["permission"]["external_directory"] == "allow"  # paths outside the working dir
    assert agent._command(STEP_DIR, None) == "opencode run --format json --auto -m cairn/claude-x"
    plain = OpenCodeAgent("anthropic/claude-x")
    assert plain._command(STEP_DIR, "s1").endswith("-m anthropic/claude-x --session s1")
    assert "provider" not in json.loads(plain._cli_env()["OPENCODE_CONFIG_CONTENT"])


def test_no_network_task_is_not_refused_the_runtime_is_looked_up(tmp_path, monkeypatch):
    """No refusal for ``no-network``: the trial opens the model host through the gateway for
    the agent phase; prepare_host goes on to the cache (empty here, ``prepare=never``)."""
    monkeypatch.setenv("CAIRN_CACHE_DIR", str(tmp_path / "cache"))
    task = load_task(write_task(tmp_path, "closed", steps=[StepSpec("a")], network="no-network"))
    agent = ClaudeCodeAgent(None, prepare="never", base_url="http://model.test:8000")
    with pytest.raises(TrialFailure) as info:
        asyncio.run(agent.prepare_host(task, can_mount=True))
    assert info.value.kind is ErrorKind.AGENT_SETUP_FAILED
    assert "not in the cache" in str(info.value)
    assert agent.model_hosts({}) == ["model.test"]


# ---- the runtime cache ------------------------------------------------------------------
def test_runtime_cache_lookup_ignores_incomplete_folders(tmp_path, monkeypatch):
    monkeypatch.setenv("CAIRN_CACHE_DIR", str(tmp_path))
    folder = runtime_dir("codex", "9.9.9")
    assert folder == tmp_path / "agents" / "codex" / "9.9.9-linux-x64"
    folder.mkdir(parents=True)
    assert find_runtime("codex", "9.9.9") is None  # no manifest: a killed preparation
    (folder / MANIFEST).write_text(
        json.dumps(
            {
                "agent": "codex",
                "version": "9.9.9",
                "platform": "linux-x64",
                "executables": {"codex": "node_modules/x/codex"},
            }
        )
    )
    assert find_runtime("codex", "9.9.9") is None  # the executable is missing
    (folder / "node_modules" / "x").mkdir(parents=True)
    (folder / "node_modules" / "x" / "codex").write_text("#!/bin/sh\n")
    rt = find_runtime("codex", "9.9.9")
    assert rt is not None and rt.path == folder
    assert [(r.agent, r.version) for r in list_runtimes()] == [("codex", "9.9.9")]
    out = CliRunner().invoke(_app(), ["agents", "list", "--json"])
    assert out.exit_code == 0, out.output
    rows = {r["name"]: r for r in json.loads(out.stdout)["agents"]}
    assert rows["codex"]["cached"][0]["version"] == "9.9.9"
    assert rows["claude-code"]["cached"] == [] and rows["claude-code"]["version"] == "2.1.332"


def test_prepare_without_npm_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("CAIRN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(AgentPrepareError, match="needs npm on the host"):
        prepare_runtime("claude-code", CLAUDE_CODE.packaging, CLAUDE_CODE.version)
    assert not list((tmp_path / "agents" / "claude-code").glob(".staging-*"))


def test_prepare_refuses_unknown_agents_and_platforms(tmp_path, monkeypatch):
    monkeypatch.setenv("CAIRN_CACHE_DIR", str(tmp_path))
    out = CliRunner().invoke(_app(), ["agents", "prepare", "llm"])
    assert out.exit_code == 2 and "not an installed CLI agent" in out.output
    out = CliRunner().invoke(_app(), ["agents", "prepare", "codex", "--platform", "sparc"])
    assert out.exit_code == 2 and "unknown platform" in out.output


def _app():
    from cairn.cli import _register, app

    _register()
    return app


# ---- native log readers ------------------------------------------------------------------
def _lines(*events) -> str:
    return "\n".join(e if isinstance(e, str) else json.dumps(e) for e in events) + "\n"


def test_claude_reader_takes_final_usage_from_the_session_file():
    stdout = _lines(
        "not json at all",
        {"type": "system", "subtype": "init", "session_id": "s1", "model": "m"},
        {
            "type": "assistant",
            "message": {
                "id": "msg_1",
                "model": "m",
                "content": [{"type": "text", "text": "hi"}],
                "usage": {"input_tokens": 70, "cache_read_input_tokens": 30, "output_tokens": 1},
            },
        },
        {
            "type": "assistant",
            "message": {
                "id": "msg_1",
                "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}],
            },
        },
        {
            "type": "user",
            "message": {
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [{"type": "text", "text": "a\nb"}],
                    }
                ]
            },
        },
        ["a list"],
        {"type": "assistant", "message": "not a dict"},
    )
    session = _lines(
        {
            "type": "assistant",
            "message": {
                "id": "msg_1",
                "usage": {"input_tokens": 70, "cache_read_input_tokens": 30, "output_tokens": 20},
            },
        }
    )
    run = read_claude(stdout, [session])
    assert run.session_id == "s1" and run.extra == {"finished": False}
    (step,) = run.steps
    assert step["message"] == "hi"
    assert step["tool_calls"] == [
        {"tool_call_id": "t1", "function_name": "Bash", "arguments": {"command": "ls"}}
    ]
    assert step["observation"]["results"] == [{"source_call_id": "t1", "content": "a\nb"}]
    assert (run.prompt_tokens, run.completion_tokens, run.cached_tokens) == (100, 20, 30)
    assert run.cost_usd is None  # no result event: unknown, not 0
    # without the session file the stream's output count is not final: unknown
    assert read_claude(stdout).completion_tokens is None


def test_codex_reader_reads_only_the_last_invocation_of_a_thread():
    def usage(i, o, c):
        return {
            "type": "event_msg",
            "payload": {
                "type": "token_count",
                "info": {
                    "last_token_usage": {"input_tokens": i, "output_tokens": o, "cached_input_tokens": c}
                },
            },
        }

    rollout = _lines(
        {"type": "session_meta", "payload": {"id": "th"}},
        {"type": "event_msg", "payload": {"type": "task_started"}},
        {
            "type": "response_item",
            "payload": {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "old"}],
            },
        },
        usage(5, 5, 5),
        {"type": "event_msg", "payload": {"type": "task_started"}},
        {
            "type": "response_item",
            "payload": {
                "type": "function_call",
                "name": "exec_command",
                "arguments": '{"cmd": "ls"}',
                "call_id": "c1",
            },
        },
        {
            "type": "response_item",
            "payload": {"type": "function_call_output", "call_id": "c1", "output": "x"},
        },
        usage(100, 20, 30),
        {
            "type": "response_item",
            "payload": {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "done"}],
            },
        },
        usage(150, 7, 0),
        "{broken",
    )
    run = read_codex(_lines({"type": "thread.started", "thread_id": "th"}), rollout)
    assert run.session_id == "th"
    assert [s["message"] for s in run.steps] == ["", "done"]
    assert run.steps[0]["tool_calls"][0]["arguments"] == {"cmd": "ls"}
    assert run.steps[0]["observation"]["results"][0]["content"] == "x"
    assert (run.prompt_tokens, run.completion_tokens, run.cached_tokens) == (250, 27, 30)
    missing = read_codex("", None)
    assert missing.prompt_tokens is None and missing.steps == []


def test_opencode_reader_steps_tokens_and_cost():
    def finish(i, o, r, cost):
        return {
            "type": "step_finish",
            "sessionID": "ses",
            "part": {"tokens": {"input": i, "output": o, "cache": {"read": r, "write": 0}}, "cost": cost},
        }

    stdout = _lines(
        {"type": "step_start", "sessionID": "ses", "timestamp": 1796114859738, "part": {}},
        {"type": "text", "sessionID": "ses", "part": {"text": "ok"}},
        {
            "type": "tool_use",
            "sessionID": "ses",
            "part": {
                "tool": "bash",
                "callID": "c1",
                "state": {"status": "completed", "input": {"command": "ls"}, "output": "(no output)"},
            },
        },
        finish(70, 20, 30, 0.5),
        {"type": "step_start", "sessionID": "ses", "part": {}},
        finish(150, 7, 0, None),
    )
    run = read_opencode(stdout)
    assert run.session_id == "ses" and len(run.steps) == 2
    assert run.steps[0]["timestamp"].startswith("2026-")
    assert run.steps[0]["metrics"]["prompt_tokens"] == 100  # input + cache reads
    assert (run.prompt_tokens, run.completion_tokens, run.cached_tokens) == (250, 27, 30)
    assert run.cost_usd is None  # one call without a cost: the sum is unknown
    assert read_opencode("\x00garbage\n{]").steps == []


def test_readers_never_raise_on_hostile_shapes():
    hostile = _lines(
        {"type": "assistant", "message": {"content": [None, 3, {"type": "tool_use", "input": "[1]"}]}},
        {"type": "result", "usage": {"input_tokens": -5, "output_tokens": True}, "total_cost_usd": "free"},
        {"type": "tool_use", "part": {"state": "x"}},
        {"type": "step_finish", "part": {"tokens": [1]}},
        {"type": "event_msg", "payload": {"type": "token_count", "info": 7}},
    )
    run = read_claude(hostile, [hostile])
    assert run.cost_usd is None and run.completion_tokens is None
    assert read_codex(hostile, hostile).prompt_tokens is None
    assert read_opencode(hostile).cost_usd is None


def test_gemini_command_settings_and_base_url():
    from cairn.agents.installed import GeminiCliAgent

    agent = GeminiCliAgent("google/gemini-2.5-flash", base_url="http://10.0.0.1:9/v1beta")
    assert agent._command(STEP_DIR, None) == (
        "gemini --yolo --output-format stream-json --include-directories / --model gemini-2.5-flash"
    )
    assert agent._command(STEP_DIR, "any-session").endswith("--resume latest")
    assert agent._cli_env() == {"GOOGLE_GEMINI_BASE_URL": "http://10.0.0.1:9"}
    settings = json.loads(agent._config_files()[".gemini/settings.json"])
    assert settings["telemetry"]["enabled"] is False
    assert settings["privacy"]["usageStatisticsEnabled"] is False
    # the bundle runs with a Node.js taken from the npm registry into the same runtime
    packaging = agent.spec.packaging
    assert packaging.extra_packages == ("node-{platform}@22.23.5",)
    assert packaging.launchers["gemini"] == ("node", "@google/gemini-cli/bundle/gemini.js")


def test_gemini_reader_takes_turns_of_this_invocation_from_the_session_file():
    from cairn.agents.cli_logs import read_gemini

    stdout = _lines(
        {"type": "init", "timestamp": "2026-12-01T09:21:03.000Z", "session_id": "s2", "model": "g"},
        {
            "type": "result",
            "status": "success",
            "stats": {"input_tokens": 999, "output_tokens": 9, "cached": 9},
        },
    )
    session = _lines(
        {"sessionId": "s2", "startTime": "2026-12-01T09:00:00.000Z", "kind": "main"},
        {
            "id": "old",
            "timestamp": "2026-12-01T09:00:01.000Z",
            "type": "gemini",
            "content": "from step 1",
            "tokens": {"input": 5, "output": 5, "cached": 0},
        },
        {
            "id": "m1",
            "timestamp": "2026-12-01T09:21:04.000Z",
            "type": "gemini",
            "content": "writing",
            "tokens": {"input": 100, "output": 20, "cached": 30},
        },
        {"$set": {"lastUpdated": "x"}},
        {
            "id": "m1",
            "timestamp": "2026-12-01T09:21:04.000Z",
            "type": "gemini",
            "content": "writing",
            "tokens": {"input": 100, "output": 20, "cached": 30},
            "toolCalls": [
                {
                    "id": "c1",
                    "name": "run_shell_command",
                    "args": {"command": "ls"},
                    "result": [{"functionResponse": {"id": "c1", "response": {"output": "a.txt"}}}],
                }
            ],
        },
        {
            "id": "m2",
            "timestamp": "2026-12-01T09:21:05.000Z",
            "type": "gemini",
            "content": "done",
            "tokens": {"input": 150, "output": 7, "cached": 0},
        },
    )
    other = _lines(
        {"sessionId": "s1"},
        {"id": "x", "timestamp": "2026-12-01T09:30:00.000Z", "type": "gemini", "content": "other session"},
    )
    run = read_gemini(stdout, [session, other])
    assert [s["message"] for s in run.steps] == ["writing", "done"]
    assert run.steps[0]["tool_calls"] == [
        {"tool_call_id": "c1", "function_name": "run_shell_command", "arguments": {"command": "ls"}}
    ]
    assert run.steps[0]["observation"]["results"][0]["content"] == "a.txt"
    # per-call tokens win over the result's totals; the old step's turn is not counted
    assert (run.prompt_tokens, run.completion_tokens, run.cached_tokens) == (250, 27, 30)
    assert run.session_id == "s2" and run.cost_usd is None


def test_qwen_command_and_reader_merge_blocks_of_one_call():
    from cairn.agents.cli_logs import read_qwen
    from cairn.agents.installed import QwenCodeAgent

    agent = QwenCodeAgent("openai/qwen3-coder", base_url="http://10.0.0.1:9")
    assert agent._cli_env() == {"OPENAI_BASE_URL": "http://10.0.0.1:9/v1"}
    assert agent._command(STEP_DIR, "s1") == (
        "qwen --yolo -o stream-json --auth-type openai -m qwen3-coder --resume s1"
    )

    def assistant(mid, content, usage):
        return {"type": "assistant", "message": {"id": mid, "content": content, "usage": usage}}

    stdout = _lines(
        {"type": "system", "subtype": "init", "session_id": "q1", "model": "qwen3-coder"},
        assistant("a", [{"type": "text", "text": "writing"}], {"input_tokens": 0, "output_tokens": 0}),
        assistant(
            "b",
            [{"type": "tool_use", "id": "c1", "name": "run_shell_command", "input": {"command": "ls"}}],
            {"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 30},
        ),
        {
            "type": "user",
            "message": {"content": [{"type": "tool_result", "tool_use_id": "c1", "content": "a.txt"}]},
        },
        assistant(
            "c",
            [{"type": "text", "text": "done"}],
            {"input_tokens": 150, "output_tokens": 7, "cache_read_input_tokens": 0},
        ),
        {"type": "result", "session_id": "q1", "is_error": False, "num_turns": 2},
    )
    run = read_qwen(stdout)
    assert [s["message"] for s in run.steps] == ["writing", "done"]
    assert run.steps[0]["tool_calls"][0]["function_name"] == "run_shell_command"
    assert run.steps[0]["observation"]["results"][0]["content"] == "a.txt"
    # OpenAI semantics: input_tokens already include the cached ones
    assert (run.prompt_tokens, run.completion_tokens, run.cached_tokens) == (250, 27, 30)
    assert run.session_id == "q1" and run.cost_usd is None


# ---- the model variable each CLI reads (-m, else the host's) --------------------------------
@pytest.mark.parametrize(
    ("agent_name", "var"),
    [("claude-code", "ANTHROPIC_MODEL"), ("gemini-cli", "GEMINI_MODEL"), ("qwen-code", "OPENAI_MODEL")],
)
def test_model_variable_from_m_or_passed_through_from_the_host(monkeypatch, agent_name, var):
    from cairn.agents.base import AgentContext
    from cairn.agents.registry import create_agent

    ctx = AgentContext(
        task=None,
        step=None,
        logs_dir=Path("."),
        timeout_sec=10,  # type: ignore
        env={},
    )
    monkeypatch.setenv(var, "host-model-7")
    # no -m: the host's variable reaches the CLI (it was dropped once; claude-code's
    # ANTHROPIC_MODEL is how many users pick a model)
    assert create_agent(agent_name, None, {})._env(ctx)[var] == "host-model-7"
    # -m wins, provider prefix dropped, and the CLI's flag says the same
    agent = create_agent(agent_name, "someprov/flag-model-9", {})
    assert agent._env(ctx)[var] == "flag-model-9"
    assert "flag-model-9" in agent._command(STEP_DIR, None)
    # --ae wins over both
    ctx_ae = AgentContext(
        task=None,
        step=None,
        logs_dir=Path("."),
        timeout_sec=10,  # type: ignore
        env={var: "ae-model-3"},
    )
    assert agent._env(ctx_ae)[var] == "ae-model-3"
    monkeypatch.delenv(var)
    assert var not in create_agent(agent_name, None, {})._env(ctx)


# ---- the Python agents: options checked before start ----------------------------------------
@pytest.mark.parametrize("agent_name", ["aider", "mini-swe-agent"])
def test_python_agents_refuse_resume_and_need_a_provider_model(monkeypatch, agent_name):
    from cairn.agents.registry import validate_agent_options
    from cairn.errors import UsageError

    monkeypatch.setenv("OPENAI_API_KEY", "sk-x-123456")
    validate_agent_options(agent_name, "openai/gpt-4o-mini", {})
    with pytest.raises(UsageError, match="cannot continue a session"):
        validate_agent_options(agent_name, "openai/gpt-4o-mini", {}, resume=True)
    with pytest.raises(UsageError, match="needs a model"):
        validate_agent_options(agent_name, None, {})
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(UsageError, match="OPENAI_API_KEY"):
        validate_agent_options(agent_name, "openai/gpt-4o-mini", {})


def test_python_agent_commands_keep_histories_out_of_the_working_dir():
    from cairn.agents.registry import create_agent

    aider = create_agent("aider", "anthropic/claude-sonnet-4-5", {"base_url": "http://h:9/v1"})
    aider._log_dir = "/tmp/cairn-agent/logs/01-a"
    cmd = aider._command(STEP_DIR, None)
    for flag in ("--llm-history-file", "--chat-history-file", "--input-history-file", "--analytics-log"):
        assert f"{flag} /tmp/cairn-agent/logs/01-a/" in cmd
    assert "--no-git" in cmd and "--yes-always" in cmd
    assert cmd.endswith(f"--message-file {STEP_DIR}/instruction.md") and not aider.reads_stdin
    assert "--model anthropic/claude-sonnet-4-5" in cmd  # a LiteLLM id, kept whole
    assert aider._cli_env() == {"ANTHROPIC_BASE_URL": "http://h:9"}
    mini = create_agent("mini-swe-agent", "openai/m", {"base_url": "http://h:9"})
    mini._log_dir = "/tmp/cairn-agent/logs/01-a"
    cmd = mini._command(STEP_DIR, None)
    assert "-c model.model_kwargs.api_base=http://h:9/v1" in cmd
    assert f"-c {STEP_DIR}/task.yaml" in cmd and "--task" not in cmd
    import yaml

    hostile = "- a task $(x) `y` 'q' \"d\"\n{{ not a template }}\n" * 3
    assert yaml.safe_load(mini._input_files(hostile)["task.yaml"]) == {"run": {"task": hostile}}
    assert "-o /tmp/cairn-agent/logs/01-a/mini.traj.json" in cmd and "-l 0" in cmd


def test_python_launcher_restores_the_callers_library_path(tmp_path):
    """The launcher's LD_LIBRARY_PATH is for the sealed interpreter only: what the agent runs
    gets the caller's value back (unset stays unset, set-but-empty stays empty)."""
    import os
    import subprocess
    import sys

    from cairn.agents.runtime import python_launcher

    root = tmp_path / "rt"
    (root / "bin").mkdir(parents=True)
    exe = root / "python/usr/bin/python3.11"
    exe.parent.mkdir(parents=True)
    # a stand-in for the sealed interpreter: drops -I so PYTHONPATH finds the probe module
    exe.write_text(f'#!/bin/sh\n[ "$1" = "-I" ] && shift\nPYTHONPATH={tmp_path} exec {sys.executable} "$@"\n')
    exe.chmod(0o755)
    (tmp_path / "probe_mod.py").write_text(
        "import os, json\n"
        "def main():\n"
        "    print(json.dumps(os.environ.get('LD_LIBRARY_PATH')))\n"
        "    return 0\n"
    )
    launcher = root / "bin" / "probe"
    launcher.write_text(python_launcher("probe_mod:main"))
    launcher.chmod(0o755)
    base = {"PATH": os.environ["PATH"]}
    runs = {
        "unset": base,
        "empty": {**base, "LD_LIBRARY_PATH": ""},
        "set": {**base, "LD_LIBRARY_PATH": "/opt/mine"},
    }
    seen = {
        k: json.loads(
            subprocess.run([str(launcher)], env=env, capture_output=True, text=True, check=True).stdout
        )
        for k, env in runs.items()
    }
    assert seen == {"unset": None, "empty": "", "set": "/opt/mine"}


# ---- task seed trajectories: refused before start where they cannot be loaded ----------------
def _seeded_task(tmp_path, doc) -> Path:
    root = write_task(tmp_path, "t", steps=[StepSpec("a"), StepSpec("b")])
    (root / "steps" / "a" / "trajectory.json").write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return root


GOOD_SEED = {
    "schema_version": "ATIF-v1.7",
    "session_id": "s",
    "agent": {"name": "x", "version": "1"},
    "steps": [{"step_id": 1, "source": "user", "message": "hello"}],
}


def test_seed_trajectory_refusals(tmp_path):
    from cairn.agents.registry import create_agent

    task = load_task(_seeded_task(tmp_path, GOOD_SEED))
    assert task.seed_trajectory is not None
    for name in ("codex", "aider", "mini-swe-agent"):
        why = create_agent(name, "openai/m", {}).refusal(task)
        assert why is not None and "cannot load the task's seed trajectory" in why, name
    # oracle and nop act on no instruction: the seed does not apply to them (Harbor skips it)
    assert create_agent("oracle", None, {}).refusal(task) is None
    assert create_agent("nop", None, {}).refusal(task) is None
    assert create_agent("llm", "openai/m", {}).refusal(task) is None


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("{not json", "not JSON: Expecting property name"),
        ({"steps": [{"source": "user", "message": "x"}]}, "not an ATIF document"),
        ({"schema_version": "ATIF-v1.7", "steps": []}, "no steps"),
        (
            {"schema_version": "ATIF-v1.7", "steps": [{"source": "robot", "message": "x"}]},
            "step 1 (`steps[0]`) has no source system/user/agent (`source` is 'robot')",
        ),
        (
            {
                "schema_version": "ATIF-v1.7",
                "steps": [{"source": "agent", "message": "x", "tool_calls": [{"function_name": "f"}]}],
            },
            "tool_calls need tool_call_id, function_name and arguments (an object): "
            "`steps[0].tool_calls[0].tool_call_id` is missing or not a string",
        ),
    ],
)
def test_a_malformed_seed_is_refused_by_the_check_and_the_agents_alike(tmp_path, doc, message):
    """One rule (cairn.task.seed.read_seed): the task check reports the seed as an error of the
    task, so every run refuses the task (whatever the agent), and the agents' own loader says
    the same words."""
    from cairn.agents.trajectory import load_seed
    from cairn.errors import TaskFormatError
    from cairn.task.load import check_task

    root = _seeded_task(tmp_path, doc)
    seed = root / "steps" / "a" / "trajectory.json"
    (error,) = [f for f in check_task(root) if f.is_error]
    assert error.path == seed and error.rule == "invalid-task-files"
    assert error.text.startswith("seed trajectory: ") and message in error.text
    with pytest.raises(TaskFormatError) as refused:
        load_task(root)
    assert str(error) in str(refused.value)
    with pytest.raises(ValueError, match="trajectory.json") as loaded:
        load_seed(seed)
    assert error.text.removeprefix("seed trajectory: ") in str(loaded.value)


def test_single_step_seed_lives_at_the_task_root(tmp_path):
    root = write_task(tmp_path, "one")
    assert load_task(root).seed_trajectory is None
    (root / "trajectory.json").write_text(json.dumps(GOOD_SEED))
    assert load_task(root).seed_trajectory == root / "trajectory.json"


# ---- aider / mini-swe-agent log readers -----------------------------------------------------
AIDER_LLM = """TO LLM 2026-12-01T12:15:57
-------
SYSTEM Act as an expert.
-------
USER Write 1 into a.txt
LLM RESPONSE 2026-12-01T12:15:58
ASSISTANT Creating the file.
ASSISTANT
ASSISTANT a.txt
ASSISTANT ```
ASSISTANT 1
ASSISTANT ```
"""
AIDER_EVENTS = "\n".join(
    json.dumps(e)
    for e in [
        {"event": "launched", "properties": {}},
        {
            "event": "message_send",
            "properties": {
                "prompt_tokens": 1000,
                "completion_tokens": 40,
                "total_tokens": 1040,
                "cost": 0,
                "total_cost": 0,
            },
        },
        {"event": "exit", "properties": {"reason": "Completed --message"}},
    ]
)


def test_read_aider_turns_tokens_and_edits():
    from cairn.agents.cli_logs import read_aider

    run = read_aider(AIDER_LLM, AIDER_EVENTS, "Tokens: 1.0k sent\nApplied edit to a.txt\n")
    assert [s["message"] for s in run.steps] == ["Creating the file.\n\na.txt\n```\n1\n```"]
    assert run.steps[0]["timestamp"] == "2026-12-01T12:15:58Z"
    assert run.steps[0]["metrics"]["prompt_tokens"] == 1000
    assert run.steps[0]["metrics"]["cached_tokens"] is None  # aider does not report it
    assert (run.prompt_tokens, run.completion_tokens, run.cached_tokens) == (1000, 40, None)
    assert run.cost_usd is None  # 0 means "no price", not free
    assert run.extra == {"exit_reason": "Completed --message", "applied_edits": ["a.txt"]}
    # hostile or missing logs: nothing raises, nothing is invented
    empty = read_aider("", "not json\n{]\n", "")
    assert empty.steps == [] and not empty.has_tokens and empty.extra == {"finished": False}
    odd = read_aider(
        "LLM RESPONSE x\nASSISTANT hi\n",
        json.dumps({"event": "message_send", "properties": {"prompt_tokens": -3, "cost": "x"}}),
        "",
    )
    assert odd.steps[0]["message"] == "hi" and odd.steps[0]["metrics"]["prompt_tokens"] is None


def test_read_mini_steps_observations_and_status():
    from cairn.agents.cli_logs import read_mini

    def assistant(text, cid, cmd, usage, cost=0.0):
        return {
            "role": "assistant",
            "content": text,
            "tool_calls": [
                {
                    "id": cid,
                    "type": "function",
                    "function": {"name": "bash", "arguments": json.dumps({"command": cmd})},
                }
            ],
            "extra": {
                "response": {"model": "scripted", "usage": usage},
                "cost": cost,
                "timestamp": 1796127356.5,
            },
        }

    doc = {
        "info": {"exit_status": "Submitted"},
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "task"},
            assistant(
                "Writing.",
                "c1",
                "echo 1 > a",
                {
                    "prompt_tokens": 1000,
                    "completion_tokens": 40,
                    "prompt_tokens_details": {"cached_tokens": 300},
                },
                0.25,
            ),
            {"role": "tool", "tool_call_id": "c1", "content": '{"returncode": 0}'},
            assistant(
                "Submitting.",
                "c2",
                "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT",
                {"prompt_tokens": 1100, "completion_tokens": 12},
                0.5,
            ),
            {"role": "exit", "content": "", "extra": {"exit_status": "Submitted"}},
        ],
    }
    run = read_mini(json.dumps(doc))
    assert [c["arguments"]["command"] for s in run.steps for c in s["tool_calls"]] == [
        "echo 1 > a",
        "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT",
    ]
    assert run.steps[0]["observation"]["results"] == [
        {"source_call_id": "c1", "content": '{"returncode": 0}'}
    ]
    assert (run.prompt_tokens, run.completion_tokens, run.cached_tokens) == (2100, 52, 300)
    assert run.cost_usd == 0.75 and run.is_error is False
    assert run.steps[0]["timestamp"].endswith(":56.500Z")
    # a run cut off (no exit message yet) and hostile files
    cut = read_mini(json.dumps({"messages": doc["messages"][:4]}))
    assert cut.extra == {"finished": False} and cut.is_error is None
    assert read_mini("").steps == [] and read_mini("[1, 2]").steps == []
    assert (
        read_mini(json.dumps({"messages": [None, 3, {"role": "assistant", "tool_calls": "x"}]})).steps[0][
            "tool_calls"
        ]
        == []
    )


def test_unreported_cached_tokens_are_null_in_the_step_and_in_sums(tmp_path):
    """Issue 15: aider reports no cached tokens (the model server sent 300): the step's tokens
    record ``cached: None``, never 0, and so do the trial's and job's sums over it."""
    from types import SimpleNamespace

    from cairn.agents.base import AgentContext
    from cairn.agents.cli_logs import read_aider
    from cairn.agents.registry import create_agent
    from cairn.results.model import Tokens

    run = read_aider(AIDER_LLM, AIDER_EVENTS, "")
    ctx = AgentContext(
        task=None,
        step=SimpleNamespace(name="write"),  # type: ignore[arg-type]
        logs_dir=tmp_path,
        timeout_sec=10,
    )
    create_agent("aider", "openai/gpt-4o-mini", {})._account(run, ctx)
    assert ctx.tokens == Tokens(prompt=1000, completion=40, cached=None)
    assert ctx.tokens.model_dump()["cached"] is None
    assert ctx.metadata["tokens_not_reported"] == ["cached"]
    assert Tokens.total([ctx.tokens, Tokens(prompt=5, completion=1, cached=300)]) == Tokens(
        prompt=1005, completion=41, cached=None
    )
    assert (
        Tokens.total(
            [Tokens(prompt=5, completion=1, cached=300), Tokens(prompt=1, completion=1, cached=0)]
        ).cached
        == 300
    )
    assert Tokens.total([]) == Tokens(prompt=0, completion=0, cached=0)


def test_agents_list_shows_python_agents_with_their_pin_and_cache_state(tmp_path, monkeypatch):
    """Issue 15: aider and mini-swe-agent were listed as ``built-in`` with no version or cache
    state, though they are installed agents prepared into the cache like the npm ones."""
    from cairn.agents.installed import AIDER

    monkeypatch.setenv("CAIRN_CACHE_DIR", str(tmp_path))
    folder = runtime_dir("aider", AIDER.version)
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "aider").write_text("#!/bin/sh\n")
    (folder / MANIFEST).write_text(
        json.dumps(
            {
                "agent": "aider",
                "version": AIDER.version,
                "platform": "linux-x64",
                "source": "pypi",
                "executables": {"aider": "bin/aider"},
            }
        )
    )
    out = CliRunner().invoke(_app(), ["agents", "list"])
    assert out.exit_code == 0, out.output
    lines = {line.split()[0]: line.split() for line in out.stdout.splitlines()[1:]}
    assert lines["aider"] == [
        "aider",
        "pypi",
        f"aider-chat=={AIDER.version}",
        "resume=no",
        "cached:",
        AIDER.version,
        "linux-x64",
    ]
    assert lines["mini-swe-agent"][:2] == ["mini-swe-agent", "pypi"]
    assert lines["mini-swe-agent"][2].startswith("mini-swe-agent==")
    assert lines["mini-swe-agent"][-2:] == ["not", "cached"]
    assert lines["claude-code"][:3] == ["claude-code", "npm", "@anthropic-ai/claude-code@2.1.332"]
    assert lines["llm"] == ["llm", "built-in"]
    rows = {
        r["name"]: r
        for r in json.loads(CliRunner().invoke(_app(), ["agents", "list", "--json"]).stdout)["agents"]
    }
    assert (rows["aider"]["kind"], rows["aider"]["cached"][0]["version"]) == ("pypi", AIDER.version)


def test_a_failed_cli_is_named_with_its_code_and_the_tail_of_its_stderr():
    from cairn.agents.installed import ERROR_TAIL_CHARS, exit_message

    assert (
        exit_message("claude", 1, "\n\x1b[31merror:\x1b[0m unknown option '- Write'\n\n")
        == "claude exited with code 1: error: unknown option '- Write'"
    )
    assert exit_message("codex", 126, "") == "codex exited with code 126 (no output)"
    many = "".join(f"line {i}\n" for i in range(50)) + "x" * 5000
    msg = exit_message("aider", 2, many)
    assert "line 44" not in msg and len(msg) <= len("aider exited with code 2: ") + ERROR_TAIL_CHARS


def test_opencode_auto_rejections_are_read_from_its_stderr():
    # opencode 1.18.33 when a permission is not allowed: it goes on and exits 0
    stderr = (
        "\x1b[93m\x1b[1m! \x1b[0mpermission requested: external_directory (/proc/*); "
        "auto-rejecting\nsome other line\n"
    )
    assert OpenCodeAgent("openai/m")._refusals(stderr) == [
        "permission requested: external_directory (/proc/*); auto-rejecting"
    ]
    assert OpenCodeAgent("openai/m")._refusals("all fine\n") == []
