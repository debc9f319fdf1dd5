"""What a run would refuse, found before anything starts (design §2): the check predicts the run.

``cairn tasks check`` runs :func:`preflight_findings` on every task without errors, so that
"ok" means the run does not end in ``config_error``: the backend's capability check (BuildKit
syntax the engine cannot build, a compose file cairn cannot run, a network mode or a limit the
backend cannot enforce), the Harbor 0.26 keys cairn does not act on, and ``${VAR}`` templates
whose variable is unset in this shell (a warning: the run's shell may set it).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from cairn.errors import SandboxLostError, TrialFailure, UnsupportedError
from cairn.task.envvars import missing_variables
from cairn.task.findings import ERROR, WARNING, Finding
from cairn.task.model import Task


def template_findings(task: Task, environ: Mapping[str, str] | None = None) -> list[Finding]:
    """A warning per ``${VAR}`` template whose variable is unset here (no default).

    Args:
        task: the loaded task.
        environ: the environment to resolve against (default ``os.environ``).

    Returns:
        Warnings naming each table and variable.
    """
    environ = os.environ if environ is None else environ
    source = task.path / "task.toml"
    tables: list[tuple[str, Mapping[str, str]]] = [
        ("[environment.env]", task.environment.env),
        ("[solution.env]", task.config.solution.env)]
    seen: set[str] = set()
    for step in task.steps:
        tables.append((f"verifier env of step {step.name}", step.verifier_env))
    out: list[Finding] = []
    for where, table in tables:
        for var in missing_variables(table, environ):
            if var in seen:
                continue
            seen.add(var)
            out.append(Finding(source, None, WARNING,
                               f"{where}: ${{{var}}} is not set in this shell; a run without "
                               "it stops before any sandbox starts", "template-unset"))
    return out


def unsupported_key_findings(task: Task) -> list[Finding]:
    """Harbor 0.26 keys cairn reads but does not act on (yet), said before a run."""
    source = task.path / "task.toml"
    cfg = task.config
    out: list[Finding] = []
    if cfg.environment.skills_dir or cfg.environment.mcp_servers:
        out.append(Finding(source, None, WARNING,
                           "[environment].skills_dir/mcp_servers: a run refuses agents that "
                           "take no skills or cannot use the MCP servers (MCP: unless "
                           "--ak ignore_mcp=true; the oracle and nop run)",
                           "unsupported-key"))
    return out


def backend_findings(task: Task, backend: str) -> list[Finding]:
    """The backend's capability check for the task's sandbox, as a finding list.

    Args:
        task: the loaded task.
        backend: ``docker`` or ``local`` (``auto`` already resolved).

    Returns:
        An error for what the backend refuses (the run would end ``config_error``), warnings
        for what it cannot apply; a warning when the engine cannot be asked.
    """
    from cairn.sandbox import get_backend
    from cairn.sandbox.base import SandboxSpec

    source = task.path / "task.toml"
    e = task.environment
    spec = SandboxSpec(env_dir=task.env_dir, docker_image=e.docker_image, workdir=e.workdir,
                       cpus=e.cpus, memory_mb=e.memory_mb, storage_mb=e.storage_mb,
                       gpus=e.gpus, network_mode=e.effective_network_mode,
                       env={k: "" for k in e.env}, env_hash=task.env_hash, name=task.slug)
    out: list[Finding] = []
    try:
        cls = get_backend(backend, compose=task.compose_file is not None)
        for w in cls.check(spec):
            out.append(Finding(source, None, WARNING, f"backend {backend}: {w}",
                               "backend-limit"))
    except UnsupportedError as exc:
        out.append(Finding(source, None, ERROR, f"backend {backend}: {exc}",
                           "backend-unsupported"))
    except (SandboxLostError, TrialFailure) as exc:
        out.append(Finding(source, None, WARNING,
                           f"backend {backend} could not be asked ({exc}); not checked",
                           "backend-unavailable"))
    return out


def preflight_findings(path: Path, backend: str | None) -> list[Finding]:
    """Everything a run of this (valid) task would refuse or warn about before it starts.

    Args:
        path: a task folder that loads without errors.
        backend: the backend to check against, or ``None`` to skip the backend check.

    Returns:
        Findings (errors mean the run would end ``config_error``).
    """
    from cairn.errors import TaskFormatError
    from cairn.task.load import load_task

    try:
        task = load_task(path)
    except TaskFormatError:
        return []
    out = template_findings(task) + unsupported_key_findings(task)
    if backend is not None:
        out += backend_findings(task, backend)
    named = Path(path) / (task.path / "task.toml").name
    # Findings name the file as the caller named the task (relative stays relative).
    return [Finding(named if f.path == task.path / "task.toml" else f.path, f.line, f.severity,
                    f.text, f.rule) for f in out]


__all__ = ["backend_findings", "preflight_findings", "template_findings",
           "unsupported_key_findings"]
