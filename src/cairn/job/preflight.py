"""What a run would refuse, found before anything starts (design §2): the check predicts the run.

``cairn tasks check`` runs :func:`preflight_findings` on every task without errors, so that
"ok" means the run does not end in ``config_error``: the backend's capability check (BuildKit
syntax the engine cannot build, a compose file cairn cannot run, a network mode or a limit the
backend cannot enforce), the Harbor 0.26 keys cairn does not act on, and ``${VAR}`` templates
whose variable is unset in this shell (a warning: the run's shell may set it).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

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
        ("[solution.env]", task.config.solution.env),
    ]
    seen: set[str] = set()
    for step in task.steps:
        tables.append((f"verifier env of step {step.name}", step.verifier_env))
    out: list[Finding] = []
    for where, table in tables:
        for var in missing_variables(table, environ):
            if var in seen:
                continue
            seen.add(var)
            out.append(
                Finding(
                    source,
                    None,
                    WARNING,
                    f"{where}: ${{{var}}} is not set in this shell; a run without "
                    "it stops before any sandbox starts",
                    "template-unset",
                )
            )
    return out


def unsupported_key_findings(task: Task) -> list[Finding]:
    """Harbor 0.26 keys cairn reads but does not act on (yet), said before a run."""
    source = task.path / "task.toml"
    cfg = task.config
    out: list[Finding] = []
    if cfg.environment.skills_dir or cfg.environment.mcp_servers:
        out.append(
            Finding(
                source,
                None,
                WARNING,
                "[environment].skills_dir/mcp_servers: a run refuses agents that "
                "take no skills or cannot use the MCP servers (MCP: unless "
                "--ak ignore_mcp=true; the oracle and nop run)",
                "unsupported-key",
            )
        )
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
    spec = SandboxSpec(
        env_dir=task.env_dir,
        docker_image=e.docker_image,
        workdir=e.workdir,
        cpus=e.cpus,
        memory_mb=e.memory_mb,
        storage_mb=e.storage_mb,
        gpus=e.gpus,
        network_mode=e.effective_network_mode,
        env={k: "" for k in e.env},
        env_hash=task.env_hash,
        name=task.slug,
    )
    out: list[Finding] = []
    try:
        cls = get_backend(backend, compose=task.compose_file is not None)
        for w in cls.check(spec):
            out.append(Finding(source, None, WARNING, f"backend {backend}: {w}", "backend-limit"))
    except UnsupportedError as exc:
        out.append(Finding(source, None, ERROR, f"backend {backend}: {exc}", "backend-unsupported"))
    except (SandboxLostError, TrialFailure) as exc:
        out.append(
            Finding(
                source,
                None,
                WARNING,
                f"backend {backend} could not be asked ({exc}); not checked",
                "backend-unavailable",
            )
        )
    return out


def _same_place(a: Any, b: Any) -> bool:
    """Two artifact entries stored at the same destination from different sources."""
    import posixpath

    return posixpath.normpath(a.effective_destination or ".") == posixpath.normpath(
        b.effective_destination or "."
    ) and posixpath.normpath(a.source) != posixpath.normpath(b.source)


def artifact_warnings(artifacts: Sequence[str], tasks: Iterable[tuple[str, Task]]) -> list[str]:
    """Warnings for a job's ``--artifact`` paths, by the task lint's own artifact rules
    (:func:`cairn.task.lint.artifact_log_overlap`, :func:`~cairn.task.lint.artifact_overlap`):
    a path under ``/logs`` or containing it (``/``), two paths whose outputs nest, and a path
    whose output nests in one of a task's own artifact entries, or lands where one is stored
    (once per task and pair).

    Args:
        artifacts: the job's ``--artifact`` paths (absolute sandbox paths).
        tasks: ``(name, task)`` of each task to run.

    Returns:
        One line per finding, ``--artifact PATH ...: why (rule id)``, task lines prefixed with
        the task name.
    """
    from cairn.task.lint import artifact_log_overlap, artifact_overlap
    from cairn.task.model import Artifact

    extra = [Artifact(source=p) for p in dict.fromkeys(artifacts)]
    out: list[str] = []
    for a in extra:
        if (overlap := artifact_log_overlap(a.source)) is not None:
            out.append(
                f"--artifact {a.source} {overlap.relation}: {overlap.why}; "
                f"{overlap.fix(artifact='collect the output from')} "
                "(artifact-log-overlap)"
            )
    for j, b in enumerate(extra):
        for a in extra[:j]:
            if (why := artifact_overlap(a, b)) is not None:
                out.append(
                    f"--artifact {b.source} overlaps --artifact {a.source}: {why} (overlapping-artifacts)"
                )
    for name, task in tasks:
        seen: set[tuple[str, str]] = set()
        for step in task.steps:
            for own in step.artifacts:
                if (own.service or "main") != "main" or own.source in artifacts:
                    continue
                for a in extra:
                    if (a.source, own.source) in seen:
                        continue
                    why = artifact_overlap(own, a)
                    if why is None and _same_place(own, a):  # a task cannot say this twice
                        why = (
                            f"both are stored at `{a.effective_destination}` in the step's "
                            "artifacts/ (the later copy wins)"
                        )
                    if why is not None:
                        seen.add((a.source, own.source))
                        out.append(
                            f"{name}: --artifact {a.source} overlaps the task's artifact "
                            f"{own.source}: {why} (overlapping-artifacts)"
                        )
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
    return [
        Finding(named if f.path == task.path / "task.toml" else f.path, f.line, f.severity, f.text, f.rule)
        for f in out
    ]


def refuse_unsupported(
    decisions: list[Any], config: Any, backend: str, environ: Mapping[str, str] | None = None
) -> tuple[list[Any], list[str]]:
    """The job's capability check, once per task before any trial is queued (design §3).

    Each task that is to run is asked once: does the job's agent take it (skills, MCP
    servers), and can the backend enforce its sandbox (a network policy with the agent's model
    hosts and a judge's opening, GPUs, compose, ...)? The trials of a refused task become
    ``config_error`` results at once (no sandbox, no queue), with the message the trial itself
    would give; the other tasks run.

    Args:
        decisions: the planner's :class:`~cairn.job.planner.TrialDecision` list.
        config: the :class:`~cairn.plan.JobConfig`.
        backend: the resolved backend.
        environ: where ``${VAR}`` templates resolve (default ``os.environ``).

    Returns:
        (the decisions, refused ones turned ``INVALID``; one line per refused task).
    """
    import dataclasses

    from cairn.agents.registry import create_agent
    from cairn.job.discover import TaskEntry
    from cairn.job.planner import TrialAction
    from cairn.trial.run import preflight_refusal

    try:
        agent = create_agent(config.agent, config.model, dict(config.agent_kwargs))
    except Exception:  # noqa: BLE001 - the trials report an agent that cannot be made
        return decisions, []
    opts = config.run_options()
    verdicts: dict[str, str | None] = {}
    out: list[Any] = []
    lines: list[str] = []
    for d in decisions:
        task = d.entry.task
        if d.action is not TrialAction.RUN or task is None:
            out.append(d)
            continue
        key = str(d.entry.path)
        if key not in verdicts:
            try:
                verdicts[key] = preflight_refusal(task, agent, opts, backend, environ)
            except (SandboxLostError, TrialFailure):  # the engine cannot be asked: trials do
                verdicts[key] = None
            if verdicts[key] is not None:
                lines.append(f"{d.entry.name}: refused before start: {verdicts[key]}")
        why = verdicts[key]
        if why is None:
            out.append(d)
            continue
        refused = TaskEntry(
            d.entry.path,
            d.entry.name,
            error=why,
            content_hash=d.entry.content_hash,
            steps=list(d.entry.steps),
            source=d.entry.source,
        )
        out.append(dataclasses.replace(d, action=TrialAction.INVALID, entry=refused))
    return out, lines


__all__ = [
    "artifact_warnings",
    "backend_findings",
    "preflight_findings",
    "refuse_unsupported",
    "template_findings",
    "unsupported_key_findings",
]
