"""Two jobs of one process against two real engines: the second job's facts (API version,
version, the engine's own addresses) are the second engine's (issues #28 and #29).

The machine's shared engine is the first; the second is a ``dockerd`` of the test's own
(tests/helpers/owndockerd.py, its own address pool ``10.213.0.0/16``) with a network of its
own, as an engine replaced between two jobs. A process-wide memo keyed by the SDK's ``base_url`` (``http+docker://localhost``
for every Unix socket) handed the second job the first engine's addresses.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess

import pytest

import owndockerd
from cairn.sandbox.caches import SandboxCaches
from cairn.sandbox.docker.client import engine_version, make_client
from cairn.sandbox.docker.gateway import engine_addresses
from testbed import need_backend

pytestmark = [pytest.mark.faults, pytest.mark.docker]


def _bridge_gateway() -> str:
    argv = ["docker", "network", "inspect", "bridge"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout
    cfg = json.loads(out)[0]["IPAM"]["Config"][0]
    # the engine leaves Gateway out at times (restarted onto an existing docker0): its
    # default IPAM's gateway is then the subnet's first host, as cairn reads it too
    return cfg.get("Gateway") or str(ipaddress.ip_network(cfg["Subnet"]).network_address + 1)


def _facts(caches: SandboxCaches) -> tuple[str | None, list[str]]:
    client = make_client(caches, timeout=30)
    try:
        return engine_version(client, caches), engine_addresses(client, caches)
    finally:
        client.close()


def test_the_next_job_learns_the_engine_that_replaced_the_first(monkeypatch: pytest.MonkeyPatch) -> None:
    need_backend("docker")
    why = owndockerd.available()
    if why:
        pytest.skip(why)
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    shared_gw = _bridge_gateway()
    job_a = SandboxCaches()
    version_a, addresses_a = _facts(job_a)
    assert version_a and shared_gw in addresses_a
    own = owndockerd.OwnDockerd(owndockerd.make_root())
    try:
        own.start()
        own_gw = "10.213.77.1"  # a network of the own engine, with a gateway it names
        subprocess.run(
            ["docker", "-H", own.host, "network", "create", "--subnet", "10.213.77.0/24"]
            + ["--gateway", own_gw, "cairn-facts"],
            capture_output=True,
            timeout=60,
            check=True,
        )
        assert own_gw not in addresses_a
        monkeypatch.setenv("DOCKER_HOST", own.host)  # the process's next job meets another engine
        job_b = SandboxCaches()
        version_b, addresses_b = _facts(job_b)
        assert version_b
        assert own_gw in addresses_b
        # the first job, pointed at the other engine, asks it too (facts are per DOCKER_HOST)
        assert own_gw in _facts(job_a)[1]
    finally:
        own.close()
