"""Ctrl-C while a trial's sandbox is starting (design §8: "sandboxes removed").

A job cancelled by Ctrl-C cancels each running trial, and the trial engine then calls the
sandbox's ``stop()``. If the cancellation lands while the docker backend is creating the
container (the SDK call runs on a worker thread), the container must still be removed.
"""

from __future__ import annotations

import asyncio
import threading
import uuid

import pytest

pytestmark = [pytest.mark.docker]


@pytest.fixture(autouse=True)
def _docker():
    from testbed import backend_available

    if not backend_available("docker"):
        pytest.skip("no Docker engine")


def test_cancel_during_container_create_leaves_no_container(monkeypatch):
    import docker
    from docker.api.client import APIClient

    from cairn.sandbox.base import NetworkMode, SandboxSpec
    from cairn.sandbox.docker.backend import DockerSandbox

    creating = threading.Event()
    created = threading.Event()
    real_create = APIClient.create_container

    def create_and_signal(self, *args, **kwargs):
        creating.set()  # the cancellation below arrives while the engine creates it
        try:
            return real_create(self, *args, **kwargs)
        finally:
            created.set()

    monkeypatch.setattr(APIClient, "create_container", create_and_signal)
    tid = uuid.uuid4().hex[:12]
    spec = SandboxSpec(
        docker_image="debian:bookworm-slim",
        network_mode=NetworkMode.NO_NETWORK,
        job_id="cancel-test",
        trial_id=tid,
        name="cancel-test",
    )

    async def scenario() -> None:
        sb = DockerSandbox(spec)
        start = asyncio.create_task(sb.start())
        while not creating.is_set():
            await asyncio.sleep(0.001)
        start.cancel()
        with pytest.raises(asyncio.CancelledError):
            await start
        await sb.stop()  # what the trial engine does after a cancellation
        # the worker thread's create, which the cancel could not stop, has returned
        assert await asyncio.to_thread(created.wait, 60)

    asyncio.run(scenario())
    client = docker.from_env()
    try:
        left = client.api.containers(all=True, filters={"label": f"cairn.trial={tid}"})
        for c in left:
            client.api.remove_container(c["Id"], force=True)
    finally:
        client.close()
    assert left == []
