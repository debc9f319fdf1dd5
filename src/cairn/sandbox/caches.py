"""What the sandboxes of one job share in one process: memos of backend facts, journals of
what the job observed, and build locks.

A backend remembers facts that are costly to learn again (a build that failed a moment ago,
an image built once under ``--force-build``, the gateway image that exists, the Compose CLI
that answered, the Docker engine's API version, version and own addresses), keeps a journal
of what it observed (the moments the engine did not answer) and serialises builds of one
environment with an :class:`asyncio.Lock` before its file lock. That state lives in one
:class:`SandboxCaches` value owned by the job (:attr:`cairn.trial.context.JobServices.caches`),
handed to each sandbox in :attr:`cairn.sandbox.base.SandboxSpec.caches`: two jobs in one
process learn each fact on their own, and a spec made alone (a test, ``cairn shell``) gets a
fresh one, so no test resets module state. A trial that lost its engine makes the job forget
its memos (:meth:`SandboxCaches.engine_lost`): the engine that answers afterwards is asked
again. The file locks still serialise builds across jobs and processes.

This module holds no engine calls and no module-level state.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar, cast

from cairn._util.engine_ping import forget_early_facts

T = TypeVar("T")


class SandboxCaches:
    """One job's backend memos (by name) and its in-process build locks (by key and loop).

    Thread-safe. A copy (pickled for another process, ``copy.deepcopy``) starts empty: a
    memo of this process's engine facts means nothing elsewhere.
    """

    def __init__(self) -> None:
        self._mu = threading.Lock()
        self._memos: dict[str, object] = {}
        self._journals: dict[str, object] = {}
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Lock]] = (
            weakref.WeakKeyDictionary()
        )

    def memo(self, name: str, factory: Callable[[], T]) -> T:
        """The memo called ``name``, made by ``factory`` on first use.

        Args:
            name: the memo's name, owned by one backend module (``"docker.build"``, …).
            factory: makes the empty memo (a dataclass of dicts and sets).

        Returns:
            The same object for every call with ``name`` on this value.
        """
        with self._mu:
            if name not in self._memos:
                self._memos[name] = factory()
            return cast(T, self._memos[name])

    def journal(self, name: str, factory: Callable[[], T]) -> T:
        """The journal called ``name``, made by ``factory`` on first use: a record of what the
        job observed (the moments its engine did not answer), not a fact about an engine, so
        unlike a :meth:`memo` it outlives :meth:`engine_lost`.

        Args:
            name: the journal's name, owned by one backend module (``"docker.silences"``).
            factory: makes the empty journal.

        Returns:
            The same object for every call with ``name`` on this value.
        """
        with self._mu:
            if name not in self._journals:
                self._journals[name] = factory()
            return cast(T, self._journals[name])

    def engine_lost(self) -> None:
        """Forget every memo: the engine behind the job's sandboxes was lost, and what was
        learnt of it (its API version and version, its addresses, the images it had) may not
        hold for the engine that answers now (restarted, upgraded or replaced, issue #29).
        The next sandbox asks again. The build locks and the :meth:`journal` records stay
        (they hold no engine fact), and a memo a running sandbox already holds stays valid
        for it. What ``cairn run``'s early ping said of the engine is dropped too.
        """
        forget_early_facts()
        with self._mu:
            self._memos.clear()

    def lock(self, key: str) -> asyncio.Lock:
        """The build lock of ``key`` in the running event loop (an :class:`asyncio.Lock`
        belongs to one loop; a prestart thread's loop gets its own).

        Raises:
            RuntimeError: no event loop is running.
        """
        loop = asyncio.get_running_loop()
        with self._mu:
            return self._locks.setdefault(loop, {}).setdefault(key, asyncio.Lock())

    def __reduce__(self) -> tuple[Any, ...]:
        return (SandboxCaches, ())


__all__ = ["SandboxCaches"]
