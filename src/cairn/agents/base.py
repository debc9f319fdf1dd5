"""The agent interface (design §10): ``setup(sandbox)`` once per trial, ``run(...)`` once per step.

Agents know only the :class:`~cairn.sandbox.base.Sandbox` interface, never a backend.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from cairn.errors import UsageError
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
            writes ``trajectory.json`` here (ATIF; docs/agents.md, "Trajectories").
        timeout_sec: the step's agent timeout (already multiplied). The engine enforces it by
            cancelling :meth:`Agent.run`; an agent may use it to bound its own commands.
        user: the user the agent's commands run as (``None`` = image default).
        env: environment variables for the agent's commands (``--ae``).
        resume_session: whether to continue the previous step's conversation
            (``--resume-agent-session``).
        tokens: set by the agent: tokens used in this step.
        cost_usd: set by the agent: cost of this step in USD, ``None`` when unknown.
        exit: set by the agent to report ``max_turns`` or ``error`` without raising.
        solution_env: the task's resolved ``[solution.env]``: what the oracle's ``solve.sh``
            runs with (an agent under evaluation ignores it).
        model_retries: set by the agent: model calls it retried on transient errors in this
            step (shown as a step warning).
        metadata: other values the agent reports (kept in its own logs; nothing is stored).
        notify: prints one line on the job's terminal (and trial.log) as a ``retry`` event,
            tagged with the trial: e.g. each model-call retry with its cause (issue 27).
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
    solution_env: dict[str, str] = field(default_factory=dict)
    model_retries: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)
    notify: Callable[[str], None] = field(default=lambda line: None)


class Agent(ABC):
    """An agent under evaluation.

    Subclasses set :attr:`name` and implement :meth:`run`. ``kwargs`` come from ``--ak key=value``
    (strings; the agent converts them). An agent that needs a model sets :attr:`needs_model`.

    Raising from :meth:`run` is an agent crash (``agent_exit`` ``error``); it does not skip the
    verifier. :class:`~cairn.errors.ModelError` is the exception: it is classified (design §6).
    """

    name: ClassVar[str] = "agent"
    version: str | None = None
    """Recorded in results; a class default that an instance may pin (installed agents'
    ``--ak version=``), hence not a ``ClassVar``."""
    needs_model: ClassVar[bool | None] = False
    """``True``: ``-m`` is required; ``False``: ``-m`` is refused; ``None``: optional."""
    task_context: ClassVar[frozenset[str]] = frozenset()
    """What of the task's agent context this agent uses: ``"skills"`` (``skills_dir``),
    ``"mcp_servers"``. A task that sets one the agent does not use is refused before start,
    unless :attr:`ignores_instruction` (Harbor 0.26 hands both to its agents)."""
    ignores_instruction: ClassVar[bool] = False
    """The agent does not act on the instruction (oracle, nop): skills and MCP servers are
    meaningless to it, so a task that sets them is not refused."""
    supports_resume: ClassVar[bool | None] = None
    """Whether ``--resume-agent-session`` is supported: ``False`` refuses the flag before start;
    ``None`` (not declared) accepts it."""
    supports_seed: ClassVar[bool] = False
    """Whether the agent loads a task's seed trajectory (``trajectory.json`` beside the first
    step's instruction, :attr:`cairn.task.model.Task.seed_trajectory`) into the first step's
    session. A task with one is refused before start for an agent that does not (unless
    :attr:`ignores_instruction`: oracle and nop skip it, as Harbor 0.26 does)."""

    known_options: ClassVar[tuple[str, ...] | None] = None
    """The ``--ak`` option names this agent takes (``()``: none); any other is refused before
    any trial runs (:func:`refuse_unknown_options`). ``None`` (not declared) hands every
    ``--ak`` to the agent, which checks its own (the installed and ``llm`` agents do, with the
    same rule). Not inherited: a subclass that does not declare it takes any option."""

    def __init__(self, model: str | None = None, **kwargs: Any) -> None:
        self.model = model
        self.kwargs = kwargs

    def model_hosts(self, agent_env: Mapping[str, str]) -> list[str]:
        """Hosts this agent must reach *from inside the sandbox* during its agent phases (its
        model API). The trial opens them through the sandbox's egress gateway for the agent
        phase only, also under ``no-network`` (where they are all the agent reaches).

        An agent that talks to its model from the host (the built-in ``llm`` agent) returns
        ``[]`` (the default). Called once per trial before the sandbox starts.

        Args:
            agent_env: the variables the agent's commands get (``--ae`` values; an agent may
                also read the host environment, as it does for API keys).

        Returns:
            Host names or addresses (allowlist entries: ``api.example.com``, ``10.0.0.5``).
        """
        return []

    def refusal(self, task: Any) -> str | None:
        """Why this agent cannot run ``task`` as Harbor 0.26 would, or ``None``.

        Harbor copies ``[environment].skills_dir`` into its agents' skills folder and hands
        them ``mcp_servers``; an agent that uses neither (:attr:`task_context`) would run the
        task without them, so the trial is refused before start (``config_error``). Likewise a
        seed trajectory (:attr:`supports_seed`), which must also be a valid ATIF document. Agents
        that act on no instruction (:attr:`ignores_instruction`) are never refused.

        Args:
            task: the loaded :class:`~cairn.task.model.Task`.
        """
        if self.ignores_instruction:
            return None
        env = task.environment
        if env.skills_dir and "skills" not in self.task_context:
            return (
                f"agent {self.name!r} takes no skills: [environment].skills_dir = "
                f"{env.skills_dir!r} would be ignored (cairn does not copy skills for it)"
            )
        seed = getattr(task, "seed_trajectory", None)
        if seed is not None:
            if not self.supports_seed:
                return (
                    f"agent {self.name!r} cannot load the task's seed trajectory {seed} "
                    "into its session: it would start without that prior context"
                )
            from cairn.agents.trajectory import load_seed

            try:
                load_seed(seed)
            except ValueError as exc:
                return str(exc)
        if env.mcp_servers:  # transports per agent, --ak ignore_mcp (cairn.agents.mcp, #22)
            from cairn.agents.mcp import check_agent_mcp

            return check_agent_mcp(self, task, {"ignore_mcp": getattr(self, "ignore_mcp", False)})
        return None

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

    async def setup(self, sandbox: Sandbox, context: AgentContext) -> None:  # noqa: B027 - optional hook, no-op by default
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


def take_relay_spend(context: AgentContext, calls: Any) -> None:
    """Make a step's spend the relay's record of its calls (docs/relay.md): tokens from the
    provider's own usage fields, cost from the price map.

    Args:
        context: the step's context; its ``tokens`` and ``cost_usd`` are replaced.
        calls: the step's :class:`cairn.relay.ledger.StepCalls` (``TrialLease.end_step()``);
            a cache-read count the provider never gave stays ``None`` unless the step made no
            billed call (then 0: a step whose only calls the relay refused read no cache, and
            its trial's sum keeps the other steps' known count).
    """
    u = calls.usage
    known = u.cache_read_tokens is not None or calls.billed_calls == 0
    context.tokens = Tokens(
        prompt=u.input_tokens or 0,
        completion=u.output_tokens or 0,
        cached=(u.cache_read_tokens or 0) if known else None,
    )
    context.cost_usd = calls.cost_usd


def refuse_unknown_options(agent: str, given: Iterable[str], known: Iterable[str]) -> None:
    """The one rule for ``--ak`` options an agent does not take (every agent that declares its
    options refuses with these words, before any trial runs).

    Args:
        agent: the agent's name (the ``-a`` value).
        given: the ``--ak`` option names given (``ignore_mcp``, which every agent takes, already
            left out).
        known: the option names the agent takes (empty: it takes none).

    Raises:
        UsageError: a given name is not in ``known``; the message names the first such name
            (sorted) and the agent, and lists what it takes, or says it takes no options.
    """
    names = list(known)
    unknown = sorted(set(given) - set(names))
    if unknown:
        takes = f"known: {', '.join(names)}" if names else "it takes no options"
        raise UsageError(f"agent {agent!r} has no option {unknown[0]!r} (--ak); {takes}")
