"""Validation findings (design §2): one error or warning about a task, with file and line.

A finding prints as ``path:line: error|warning: text`` (``path: error: text`` when it has no
line); ``cairn tasks check`` appends the rule id, ``… text [rule]`` (:meth:`Finding.format`).
``cairn tasks check --strict`` turns warnings into errors (:func:`promote_warnings`). Every
finding carries a stable rule id (``unknown-config-field``, ``compose-privileged`` …; the
catalogue is :data:`cairn.task.lint.RULES`, docs/lint.md); errors without a more specific id
are ``invalid-task-config`` (a task.toml key) or ``invalid-task-files`` (a file or folder).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

Severity = Literal["error", "warning"]

ERROR: Severity = "error"
WARNING: Severity = "warning"

INVALID_CONFIG = "invalid-task-config"
"""The rule id of an error about a task.toml key that has no more specific id."""
INVALID_FILES = "invalid-task-files"
"""The rule id of an error about a task file or folder that has no more specific id."""


@dataclass(frozen=True)
class Finding:
    """One validation finding.

    Attributes:
        path: the file (or folder) the finding is about, as the caller named the task
            (relative paths stay relative).
        line: 1-based line in ``path``, or ``None`` when the finding has no line.
        severity: ``"error"`` or ``"warning"``.
        text: what is wrong, naming the key, file or step concerned.
        rule: the stable rule id (docs/lint.md); ``""`` only for findings made outside the
            task check (they print without a rule).
    """

    path: Path
    line: int | None
    severity: Severity
    text: str
    rule: str = ""

    @property
    def is_error(self) -> bool:
        """Whether this finding is an error."""
        return self.severity == ERROR

    def __str__(self) -> str:
        return self.format(rule=False)

    def format(self, *, rule: bool = True) -> str:
        """The printed line: ``path:line: severity: text`` and, with ``rule``, `` [rule-id]``.

        Args:
            rule: append the rule id in brackets (when the finding has one).

        Returns:
            One line (the text is printed as is).
        """
        where = f"{self.path}:{self.line}" if self.line is not None else f"{self.path}"
        tail = f" [{self.rule}]" if rule and self.rule else ""
        return f"{where}: {self.severity}: {self.text}{tail}"


def promote_warnings(findings: Iterable[Finding]) -> list[Finding]:
    """Turn every warning into an error (``--strict``).

    Args:
        findings: findings of any severity.

    Returns:
        The same findings, in order, all of severity ``"error"``.
    """
    return [f if f.is_error else replace(f, severity=ERROR) for f in findings]


def has_errors(findings: Iterable[Finding]) -> bool:
    """Whether any finding is an error.

    Args:
        findings: findings of any severity.

    Returns:
        ``True`` when at least one finding has severity ``"error"``.
    """
    return any(f.is_error for f in findings)


def format_key_path(path: tuple[str | int, ...]) -> str:
    """Spell a key path as a task author reads it: ``steps[1].verifier.env.TOKEN``.

    Args:
        path: keys (str) and array indices (int).

    Returns:
        The dotted spelling; keys that are not bare TOML keys are quoted.
    """
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
            continue
        bare = part != "" and all(c.isascii() and (c.isalnum() or c in "_-") for c in part)
        text = part if bare else '"' + part.replace("\\", "\\\\").replace('"', '\\"') + '"'
        out += ("." if out else "") + text
    return out


class FindingSink:
    """Collects the findings of one task check.

    Findings about task.toml keys get the key's line from ``line_of``; errors remember their
    key path (:attr:`error_paths`) so that a later check can skip a key already reported.

    Args:
        source: the file holding the task's keys (task.toml or task.md), as the caller named it.
        line_of: key path → 1-based line (or ``None``) in ``source``.
    """

    def __init__(self, source: Path, line_of) -> None:
        self.source = source
        self.line_of = line_of
        self.findings: list[Finding] = []
        self.error_paths: set[tuple[str | int, ...]] = set()

    def key(
        self, path: tuple[str | int, ...], severity: Severity, text: str, rule: str = INVALID_CONFIG
    ) -> None:
        """Record a finding about a task.toml key path (located by its line).

        Args:
            path: the key path concerned.
            severity: ``"error"`` or ``"warning"``.
            text: the message.
            rule: the rule id (every warning names its own).
        """
        if severity == ERROR:
            self.error_paths.add(path)
        self.findings.append(Finding(self.source, self.line_of(path), severity, text, rule))

    def file(
        self, path: Path, severity: Severity, text: str, line: int | None = None, rule: str = INVALID_FILES
    ) -> None:
        """Record a finding about a file or folder of the task.

        Args:
            path: the file or folder concerned.
            severity: ``"error"`` or ``"warning"``.
            text: the message.
            line: 1-based line in that file, if any.
            rule: the rule id (every warning names its own).
        """
        self.findings.append(Finding(path, line, severity, text, rule))

    @property
    def has_errors(self) -> bool:
        """Whether an error was recorded."""
        return has_errors(self.findings)
