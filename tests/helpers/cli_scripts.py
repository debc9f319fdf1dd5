"""Scripted model conversations that solve examples/two-steps with each real agent CLI.

Each CLI gets the same plan — step ``write``: one shell tool call writing ``/app/a.txt``, then a
closing text; step ``append``: one call writing ``/app/b.txt``, then a closing text — spoken with
that CLI's own shell tool (Claude Code ``Bash``, Codex ``exec_command``, opencode ``bash``, Gemini CLI and
Qwen Code ``run_shell_command``).
The usage numbers differ per turn so sums can be checked exactly.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cairncli import run_cairn
from fake_models import FakeModels, Request, Turn

REPO = Path(__file__).resolve().parents[2]
TWO_STEPS = REPO / "examples" / "two-steps"

STEP1_MARK = "single line `1`"
"""Text only the first step's instruction contains (to spot carried-over conversation)."""

USAGE = {
    "write": [(1000, 40, 300), (1100, 12, 0)],
    "append": [(2000, 35, 500), (2100, 9, 100)],
}
"""Per step: the ``(prompt, completion, cached)`` usage of its two turns."""

COMMANDS = {"write": "printf '1\\n' > /app/a.txt", "append": "printf '2\\n' > /app/b.txt"}


def expected_tokens(step: str) -> dict[str, int]:
    """The token sums the result must show for ``step``."""
    turns = USAGE[step]
    return {
        "prompt": sum(t[0] for t in turns),
        "completion": sum(t[1] for t in turns),
        "cached": sum(t[2] for t in turns),
    }


def _call(agent: str, command: str) -> tuple[str, dict[str, Any]]:
    if agent == "claude-code":
        return ("Bash", {"command": command, "description": "write the file"})
    if agent == "codex":
        return ("exec_command", {"cmd": command})
    if agent in ("gemini-cli", "qwen-code"):
        return ("run_shell_command", {"command": command, "description": "write the file"})
    return ("bash", {"command": command, "description": "write the file"})


SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
"""mini-swe-agent's end-of-task command (its second turn per step)."""

FILES = {"write": ("a.txt", "1"), "append": ("b.txt", "2")}
"""Per step: the file aider writes (relative to the working dir ``/app``) and its line."""


def two_step_script(agent: str, *, delay_first_sec: float = 0.0) -> list[Turn]:
    """The scripted turns for ``agent``: two per step (aider: one per step, a whole-file
    listing it applies itself; it has no tools)."""
    out = []
    if agent == "aider":
        for step in ("write", "append"):
            name, line = FILES[step]
            out.append(
                Turn(
                    text=f"Writing {name}.\n\n{name}\n```\n{line}\n```\n",
                    usage=USAGE[step][0],
                    delay_sec=delay_first_sec,
                )
            )
        return out
    if agent == "mini-swe-agent":
        for step in ("write", "append"):
            first, second = USAGE[step]
            out.append(
                Turn(
                    text=f"Running the {step} command.",
                    calls=(("bash", {"command": COMMANDS[step]}),),
                    usage=first,
                    delay_sec=delay_first_sec,
                )
            )
            out.append(Turn(text="Submitting.", calls=(("bash", {"command": SUBMIT}),), usage=second))
        return out
    for step in ("write", "append"):
        first, second = USAGE[step]
        out.append(
            Turn(
                text=f"Running the {step} command.",
                calls=(_call(agent, COMMANDS[step]),),
                usage=first,
                delay_sec=delay_first_sec,
            )
        )
        out.append(Turn(text=f"The {step} step is done.", usage=second))
    return out


def consumes(body: dict[str, Any], path: str) -> bool:
    """Main-loop requests carry tools; title and side queries do not."""
    return bool(body.get("tools"))


def consumes_any(body: dict[str, Any], path: str) -> bool:
    """Every request is a main-loop one (aider sends no tools and no side queries)."""
    return True


def carries_step1(body: dict[str, Any]) -> bool:
    """Whether a request's conversation contains the first step's instruction."""
    return STEP1_MARK in json.dumps(body, ensure_ascii=False)


def public_two_steps(dest: Path) -> Path:
    """A copy of examples/two-steps with ``network_mode = "public"`` (the CLIs reach the model
    server on the host directly, no gateway; the no-network original goes through the trial's
    egress gateway instead)."""
    shutil.copytree(TWO_STEPS, dest)
    toml = dest / "task.toml"
    text = toml.read_text()
    assert 'network_mode = "no-network"' in text
    toml.write_text(text.replace('network_mode = "no-network"', 'network_mode = "public"'))
    return dest


def bridge_gateway() -> str:
    """The docker default bridge's gateway address (this machine, reachable from containers)."""
    import docker

    client = docker.from_env(timeout=10)
    try:
        for cfg in client.networks.get("bridge").attrs.get("IPAM", {}).get("Config") or []:
            if cfg.get("Gateway"):
                return str(cfg["Gateway"])
    finally:
        client.close()
    return "172.17.0.1"


JOB_NAME = "j"
"""The job name :func:`run_cli_job` gives every job (its folder: ``jobs / JOB_NAME``)."""


def run_cli_job(
    task: Path,
    agent: str,
    *,
    model: str | None,
    base_url: str,
    jobs: Path,
    env: Mapping[str, str],
    backend: str = "docker",
    relay: bool = False,
    extra: Sequence[str] = (),
    timeout_sec: float = 900,
) -> subprocess.CompletedProcess:
    """``cairn run`` of one real agent CLI on ``task``, in a subprocess, importing this
    checkout's ``cairn`` (its ``src`` first on ``PYTHONPATH``).

    Args:
        task: the task (or dataset) folder.
        agent: the agent's name (``claude-code``, ``aider`` …).
        model: ``-m provider/model``; ``None`` gives no ``-m`` (the CLI's host variables pick it).
        base_url: the scripted model server's ``http://HOST:PORT`` (``--ak base_url=``; the
            relay's upstream when ``relay``).
        jobs: the jobs folder; the job is ``jobs / JOB_NAME``.
        env: variables set over this process's environment (the provider key …).
        backend: ``-e`` (``docker``, ``local``).
        relay: through the job's model relay (cairn's default), else ``--no-relay`` (direct
            mode: the CLI calls the model itself).
        extra: more ``cairn run`` arguments, last.
        timeout_sec: the bound on the whole run, seconds.

    Returns:
        The finished process (text stdout and stderr); its exit code is not checked.
    """
    src = REPO / "src"
    full = {**os.environ, **env, "PYTHONPATH": f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    cmd = ["run", "-p", str(task), "-a", agent]
    cmd += ["-m", model] if model else []
    cmd += ["--ak", f"base_url={base_url}", "-e", backend]
    cmd += [] if relay else ["--no-relay"]
    cmd += ["--jobs-dir", str(jobs), "--job-name", JOB_NAME, *extra]
    return run_cairn(*cmd, env=full, timeout=timeout_sec)


class BilledModels(FakeModels):
    """The scripted server, keeping the bill: the usage of every generation it answered."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bill: list[tuple[int, int, int]] = []
        self._bill_lock = threading.Lock()

    def _next(self, req: Request) -> Turn | None:
        turn = super()._next(req)
        if turn is not None:
            with self._bill_lock:
                self.bill.append(turn.usage)
        return turn

    def billed(self) -> dict[str, int]:
        """The bill's sums, as result.json names them (``prompt``, ``completion``, ``cached``)."""
        with self._bill_lock:
            parts = list(self.bill)
        return {k: sum(p[i] for p in parts) for i, k in enumerate(("prompt", "completion", "cached"))}
