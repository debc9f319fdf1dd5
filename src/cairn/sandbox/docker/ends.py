"""Whose doing a docker sandbox's end was: its own, or the engine's on someone else's order.

A container stops running when its init (docker-init, PID 1) exits. Nothing inside the sandbox
can kill PID 1 (the kernel ignores signals a namespace's init has no handler for), but a
process inside may kill the init's only child, the keeper — ``kill -9 -1`` as root does — and
the init then exits with the same status (137) an outside ``docker kill`` leaves. The
container's ``State`` cannot tell the two apart; the engine's event log can: ``docker kill``,
``docker stop`` and ``docker rm -f`` all go through the engine, which records a ``kill`` event
for the container, while a process that dies inside the sandbox only leaves ``die``.

The engine keeps its last 256 events in memory (moby's ``eventsLimit``): read right after the
failure, as :meth:`DockerSandbox.ended` does, the kill is still there; when it is not (a very
busy engine), the end counts as the sandbox's own, as it did before outside kills were told
apart — the conservative side, since a retry must never be the agent's way out of a score.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

KILL_LOOKBACK_SLACK_SEC = 1.0
"""How far past the container's ``FinishedAt`` the event log is read for its kill, seconds
(the engine records a kill just after sending the signal, so it may land after the exit)."""


_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$")


def api_time(rfc3339: str, shift_sec: float = 0.0) -> str | None:
    """An engine timestamp (``2026-12-01T19:59:15.653813699Z``) as the events API's
    ``seconds.nanoseconds`` string, moved by ``shift_sec`` seconds.

    Returns:
        The string, or ``None`` for an empty or unparseable value and for the engine's zero
        time (``0001-01-01T00:00:00Z``: never started, or not finished).
    """
    m = _STAMP.match((rfc3339 or "").strip())
    if m is None or m.group(1).startswith("0001-"):
        return None
    zone = "+00:00" if m.group(3) == "Z" else m.group(3)
    base = int(datetime.fromisoformat(m.group(1) + zone).timestamp())
    nanos = int(((m.group(2) or "") + "000000000")[:9]) + round(shift_sec * 1e9)
    secs = base + nanos // 1_000_000_000
    return f"{secs}.{nanos % 1_000_000_000:09d}"


def engine_kills(client: Any, cid: str, state: Mapping[str, Any]) -> list[int | str]:
    """The signals the engine was asked to send the container between its start and just past
    its end (``docker kill``/``stop``/``rm -f`` by anyone), from the engine's event log.

    Blocking (run it on the I/O pool). The window ends at ``FinishedAt`` plus
    :data:`KILL_LOOKBACK_SLACK_SEC`, or now if that is earlier, so the read never waits for
    future events.

    Args:
        client: a Docker SDK client.
        cid: the container id.
        state: the container's engine ``State`` (``StartedAt``, ``FinishedAt``).

    Returns:
        The signals in order (numbers, or the engine's names), ``[]`` when none was recorded,
        the log no longer reaches back, or the engine cannot tell.
    """
    since = api_time(str(state.get("StartedAt") or ""))
    until = api_time(str(state.get("FinishedAt") or ""), KILL_LOOKBACK_SLACK_SEC)
    if since is None or until is None:
        return []
    now = f"{time.time():.9f}"
    if float(now) < float(until):
        until = now
    signals: list[int | str] = []
    with contextlib.suppress(Exception):
        stream = client.api.events(
            since=since,
            until=until,
            decode=True,
            filters={"type": "container", "container": cid, "event": "kill"},
        )
        try:
            for event in stream:
                attrs = (event.get("Actor") or {}).get("Attributes") or {}
                sig = str(attrs.get("signal") or "")
                signals.append(int(sig) if sig.isdigit() else sig)
        finally:
            with contextlib.suppress(Exception):
                stream.close()
    return signals
