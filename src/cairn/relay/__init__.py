"""The model relay: every agent's model calls through one per-job HTTP relay (docs/relay.md).

Importing this package is cheap: aiohttp is imported only when a :class:`ModelRelay` starts
(``pip install 'cairn-eval[relay]'``), so ``cairn run`` with agents that use no model pays
nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cairn.relay.ledger import BudgetStop, CallRecord, Limits, StepCalls, TrialLease
    from cairn.relay.prices import Price
    from cairn.relay.server import ModelRelay, RelayConfig, Upstream
    from cairn.relay.usage import Usage

__all__ = [
    "BudgetStop",
    "CallRecord",
    "Limits",
    "ModelRelay",
    "Price",
    "RelayConfig",
    "StepCalls",
    "TrialLease",
    "Upstream",
    "Usage",
]

_WHERE = {
    "BudgetStop": "ledger",
    "CallRecord": "ledger",
    "Limits": "ledger",
    "StepCalls": "ledger",
    "TrialLease": "ledger",
    "Price": "prices",
    "ModelRelay": "server",
    "RelayConfig": "server",
    "Upstream": "server",
    "Usage": "usage",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f"cairn.relay.{_WHERE[name]}"), name)
    raise AttributeError(name)
