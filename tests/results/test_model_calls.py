"""The typed reader of the relay's ``model_calls.jsonl`` (cairn.results.model_calls): it reads
what the relay's own record model writes, sums by the relay's rule, and treats every line as
hostile input — a bad or truncated line is skipped and counted, never a crash."""

from __future__ import annotations

import dataclasses
import json
import math
import os

import pytest

from cairn.relay.ledger import CallRecord, summarise
from cairn.relay.usage import Usage
from cairn.results import model_calls as mc
from cairn.results.model_calls import CallSums, ModelCall, parse_call, read_calls


def _rec(seq: int, **kw) -> CallRecord:
    base = dict(
        seq=seq,
        time="2026-12-02T12:00:00.000Z",
        trial="t" * 64,
        step="write",
        endpoint="/v1/chat/completions",
        family="chat",
        kind="generate",
        model="gpt-4o-mini",
        stream=False,
        status=200,
        latency_sec=0.01,
        ttfb_sec=0.005,
        complete=True,
    )
    base.update(kw)
    return CallRecord(**base)


def _line(rec: CallRecord) -> str:
    # exactly what TrialLease.finish_call appends
    return json.dumps(rec.as_dict(), separators=(",", ":"), default=str) + "\n"


RECORDS = [
    _rec(1, status=500, complete=False, error=None),
    _rec(2, retry_of=1, usage=Usage(120, 30, 20, None, None), cost_usd=3.45e-05),
    _rec(3, usage=Usage(200, 25, 50, 7, 4), cost_usd=4.1e-05, stream=True),
    _rec(4, kind="count", endpoint="/v1/messages/count_tokens", family="anthropic", usage=Usage(9, None)),
    _rec(5, status=400, error="budget_exceeded", complete=False),
    _rec(6, usage=Usage(10, 2), cost_usd=None, complete=False, error=None),  # cut stream, unpriced
]


def test_the_reader_knows_every_field_the_relay_writes():
    written = {f.name for f in dataclasses.fields(CallRecord)}
    assert written <= set(ModelCall.model_fields), written - set(ModelCall.model_fields)
    assert set(mc.CallUsage.model_fields) == {f.name for f in dataclasses.fields(Usage)}
    assert tuple(f.name for f in dataclasses.fields(Usage)) == mc.TOKEN_KINDS


def test_lines_of_the_relays_writer_read_back_and_sum_as_the_relay_sums(tmp_path):
    f = tmp_path / "model_calls.jsonl"
    f.write_text("".join(_line(r) for r in RECORDS))
    log = read_calls(f)
    assert log.present and log.unreadable == 0
    assert [c.seq for c in log.calls] == [1, 2, 3, 4, 5, 6]
    two = log.calls[1]
    assert (two.retry_of, two.usage.input_tokens, two.usage.cache_read_tokens) == (1, 120, 20)
    assert two.usage.cache_write_tokens is None and two.has_bodies is False
    s = log.sums
    ref = summarise(RECORDS)  # the relay's own step sums (result.json's step tokens)
    assert (s.input_tokens, s.output_tokens, s.cache_read_tokens) == (
        ref.usage.input_tokens,
        ref.usage.output_tokens,
        ref.usage.cache_read_tokens,
    )
    assert (s.cache_write_tokens, s.reasoning_tokens) == (7, 4)
    assert s.input_tokens == 330 and s.output_tokens == 57
    assert s.cost_usd is None and ref.cost_usd is None  # call 6 is unpriced: unknown, not 0
    assert s.incomplete == ref.incomplete_calls == 1
    assert (s.calls, s.billed, s.errors, s.retries, s.refused) == (6, 3, 2, 1, 1)


def test_costs_sum_when_every_billed_call_is_priced_and_totals_keep_unknowns():
    calls = [parse_call(_line(r)) for r in RECORDS[:3]]
    s = CallSums.of([c for c in calls if c is not None])
    assert s.cost_usd == pytest.approx(3.45e-05 + 4.1e-05)
    empty = CallSums.of([])
    assert empty.input_tokens is None and empty.cost_usd == 0.0  # no billed call: no tokens known
    tot = CallSums.total([s, empty, CallSums(calls=1, cost_usd=None)])
    assert tot.calls == s.calls + 1 and tot.input_tokens == 320
    assert tot.cost_usd is None
    assert CallSums.total([s, empty]).cost_usd == pytest.approx(s.cost_usd)


def test_bodies_are_kept_as_recorded_and_dropped_on_request(tmp_path):
    rec = _rec(1, usage=Usage(1, 1), cost_usd=0.0)
    rec.request_body = {"messages": [{"role": "user", "content": "<script>alert(1)</script>"}]}
    rec.response_body = "data: {}\n\n"
    f = tmp_path / "model_calls.jsonl"
    f.write_text(_line(rec))
    full = read_calls(f).calls[0]
    assert full.has_bodies and full.request_body == rec.request_body and full.response_body == "data: {}\n\n"
    lean = read_calls(f, bodies=False)
    assert lean.bodies_dropped and lean.calls[0].has_bodies and lean.calls[0].request_body is None


BAD_LINES = [
    "not json at all",
    "[1, 2, 3]",
    '"a string"',
    '{"seq": 1}',  # missing required fields
    _line(_rec(7)).replace('"status":200', '"status":"200"'),  # a string is no status
    _line(_rec(8)).replace('"stream":false', '"stream":1'),  # strict: 1 is no bool
    _line(_rec(9)).replace('"input_tokens":null', '"input_tokens":-5'),  # negative count
    _line(_rec(10)).replace('"latency_sec":0.01', '"latency_sec":NaN'),  # Python's json takes NaN
    _line(_rec(11)).replace('"seq":11', '"seq":true'),  # a bool is no seq
    _line(_rec(12)).replace('"cost_usd":null', '"cost_usd":1e400'),  # infinity
    _line(_rec(13)).replace('"input_tokens":null', '"input_tokens":2.5'),  # no whole count
    "[" * 100_000,  # nesting deep enough to break a recursive parser
]


def test_bad_and_truncated_lines_are_skipped_and_counted(tmp_path):
    good = [_line(_rec(i, usage=Usage(10, 1), cost_usd=1e-6)) for i in (1, 2)]
    truncated = _line(_rec(3))[:40]  # a write cut short: the last line, no newline
    f = tmp_path / "model_calls.jsonl"
    bad = "".join(b if b.endswith("\n") else b + "\n" for b in BAD_LINES)
    f.write_text(good[0] + "\n\n" + bad + good[1] + truncated)
    log = read_calls(f)
    assert [c.seq for c in log.calls] == [1, 2]
    assert log.unreadable == len(BAD_LINES) + 1
    assert log.sums.unreadable == log.unreadable and log.sums.input_tokens == 20
    # invalid UTF-8 is a bad line too
    f.write_bytes(good[0].encode() + b'{"seq": 2, "model": "\xff\xfe"}\n')
    assert read_calls(f).unreadable == 1


def test_a_line_over_the_size_limit_is_skipped(tmp_path, monkeypatch):
    monkeypatch.setattr(mc, "MAX_LINE_BYTES", 512)
    big = _rec(2, usage=Usage(1, 1))
    big.request_body = {"x": "y" * 1000}
    f = tmp_path / "model_calls.jsonl"
    f.write_text(_line(_rec(1)) + _line(big))
    log = read_calls(f)
    assert [c.seq for c in log.calls] == [1] and log.unreadable == 1


def test_hostile_strings_stay_data(tmp_path):
    rec = _rec(1, model="<script>window.__pwned=1</script>", error="provider: <img src=x onerror=alert(1)>")
    rec.endpoint = "/v1/chat/completions?<b>"
    f = tmp_path / "model_calls.jsonl"
    f.write_text(_line(rec).replace('"seq":1,', '"seq":1,"__class__":"x","has_bodies":"yes",'))
    c = read_calls(f).calls[0]
    assert c.model == "<script>window.__pwned=1</script>"
    assert c.error == "provider: <img src=x onerror=alert(1)>" and c.endpoint.endswith("<b>")
    assert c.has_bodies is False  # the reader sets it from the line's keys, not from the line


def test_absent_symlinked_and_unreadable_files(tmp_path):
    assert read_calls(tmp_path / "none.jsonl").present is False
    real = tmp_path / "real.jsonl"
    real.write_text(_line(_rec(1)))
    link = tmp_path / "model_calls.jsonl"
    link.symlink_to(real)
    assert read_calls(link).present is False  # never follow a link an agent may have planted
    d = tmp_path / "dir.jsonl"
    d.mkdir()
    assert read_calls(d).present is False
    if os.geteuid() != 0:  # root reads anything
        real.chmod(0)
        log = read_calls(real)
        assert log.present and log.unreadable == 1 and log.calls == []


def test_sums_are_finite_numbers():
    s = CallSums.of([c for c in (parse_call(_line(r)) for r in RECORDS[:3]) if c is not None])
    assert s.cost_usd is not None and math.isfinite(s.cost_usd)
    with pytest.raises(ValueError):
        CallSums(cost_usd=float("nan"))
