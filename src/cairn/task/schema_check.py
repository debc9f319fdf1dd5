"""Check a parsed task.toml document against the task models (design §1.1, §2).

Pydantic with ``extra="allow"`` keeps unknown keys silently and coerces ``"512"`` to 512, so
this module walks the raw document against the models' fields itself, at every level
(``[environment]``, ``[environment.healthcheck]``, ``[[steps]]`` entries, ``[steps.agent]``,
``[verifier.environment]``, artifact tables, authors …):

- a key that is no field (nor alias) of its model → warning naming the key;
- a value of the wrong TOML type → error naming the key and the expected type.

Free tables (``[metadata]``, env tables, ``mcp_servers`` entries, ``min_reward`` tables) are
``dict`` fields and are not checked for unknown keys. :func:`pydantic_findings` turns any
remaining pydantic validation error into an error finding at the key's line.
"""

from __future__ import annotations

import difflib
import enum
import math
import types
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from cairn.task.findings import ERROR, WARNING, FindingSink, format_key_path
from cairn.task.model import Artifact, TaskConfig

KeyPath = tuple[str | int, ...]

_ROOT_EXTRA_KEYS = {"version": "schema_version"}
"""Root spellings accepted besides the field names (BenchFlow's ``version``)."""

_HINT_CUTOFF = 0.75
"""Similarity a key needs for a "did you mean": typos (``memroy_mb`` 0.89) pass, different
words that share letters (``service`` vs ``source``, 0.62) do not."""

_NON_NEGATIVE_SUFFIXES = ("_sec", "_mb")
_NON_NEGATIVE_NAMES = frozenset({"cpus", "gpus", "retries"})


def _field_map(model: type[BaseModel]) -> dict[str, Any]:
    """Accepted key → annotation for a model (field names and aliases)."""
    out: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        out[name] = info.annotation
        if info.alias:
            out[info.alias] = info.annotation
    return out


def _is_union(ann: Any) -> bool:
    return get_origin(ann) in (Union, types.UnionType)


def _describe(ann: Any) -> str:
    """A task author's name for the type an annotation expects."""
    if ann is Any:
        return "any value"
    if _is_union(ann):
        return " or ".join(_describe(a) for a in get_args(ann) if a is not type(None))
    origin = get_origin(ann)
    if origin is Literal:
        return "one of " + ", ".join(repr(v) for v in get_args(ann))
    if isinstance(ann, type) and issubclass(ann, enum.Enum):
        return "one of " + ", ".join(repr(m.value) for m in ann)
    if origin in (tuple, list):
        return "an array"
    if origin is dict:
        value_ann = get_args(ann)[1] if len(get_args(ann)) == 2 else Any
        if value_ann is Any:
            return "a table"
        return "a table of " + {float: "numbers", int: "integers", str: "strings"}.get(value_ann, "values")
    if ann is Artifact:
        return "a path string or a table"
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return "a table"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}.get(
        ann, getattr(ann, "__name__", str(ann))
    )


def _describe_value(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    if value is None:
        return "null"
    return f"a {type(value).__name__}"


def _shallow_ok(value: Any, ann: Any) -> bool:
    """Whether the value has the right TOML type for ``ann`` (not looking inside)."""
    if ann is Any:
        return True
    if ann is type(None):
        return False
    origin = get_origin(ann)
    if origin is Literal:
        return any(type(value) is type(v) for v in get_args(ann))
    if ann is bool:
        return isinstance(value, bool)
    if ann is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if ann is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if ann is str:
        return isinstance(value, str)
    if isinstance(ann, type) and issubclass(ann, enum.Enum):
        return isinstance(value, str)
    if ann is Artifact:
        return isinstance(value, (str, dict))
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return isinstance(value, dict)
    if origin in (tuple, list):
        return isinstance(value, list)
    if origin is dict:
        return isinstance(value, dict)
    return True


def check_document(doc: dict[str, Any], sink: FindingSink) -> None:
    """Walk a parsed task.toml against :class:`TaskConfig`.

    Args:
        doc: the parsed document.
        sink: receives unknown-key warnings and type errors, located by key path.
    """
    _check_table(doc, TaskConfig, (), sink)


def _check_table(raw: dict[str, Any], model: type[BaseModel], path: KeyPath, sink: FindingSink) -> None:
    fields = _field_map(model)
    if model is TaskConfig:
        extra = {k: fields[v] for k, v in _ROOT_EXTRA_KEYS.items()}
    else:
        extra = {}
    for key, value in raw.items():
        here = path + (key,)
        if key in fields:
            _check_value(value, fields[key], here, sink)
        elif key in extra:
            if not isinstance(value, (str, int, float)) or isinstance(value, bool):
                sink.key(
                    here, ERROR, f"`{format_key_path(here)}` must be a string, got {_describe_value(value)}"
                )
        else:
            where = f" in [{format_key_path(path)}]" if path else ""
            hint = difflib.get_close_matches(str(key), list(fields), n=1, cutoff=_HINT_CUTOFF)
            suggestion = f" (did you mean `{hint[0]}`?)" if hint else ""
            sink.key(here, WARNING, f"unknown key `{key}`{where}{suggestion}", rule="unknown-config-field")


def _check_value(value: Any, ann: Any, path: KeyPath, sink: FindingSink) -> None:
    if _is_union(ann):
        arms = [a for a in get_args(ann) if a is not type(None)]
        for arm in arms:
            if _shallow_ok(value, arm):
                _check_value(value, arm, path, sink)
                return
        _type_error(value, ann, path, sink)
        return
    if not _shallow_ok(value, ann):
        _type_error(value, ann, path, sink)
        return
    origin = get_origin(ann)
    name = path[-1] if path and isinstance(path[-1], str) else ""
    if ann is float or ann is int:
        if isinstance(value, float) and not math.isfinite(value):
            sink.key(path, ERROR, f"`{format_key_path(path)}` must be a finite number, got {value}")
        elif (name.endswith(_NON_NEGATIVE_SUFFIXES) or name in _NON_NEGATIVE_NAMES) and value < 0:
            sink.key(path, ERROR, f"`{format_key_path(path)}` must not be negative, got {value}")
    elif origin is Literal:
        if value not in get_args(ann):
            sink.key(path, ERROR, f"`{format_key_path(path)}` must be {_describe(ann)}, got {value!r}")
    elif isinstance(ann, type) and issubclass(ann, enum.Enum):
        if value not in {m.value for m in ann}:
            sink.key(path, ERROR, f"`{format_key_path(path)}` must be {_describe(ann)}, got {value!r}")
    elif isinstance(ann, type) and issubclass(ann, BaseModel):
        if isinstance(value, dict):
            _check_table(value, ann, path, sink)
    elif origin in (tuple, list):
        args = get_args(ann)
        item_ann = args[0] if args else Any
        for k, item in enumerate(value):
            _check_value(item, item_ann, path + (k,), sink)
    elif origin is dict:
        args = get_args(ann)
        value_ann = args[1] if len(args) == 2 else Any
        if value_ann is not Any:
            for k, item in value.items():
                _check_value(item, value_ann, path + (k,), sink)


def _type_error(value: Any, ann: Any, path: KeyPath, sink: FindingSink) -> None:
    sink.key(path, ERROR, f"`{format_key_path(path)}` must be {_describe(ann)}, got {_describe_value(value)}")


def validate_config(doc: dict[str, Any], sink: FindingSink) -> TaskConfig | None:
    """Build the :class:`TaskConfig`, turning pydantic errors into findings.

    Args:
        doc: the parsed document (already walked by :func:`check_document`).
        sink: receives an error per invalid key not already reported.

    Returns:
        The config, or ``None`` when pydantic refused the document.
    """
    try:
        return TaskConfig.model_validate(doc)
    except ValidationError as exc:
        for err in exc.errors(include_url=False):
            path = _trim_loc(doc, tuple(err.get("loc", ())), missing=err.get("type") == "missing")
            if any(path[: len(p)] == p or p[: len(path)] == path for p in sink.error_paths):
                continue
            where = format_key_path(path) or "task.toml"
            sink.key(path, ERROR, f"`{where}`: {err.get('msg', 'invalid value')}")
        return None


def _trim_loc(doc: Any, loc: tuple, *, missing: bool) -> KeyPath:
    """The longest prefix of a pydantic error location that exists in the document.

    For a missing required key (``missing``), the key itself is kept so the message names it;
    its line falls back to its table's.
    """
    if (
        loc
        and loc[0] == "schema_version"
        and isinstance(doc, dict)
        and "schema_version" not in doc
        and "version" in doc
    ):
        loc = ("version",) + loc[1:]
    out: list[str | int] = []
    node = doc
    for k, part in enumerate(loc):
        # two arms, not one `or`: each narrows node and part for its own index (mypy)
        if isinstance(node, dict) and isinstance(part, str) and part in node:  # noqa: SIM114
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            if missing and k == len(loc) - 1 and isinstance(part, str):
                out.append(part)
            break
        out.append(part)
    return tuple(out)


__all__ = ["check_document", "validate_config"]
