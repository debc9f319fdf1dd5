"""Reuse of a ``public`` trial's bridge network by a later trial of the same job (#31).

A ``public`` sandbox (the ``bridge`` layout of :mod:`.gateway`) sits on a bridge network of
its own, so concurrent trials cannot reach each other. Creating and removing that network is
about a quarter of the engine-call wall time of a trivial trial at ``-n 8`` (design §12).
Once a trial's container is gone for sure, the empty network is as good as a new one: this
module hands it to the next trial of the job (the job's :class:`cairn.sandbox.pools.ResourcePool`,
``spec.pool``) instead of removing it; a trial that finds none idle, nor one on its way back
within :data:`BRIDGE_WAIT_SEC`, creates one as before.

Isolation stays exactly as it was: a network serves one trial at a time, and it is given back
only after the engine says no container is attached to it (an inspect after the container's
removal); one that still holds anything, or whose trial's removal failed, is removed instead.
The pool holds at most :data:`BRIDGE_POOL_LIMIT` idle networks, and no more than the job's
sandbox starts left can take (:class:`~cairn.sandbox.pools.ResourcePool` ``takers``: the last
trials remove their networks themselves, beside the trials still running); what it still
holds when the job ends keeps its ownership labels, so the job's settle step removes it. A
network serves at most :data:`MAX_USES` trials.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from cairn.sandbox.docker.build import in_thread
from cairn.sandbox.docker.gateway import Layout, TrialNetwork, _Net
from cairn.sandbox.pools import ResourcePool

log = logging.getLogger(__name__)

BRIDGE_POOL_KIND = "docker-bridge"
"""The pool's kind for an idle ``public`` bridge network."""
BRIDGE_POOL_LIMIT = 16
"""The most idle bridge networks a job's pool keeps."""
BRIDGE_WAIT_SEC = 1.0
"""How long a starting trial waits for a network on its way back (another trial's container
being removed) before it creates one, seconds."""
MAX_USES = 50
"""Trials one bridge network serves before it is removed."""


@dataclass
class PooledBridge:
    """An idle bridge network in a job's pool: the network and the trials it served."""

    net: _Net
    uses: int


def _bridge(net: TrialNetwork | None) -> bool:
    return net is not None and net.layout is Layout.BRIDGE


async def create_or_take(net: TrialNetwork, pool: ResourcePool[Any] | None) -> None:
    """Give ``net`` (a fresh, not yet created :class:`TrialNetwork`) its networks: an idle
    bridge network of the job's pool for the ``bridge`` layout when there is one, else new
    ones (:meth:`TrialNetwork.create_networks`).

    Args:
        net: the trial's network plan.
        pool: the job's pool (``None``: a trial run alone; it creates its own).

    Raises:
        SandboxError: ``start_failed`` (creating the network failed).
    """
    if _bridge(net) and pool is not None and not pool.closed:
        item = await pool.take_or_wait(BRIDGE_POOL_KIND, wait_sec=BRIDGE_WAIT_SEC)
        if isinstance(item, PooledBridge):
            net.public = item.net
            net.uses = item.uses + 1
            return
    await net.create_networks()


def expect(net: TrialNetwork | None, pool: ResourcePool[Any] | None, ready: bool) -> bool:
    """Announce, as a sandbox's removal begins, that its bridge network may come back (so a
    starting trial waits for it rather than creating one). Pair a ``True`` with
    :func:`give_back_or_remove` ``expected=True``.

    Args:
        net: the sandbox's networks.
        pool: the job's pool.
        ready: the sandbox had started.

    Returns:
        Whether it was announced.
    """
    return (
        ready
        and _bridge(net)
        and net is not None
        and net.public is not None
        and net.uses < MAX_USES
        and pool is not None
        and pool.expect(BRIDGE_POOL_KIND)
    )


async def give_back_or_remove(
    net: TrialNetwork, pool: ResourcePool[Any] | None, *, expected: bool, clean: bool
) -> None:
    """After the sandbox's containers are gone: hand its bridge network to the job's pool
    when it is empty, else remove the networks (:meth:`TrialNetwork.remove`). Never raises.

    Args:
        net: the sandbox's networks.
        pool: the job's pool.
        expected: :func:`expect` announced it (settled here either way).
        clean: the container's removal succeeded (``removal_error`` is ``None``).
    """
    try:
        if expected and clean and pool is not None and net.public is not None:
            public = net.public
            try:
                info = await in_thread(net.client.api.inspect_network, public.ident)
            except Exception as exc:  # noqa: BLE001 - not reusable: removed instead
                log.info("network %s not reused: %s", public.name, exc)
                info = None
            if info is not None and not (info.get("Containers") or {}):
                if pool.give(BRIDGE_POOL_KIND, PooledBridge(public, net.uses), limit=BRIDGE_POOL_LIMIT):
                    net.public = None  # the pool's now
                    return
            elif info is not None:
                log.info("network %s not reused: it still holds %s", public.name, sorted(info["Containers"]))
        await net.remove()
    finally:
        if expected and pool is not None:
            pool.settle(BRIDGE_POOL_KIND)


__all__ = [
    "BRIDGE_POOL_KIND",
    "BRIDGE_POOL_LIMIT",
    "BRIDGE_WAIT_SEC",
    "MAX_USES",
    "PooledBridge",
    "create_or_take",
    "expect",
    "give_back_or_remove",
]
