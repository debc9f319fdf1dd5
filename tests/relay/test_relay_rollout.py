"""Rollouts: token ids and logprobs asked for upstream, recorded, and kept from the client."""

from __future__ import annotations

import json

from _relayfix import call, client, relay_for, with_server

from wire_models import PROMPT_IDS, WireModels, _ids


def test_rollout_records_prompt_and_completion_ids_and_logprobs(tmp_path):
    async def body(server: WireModels) -> None:
        async with relay_for(server, rollout=True) as relay:
            lease = relay.open_trial("t")
            lease.begin_step("s", tmp_path / "calls.jsonl")
            async with client(relay) as c:
                whole = await call(c, "chat-whole", lease.token, "x")
                streamed = await call(c, "chat", lease.token, "x")
            lease.end_step()
            sent = [r.body for r in server.requests]
            assert all(b["return_token_ids"] is True and b["logprobs"] is True for b in sent)
            # the client asked for neither: its answer holds neither
            assert "token_ids" not in whole.text and whole.json()["choices"][0]["logprobs"] is None
            assert b"token_ids" not in streamed.content
            assert b'"logprob"' not in streamed.content
            text = server.requests[0].body["messages"][0]["content"]
            assert text == "x"
            lines = [json.loads(x) for x in (tmp_path / "calls.jsonl").read_text().splitlines()]
            assert len(lines) == 2
            for line in lines:
                ro = line["rollout"]
                assert ro["prompt_token_ids"] == PROMPT_IDS
                assert ro["completion_token_ids"] == _ids("ok")
                assert ro["logprobs"] == [-0.5, -0.5]
                assert ro["complete"] is True and ro["finish_reason"] == "stop"
                assert ro["sampling_params"]["logprobs"] is True

    with_server([], body)


def test_a_client_that_asked_for_logprobs_keeps_them():
    async def body(server: WireModels) -> None:
        async with relay_for(server, rollout=True) as relay:
            lease = relay.open_trial("t")
            async with client(relay) as c:
                r = await c.post(
                    "/v1/chat/completions",
                    headers={"Authorization": f"Bearer {lease.token}"},
                    json={"model": "m", "logprobs": True, "messages": [{"role": "user", "content": "q"}]},
                )
            choice = r.json()["choices"][0]
            assert [x["logprob"] for x in choice["logprobs"]["content"]] == [-0.5, -0.5]
            assert "token_ids" not in choice and "prompt_token_ids" not in r.json()
            assert lease.records[0].rollout["completion_token_ids"] == _ids("ok")

    with_server([], body)


def test_without_rollout_nothing_is_added():
    async def body(server: WireModels) -> None:
        async with relay_for(server) as relay:
            lease = relay.open_trial("t")
            async with client(relay) as c:
                await call(c, "chat-whole", lease.token)
            assert "return_token_ids" not in server.requests[0].body
            assert lease.records[0].rollout is None

    with_server([], body)
