"""Environment-variable templates in task.toml env tables (design §1.1).

A value is a literal, or — as the *whole* value — ``${VAR}`` (read from the host environment
at run time) or ``${VAR:-default}`` (the default when ``VAR`` is unset). ``${...}`` inside a
longer string is refused by validation (:func:`embedded_template`). The task model keeps the
templates; :func:`resolve_env` turns them into values just before a trial starts, and
:func:`secret_values` lists what must be masked in everything cairn writes (design §7).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from cairn.errors import ErrorKind, TrialFailure

_TEMPLATE_RE = re.compile(r"^\$\{(?P<var>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}$")

MIN_SECRET_LEN = 4
"""Resolved template values shorter than this are not masked (design §7)."""


def parse_template(value: str) -> tuple[str, str | None] | None:
    """Parse a whole-value template.

    Args:
        value: an env value as written in task.toml.

    Returns:
        ``(variable, default)`` for ``${VAR}`` (default ``None``) or ``${VAR:-default}``;
        ``None`` when the value is a literal.
    """
    m = _TEMPLATE_RE.match(value)
    if m is None:
        return None
    return m.group("var"), m.group("default")


def embedded_template(value: str) -> bool:
    """Whether ``value`` holds ``${`` without being one whole, valid template.

    Such values are refused by validation (``Bearer ${KEY}``, ``${A}${B}``, ``${1X}``).

    Args:
        value: an env value as written in task.toml.

    Returns:
        ``True`` when the value must be refused.
    """
    return "${" in value and parse_template(value) is None


def missing_variables(templates: Mapping[str, str], environ: Mapping[str, str]) -> list[str]:
    """The host variables that templates need and ``environ`` lacks (no default given).

    Args:
        templates: env name → value as written in task.toml.
        environ: the host environment.

    Returns:
        Variable names, sorted, without duplicates.
    """
    missing: set[str] = set()
    for value in templates.values():
        parsed = parse_template(value)
        if parsed is not None and parsed[1] is None and parsed[0] not in environ:
            missing.add(parsed[0])
    return sorted(missing)


def resolve_env(templates: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """Resolve an env table for a run.

    Args:
        templates: env name → value as written in task.toml (literals and templates).
        environ: the host environment (e.g. ``os.environ``).

    Returns:
        env name → value: literals unchanged, ``${VAR}`` → ``environ[VAR]``,
        ``${VAR:-default}`` → ``environ.get(VAR, default)``.

    Raises:
        TrialFailure: kind ``config_error`` naming every variable that is missing from
            ``environ`` and has no default (``detail["missing"]`` lists them).
    """
    missing = missing_variables(templates, environ)
    if missing:
        users = sorted(
            k for k, v in templates.items() if (p := parse_template(v)) is not None and p[0] in missing
        )
        raise TrialFailure(
            ErrorKind.CONFIG_ERROR,
            f"environment variable{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
            f"not set on the host (needed by {', '.join(users)})",
            detail={"missing": missing},
        )
    out: dict[str, str] = {}
    for name, value in templates.items():
        parsed = parse_template(value)
        if parsed is None:
            out[name] = value
        else:
            var, default = parsed
            out[name] = environ.get(var, default or "")
    return out


def secret_values(templates: Mapping[str, str], resolved: Mapping[str, str]) -> set[str]:
    """The resolved values that came from the host through templates (to mask, design §7).

    A value equal to the template's own default is not secret (it is written in the task),
    nor is one shorter than :data:`MIN_SECRET_LEN` characters.

    Args:
        templates: env name → value as written in task.toml.
        resolved: the output of :func:`resolve_env` for the same templates.

    Returns:
        The set of values to mask.
    """
    secrets: set[str] = set()
    for name, value in templates.items():
        parsed = parse_template(value)
        if parsed is None or name not in resolved:
            continue
        got = resolved[name]
        if len(got) >= MIN_SECRET_LEN and got != parsed[1]:
            secrets.add(got)
    return secrets
