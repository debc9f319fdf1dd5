"""The job-level pool registry (cairn.sandbox.pools): take/give, and waiting for a resource an
earlier trial's removal is handing back (the removal runs beside the next trial, #13)."""

from __future__ import annotations

import asyncio

from cairn.sandbox import pools


def test_take_or_wait_gets_the_resource_a_removal_hands_back(tmp_path):
    job = tmp_path / "job"
    pools.open_pool(job)
    try:
        assert pools.expect(job, "gw")
        assert pools.pending(job, "gw") == 1

        async def scenario():
            async def removal():
                await asyncio.sleep(0.05)  # the earlier trial's container is being removed
                assert pools.give(job, "gw", "gateway-1", limit=4)
                pools.settle(job, "gw")

            back = asyncio.ensure_future(removal())
            got = await pools.take_or_wait(job, "gw", wait_sec=10)
            await back
            return got

        assert asyncio.run(scenario()) == "gateway-1"
        assert pools.pending(job, "gw") == 0
    finally:
        pools.close_pool(job)


def test_take_or_wait_does_not_wait_without_a_pending_return(tmp_path):
    job = tmp_path / "job"
    pools.open_pool(job)
    try:
        assert asyncio.run(asyncio.wait_for(pools.take_or_wait(job, "gw", wait_sec=3600),
                                            timeout=5)) is None
    finally:
        pools.close_pool(job)


def test_a_return_that_is_removed_instead_ends_the_wait(tmp_path):
    job = tmp_path / "job"
    pools.open_pool(job)
    try:
        assert pools.expect(job, "gw")

        async def scenario():
            async def removal():
                await asyncio.sleep(0.05)
                pools.settle(job, "gw")  # recycling failed: removed, not given back

            back = asyncio.ensure_future(removal())
            got = await asyncio.wait_for(pools.take_or_wait(job, "gw", wait_sec=3600), timeout=5)
            await back
            return got

        assert asyncio.run(scenario()) is None
    finally:
        pools.close_pool(job)


def test_a_closed_pool_expects_nothing(tmp_path):
    job = tmp_path / "job"
    assert not pools.expect(job, "gw")
    assert pools.pending(job, "gw") == 0
    pools.open_pool(job)
    assert pools.expect(job, "gw")
    pools.close_pool(job)
    assert pools.pending(job, "gw") == 0
    assert not pools.give(job, "gw", "x", limit=4)
