"""The engine host's own addresses (docs/network.md): a network's gateway is read from its IPAM
config, and where the engine leaves ``Gateway`` out (the default bridge after the engine
restarted onto an existing ``docker0``), it is the subnet's first host, as Docker's default
IPAM assigns it."""

from __future__ import annotations

from types import SimpleNamespace

from cairn.sandbox.caches import SandboxCaches
from cairn.sandbox.docker.gateway import _first_host, engine_addresses


def test_the_first_host_of_a_subnet_is_the_default_gateway():
    assert _first_host("172.17.0.0/16") == "172.17.0.1"
    assert _first_host("10.213.77.0/24") == "10.213.77.1"
    assert _first_host("fd00:1::/64") == "fd00:1::1"
    assert _first_host("10.0.0.0/31") == "" and _first_host(None) == "" and _first_host("x") == ""


def test_a_network_without_a_gateway_entry_still_names_its_gateway():
    networks = [
        {"IPAM": {"Config": [{"Subnet": "172.17.0.0/16"}]}},  # as this engine reported docker0
        {"IPAM": {"Config": [{"Subnet": "10.9.0.0/24", "Gateway": "10.9.0.254"}]}},
        {"IPAM": {"Config": None}},
    ]
    # a remote engine (tcp://): only what its networks say, none of this machine's addresses
    client = SimpleNamespace(api=SimpleNamespace(networks=lambda: networks, base_url="https://remote:2376"))
    assert engine_addresses(client, SandboxCaches()) == ["10.9.0.254", "172.17.0.1"]
