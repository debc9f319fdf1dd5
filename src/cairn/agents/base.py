"""The agent interface (SPEC §10): ``setup(sandbox)`` once per trial, ``run(...)`` once per step.

Agents know only the :class:`~cairn.sandbox.base.Sandbox` interface, never a backend.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from cairn.results.model import AgentExit, Tokens
from cairn.sandbox.base import Sandbox
from cairn.task.model import Step, Task


@dataclass
class AgentContext:
    """What one step's agent run gets besides the instruction.

    Attributes:
        task: the loaded task.
        step: the step being run.
        logs_dir: host folder for this step's agent logs (``steps/<nn>-<name>/agent``); an agent
            writes ``trajectory.json`` here (shared/ATIF.md).
        timeout_sec: the step's agent timeout (already multiplied). The engine enforces it by
            cancelling :meth:`Agent.run`; an agent may use it to bound its own commands.
        user: the user the agent's commands run as (``None`` = image default).
        env: environment variables for the agent's commands (``--ae``).
        resume_session: whether to continue the previous step's conversation
            (``--resume-agent-session``).
        tokens: set by the agent: tokens used in this step.
        cost_usd: set by the agent: cost of this step in USD, ``None`` when unknown.
        exit: set by the agent to report ``max_turns`` or ``error`` without raising.
        metadata: free-form values the agent wants recorded.
    """

    task: Task
    step: Step
    logs_dir: Path
    timeout_sec: float
    user: str | int | None = None
    env: dict[str, str] = field(default_factory=dict)
    resume_session: bool = False
    tokens: Tokens | None = None
    cost_usd: float | None = None
    exit: AgentExit | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


class Agent(ABC):
    """An agent under evaluation.

    Subclasses set :attr:`name` and implement :meth:`run`. ``kwargs`` come from ``--ak key=value``
    (strings; the agent converts them). An agent that needs a model sets :attr:`needs_model`.

    Raising from :meth:`run` is an agent crash (``agent_exit`` ``error``); it does not skip the
    verifier. :class:`~cairn.errors.ModelError` is the exception: it is classified (SPEC §6).
    """

    name: ClassVar[str] = "agent"
    version: ClassVar[str | None] = None
    needs_model: ClassVar[bool | None] = False
    """``True``: ``-m`` is required; ``False``: ``-m`` is refused; ``None``: optional."""
    supports_resume: ClassVar[bool | None] = None
    """Whether ``--resume-agent-session`` is supported: ``False`` refuses the flag before start;
    ``None`` (not declared) accepts it."""

    def __init__(self, model: str | None = None, **kwargs: Any) -> None:
        self.model = model
        self.kwargs = kwargs

    async def prepare_host(self, task: Task, *, can_mount: bool) -> tuple[tuple[str, str], ...]:
        """Prepare on the host before the trial's sandbox exists (fill a cache, check the task).

        Called once per trial, before the sandbox starts; its time counts as agent setup.

        Args:
            task: the trial's task.
            can_mount: whether the backend binds host folders read-only into the sandbox.

        Returns:
            ``(host_folder, sandbox_path)`` pairs to bind read-only (only when ``can_mount``).
            Default: nothing.

        Raises:
            TrialFailure: the agent cannot run this task (``config_error``) or its preparation
                failed (``agent_setup_failed``).
        """
        return ()

    async def setup(self, sandbox: Sandbox, context: AgentContext) -> None:
        """Prepare the sandbox once per trial (install a CLI agent, …). Default: nothing.

        Raises:
            Exception: any failure becomes ``agent_setup_failed`` (infra, retried).
        """

    @abstractmethod
    async def run(self, instruction: str, sandbox: Sandbox, context: AgentContext) -> None:
        """Work on one step's instruction inside ``sandbox``.

        Args:
            instruction: the step's instruction, canary lines removed.
            sandbox: the trial's shared sandbox.
            context: per-step context; the agent may set ``tokens``, ``cost_usd``, ``exit``.
        """
