"""One home for error classification: a raised failure → the persisted ``error`` (design §6).

The trial (:mod:`cairn.trial.run`), the step (:mod:`cairn.trial.step`) and the separate verifier
(:mod:`cairn.trial.separate_verifier`) all classify here, so the phase table and the relabels
exist once. The vocabulary itself (kinds, phases, categories) is :mod:`cairn.errors`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cairn.errors import (
    Category,
    ErrorKind,
    ModelError,
    Phase,
    SandboxError,
    SandboxLostError,
    TrialFailure,
    category_of,
)
from cairn.results.model import ErrorInfo
from cairn.sandbox.base import Sandbox, SandboxEnd
from cairn.task.model import Step

PHASE_OF: dict[ErrorKind, Phase] = {
    ErrorKind.CONFIG_ERROR: Phase.ENVIRONMENT,
    ErrorKind.BUILD_FAILED: Phase.ENVIRONMENT,
    ErrorKind.BUILD_TIMEOUT: Phase.ENVIRONMENT,
    ErrorKind.IMAGE_NOT_FOUND: Phase.ENVIRONMENT,
    ErrorKind.START_FAILED: Phase.ENVIRONMENT,
    ErrorKind.ENV_HEALTHCHECK_FAILED: Phase.ENVIRONMENT,
    ErrorKind.SERVICE_EXITED: Phase.ENVIRONMENT,
    ErrorKind.AGENT_SETUP_FAILED: Phase.AGENT_SETUP,
    ErrorKind.SETUP_FAILED: Phase.SETUP,
    ErrorKind.HEALTHCHECK_FAILED: Phase.HEALTHCHECK,
    ErrorKind.TEST_MISSING: Phase.VERIFIER,
    ErrorKind.VERIFIER_TIMEOUT: Phase.VERIFIER,
    ErrorKind.REWARD_MISSING: Phase.VERIFIER,
    ErrorKind.REWARD_EMPTY: Phase.VERIFIER,
    ErrorKind.REWARD_PARSE_ERROR: Phase.VERIFIER,
    ErrorKind.MODEL_AUTH_FAILED: Phase.AGENT,
    ErrorKind.MODEL_UNAVAILABLE: Phase.AGENT,
    ErrorKind.BUDGET_EXCEEDED: Phase.AGENT,
}
"""The phase a kind always belongs to; kinds not listed take the phase that was running."""


def error_info(
    exc: TrialFailure,
    *,
    step: Step | None = None,
    phase: Phase | None = None,
    after_agent: bool = False,
    mask: Callable[[str], str] = lambda s: s,
) -> ErrorInfo:
    """Classify a :class:`TrialFailure` into the persisted ``error`` (design §6).

    Args:
        exc: the failure.
        step: the step it happened in (``None``: before the first step / the environment).
        phase: the phase it happened in; defaults to :data:`PHASE_OF` for the kind.
        after_agent: the step's agent phase had begun (candidate faults count from then on).
        mask: secret masking applied to the message and string detail values.

    Returns:
        The :class:`~cairn.results.model.ErrorInfo` (kind, category, phase, step, message,
        detail without ``_``-prefixed private keys). A failure marked
        :attr:`~cairn.errors.TrialFailure.task_fault` (a start that the task's own definition
        breaks: a missing ENTRYPOINT program, no ``/bin/sh``) has the category ``task``, so it
        is not retried as infra.
    """
    step_index = step.index if step is not None else 1
    detail = {
        k: (mask(v) if isinstance(v, str) else v) for k, v in exc.detail.items() if not k.startswith("_")
    }
    category = category_of(exc.kind, step_index=step_index, after_agent=after_agent)
    if exc.task_fault:  # a start the task's own definition breaks: not infra
        category = Category.TASK
    return ErrorInfo(
        kind=exc.kind,
        category=category,
        phase=phase or PHASE_OF.get(exc.kind),
        step=step.name if step else None,
        message=mask(str(exc)),
        detail=detail,
    )


def as_start_failure(
    exc: Exception, message: str | None = None, detail: dict[str, Any] | None = None
) -> TrialFailure:
    """A sandbox that could not be made usable while starting is ``start_failed`` (infra).

    Used for the trial's own sandbox and for a separate verifier's sandbox.
    """
    known = exc if isinstance(exc, TrialFailure) else None
    return TrialFailure(
        ErrorKind.START_FAILED,
        message if message is not None else str(exc),
        detail=(known.detail if known else {}) if detail is None else detail,
        task_fault=known.task_fault if known else False,
    )


async def with_sandbox_end(exc: TrialFailure, sandbox: Sandbox | None) -> TrialFailure:
    """:func:`with_end` with what ``sandbox`` says of its end (:meth:`Sandbox.ended`), for any
    failure that is not already ``sandbox_lost`` or a model error: an OOM-killed sandbox says
    so (setup.sh exited 137 because …), and one killed from outside makes the failure
    ``sandbox_lost`` (infra), not the agent's or the task's. ``sandbox`` ``None``: unchanged."""
    if sandbox is None or isinstance(exc, (SandboxLostError, ModelError)):
        return exc
    return with_end(exc, await sandbox.ended())


def with_end(exc: TrialFailure, end: SandboxEnd | None) -> TrialFailure:
    """Say in a failure that the sandbox had stopped, and why: the reason appended to the
    message and the facts (``sandbox_exit_code``, ``oom_killed``, ``from_outside``) added to
    the detail.

    A sandbox that ended by its own doing (an out-of-memory kill of its main process, a
    process inside that killed it) keeps the failure's kind and category: the limits the
    task declares are the agent's to keep. One killed or removed from outside
    (``end.from_outside``: ``docker kill`` by an operator or another program) makes it
    :class:`~cairn.errors.SandboxLostError` (``sandbox_lost``, infra, retried): whatever
    failed, the agent or the verifier did not cause it. ``end`` ``None``: the failure
    unchanged."""
    if end is None:
        return exc
    message = f"{str(exc).rstrip(': ')}; the sandbox had stopped: {end.reason}"
    detail = {**exc.detail, **end.detail()}
    if end.from_outside:
        return SandboxLostError(message, detail=detail)
    if isinstance(exc, SandboxError):
        return SandboxError(message, kind=exc.kind, detail=detail, task_fault=exc.task_fault)
    return TrialFailure(exc.kind, message, detail=detail, task_fault=exc.task_fault)


def as_transfer_failure(exc: TrialFailure) -> TrialFailure:
    """A sandbox that broke before the agent ran is a failed transfer (infra), not a candidate fault."""
    out = TrialFailure(ErrorKind.TRANSFER_FAILED, str(exc), detail=exc.detail, task_fault=exc.task_fault)
    out.step_warnings = list(exc.step_warnings)
    return out
