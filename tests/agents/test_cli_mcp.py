"""The real Claude Code CLI calls a task's stdio MCP server (issue 22): the server is a small
script in the task's image, registered through ``--mcp-config`` and launched by the CLI inside
the sandbox; the model is scripted (tests/helpers/fake_models.py) and asks for the MCP tool.
The tool call is in the step's ATIF trajectory and its effect (a file the server wrote) is
what the verifier checks."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agent_helpers import needs_sandbox
from cairncli import run_cairn
from cli_scripts import bridge_gateway
from fake_models import FakeModels, Turn
from taskgen import reward_if, write_task

pytestmark = [pytest.mark.docker, pytest.mark.slow, needs_sandbox]

SECRET = "sk-cairn-test-secret-0123456789"

SERVER = r"""
import json, os, sys
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
        with open("/app/stamp.txt", "w") as f:
            f.write(text + " " + os.environ.get("STAMP_MODE", "-") + "\n")
        send({"jsonrpc": "2.0", "id": rid, "result": {"content": [
            {"type": "text", "text": f"stamped {text}"}]}})
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": method}})
"""

MCP_TOML = """
[[environment.mcp_servers]]
name = "stamper"
transport = "stdio"
command = "python3"
args = ["/opt/mcp/server.py"]
env = { STAMP_MODE = "viacli" }
"""

TOOL = "mcp__stamper__stamp"


@pytest.fixture(scope="module")
def claude_runtime():
    """Claude Code's sealed runtime from cairn's cache (prepared on demand)."""
    from cairn.agents.installed import CLAUDE_CODE
    from cairn.agents.runtime import prepare_runtime

    return prepare_runtime(CLAUDE_CODE.name, CLAUDE_CODE.packaging, CLAUDE_CODE.version)


def _tools_of(body: dict) -> list[str]:
    return [t.get("name", "") for t in body.get("tools") or []]


def test_claude_code_calls_the_tasks_stdio_mcp_server(tmp_path, claude_runtime):
    task = write_task(
        tmp_path / "tasks",
        "mcp-cli",
        network="public",
        dockerfile="FROM python:3.12-slim\nWORKDIR /app\nCOPY server.py /opt/mcp/server.py\n",
        files={"environment/server.py": SERVER},
        instruction="Stamp the word hello with the stamper tool.",
        test=reward_if('[ "$(cat /app/stamp.txt)" = "hello viacli" ]'),
    )
    toml = task / "task.toml"
    toml.write_text(toml.read_text() + MCP_TOML)
    script = [
        Turn(text="Stamping.", calls=((TOOL, {"text": "hello"}),), usage=(900, 20, 0)),
        Turn(text="Stamped.", usage=(950, 6, 0)),
    ]

    def consumes(body: dict, path: str) -> bool:  # the main loop offers the MCP tool
        return TOOL in _tools_of(body)

    src = Path(__file__).resolve().parents[2] / "src"
    env = {
        **os.environ,
        "ANTHROPIC_API_KEY": SECRET,
        "PYTHONPATH": f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    with FakeModels(script, host=bridge_gateway(), consumes=consumes) as srv:
        proc = run_cairn(
            *[
                "run",
                "-p",
                str(task),
                "-a",
                "claude-code",
                "-m",
                "anthropic/claude-sonnet-4-5",
                "--ak",
                f"base_url={srv.base_url}",
                # the tool itself in the request, not behind Claude Code's deferred tool search
                # (which a scripted model would have to drive first)
                "--ae",
                "ENABLE_TOOL_SEARCH=false",
                "-e",
                "docker",
                "--no-relay",  # direct mode: the CLI calls the model itself (relay mode: tests/relay)
                "--jobs-dir",
                str(tmp_path / "jobs"),
                "--job-name",
                "j",
            ],
            env=env,
            timeout=900,
        )
        main = srv.main_requests()
        left = srv.script_left
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (trial,) = (tmp_path / "jobs" / "j" / "trials").iterdir()
    result = json.loads((trial / "result.json").read_text())
    agent_dir = next((trial / "steps").glob("*-main")) / "agent"
    out = (
        (agent_dir / "stdout.txt").read_text(errors="replace") if (agent_dir / "stdout.txt").is_file() else ""
    )
    seen = [(r.path, _tools_of(r.body)[-3:]) for r in srv.requests]
    assert result["reward"] == 1.0, (result.get("error"), seen, out[-3000:])  # the effect
    assert left == 0 and len(main) == 2
    # the second request carries the MCP tool's answer back to the model
    assert "stamped hello" in json.dumps(main[1].body)
    traj = json.loads(next((trial / "steps").glob("*-main/agent/trajectory.json")).read_text())
    calls = [c for s in traj["steps"] for c in s.get("tool_calls") or []]
    assert [c["function_name"] for c in calls] == [TOOL]
    assert calls[0]["arguments"] == {"text": "hello"}
    observed = json.dumps([s.get("observation") for s in traj["steps"]])
    assert "stamped hello" in observed
