"""Shared set-up of the relay tests: a scripted server, a relay in front of it, a client."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from cairn.relay.ledger import Limits
from cairn.relay.prices import Price
from cairn.relay.server import ModelRelay, RelayConfig, Upstream
from cairncli import run_cairn
from wire_models import Say, WireModels

UPSTREAM_KEY = "sk-upstream-SECRET-0123456789"


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 60))  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def relay_for(server: WireModels, **config: Any) -> AsyncIterator[ModelRelay]:
    up = Upstream(server.base_url, UPSTREAM_KEY)
    cfg = RelayConfig(upstreams={"*": up}, **config)
    async with ModelRelay(cfg) as relay:
        yield relay


def with_server(script: list[Say] | None, body: Callable[[WireModels], Awaitable[Any]]) -> Any:
    with WireModels(script) as server:
        return run(body(server))


PRICE = {"m": Price(input=1e-3, output=2e-3, cache_read=5e-4, cache_write=1.25e-3)}
NO_LIMITS = Limits()


def client(relay: ModelRelay) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=relay.url, timeout=30)


PROTOCOLS = [
    "anthropic",
    "anthropic-whole",
    "responses",
    "chat",
    "chat-whole",
    "gemini",
    "gemini-sse",
    "gemini-array",
]


def request_of(proto: str, token: str, text: str = "hi") -> tuple[str, dict[str, str], dict]:
    """``(path, headers, body)`` of one generation call as that protocol's clients send it."""
    if proto.startswith("anthropic"):
        return (
            "/v1/messages?beta=true",
            {"x-api-key": token, "anthropic-version": "2023-06-01", "anthropic-beta": "x-test"},
            {
                "model": "m",
                "max_tokens": 64,
                "stream": proto == "anthropic",
                "messages": [{"role": "user", "content": text}],
            },
        )
    if proto == "responses":
        return (
            "/v1/responses",
            {"Authorization": f"Bearer {token}"},
            {"model": "m", "input": text, "stream": True},
        )
    if proto.startswith("chat"):
        return (
            "/v1/chat/completions",
            {"Authorization": f"Bearer {token}"},
            {"model": "m", "stream": proto == "chat", "messages": [{"role": "user", "content": text}]},
        )
    verb = {
        "gemini": ":generateContent",
        "gemini-sse": ":streamGenerateContent?alt=sse",
        "gemini-array": ":streamGenerateContent",
    }[proto]
    return (
        f"/v1beta/models/m{verb}",
        {"x-goog-api-key": token},
        {"contents": [{"role": "user", "parts": [{"text": text}]}]},
    )


async def call(c: httpx.AsyncClient, proto: str, token: str, text: str = "hi") -> httpx.Response:
    path, headers, body = request_of(proto, token, text)
    r = await c.post(path, headers=headers, json=body)
    await r.aread()
    return r


# ---- the ``cairn run`` job of the relay's end-to-end tests (the llm agent, the local backend,
# the two-step example, against a scripted OpenAI-compatible server) ----------------------

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "two-steps"
"""The example task the relay jobs run."""
KEY = "sk-host-only-key-0123456789abcdef"
"""The provider key the job's host holds (``OPENAI_API_KEY``); it must stay upstream."""


def relay_cairn(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``cairn ARGS`` with the host's provider key set (tests/helpers/cairncli.py)."""
    return run_cairn(*args, cwd=cwd, timeout=300, OPENAI_API_KEY=KEY)


def relay_job_args(server_url: str, out: Path, *ak: str, flags: tuple[str, ...] = ()) -> list[str]:
    """The command line after ``cairn`` of a one-task ``llm`` job named ``j`` in ``out``:
    the agent pointed at ``server_url``, extra ``--ak`` values ``ak``, then ``flags``."""
    return [
        "run",
        "-p",
        str(EXAMPLE),
        "-a",
        "llm",
        "-m",
        "openai/gpt-4o-mini",
        "--ak",
        f"api_base={server_url}",
        "--ak",
        "retry_base_delay_sec=0.01",
        *(x for a in ak for x in ("--ak", a)),
        "-e",
        "local",
        "-o",
        str(out),
        "--job-name",
        "j",
        "-r",
        "0",
        *flags,
    ]
