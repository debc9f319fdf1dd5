"""Provider-side tools (web search, code execution, remote MCP) are stripped unless the trial
allows them: they would reach the internet from the provider, past the sandbox's policy."""

from __future__ import annotations

import pytest
from _relayfix import client, relay_for, request_of, with_server

from wire_models import WireModels

FUNCTION = {"type": "function", "function": {"name": "bash", "parameters": {}}}
CASES = {
    "anthropic": (
        [
            {"name": "bash", "input_schema": {}},
            {"type": "web_search_20250305", "name": "web_search"},
            {"type": "code_execution_20250522", "name": "code_execution"},
        ],
        ["web_search_20250305", "code_execution_20250522"],
        {"mcp_servers": [{}]},
    ),
    "responses": (
        [
            {"type": "function", "name": "shell", "parameters": {}},
            {"type": "web_search"},
            {"type": "mcp", "server_url": "https://x"},
        ],
        ["web_search", "mcp"],
        {},
    ),
    "chat": ([FUNCTION], [], {"web_search_options": {}}),
    "gemini-sse": (
        [{"functionDeclarations": [{"name": "bash"}]}, {"googleSearch": {}}, {"codeExecution": {}}],
        ["googleSearch", "codeExecution"],
        {},
    ),
}


@pytest.mark.parametrize("proto", list(CASES))
@pytest.mark.parametrize("allowed", [False, True], ids=["stripped", "public"])
def test_provider_side_tools_are_stripped_unless_allowed(proto, allowed):
    tools, names, extra = CASES[proto]

    async def body(server: WireModels) -> None:
        async with relay_for(server) as relay:
            lease = relay.open_trial("t")
            lease.provider_tools = allowed
            path, headers, req = request_of(proto, lease.token)
            async with client(relay) as c:
                r = await c.post(path, headers=headers, json={**req, "tools": tools, **extra})
            assert r.status_code == 200
            sent = server.requests[0].body
            if allowed:
                assert sent["tools"] == tools and lease.records[0].stripped_tools is None
                assert all(k in sent for k in extra)
                return
            want = names + list(extra)
            assert lease.records[0].stripped_tools == want
            assert len(sent["tools"]) == len(tools) - len(names)  # client tools kept
            assert not any(k in sent for k in extra)

    with_server([], body)
