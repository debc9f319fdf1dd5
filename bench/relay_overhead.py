"""Per-call overhead of the model relay (issue 25: p50 <= 5 ms, no extra time to first byte).

Three processes, as in a run: the scripted model server (tests/helpers/wire_models.py), the
relay (cairn.relay, in a process of its own as it is inside ``cairn run``) and this client
(httpx, one keep-alive connection per target). Each round calls the server directly and
through the relay, in alternating order, for each protocol:

- ``chat``: Chat Completions, not streamed;
- ``chat-sse``: Chat Completions, streamed (the relay adds ``include_usage`` and drops that
  chunk);
- ``messages-sse``: Anthropic Messages, streamed;
- ``gemini``: Gemini ``generateContent``.

Printed per protocol: p50 latency and p50 time to first body byte, direct and relayed, the
overhead (relayed - direct) in ms and the ratio relayed/direct. Also printed: the relay's start
(aiohttp's import, the bind, the client session), paid once per job by jobs whose agent uses it.

Usage: ``python bench/relay_overhead.py [--calls N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests" / "helpers")]
TARGET_MS = 5.0
KEY = "sk-bench-upstream-key"


def serve_upstream() -> None:
    from wire_models import WireModels

    with WireModels() as server:
        print(server.base_url, flush=True)
        sys.stdin.read()


def serve_relay(upstream: str) -> None:
    t0 = time.perf_counter()
    from cairn.relay.server import ModelRelay, RelayConfig, Upstream

    async def main() -> None:
        cfg = RelayConfig(upstreams={"*": Upstream(upstream, KEY)})
        async with ModelRelay(cfg) as relay:
            lease = relay.open_trial("bench")
            print(
                json.dumps({"url": relay.url, "token": lease.token, "start_sec": time.perf_counter() - t0}),
                flush=True,
            )
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

    asyncio.run(main())


CASES = {
    "chat": (
        "/v1/chat/completions",
        "bearer",
        {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    ),
    "chat-sse": (
        "/v1/chat/completions",
        "bearer",
        {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
    ),
    "messages-sse": (
        "/v1/messages",
        "x-api-key",
        {"model": "m", "max_tokens": 16, "stream": True, "messages": [{"role": "user", "content": "hi"}]},
    ),
    "gemini": (
        "/v1beta/models/m:generateContent",
        "x-goog-api-key",
        {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
    ),
}


def one(client: object, path: str, headers: dict[str, str], body: dict) -> tuple[float, float]:
    t0 = time.perf_counter()
    ttfb = None
    with client.stream("POST", path, headers=headers, json=body) as r:  # type: ignore[attr-defined]
        for _ in r.iter_raw():
            if ttfb is None:
                ttfb = time.perf_counter() - t0
        if r.status_code != 200:
            raise SystemExit(f"{path}: HTTP {r.status_code}")
    total = time.perf_counter() - t0
    return total, ttfb if ttfb is not None else total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=300, help="calls per protocol and target")
    ap.add_argument("--serve-upstream", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--serve-relay", metavar="URL", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_upstream:
        serve_upstream()
        return 0
    if args.serve_relay:
        serve_relay(args.serve_relay)
        return 0
    import httpx

    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    up = subprocess.Popen(
        [sys.executable, __file__, "--serve-upstream"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    relay = None
    try:
        assert up.stdout is not None
        upstream = up.stdout.readline().strip()
        relay = subprocess.Popen(
            [sys.executable, __file__, "--serve-relay", upstream],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert relay.stdout is not None
        info = json.loads(relay.stdout.readline())
        direct = httpx.Client(base_url=upstream, timeout=30)
        relayed = httpx.Client(base_url=info["url"], timeout=30)
        print(
            f"{'protocol':<14}{'p50 direct':>12}{'p50 relay':>11}{'overhead':>10}{'ratio':>7}"
            f"{'ttfb direct':>13}{'ttfb relay':>12}{'overhead':>10}{'ratio':>7}"
        )
        worst = 0.0
        for name, (path, auth, body) in CASES.items():

            def headers(token: str, auth: str = auth) -> dict[str, str]:
                return (
                    {"Authorization": f"Bearer {token}"}
                    if auth == "bearer"
                    else {auth: token, "anthropic-version": "2023-06-01"}
                )

            for _ in range(20):  # warm both connections
                one(direct, path, headers(KEY), body)
                one(relayed, path, headers(info["token"]), body)
            d: list[tuple[float, float]] = []
            r: list[tuple[float, float]] = []
            for i in range(args.calls):
                pair = [(direct, KEY, d), (relayed, info["token"], r)]
                for client, token, out in pair if i % 2 else pair[::-1]:
                    out.append(one(client, path, headers(token), body))
            dl, rl = (statistics.median(x[0] for x in s) * 1e3 for s in (d, r))
            dt, rt = (statistics.median(x[1] for x in s) * 1e3 for s in (d, r))
            worst = max(worst, rl - dl, rt - dt)
            print(
                f"{name:<14}{dl:>10.2f}ms{rl:>9.2f}ms{rl - dl:>8.2f}ms{rl / dl:>7.2f}"
                f"{dt:>11.2f}ms{rt:>10.2f}ms{rt - dt:>8.2f}ms{rt / dt:>7.2f}"
            )
        load = os.getloadavg()[0]
        print(
            f"relay start (import aiohttp, bind, client session): {info['start_sec'] * 1e3:.0f} ms,"
            " paid once per job and only by jobs whose agent uses the relay"
        )
        print(
            f"worst p50 overhead {worst:.2f} ms (target <= {TARGET_MS:.0f} ms); "
            f"{args.calls} calls per protocol and target; load average {load:.2f}"
        )
        return 0 if worst <= TARGET_MS else 1
    finally:
        for proc in (relay, up):
            if proc is not None and proc.stdin is not None:
                proc.stdin.close()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()


if __name__ == "__main__":
    raise SystemExit(main())
