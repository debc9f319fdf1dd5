"""The ``nop`` agent: does nothing (design §10). A task whose nop run passes has a weak verifier."""

from __future__ import annotations

from cairn.agents.base import Agent, AgentContext
from cairn.sandbox.base import Sandbox


class NopAgent(Agent):
    """Does nothing in every step; takes no model."""

    name = "nop"
    ignores_instruction = True
    version = "1"
    needs_model = False
    known_options = ()  # an --ak it does not take is refused before start (design §10)

    async def run(self, instruction: str, sandbox: Sandbox, context: AgentContext) -> None:
        """Return at once, leaving the sandbox as it is."""
        return None
