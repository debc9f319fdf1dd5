"""skills_dir and mcp_servers: refused before start for agents that take neither (issue #21)."""

from __future__ import annotations

import shutil
from pathlib import Path

from cairn.agents.base import Agent
from cairn.agents.nop import NopAgent
from cairn.errors import ErrorKind
from cairn.results.model import Outcome
from cairn.task.load import load_task
from testbed import run_trial_sync

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "harbor026"


class PlainAgent(Agent):
    name = "plain"

    async def run(self, instruction, sandbox, context):  # never reached: refused first
        raise AssertionError("ran")


class SkilledAgent(PlainAgent):
    name = "skilled"
    task_context = frozenset({"skills"})


def _task(tmp_path: Path, extra: str) -> Path:
    root = shutil.copytree(FIXTURES / "verifier-env-implies-separate", tmp_path / "t")
    toml = root / "task.toml"
    toml.write_text(toml.read_text().replace("[agent]", extra + "\n[agent]"))
    return root


def test_skills_dir_refused_for_an_agent_without_skills(tmp_path):
    root = _task(tmp_path, '[environment]\nskills_dir = "/skills"\n')
    task = load_task(root)
    assert PlainAgent().refusal(task) == (
        "agent 'plain' takes no skills: [environment].skills_dir = '/skills' would be ignored "
        "(cairn does not copy skills for it)"
    )
    assert SkilledAgent().refusal(task) is None
    assert NopAgent().refusal(task) is None  # acts on no instruction
    r = run_trial_sync(root, PlainAgent(), "docker", tmp_path / "jobs")
    assert r.outcome is Outcome.ERRORED and r.error.kind is ErrorKind.CONFIG_ERROR
    assert "takes no skills" in r.error.message and r.steps_run == 0


def test_mcp_servers_refused_for_an_agent_without_mcp(tmp_path):
    root = _task(
        tmp_path, '[[environment.mcp_servers]]\nname = "files"\ntransport = "stdio"\ncommand = "mcp-files"\n'
    )
    assert "takes no MCP servers: [environment].mcp_servers (1)" in PlainAgent().refusal(load_task(root))
