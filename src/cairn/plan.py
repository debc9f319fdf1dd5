"""Trial plans: what one trial runs, with a deterministic id (design §8). Pure, no I/O.

A trial id is a hash of (task name, task content hash, agent name and kwargs, model, backend,
attempt), so the same job config over the same tasks always yields the same ids — which is what
makes ``cairn resume`` match finished trials and notice a changed task (its content hash moves).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from cairn.task.model import Task


@dataclass(frozen=True)
class RunOptions:
    """Options that shape how trials run (CLI flags of design §8).

    Attributes:
        timeout_multiplier: scales every timeout (agent, verifier, setup, build, healthcheck).
        verify: ``False`` for ``--no-verify`` (agents only, no reward, no gates).
        keep_sandbox: leave the sandbox of a failed trial running (``--keep-sandbox``).
        force_build: rebuild images even when cached (``--force-build``).
        hardened_verify: kill every agent-started process and remove planted Python start-up
            hooks before each verifier (``--hardened-verify``, design §4.4).
        resume_agent_session: carry the agent's conversation into the next step.
        agent_env: environment variables for the agent's commands (``--ae``).
        agent_setup_timeout_sec: bound on the agent's ``setup()``, seconds.
    """

    timeout_multiplier: float = 1.0
    verify: bool = True
    keep_sandbox: bool = False
    force_build: bool = False
    hardened_verify: bool = False
    resume_agent_session: bool = False
    agent_env: dict[str, str] = field(default_factory=dict)
    agent_setup_timeout_sec: float = 600.0


@dataclass(frozen=True)
class TrialPlan:
    """One trial: one task × one agent × one attempt, ready to run.

    Attributes:
        task: the loaded task.
        agent_name: registry name or ``package.module:Class``.
        agent_kwargs: ``--ak`` values.
        model: ``-m`` value or ``None``.
        backend: the resolved sandbox backend (``docker``, ``local``), never ``auto``.
        attempt: 1-based attempt number (``-k``).
        trial_id: deterministic id (:func:`trial_id`).
        trial_dir: the trial's folder under the job (created by the store).
        job_id: the owning job's id (sandbox label ``cairn.job``).
        job_dir: the owning job's folder (its lock decides whether resources are left over).
        options: run options shared by the job.
    """

    task: Task
    agent_name: str
    agent_kwargs: dict[str, Any]
    model: str | None
    backend: str
    attempt: int
    trial_id: str
    trial_dir: Path
    job_id: str
    job_dir: Path
    options: RunOptions = field(default_factory=RunOptions)

    @property
    def trial_name(self) -> str:
        """The trial folder's name (the job planner chose it by the store's rule,
        :func:`cairn.results.store.trial_dir_name`)."""
        return Path(self.trial_dir).name


def trial_id(task_name: str, content_hash: str, agent_name: str, agent_kwargs: dict[str, Any],
             model: str | None, backend: str, attempt: int) -> str:
    """Deterministic trial id: sha256 hex (64 chars) of the canonical JSON of its inputs.

    Example: the same arguments always give the same id; a changed ``content_hash`` gives
    another.
    """
    payload = json.dumps(
        {"task": task_name, "content_hash": content_hash, "agent": agent_name,
         "kwargs": agent_kwargs, "model": model, "backend": backend, "attempt": attempt},
        sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


class JobConfig(BaseModel):
    """A job's resolved configuration (design §8); what ``-c job.yaml`` holds, flags win.

    Recorded in job.json (templates, never secret values). Units: seconds, counts.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    paths: tuple[Path, ...] = ()
    """Task folders or dataset folders (``-p``)."""
    include: tuple[str, ...] = ()
    """Task-name globs to keep (``-i``); empty keeps all."""
    exclude: tuple[str, ...] = ()
    """Task-name globs to drop (``-x``)."""
    attempts: int = Field(default=1, ge=1)
    """Attempts per task (``-k``)."""
    n_concurrent: int = Field(default=4, ge=1)
    """Trials running at once (``-n``)."""
    agent: str = "oracle"
    model: str | None = None
    agent_kwargs: dict[str, Any] = Field(default_factory=dict)
    agent_env: dict[str, str] = Field(default_factory=dict)
    backend: str = "auto"
    """``auto``, ``docker`` or ``local`` (``-e``)."""
    job_name: str | None = None
    """Default: the start time, ``YYYY-MM-DD__HH-MM-SS``."""
    jobs_dir: Path = Path("jobs")
    max_retries: int = Field(default=2, ge=0)
    """Automatic re-runs of an infra-errored trial (so at most ``max_retries + 1`` runs)."""
    retry_backoff_sec: float = Field(default=2.0, ge=0)
    """First retry delay, doubled on each further retry."""
    timeout_multiplier: float = Field(default=1.0, gt=0)
    verify: bool = True
    force_build: bool = False
    keep_sandbox: bool = False
    hardened_verify: bool = False
    resume_agent_session: bool = False
    max_cost_usd: float | None = None
    """Stop starting new trials once the job has spent this much (USD)."""
    executor: str = "local"
    """Where trials run (``--executor``): ``local`` (in this process) or ``ray`` (a Ray
    cluster's worker nodes, docs/scale-out.md)."""
    ray_address: str | None = None
    """``--ray-address`` of the ``ray`` executor; default ``RAY_ADDRESS``, else a fresh local
    Ray."""

    def run_options(self) -> RunOptions:
        """The per-trial :class:`RunOptions` of this job."""
        return RunOptions(timeout_multiplier=self.timeout_multiplier, verify=self.verify,
                          keep_sandbox=self.keep_sandbox, force_build=self.force_build,
                          hardened_verify=self.hardened_verify,
                          resume_agent_session=self.resume_agent_session,
                          agent_env=dict(self.agent_env))
