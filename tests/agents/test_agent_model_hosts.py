"""Model hosts of agents (issue 14): what an in-sandbox agent declares for its agent phases."""

from __future__ import annotations

import pytest

from cairn.agents.installed import ClaudeCodeAgent, CodexAgent, OpenCodeAgent
from cairn.errors import UsageError


def test_installed_agents_default_to_their_provider_api(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert ClaudeCodeAgent().model_hosts({}) == ["api.anthropic.com"]
    assert CodexAgent().model_hosts({}) == ["api.openai.com"]
    assert OpenCodeAgent("openrouter/some-model").model_hosts({}) == ["openrouter.ai"]
    assert OpenCodeAgent("unknownprovider/x").model_hosts({}) == []


def test_base_url_from_ak_ae_or_host_environment(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "https://proxy.corp.example:8443/anthropic")
    assert ClaudeCodeAgent().model_hosts({}) == ["proxy.corp.example"]
    assert ClaudeCodeAgent().model_hosts({"ANTHROPIC_BASE_URL": "http://10.9.8.7:4000"}) == ["10.9.8.7"]
    agent = CodexAgent(base_url="http://model.test:8000/v1")
    assert agent.model_hosts({"OPENAI_BASE_URL": "http://ignored.test"}) == ["model.test"]


def test_base_url_reaches_the_cli_where_it_reads_it():
    from pathlib import Path

    from cairn.agents.base import AgentContext

    ctx = AgentContext(
        task=None,
        step=None,
        logs_dir=Path("/nonexistent"),  # type: ignore[arg-type]
        timeout_sec=1.0,
    )
    claude = ClaudeCodeAgent(base_url="http://model.test:8000/v1")
    assert claude._env(ctx)["ANTHROPIC_BASE_URL"] == "http://model.test:8000"
    codex = CodexAgent(base_url="http://model.test:8000/v1")
    assert 'base_url = "http://model.test:8000/v1"' in codex._config_files()[".codex/config.toml"]


def test_llm_agent_talks_from_the_host():
    from cairn.agents.llm import LlmAgent

    assert LlmAgent("openai/gpt-4o").model_hosts({}) == []


def test_unknown_option_still_refused():
    with pytest.raises(UsageError, match="no option 'base'"):
        CodexAgent(base="x")
