"""Reward files (design §5.1): every case of issue 5's "Reward files" acceptance line and more."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cairn.errors import Category, ErrorKind, TrialFailure, category_of
from cairn.trial.rewards import (
    REWARD_FILE_CAP_BYTES,
    RewardRead,
    parse_reward_json,
    parse_reward_txt,
    read_reward,
)


def _kind_of(fn, data: bytes) -> ErrorKind:
    with pytest.raises(TrialFailure) as info:
        fn(data)
    return info.value.kind


# ---------------------------------------------------------------- reward.txt


@pytest.mark.parametrize(
    ("data", "value"),
    [
        (b"1", 1.0),
        (b"0", 0.0),
        (b"0.5", 0.5),
        (b" 0.5\r\n\n", 0.5),  # acceptance: surrounding whitespace and CR ignored
        (b"\n\n  1.0  \n\n", 1.0),
        (b"\t0.25\t", 0.25),
        (b"1\r\n", 1.0),
        (b"-0", 0.0),
        (b"1e0", 1.0),
        (b"5E-1", 0.5),
        (b"2.5e+0", 2.5),  # outside [0, 1]: kept as written
        (b"-1.5", -1.5),
        (b"1e308", 1e308),
        (b"0.30000000000000004", 0.30000000000000004),
    ],
)
def test_reward_txt_valid(data: bytes, value: float) -> None:
    assert parse_reward_txt(data) == {"reward": value}


@pytest.mark.parametrize(
    "data",
    [
        b"1abc",  # acceptance
        b"nan",
        b"NaN",
        b"-nan",  # acceptance
        b"inf",
        b"-inf",
        b"+inf",  # acceptance
        b"Infinity",
        b"-Infinity",  # acceptance
        b"1e400",
        b"-1e400",  # finite only
        b"1_000",  # Python literal syntax, not JSON
        b"1\n2",  # acceptance: two numbers on two lines
        b"1\n0\n",
        b"1 2",
        b"warning: something odd\n1\n",  # acceptance: a warning line redirected into reward.txt
        b"1\nwarning: deprecated\n",
        b"+1",
        b".5",
        b"5.",
        b"01",
        b"00.5",
        b"0x1",
        b"1e",
        b"1e+",
        b"--1",
        b"- 1",
        b"1,5",
        b"true",
        b"null",
        b'"1"',
        b"[1]",
        b'{"reward": 1}',
        b"\xef\xbb\xbf1",  # a BOM is "anything else"
        "\u0661".encode(),  # Arabic-Indic digit one: not an ASCII digit
        b"\x00",
        b"1\x00",
        b"\xff\xfe",
        b"   \n\r\n",  # whitespace only: no number
    ],
)
def test_reward_txt_parse_errors(data: bytes) -> None:
    assert _kind_of(parse_reward_txt, data) is ErrorKind.REWARD_PARSE_ERROR


def test_reward_txt_empty_is_reward_empty() -> None:
    assert _kind_of(parse_reward_txt, b"") is ErrorKind.REWARD_EMPTY


def test_reward_txt_error_quotes_first_bytes() -> None:
    with pytest.raises(TrialFailure) as info:
        parse_reward_txt(b"warning: foo\n1\n")
    assert "b'warning: foo\\n1\\n'" in str(info.value)
    assert info.value.detail["file"] == "reward.txt"


def test_reward_txt_quote_is_truncated() -> None:
    with pytest.raises(TrialFailure) as info:
        parse_reward_txt(b"x" * 1000)
    message = str(info.value)
    assert "x" * 80 in message and "x" * 81 not in message and "…" in message


def test_reward_txt_cap() -> None:
    padded = b"1" + b" " * (REWARD_FILE_CAP_BYTES - 1)
    assert parse_reward_txt(padded) == {"reward": 1.0}  # exactly at the cap: fine
    assert _kind_of(parse_reward_txt, padded + b" ") is ErrorKind.REWARD_PARSE_ERROR


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_reward_txt_roundtrips_every_finite_float(x: float) -> None:
    # json.dumps writes JSON number syntax for every finite float (repr is shortest round-trip)
    assert parse_reward_txt(json.dumps(x).encode()) == {"reward": x}


@given(st.text(alphabet=st.characters(codec="ascii"), max_size=20))
def test_reward_txt_accepts_exactly_json_numbers(text: str) -> None:
    stripped = text.strip(" \t\r\n")
    try:
        expected = json.loads(stripped) if stripped else None
        is_number = (
            isinstance(expected, (int, float))
            and not isinstance(expected, bool)
            and math.isfinite(float(expected))
            and stripped.lstrip("-")[:1].isdigit()
        )
    except (ValueError, OverflowError):
        is_number = False
    if not text:
        assert _kind_of(parse_reward_txt, b"") is ErrorKind.REWARD_EMPTY
    elif is_number:
        assert parse_reward_txt(text.encode()) == {"reward": float(expected)}
    else:
        assert _kind_of(parse_reward_txt, text.encode()) is ErrorKind.REWARD_PARSE_ERROR


# ---------------------------------------------------------------- reward.json


@pytest.mark.parametrize(
    ("data", "rewards"),
    [
        (b'{"reward": 1}', {"reward": 1.0}),
        (b'{"reward": 0.5}', {"reward": 0.5}),
        (b'{"accuracy": 0.9, "format": 1}', {"accuracy": 0.9, "format": 1.0}),  # acceptance
        (b'  {"reward": 0}\n', {"reward": 0.0}),
        (b'{"reward": -0.0}', {"reward": 0.0}),
        (b'{"reward": 1e308}', {"reward": 1e308}),
        (b'{"r\\u00e9": 0.5}', {"r\u00e9": 0.5}),
        ('{"ré": 0.5}'.encode(), {"r\u00e9": 0.5}),
    ],
)
def test_reward_json_valid(data: bytes, rewards: dict[str, float]) -> None:
    got = parse_reward_json(data)
    assert got == rewards
    assert all(type(v) is float for v in got.values())
    assert list(got) == list(rewards)  # file order kept


@pytest.mark.parametrize(
    ("data", "named_key"),
    [
        (b'{"reward": 1e400}', "reward"),  # acceptance
        (b'{"reward": -1e400}', "reward"),
        (b'{"reward": 1' + b"0" * 400 + b"}", "reward"),  # a huge integer overflows a float
        (b'{"reward": true}', "reward"),  # acceptance
        (b'{"reward": false}', "reward"),
        (b'{"reward": "1"}', "reward"),  # acceptance
        (b'{"reward": null}', "reward"),
        (b'{"reward": [1]}', "reward"),
        (b'{"reward": {"x": 1}}', "reward"),
        (b'{"a": 1, "b": "x"}', "b"),
    ],
)
def test_reward_json_bad_values_name_the_key(data: bytes, named_key: str) -> None:
    with pytest.raises(TrialFailure) as info:
        parse_reward_json(data)
    assert info.value.kind is ErrorKind.REWARD_PARSE_ERROR
    assert repr(named_key) in str(info.value)


@pytest.mark.parametrize(
    "data",
    [
        b"0.7",  # acceptance: a bare number
        b"1",
        b'"1"',
        b"true",
        b"null",
        b"[1]",
        b'[{"reward": 1}]',  # a list
        b"{}",  # no keys
        b'{"reward": NaN}',
        b'{"reward": Infinity}',
        b'{"reward": -Infinity}',
        b'{"reward": nan}',
        b'{"reward": 1,}',
        b"{reward: 1}",
        b"{'reward': 1}",
        b'{"reward": 1',
        b"{",
        b'{"reward": 1} {"reward": 2}',
        b'{"reward": 01}',
        b'{"reward": .5}',
        b'{"reward": +1}',
        b'{"reward": 1, "reward": 0}',  # duplicate key: ambiguous
        b"\xff\xfe\x00",
        b"[" * 100_00 + b"]" * 100_00,  # deep nesting must not crash
    ],
)
def test_reward_json_parse_errors(data: bytes) -> None:
    assert _kind_of(parse_reward_json, data) is ErrorKind.REWARD_PARSE_ERROR


def test_reward_json_empty_is_reward_empty() -> None:
    assert _kind_of(parse_reward_json, b"") is ErrorKind.REWARD_EMPTY


def test_reward_json_cap() -> None:
    body = b'{"reward": 1}'
    at_cap = body + b" " * (REWARD_FILE_CAP_BYTES - len(body))
    assert parse_reward_json(at_cap) == {"reward": 1.0}
    assert _kind_of(parse_reward_json, at_cap + b" ") is ErrorKind.REWARD_PARSE_ERROR


def test_reward_json_error_quotes_first_bytes() -> None:
    with pytest.raises(TrialFailure) as info:
        parse_reward_json(b"0.7")
    assert "b'0.7'" in str(info.value)
    assert info.value.detail["file"] == "reward.json"


@given(
    st.dictionaries(
        st.text(max_size=10),
        st.one_of(
            st.floats(allow_nan=False, allow_infinity=False),
            st.integers(min_value=-(10**300), max_value=10**300),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_reward_json_roundtrips(rewards: dict) -> None:
    assert parse_reward_json(json.dumps(rewards).encode()) == {k: float(v) for k, v in rewards.items()}


# ---------------------------------------------------------------- read_reward


def test_read_reward_txt_only() -> None:
    got = read_reward({"reward.txt": b"0.5\n", "reward.json": None})
    assert got == RewardRead(rewards={"reward": 0.5}, reward_file="reward.txt", warnings=[])


def test_read_reward_json_only_with_absent_key() -> None:
    got = read_reward({"reward.json": b'{"reward": 1}'})
    assert got.rewards == {"reward": 1.0}
    assert got.reward_file == "reward.json"
    assert got.warnings == []


def test_read_reward_json_wins_with_warning() -> None:
    # acceptance: both files written -> reward.json wins with a warning
    got = read_reward({"reward.json": b'{"reward": 0.25}', "reward.txt": b"1"})
    assert got.rewards == {"reward": 0.25}
    assert got.reward_file == "reward.json"
    assert len(got.warnings) == 1 and "reward.json" in got.warnings[0] and "reward.txt" in got.warnings[0]


def test_read_reward_json_wins_even_when_broken() -> None:
    with pytest.raises(TrialFailure) as info:
        read_reward({"reward.json": b"not json", "reward.txt": b"1"})
    assert info.value.kind is ErrorKind.REWARD_PARSE_ERROR


def test_read_reward_json_wins_even_when_empty() -> None:
    with pytest.raises(TrialFailure) as info:
        read_reward({"reward.json": b"", "reward.txt": b"1"})
    assert info.value.kind is ErrorKind.REWARD_EMPTY


@pytest.mark.parametrize("files", [{}, {"reward.json": None, "reward.txt": None}, {"other.txt": b"1"}])
def test_read_reward_missing(files: dict) -> None:
    with pytest.raises(TrialFailure) as info:
        read_reward(files)
    assert info.value.kind is ErrorKind.REWARD_MISSING
    assert category_of(info.value.kind) is Category.TASK


def test_read_reward_empty_txt() -> None:
    with pytest.raises(TrialFailure) as info:
        read_reward({"reward.txt": b""})
    assert info.value.kind is ErrorKind.REWARD_EMPTY
    assert category_of(info.value.kind) is Category.TASK


@pytest.mark.parametrize(
    ("files", "n_warnings"),
    [
        ({"reward.txt": b"1.5"}, 1),
        ({"reward.txt": b"-0.1"}, 1),
        ({"reward.txt": b"1"}, 0),
        ({"reward.txt": b"0"}, 0),
        ({"reward.json": b'{"a": 2, "b": -1, "c": 0.5}'}, 2),
    ],
)
def test_read_reward_out_of_range_values_kept_with_warning(files: dict, n_warnings: int) -> None:
    got = read_reward(files)
    raw = json.loads(next(iter(files.values())))
    expected = raw if isinstance(raw, dict) else {"reward": raw}
    assert got.rewards == {k: float(v) for k, v in expected.items()}
    assert len(got.warnings) == n_warnings
    assert all("outside [0, 1]" in w for w in got.warnings)


def test_reward_read_is_frozen() -> None:
    got = read_reward({"reward.txt": b"1"})
    with pytest.raises(AttributeError, match="cannot assign to field"):
        got.reward_file = "x"  # type: ignore[misc]


# ------------------------------------------- held by mutation testing (bench/mutation.py)


def test_the_cap_is_the_documented_64_kib() -> None:
    """docs/task-format.md and docs/design.md: reward files are read with a 64 KiB cap."""
    assert REWARD_FILE_CAP_BYTES == 65536
    assert parse_reward_txt(b"1" + b" " * 65535) == {"reward": 1.0}
    assert _kind_of(parse_reward_txt, b"1" + b" " * 65536) is ErrorKind.REWARD_PARSE_ERROR


@pytest.mark.parametrize(
    "parse, name", [(parse_reward_txt, "reward.txt"), (parse_reward_json, "reward.json")]
)
def test_an_empty_file_says_its_name_and_zero_bytes(parse, name) -> None:
    with pytest.raises(TrialFailure, match=f"^{name} is empty \\(0 bytes\\)$") as info:
        parse(b"")
    assert info.value.detail == {"file": name, "size_bytes": 0}


@pytest.mark.parametrize(
    "data, said",
    [
        (b"[1]", "top level is a JSON array"),
        (b'"x"', "top level is a JSON string"),
        (b"null", "top level is a JSON null"),
        (b"true", "top level is a JSON boolean"),
        (b"1", "top level is a JSON number"),
        (b'{"reward": [1]}', "value of key 'reward' is a JSON array"),
        (b'{"reward": {"x": 1}}', "value of key 'reward' is a JSON object"),
        (b'{"reward": null}', "value of key 'reward' is a JSON null"),
        (b'{"reward": true}', "value of key 'reward' is a JSON boolean"),
        (b'{"reward": "1"}', "value of key 'reward' is a JSON string"),
    ],
)
def test_a_wrong_json_type_is_named(data: bytes, said: str) -> None:
    with pytest.raises(TrialFailure, match=f"^reward.json: {said}"):
        parse_reward_json(data)


def test_the_quote_is_marked_cut_only_when_it_is() -> None:
    from cairn.trial.rewards import QUOTE_BYTES, quote_head

    assert QUOTE_BYTES == 80
    assert quote_head(b"x" * 80) == repr(b"x" * 80)  # all of it: no mark
    assert quote_head(b"x" * 81) == repr(b"x" * 80) + "…"
    assert quote_head(b"abc", limit=2) == "b'ab'…"
    assert quote_head(b"1abc\n") == "b'1abc\\n'"  # shorter: no mark either
