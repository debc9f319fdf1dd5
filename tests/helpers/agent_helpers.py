"""Helpers for agent tests: a real sandbox for a generated task, and per-step agent contexts.

The backend is ``docker`` unless ``CAIRN_TEST_AGENT_BACKEND`` names another registered one
(``local``). Tests that start a sandbox carry ``@pytest.mark.docker`` and skip when no engine
answers.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from cairn.agents.base import AgentContext
from cairn.sandbox import get_backend
from cairn.sandbox.base import Sandbox, SandboxSpec
from cairn.task.model import Task
from testbed import backend_missing

BACKEND = os.environ.get("CAIRN_TEST_AGENT_BACKEND", "docker")


def backend_ready() -> bool:
    """Whether the test backend can start sandboxes here (testbed's probe; it says why not)."""
    return backend_missing(BACKEND) is None


needs_sandbox = pytest.mark.skipif(
    not backend_ready(), reason=f"sandbox backend {BACKEND!r}: {backend_missing(BACKEND)}"
)


@asynccontextmanager
async def task_sandbox(task: Task, mounts: tuple[tuple[str, str], ...] = ()) -> AsyncIterator[Sandbox]:
    """Start the task's environment on the test backend (with read-only ``mounts``); always
    removed afterwards."""
    env = task.environment
    spec = SandboxSpec(
        env_dir=task.env_dir,
        docker_image=env.docker_image,
        workdir=env.workdir,
        network_mode=env.effective_network_mode,
        env_hash=task.env_hash,
        name=task.slug,
        job_id="test-agents",
        trial_id=uuid.uuid4().hex[:12],
        mounts=tuple(mounts),
    )
    async with get_backend(BACKEND)(spec) as sandbox:
        yield sandbox


def step_context(task: Task, index: int, root: Path, **kwargs) -> AgentContext:
    """An :class:`AgentContext` for step ``index`` (1-based) logging under ``root``."""
    step = task.steps[index - 1]
    logs = root / "steps" / step.dir_name / "agent"
    logs.mkdir(parents=True, exist_ok=True)
    kwargs.setdefault("timeout_sec", step.agent_timeout_sec)
    return AgentContext(task=task, step=step, logs_dir=logs, user=step.agent_user, **kwargs)
