"""Shared fixtures: real sandbox backends and a one-call trial runner."""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent / "helpers"))

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


@pytest.fixture(params=["docker", "local"])
def backend(request) -> str:
    """Each trial-engine test runs on every backend that exists in this checkout."""
    name = request.param
    if not backend_available(name):
        pytest.skip(f"backend {name} not available")
    request.node.add_marker(pytest.mark.docker if name == "docker" else pytest.mark.local)
    return name


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


def _refuse_constant(name: str):
    raise ValueError(f"non-finite JSON constant {name}")


@pytest.fixture(autouse=True)
def _results_match_schemas(request):
    """Every result.json / steps.json / config.json / summary.json / job.json a test leaves
    under its tmp_path validates
    against the shipped JSON Schemas (issue 5: every result the suite produces)."""
    yield
    if request.node.get_closest_marker("writes_invalid_results"):
        return
    tmp = request.node.funcargs.get("tmp_path")
    if tmp is None or not Path(tmp).is_dir():
        return
    import jsonschema

    from cairn.results.schemas import load_schema

    names = {"result.json": "result", "steps.json": "steps", "summary.json": "summary",
             "config.json": "config", "job.json": "job"}
    for fname, schema in names.items():
        for p in Path(tmp).rglob(fname):
            if fname in ("summary.json", "job.json"):
                if not (p.parent / "trials").is_dir() and not (p.parent / "lock").exists():
                    continue  # only a job folder's own files
            elif "trials" not in p.parts:
                continue  # only files cairn's store wrote under a job folder
            try:
                data = json.loads(p.read_text(), parse_constant=_refuse_constant)
            except (OSError, ValueError):
                continue  # tests that plant broken files check that themselves
            jsonschema.validate(data, load_schema(schema))
