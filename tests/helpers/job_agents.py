"""Agents for the job tests, loaded by import path (``-a job_agents:FlakySetupAgent``) exactly as
a user's own agent class would be (design §10). The tests folder must be on ``PYTHONPATH``.
"""

from __future__ import annotations

import os
from pathlib import Path

from cairn.agents.base import AgentContext
from cairn.agents.oracle import OracleAgent
from cairn.errors import ErrorKind, ModelError
from cairn.sandbox.base import Sandbox


class FlakySetupAgent(OracleAgent):
    """The oracle, whose ``setup()`` fails the first time it is ever called: it checks the
    sandbox really answers (an exec), then fails unless ``--ak marker=PATH`` exists on the host,
    creating it. A real infra hiccup seen by the engine as ``agent_setup_failed``."""

    name = "flaky-setup"

    async def setup(self, sandbox: Sandbox, context: AgentContext) -> None:
        """Fail once per marker file (then succeed)."""
        probe = await sandbox.exec(["true"])
        assert probe.exit_code == 0
        marker = Path(str(self.kwargs["marker"]))
        if not marker.exists():
            marker.write_text("failed once\n")
            raise ConnectionError("agent installer could not reach its mirror (simulated)")


class CostlyAgent(OracleAgent):
    """The oracle, reporting a cost of ``--ak usd=X`` dollars (default 1.0) per step."""

    name = "costly"

    async def run(self, instruction: str, sandbox: Sandbox, context: AgentContext) -> None:
        """Solve, then report the cost."""
        await super().run(instruction, sandbox, context)
        context.cost_usd = float(self.kwargs.get("usd", 1.0))


class AuthFailAgent(OracleAgent):
    """An agent whose model rejects its API key on the first call."""

    name = "auth-fail"

    async def run(self, instruction: str, sandbox: Sandbox, context: AgentContext) -> None:
        """Raise the model's authentication error."""
        raise ModelError(ErrorKind.MODEL_AUTH_FAILED, "401 invalid API key (simulated)")


class CountingAgent(OracleAgent):
    """The oracle, counting its runs on the host: each ``run()`` appends one line to the file
    ``--ak counter=PATH`` before solving (so a test can assert an agent never ran again)."""

    name = "counting"

    async def run(self, instruction: str, sandbox: Sandbox, context: AgentContext) -> None:
        """Count, then solve."""
        with open(str(self.kwargs["counter"]), "a") as f:
            f.write(f"{context.step.name}\n")
        await super().run(instruction, sandbox, context)


class RecordingAgent(OracleAgent):
    """The oracle, recording on the host what it was handed: each ``setup()`` and ``run()``
    appends one JSON line to ``--ak record=PATH`` (the phase, the instruction, the timeout the
    engine bounds it by, its kwargs, and the host variable named by ``--ak probe=NAME`` as the
    agent process sees it) and writes the instruction into the sandbox at
    ``/app/instruction.txt`` before solving (so a task's test can check what the agent got)."""

    name = "recording"

    def _record(self, phase: str, context: AgentContext, instruction: str | None) -> None:
        import json

        with open(str(self.kwargs["record"]), "a", encoding="utf-8") as f:
            f.write(
                json.dumps(
                    {
                        "phase": phase,
                        "step": context.step.name,
                        "timeout_sec": context.timeout_sec,
                        "instruction": instruction,
                        "kwargs": {k: v for k, v in self.kwargs.items() if k not in ("record", "probe")},
                        "probe": os.environ.get(str(self.kwargs.get("probe", ""))),
                    }
                )
                + "\n"
            )

    async def setup(self, sandbox: Sandbox, context: AgentContext) -> None:
        """Record the setup bound."""
        self._record("setup", context, None)
        await super().setup(sandbox, context)

    async def run(self, instruction: str, sandbox: Sandbox, context: AgentContext) -> None:
        """Record, leave the instruction in the sandbox, then solve."""
        self._record("run", context, instruction)
        await sandbox.exec(["mkdir", "-p", "/app"], user="root")
        await sandbox.exec(
            ["sh", "-c", 'printf "%s" "$1" > /app/instruction.txt', "sh", instruction], user=context.user
        )
        await super().run(instruction, sandbox, context)


class BlockOnceAgent(OracleAgent):
    """The oracle, whose first run of each task named in ``--ak block=NAME[,NAME...]`` (the
    names without the ``test/`` prefix) blocks: it records the run on the host (a file per
    task under ``--ak marker_dir=PATH``), writes ``/tmp/fault-blocked`` in its sandbox and
    sleeps there for up to 300 s before it solves. Every later run solves at once. A test
    kills or removes the blocked sandbox from outside and watches the retry (issue #12)."""

    name = "block-once"

    async def run(self, instruction: str, sandbox: Sandbox, context: AgentContext) -> None:
        """Block once per named task (on a fresh host marker), then solve."""
        task = context.task.name.removeprefix("test/")
        blocked = str(self.kwargs.get("block", "")).split(",")
        marker = Path(str(self.kwargs["marker_dir"])) / task
        if task in blocked and not marker.exists():
            marker.write_text("blocked once\n")
            await sandbox.exec("touch /tmp/fault-blocked; sleep 300", timeout_sec=330)
        await super().run(instruction, sandbox, context)


class KilledFromOutsideAgent(OracleAgent):
    """The oracle, whose docker sandbox is ``docker kill``ed through the engine (as an operator
    would) the first time it runs: once per ``--ak marker=PATH`` host file. The engine sees a
    sandbox killed from outside (``sandbox_lost``, infra); the retry runs normally."""

    name = "killed-from-outside"

    async def run(self, instruction: str, sandbox: Sandbox, context: AgentContext) -> None:
        """Kill the sandbox from the host once, then solve."""
        import subprocess

        marker = Path(str(self.kwargs["marker"]))
        if not marker.exists():
            marker.write_text("killed once\n")
            cid = getattr(sandbox, "container_id", None)
            assert cid, "KilledFromOutsideAgent runs on the docker backend"
            subprocess.run(["docker", "kill", cid], check=True, capture_output=True, timeout=60)
            await sandbox.exec(["sleep", "30"])
        await super().run(instruction, sandbox, context)
