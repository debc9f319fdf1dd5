"""``pre_artifacts.sh`` (Evolve): a task's hook that runs after each step's agent phase.

It runs in the agent's sandbox as the step's agent user, in the working dir, bounded by
:data:`~cairn.task.model.DEFAULT_PRE_ARTIFACTS_TIMEOUT_SEC` × the timeout multiplier, before
artifact collection, and typically writes the work to hand on under ``/logs/artifacts`` (a
``model.patch`` from ``git diff``). The step's own ``steps/<name>/pre_artifacts.sh`` wins over
the task root's. A failure (non-zero exit, timeout) is recorded on the step as a warning and in
``agent/pre-artifacts.txt``; collection still runs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from cairn.sandbox.base import Sandbox
from cairn.task.model import DEFAULT_PRE_ARTIFACTS_TIMEOUT_SEC, Step

PRE_ARTIFACTS_SCRIPT = "/tmp/.cairn-pre-artifacts.sh"


async def run_pre_artifacts(
    sandbox: Sandbox,
    step: Step,
    agent_dir: Path,
    *,
    timeout_multiplier: float = 1.0,
    mask: Callable[[str], str] = lambda s: s,
) -> list[str]:
    """Run the step's ``pre_artifacts.sh``, if it has one.

    Args:
        sandbox: the step's sandbox, after the agent phase ended.
        step: the step (``step.pre_artifacts_sh``).
        agent_dir: the step's host ``agent/`` folder; ``pre-artifacts.txt`` (exit code,
            masked stdout/stderr tails) is written there when the script ran.
        timeout_multiplier: ``--timeout-multiplier``.
        mask: secret masking for what is written to the host.

    Returns:
        Warnings for the step (one when the script failed or timed out), empty on success.
    """
    script = step.pre_artifacts_sh
    if script is None:
        return []
    await sandbox.upload(script, PRE_ARTIFACTS_SCRIPT)
    await sandbox.exec(["chmod", "755", PRE_ARTIFACTS_SCRIPT], user="root")
    if b"\r\n" in script.read_bytes():
        await sandbox.exec(["sed", "-i", "s/\\r$//", PRE_ARTIFACTS_SCRIPT], user="root")
    timeout = DEFAULT_PRE_ARTIFACTS_TIMEOUT_SEC * timeout_multiplier
    r = await sandbox.exec(["bash", PRE_ARTIFACTS_SCRIPT], user=step.agent_user, timeout_sec=timeout)
    await sandbox.exec(["rm", "-f", PRE_ARTIFACTS_SCRIPT], user="root")
    agent_dir.mkdir(parents=True, exist_ok=True)
    (agent_dir / "pre-artifacts.txt").write_text(
        f"exit_code: {r.exit_code}\ntimed_out: {r.timed_out}\n"
        f"--- stdout (tail) ---\n{mask(r.stdout[-4000:])}\n"
        f"--- stderr (tail) ---\n{mask(r.stderr[-4000:])}\n",
        encoding="utf-8",
    )
    if r.ok:
        return []
    why = f"timed out after {timeout:g} s" if r.timed_out else f"exited {r.exit_code}"
    tail = mask(r.stderr.strip()[-300:])
    return [f"pre_artifacts.sh {why}; artifacts collected anyway" + (f": {tail}" if tail else "")]
