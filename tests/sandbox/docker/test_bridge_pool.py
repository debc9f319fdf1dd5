"""A job's ``public`` trials reuse bridge networks (#31, cairn.sandbox.docker.netpool): the next
trial of the job gets the network of one whose container is gone, concurrent trials never share
one (they still cannot reach each other), a network that still holds a container is removed
instead, and the job's settle step leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from cairn.netpolicy import NetworkMode
from cairn.sandbox.base import SandboxSpec
from cairn.sandbox.pools import ResourcePool

docker = pytest.importorskip("docker")
from cairn.sandbox.cleanup import settle_job  # noqa: E402
from cairn.sandbox.docker.backend import DockerSandbox  # noqa: E402
from cairn.sandbox.docker.netpool import BRIDGE_POOL_KIND  # noqa: E402

pytestmark = pytest.mark.docker

DOCKERFILE = "FROM debian:bookworm-slim\n"


def _spec(env: Path, job: str, job_dir: Path, pool: ResourcePool) -> SandboxSpec:
    return SandboxSpec(
        env_dir=env,
        job_id=job,
        trial_id=uuid.uuid4().hex[:12],
        job_dir=job_dir,
        name="bridgepool",
        pool=pool,
        network_mode=NetworkMode.PUBLIC,
    )


def _job(tmp_path: Path) -> tuple[Path, str, Path]:
    env = tmp_path / "env"
    env.mkdir()
    (env / "Dockerfile").write_text(DOCKERFILE)
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    return env, f"bpool-{uuid.uuid4().hex[:6]}", job_dir


def _job_networks(job: str) -> list[str]:
    api = docker.from_env().api
    return sorted(n["Id"] for n in api.networks(filters={"label": f"cairn.job={job}"}))


def _attached(net_id: str) -> dict:
    return docker.from_env().api.inspect_network(net_id).get("Containers") or {}


def test_the_next_trial_gets_the_network_of_one_whose_container_is_gone(tmp_path):
    env, job, job_dir = _job(tmp_path)
    pool: ResourcePool = ResourcePool()

    async def go() -> tuple[str, str, dict]:
        a = DockerSandbox(_spec(env, job, job_dir, pool))
        await a.start()
        assert a._net is not None and a._net.public is not None
        first = a._net.public.ident
        await a.stop()
        left = _attached(first)  # the pool holds it: nothing attached
        b = DockerSandbox(_spec(env, job, job_dir, pool))
        await b.start()
        try:
            assert b._net is not None and b._net.public is not None
            second = b._net.public.ident
            assert (await b.exec(["true"])).ok
        finally:
            await b.stop()
        return first, second, left

    try:
        first, second, left = asyncio.run(go())
        assert first == second
        assert left == {}
        assert _job_networks(job) == [first]  # one network for both trials, idle in the pool
    finally:
        pool.close()
        settle_job(job_dir, "docker")
    assert _job_networks(job) == []


def test_concurrent_trials_never_share_a_network_and_cannot_reach_each_other(tmp_path):
    env, job, job_dir = _job(tmp_path)
    pool: ResourcePool = ResourcePool()

    async def go() -> tuple[str, str, bool]:
        a = DockerSandbox(_spec(env, job, job_dir, pool))
        b = DockerSandbox(_spec(env, job, job_dir, pool))
        await asyncio.gather(a.start(), b.start())
        try:
            assert a._net is not None and a._net.public is not None
            assert b._net is not None and b._net.public is not None
            api = docker.from_env().api
            ip_b = api.inspect_container(b._cid)["NetworkSettings"]["Networks"][b._net.public.name][
                "IPAddress"
            ]
            # bash's /dev/tcp: a connection attempt to b (refused or timed out, never routed)
            probe = await a.exec(["bash", "-c", f"timeout 3 bash -c '</dev/tcp/{ip_b}/22' 2>&1; echo rc=$?"])
            routed = "Connection refused" in probe.stdout
            return a._net.public.ident, b._net.public.ident, routed
        finally:
            await asyncio.gather(a.stop(), b.stop())

    try:
        net_a, net_b, routed = asyncio.run(go())
        assert net_a != net_b
        assert not routed  # no route from a's network to b's (a refusal would mean b answered)
        assert sorted(_job_networks(job)) == sorted([net_a, net_b])
    finally:
        pool.close()
        settle_job(job_dir, "docker")
    assert _job_networks(job) == []


def test_a_network_that_still_holds_a_container_is_removed_not_reused(tmp_path):
    env, job, job_dir = _job(tmp_path)
    pool: ResourcePool = ResourcePool()
    client = docker.from_env()
    stray = None

    async def go() -> str:
        nonlocal stray
        a = DockerSandbox(_spec(env, job, job_dir, pool))
        await a.start()
        assert a._net is not None and a._net.public is not None
        net = a._net.public
        # a container the trial did not make, on its network (what recycling must refuse)
        stray = client.containers.run(
            "debian:bookworm-slim",
            ["sleep", "300"],
            detach=True,
            network=net.name,
            labels={"cairn.test": "bridgepool"},
            name=f"bridgepool-stray-{uuid.uuid4().hex[:6]}",
        )
        await a.stop()
        return net.ident

    try:
        ident = asyncio.run(go())
        assert pool.take(BRIDGE_POOL_KIND) is None
        assert stray is not None and ident in {
            n["NetworkID"]
            for n in client.api.inspect_container(stray.id)["NetworkSettings"]["Networks"].values()
        }  # the removal failed while the stray held it: not pooled, left for settle/clean
    finally:
        if stray is not None:
            stray.remove(force=True)
        pool.close()
        settle_job(job_dir, "docker")
    assert _job_networks(job) == []


def test_the_last_trials_remove_their_networks_themselves(tmp_path):
    """#31: a job's pool knows how many sandbox starts are left (``takers``). Once none is, a
    trial's network is removed with its container, beside the trials still running, instead of
    waiting idle for the job's settle step."""
    env, job, job_dir = _job(tmp_path)
    pool: ResourcePool = ResourcePool(takers=2)

    async def go() -> tuple[str, str, list[str], list[str]]:
        a = DockerSandbox(_spec(env, job, job_dir, pool))
        await a.start()
        assert a._net is not None and a._net.public is not None
        first = a._net.public.ident
        await a.stop()
        kept = _job_networks(job)  # one start is left: the pool keeps the network for it
        b = DockerSandbox(_spec(env, job, job_dir, pool))
        await b.start()
        assert pool.takers == 0 and b._net is not None and b._net.public is not None
        second = b._net.public.ident
        await b.stop()
        return first, second, kept, _job_networks(job)

    try:
        first, second, kept, after = asyncio.run(go())
        assert kept == [first] and second == first  # reused while a start was left
        assert after == []  # the last start's network went with its container
    finally:
        pool.close()
        settle_job(job_dir, "docker")
    assert _job_networks(job) == []
