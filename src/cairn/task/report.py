"""The ``cairn tasks check --json`` document (docs/lint.md): a stable shape with a JSON Schema.

The schema is ``check.schema.json``, generated with the result schemas
(:mod:`cairn.results.schemas`); a test compares the committed file with the models here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from cairn.task.findings import Finding

CHECK_SCHEMA_VERSION = 1
"""Bumped only when a field changes meaning or goes away (new fields may be added)."""


class CheckFinding(BaseModel):
    """One finding.

    Attributes:
        rule: the stable rule id (docs/lint.md).
        severity: ``error`` or ``warning`` (``--strict`` reports every warning as an error).
        path: the file or folder, as the task was named on the command line.
        line: 1-based line in ``path``, or ``null``.
        message: what is wrong (file contents quoted in it are the task author's text).
    """

    model_config = ConfigDict(extra="forbid")

    rule: str
    severity: Literal["error", "warning"]
    path: str
    line: int | None = Field(default=None, ge=1)
    message: str


class CheckedTask(BaseModel):
    """One checked task folder (or a path that holds no task).

    Attributes:
        path: the task folder as given (a dataset's task as ``DATASET/NAME``).
        ok: no finding of severity ``error``.
        findings: its findings, validation first, then lint, then the run's preflight.
    """

    model_config = ConfigDict(extra="forbid")

    path: str
    ok: bool
    findings: list[CheckFinding] = Field(default_factory=list)


class CheckCounts(BaseModel):
    """How many findings of each severity were reported (after ``--select``/``--ignore``)."""

    model_config = ConfigDict(extra="forbid")

    error: int = 0
    warning: int = 0


class CheckReport(BaseModel):
    """The whole ``cairn tasks check --json`` output.

    Attributes:
        schema_version: :data:`CHECK_SCHEMA_VERSION`.
        ok: every task is ok (the command exits 0 exactly then).
        strict: ``--strict`` was given.
        counts: findings per severity.
        tasks: one entry per task, in the order checked.
    """

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    ok: bool
    strict: bool = False
    counts: CheckCounts = Field(default_factory=CheckCounts)
    tasks: list[CheckedTask] = Field(default_factory=list)


def finding_out(finding: Finding) -> CheckFinding:
    """A :class:`~cairn.task.findings.Finding` as its JSON entry."""
    return CheckFinding(
        rule=finding.rule or ("invalid-task-files" if finding.is_error else ""),
        severity=finding.severity,
        path=str(finding.path),
        line=finding.line,
        message=finding.text,
    )


def check_report(tasks: Sequence[tuple[Path, Sequence[Finding]]], *, strict: bool) -> CheckReport:
    """Build the report from each task's (already selected) findings.

    Args:
        tasks: ``(task path, findings)`` in the order checked.
        strict: ``--strict`` was given (the findings are already promoted).

    Returns:
        The report.
    """
    out: list[CheckedTask] = []
    counts = CheckCounts()
    for path, findings in tasks:
        entries = [finding_out(f) for f in findings]
        counts.error += sum(1 for f in findings if f.is_error)
        counts.warning += sum(1 for f in findings if not f.is_error)
        out.append(CheckedTask(path=str(path), ok=not any(f.is_error for f in findings), findings=entries))
    return CheckReport(ok=all(t.ok for t in out), strict=strict, counts=counts, tasks=out)


__all__ = [
    "CHECK_SCHEMA_VERSION",
    "CheckCounts",
    "CheckFinding",
    "CheckReport",
    "CheckedTask",
    "check_report",
    "finding_out",
]
