"""The docker backend against the raw Docker CLI floor (design §12, issue 3).

Measures, side by side and interleaved (so both see the same machine load), medians over N
rounds:

1. the time cairn's ``DockerSandbox.stop()`` takes to remove a running container (target
   < 0.5 s; Harbor waits ~10 s here);
2. create + start + 3 execs + remove of a container from a cached image, through cairn
   (``async with DockerSandbox(spec)`` and three ``exec`` calls) versus the same operations
   through the docker CLI (``docker create --init``, ``docker start``, 3 × ``docker exec``,
   ``docker rm -f``), and their ratio (target ≤ 1.3).

Usage:
    python3 bench/docker_floor.py [-n 9] [--image debian:bookworm-slim]

Exit status 0 when both targets hold, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from cairn.sandbox.base import NetworkMode, SandboxSpec  # noqa: E402
from cairn.sandbox.docker.backend import DockerSandbox  # noqa: E402

EXECS = (["echo", "hello"], ["cat", "/etc/hostname"], ["sh", "-c", "ls / > /dev/null"])


def docker_cli() -> str:
    """``/usr/local/bin/docker`` if present, else ``docker`` on PATH."""
    if Path("/usr/local/bin/docker").exists():
        return "/usr/local/bin/docker"
    found = shutil.which("docker")
    if not found:
        sys.exit("docker CLI not found")
    return found


def cli_round(docker: str, image: str) -> float:
    """create + start + 3 execs + rm -f through the CLI; wall seconds."""
    t0 = time.perf_counter()
    name = f"cairn-bench-cli-{uuid.uuid4().hex[:8]}"
    run = lambda *a: subprocess.run([docker, *a], check=True, capture_output=True)  # noqa: E731
    run(
        "create",
        "--init",
        "--network",
        "none",
        "--label",
        "cairn.bench=1",
        "--name",
        name,
        image,
        "sleep",
        "infinity",
    )
    run("start", name)
    for argv in EXECS:
        run("exec", name, *argv)
    run("rm", "-f", name)
    return time.perf_counter() - t0


def _spec(image: str) -> SandboxSpec:
    return SandboxSpec(
        docker_image=image,
        network_mode=NetworkMode.NO_NETWORK,
        job_id="bench",
        trial_id=uuid.uuid4().hex[:12],
        name="bench",
    )


async def cairn_round(image: str) -> tuple[float, float]:
    """create + start + 3 execs + remove through cairn; (total seconds, stop seconds)."""
    t0 = time.perf_counter()
    sb = DockerSandbox(_spec(image))
    try:
        await sb.start()
        for argv in EXECS:
            r = await sb.exec(argv)
            assert r.ok, r
    finally:
        t1 = time.perf_counter()
        await sb.stop()
    t2 = time.perf_counter()
    return t2 - t0, t2 - t1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=9, help="rounds (median taken)")
    ap.add_argument("--image", default="debian:bookworm-slim")
    ap.add_argument("--stop-limit", type=float, default=0.5)
    ap.add_argument("--ratio-limit", type=float, default=1.3)
    args = ap.parse_args()
    docker = docker_cli()
    loop = asyncio.new_event_loop()
    loop.run_until_complete(cairn_round(args.image))  # warm-up: client, engine version
    cli_round(docker, args.image)
    cli_t, cairn_t, stop_t = [], [], []
    for _ in range(args.n):
        total, stop = loop.run_until_complete(cairn_round(args.image))
        cairn_t.append(total)
        stop_t.append(stop)
        cli_t.append(cli_round(docker, args.image))
    loop.close()
    stop_med = statistics.median(stop_t)
    cli_med, cairn_med = statistics.median(cli_t), statistics.median(cairn_t)
    ratio = cairn_med / cli_med
    print(
        f"stop via cairn:           median {stop_med * 1000:7.1f} ms  (limit {args.stop_limit * 1000:.0f} ms)"
    )
    print(f"docker CLI floor:         median {cli_med * 1000:7.1f} ms  (create+start+3 exec+rm -f)")
    print(f"cairn DockerSandbox:      median {cairn_med * 1000:7.1f} ms  (start+3 exec+stop)")
    print(f"ratio cairn / CLI floor:  {ratio:.2f}  (limit {args.ratio_limit:.2f})")
    return 0 if stop_med < args.stop_limit and ratio <= args.ratio_limit else 1


if __name__ == "__main__":
    sys.exit(main())
