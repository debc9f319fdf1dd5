"""``cairn tasks check`` on judge verifiers and MCP servers (issue 22)."""

from __future__ import annotations

import json

from cairn.task.load import check_paths
from taskgen import StepSpec, write_task

JUDGE = '[verifier.env]\nOPENAI_API_KEY = "${OPENAI_API_KEY}"\n'


def _findings(task):
    (result,) = check_paths([task])
    return result, [(f.severity, f.text) for f in result.findings]


def _with(task, extra):
    toml = task / "task.toml"
    toml.write_text(toml.read_text() + extra)
    return task


def test_judge_under_no_network_warns_about_the_gateway(tmp_path):
    result, found = _findings(write_task(tmp_path, "j", toml_extra=JUDGE))
    assert result.ok
    (warning,) = [t for s, t in found if s == "warning" and "judge" in t]
    assert "OPENAI_API_KEY" in warning and "docker" in warning and "-e local" in warning
    _, public = _findings(write_task(tmp_path, "p", toml_extra=JUDGE, network="public"))
    assert not any("judge" in t for _, t in public)
    _, literal = _findings(write_task(tmp_path, "l", toml_extra='[verifier.env]\nOPENAI_API_KEY = "sk-x"\n'))
    assert not any("judge" in t for _, t in literal)


def test_embedded_judge_template_is_an_error(tmp_path):
    task = write_task(
        tmp_path, "e", toml_extra='[verifier.env]\nOPENAI_API_KEY = "Bearer ${OPENAI_API_KEY}"\n'
    )
    result, found = _findings(task)
    assert not result.ok
    assert any(s == "error" and "verifier.env.OPENAI_API_KEY" in t for s, t in found)


def test_self_downloading_mcp_server_under_no_network_warns(tmp_path):
    npx = (
        '\n[[environment.mcp_servers]]\nname = "fs"\ntransport = "stdio"\ncommand = "npx"\n'
        'args = ["-y", "@modelcontextprotocol/server-filesystem", "/app"]\n'
    )
    result, found = _findings(_with(write_task(tmp_path, "n"), npx))
    assert result.ok
    (warning,) = [t for s, t in found if s == "warning" and "MCP" in t]
    assert "'fs'" in warning and "npx" in warning and "install it in the image" in warning
    _, public = _findings(_with(write_task(tmp_path, "p", network="public"), npx))
    assert not any("MCP" in t for _, t in public)
    local = npx.replace('"npx"', '"python3"').replace(
        '"-y", "@modelcontextprotocol/server-filesystem", "/app"', '"/opt/s.py"'
    )
    _, fine = _findings(_with(write_task(tmp_path, "f"), local))
    assert not any("MCP" in t for _, t in fine)


def test_unreadable_mcp_entry_is_an_error_with_its_line(tmp_path):
    bad = '\n[[environment.mcp_servers]]\nname = "s"\ntransport = "sse"\n'
    result, found = _findings(_with(write_task(tmp_path, "b"), bad))
    assert not result.ok
    (error,) = [f for f in result.findings if f.severity == "error"]
    assert "needs `url`" in error.text and error.line is not None


def _mcp(name, **keys):
    body = "".join(f"{k} = {json.dumps(v)}\n" for k, v in keys.items())
    return f'\n[[environment.mcp_servers]]\nname = "{name}"\n{body}'


def _rules(result, rule):
    return [f for f in result.findings if f.rule == rule]


REMOTE = (
    _mcp("far", transport="sse", url="http://search.example.com:8000/sse")
    + _mcp("lo", transport="streamable-http", url="http://localhost:7000/mcp")
    + _mcp("v4", transport="sse", url="http://127.0.0.1:7001/sse")
    + _mcp("v6", transport="streamable-http", url="http://[::1]:7002/mcp")
    + _mcp("svc", transport="sse", url="http://tools:8000/sse")
    + _mcp("alias", transport="streamable-http", url="http://search-alias:8000/mcp")
    + _mcp("tpl", transport="sse", url="http://${MCP_HOST}:8000/sse")
)


def test_a_remote_mcp_server_outside_the_sandbox_under_no_network_warns(tmp_path):
    """Only `far` (an outside host), and `svc`/`alias` while no compose file defines them: the
    loopback servers run in the sandbox, and a templated host is not judged."""
    result, _ = _findings(_with(write_task(tmp_path, "r"), REMOTE))
    assert result.ok
    toml = (result.path / "task.toml").read_text().splitlines()
    found = {f.text.split("'")[1]: f for f in _rules(result, "mcp-remote-no-network")}
    assert sorted(found) == ["alias", "far", "svc"]
    far = found["far"]
    assert far.line == toml.index('name = "far"')  # the entry's [[environment.mcp_servers]]
    assert far.text == (
        "MCP server 'far' (sse) is at `http://search.example.com:8000/sse`, but the agent phase "
        "has no network (no-network): the agent runs in the sandbox and reaches only its own "
        "loopback, not `search.example.com`; run the server in the sandbox (`localhost`) or as a "
        'compose service, or let the agent phase reach it (`network_mode = "allowlist"` with '
        "`search.example.com` in `allowed_hosts`)"
    )
    public, _ = _findings(_with(write_task(tmp_path, "p", network="public"), REMOTE))
    assert _rules(public, "mcp-remote-no-network") == []


COMPOSE = """services:
  main:
    build: .
  tools:
    image: python:3.12-slim
    networks:
      default:
        aliases: [search-alias]
"""


def test_a_compose_service_or_alias_is_reachable_under_no_network(tmp_path):
    task = write_task(tmp_path, "c", files={"environment/docker-compose.yaml": COMPOSE})
    result, _ = _findings(_with(task, REMOTE))
    assert result.ok, result.findings
    (far,) = _rules(result, "mcp-remote-no-network")
    assert "'far'" in far.text
    assert (
        "reaches only its own loopback and the compose services (main, search-alias, "
        "tools), not `search.example.com`"
    ) in far.text


def test_the_remote_rule_names_the_offline_steps_of_a_multi_step_task(tmp_path):
    task = write_task(
        tmp_path,
        "m",
        network="public",
        steps=[
            StepSpec("online"),
            StepSpec("offline", toml_extra='[steps.agent]\nnetwork_mode = "no-network"\n'),
        ],
    )
    result, _ = _findings(_with(task, _mcp("far", transport="sse", url="https://x.example/sse")))
    (far,) = _rules(result, "mcp-remote-no-network")
    assert "but the agent phase of step `offline` has no network" in far.text


def test_an_npx_server_through_env_gets_the_download_warning(tmp_path):
    """`/usr/bin/env npx`, `env npx`, `env -S "npx …"` and `env VAR=1 npx` are npx."""
    spellings = {
        "abs": ("/usr/bin/env", ["npx", "-y", "@x/server"], "/usr/bin/env npx"),
        "bare": ("env", ["npx", "-y", "@x/server"], "env npx"),
        "split": ("env", ["-S", "npx -y @x/server"], "npx"),
        "assign": (
            "/usr/bin/env",
            ["-i", "NODE_ENV=production", "npx", "@x/server"],
            "/usr/bin/env -i NODE_ENV=production npx",
        ),
        "plain": ("npx", ["-y", "@x/server"], "npx"),
    }
    extra = "".join(_mcp(k, transport="stdio", command=c, args=a) for k, (c, a, _) in spellings.items())
    extra += _mcp("node", transport="stdio", command="/usr/bin/env", args=["node", "/opt/s.js"])
    result, _ = _findings(_with(write_task(tmp_path, "e"), extra))
    found = {f.text.split("'")[1]: f.text for f in _rules(result, "mcp-download-no-network")}
    assert sorted(found) == sorted(spellings)  # not `node`: it runs what the image has
    for name, (_, _, shown) in spellings.items():
        assert found[name] == (
            f"MCP server {name!r} runs `{shown} …`, which downloads the "
            "server when it starts, but the agent phase has no network: "
            "install it in the image instead"
        )
