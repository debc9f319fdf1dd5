"""``cairn shell``: a shell in a fresh sandbox made from a recorded step snapshot, for
debugging a failure (docs/snapshots.md).

The sandbox starts from the step's end-of-agent snapshot (the files the verifier graded), with
the step's tests in ``/tests`` and its solution in ``/solution`` (owned by root, without write
bits: read-only for any other user), and is removed when the shell ends.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path

from cairn.errors import UsageError
from cairn.results.model import StepResult, TrialResult
from cairn.task.model import Step, Task

_READ_ONLY = "chown -R 0:0 /tests /solution && chmod -R a-w /tests /solution"


def pick_step(result: TrialResult, step: str | None) -> StepResult:
    """The step row whose snapshot to open: ``step`` by name, else the last one with a
    snapshot.

    Raises:
        UsageError: no such step, or it (or every step) has no snapshot.
    """
    rows = result.steps
    if step is not None:
        row = next((r for r in rows if r.name == step), None)
        if row is None:
            raise UsageError(f"the trial has no step {step!r} (steps: {', '.join(r.name for r in rows)})")
        if row.snapshot is None:
            raise UsageError(f"step {step!r} has no snapshot (run the job with --snapshot-steps)")
        return row
    with_snap = [r for r in rows if r.snapshot is not None]
    if not with_snap:
        raise UsageError("the trial has no step snapshot (run the job with --snapshot-steps)")
    return with_snap[-1]


def _load(trial_dir: Path) -> tuple[TrialResult, Task]:
    from cairn.results.store import RESULT_JSON, read_config, read_result
    from cairn.task.load import load_task

    try:
        result = read_result(trial_dir / RESULT_JSON)
        task_path = Path(read_config(trial_dir).task.path)
    except (OSError, ValueError) as exc:
        raise UsageError(f"{trial_dir} is not a finished trial folder ({exc})") from None
    try:
        task = load_task(task_path)
    except Exception as exc:  # noqa: BLE001 - the recorded task folder is gone or broken
        raise UsageError(f"the trial's task folder {task_path} does not load: {exc}") from None
    return result, task


async def open_shell(
    trial_dir: Path,
    *,
    step: str | None = None,
    command: str | None = None,
    on_event: Callable[[str], None] | None = None,
) -> int:
    """Open a shell (or run ``command``) in a fresh sandbox from a step's snapshot.

    Args:
        trial_dir: the recorded trial's folder.
        step: the step name (default: the last step with a snapshot).
        command: run this shell command instead of an interactive shell; its output goes to
            stdout/stderr.
        on_event: receives the lines that say what was started and how to leave.

    Returns:
        The shell's (or command's) exit code.

    Raises:
        UsageError: see :func:`pick_step`; the trial folder or its task cannot be read.
    """
    from cairn.sandbox import get_backend
    from cairn.trial.snapshot import restore_spec

    say = on_event or (lambda line: print(line, file=sys.stderr, flush=True))
    trial_dir = Path(trial_dir).absolute()
    result, task = _load(trial_dir)
    row = pick_step(result, step)
    the_step: Step = task.steps[row.index - 1]
    spec, _ = restore_spec(task, job_id="shell", trial_id=result.trial_id, job_dir=None)
    spec = dataclasses.replace(spec, snapshot=row.snapshot.ref)  # type: ignore[union-attr]
    cls = get_backend(result.backend, compose=task.compose_file is not None)
    async with cls(spec) as sandbox:
        await sandbox.exec("rm -rf /tests /solution && mkdir -p /tests /solution", user="root")
        for d in the_step.tests_dirs:
            await sandbox.upload(d, "/tests")
        for d in the_step.solution_dirs:
            await sandbox.upload(d, "/solution")
        await sandbox.exec(_READ_ONLY, user="root")
        say(
            f"cairn shell: {result.backend} sandbox from the snapshot of step {row.index} "
            f"{row.name!r} of trial {result.trial_name} (files as the agent left them; no "
            "processes). /tests and /solution hold the step's tests and solution, read-only."
        )
        if command is not None:
            r = await sandbox.exec(command, user=the_step.agent_user)
            sys.stdout.write(r.stdout)
            sys.stderr.write(r.stderr)
            sys.stdout.flush()
            code = 124 if r.timed_out else (r.exit_code if r.exit_code is not None else 1)
        else:
            say("Leave with `exit` or Ctrl-D; the sandbox is removed afterwards.")
            argv = sandbox.shell_argv(user=the_step.agent_user, tty=sys.stdin.isatty())
            proc = await asyncio.create_subprocess_exec(*argv)
            try:
                code = await proc.wait()
            except asyncio.CancelledError:
                proc.kill()
                await proc.wait()
                raise
    say("cairn shell: sandbox removed")
    return code
