"""Agents under evaluation (design §10): the :class:`~cairn.agents.base.Agent` interface and
the built-in agents.

Modules: :mod:`~cairn.agents.base` (``Agent``, ``AgentContext``), :mod:`~cairn.agents.oracle`
(the task's reference solution), :mod:`~cairn.agents.nop` (does nothing),
:mod:`~cairn.agents.llm` (a tool-calling model loop), :mod:`~cairn.agents.installed` (agent CLIs
installed into the sandbox), :mod:`~cairn.agents.registry` (``-a`` names → classes),
:mod:`~cairn.agents.trajectory` (the ATIF trajectory an agent records).
"""
