"""The whole error vocabulary of cairn (design §6), in one module that imports nothing from cairn.

Three closed vocabularies describe why a trial or step failed:

- :class:`ErrorKind` — what went wrong (``build_failed``, ``reward_missing`` …).
- :class:`Phase` — where in the trial it happened (``environment``, ``verifier`` …).
- :class:`Category` — whose fault it is: ``infra`` (retried), ``task`` (the task is broken,
  not retried, never scored), ``candidate`` (the agent broke something, scored 0).

Exceptions raised inside cairn carry an :class:`ErrorKind`; the trial engine classifies them at
the catch site with :func:`category_of` ("retry on type, never on a class name as a string").
"""

from __future__ import annotations

from enum import StrEnum


class ErrorKind(StrEnum):
    """Closed vocabulary of failure kinds (design §6)."""

    CONFIG_ERROR = "config_error"
    BUILD_FAILED = "build_failed"
    BUILD_TIMEOUT = "build_timeout"
    IMAGE_NOT_FOUND = "image_not_found"
    START_FAILED = "start_failed"
    SANDBOX_LOST = "sandbox_lost"
    SANDBOX_UNUSABLE = "sandbox_unusable"
    TRANSFER_FAILED = "transfer_failed"
    ENV_HEALTHCHECK_FAILED = "env_healthcheck_failed"
    AGENT_SETUP_FAILED = "agent_setup_failed"
    SETUP_FAILED = "setup_failed"
    HEALTHCHECK_FAILED = "healthcheck_failed"
    TEST_MISSING = "test_missing"
    VERIFIER_TIMEOUT = "verifier_timeout"
    REWARD_MISSING = "reward_missing"
    REWARD_EMPTY = "reward_empty"
    REWARD_PARSE_ERROR = "reward_parse_error"
    MODEL_AUTH_FAILED = "model_auth_failed"
    MODEL_UNAVAILABLE = "model_unavailable"
    BUDGET_EXCEEDED = "budget_exceeded"
    """The model relay closed the trial's model: a cost or token limit was reached
    (docs/relay.md)."""
    CANCELLED = "cancelled"
    ORACLE_REPLAY_FAILED = "oracle_replay_failed"
    """``--start-step``: an earlier step's oracle solution did not pass its verifier."""
    SERVICE_EXITED = "service_exited"
    """A start-up service (the image ENTRYPOINT) exited non-zero before the agent started."""
    INTERNAL = "internal"
    """An exception no stage turned into an outcome (a bug, the store failing, an executor
    error): recorded as that trial's error, the job goes on (issue #29)."""


class Phase(StrEnum):
    """Closed vocabulary of trial phases (design §6)."""

    ENVIRONMENT = "environment"
    AGENT_SETUP = "agent_setup"
    SETUP = "setup"
    HEALTHCHECK = "healthcheck"
    AGENT = "agent"
    ARTIFACTS = "artifacts"
    VERIFIER = "verifier"
    TEARDOWN = "teardown"


class Category(StrEnum):
    """Whose failure it is (design §6).

    ``infra``: retried up to ``--max-retries``. ``task``: the task is broken; counted as an error,
    never as reward 0. ``candidate``: the agent left the sandbox unusable; the step scores 0.
    ``job``: stops the whole job (model authentication).
    """

    INFRA = "infra"
    TASK = "task"
    CANDIDATE = "candidate"
    JOB = "job"


_FIXED_CATEGORY: dict[ErrorKind, Category] = {
    ErrorKind.START_FAILED: Category.INFRA,
    ErrorKind.BUILD_TIMEOUT: Category.INFRA,
    ErrorKind.SANDBOX_LOST: Category.INFRA,
    ErrorKind.AGENT_SETUP_FAILED: Category.INFRA,
    ErrorKind.MODEL_UNAVAILABLE: Category.INFRA,
    ErrorKind.CONFIG_ERROR: Category.TASK,
    ErrorKind.BUILD_FAILED: Category.TASK,
    ErrorKind.IMAGE_NOT_FOUND: Category.TASK,
    ErrorKind.ENV_HEALTHCHECK_FAILED: Category.TASK,
    ErrorKind.TEST_MISSING: Category.TASK,
    ErrorKind.REWARD_MISSING: Category.TASK,
    ErrorKind.REWARD_EMPTY: Category.TASK,
    ErrorKind.REWARD_PARSE_ERROR: Category.TASK,
    ErrorKind.VERIFIER_TIMEOUT: Category.TASK,
    ErrorKind.ORACLE_REPLAY_FAILED: Category.TASK,
    ErrorKind.SERVICE_EXITED: Category.TASK,
    ErrorKind.INTERNAL: Category.INFRA,
    ErrorKind.SANDBOX_UNUSABLE: Category.CANDIDATE,
    ErrorKind.BUDGET_EXCEEDED: Category.CANDIDATE,
    ErrorKind.MODEL_AUTH_FAILED: Category.JOB,
    ErrorKind.CANCELLED: Category.JOB,
}


def category_of(kind: ErrorKind, *, step_index: int = 1, after_agent: bool = False) -> Category:
    """Classify an error kind into its category (design §6).

    Args:
        kind: the failure kind.
        step_index: 1-based index of the step where it happened. ``setup_failed`` and
            ``healthcheck_failed`` are ``task`` on step 1 and ``candidate`` on later steps (the
            earlier agent left a state the step cannot start from).
        after_agent: whether any agent phase had begun. ``transfer_failed`` before the first
            agent phase is ``infra``; after it, the agent may have broken the sandbox, so it
            is ``candidate`` (as ``sandbox_unusable``).

    Returns:
        The category.
    """
    if kind in (ErrorKind.SETUP_FAILED, ErrorKind.HEALTHCHECK_FAILED):
        return Category.TASK if step_index <= 1 else Category.CANDIDATE
    if kind is ErrorKind.TRANSFER_FAILED:
        return Category.CANDIDATE if after_agent else Category.INFRA
    return _FIXED_CATEGORY[kind]


class CairnError(Exception):
    """Base of every exception cairn raises on purpose."""


class TaskFormatError(CairnError):
    """A task folder cannot be loaded (design §2).

    Attributes:
        findings: the error findings (objects with ``path``, ``line``, ``severity``, ``text``)
            that made the task unloadable; may be empty when the message says it all.
    """

    def __init__(self, message: str, findings: list | None = None) -> None:
        super().__init__(message)
        self.findings = list(findings or [])


class UsageError(CairnError):
    """A job-level configuration error found before anything runs (CLI exit code 2)."""


class DatasetError(UsageError):
    """A dataset, registry or git repository cannot be resolved or fetched (CLI exit code 2).

    The message names the dataset, the URL and the commit involved, and the git client's or
    HTTP client's own words where there are any.
    """


class JobStorageFullError(CairnError):
    """The filesystem holding the job folder is full (ENOSPC/EDQUOT) while the job ran.

    The job stops at once: no new trial starts, the running ones are cancelled. Results
    already written stay whole (every JSON file is written atomically); a trial whose
    result.json could not be written has none, so ``cairn resume`` re-runs it once space is
    freed.
    """


class UnsupportedError(CairnError):
    """A backend cannot provide what a task needs (a network mode, compose, GPUs).

    Raised by capability checks before any sandbox starts; never silently relaxed.
    """


class TrialFailure(CairnError):
    """A failure with a place in design §6's vocabulary, raised inside a trial.

    The trial engine catches it and records ``kind``, its category, the phase and the step.

    Attributes:
        kind: the :class:`ErrorKind`.
        detail: optional structured detail (exit code, stderr tail, log tail) kept in results.
        task_fault: the failure is caused by the task's own definition (a start the task's
            image breaks: a missing ENTRYPOINT program, no ``/bin/sh``), the same on every
            attempt: classified ``task``, never retried as infra.
        step_warnings: what the step it ended had warned before (set by the step runner).
    """

    def __init__(
        self, kind: ErrorKind, message: str, *, detail: dict | None = None, task_fault: bool = False
    ) -> None:
        super().__init__(message)
        self.kind = ErrorKind(kind)
        self.detail = dict(detail or {})
        self.task_fault = task_fault
        self.step_warnings: list[str] = []
        """The warnings of the step it ended, so far (its failure row keeps them)."""


class SandboxError(TrialFailure):
    """A sandbox operation failed while the engine still answers.

    Default kind ``sandbox_unusable``; the engine re-labels it by phase (before any agent ran,
    a transfer failure is ``transfer_failed``/infra).
    """

    def __init__(
        self,
        message: str,
        *,
        kind: ErrorKind = ErrorKind.SANDBOX_UNUSABLE,
        detail: dict | None = None,
        task_fault: bool = False,
    ) -> None:
        super().__init__(kind, message, detail=detail, task_fault=task_fault)


class HostPathsSkippedError(SandboxError):
    """A download wrote everything but some paths the host cannot hold (a name over 255 bytes
    or a path over PATH_MAX there): those were skipped (issue #29). Artifacts record them in
    the manifest and go on; other callers treat it as the transfer failure it is.

    Attributes:
        paths: the skipped member names (at most 100).
        count: how many were skipped in all.
    """

    def __init__(self, message: str, *, paths: list[str], count: int) -> None:
        super().__init__(
            message, kind=ErrorKind.TRANSFER_FAILED, detail={"too_long": paths[:100], "too_long_count": count}
        )
        self.paths, self.count = paths[:100], count


class SandboxLostError(SandboxError):
    """The sandbox engine (Docker daemon, the local init process) is gone: ``sandbox_lost``."""

    def __init__(self, message: str, *, detail: dict | None = None) -> None:
        super().__init__(message, kind=ErrorKind.SANDBOX_LOST, detail=detail)


class BuildError(TrialFailure):
    """An environment could not be built: ``build_failed``, ``build_timeout`` or ``image_not_found``.

    ``detail["log_tail"]`` holds the last lines of the build log.
    """


class ModelError(TrialFailure):
    """A model call failed for good: ``model_auth_failed``, ``model_unavailable``, or
    ``budget_exceeded`` (the model relay refused it, docs/relay.md)."""


def cause_line(exc: BaseException, limit: int = 300) -> str:
    """One line naming what really failed: ``Type: message``, exception groups unwrapped.

    An ``ExceptionGroup`` (a ``TaskGroup``'s "unhandled errors") is replaced by its first
    leaf exception, with ``(+N more)`` when it held several, so no top-level message is a bare
    ``ExceptionGroup`` (issue #29).

    Args:
        exc: the exception.
        limit: the longest line returned, characters (longer ones end with ``…``).

    Returns:
        e.g. ``OSError: [Errno 36] File name too long: '…'``.
    """
    leaves: list[BaseException] = []

    def walk(e: BaseException) -> None:
        if isinstance(e, BaseExceptionGroup):
            for inner in e.exceptions:
                walk(inner)
        else:
            leaves.append(e)

    walk(exc)
    first = leaves[0] if leaves else exc
    text = str(first).strip()
    line = f"{type(first).__name__}: {text}" if text else type(first).__name__
    line = " ".join(line.split())  # one line: newlines and runs of blanks folded
    if len(leaves) > 1:
        line += f" (+{len(leaves) - 1} more)"
    return line if len(line) <= limit else line[: limit - 1] + "\u2026"
