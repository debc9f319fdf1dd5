"""The model relay's endpoint opening in the network policy (docs/network.md, "The model
relay's opening"): one address at one port, nothing else of it; and the relay never listens
on all interfaces."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest

from cairn.netpolicy import NetworkMode, NetworkPolicy, parse_endpoint


def test_an_endpoint_opens_that_address_at_that_port_only():
    p = NetworkPolicy(NetworkMode.NO_NETWORK).with_model_endpoints(["172.17.0.1:41234"])
    assert p.admits("172.17.0.1", 41234)
    assert not p.admits("172.17.0.1", 41235)
    assert not p.admits("172.17.0.1")  # without a port: no host entry admits it
    assert not p.admits("172.17.0.2", 41234)
    assert not p.admits("relay.test", 41234)  # a name never matches an address opening
    assert not p.names_address(__import__("ipaddress").ip_address("172.17.0.1"))
    assert p.needs_gateway  # no-network with an opening goes through the gateway
    assert "relay [172.17.0.1:41234]" in p.describe()


def test_an_endpoint_survives_the_gateways_json_and_reduction():
    p = NetworkPolicy(NetworkMode.ALLOWLIST, ("pypi.org",), ("api.x.test",), ("10.0.0.1:80", "10.0.0.1:80"))
    back = NetworkPolicy.from_json(p.to_json())
    assert back.model_endpoints == p.model_endpoints
    assert back.effective().model_endpoints == ("10.0.0.1:80",)
    assert back.admits("pypi.org") and back.admits("api.x.test") and back.admits("10.0.0.1", 80)
    # the closed policy a record pass switches to keeps nothing of it
    assert not NetworkPolicy(NetworkMode.NO_NETWORK).admits("10.0.0.1", 80)


@pytest.mark.parametrize(
    "text", ["172.17.0.1", "172.17.0.1:0", "172.17.0.1:70000", "relay:80", "::1:80", "http://1.2.3.4:80"]
)
def test_a_bad_endpoint_is_refused(text):
    with pytest.raises(ValueError):
        parse_endpoint(text)
    with pytest.raises(ValueError):
        NetworkPolicy(NetworkMode.NO_NETWORK, (), (), (text,))


def test_an_ipv6_endpoint_is_bracketed():
    addr, port = parse_endpoint("[fd00::1]:8080")
    assert (str(addr), port) == ("fd00::1", 8080)
    assert NetworkPolicy(NetworkMode.NO_NETWORK, (), (), ("[fd00::1]:8080",)).admits("fd00::1", 8080)


@pytest.mark.skipif(importlib.util.find_spec("aiohttp") is None, reason="needs the relay extra")
def test_the_relay_never_listens_on_all_interfaces_and_listens_once_per_address():
    from cairn.relay.server import ModelRelay, RelayConfig, Upstream

    async def body() -> None:
        async with ModelRelay(RelayConfig(upstreams={"*": Upstream("http://127.0.0.1:9", None)})) as relay:
            for everywhere in ("0.0.0.0", "::"):
                with pytest.raises(ValueError):
                    await relay.listen(everywhere)
            assert await relay.listen("127.0.0.1") == relay.port  # its own address
            port = await relay.listen("127.0.0.2")
            assert await relay.listen("127.0.0.2") == port

    asyncio.run(asyncio.wait_for(body(), 60))
