"""The ``llm`` agent's LiteLLM client through the relay, for each provider prefix it relays
(openai/, anthropic/, gemini/): the URLs it is given reach the right route, and the usage the
relay records is the server's bill."""

from __future__ import annotations

import importlib.util
import types

import pytest
from _relayfix import UPSTREAM_KEY, relay_for, with_server

from cairn.agents.llm import LlmAgent
from wire_models import Bill, Say, WireModels

pytestmark = pytest.mark.skipif(importlib.util.find_spec("litellm") is None, reason="needs the llm extra")


@pytest.mark.parametrize(
    ("model", "route"),
    [
        ("openai/m", "/v1/chat/completions"),
        ("anthropic/m", "/v1/messages"),
        ("gemini/m", "/v1beta/models/m:generateContent"),
    ],
)
def test_llm_agent_calls_reach_the_relay_and_are_billed(model, route, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", UPSTREAM_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", UPSTREAM_KEY)
    monkeypatch.setenv("GEMINI_API_KEY", UPSTREAM_KEY)

    async def body(server: WireModels) -> None:
        agent = LlmAgent(model, api_base=server.base_url, retry_base_delay_sec="0.01")
        wanted = agent.relay_wanted()
        assert wanted is not None and wanted.upstream.api_key == UPSTREAM_KEY
        assert wanted.upstream.base_url == server.base_url
        async with relay_for(server) as relay:
            lease = relay.open_trial("t")
            agent.use_relay(relay.url, lease)
            agent._messages = [{"role": "user", "content": "hi"}]
            response, retries = await agent._complete(types.SimpleNamespace(metadata={}))
            assert retries == 0 and response.usage.prompt_tokens == 50
            assert [r.endpoint for r in lease.records] == [route]
            assert lease.totals().usage.input_tokens == server.billed().input == 50
        seen = server.requests[0].headers
        assert lease.token not in str(seen) and UPSTREAM_KEY in str(seen)

    with_server([Say(bill=Bill(50, 7))], body)


def test_relay_off_and_unrelayed_providers_call_directly():
    assert LlmAgent("openai/m", relay="off").relay_wanted() is None
    assert LlmAgent("ollama/llama3").relay_wanted() is None
