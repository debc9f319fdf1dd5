"""What the per-trial egress gateway adds to a sandbox's start (issue 14).

Side by side and interleaved (both see the same machine load), medians over N rounds, the
same environment (cached image) started and stopped through ``DockerSandbox``:

1. ``no-network`` (layout ``none``: no gateway, no network) — the baseline;
2. ``allowlist`` with one host (layout ``gateway``: internal network + gateway container,
   started concurrently with the sandbox, ready when ``start()`` returns);
3. ``no-network`` plus the model host of an in-sandbox agent in a phase (also ``gateway``);
4. and 5. the same two inside a job (a job pool is open, as ``cairn run`` opens one): the
   gateway and internal network an earlier trial of the job left are reused, switched to this
   trial's policy (``cairn.sandbox.pools``; docs/network.md "Gateway reuse").

Prints the median ``start()`` seconds of each, the added median and the ratio to the baseline
(target, issue #34: each of 2.–5. adds ≤ 0.3 s; 2. and 3. are a lone trial's cost), the
median ``stop()`` seconds, the median phase switch (``set_network``) and checks that the
baseline started no gateway. The gateway image is built once before the rounds (content-hash
cached like environment images; the first build is reported apart).

Usage:
    python3 bench/gateway_start.py [-n 9] [--image python:3.12-slim]

Exit status 0 when the target holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from cairn.netpolicy import NetworkMode, NetworkPolicy  # noqa: E402
from cairn.sandbox.base import SandboxSpec  # noqa: E402
from cairn.sandbox.caches import SandboxCaches  # noqa: E402
from cairn.sandbox.cleanup import settle_job  # noqa: E402
from cairn.sandbox.docker.backend import DockerSandbox  # noqa: E402
from cairn.sandbox.docker.build import in_thread, make_client  # noqa: E402
from cairn.sandbox.docker.gateway import ensure_gateway_image  # noqa: E402
from cairn.sandbox.pools import ResourcePool  # noqa: E402

TARGET_SEC = 0.3


def _spec(env: Path, **kw) -> SandboxSpec:
    return SandboxSpec(
        env_dir=env, job_id="bench-gateway", trial_id=uuid.uuid4().hex[:12], name="bench-gateway", **kw
    )


JOBBED = ("allowlist in a job", "no-net+model in a job")


async def _one(spec: SandboxSpec, switch: NetworkPolicy | None) -> dict[str, float | str]:
    sb = DockerSandbox(spec)
    t0 = time.perf_counter()
    await sb.start()
    started = time.perf_counter() - t0
    out: dict[str, float | str] = {"start": started, "layout": sb.network_layout or ""}
    try:
        if switch is not None:
            t1 = time.perf_counter()
            await sb.set_network(switch, phase="agent")
            out["switch"] = time.perf_counter() - t1
    finally:
        t2 = time.perf_counter()
        await sb.stop()
        out["stop"] = time.perf_counter() - t2
    return out


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=9, help="rounds (default 9)")
    ap.add_argument("--image", default="python:3.12-slim", help="environment base image")
    args = ap.parse_args()
    env = Path(tempfile.mkdtemp(prefix="cairn-bench-gw-"))
    (env / "Dockerfile").write_text(f"FROM {args.image}\nWORKDIR /app\n")
    caches = SandboxCaches()  # the bench's own memos (no job here)
    client = await in_thread(make_client, caches)
    t0 = time.perf_counter()
    await ensure_gateway_image(client, caches)
    print(f"gateway image ready in {time.perf_counter() - t0:.2f} s (built once, then cached)")
    model = NetworkPolicy(NetworkMode.NO_NETWORK, (), ("model.test",))
    job_dir = Path(tempfile.mkdtemp(prefix="cairn-bench-gw-job-"))
    kinds = {
        "no-network": lambda: (_spec(env, network_mode=NetworkMode.NO_NETWORK), None),
        "allowlist": lambda: (
            _spec(env, network_mode=NetworkMode.ALLOWLIST, allowed_hosts=("allowed.test",)),
            None,
        ),
        "no-network+model": lambda: (
            _spec(env, network_mode=NetworkMode.NO_NETWORK, network_phases=(model,)),
            model,
        ),
        JOBBED[0]: lambda: (
            _spec(
                env,
                network_mode=NetworkMode.ALLOWLIST,
                allowed_hosts=("allowed.test",),
                job_dir=job_dir,
                pool=pool,
            ),
            None,
        ),
        JOBBED[1]: lambda: (
            _spec(
                env, network_mode=NetworkMode.NO_NETWORK, network_phases=(model,), job_dir=job_dir, pool=pool
            ),
            model,
        ),
    }
    pool: ResourcePool[object] = ResourcePool()  # the job's pool, as cairn run opens one
    try:
        for make in kinds.values():  # warm-up: the environment image, the code paths
            await _one(*make())
        runs: dict[str, list[dict]] = {k: [] for k in kinds}
        for _ in range(args.n):
            for name, make in kinds.items():
                runs[name].append(await _one(*make()))
    finally:
        pool.close()  # what it still holds is removed by the job's settle step below
        left = await asyncio.to_thread(settle_job, job_dir, "docker")
        if left:
            print(f"FAIL: the job's pooled gateways were not all removed: {left}")

    def med(name: str, key: str) -> float:
        return statistics.median(float(r[key]) for r in runs[name] if key in r)

    base = med("no-network", "start")
    print(
        f"{'policy':<22} {'layout':<8} {'start s':>8} {'added s':>8} {'ratio':>6} "
        f"{'stop s':>7} {'switch s':>8}"
    )
    ok = not left
    for name in kinds:
        layout = str(runs[name][0]["layout"])
        added = med(name, "start") - base
        sw = f"{med(name, 'switch'):.3f}" if any("switch" in r for r in runs[name]) else "-"
        print(
            f"{name:<22} {layout:<8} {med(name, 'start'):>8.3f} {added:>8.3f} "
            f"{med(name, 'start') / base:>6.2f} {med(name, 'stop'):>7.3f} {sw:>8}"
        )
        if name != "no-network" and added > TARGET_SEC:  # a lone trial's and a job's (#34)
            ok = False
    if {str(r["layout"]) for r in runs["no-network"]} != {"none"}:
        print("FAIL: a no-network sandbox without model hosts got a gateway")
        ok = False
    print(
        f"target: the gateway adds <= {TARGET_SEC} s (median) to a lone trial's start and to a "
        f"job's: {'OK' if ok else 'MISSED'}"
    )
    client.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
