"""Strict JSON in and out (design §7): no NaN or Infinity either way.

Python's :mod:`json` writes ``NaN``/``Infinity`` and reads them back by default; neither is JSON.
These helpers refuse both, and turn pydantic models into plain JSON values first.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path, PurePath
from typing import Any

from pydantic import BaseModel

from cairn._util.atomic import write_bytes_atomic


def to_jsonable(obj: Any) -> Any:
    """Convert a value to plain JSON types (dict, list, str, int, float, bool, None).

    Args:
        obj: a pydantic model (dumped with ``mode="json"``), a mapping, a list or tuple, a path
            (as a string), or a plain JSON value; nested freely.

    Returns:
        The converted value. Other types are returned unchanged (``json.dumps`` refuses them).
    """
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, PurePath):
        return str(obj)
    return obj


def dumps_strict(obj: Any, *, indent: int | None = 2) -> str:
    """Serialize to JSON text, refusing non-finite numbers.

    Args:
        obj: anything :func:`to_jsonable` accepts.
        indent: indentation (``None`` for one line).

    Returns:
        The JSON text, UTF-8 friendly (non-ASCII kept), ending with a newline.

    Raises:
        ValueError: when a float is NaN or ±Infinity.
        TypeError: when a value is not JSON-serializable.
    """
    return json.dumps(to_jsonable(obj), allow_nan=False, indent=indent, ensure_ascii=False) + "\n"


def write_json_atomic(
    path: Path, obj: Any, *, make_parents: bool = False, durable: bool = True, sync_dir: bool = True
) -> None:
    """Write a value as strict JSON (:func:`dumps_strict`), atomically (:mod:`cairn._util.atomic`).

    The one JSON writer: the results store and the agents' trajectory files both use it.

    Args:
        path: the destination.
        obj: a pydantic model (dumped with ``mode="json"``), or plain JSON values, nested
            freely (models inside lists and dicts are dumped too).
        make_parents: create the destination's folder if missing (else it must exist).
        durable: fsync before the rename (see :func:`~cairn._util.atomic.write_bytes_atomic`).
        sync_dir: fsync the folder after the rename.

    Raises:
        ValueError: a float is NaN or ±Infinity (nothing is written).
        TypeError: a value is not JSON-serializable (nothing is written).
        OSError: the file cannot be written.
    """
    data = dumps_strict(obj).encode("utf-8")
    if make_parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, data, durable=durable, sync_dir=sync_dir)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number {text} overflows a float")
    return value


def loads_strict(data: str | bytes) -> Any:
    """Parse JSON text, refusing ``NaN``, ``Infinity``, ``-Infinity`` and overflowing numbers.

    Args:
        data: the JSON text (bytes are decoded as UTF-8, BOM tolerated by :mod:`json`).

    Returns:
        The parsed value.

    Raises:
        ValueError: invalid JSON (``json.JSONDecodeError``), a non-finite constant, a number
            such as ``1e400`` that overflows a float, or bytes that are not valid text.
    """
    return json.loads(data, parse_constant=_reject_constant, parse_float=_finite_float)
