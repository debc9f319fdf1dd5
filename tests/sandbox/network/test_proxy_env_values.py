"""The proxy variables a sandbox behind the gateway gets (issue 29), as the host-side Python
clients read them: httpx (under the OpenAI SDK and LiteLLM) builds its client and sends local
spellings direct, urllib's bypass says the same. No Docker: the values alone."""

from __future__ import annotations

import urllib.request

import pytest

from cairn.sandbox.docker.gateway import proxy_env

LOCAL = ("localhost", "127.0.0.1", "::1", "0.0.0.0", "box-1234")


@pytest.fixture
def env(monkeypatch):
    for key in list(__import__("os").environ):
        if key.lower().endswith("_proxy"):
            monkeypatch.delenv(key)
    values = proxy_env(("box-1234",))
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return values


def test_the_values(env):
    assert env["NODE_USE_ENV_PROXY"] == "1"
    assert env["HTTP_PROXY"] == env["http_proxy"] == "http://cairn-gateway:3128"
    assert env["NO_PROXY"] == env["no_proxy"]
    assert set(env["no_proxy"].split(",")) == set(LOCAL)


def test_httpx_takes_them(env):
    httpx = pytest.importorskip("httpx")
    with httpx.Client() as client:  # a bracketed NO_PROXY entry made this raise

        def proxied(url: str) -> bool:
            transport = client._transport_for_url(httpx.URL(url))
            return transport is not client._transport

        assert proxied("http://model.test:8000/v1")
        for host in ("localhost", "127.0.0.1", "[::1]", "0.0.0.0", "box-1234"):
            assert not proxied(f"http://{host}:8000/"), host


def test_urllib_bypasses_every_local_spelling(env):
    for host in LOCAL:
        assert urllib.request.proxy_bypass_environment(host), host
    assert not urllib.request.proxy_bypass_environment("model.test")
