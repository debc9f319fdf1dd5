"""Step snapshots in the trial engine: ``--snapshot-steps``, ``--start-step``, ``--from``
(design §4.7; docs/snapshots.md).

- :func:`snapshot_taker` — the hook :func:`cairn.trial.step.run_step` calls after a step's agent
  phase has ended (processes handled per design §4.4, ``/solution`` removed, ``/logs`` emptied)
  and before artifacts and the verifier: the snapshot is the end-of-agent state.
- :func:`replay_step` — one step before ``--start-step`` run by the oracle and verified; a
  step that does not pass stops the trial as ``oracle_replay_failed`` (category task).
- :func:`check_start_options` — the usage checks made before anything starts.
- :func:`start_spec` — ``--from``: the sandbox starts from the recorded snapshot.

Nothing here writes JSON: rows go back to the trial loop, which hands them to the store.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from cairn.errors import (
    Category,
    ErrorKind,
    SandboxError,
    SandboxLostError,
    TrialFailure,
    UsageError,
    category_of,
)
from cairn.results.model import ForkRef, StepResult, StepSnapshot, StepSource, TrialResult
from cairn.sandbox.base import SNAPSHOT_LABEL, Sandbox, SandboxSpec
from cairn.task.model import Step, Task

SnapshotHook = Callable[[Sandbox, Step], Awaitable[tuple[StepSnapshot | None, list[str]]]]

if TYPE_CHECKING:  # pragma: no cover
    from cairn.plan import JobConfig, RunOptions


def snapshot_labels(*, job_id: str, trial_id: str, job_dir: Path | None, step: Step) -> dict[str, str]:
    """The ownership labels of a step snapshot: ``cairn.job``, ``cairn.trial``, ``cairn.step``,
    ``cairn.step_index``, ``cairn.job_dir`` (so ``cairn clean`` finds snapshots whose job
    folder is gone) and ``cairn.snapshot``."""
    labels = {
        "cairn.job": job_id,
        "cairn.trial": trial_id,
        "cairn.step": step.name,
        "cairn.step_index": str(step.index),
        SNAPSHOT_LABEL: "1",
    }
    if job_dir is not None:
        labels["cairn.job_dir"] = str(Path(job_dir).absolute())
    return labels


def snapshot_taker(*, job_id: str, trial_id: str, job_dir: Path | None) -> SnapshotHook:
    """The ``--snapshot-steps`` hook for one trial.

    Returns:
        An async callable ``(sandbox, step) -> (StepSnapshot | None, warnings)``. A snapshot
        that fails is a warning on the step, never a change of its score; a lost engine is
        raised (the trial is then infra-errored as any lost sandbox).
    """

    async def take(sandbox: Sandbox, step: Step) -> tuple[StepSnapshot | None, list[str]]:
        labels = snapshot_labels(job_id=job_id, trial_id=trial_id, job_dir=job_dir, step=step)
        try:
            ref = await sandbox.snapshot(labels)
        except SandboxLostError:
            raise
        except (SandboxError, OSError) as exc:
            return None, [f"snapshot of step {step.name!r} failed: {exc}"]
        return StepSnapshot(
            backend=ref.backend, ref=ref.ref, size_bytes=ref.size_bytes, seconds=round(ref.seconds, 6)
        ), []

    return take


def start_index(task: Task, start_step: str | None) -> int:
    """The 1-based index of the first step the agent runs (1 without ``--start-step``).

    Raises:
        TrialFailure: ``config_error`` when the task has no such step (checked earlier, at
            job start, by :func:`check_start_options`).
    """
    if start_step is None:
        return 1
    for s in task.steps:
        if s.name == start_step:
            return s.index
    raise TrialFailure(
        ErrorKind.CONFIG_ERROR,
        f"--start-step {start_step!r}: the task has no such step ({', '.join(s.name for s in task.steps)})",
    )


def agent_steps_total(task: Task, start_step: str | None) -> int:
    """``steps_total`` of a trial: the steps the agent is to run (all, or from
    ``--start-step`` on)."""
    return len(task.steps) - (start_index(task, start_step) - 1)


async def replay_step(run: Callable[[], Awaitable[StepResult]], step: Step, *, verify: bool) -> StepResult:
    """Run one step before ``--start-step`` with the oracle and verify it (design §4.7).

    Args:
        run: runs the step with the oracle (:func:`cairn.trial.step.run_step` bound to the
            trial's sandbox, settings and recorder; passed in: this module is imported by it).
        step: the step.
        verify: the job verifies (``False`` under ``--no-verify``).

    Returns:
        The step's row with source ``oracle`` (its rewards kept for display; it counts in no
        score).

    Raises:
        TrialFailure: ``oracle_replay_failed`` (category task) when the step did not pass its
            verifier or failed for a reason other than infra; infra failures (a lost engine, a
            failed transfer before any agent phase) are raised as they are, so they retry.
    """
    try:
        row = await run()
    except SandboxLostError:
        raise
    except TrialFailure as exc:
        if category_of(exc.kind, step_index=step.index, after_agent=True) is Category.INFRA:
            raise
        raise TrialFailure(
            ErrorKind.ORACLE_REPLAY_FAILED,
            f"--start-step: the oracle replay of step {step.name!r} failed: {exc.kind.value}: {exc}",
            detail={
                "cause": exc.kind.value,
                **{k: v for k, v in exc.detail.items() if not k.startswith("_")},
            },
        ) from exc
    if not verify:
        return row.model_copy(update={"source": StepSource.ORACLE})
    if row.source is not StepSource.VERIFIER or not row.passed:
        why = (
            f"reward {row.reward}"
            if row.source is StepSource.VERIFIER
            else f"{row.error.kind.value}: {row.error.message}"
            if row.error
            else row.source.value
        )
        raise TrialFailure(
            ErrorKind.ORACLE_REPLAY_FAILED,
            f"--start-step: the oracle solution of step {step.name!r} does not "
            f"pass its verifier ({why}); the agent cannot start from a correct "
            "state",
            detail={"reward": row.reward, "rewards": row.rewards},
        )
    return row.model_copy(update={"source": StepSource.ORACLE})


# ---- --from -------------------------------------------------------------------------------
def read_fork_source(trial_dir: Path, task: Task, start_step: str, backend: str) -> tuple[str, ForkRef]:
    """The snapshot a ``--start-step NAME --from TRIAL_DIR`` trial starts from.

    Args:
        trial_dir: the recorded trial's folder.
        task: the task to run (its content hash must equal the recorded one).
        start_step: NAME; the snapshot is the one of the step before it.
        backend: the backend to run on (a snapshot restores only on its own backend).

    Returns:
        ``(snapshot ref, ForkRef)``.

    Raises:
        UsageError: no result.json there, another task or a changed task (content hash),
            another backend, NAME is the first step, or the step before NAME has no snapshot.
    """
    from cairn.results.store import RESULT_JSON, read_result

    trial_dir = Path(trial_dir).absolute()
    try:
        source: TrialResult = read_result(trial_dir / RESULT_JSON)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--from {trial_dir}: not a finished trial folder ({exc})") from None
    if source.task.name != task.name or source.task.content_hash != task.content_hash:
        raise UsageError(
            f"--from {trial_dir}: refused: it ran task {source.task.name!r} with content "
            f"{source.task.content_hash[:12]}, this job runs {task.name!r} with content "
            f"{task.content_hash[:12]} (a fork needs the same task content)"
        )
    if source.backend != backend:
        raise UsageError(
            f"--from {trial_dir}: its snapshots were made by backend "
            f"{source.backend!r}; run the fork with -e {source.backend}"
        )
    k = start_index(task, start_step)
    if k < 2:
        raise UsageError(f"--from needs a --start-step after the first step ({start_step!r} is the first)")
    prev = task.steps[k - 2]
    row = next((r for r in source.steps if r.index == prev.index), None)
    if row is None or row.snapshot is None:
        raise UsageError(
            f"--from {trial_dir}: step {prev.name!r} has no snapshot (run the "
            "source job with --snapshot-steps)"
        )
    return row.snapshot.ref, ForkRef(
        trial_dir=str(trial_dir), trial_id=source.trial_id, step=prev.name, snapshot=row.snapshot.ref
    )


def start_spec(
    spec: SandboxSpec, task: Task, options: RunOptions, backend: str
) -> tuple[SandboxSpec, ForkRef | None]:
    """The sandbox spec of a trial: with ``--from``, started from the recorded snapshot.

    Raises:
        TrialFailure: ``config_error`` when the fork source is no longer usable.
    """
    if options.fork_from is None or options.start_step is None:
        return spec, None
    try:
        ref, fork = read_fork_source(options.fork_from, task, options.start_step, backend)
    except UsageError as exc:
        raise TrialFailure(ErrorKind.CONFIG_ERROR, str(exc)) from None
    return dataclasses.replace(spec, snapshot=ref), fork


def restore_spec(
    task: Task,
    *,
    job_id: str,
    trial_id: str,
    job_dir: Path | None,
    timeout_multiplier: float = 1.0,
    environ: Mapping[str, str] | None = None,
) -> tuple[SandboxSpec, set[str]]:
    """The sandbox spec a trial of ``task`` runs with (set ``snapshot`` to start from one),
    for ``cairn regrade`` and ``cairn shell``, and the secret values its env resolved.

    Raises:
        TrialFailure: ``config_error`` when an ``${VAR}`` template is missing from the host.
    """
    import os

    from cairn.task.envvars import resolve_env, secret_values

    e = task.environment
    env = resolve_env(e.env, os.environ if environ is None else environ)
    spec = SandboxSpec(
        env_dir=task.env_dir,
        docker_image=e.docker_image,
        workdir=e.workdir,
        cpus=e.cpus,
        memory_mb=e.memory_mb,
        storage_mb=e.storage_mb,
        gpus=e.gpus,
        network_mode=e.effective_network_mode,
        env=env,
        build_timeout_sec=e.build_timeout_sec * timeout_multiplier,
        job_id=job_id,
        trial_id=trial_id,
        env_hash=task.env_hash,
        name=task.slug,
        job_dir=job_dir,
    )
    return spec, set(secret_values(e.env, env))


# ---- checks before start --------------------------------------------------------------------
def check_start_options(config: JobConfig, tasks: Iterable[Task | None], backend: str) -> None:
    """Usage checks of ``--snapshot-steps``, ``--start-step`` and ``--from``, before anything
    starts (design §9 exit 2).

    Args:
        config: the :class:`~cairn.plan.JobConfig`.
        tasks: the job's loaded tasks (``None`` for invalid ones, which are skipped).
        backend: the resolved backend.

    Raises:
        UsageError: ``--from`` without ``--start-step``; a task without the start step; a step
            before it without ``solution/solve.sh`` (oracle replay); a ``--from`` source that
            does not fit (:func:`read_fork_source`); snapshots on a backend without them.
    """
    from cairn.sandbox import get_backend

    start, fork = config.start_step, config.from_trial
    if fork is not None and start is None:
        raise UsageError("--from needs --start-step NAME (the step to continue at)")
    for task in tasks:
        if task is None:
            continue
        needs_snapshots = config.snapshot_steps or fork is not None
        if needs_snapshots:
            cls = get_backend(backend, compose=task.compose_file is not None)
            if not cls.capabilities.snapshot:
                raise UsageError(
                    f"task {task.name}: backend {cls.name!r} cannot snapshot "
                    "sandboxes (--snapshot-steps / --from)"
                )
        if start is None:
            continue
        k = start_index_or_usage(task, start)
        if fork is not None:
            read_fork_source(Path(fork), task, start, backend)
            continue
        missing = [s.name for s in task.steps[: k - 1] if s.solve_sh is None]
        if missing:
            raise UsageError(
                f"--start-step {start}: task {task.name}: step(s) "
                f"{', '.join(missing)} before it have no solution/solve.sh, so the "
                "oracle cannot replay them"
            )


def start_index_or_usage(task: Task, start_step: str) -> int:
    """:func:`start_index`, as a :class:`UsageError` naming the task's steps."""
    try:
        return start_index(task, start_step)
    except TrialFailure:
        raise UsageError(
            f"--start-step {start_step}: task {task.name} has no such step "
            f"(steps: {', '.join(s.name for s in task.steps)})"
        ) from None
