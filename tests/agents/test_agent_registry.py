"""The agent registry: names, import paths, and the option checks run before anything starts."""

from __future__ import annotations

import pytest

from cairn.agents.base import Agent
from cairn.agents.registry import (
    AGENT_NAMES,
    create_agent,
    get_agent_class,
    validate_agent_options,
)
from cairn.errors import UsageError


class EchoAgent(Agent):
    """A custom agent reachable as ``test_agent_registry:EchoAgent`` (its folder is on sys.path)."""

    name = "echo"
    needs_model = None

    async def run(self, instruction, sandbox, context) -> None:
        await sandbox.exec(["echo", instruction])


class NotAnAgent:
    pass


def test_builtin_names_resolve_to_agent_classes():
    expected = {
        "oracle": "OracleAgent",
        "nop": "NopAgent",
        "llm": "LlmAgent",
        "claude-code": "ClaudeCodeAgent",
        "codex": "CodexAgent",
        "opencode": "OpenCodeAgent",
        "gemini-cli": "GeminiCliAgent",
        "qwen-code": "QwenCodeAgent",
        "aider": "AiderAgent",
        "mini-swe-agent": "MiniSweAgent",
    }
    assert set(AGENT_NAMES) == set(expected)
    for name, cls_name in expected.items():
        cls = get_agent_class(name)
        assert cls.__name__ == cls_name
        assert cls.name == name


def test_import_path_agent():
    cls = get_agent_class("test_agent_registry:EchoAgent")
    assert cls is EchoAgent and issubclass(cls, Agent)
    agent = create_agent("test_agent_registry:EchoAgent", "some/model", {"x": "1"})
    assert agent.model == "some/model" and agent.kwargs == {"x": "1"}


@pytest.mark.parametrize(
    "name, fragment",
    [
        ("no-such-agent", "unknown agent"),
        ("test_agent_registry:Missing", "has no 'Missing'"),
        ("test_agent_registry:NotAnAgent", "not a subclass"),
        ("no_such_module_xyz:Agent", "cannot import"),
        ("test_agent_registry:", "package.module:Class"),
    ],
)
def test_bad_agent_names_are_usage_errors(name, fragment):
    with pytest.raises(UsageError, match=fragment):
        get_agent_class(name)


def test_model_given_to_agent_without_model_is_refused():
    for name in ("oracle", "nop"):
        with pytest.raises(UsageError, match="takes no model"):
            validate_agent_options(name, "openai/gpt-4o", {}, {})
    assert validate_agent_options("nop", None, {}, {}).name == "nop"


def test_model_required_for_llm(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")
    with pytest.raises(UsageError, match="needs a model"):
        validate_agent_options("llm", None, {}, {})
    assert validate_agent_options("llm", "openai/gpt-4o-mini", {"max_turns": "5"}, {}).name == "llm"


def test_llm_bad_options_are_usage_errors():
    with pytest.raises(UsageError, match="no option 'max_turn'"):
        validate_agent_options("llm", "openai/x", {"max_turn": "5"}, {})
    with pytest.raises(UsageError, match="not a number"):
        validate_agent_options("llm", "openai/x", {"temperature": "hot"}, {})
    with pytest.raises(UsageError, match="max_turns must be >= 1"):
        validate_agent_options("llm", "openai/x", {"max_turns": "0"}, {})


def test_installed_agents_need_their_api_keys(monkeypatch):
    for var in ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(UsageError, match="ANTHROPIC_API_KEY"):
        validate_agent_options("claude-code", None, {}, {})
    with pytest.raises(UsageError, match="OPENAI_API_KEY"):
        validate_agent_options("codex", "openai/gpt-5", {}, {})
    # a key given with --ae is enough; so is one in the host environment
    validate_agent_options(
        "claude-code", "anthropic/claude-sonnet-4-5", {}, {"ANTHROPIC_API_KEY": "sk-ant-test"}
    )
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    validate_agent_options("codex", None, {}, {})


def test_opencode_needs_provider_model_and_that_providers_key(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(UsageError, match="needs a model"):
        validate_agent_options("opencode", None, {}, {})
    with pytest.raises(UsageError, match="provider/model"):
        validate_agent_options("opencode", "claude-sonnet", {}, {"ANTHROPIC_API_KEY": "k"})
    with pytest.raises(UsageError, match="ANTHROPIC_API_KEY"):
        validate_agent_options("opencode", "anthropic/claude-sonnet-4-5", {}, {})
    validate_agent_options("opencode", "anthropic/claude-sonnet-4-5", {}, {"ANTHROPIC_API_KEY": "k"})


def test_installed_agent_options(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    with pytest.raises(UsageError, match="no option 'model'"):
        validate_agent_options("claude-code", None, {"model": "x"}, {})
    with pytest.raises(UsageError, match="base_url must be an http"):
        validate_agent_options("claude-code", None, {"base_url": "localhost:8080"}, {})
    with pytest.raises(UsageError, match="exact version"):
        validate_agent_options("claude-code", None, {"version": "^2.0.0"}, {})
    with pytest.raises(UsageError, match="unknown platform"):
        validate_agent_options("claude-code", None, {"platform": "win32-x64"}, {})
    validate_agent_options("claude-code", None, {"base_url": "http://127.0.0.1:9/v1", "version": "2.0.0"}, {})
    agent = create_agent("claude-code", None, {"version": "2.0.0"})
    assert agent.version == "2.0.0"


def test_resume_flag_is_refused_by_agents_that_cannot_resume(monkeypatch):
    from cairn.agents.nop import NopAgent

    class NoResume(NopAgent):
        supports_resume = False

    monkeypatch.setattr("cairn.agents.registry._AGENTS", {"noresume": f"{__name__}:_NoResumeAgent"})
    globals()["_NoResumeAgent"] = NoResume
    with pytest.raises(UsageError, match="cannot continue a session"):
        validate_agent_options("noresume", None, {}, {}, resume=True)
    validate_agent_options("noresume", None, {}, {}, resume=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.undo()
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    validate_agent_options("claude-code", None, {}, {}, resume=True)


def test_llm_without_provider_key_is_a_usage_error(monkeypatch):
    """A missing API key is exit 2 before anything starts, not minutes of retries."""
    from cairn.agents.registry import validate_agent_options
    from cairn.errors import UsageError

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    with pytest.raises(UsageError, match="OPENAI_API_KEY"):
        validate_agent_options("llm", "openai/gpt-4o", {}, {})
    # with a local OpenAI-compatible server no key is needed up front
    validate_agent_options("llm", "openai/gpt-4o", {"api_base": "http://127.0.0.1:9"}, {})


def test_missing_credentials_error_is_classified_auth():
    import os

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    from cairn.agents.llm import _classify

    exc = litellm.InternalServerError(
        message="Missing credentials. Please pass an `api_key`", llm_provider="openai", model="gpt-4o"
    )
    assert _classify(exc, litellm) == "auth"


@pytest.mark.parametrize("agent", ["llm", "claude-code", "oracle", "nop", "aider"])
@pytest.mark.parametrize("value", ["maybe", "", "2", "truee", "none"])
def test_a_non_boolean_ignore_mcp_is_refused_not_read_as_false(monkeypatch, agent, value):
    """Issue 15: ``--ak ignore_mcp=maybe`` was accepted and silently read as false."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-used")
    model = None if agent in ("claude-code", "oracle", "nop") else "openai/gpt-4o-mini"
    with pytest.raises(UsageError, match=f"ignore_mcp={value!r} is not a boolean"):
        validate_agent_options(agent, model, {"ignore_mcp": value}, {})


@pytest.mark.parametrize(
    ("value", "want"),
    [
        ("true", True),
        ("FALSE", False),
        ("1", True),
        ("0", False),
        (" yes ", True),
        ("no", False),
        ("on", True),
        ("off", False),
        (True, True),
        (False, False),
    ],
)
def test_boolean_agent_options_read_the_usual_spellings(value, want):
    from cairn.agents.registry import create_agent

    validate_agent_options("nop", None, {"ignore_mcp": value}, {})
    assert create_agent("nop", None, {"ignore_mcp": value}).ignore_mcp is want


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("max_turns", "1.5", "is not a whole number"),
        ("max_turns", True, "is not a whole number"),
        ("max_turns", "true", "is not a whole number"),
        ("temperature", "nan", "finite number"),
        ("command_timeout_sec", "inf", "finite number"),
        ("model_retries", "-1", "not be negative"),
        ("retry_base_delay_sec", False, "is not a number"),
    ],
)
def test_llm_numeric_options_refuse_bools_fractions_and_non_finite(key, value, message):
    with pytest.raises(UsageError, match=message):
        validate_agent_options("llm", "openai/x", {key: value}, {})


def test_a_non_boolean_agent_option_exits_2_before_start(tmp_path):
    from cairncli import run_cairn
    from taskgen import write_task

    task = write_task(tmp_path, "t")
    p = run_cairn(
        *[
            "run",
            "-p",
            str(task),
            "-a",
            "nop",
            "--ak",
            "ignore_mcp=maybe",
            "--jobs-dir",
            str(tmp_path / "jobs"),
        ],
        timeout=120,
    )
    assert p.returncode == 2, p.stdout + p.stderr
    assert "ignore_mcp='maybe' is not a boolean" in p.stderr
    assert not (tmp_path / "jobs").exists()
