"""cairn._util.aio.shielded: shielded work that fails after its caller was cancelled is not
reported by asyncio as a lost exception (the traceback a SIGTERM'd local trial printed, from its
verifier's clean-up exec failing on the stopped sandbox: tests/faults/test_signals.py)."""

from __future__ import annotations

import asyncio
import gc

import pytest

from cairn._util.aio import shielded


def _run_cancelled_caller(shield) -> tuple[list[str], list[dict]]:
    """Cancel a caller while it awaits ``shield(work())``; the work fails after the cancel.
    Returns (what the work did, the loop's exception-handler calls)."""
    done: list[str] = []
    reported: list[dict] = []

    async def work() -> None:
        await asyncio.sleep(0.05)
        done.append("ran to the end")
        raise RuntimeError("the sandbox was stopped")

    async def caller() -> None:
        await shield(work())

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: reported.append(ctx))
        t = asyncio.ensure_future(caller())
        await asyncio.sleep(0.01)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        await asyncio.sleep(0.1)  # the shielded work ends and fails meanwhile
        gc.collect()  # a lost exception is reported when its task is collected

    asyncio.run(main())
    gc.collect()
    return done, reported


def test_a_shielded_failure_after_the_callers_cancel_is_not_reported_as_lost():
    done, reported = _run_cancelled_caller(shielded)
    assert done == ["ran to the end"]  # the cancel did not stop the work
    assert reported == []


def test_plain_shield_reports_it_which_is_what_shielded_prevents():
    done, reported = _run_cancelled_caller(asyncio.shield)
    assert done == ["ran to the end"]
    assert [c["message"] for c in reported] == ["Task exception was never retrieved"]
    assert isinstance(reported[0]["exception"], RuntimeError)


def test_the_result_and_the_error_reach_a_caller_that_still_waits():
    async def ok() -> int:
        return 7

    async def bad() -> None:
        raise ValueError("boom")

    assert asyncio.run(shielded(ok())) == 7
    with pytest.raises(ValueError, match="boom"):
        asyncio.run(shielded(bad()))
