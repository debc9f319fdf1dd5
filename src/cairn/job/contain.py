"""A trial's failure stays that trial's (issue #29).

Any exception that escapes a trial — the store (a folder name the filesystem refuses, a
full inode table), the sandbox, the agent, the executor, a bug — is recorded as *that*
trial's error: kind ``internal``, category ``infra`` (so ``cairn resume`` runs it again), the
traceback in its ``trial.log``, a one-line cause in its ``result.json``. The job goes on with
the other trials and its exit code says a trial errored. Only what stops the whole job on
purpose passes through: cancellation (Ctrl-C, SIGTERM, an early-stopping consumer) and a full
filesystem (ENOSPC/EDQUOT, :class:`~cairn.errors.JobStorageFullError` in :mod:`cairn.job.run`).
"""

from __future__ import annotations

import errno
import logging
import traceback
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

from cairn.errors import Category, ErrorKind, cause_line
from cairn.events import Event, EventKind, EventSink
from cairn.plan import TrialPlan
from cairn.results.model import (
    AgentRef,
    ErrorInfo,
    Outcome,
    StepResult,
    StepSource,
    TaskRef,
    TrialResult,
)
from cairn.results.store import Masker, TrialPaths, TrialStore

log = logging.getLogger("cairn.job")

_JOB_STOPPING_ERRNOS = (errno.ENOSPC, errno.EDQUOT)

INTERNAL_ERRORS_LOG = "internal-errors.log"
"""In the job folder: the tracebacks of trials whose own folder could not be written."""


def stops_the_job(exc: BaseException) -> bool:
    """Whether ``exc`` is one the job itself must stop on (not one trial's error): a full
    filesystem (ENOSPC/EDQUOT), also inside an exception group or as its cause/context.

    Args:
        exc: an exception that escaped a trial.
    """
    seen: set[int] = set()

    def walk(e: BaseException | None) -> bool:
        if e is None or id(e) in seen:
            return False
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in _JOB_STOPPING_ERRNOS:
            return True
        if isinstance(e, BaseExceptionGroup) and any(walk(x) for x in e.exceptions):
            return True
        return walk(e.__cause__) or walk(e.__context__)

    return walk(exc)


def _masker(plan: TrialPlan) -> Masker:
    """The secrets this module can know without the trial's own resolution: the job's
    ``--ae`` and ``--ve`` values (the trial masks its task's secrets itself)."""
    opts = plan.options
    return Masker([*dict(opts.agent_env).values(), *dict(opts.verifier_env).values()])


def internal_result(plan: TrialPlan, exc: BaseException, started_at: datetime) -> TrialResult:
    """The result of a trial an unexpected exception ended: outcome ``errored``, kind
    ``internal``, category ``infra``, the one-line cause as the message.

    Args:
        plan: the trial's plan.
        exc: what escaped.
        started_at: when the trial (its first run) began, UTC.

    Returns:
        The result (not written); every declared step ``not-run``, except that the message
        names the cause.
    """
    task = plan.task
    cause = _masker(plan).mask(cause_line(exc))
    now = datetime.now(UTC)
    return TrialResult(
        trial_id=plan.trial_id,
        trial_name=plan.trial_name,
        attempt=plan.attempt,
        task=TaskRef(name=task.name, content_hash=task.content_hash, source=plan.source),
        agent=AgentRef(name=plan.agent_name, kwargs=dict(plan.agent_kwargs)),
        model=plan.model,
        backend=plan.backend,
        outcome=Outcome.ERRORED,
        error=ErrorInfo(
            kind=ErrorKind.INTERNAL,
            category=Category.INFRA,
            message=f"internal error: {cause}",
            detail={"exception": type(exc).__name__},
        ),
        strategy=task.config.multi_step_reward_strategy,
        steps_total=len(task.steps),
        started_at=started_at,
        finished_at=now,
        steps=[StepResult(index=s.index, name=s.name, source=StepSource.NOT_RUN) for s in task.steps],
    )


def record_internal(
    plan: TrialPlan, exc: BaseException, started_at: datetime, emit: EventSink
) -> TrialResult:
    """Record ``exc`` as the trial's own error: traceback into ``trial.log``, result.json,
    one warning line for the job. Writing is best effort: when the trial folder itself cannot
    be written (the store is what failed), the result is still returned (counted by the job,
    in summary.json and the exit code) and the traceback goes to the job folder's
    :data:`INTERNAL_ERRORS_LOG`.

    Args:
        plan: the trial's plan.
        exc: what escaped the trial.
        started_at: when the trial began, UTC.
        emit: the job's event sink.

    Returns:
        The ``internal`` result.
    """
    result = internal_result(plan, exc, started_at)
    masker = _masker(plan)
    tb = masker.mask("".join(traceback.format_exception(exc)))
    store = TrialStore(TrialPaths(plan.trial_dir), masker)
    where = " (traceback in trial.log)"
    try:
        store.append_log(f"internal error: the trial ended on an exception no stage handled:\n{tb}")
        store.create().write_result(result)
    except (OSError, ValueError) as write_exc:
        spill = Path(plan.job_dir) / INTERNAL_ERRORS_LOG
        where = f"; its folder could not be written ({cause_line(write_exc, 160)})"
        try:
            with open(spill, "a", encoding="utf-8") as f:
                f.write(f"trial {plan.trial_id} ({plan.task.name}, attempt {plan.attempt}):\n{tb}\n")
            where += f", traceback in {spill}"
        except OSError:
            log.error("trial %s: internal error\n%s", plan.trial_id, tb)
    tag = plan.task.name if plan.attempt == 1 else f"{plan.task.name} #{plan.attempt}"
    message = result.error.message if result.error is not None else "internal error"
    emit(Event(EventKind.WARNING, f"[{tag}] {message}{where}", task=plan.task.name, trial_id=plan.trial_id))
    return result


async def contain_trial(
    plan: TrialPlan, run: Callable[[TrialPlan], Awaitable[TrialResult]], emit: EventSink
) -> TrialResult:
    """Run ``run(plan)`` (the job's retrying trial runner) so that no exception escapes it
    but the ones that stop the job: cancellation and a full filesystem.

    Args:
        plan: the trial's plan.
        run: the coroutine function running it (``JobRun.run_one``).
        emit: the job's event sink.

    Returns:
        The trial's result: the runner's, or an ``internal`` one (:func:`record_internal`).

    Raises:
        asyncio.CancelledError: the trial was cancelled (passed through).
        OSError: ENOSPC/EDQUOT (passed through: the job stops, :mod:`cairn.job.run`).
    """
    started_at = datetime.now(UTC)
    try:
        return await run(plan)
    except Exception as exc:  # noqa: BLE001 - the whole point: one trial's failure is its own
        if stops_the_job(exc):
            raise
        return record_internal(plan, exc, started_at, emit)
