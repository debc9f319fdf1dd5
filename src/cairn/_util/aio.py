"""asyncio helpers the engine shares.

:func:`shielded` is ``await asyncio.shield(aw)`` for work that must finish although its caller
is cancelled (a clean-up exec, a sandbox's removal), without asyncio's
``Task exception was never retrieved`` traceback at exit when that work then fails with nobody
left to read its error (seen: a trial cancelled by SIGTERM inside its verifier's clean-up, whose
exec then failed because the sandbox was stopped, printed a traceback on the terminal).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")

log = logging.getLogger(__name__)

_RUNNING_ON: set[asyncio.Future[Any]] = set()
"""Shielded work whose caller was cancelled, held until it ends (the loop holds tasks only
weakly)."""


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Read a shielded task's outcome once it ends, so asyncio does not report it as lost."""
    _RUNNING_ON.discard(task)
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        log.debug("shielded work ended with an error after its caller was cancelled: %r", exc)


async def shielded(aw: Awaitable[T]) -> T:
    """Await ``aw`` shielded from the caller's cancellation (:func:`asyncio.shield`).

    When the caller is cancelled, ``aw`` runs on, and its error, if it fails later, is
    retrieved (logged at debug level) instead of being reported by asyncio as never retrieved.

    Returns:
        ``aw``'s result.

    Raises:
        asyncio.CancelledError: the caller was cancelled (``aw`` goes on).
        BaseException: whatever ``aw`` raised, when the caller was still waiting.
    """
    task = asyncio.ensure_future(aw)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        _RUNNING_ON.add(task)
        task.add_done_callback(_retrieve)
        raise


__all__ = ["shielded"]
