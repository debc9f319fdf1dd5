"""The built-in ``llm`` agent calls a task's stdio MCP server (issue 22): the server is a small
script in the task's image, launched inside the sandbox; the model is scripted."""

from __future__ import annotations

import importlib.util

import pytest

if importlib.util.find_spec("litellm") is None or importlib.util.find_spec("mcp") is None:
    pytest.skip("the llm extra (litellm, mcp) is not installed", allow_module_level=True)

from cairn.agents.llm import LlmAgent  # noqa: E402
from fake_openai import FakeOpenAI, completion, submit_call  # noqa: E402
from taskgen import reward_if, write_task  # noqa: E402
from testbed import run_trial_sync  # noqa: E402

SERVER = r"""
import json, sys
def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n"); sys.stdout.flush()
for line in sys.stdin:
    req = json.loads(line)
    rid, method = req.get("id"), req.get("method")
    if rid is None:
        continue  # notifications
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {
            "protocolVersion": req["params"]["protocolVersion"],
            "capabilities": {"tools": {}}, "serverInfo": {"name": "stamper", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": [{
            "name": "stamp", "description": "Write TEXT to the stamp file.",
            "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}},
                            "required": ["text"]}}]}})
    elif method == "tools/call":
        text = req["params"]["arguments"]["text"]
        open("/app/stamp.txt", "w").write(text + "\n")
        import os
        send({"jsonrpc": "2.0", "id": rid, "result": {"content": [
            {"type": "text", "text": f"stamped {text} as uid {os.getuid()} "
                                     f"mode={os.environ.get('STAMP_MODE')}"}]}})
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": method}})
"""

MCP_TOML = """
[[environment.mcp_servers]]
name = "stamper"
transport = "stdio"
command = "python3"
args = ["/opt/mcp/server.py"]
env = { STAMP_MODE = "test" }
"""


@pytest.mark.docker
@pytest.mark.slow
def test_llm_agent_calls_the_tasks_stdio_mcp_server(tmp_path, monkeypatch):
    from testbed import backend_available

    if not backend_available("docker"):
        pytest.skip("no Docker engine")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-test-key")
    task = write_task(
        tmp_path / "tasks",
        "mcp",
        dockerfile="FROM python:3.12-slim\nWORKDIR /app\nCOPY server.py /opt/mcp/server.py\n",
        files={"environment/server.py": SERVER},
        test=reward_if('[ "$(cat /app/stamp.txt)" = hello ]'),
    )
    toml = task / "task.toml"
    toml.write_text(toml.read_text() + MCP_TOML)
    script = [
        completion(None, [("mcp__stamper__stamp", {"text": "hello"})], (50, 10)),
        submit_call(usage=(70, 5)),
    ]
    with FakeOpenAI(script) as server:
        agent = LlmAgent("openai/gpt-4o-mini", api_base=server.url, retry_base_delay_sec="0.01")
        r = run_trial_sync(task, agent, "docker", tmp_path / "jobs")
        requests = list(server.requests)
    assert r.error is None and r.reward == 1.0, r
    tools = [t["function"]["name"] for t in requests[0]["tools"]]
    assert tools == ["bash", "submit", "mcp__stamper__stamp"]
    assert "[MCP server stamper]" in requests[0]["tools"][2]["function"]["description"]
    answer = [m for m in requests[1]["messages"] if m["role"] == "tool"][0]["content"]
    assert answer == "stamped hello as uid 0 mode=test"


def test_llm_agent_refuses_a_remote_mcp_server(tmp_path):
    from cairn.agents.mcp import check_agent_mcp
    from cairn.task.load import load_task

    task = write_task(tmp_path, "remote")
    toml = task / "task.toml"
    toml.write_text(
        toml.read_text() + '\n[[environment.mcp_servers]]\nname = "r"\n'
        'transport = "streamable-http"\nurl = "http://r.test/mcp"\n'
    )
    why = check_agent_mcp(LlmAgent("openai/gpt-4o-mini"), load_task(task), {})
    assert why is not None and "r (streamable-http)" in why
    assert check_agent_mcp(LlmAgent("openai/gpt-4o-mini"), load_task(task), {"ignore_mcp": "true"}) is None


CRASHING_SERVER = r"""
import sys
sys.stderr.write("\x1b[31mmcp server crashing\n"); sys.stderr.flush()
sys.exit(9)
"""


@pytest.mark.docker
@pytest.mark.slow
def test_a_crashing_mcp_servers_stderr_goes_to_the_job_folder_not_the_terminal(tmp_path, monkeypatch, capfd):
    """Issue 15: a stdio server that writes ANSI text to stderr and exits 9 must not print
    on cairn's terminal; its escaped stderr is in the step's agent folder, named by server."""
    from testbed import backend_available

    if not backend_available("docker"):
        pytest.skip("no Docker engine")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-test-key")
    task = write_task(
        tmp_path / "tasks",
        "mcp-crash",
        dockerfile="FROM python:3.12-slim\nWORKDIR /app\nCOPY server.py /opt/mcp/server.py\n",
        files={"environment/server.py": CRASHING_SERVER},
        test=reward_if("true"),
    )
    toml = task / "task.toml"
    toml.write_text(toml.read_text() + MCP_TOML.replace('"stamper"', '"crasher"'))
    with FakeOpenAI([submit_call(usage=(70, 5))]) as server:
        agent = LlmAgent("openai/gpt-4o-mini", api_base=server.url, retry_base_delay_sec="0.01")
        r = run_trial_sync(task, agent, "docker", tmp_path / "jobs")
        requests = list(server.requests)
    out, err = capfd.readouterr()
    assert "mcp server crashing" not in err and "mcp server crashing" not in out
    assert "\x1b[31m" not in err
    assert r.error is None, r
    assert [t["function"]["name"] for t in requests[0]["tools"]] == ["bash", "submit"]
    [errors] = list((tmp_path / "jobs").rglob("mcp-errors.txt"))
    line = errors.read_text(encoding="utf-8").strip()
    assert line.startswith("MCP server 'crasher' did not start: ")
    assert line.endswith("its stderr (last part): \\x1b[31mmcp server crashing")
    assert "\x1b" not in line
    [log] = list((tmp_path / "jobs").rglob("mcp-crasher.stderr.log"))
    assert log.parent == errors.parent
    assert log.read_text(encoding="utf-8") == "\\x1b[31mmcp server crashing\n"
