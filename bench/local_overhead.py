"""Harness overhead of the local backend (design §12: per step < 50 ms, issue 4: per exec < 20 ms).

Prints medians of:

- exec: ``sb.exec(["true"])`` and ``sb.exec("true")`` in a local sandbox, against the floor of
  spawning the same command on the host (``asyncio.create_subprocess_exec``); the difference
  is the harness overhead per exec.
- step: the sandbox calls one trivial step makes (the sequence of ``cairn.trial.step`` and
  ``cairn.trial.verify``: working-dir copy, process snapshots, log checks, tests upload, test.sh,
  reward download), against the same commands run on the host; the difference is the harness
  overhead per step.
- start+stop: a sandbox of an environment whose Dockerfile layer is cached.

Usage: ``python bench/local_overhead.py [--rounds N]`` (root or unprivileged user namespaces).
Each exec needs the sandbox's init to be scheduled twice, so on a machine whose CPUs are
saturated by other work the figures grow with the run queue; the load average is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from cairn._util.treehash import tree_hash
from cairn.sandbox.base import NetworkMode, SandboxSpec
from cairn.sandbox.local.backend import LocalSandbox

EXEC_TARGET_MS = 20.0
STEP_TARGET_MS = 50.0

STEP_COMMANDS: list[list[str]] = [
    ["mkdir", "-p", "/app"],
    ["id", "-u"],
    ["chown", "-R", "0", "/app/input.txt"],
    ["bash", "-c", "true"],  # the agent's own command (stands for the agent phase)
    ["sh", "-c", "find /logs/agent -mindepth 1 | head -n 1"],
    ["sh", "-c", "find /logs/verifier -mindepth 1 | head -n 1"],
    ["rm", "-rf", "/tests"],
    ["mkdir", "-p", "/tests"],
    ["chmod", "-R", "a+rwX", "/tests"],
    ["bash", "/tests/test.sh"],
    ["rm", "-rf", "/tests"],
    ["sh", "-c", "find /logs/artifacts -mindepth 1 | head -n 1"],
]
"""The execs of one trivial step, in order (uploads, downloads and process listings are
interleaved by :func:`one_step`)."""


async def _median_ms(fn: Callable[[], Awaitable[object]], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        await fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


async def _paired_ms(
    fn: Callable[[], Awaitable[object]], floor: Callable[[], Awaitable[object]], rounds: int
) -> tuple[float, float]:
    """Medians of ``fn`` and ``floor`` measured alternately (load drift hits both alike)."""
    a, b = [], []
    for _ in range(rounds):
        for f, acc in ((fn, a), (floor, b)):
            t0 = time.perf_counter()
            await f()
            acc.append(time.perf_counter() - t0)
    return statistics.median(a) * 1000, statistics.median(b) * 1000


async def host_run(argv: list[str]) -> None:
    """Run a command on the host (the floor an exec is compared with)."""
    p = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    await p.communicate()


async def one_step(sb: LocalSandbox, work: Path, tests: Path, out: Path) -> None:
    """The sandbox calls of one trivial step (see :data:`STEP_COMMANDS`)."""
    c = STEP_COMMANDS
    await sb.exec(c[0], user="root")
    await sb.upload(work / "input.txt", "/app/input.txt")
    for argv in c[1:3]:
        await sb.exec(argv, user="root")
    before = await sb.processes()
    await sb.exec(c[3])
    after = await sb.processes()
    await sb.kill_processes([p for p in after if p.key not in {q.key for q in before} and p.pid != 1])
    for argv in c[4:9]:
        await sb.exec(argv, user="root")
    await sb.upload(tests, "/tests")
    await sb.exec(c[9], user="root")
    await sb.download("/logs/verifier", out / uuid.uuid4().hex)
    for argv in c[10:]:
        await sb.exec(argv, user="root")


async def host_step(work: Path, tests: Path, scratch: Path) -> None:
    """The floor of :func:`one_step`: the same commands run on the host."""
    for argv in STEP_COMMANDS:
        argv = [
            a.replace("/tests", str(tests)).replace("/app", str(scratch)).replace("/logs", str(scratch))
            for a in argv
        ]
        if argv[0] == "chown" or argv[:2] in (["rm", "-rf"], ["mkdir", "-p"]):
            argv = ["true"]
        await host_run(argv)


async def main(rounds: int) -> int:
    """Run the measurements and print them; returns 0 when both targets are met."""
    tmp = Path(tempfile.mkdtemp(prefix="cairn-bench-local-"))
    try:
        return await _measure(rounds, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


async def _measure(rounds: int, tmp: Path) -> int:
    env = tmp / "env"
    env.mkdir()
    (env / "Dockerfile").write_text(
        "FROM debian:bookworm-slim\nWORKDIR /app\nRUN echo bench > /app/bench.txt\n"
    )
    work, tests, out = tmp / "work", tmp / "tests", tmp / "out"
    for d in (work, tests, out):
        d.mkdir()
    (work / "input.txt").write_text("input\n")
    (tests / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")

    def spec() -> SandboxSpec:
        return SandboxSpec(
            env_dir=env,
            env_hash=tree_hash(env),
            trial_id="bench-local",
            job_id="bench",
            network_mode=NetworkMode.NO_NETWORK,
        )

    async with LocalSandbox(spec()) as sb:  # builds the layer once
        for _ in range(5):
            await sb.exec(["true"])
        exec_argv, floor_argv = await _paired_ms(
            lambda: sb.exec(["true"]), lambda: host_run(["true"]), rounds
        )
        exec_shell, floor_shell = await _paired_ms(
            lambda: sb.exec("true"), lambda: host_run(["bash", "-c", "true"]), rounds
        )
        step, floor_step = await _paired_ms(
            lambda: one_step(sb, work, tests, out),
            lambda: host_step(work, tests, tmp / "scratch"),
            max(10, rounds // 4),
        )

    async def start_stop() -> None:
        async with LocalSandbox(spec()):
            pass

    cycle = await _median_ms(start_stop, max(10, rounds // 10))

    over_argv, over_shell = exec_argv - floor_argv, exec_shell - floor_shell
    over_step = step - floor_step
    n_execs = len(STEP_COMMANDS)
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"local backend overhead (medians, {rounds} rounds; {os.cpu_count()} CPUs, load "
        f"average {load}; Linux {os.uname().release})"
    )
    print(
        f"  exec argv  ['true']  : {exec_argv:7.2f} ms  host floor {floor_argv:6.2f} ms  "
        f"overhead {over_argv:6.2f} ms  (target < {EXEC_TARGET_MS:.0f} ms)"
    )
    print(
        f"  exec shell 'true'    : {exec_shell:7.2f} ms  host floor {floor_shell:6.2f} ms  "
        f"overhead {over_shell:6.2f} ms  (target < {EXEC_TARGET_MS:.0f} ms)"
    )
    print(
        f"  one step ({n_execs} execs, 2 uploads, 1 download, 2 process lists): "
        f"{step:7.2f} ms  host floor {floor_step:6.2f} ms  overhead {over_step:6.2f} ms  "
        f"(target < {STEP_TARGET_MS:.0f} ms)"
    )
    print(f"  start+stop (cached layer): {cycle:7.2f} ms")
    ok = max(over_argv, over_shell) < EXEC_TARGET_MS and over_step < STEP_TARGET_MS
    print("  targets met" if ok else "  TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=100, help="execs per measurement")
    sys.exit(asyncio.run(main(ap.parse_args().rounds)))
