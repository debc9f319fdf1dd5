"""Shared test helpers: which sandbox backends run here, a one-call trial runner, and the
schema check of a trial's files. Imported by tests as ``from testbed import …`` (the folder is on
``sys.path``; importing from ``conftest`` by name is ambiguous once sub-folders have their own)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import subprocess
from pathlib import Path

_MISSING: dict[str, str | None] = {}


def _docker_missing() -> str | None:
    import docker
    from docker.errors import DockerException

    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        docker.from_env(timeout=3).ping()
    except (DockerException, OSError) as exc:  # requests' errors are OSErrors
        return f"no Docker engine answers at {host} ({type(exc).__name__}: {exc})"
    if importlib.util.find_spec("cairn.sandbox.docker") is None:
        return "cairn.sandbox.docker is not in this checkout"
    return None


def _local_missing() -> str | None:
    """Run what the local backend runs first: its host probe, then the very ``unshare`` it
    starts a sandbox with (user, pid, ipc, uts and mount namespaces; ``--map-root-user`` when
    not root), so a host whose kernel or seccomp policy refuses namespaces says so here."""
    from cairn.errors import UnsupportedError
    from cairn.sandbox.local.rootfs import probe_host

    try:
        support = probe_host()
    except UnsupportedError as exc:
        return f"the local backend cannot run here: {exc}"
    argv = [
        support.unshare,
        "--user",
        "--pid",
        "--ipc",
        "--uts",
        "--mount",
        "--fork",
        "--kill-child",
        "--propagation",
        "private",
        "--keep-caps",
    ]
    if not support.privileged:
        argv.append("--map-root-user")
    try:
        out = subprocess.run([*argv, "--", "true"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"namespaces are not usable here: {' '.join(argv)} failed ({exc})"
    if out.returncode != 0:
        return (
            f"namespaces are not usable here: {' '.join(argv)} -- true exited "
            f"{out.returncode}: {out.stderr.strip()[-300:]}"
        )
    return None


def backend_missing(name: str) -> str | None:
    """Why a sandbox backend cannot run here, or None when it can.

    Args:
        name: ``docker`` (a daemon answers a ping within 3 s) or ``local`` (the host probe
            passes and ``unshare`` really creates the namespaces the backend uses).

    Returns:
        None, or one line naming what is missing (used as the skip reason; under ``CI=true``
        tests/conftest.py turns such a skip into a failure).
    """
    if name not in _MISSING:
        if name == "docker":
            _MISSING[name] = _docker_missing()
        elif name == "local":
            _MISSING[name] = _local_missing()
        else:
            _MISSING[name] = (
                None
                if importlib.util.find_spec(f"cairn.sandbox.{name}")
                else f"no backend module cairn.sandbox.{name}"
            )
    return _MISSING[name]


def backend_available(name: str) -> bool:
    """Whether a backend can run here (see :func:`backend_missing` for why not)."""
    return backend_missing(name) is None


def local_available() -> bool:
    """Whether the local namespace backend can run on this host (see :func:`backend_missing`)."""
    return backend_available("local")


def need_backend(name: str) -> None:
    """Skip the calling test, naming what is missing, when backend ``name`` cannot run here."""
    import pytest

    why = backend_missing(name)
    if why is not None:
        pytest.skip(f"backend {name}: {why}")


#: The only skips a CI run (``CI=true``) accepts: a pattern on the skip reason and why that
#: skip is right on CI's machine too. Any other skip fails CI: every component a test needs
#: (Docker, compose, Chromium, the agent CLIs, Ray, Harbor for parity) is one ``.ci/``
#: installs, so its absence is a broken set-up, not a reason to go green.
CI_ALLOWED_SKIPS: tuple[tuple[str, str], ...] = (
    (r"set CAIRN_VIEWER_SCREENSHOTS=", "refreshing the docs' screenshots is a manual step"),
    (r"set CAIRN_MUTATION=1", "mutation testing takes an hour: bench/mutation.py, run on request"),
    (
        r"known conformance gap",
        "a backend's gaps are declared in its code (cairn.sandbox.conformance), not missing from the machine",
    ),
)


def ci_strict() -> bool:
    """Whether skips that are not in :data:`CI_ALLOWED_SKIPS` fail the run (``CI=true``)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def skip_reason(report) -> str:
    """The reason of a skipped test or collection report (pytest keeps it as the third item
    of ``longrepr``)."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def allowed_skip(reason: str) -> bool:
    """Whether ``reason`` matches a declared :data:`CI_ALLOWED_SKIPS` pattern."""
    return any(re.search(pattern, reason) for pattern, _why in CI_ALLOWED_SKIPS)


def run_trial_sync(
    task_path: Path, agent: str | object, backend: str, jobs_dir: Path, *, attempt: int = 1, **options
):
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
    plan = TrialPlan(
        task=task,
        agent_name=agent_name,
        agent_kwargs={},
        model=None,
        backend=backend,
        attempt=attempt,
        trial_id=tid,
        trial_dir=job_dir / "trials" / trial_dir_name(task.name, attempt, tid),
        job_id="test-" + tid[:8],
        job_dir=job_dir,
        options=RunOptions(**options),
    )
    return asyncio.run(run_trial(plan, agent=agent_obj))


def validate_result_files(trial_dir: Path) -> None:
    """Validate result.json and steps.json of a trial against the shipped JSON Schemas."""
    import jsonschema

    from cairn.results.schemas import load_schema

    jsonschema.validate(json.loads((trial_dir / "result.json").read_text()), load_schema("result"))
    jsonschema.validate(json.loads((trial_dir / "config.json").read_text()), load_schema("config"))
    jsonschema.validate(json.loads((trial_dir / "steps.json").read_text()), load_schema("steps"))
