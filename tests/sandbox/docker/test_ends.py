"""Unit tests of :mod:`cairn.sandbox.docker.ends`: the engine's timestamps as the events API
reads them (the window in which a ``docker kill`` of the sandbox is looked up, issue #12)."""

from __future__ import annotations

from datetime import UTC, datetime

from cairn.sandbox.docker.ends import api_time


def test_api_time_keeps_the_engine_s_nanoseconds_and_shifts_by_whole_and_part_seconds():
    base = int(datetime(2026, 12, 1, 19, 59, 15, tzinfo=UTC).timestamp())
    assert api_time("2026-12-01T19:59:15.653813699Z") == f"{base}.653813699"
    assert api_time("2026-12-01T19:59:15.653813699Z", 1.0) == f"{base + 1}.653813699"
    assert api_time("2026-12-01T19:59:15.9Z", 0.2) == f"{base + 1}.100000000"  # carries over
    assert api_time("2026-12-01T19:59:15Z") == f"{base}.000000000"
    assert api_time("2026-12-01T20:59:15.5+01:00") == f"{base}.500000000"


def test_api_time_refuses_the_zero_time_and_what_is_not_a_timestamp():
    assert api_time("0001-01-01T00:00:00Z") is None  # a container that has not finished
    assert api_time("") is None
    assert api_time("yesterday") is None
