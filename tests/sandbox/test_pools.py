"""A job's resource pool (cairn.sandbox.pools.ResourcePool): take/give, and waiting for a
resource an earlier trial's removal is handing back (the removal runs beside the next trial,
#13)."""

from __future__ import annotations

import asyncio

from cairn.sandbox.pools import ResourcePool


def test_take_or_wait_gets_the_resource_a_removal_hands_back(tmp_path):
    pool = ResourcePool()
    try:
        assert pool.expect("gw")
        assert pool.pending("gw") == 1

        async def scenario():
            async def removal():
                await asyncio.sleep(0.05)  # the earlier trial's container is being removed
                assert pool.give("gw", "gateway-1", limit=4)
                pool.settle("gw")

            back = asyncio.ensure_future(removal())
            got = await pool.take_or_wait("gw", wait_sec=10)
            await back
            return got

        assert asyncio.run(scenario()) == "gateway-1"
        assert pool.pending("gw") == 0
    finally:
        pool.close()


def test_take_or_wait_does_not_wait_without_a_pending_return(tmp_path):
    pool = ResourcePool()
    try:
        assert asyncio.run(asyncio.wait_for(pool.take_or_wait("gw", wait_sec=3600), timeout=5)) is None
    finally:
        pool.close()


def test_a_return_that_is_removed_instead_ends_the_wait(tmp_path):
    pool = ResourcePool()
    try:
        assert pool.expect("gw")

        async def scenario():
            async def removal():
                await asyncio.sleep(0.05)
                pool.settle("gw")  # recycling failed: removed, not given back

            back = asyncio.ensure_future(removal())
            got = await asyncio.wait_for(pool.take_or_wait("gw", wait_sec=3600), timeout=5)
            await back
            return got

        assert asyncio.run(scenario()) is None
    finally:
        pool.close()


def test_a_closed_pool_expects_nothing(tmp_path):
    closed = ResourcePool()
    closed.close()
    assert not closed.expect("gw")
    assert closed.pending("gw") == 0
    pool = ResourcePool()
    assert pool.expect("gw")
    pool.close()
    assert pool.pending("gw") == 0
    assert not pool.give("gw", "x", limit=4)


def test_drain_forgets_the_idle_resources_and_keeps_the_pool_open():
    pool: ResourcePool[str] = ResourcePool()
    assert pool.give("gateway", "a", limit=4) and pool.give("bridge", "b", limit=4)
    assert sorted(pool.drain()) == ["a", "b"]
    assert pool.take("gateway") is None and pool.take("bridge") is None and not pool.closed
    assert pool.give("gateway", "c", limit=4) and pool.take("gateway") == "c"


def test_a_pool_keeps_no_more_than_the_starts_left_can_take():
    """``takers``: each take_or_wait uses one when it returns; a resource beyond what the starts
    left can use is refused (expect and give say False), so its trial removes it at once."""
    pool: ResourcePool = ResourcePool(takers=2)
    assert pool.expect("net") and pool.give("net", "n1", limit=8)
    pool.settle("net")
    assert pool.give("net", "n2", limit=8)
    assert not pool.give("net", "n3", limit=8)  # two idle for two starts left
    assert asyncio.run(pool.take_or_wait("net", wait_sec=0)) == "n2"
    assert pool.takers == 1
    assert not pool.give("net", "n4", limit=8)  # one idle, one start left
    assert asyncio.run(pool.take_or_wait("net", wait_sec=0)) == "n1" and pool.takers == 0
    assert not pool.expect("net") and not pool.give("net", "n5", limit=8)
    assert asyncio.run(pool.take_or_wait("net", wait_sec=0)) is None and pool.takers == 0
    assert ResourcePool().takers is None and ResourcePool().give("net", "x", limit=1)


def test_a_start_waiting_for_a_return_still_counts_as_a_taker():
    """The last start waits for a resource on its way back; the return is kept for it (the
    waiter uses its taker only when it returns), not refused."""
    pool: ResourcePool = ResourcePool(takers=1)
    assert pool.expect("net")

    async def scenario():
        waiter = asyncio.ensure_future(pool.take_or_wait("net", wait_sec=30))
        await asyncio.sleep(0)  # the waiter is inside take_or_wait now
        kept = pool.give("net", "back", limit=8)
        pool.settle("net")
        return kept, await waiter

    assert asyncio.run(scenario()) == (True, "back")
    assert pool.takers == 0


def test_a_retry_adds_a_taker():
    """A retried trial starts another sandbox: the job adds a taker, so the pool keeps a
    returned resource for it again."""
    pool: ResourcePool = ResourcePool(takers=1)
    assert asyncio.run(pool.take_or_wait("net", wait_sec=0)) is None and pool.takers == 0
    assert not pool.give("net", "n1", limit=8)
    pool.add_takers(1)
    assert pool.takers == 1 and pool.give("net", "n1", limit=8)
    unknown: ResourcePool = ResourcePool()
    unknown.add_takers(3)
    assert unknown.takers is None
