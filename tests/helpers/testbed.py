"""Shared test helpers: which sandbox backends run here, a one-call trial runner, and the
schema check of a trial's files. Imported by tests as ``from testbed import …`` (the folder is on
``sys.path``; importing from ``conftest`` by name is ambiguous once sub-folders have their own)."""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import json
from pathlib import Path

_AVAILABLE: dict[str, bool] = {}


def local_available() -> bool:
    """Whether the local namespace backend can run on this host (its own probe says so)."""
    from cairn.errors import UnsupportedError
    from cairn.sandbox.local.rootfs import probe_host

    try:
        probe_host()
    except UnsupportedError:
        return False
    return True


def backend_available(name: str) -> bool:
    """Whether a backend can run here (docker: a daemon answers; local: the module exists)."""
    if name not in _AVAILABLE:
        ok = False
        try:
            if name == "docker":
                import docker

                docker.from_env(timeout=3).ping()
                ok = importlib.util.find_spec("cairn.sandbox.docker") is not None
            else:
                ok = importlib.util.find_spec(f"cairn.sandbox.{name}") is not None
        except Exception:  # noqa: BLE001 - any failure means "not available here"
            ok = False
        _AVAILABLE[name] = ok
    return _AVAILABLE[name]


def run_trial_sync(task_path: Path, agent: str | object, backend: str, jobs_dir: Path, *,
                   attempt: int = 1, **options):
    """Load a task, plan one trial in ``jobs_dir/job`` and run it; returns the TrialResult."""
    from cairn.agents.base import Agent
    from cairn.plan import RunOptions, TrialPlan, trial_id
    from cairn.results.store import trial_dir_name
    from cairn.task.load import load_task
    from cairn.trial.run import run_trial

    task = load_task(task_path)
    agent_obj = agent if isinstance(agent, Agent) else None
    agent_name = agent if isinstance(agent, str) else type(agent).__name__
    tid = trial_id(task.name, task.content_hash, agent_name, {}, None, backend, attempt)
    job_dir = jobs_dir / "job"
    plan = TrialPlan(task=task, agent_name=agent_name, agent_kwargs={}, model=None,
                     backend=backend, attempt=attempt, trial_id=tid,
                     trial_dir=job_dir / "trials" / trial_dir_name(task.name, attempt, tid),
                     job_id="test-" + tid[:8], job_dir=job_dir, options=RunOptions(**options))
    return asyncio.run(run_trial(plan, agent=agent_obj))


def validate_result_files(trial_dir: Path) -> None:
    """Validate result.json and steps.json of a trial against the shipped JSON Schemas."""
    import jsonschema

    from cairn.results.schemas import load_schema

    jsonschema.validate(json.loads((trial_dir / "result.json").read_text()), load_schema("result"))
    jsonschema.validate(json.loads((trial_dir / "config.json").read_text()), load_schema("config"))
    jsonschema.validate(json.loads((trial_dir / "steps.json").read_text()), load_schema("steps"))
