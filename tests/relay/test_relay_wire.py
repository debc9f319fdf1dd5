"""The relay on the wire: exact usage, streaming passthrough, tokens, keys, records."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx
import pytest
from _relayfix import PRICE, PROTOCOLS, UPSTREAM_KEY, call, client, relay_for, request_of, with_server

from wire_models import Bill, Say, WireModels

BILLS = [
    Bill(120, 30, cache_read=40, cache_write=8, reasoning=0),
    Bill(200, 55, cache_read=100, cache_write=0, reasoning=0),
    Bill(77, 13, cache_read=0, cache_write=0, reasoning=0),
]


def _reasoning(proto: str, bill: Bill) -> Bill:
    # Anthropic reports no reasoning split; the others do
    if proto.startswith("anthropic"):
        return Bill(bill.input, bill.output, bill.cache_read, bill.cache_write, 0)
    return Bill(
        bill.input,
        bill.output,
        bill.cache_read,
        bill.cache_write if proto.startswith("anthropic") else 0,
        bill.output // 3,
    )


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_trial_usage_equals_the_servers_bill(proto, tmp_path):
    bills = [_reasoning(proto, b) for b in BILLS]
    if not proto.startswith("anthropic"):
        bills = [Bill(b.input, b.output, b.cache_read, 0, b.reasoning) for b in bills]
    script = [Say(f"answer {i}", b) for i, b in enumerate(bills)]

    async def body(server: WireModels) -> None:
        async with relay_for(server, prices=PRICE) as relay:
            lease = relay.open_trial("t1")
            lease.begin_step("step-1", tmp_path / "s1.jsonl")
            async with client(relay) as c:
                r = await call(c, proto, lease.token)
                assert r.status_code == 200, r.text
                # a side call that is billed (a title request) and one that is not
                r = await call(c, proto, lease.token, "title please")
                assert r.status_code == 200
                count = (
                    "/v1/messages/count_tokens"
                    if proto.startswith("anthropic")
                    else "/v1beta/models/m:countTokens"
                )
                if proto.startswith(("anthropic", "gemini")):
                    r = await c.post(
                        count, headers=request_of(proto, lease.token)[1], json={"model": "m", "messages": []}
                    )
                    assert r.status_code == 200
            step1 = lease.end_step()
            lease.begin_step("step-2", tmp_path / "s2.jsonl")
            async with client(relay) as c:
                assert (await call(c, proto, lease.token, "step two")).status_code == 200
            step2 = lease.end_step()
            billed = server.billed()
            total = lease.totals().usage
            assert (total.input_tokens, total.output_tokens, total.cache_read_tokens) == (
                billed.input,
                billed.output,
                billed.cache_read,
            )
            if proto.startswith("anthropic"):
                assert total.cache_write_tokens == billed.cache_write
            else:
                assert total.reasoning_tokens == billed.reasoning
            assert step1.usage.input_tokens == bills[0].input + bills[1].input
            assert step2.usage.output_tokens == bills[2].output
            price = PRICE["m"]
            want = sum(
                (b.input - b.cache_read - b.cache_write) * price.input
                + b.cache_read * price.cache_read
                + b.cache_write * price.cache_write
                + b.output * price.output
                for b in bills
            )
            assert lease.totals().cost_usd == pytest.approx(want)
            lines = [json.loads(x) for x in (tmp_path / "s1.jsonl").read_text().splitlines()]
            kinds = [x["kind"] for x in lines]
            assert kinds.count("generate") == 2
            assert all(x["step"] == "step-1" and x["trial"] == "t1" for x in lines)
            gen = lines[0]
            assert gen["status"] == 200 and gen["model"] == "m" and gen["complete"] is True
            assert gen["usage"]["input_tokens"] == bills[0].input
            assert gen["ttfb_sec"] is not None and gen["latency_sec"] >= gen["ttfb_sec"]
            assert "request_body" not in gen

    with_server(script, body)


def test_chat_stream_reaches_the_client_as_the_server_sent_it():
    """include_usage is added upstream and its chunk removed: the client's bytes are unchanged."""

    async def body(server: WireModels) -> None:
        path, headers, req = request_of("chat", "x")
        async with httpx.AsyncClient(base_url=server.base_url) as direct:
            want = (await direct.post(path, json=req)).content
        assert b'"usage"' not in want
        async with relay_for(server) as relay:
            lease = relay.open_trial("t")
            async with client(relay) as c:
                got = (await call(c, "chat", lease.token)).content
            assert got == want
            assert server.requests[-1].body["stream_options"] == {"include_usage": True}
            assert lease.totals().usage.input_tokens == 10
            # a client that asked for usage keeps its chunk
            async with client(relay) as c:
                r = await c.post(
                    path,
                    headers={"Authorization": f"Bearer {lease.token}"},
                    json={**req, "stream_options": {"include_usage": True}},
                )
            assert b'"usage"' in r.content and b"[DONE]" in r.content

    with_server([], body)


@pytest.mark.parametrize("proto", ["anthropic", "responses", "chat", "gemini-sse"])
def test_sse_first_event_reaches_the_client_before_the_upstream_ends(proto):
    async def body(server: WireModels) -> None:
        async with relay_for(server) as relay:
            lease = relay.open_trial("t")
            path, headers, req = request_of(proto, lease.token)
            async with client(relay) as c, c.stream("POST", path, headers=headers, json=req) as r:
                it = r.aiter_raw()
                first = await asyncio.wait_for(it.__anext__(), 10)
                assert first.startswith((b"event:", b"data:"))
                assert not server.finished.is_set()  # upstream still holding its stream
                server.gate.set()
                rest = b"".join([x async for x in it])
            # the server thread sets `finished` after its last write, which the relay may pass on
            # before that thread runs again: wait for it rather than read it at once (CI, stop 35)
            assert await asyncio.to_thread(server.finished.wait, 10)
            assert rest
            assert lease.records[-1].complete

    with_server([Say("abc", gated=True)], body)


def test_a_trials_token_is_dead_once_the_trial_ends():
    async def body(server: WireModels) -> None:
        async with relay_for(server) as relay:
            lease = relay.open_trial("t")
            other = relay.open_trial("u")
            async with client(relay) as c:
                assert (await call(c, "chat-whole", lease.token)).status_code == 200
                relay.revoke(lease)
                seen = len(server.requests)
                for proto in ("anthropic", "chat", "gemini"):
                    r = await call(c, proto, lease.token)
                    assert r.status_code == 401
                    err = r.json()["error"]
                    if proto == "anthropic":
                        assert r.json()["type"] == "error"
                        assert err["type"] == "authentication_error"
                    elif proto == "gemini":
                        assert err["status"] == "UNAUTHENTICATED"
                    else:
                        assert err["code"] == "invalid_api_key"
                assert len(server.requests) == seen  # nothing reached the upstream
                assert (await call(c, "chat-whole", other.token)).status_code == 200
                # no token, a made-up one, two different ones: refused too
                path, _, req = request_of("chat-whole", "")
                assert (await c.post(path, json=req)).status_code == 401
                assert (
                    await c.post(path, json=req, headers={"Authorization": "Bearer cairn-guess"})
                ).status_code == 401
                assert (
                    await c.post(
                        path,
                        json=req,
                        headers={"Authorization": f"Bearer {other.token}", "x-api-key": "something-else"},
                    )
                ).status_code == 401

    with_server([], body)


def test_the_provider_key_goes_upstream_only(tmp_path):
    async def body(server: WireModels) -> None:
        async with relay_for(server, record_bodies=True) as relay:
            lease = relay.open_trial("t")
            lease.begin_step("s", tmp_path / "calls.jsonl")
            async with client(relay) as c:
                for proto in ("anthropic", "chat", "gemini"):
                    r = await call(c, proto, lease.token, f"my key is {UPSTREAM_KEY}")
                    assert r.status_code == 200
                    assert UPSTREAM_KEY not in r.text
                    assert all(UPSTREAM_KEY not in v for v in r.headers.values())
                # the upstream quotes the key back in an error: the client never sees it
                r = await call(c, "chat-whole", lease.token)
                assert r.status_code == 401 and "Incorrect API key" in r.text
                assert UPSTREAM_KEY not in r.text
            lease.end_step()
        seen = server.requests
        assert seen[0].headers["x-api-key"] == UPSTREAM_KEY
        assert seen[0].headers["anthropic-beta"] == "x-test"  # open lists forwarded
        assert seen[0].path == "/v1/messages?beta=true"
        assert seen[1].headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
        assert seen[2].headers["x-goog-api-key"] == UPSTREAM_KEY
        for s in seen:
            assert all(lease.token not in v for v in s.headers.values())
        text = (tmp_path / "calls.jsonl").read_text()
        assert UPSTREAM_KEY not in text and "my key is ***" in text

    with_server([Say(), Say(), Say(), Say(error_status=401)], body)


def test_a_repeated_failed_call_is_recorded_as_its_retry(tmp_path):
    async def body(server: WireModels) -> None:
        async with relay_for(server) as relay:
            lease = relay.open_trial("t")
            async with client(relay) as c:
                r1 = await call(c, "chat-whole", lease.token)
                r2 = await call(c, "chat-whole", lease.token)
                r3 = await call(c, "chat-whole", lease.token)
            assert (r1.status_code, r2.status_code, r3.status_code) == (503, 200, 200)
            assert [x.retry_of for x in lease.records] == [None, 1, None]
            assert lease.totals().usage.input_tokens == 20  # the 503 billed nothing

    with_server([Say(error_status=503)], body)


def test_routes_other_than_models_are_refused():
    async def body(server: WireModels) -> None:
        async with relay_for(server) as relay:
            lease = relay.open_trial("t")
            async with client(relay) as c:
                r = await c.post("/v1/files", headers={"Authorization": f"Bearer {lease.token}"}, json={})
                assert r.status_code == 404
                r = await c.get("/v1/models", headers={"Authorization": f"Bearer {lease.token}"})
                assert r.status_code == 200
                assert (await c.head("/api/hello")).status_code == 200
        assert [s.path for s in server.requests] == ["/v1/models"]

    with_server([], body)


def test_concurrent_calls_of_one_trial_are_all_accounted():
    async def body(server: WireModels) -> None:
        async with relay_for(server) as relay:
            lease = relay.open_trial("t")
            async with client(relay) as c:
                got = await asyncio.gather(
                    *(call(c, p, lease.token) for p in ["chat", "anthropic", "gemini-sse"] * 5)
                )
            assert all(r.status_code == 200 for r in got)
            assert lease.totals().usage.input_tokens == server.billed().input == 150
            assert len({r.seq for r in lease.records}) == 15

    with_server([], body)


def test_a_client_leaving_mid_stream_is_recorded_as_aborted():
    async def body(server: WireModels) -> None:
        async with relay_for(server) as relay:
            lease = relay.open_trial("t")
            path, headers, req = request_of("anthropic", lease.token)
            async with client(relay) as c, c.stream("POST", path, headers=headers, json=req) as r:
                await r.aiter_raw().__anext__()
            threading.Timer(0.2, server.gate.set).start()
            deadline = time.monotonic() + 10
            while lease.records[-1].latency_sec is None and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            rec = lease.records[-1]
            assert rec.complete is False and rec.error in ("aborted", "incomplete_stream")
            assert rec.usage.input_tokens == 10  # Anthropic gives the input side early
            assert lease.totals().incomplete_calls == 1

    with_server([Say("abc", gated=True)], body)


def test_an_unreachable_upstream_is_a_502_in_the_dialects_shape(tmp_path):
    import socket

    from cairn.relay.server import ModelRelay, RelayConfig, Upstream

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def body() -> None:
        cfg = RelayConfig(upstreams={"*": Upstream(f"http://127.0.0.1:{port}", "k" * 8)})
        async with ModelRelay(cfg) as relay:
            lease = relay.open_trial("t")
            lease.begin_step("s", tmp_path / "missing-dir" / "calls.jsonl")
            async with client(relay) as c:
                r = await call(c, "anthropic", lease.token)
            assert r.status_code == 502 and r.json()["type"] == "error"
            # the cause in the words the llm agent's unreachable check knows (a fast job error)
            assert "connection refused" in r.json()["error"]["message"]
            rec = lease.records[0]
            assert rec.error == "upstream_unreachable" and rec.usage.input_tokens is None
            assert lease.totals().usage.input_tokens is None  # unknown, not 0
            assert lease.write_errors and "missing-dir" in lease.write_errors[0]

    asyncio.run(asyncio.wait_for(body(), 60))


@pytest.mark.parametrize("proto", ["anthropic-whole", "chat-whole", "gemini"])
def test_a_compressed_upstream_answer_is_decoded_once(proto):
    async def body(server: WireModels) -> None:
        async with relay_for(server) as relay:
            lease = relay.open_trial("t")
            async with client(relay) as c:
                r = await call(c, proto, lease.token)
            assert r.status_code == 200
            assert "content-encoding" not in r.headers
            assert int(r.headers["content-length"]) == len(r.content)
            assert r.json()  # plain JSON
            assert lease.totals().usage.input_tokens == 33

    with_server([Say(bill=Bill(33, 4), gzip=True)], body)


@pytest.mark.parametrize(
    ("proto", "error"),
    [
        ("anthropic", "provider: "),
        ("responses", "provider: "),
        ("chat", "incomplete_stream"),
        ("gemini-sse", "incomplete_stream"),
    ],
)
def test_a_stream_that_fails_is_recorded_incomplete_and_retried_calls_are_linked(proto, error):
    async def body(server: WireModels) -> None:
        async with relay_for(server) as relay:
            lease = relay.open_trial("t")
            async with client(relay) as c:
                first = await call(c, proto, lease.token)
                second = await call(c, proto, lease.token)
            assert first.status_code == 200 and second.status_code == 200
            bad, good = lease.records
            assert bad.complete is False and bad.error.startswith(error)
            assert good.complete and good.error is None and good.retry_of == 1
            assert lease.totals().incomplete_calls == 1
            if proto == "anthropic":  # the input side arrived before the error
                assert bad.usage.input_tokens == 10 and bad.usage.output_tokens is None

    with_server([Say(fail_mid_stream=True)], body)


def test_the_relay_resolves_the_jobs_add_hosts_for_its_upstream():
    """``--add-host model.test=ADDR`` with ``base_url=http://model.test:PORT``: the relay on the
    host connects where the sandbox's gateway would have (model.test is in no DNS), the Host
    header keeps the name; a name outside the map still goes to the system resolver."""
    from cairn.relay.server import ModelRelay, RelayConfig, Upstream

    async def body(server: WireModels) -> None:
        port = server.base_url.rsplit(":", 1)[1]
        up = Upstream(f"http://model.test:{port}", UPSTREAM_KEY)
        cfg = RelayConfig(upstreams={"*": up}, add_hosts={"Model.Test": "127.0.0.1"})
        async with ModelRelay(cfg) as relay, client(relay) as c:
            lease = relay.open_trial("t")
            r = await call(c, "chat-whole", lease.token)
            assert r.status_code == 200, r.text
            assert server.requests[-1].headers["host"] == f"model.test:{port}"
            assert lease.totals().usage.input_tokens == 10
        bad = RelayConfig(upstreams={"*": Upstream(f"http://not-mapped.invalid:{port}", UPSTREAM_KEY)})
        async with ModelRelay(bad) as relay, client(relay) as c:
            lease = relay.open_trial("t")
            r = await call(c, "chat-whole", lease.token)
            assert r.status_code == 502 and "not-mapped.invalid" in r.text

    with_server([], body)
