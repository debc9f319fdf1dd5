"""Agent names → agent classes (design §10), and the option checks run before anything starts.

Built-in names: ``oracle``, ``nop``, ``llm``, ``claude-code``, ``codex``, ``opencode``,
``gemini-cli``, ``qwen-code``, ``aider``, ``mini-swe-agent``. An ``-a``
value containing ``:`` is an import path ``package.module:Class`` naming an
:class:`~cairn.agents.base.Agent` subclass. Modules are imported only when asked, so importing
the registry never imports LiteLLM.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from typing import Any

from cairn.agents.base import Agent, refuse_unknown_options
from cairn.errors import UsageError

_AGENTS: dict[str, str] = {
    "oracle": "cairn.agents.oracle:OracleAgent",
    "nop": "cairn.agents.nop:NopAgent",
    "llm": "cairn.agents.llm:LlmAgent",
    "claude-code": "cairn.agents.installed:ClaudeCodeAgent",
    "codex": "cairn.agents.installed:CodexAgent",
    "opencode": "cairn.agents.installed:OpenCodeAgent",
    "gemini-cli": "cairn.agents.installed:GeminiCliAgent",
    "qwen-code": "cairn.agents.installed:QwenCodeAgent",
    "aider": "cairn.agents.installed:AiderAgent",
    "mini-swe-agent": "cairn.agents.installed:MiniSweAgent",
}

AGENT_NAMES = tuple(_AGENTS)
"""The built-in agent names, in display order."""


def _load(target: str, shown: str) -> type[Agent]:
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise UsageError(f"agent {shown!r}: an import path must look like package.module:Class")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"agent {shown!r}: cannot import module {module_name!r}: {exc}") from exc
    try:
        cls = getattr(module, attr)
    except AttributeError:
        raise UsageError(f"agent {shown!r}: module {module_name!r} has no {attr!r}") from None
    if not (isinstance(cls, type) and issubclass(cls, Agent)):
        raise UsageError(f"agent {shown!r}: {attr!r} is not a subclass of cairn.agents.base.Agent")
    return cls


def get_agent_class(name: str) -> type[Agent]:
    """Resolve an ``-a`` value to its agent class.

    Args:
        name: a built-in name (:data:`AGENT_NAMES`) or ``package.module:Class``.

    Returns:
        The :class:`~cairn.agents.base.Agent` subclass.

    Raises:
        UsageError: unknown name, unimportable module, or not an Agent subclass.
    """
    if ":" in name:
        return _load(name, name)
    try:
        target = _AGENTS[name]
    except KeyError:
        raise UsageError(
            f"unknown agent {name!r}; known: {', '.join(AGENT_NAMES)} (or package.module:Class)"
        ) from None
    return _load(target, name)


def validate_agent_options(
    name: str,
    model: str | None,
    kwargs: Mapping[str, Any],
    env: Mapping[str, str] | None = None,
    *,
    resume: bool = False,
) -> type[Agent]:
    """Check an agent choice before any sandbox starts (CLI exit code 2 on failure).

    Checks: the agent exists; ``-m`` is given exactly when the agent wants it (``needs_model``
    ``True`` requires it, ``False`` refuses it, ``None`` accepts both); then the agent's own
    ``validate_options(model, kwargs, env)`` classmethod if it has one (option names and values,
    API keys of installed agents).

    Args:
        name: the ``-a`` value.
        model: the ``-m`` value, or ``None``.
        kwargs: the ``--ak`` options.
        env: the ``--ae`` variables; API keys are looked up there, then in the host environment.
        resume: ``--resume-agent-session`` was given; refused for an agent whose
            ``supports_resume`` is ``False``.

    Returns:
        The agent class.

    Raises:
        UsageError: any of the checks fails; the message says what to change.
    """
    cls = get_agent_class(name)
    needs = getattr(cls, "needs_model", False)
    if needs is False and model:
        raise UsageError(f"agent {name!r} takes no model; remove -m {model!r}")
    if needs is True and not model:
        raise UsageError(f"agent {name!r} needs a model: add -m provider/model (e.g. -m openai/gpt-4o-mini)")
    if resume and getattr(cls, "supports_resume", None) is False:
        raise UsageError(
            f"agent {name!r} cannot continue a session across steps; remove --resume-agent-session"
        )
    from cairn.agents.mcp import pop_ignore_mcp

    options = dict(kwargs)
    pop_ignore_mcp(options)  # every agent takes it; a non-boolean value is refused (#15)
    _check_known(name, cls, options)
    check = getattr(cls, "validate_options", None)
    if callable(check):
        check(model, options, {**os.environ, **dict(env or {})})
    return cls


def create_agent(name: str, model: str | None, kwargs: Mapping[str, Any]) -> Agent:
    """Instantiate the agent ``name`` with its model and ``--ak`` options.

    Args:
        name: the ``-a`` value.
        model: the ``-m`` value, or ``None``.
        kwargs: the ``--ak`` options.

    Returns:
        A new agent instance (the engine uses one per trial).

    Raises:
        UsageError: the name cannot be resolved or the options are invalid.
    """
    from cairn.agents.mcp import pop_ignore_mcp

    cls = get_agent_class(name)
    options = dict(kwargs)
    ignore = pop_ignore_mcp(options)  # every agent takes --ak ignore_mcp (#22)
    _check_known(name, cls, options)
    agent = cls(model=model, **options)
    agent.ignore_mcp = ignore  # type: ignore[attr-defined]
    return agent


def _check_known(name: str, cls: type[Agent], options: Mapping[str, Any]) -> None:
    """Refuse ``--ak`` names an agent that declares :attr:`~cairn.agents.base.Agent.
    known_options` does not take (oracle and nop take none). Only the class's own declaration
    counts: a subclass (a user's agent built on the oracle) takes what it declares, or any."""
    known = vars(cls).get("known_options")
    if known is not None:
        refuse_unknown_options(name, options, known)
