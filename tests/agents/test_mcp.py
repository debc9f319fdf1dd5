"""A task's MCP servers in each CLI agent's native configuration (issue 22)."""

from __future__ import annotations

import asyncio
import json
import time
import tomllib

import pytest

from cairn.agents.mcp import (
    CODEX_MARKER,
    McpServer,
    check_agent_mcp,
    install_mcp_config,
    parse_mcp_servers,
    render_claude_code,
    render_codex,
    render_opencode,
    self_downloading,
)
from cairn.agents.registry import create_agent, validate_agent_options
from cairn.task.load import load_task
from taskgen import write_task

ENTRIES = [
    {
        "name": "files",
        "transport": "stdio",
        "command": "python3",
        "args": ["/opt/mcp/files.py", "--root", "/app"],
        "env": {"ROOT": "/app"},
    },
    {"name": "search", "transport": "sse", "url": "http://search.test:8000/sse"},
    {"name": "docs", "transport": "http", "url": "https://docs.test/mcp"},
]

MCP_TOML = """
[[environment.mcp_servers]]
name = "files"
transport = "stdio"
command = "python3"
args = ["/opt/mcp/files.py"]
"""


def test_parse_reads_transports_and_refuses_bad_entries():
    files, search, docs = parse_mcp_servers(ENTRIES)
    assert files == McpServer(
        "files", "stdio", "python3", ("/opt/mcp/files.py", "--root", "/app"), {"ROOT": "/app"}
    )
    assert search.transport == "sse" and search.url == "http://search.test:8000/sse"
    assert docs.transport == "streamable-http"  # "http" is read as streamable-http
    bad = [
        ([{"transport": "stdio", "command": "x"}], "`name`"),
        ([{"name": "a", "transport": "stdio"}], "needs `command`"),
        ([{"name": "a", "transport": "sse"}], "needs `url`"),
        ([{"name": "a", "transport": "websocket", "url": "ws://x"}], "`transport`"),
        ([{"name": "a", "command": "x"}, {"name": "a", "command": "y"}], "declared twice"),
        ([{"name": "a", "command": "x", "args": [1]}], "`args`"),
    ]
    for entries, text in bad:
        with pytest.raises(ValueError, match=text):
            parse_mcp_servers(entries)


def test_claude_code_config():
    cfg = json.loads(render_claude_code(parse_mcp_servers(ENTRIES)))
    assert cfg == {
        "mcpServers": {
            "files": {
                "type": "stdio",
                "command": "python3",
                "args": ["/opt/mcp/files.py", "--root", "/app"],
                "env": {"ROOT": "/app"},
            },
            "search": {"type": "sse", "url": "http://search.test:8000/sse"},
            "docs": {"type": "http", "url": "https://docs.test/mcp"},
        }
    }


def test_codex_config_is_valid_toml_without_sse():
    servers = [s for s in parse_mcp_servers(ENTRIES) if s.transport != "sse"]
    servers.append(McpServer('quote"d', "stdio", "sh", ("-c", 'echo "hi"\n'), {}))
    cfg = tomllib.loads(render_codex(servers))
    assert cfg["mcp_servers"]["files"] == {
        "command": "python3",
        "args": ["/opt/mcp/files.py", "--root", "/app"],
        "env": {"ROOT": "/app"},
    }
    assert cfg["mcp_servers"]["docs"] == {"url": "https://docs.test/mcp"}
    assert cfg["mcp_servers"]['quote"d']["args"] == ["-c", 'echo "hi"\n']


def test_opencode_config():
    cfg = json.loads(render_opencode(parse_mcp_servers(ENTRIES)))
    assert cfg["mcp"]["files"] == {
        "type": "local",
        "command": ["python3", "/opt/mcp/files.py", "--root", "/app"],
        "environment": {"ROOT": "/app"},
        "enabled": True,
    }
    assert cfg["mcp"]["search"] == {"type": "remote", "url": "http://search.test:8000/sse", "enabled": True}


def test_self_downloading_servers():
    assert self_downloading(McpServer("a", "stdio", "npx", ("-y", "@x/server")))
    assert self_downloading(McpServer("a", "stdio", "/usr/local/bin/uvx", ("mcp-x",)))
    assert self_downloading(McpServer("a", "stdio", "pipx", ("run", "mcp-x")))
    assert not self_downloading(McpServer("a", "stdio", "python3", ("/opt/s.py",)))
    assert not self_downloading(McpServer("a", "sse", url="http://x/sse"))


@pytest.mark.parametrize(
    ("command", "args", "shown"),
    [
        ("npx", ("-y", "@x/server"), "npx"),
        ("/usr/bin/env", ("npx", "-y", "@x/server"), "/usr/bin/env npx"),
        ("env", ("-u", "HOME", "--", "npx", "@x/server"), "env -u HOME -- npx"),
        ("/usr/bin/env", ("-S", "uvx mcp-x"), "uvx"),
        ("timeout", ("60", "/usr/local/bin/uvx", "mcp-x"), "timeout 60 /usr/local/bin/uvx"),
        ("env", ("pipx", "run", "mcp-x"), "env pipx run"),
        ("npm", ("exec", "@x/server"), "npm exec"),
        ("env", ("python3", "/opt/s.py"), None),
        ("/usr/bin/env", (), None),
        ("npm", ("start",), None),
    ],
)
def test_self_download_command_sees_through_wrappers(command, args, shown):
    from cairn.task.mcp import self_download_command

    server = McpServer("a", "stdio", command, args)
    assert self_download_command(server) == shown
    assert self_downloading(server) is (shown is not None)


@pytest.mark.parametrize(
    ("url", "host", "loopback"),
    [
        ("http://LOCALHOST.:8000/mcp", "localhost", True),
        ("http://127.0.0.2:1/sse", "127.0.0.2", True),
        ("http://[::1]:1/mcp", "::1", True),
        ("http://0.0.0.0:1/mcp", "0.0.0.0", True),
        ("http://tools:8000/sse", "tools", False),
        ("https://api.example.com/mcp", "api.example.com", False),
        ("http://10.0.0.5/mcp", "10.0.0.5", False),
        ("http://${HOST}:1/sse", None, None),
    ],
)
def test_remote_host_and_loopback(url, host, loopback):
    from cairn.task.mcp import is_loopback_host, remote_host

    assert remote_host(McpServer("a", "sse", url=url)) == host
    if host is not None:
        assert is_loopback_host(host) is loopback
    assert remote_host(McpServer("a", "stdio", "python3")) is None


def test_agents_without_mcp_refuse_unless_ignore_mcp(tmp_path):
    task = load_task(write_task(tmp_path, "mcp", toml_extra="", files={}))
    mcp_task = write_task(tmp_path, "mcp2")
    toml = mcp_task / "task.toml"
    toml.write_text(toml.read_text() + MCP_TOML)
    mcp = load_task(mcp_task)
    assert check_agent_mcp(create_agent("oracle", None, {}), mcp, {}) is None  # needs no model
    claude = create_agent("claude-code", None, {})
    assert check_agent_mcp(claude, mcp, {}) is None
    assert check_agent_mcp(claude, task, {}) is None

    class NoMcp:  # a model-driven agent that declares no MCP support
        name, needs_model, mcp_transports = "plain", True, ()

    why = check_agent_mcp(NoMcp(), mcp, {})
    assert why is not None and "files (stdio)" in why and "ignore_mcp=true" in why
    assert check_agent_mcp(NoMcp(), mcp, {"ignore_mcp": "true"}) is None
    # every agent takes the option; it is not passed to the agent's constructor
    validate_agent_options("claude-code", None, {"ignore_mcp": "true"}, {"ANTHROPIC_API_KEY": "x"})
    assert create_agent("claude-code", None, {"ignore_mcp": "true"}).ignore_mcp is True


def test_codex_refuses_an_sse_server(tmp_path):
    task = write_task(tmp_path, "sse")
    toml = task / "task.toml"
    toml.write_text(
        toml.read_text() + '\n[[environment.mcp_servers]]\nname = "s"\n'
        'transport = "sse"\nurl = "http://s.test/sse"\n'
    )
    why = check_agent_mcp(create_agent("codex", None, {}), load_task(task), {})
    assert why is not None and "s (sse)" in why


@pytest.mark.docker
def test_configs_written_inside_the_sandbox(tmp_path):
    from testbed import backend_available

    if not backend_available("docker"):
        pytest.skip("no Docker engine")
    from cairn.sandbox.base import NetworkMode, SandboxSpec
    from cairn.sandbox.docker.backend import DockerSandbox

    task_dir = write_task(tmp_path, "mcp")
    toml = task_dir / "task.toml"
    toml.write_text(toml.read_text() + MCP_TOML)
    task = load_task(task_dir)
    env = tmp_path / "env"
    env.mkdir()
    (env / "Dockerfile").write_text("FROM python:3.12-slim\nRUN useradd -m agent\n")

    async def main():
        spec = SandboxSpec(
            env_dir=env,
            network_mode=NetworkMode.NO_NETWORK,
            job_id="mcp",
            trial_id=f"mcp-{time.time_ns()}",
            name="mcp",
        )
        async with DockerSandbox(spec) as sb:
            cmd, extra = await install_mcp_config("claude-code", task, sb, "claude -p hi", user="agent")
            path = cmd.split("--mcp-config ", 1)[1]
            claude = (await sb.exec(["cat", path], user="agent")).stdout
            _, oc_env = await install_mcp_config("opencode", task, sb, "opencode run x", user="agent")
            opencode = (await sb.exec(["cat", oc_env["OPENCODE_CONFIG"]], user="agent")).stdout
            for _ in range(2):  # one block however many steps run the CLI
                await install_mcp_config("codex", task, sb, "codex exec x", user="agent")
            codex = (await sb.exec("cat $HOME/.codex/config.toml", user="agent")).stdout
            nothing = await install_mcp_config(
                "claude-code", task, sb, "claude -p hi", user="agent", ignore=True
            )
            return cmd, extra, claude, opencode, codex, nothing

    cmd, extra, claude, opencode, codex, nothing = asyncio.run(main())
    assert cmd.startswith("claude -p hi --mcp-config /") and extra == {}
    assert json.loads(claude)["mcpServers"]["files"]["args"] == ["/opt/mcp/files.py"]
    assert json.loads(opencode)["mcp"]["files"]["command"] == ["python3", "/opt/mcp/files.py"]
    assert codex.count(CODEX_MARKER) == 1
    assert tomllib.loads(codex)["mcp_servers"]["files"]["command"] == "python3"
    assert nothing == ("claude -p hi", {})
