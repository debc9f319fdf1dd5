"""Budgets at the relay: the crossing call passes, the next is refused in the provider's shape."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from _relayfix import PRICE, call, client, relay_for, with_server

from cairn.agents.base import take_relay_spend
from cairn.relay.ledger import BudgetStop, Limits
from cairn.results.model import Tokens
from wire_models import Bill, Say, WireModels

STOP_SHAPES = {
    "anthropic": lambda j: j["type"] == "error" and j["error"]["type"] == "invalid_request_error",
    "responses": lambda j: j["error"]["code"] == "insufficient_quota",
    "chat": lambda j: j["error"]["code"] == "insufficient_quota",
    "gemini-sse": lambda j: j["error"]["code"] == 400 and j["error"]["status"] == "INVALID_ARGUMENT",
}


@pytest.mark.parametrize("proto", list(STOP_SHAPES))
def test_a_token_limit_stops_the_trial_at_the_crossing_call(proto, tmp_path):
    stops: list[BudgetStop] = []

    async def body(server: WireModels) -> None:
        async with relay_for(server, limits=Limits(trial_tokens=40)) as relay:
            lease = relay.open_trial("t", on_stop=stops.append)
            lease.begin_step("s", tmp_path / "calls.jsonl")
            async with client(relay) as c:
                got = [await call(c, proto, lease.token) for _ in range(4)]
            assert [r.status_code for r in got] == [200, 200, 400, 400]
            assert STOP_SHAPES[proto](got[2].json())
            assert got[2].headers["x-should-retry"] == "false"
            assert "budget exceeded" in got[2].text
            for word in (
                "429",
                "rate limit",
                "overloaded",
                "timeout",
                "try again",
                "exhausted",
            ):  # opencode's retry patterns
                assert word not in got[2].text.lower()
            assert len(server.bills) == 2  # refused calls never reached the upstream
            assert stops == [BudgetStop("trial_tokens", 40, 45, 2)]
            assert lease.stop == stops[0]
            assert [r.error for r in lease.records] == [None, None, "budget_exceeded", "budget_exceeded"]
            # the same request sent again after its refusal is on the record as its retry
            assert [r.retry_of for r in lease.records] == [None, None, None, 3]
            assert lease.totals().usage.input_tokens == 30  # refusals cost nothing

    with_server([Say(bill=Bill(15, 5)), Say(bill=Bill(15, 10))], body)


def test_the_job_cost_limit_closes_every_trial_and_a_trial_limit_only_its_own():
    async def body(server: WireModels) -> None:
        # one call: 100 in * 1e-3 + 50 out * 2e-3 = 0.2 USD
        limits = Limits(job_cost_usd=0.5, trial_cost_usd=0.3)
        async with relay_for(server, limits=limits, prices=PRICE) as relay:
            a, b = relay.open_trial("a"), relay.open_trial("b")
            async with client(relay) as c:
                assert (await call(c, "chat", a.token)).status_code == 200
                assert (await call(c, "chat", a.token)).status_code == 200  # 0.4: crosses 0.3
                assert (await call(c, "chat", a.token)).status_code == 400
                assert a.stop is not None and a.stop.limit == "trial_cost_usd"
                assert (await call(c, "chat", b.token)).status_code == 200  # job 0.6: crosses
                assert relay.ledger.stop is not None
                assert relay.ledger.stop.limit == "job_cost_usd"
                assert relay.ledger.stop.crossing_call == 1
                assert (await call(c, "chat", b.token)).status_code == 400
                late = relay.open_trial("c")
                assert (await call(c, "chat", late.token)).status_code == 400
            assert b.stop is not None and b.stop.limit == "job_cost_usd"
            assert late.stop is not None and late.stop.limit == "job_cost_usd"
            assert relay.ledger.cost_usd == pytest.approx(0.6)
            assert len(server.bills) == 3

    with_server([Say(bill=Bill(100, 50))] * 10, body)


def test_a_refusal_status_can_be_chosen_per_relay():
    """The refusal status is the relay's setting (mini-swe-agent needs a 401: docs/relay.md)."""

    async def body(server: WireModels) -> None:
        async with relay_for(server, limits=Limits(trial_tokens=1), stop_status=403) as relay:
            lease = relay.open_trial("t")
            async with client(relay) as c:
                assert (await call(c, "chat-whole", lease.token)).status_code == 200
                r = await call(c, "chat-whole", lease.token)
            assert r.status_code == 403 and r.json()["error"]["code"] == "insufficient_quota"

    with_server([], body)


def test_a_step_whose_only_calls_were_refused_read_no_cache(tmp_path):
    """Its step tokens are all 0, not a cache count unknown, so the trial's sum keeps the
    cache count the server reported for the earlier step (aider's second step after its
    first crossed the limit)."""
    spend: list[Tokens | None] = []

    async def body(server: WireModels) -> None:
        async with relay_for(server, limits=Limits(trial_tokens=10)) as relay:
            lease = relay.open_trial("t")
            async with client(relay) as c:
                for step, status in (("one", 200), ("two", 400)):
                    lease.begin_step(step, tmp_path / f"{step}.jsonl")
                    assert (await call(c, "chat", lease.token)).status_code == status
                    context = SimpleNamespace(tokens=None, cost_usd=None)
                    take_relay_spend(context, lease.end_step())  # type: ignore[arg-type]
                    spend.append(context.tokens)

    with_server([Say(bill=Bill(15, 5))], body)
    assert spend == [Tokens(prompt=15, completion=5, cached=0), Tokens(prompt=0, completion=0, cached=0)]
