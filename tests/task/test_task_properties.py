"""Property tests: whatever task.toml holds, the loader returns a Task or raises TaskFormatError.

Documents are random nested tables (plausible task keys mixed with random ones) written by a
small TOML writer in varied styles (``[tables]``, ``[[arrays of tables]]``, inline tables,
multi-line arrays, every string spelling), plus raw byte garbage and task.md headers.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import random
import string
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cairn.errors import TaskFormatError
from cairn.task.keylines import toml_key_lines
from cairn.task.load import check_task, load_task
from cairn.task.model import STEP_NAME_RE, Task

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- a small TOML writer ----------------------------------------------------------------------------

_BARE_CHARS = set(string.ascii_letters + string.digits + "_-")


def _key(k: str) -> str:
    if k and set(k) <= _BARE_CHARS:
        return k
    return _basic(k)


def _basic(s: str) -> str:
    return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007f")


def _string(s: str, rnd: random.Random) -> str:
    style = rnd.randrange(4)
    plain = all(c in ("\t",) or (ord(c) >= 0x20 and c != "\x7f") for c in s)
    if style == 1 and plain and "'" not in s:
        return f"'{s}'"
    if style == 2:
        return '"""' + _basic(s)[1:-1] + '"""'
    if style == 3 and plain and "'''" not in s and not s.endswith("'"):
        return "'''\n" + s + "'''"
    return _basic(s)


def _inline(v: Any, rnd: random.Random) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return _string(v, rnd)
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, dict):
        if not v:
            return "{}"
        return "{ " + ", ".join(f"{_key(k)} = {_inline(x, rnd)}" for k, x in v.items()) + " }"
    if isinstance(v, list):
        if rnd.random() < 0.5:
            return "[" + ", ".join(_inline(x, rnd) for x in v) + "]"
        body = "".join(f"\n  {_inline(x, rnd)},  # item\n" for x in v)
        return "[" + body + "]"
    raise TypeError(type(v))


def dump_toml(doc: dict[str, Any], seed: int) -> str:
    """Write ``doc`` as TOML; ``seed`` picks the style of each table and value."""
    rnd = random.Random(seed)
    lines: list[str] = ["# generated"]

    def table(d: dict[str, Any], prefix: tuple[str, ...]) -> None:
        simple, tables, arrays = [], [], []
        for k, v in d.items():
            if isinstance(v, dict) and rnd.random() < 0.6:
                tables.append((k, v))
            elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v) and rnd.random() < 0.6:
                arrays.append((k, v))
            else:
                simple.append((k, v))
        for k, v in simple:
            lines.append(f"{_key(k)} = {_inline(v, rnd)}")
        for k, v in tables:
            lines.append(f"\n[{'.'.join(_key(p) for p in prefix + (k,))}]")
            table(v, prefix + (k,))
        for k, items in arrays:
            for item in items:
                lines.append(f"\n[[{'.'.join(_key(p) for p in prefix + (k,))}]]")
                table(item, prefix + (k,))

    table(doc, ())
    return "\n".join(lines) + "\n"


# -- strategies -----------------------------------------------------------------------------------

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_scalars = st.one_of(
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=True),
    _text,
    st.sampled_from(
        [
            "${KEY}",
            "Bearer ${KEY}",
            "${K:-d}",
            "/app/x",
            "../x",
            "",
            "linux",
            "no-network",
            "allowlist",
            "mean",
            "final",
            "shared",
            "separate",
        ]
    ),
    st.dates(),
)
_anything = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_text, inner, max_size=3)),
    max_leaves=12,
)
_number = st.one_of(st.integers(-5, 5000), st.floats(allow_nan=True), _anything)
_names = st.one_of(st.sampled_from(["write", "append", "a", "../x", "", "a/b", ".x", "write"]), _text)


def _opt(**fields) -> st.SearchStrategy:
    return st.fixed_dictionaries({}, optional=fields)


_env = st.dictionaries(
    st.sampled_from(["A", "TOKEN", "X"]) | _text,
    st.sampled_from(["${KEY}", "${KEY:-x}", "Bearer ${KEY}", "lit"]) | _anything,
    max_size=3,
)
_artifact = st.one_of(
    st.sampled_from(["/app/a", "app/a", "/x/../y"]) | _text,
    _opt(
        source=st.sampled_from(["/a", "b"]) | _anything,
        destination=st.sampled_from(["a", "/a", "x/../../y"]) | _anything,
        exclude=st.lists(_text, max_size=2) | _anything,
    ),
)
_healthcheck = _opt(
    command=st.just("true") | _anything, retries=_number, interval_sec=_number, junk=_anything
)
_environment = _opt(
    docker_image=st.sampled_from(["debian:bookworm-slim", "x"]) | _anything,
    network_mode=st.sampled_from(["public", "no-network", "allowlist", "wifi"]) | _anything,
    allowed_hosts=st.lists(_text, max_size=2) | _anything,
    allow_internet=st.booleans(),
    os=st.sampled_from(["linux", "windows"]) | _anything,
    cpus=_number,
    memory_mb=_number,
    env=_env,
    healthcheck=_healthcheck,
    mcp_servers=st.lists(_anything, max_size=2),
    memroy_mb=_number,
)
_agent = _opt(timeout_sec=_number, user=st.sampled_from(["root", 1000]) | _anything)
_verifier = _opt(
    timeout_sec=_number,
    user=_anything,
    env=_env,
    environment_mode=st.sampled_from(["shared", "separate", "x"]) | _anything,
    environment=_environment,
)
_step = _opt(
    name=_names,
    min_reward=st.one_of(_number, st.dictionaries(_text, _number, max_size=2)),
    artifacts=st.lists(_artifact, max_size=2),
    agent=_agent,
    verifier=_verifier,
    healthcheck=_healthcheck,
    setup_timeout_sec=_number,
    junk=_anything,
)
_doc = _opt(
    schema_version=st.just("1.4") | _anything,
    version=_anything,
    multi_step_reward_strategy=st.sampled_from(["mean", "final"]) | _anything,
    artifacts=st.lists(_artifact, max_size=3) | _anything,
    task=_opt(name=_text, authors=st.lists(_opt(name=_text, mail=_text), max_size=2) | _anything),
    metadata=st.dictionaries(_text, _anything, max_size=2),
    agent=_agent | _anything,
    verifier=_verifier,
    solution=_opt(env=_env),
    environment=_environment | _anything,
    steps=st.lists(_step, max_size=3) | _anything,
    extra=_anything,
)
_valid_number = st.integers(0, 5000) | st.floats(0, 1e6)
_plausible = _opt(  # mostly valid documents, so that multi-step tasks also load
    multi_step_reward_strategy=st.sampled_from(["mean", "final"]),
    agent=_opt(timeout_sec=_valid_number),
    verifier=_opt(timeout_sec=_valid_number, env=_env),
    environment=_opt(network_mode=st.sampled_from(["public", "no-network"]), memory_mb=st.integers(0, 4096)),
    steps=st.lists(
        st.fixed_dictionaries(
            {"name": st.sampled_from(["write", "append", "check", "a.b_c-1"])},
            optional={
                "min_reward": _valid_number
                | st.dictionaries(st.sampled_from(["reward", "safety"]), _valid_number, max_size=2),
                "agent": _opt(timeout_sec=_valid_number),
                "verifier": _opt(timeout_sec=_valid_number),
            },
        ),
        max_size=4,
        unique_by=lambda e: e["name"],
    ),
)
_any_doc = st.one_of(_doc, _plausible, st.dictionaries(_text, _anything, max_size=5))

_layout = st.fixed_dictionaries(
    {
        "dockerfile": st.sampled_from([None, "FROM debian:bookworm-slim\n", "FROM x\n", "FROM\n"]),
        "instruction": st.booleans(),
        "test": st.sampled_from([None, "echo 1\n", "set -e\n", "a\r\nb"]),
        "step_files": st.booleans(),
        "seed": st.integers(0, 2**32),
    }
)


def _write(root: Path, rel: str, content: str | bytes) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))


def _layout_files(root: Path, doc: dict[str, Any], layout: dict[str, Any]) -> None:
    if layout["dockerfile"] is not None:
        _write(root, "environment/Dockerfile", layout["dockerfile"])
    if layout["instruction"]:
        _write(root, "instruction.md", "Do it.\n")
    if layout["test"] is not None:
        _write(root, "tests/test.sh", layout["test"])
    steps = doc.get("steps")
    if layout["step_files"] and isinstance(steps, list):
        for entry in steps:
            name = entry.get("name") if isinstance(entry, dict) else None
            if isinstance(name, str) and STEP_NAME_RE.match(name):
                _write(root, f"steps/{name}/instruction.md", "Step.\n")
                _write(root, f"steps/{name}/tests/test.sh", "echo 1\n")


def _assert_loads_or_refuses(root: Path) -> None:
    findings = check_task(root)  # never raises
    try:
        task = load_task(root)
    except TaskFormatError as exc:
        assert str(exc)
        assert any(f.severity == "error" for f in findings)
        return
    assert isinstance(task, Task) and len(task.steps) >= 1
    assert not any(f.severity == "error" for f in findings)


def _key_paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = []
    if isinstance(node, dict):
        for k, v in node.items():
            out.append(prefix + (k,))
            out += _key_paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _key_paths(v, prefix + (i,))
    return out


# -- properties -----------------------------------------------------------------------------------


@SETTINGS
@given(doc=_any_doc, layout=_layout)
def test_random_task_toml_loads_or_raises_task_format_error(doc, layout):
    text = dump_toml(doc, layout["seed"])
    parsed = tomllib.loads(text)  # the writer writes valid TOML
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "task"
        _write(root, "task.toml", text)
        _layout_files(root, parsed, layout)
        _assert_loads_or_refuses(root)


@SETTINGS
@given(doc=_any_doc, seed=st.integers(0, 2**32))
def test_every_key_of_a_random_document_has_its_line(doc, seed):
    text = dump_toml(doc, seed)
    lines = toml_key_lines(text).lines
    for path in _key_paths(tomllib.loads(text)):
        assert path in lines, (path, text)
        assert 1 <= lines[path] <= text.count("\n") + 1


@SETTINGS
@given(data=st.binary(max_size=300), layout=_layout)
def test_byte_garbage_never_crashes_the_loader(data, layout):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "task"
        _write(root, "task.toml", data)
        _layout_files(root, {}, layout)
        _assert_loads_or_refuses(root)


@SETTINGS
@given(
    header=st.sampled_from(["+++", "---", ""]),
    body=st.text(max_size=200),
    doc=_any_doc,
    seed=st.integers(0, 2**32),
)
def test_random_task_md_loads_or_raises(header, body, doc, seed):
    if header == "+++":
        text = f"+++\n{dump_toml(doc, seed)}+++\n{body}"
    elif header == "---":
        text = f"---\n{body}\n---\nInstruction.\n"
    else:
        text = body
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "task"
        _write(root, "task.md", text.encode("utf-8", "surrogatepass"))
        _write(root, "tests/test.sh", "echo 1\n")
        _assert_loads_or_refuses(root)
