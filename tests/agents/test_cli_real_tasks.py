"""The real agent CLIs given what real tasks hold (issue 29): every installed agent, at its
pinned version, in Docker, against the scripted model server (tests/helpers/fake_models.py).

- The instruction starts with ``- `` (as Terminal-Bench 2 instructions do), holds quotes,
  backticks and ``$(…)``, and is over 128 KiB (one argument's limit on Linux): it reaches the
  model exactly, nothing in it runs, and the step passes.
- The scripted tool call writes a file outside the working dir (``/etc``): no CLI rejects it
  (opencode's ``external_directory`` permission, Gemini CLI's workspace check).
- A CLI that exits on its own permission error (Claude Code as root without ``IS_SANDBOX``) is
  an agent error whose message is in result.json, not a silent score of 0.

Kept to one trial per CLI (20-60 s each on 2 cores). The runtimes are prepared on demand into
cairn's cache, as tests/agents/test_cli_agents.py does.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from agent_helpers import needs_sandbox
from cli_scripts import JOB_NAME, bridge_gateway, consumes, consumes_any, run_cli_job
from fake_models import FakeModels, Turn
from taskgen import write_task

pytestmark = [pytest.mark.docker, pytest.mark.slow, needs_sandbox]

AGENTS = {
    "claude-code": ("anthropic/claude-sonnet-4-5", "ANTHROPIC_API_KEY"),
    "codex": ("openai/scripted-model", "OPENAI_API_KEY"),
    "opencode": ("openai/scripted-model", "OPENAI_API_KEY"),
    "gemini-cli": ("google/gemini-2.5-flash", "GEMINI_API_KEY"),
    "qwen-code": ("openai/scripted-model", "OPENAI_API_KEY"),
    "aider": ("openai/scripted-model", "OPENAI_API_KEY"),
    "mini-swe-agent": ("openai/scripted-model", "OPENAI_API_KEY"),
}
SECRET = "sk-cairn-test-secret-0123456789"
OUTSIDE = "/etc/cairn-outside.txt"
"""The file the agent's tool call writes: outside the working dir /app."""

HEAD = (
    "- Write the number 1 into /etc/cairn-outside.txt. It's \"quoted\", 'single', "
    "`touch /app/PWNED-backtick`, $(touch /app/PWNED) and ${HOME} -- --help -p\n"
)
PAD = "".join(f"- item {i}: keep this line -- --version --yolo\n" for i in range(3500))
INSTRUCTION = HEAD + PAD + "The end of the instruction.\n"
"""Starts with "- ", quotes, backticks, $(…); over 128 KiB (MAX_ARG_STRLEN is 131072 bytes)."""
SHORT = HEAD + "The end of the instruction.\n"
"""The same under the argument limit (what a bare-argument prompt trips on: the leading "-")."""

TEST_SH = (
    'if [ "$(cat /etc/cairn-outside.txt 2>/dev/null)" = 1 ] && [ ! -e /app/PWNED ] '
    "&& [ ! -e /app/PWNED-backtick ]; then echo 1 > /logs/verifier/reward.txt; "
    "else echo 0 > /logs/verifier/reward.txt; fi\n"
)
AIDER_TEST_SH = TEST_SH.replace("/etc/cairn-outside.txt 2>/dev/null", "/app/a.txt 2>/dev/null")


@pytest.fixture(scope="session")
def all_runtimes():
    """Every installed agent's runtime, prepared once in the shared cache."""
    from cairn.agents.installed import (
        AIDER,
        CLAUDE_CODE,
        CODEX,
        GEMINI_CLI,
        MINI_SWE_AGENT,
        OPENCODE,
        QWEN_CODE,
    )
    from cairn.agents.runtime import prepare_any

    return {
        spec.name: prepare_any(spec.name, spec.packaging, spec.version, "linux-x64")
        for spec in (CLAUDE_CODE, CODEX, OPENCODE, GEMINI_CLI, QWEN_CODE, AIDER, MINI_SWE_AGENT)
    }


def _write_call(agent: str) -> tuple[str, dict[str, Any]]:
    """The CLI's own file-writing tool (codex and mini-swe-agent: their shell)."""
    shell = f"printf '1\\n' > {OUTSIDE}"
    return {
        "claude-code": ("Write", {"file_path": OUTSIDE, "content": "1\n"}),
        "codex": ("exec_command", {"cmd": shell}),
        "opencode": ("write", {"filePath": OUTSIDE, "content": "1\n"}),
        "gemini-cli": ("write_file", {"file_path": OUTSIDE, "content": "1\n"}),
        "qwen-code": ("write_file", {"file_path": OUTSIDE, "content": "1\n"}),
        "mini-swe-agent": ("bash", {"command": shell}),
    }[agent]


def _script(agent: str) -> list[Turn]:
    if agent == "aider":  # no tools: a whole-file edit it applies itself (in the repo)
        return [Turn(text="Writing a.txt.\n\na.txt\n```\n1\n```\n")]
    if agent == "mini-swe-agent":
        return [
            Turn(text="Writing.", calls=(_write_call(agent),)),
            Turn(
                text="Submitting.",
                calls=(("bash", {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}),),
            ),
        ]
    return [Turn(text="Writing the file.", calls=(_write_call(agent),)), Turn(text="Done.")]


def _task(root: Path, agent: str, instruction: str = INSTRUCTION) -> Path:
    task = write_task(
        root,
        "real",
        instruction=instruction,
        network="public",
        test=AIDER_TEST_SH if agent == "aider" else TEST_SH,
        solve=None,
    )
    assert (task / "instruction.md").read_text() == instruction
    return task


def _cairn_run(
    task: Path, agent: str, server: FakeModels, jobs: Path, *extra: str
) -> tuple[subprocess.CompletedProcess, dict]:
    model, key = AGENTS[agent]
    proc = run_cli_job(
        task,
        agent,
        model=model,
        base_url=server.base_url,
        jobs=jobs,
        env={key: SECRET},
        extra=["--max-retries", "0", *extra],
    )  # direct mode: the CLI calls the model itself (relay mode: tests/relay)
    trials = list((jobs / JOB_NAME / "trials").glob("*/result.json"))
    assert len(trials) == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads(trials[0].read_text())


def _carries_exactly(body: dict, text: str) -> bool:
    """Whether the request holds ``text`` (trailing newline aside) as one JSON string part."""
    return json.dumps(text.strip(), ensure_ascii=False)[1:-1] in json.dumps(body, ensure_ascii=False)


@pytest.mark.parametrize(
    ("agent", "instruction"),
    [
        *((a, INSTRUCTION) for a in AGENTS),
        # the three CLIs whose prompt was a bare argument: the leading "-" alone broke them
        *((a, SHORT) for a in ("claude-code", "opencode", "gemini-cli")),
    ],
    ids=[
        *(f"{a}-over-128k" for a in AGENTS),
        *(f"{a}-short" for a in ("claude-code", "opencode", "gemini-cli")),
    ],
)
def test_cli_takes_a_hostile_instruction_and_writes_outside_its_working_dir(
    tmp_path, all_runtimes, agent, instruction
):
    assert len(INSTRUCTION.encode()) > 128 * 1024 > len(SHORT.encode())
    task = _task(tmp_path / "tasks", agent, instruction)
    picks = consumes_any if agent in ("aider", "mini-swe-agent") else consumes
    with FakeModels(
        _script(agent), host=bridge_gateway(), consumes=picks, done_turn=Turn(text="Done.")
    ) as srv:
        proc, result = _cairn_run(task, agent, srv, tmp_path / "jobs")
        main = srv.main_requests()
    (step,) = result["steps"]
    assert step["agent_exit"] == "ok", (step, proc.stderr[-2000:])
    assert main and _carries_exactly(main[0].body, instruction), (
        json.dumps(main[0].body)[:2000] if main else proc.stderr[-2000:]
    )
    assert step["reward"] == 1.0, step  # the file outside /app is written; nothing in it ran
    assert result["reward"] == 1.0 and proc.returncode == 0, proc.stderr[-2000:]


def test_cli_exiting_on_its_own_permission_error_is_an_agent_error_with_its_message(tmp_path, all_runtimes):
    """Claude Code refuses --dangerously-skip-permissions as root unless IS_SANDBOX is set:
    with ``--ae IS_SANDBOX=0`` it exits 1 before any model call."""
    task = _task(tmp_path / "tasks", "claude-code")
    with FakeModels(_script("claude-code"), host=bridge_gateway(), consumes=consumes) as srv:
        _proc, result = _cairn_run(task, "claude-code", srv, tmp_path / "jobs", "--ae", "IS_SANDBOX=0")
        assert srv.main_requests() == []
    (step,) = result["steps"]
    assert step["agent_exit"] == "error"
    assert step["reward"] == 0.0
    messages = [w for w in step["warnings"] if w.startswith("agent error: ")]
    assert messages == [
        "agent error: claude exited with code 1: --dangerously-skip-permissions "
        "cannot be used with root/sudo privileges for security reasons"
    ], step
