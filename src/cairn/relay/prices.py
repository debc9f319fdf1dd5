"""Call cost from LiteLLM's price map, read as a file (no ``import litellm``).

The map is LiteLLM's bundled ``model_prices_and_context_window_backup.json``, the one LiteLLM
itself uses under ``LITELLM_LOCAL_MODEL_COST_MAP=True`` (cairn never fetches the online map).
Reading the JSON directly costs ~30 ms once per relay instead of LiteLLM's ~1 s import.

Cost of one call, in USD (LiteLLM's ``cost_per_token`` rules for these fields)::

    (input - cache_read - cache_write) * input_cost_per_token
      + cache_read * cache_read_input_token_cost      (input price when absent)
      + cache_write * cache_creation_input_token_cost (input price when absent)
      + output * output_cost_per_token                (reasoning is part of output)
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cairn.relay.usage import Usage

MAP_FILE = "model_prices_and_context_window_backup.json"


@dataclass(frozen=True)
class Price:
    """Per-token prices of one model, USD per token.

    Attributes:
        input: a prompt token.
        output: a completion token.
        cache_read: a prompt token read from the cache (``None``: the input price).
        cache_write: a prompt token written to the cache (``None``: the input price).
    """

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None

    def cost_usd(self, usage: Usage) -> float | None:
        """The cost of ``usage`` in USD, or ``None`` when its input or output is unknown."""
        if not usage.known:
            return None
        read = usage.cache_read_tokens or 0
        write = usage.cache_write_tokens or 0
        plain = max(0, (usage.input_tokens or 0) - read - write)
        return (
            plain * self.input
            + read * (self.input if self.cache_read is None else self.cache_read)
            + write * (self.input if self.cache_write is None else self.cache_write)
            + (usage.output_tokens or 0) * self.output
        )


def _num(entry: dict[str, object], key: str) -> float | None:
    value = entry.get(key)
    return float(value) if isinstance(value, int | float) else None


_PREFIXES = {
    "anthropic": ("anthropic/",),
    "chat": ("openai/",),
    "responses": ("openai/",),
    "gemini": ("gemini/",),
}


class PriceBook:
    """Looks model prices up: explicit overrides first, then LiteLLM's map.

    Args:
        overrides: model name → :class:`Price` (a local model server's made-up price).
        map_path: the price map file; default LiteLLM's bundled backup map, when installed.
    """

    def __init__(self, overrides: Mapping[str, Price] | None = None, map_path: Path | None = None) -> None:
        self._overrides = dict(overrides or {})
        self._map_path = map_path
        self._map: dict[str, dict[str, object]] | None = None

    def load(self) -> None:
        """Read the price map now (the relay does it in a worker thread at start, so the first
        call's accounting does not stall the event loop)."""
        self._load()

    def _load(self) -> dict[str, dict[str, object]]:
        if self._map is None:
            path = self._map_path
            if path is None:
                spec = importlib.util.find_spec("litellm")
                if spec is not None and spec.origin:
                    path = Path(os.path.dirname(spec.origin)) / MAP_FILE
            try:
                data = json.loads(path.read_bytes()) if path is not None else {}
            except (OSError, ValueError):
                data = {}
            self._map = data if isinstance(data, dict) else {}
        return self._map

    def price(self, model: str | None, family: str) -> Price | None:
        """The price of ``model`` as called over ``family``'s wire, or ``None`` if unknown."""
        if not model:
            return None
        if model in self._overrides:
            return self._overrides[model]
        table = self._load()
        name = model.removeprefix("models/")
        for key in (name, *(p + name for p in _PREFIXES.get(family, ()))):
            entry = table.get(key)
            if isinstance(entry, dict) and isinstance(entry.get("input_cost_per_token"), int | float):
                return Price(
                    input=float(entry["input_cost_per_token"]),  # type: ignore[arg-type]
                    output=_num(entry, "output_cost_per_token") or 0.0,
                    cache_read=_num(entry, "cache_read_input_token_cost"),
                    cache_write=_num(entry, "cache_creation_input_token_cost"),
                )
        return None
