"""Reading reward files (design §5.1): pure functions on the bytes a verifier left behind.

A verifier writes ``/logs/verifier/reward.json`` (an object of named finite numbers) or
``/logs/verifier/reward.txt`` (one number). The verifier module fetches their bytes (at most
:data:`REWARD_FILE_CAP_BYTES` + 1 of each, so an oversized file is detected) and hands them to
:func:`read_reward`. Nothing here touches a sandbox or the disk.

Every failure is a :class:`~cairn.errors.TrialFailure` whose kind is ``reward_missing``,
``reward_empty`` or ``reward_parse_error`` (all category ``task``: a broken verifier is never a
reward of 0). Parse errors quote the first bytes of the file so a person can see what was there.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

from cairn.errors import ErrorKind, TrialFailure
from cairn.layout import REWARD_FILE_CAP_BYTES, REWARD_JSON, REWARD_TXT

QUOTE_BYTES = 80
"""How many leading bytes of a bad reward file an error message quotes."""

_JSON_NUMBER_RE = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
"""The JSON number grammar (RFC 8259 §6), ASCII digits only; used with ``fullmatch``."""

_TXT_WHITESPACE = b" \t\r\n"
"""Whitespace ignored around the number in reward.txt (spaces, tabs, CR, blank lines)."""


@dataclass(frozen=True)
class RewardRead:
    """A reward read from a verifier's output.

    Attributes:
        rewards: every key of the reward file with its value (``{"reward": x}`` for reward.txt).
            Values are finite floats, kept as written even outside [0, 1].
        reward_file: which file they came from: ``"reward.json"`` or ``"reward.txt"``.
        warnings: human-readable warnings (both files written; values outside [0, 1]).
    """

    rewards: dict[str, float]
    reward_file: str
    warnings: list[str] = field(default_factory=list)


def quote_head(data: bytes, limit: int = QUOTE_BYTES) -> str:
    """Quote the first bytes of a file for an error message.

    Args:
        data: the file's bytes.
        limit: how many leading bytes to show.

    Returns:
        A Python-style bytes literal of at most ``limit`` bytes, with ``…`` appended when cut,
        e.g. ``b'1abc\\n'``.
    """
    head = repr(data[:limit])
    return head + ("…" if len(data) > limit else "")


def _parse_error(file_name: str, data: bytes, why: str) -> TrialFailure:
    return TrialFailure(
        ErrorKind.REWARD_PARSE_ERROR,
        f"{file_name}: {why}; file starts with {quote_head(data)}",
        detail={"file": file_name, "head": quote_head(data), "size_bytes": len(data)},
    )


def _check_size(file_name: str, data: bytes) -> None:
    if len(data) == 0:
        raise TrialFailure(
            ErrorKind.REWARD_EMPTY,
            f"{file_name} is empty (0 bytes)",
            detail={"file": file_name, "size_bytes": 0},
        )
    if len(data) > REWARD_FILE_CAP_BYTES:
        raise _parse_error(file_name, data, f"larger than the {REWARD_FILE_CAP_BYTES}-byte cap")


def parse_reward_txt(data: bytes) -> dict[str, float]:
    """Parse the bytes of a ``reward.txt``.

    Surrounding whitespace (spaces, tabs, CR, blank lines) is ignored; what is left must be
    exactly one number in JSON number syntax whose value is finite.

    Args:
        data: the file's bytes (at most :data:`REWARD_FILE_CAP_BYTES`).

    Returns:
        ``{"reward": value}``.

    Raises:
        TrialFailure: ``reward_empty`` for a zero-byte file; ``reward_parse_error`` for a file over
            the cap, one holding only whitespace, anything that is not one JSON number (``1abc``,
            ``nan``, ``inf``, ``Infinity``, ``1_000``, ``0x1``, ``+1``, two numbers, a warning
            line), or a number that overflows a float (``1e400``).
    """
    _check_size(REWARD_TXT, data)
    text = data.strip(_TXT_WHITESPACE)
    if not text:
        raise _parse_error(REWARD_TXT, data, "only whitespace, no number")
    if _JSON_NUMBER_RE.fullmatch(text) is None:
        raise _parse_error(REWARD_TXT, data, "not a single number in JSON number syntax")
    value = float(text.decode("ascii"))
    if not math.isfinite(value):
        raise _parse_error(REWARD_TXT, data, "number is not finite (overflows a float)")
    return {"reward": value}


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _reject_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def parse_reward_json(data: bytes) -> dict[str, float]:
    """Parse the bytes of a ``reward.json``.

    The document must be a non-empty JSON object whose values are all finite numbers (JSON
    integers or floats; booleans are not numbers here). Duplicate keys are refused, since
    which one counts would be a guess.

    Args:
        data: the file's bytes (at most :data:`REWARD_FILE_CAP_BYTES`).

    Returns:
        The keys in file order, each with its value as a float.

    Raises:
        TrialFailure: ``reward_empty`` for a zero-byte file; ``reward_parse_error`` for a file over
            the cap, invalid JSON (including ``NaN``/``Infinity``), a top level that is not an
            object (a bare number, a list), ``{}``, a value that is a string, null, bool, list
            or object (the message names the key), or a value that is not finite (``1e400``).
    """
    _check_size(REWARD_JSON, data)
    try:
        doc = json.loads(data, parse_constant=_reject_constant, object_pairs_hook=_reject_duplicates)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError too
        raise _parse_error(REWARD_JSON, data, f"invalid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise _parse_error(
            REWARD_JSON, data, f"top level is a JSON {_json_type(doc)}, not an object of numbers"
        )
    if not doc:
        raise _parse_error(REWARD_JSON, data, "the object has no keys")
    rewards: dict[str, float] = {}
    for key, value in doc.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _parse_error(
                REWARD_JSON, data, f"value of key {key!r} is a JSON {_json_type(value)}, not a number"
            )
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            raise _parse_error(REWARD_JSON, data, f"value of key {key!r} is not finite")
        rewards[key] = number
    return rewards


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def range_warnings(rewards: dict[str, float]) -> list[str]:
    """Warnings for reward values outside [0, 1] (kept as written, design §5.1).

    Args:
        rewards: the parsed rewards.

    Returns:
        One warning per value below 0 or above 1, in key order.
    """
    return [
        f"reward {key!r} = {value!r} is outside [0, 1] (kept as written)"
        for key, value in rewards.items()
        if not 0.0 <= value <= 1.0
    ]


def read_reward(files: dict[str, bytes | None]) -> RewardRead:
    """Read a verifier's reward from the contents of its reward files (design §5.1).

    Args:
        files: ``{"reward.json": bytes | None, "reward.txt": bytes | None}``; ``None`` or a
            missing key means the file does not exist. Other keys are ignored.

    Returns:
        The rewards, the file they came from, and warnings. reward.json wins over reward.txt
        when both exist (with a warning; reward.txt is then not parsed at all).

    Raises:
        TrialFailure: ``reward_missing`` when neither file exists; otherwise whatever
            :func:`parse_reward_json` / :func:`parse_reward_txt` raise for the chosen file.
    """
    json_data = files.get(REWARD_JSON)
    txt_data = files.get(REWARD_TXT)
    warnings: list[str] = []
    if json_data is not None:
        if txt_data is not None:
            warnings.append(
                "both reward.json and reward.txt were written; reward.json was used and reward.txt ignored"
            )
        rewards = parse_reward_json(json_data)
        name = REWARD_JSON
    elif txt_data is not None:
        rewards = parse_reward_txt(txt_data)
        name = REWARD_TXT
    else:
        raise TrialFailure(
            ErrorKind.REWARD_MISSING,
            "the verifier wrote neither /logs/verifier/reward.json nor /logs/verifier/reward.txt",
        )
    warnings.extend(range_warnings(rewards))
    return RewardRead(rewards=rewards, reward_file=name, warnings=warnings)
