"""Prices from LiteLLM's bundled map, read as a file."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from cairn.relay.prices import MAP_FILE, Price, PriceBook
from cairn.relay.usage import Usage

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("litellm") is None, reason="LiteLLM's price map ships with the llm extra"
)


def _map() -> dict:
    spec = importlib.util.find_spec("litellm")
    assert spec is not None and spec.origin
    return json.loads((Path(os.path.dirname(spec.origin)) / MAP_FILE).read_text())


@pytest.mark.parametrize(
    ("model", "family", "key"),
    [
        ("gpt-4o", "chat", "gpt-4o"),
        ("claude-sonnet-4-5", "anthropic", "claude-sonnet-4-5"),
        ("gemini-2.5-flash", "gemini", "gemini/gemini-2.5-flash"),
    ],
)
def test_prices_are_litellms_and_cache_reads_and_writes_are_priced_apart(model, family, key):
    entry = _map()[key]
    price = PriceBook().price(model, family)
    assert price is not None and price.input == entry["input_cost_per_token"]
    usage = Usage(input_tokens=1000, output_tokens=100, cache_read_tokens=400, cache_write_tokens=100)
    want = (
        500 * entry["input_cost_per_token"]
        + 400 * entry.get("cache_read_input_token_cost", entry["input_cost_per_token"])
        + 100 * (entry.get("cache_creation_input_token_cost") or entry["input_cost_per_token"])
        + 100 * entry["output_cost_per_token"]
    )
    assert price.cost_usd(usage) == pytest.approx(want)


def test_unknown_models_and_usage_cost_null_and_overrides_win():
    book = PriceBook({"local-m": Price(input=1.0, output=2.0)})
    assert book.price("no-such-model-xyz", "chat") is None
    assert book.price("local-m", "chat").cost_usd(Usage(3, 4)) == 11.0
    assert book.price("local-m", "chat").cost_usd(Usage(input_tokens=3)) is None
