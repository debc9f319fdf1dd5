"""Network policy values (cairn.netpolicy): allowlist entries and what they admit."""

from __future__ import annotations

import ipaddress

import pytest

from cairn.netpolicy import (
    AllowEntry,
    EntryKind,
    NetworkMode,
    NetworkPolicy,
    canonical_host,
    host_of_url,
    special_address,
)


@pytest.mark.parametrize(
    "text, kind",
    [
        ("example.com", EntryKind.HOST),
        ("Example.COM.", EntryKind.HOST),
        ("*.example.com", EntryKind.WILDCARD),
        ("10.1.2.3", EntryKind.ADDRESS),
        ("2001:db8::1", EntryKind.ADDRESS),
        ("[2001:db8::1]", EntryKind.ADDRESS),
        ("10.0.0.0/8", EntryKind.NETWORK),
        ("2001:db8::/32", EntryKind.NETWORK),
        ("localhost", EntryKind.HOST),
        ("my_host-1.internal", EntryKind.HOST),
    ],
)
def test_entries_parse(text, kind):
    assert AllowEntry.parse(text).kind is kind


@pytest.mark.parametrize(
    "text, why",
    [
        ("", "empty"),
        ("http://example.com", "scheme"),
        ("example.com/path", "CIDR"),
        ("example.com:443", "ports"),
        ("*", "wildcard"),
        ("*.", "wildcard"),
        ("a.*.com", "wildcard"),
        ("*example.com", "wildcard"),
        ("10.0.0.0/33", "CIDR"),
        ("a..b", "valid host"),
        ("-a.com", "valid host"),
        ("1.2.3.999", "valid host"),
        ("user@host", "scheme"),
        ("two words", "scheme"),
    ],
)
def test_bad_entries_are_refused_with_a_reason(text, why):
    with pytest.raises(ValueError, match=why):
        AllowEntry.parse(text)


def test_wildcard_admits_names_below_only():
    p = NetworkPolicy(NetworkMode.ALLOWLIST, ("*.allowed.test",))
    assert p.admits("a.allowed.test") and p.admits("x.y.allowed.test")
    assert p.admits("A.Allowed.Test.")
    assert not p.admits("allowed.test")
    assert not p.admits("allowed.test.evil")
    assert not p.admits("evilallowed.test")


def test_cidr_admits_addresses_inside_only_and_never_names():
    p = NetworkPolicy(NetworkMode.ALLOWLIST, ("10.20.0.0/16", "2001:db8::/64", "192.0.2.7"))
    assert p.admits("10.20.255.1") and not p.admits("10.21.0.1")
    assert p.admits("2001:db8::5") and p.admits("[2001:db8::5]")
    assert not p.admits("2001:db9::5")
    assert p.admits("192.0.2.7") and not p.admits("192.0.2.8")
    assert not p.admits("10.20.0.1.nip.io")  # a name is never matched by an address entry
    host = NetworkPolicy(NetworkMode.ALLOWLIST, ("example.com",))
    assert not host.admits("93.184.216.34")  # nor an address by a name entry


def test_modes_and_model_hosts():
    assert NetworkPolicy(NetworkMode.PUBLIC).admits("anything.example")
    sealed = NetworkPolicy(NetworkMode.NO_NETWORK)
    assert not sealed.admits("localhost") and not sealed.needs_gateway
    agent = sealed.with_model_hosts(["api.model.test"])
    assert agent.needs_gateway and agent.admits("api.model.test")
    assert not agent.admits("other.test")
    # no-network ignores an allowlist it may carry; public ignores its lists entirely
    assert NetworkPolicy(NetworkMode.NO_NETWORK, ("x.test",)).effective() == sealed
    assert NetworkPolicy(NetworkMode.PUBLIC, ("x",), ("y",)).effective() == NetworkPolicy(NetworkMode.PUBLIC)
    assert NetworkPolicy.from_json(agent.to_json()) == agent


def test_host_of_url():
    assert host_of_url("https://api.openai.com/v1") == "api.openai.com"
    assert host_of_url("http://[::1]:8080/x") == "::1"
    assert host_of_url("localhost:4000") == "localhost"
    assert host_of_url("") is None


@pytest.mark.parametrize(
    "text, want",
    [
        ("Up.Test.", "up.test"),
        ("a.wild.test", "a.wild.test"),
        ("10.1.2.3", "10.1.2.3"),
        ("[2001:DB8::1]", "2001:db8::1"),
        ("2001:db8:0::1", "2001:db8::1"),
        ("[::ffff:10.1.2.3]", "::ffff:a01:203"),
        # one canonical form: the rest is no host (issue 34, L1)
        ("172.17.0.3\x00.wild.test", None),
        ("a .test", None),
        ("a\t.test", None),
        ("a\r\n.test", None),
        ("\u00e9.test", None),
        ("[fe80::1%eth0]", None),
        ("010.1.2.3", None),
        ("10.1.2", None),
        ("a..test", None),
        ("-a.test", None),
        ("", None),
        ("x" * 256, None),
        ("[10.1.2.3]", None),
        ("1.2.3.4.5", None),
    ],
)
def test_canonical_host(text, want):
    assert canonical_host(text) == want


def test_special_addresses_and_explicit_entries():
    for text in (
        "127.0.0.1",
        "::1",
        "169.254.169.254",
        "fe80::1",
        "0.0.0.0",
        "0.1.2.3",
        "224.0.0.1",
        "255.255.255.255",
        "::ffff:127.0.0.1",
        "::",
    ):
        assert special_address(ipaddress.ip_address(text)) is not None, text
    for text in ("10.1.2.3", "172.17.0.1", "8.8.8.8", "2001:db8::1"):
        assert special_address(ipaddress.ip_address(text)) is None, text
    policy = NetworkPolicy(NetworkMode.ALLOWLIST, ("localhost", "169.254.0.0/16", "127.0.0.1"))
    assert policy.names_address(ipaddress.ip_address("127.0.0.1"))
    assert policy.names_address(ipaddress.ip_address("169.254.169.254"))
    assert not policy.names_address(ipaddress.ip_address("127.0.0.2"))
    assert not NetworkPolicy(NetworkMode.ALLOWLIST, ("localhost",)).names_address(
        ipaddress.ip_address("127.0.0.1")
    )
