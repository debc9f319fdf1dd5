"""YAML nesting is cairn's own refusal on every PyYAML/libyaml version (issue 28): libyaml
0.2.6 (PyYAML 6.0.4's wheels) stops flow nesting past 1,000 levels in its scanner with its own
message; libyaml 0.2.5 and the pure-Python parser do not. Both paths give cairn's message."""

from __future__ import annotations

import pytest
import yaml

from cairn._util import inputfiles
from cairn._util.inputfiles import MAX_YAML_DEPTH, InputFileError, check_yaml_shape, load_yaml

PARSERS = [pytest.param(yaml.SafeLoader, id="pure-python")]
if hasattr(yaml, "CSafeLoader"):
    PARSERS.append(pytest.param(yaml.CSafeLoader, id="libyaml"))


def flow(levels: int) -> str:
    return "x: " + "[" * levels + "]" * levels + "\n"


def block(levels: int) -> str:
    return "".join("  " * k + f"k{k}:\n" for k in range(levels)) + "  " * levels + "v\n"


@pytest.mark.parametrize("loader", PARSERS)
@pytest.mark.parametrize(
    "text",
    [flow(MAX_YAML_DEPTH + 1), flow(1001), flow(5000), block(MAX_YAML_DEPTH + 1)],
    ids=["flow-101", "flow-1001", "flow-5000", "block-101"],
)
def test_too_deep_is_cairns_own_error_with_either_parser(monkeypatch, loader, text):
    monkeypatch.setattr(inputfiles, "_loader", lambda: loader)
    with pytest.raises(
        InputFileError,
        match=f"^f.yaml: nested more than {MAX_YAML_DEPTH} levels deep; cairn refuses the file$",
    ) as err:
        check_yaml_shape(text, "f.yaml")
    assert err.value.line == (1 if text.startswith("x: [") else MAX_YAML_DEPTH + 1)
    with pytest.raises(InputFileError, match=f"nested more than {MAX_YAML_DEPTH} levels deep"):
        load_yaml(text, "f.yaml")


@pytest.mark.parametrize("loader", PARSERS)
def test_at_the_limit_loads(monkeypatch, loader):
    monkeypatch.setattr(inputfiles, "_loader", lambda: loader)
    doc = load_yaml(flow(MAX_YAML_DEPTH - 1), "f.yaml")
    depth, node = 0, doc["x"]
    while node:
        depth, node = depth + 1, node[0]
    assert depth == MAX_YAML_DEPTH - 2  # the outer mapping and the empty innermost list


@pytest.mark.parametrize("loader", PARSERS)
def test_not_yaml_keeps_the_parsers_error_and_position(monkeypatch, loader):
    monkeypatch.setattr(inputfiles, "_loader", lambda: loader)
    with pytest.raises(yaml.MarkedYAMLError, match="line 2") as err:
        check_yaml_shape("a: [1, 2\nb: ]]\n", "f.yaml")
    assert err.value.problem_mark is not None and err.value.problem_mark.line == 1
