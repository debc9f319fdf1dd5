"""Agent setup time per trial for an installed CLI agent: first (uncached) vs cached, beside
``npm install`` in the sandbox (what cairn did before the runtime cache, and what Harbor's
install scripts do per trial).

Measured side by side on the same machine:

1. **first** — the runtime is not in cairn's cache: ``prepare_host`` downloads the package
   from the npm registry into a fresh cache (and a fresh npm download cache, so nothing is
   reused), then ``setup`` in the sandbox. Once.
2. **cached** — trials 2…N+1 of the same job: ``prepare_host`` finds the runtime, the backend
   binds it read-only, ``setup`` creates HOME, writes config and runs ``--version``. Median of N.
3. **npm in sandbox** — ``npm install -g <package>@<version>`` inside a container of an image
   that already has Node.js and npm (Debian's ``nodejs npm``; built once, not timed), with a
   fresh npm cache each time. Median of ``--npm-rounds``.

The task image of (1) and (2) is ``debian:bookworm-slim`` without Node.js, and for a Python
agent with its ``python3`` removed too.

For the Python agents (``--agent aider``, ``--agent mini-swe-agent``) the runtime is a sealed
Python (Debian's CPython 3.11 + the agent from PyPI), and (3) is ``pip install <package>==<version>``
into a venv of Debian's ``python3`` in the container instead (image built once, not timed).

``--reuse-cache`` skips (1) and measures (2) on the machine's own cache (``cairn agents prepare``
first): the uncached figure of a Python agent costs minutes.

Usage:
    python3 bench/agent_setup.py [--agent claude-code] [-n 5] [--npm-rounds 1] [--reuse-cache]

Exit status 0 when the cached median is under 2 s, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from cairn.agents.base import AgentContext  # noqa: E402
from cairn.agents.registry import create_agent  # noqa: E402
from cairn.sandbox.base import SandboxSpec  # noqa: E402
from cairn.sandbox.docker.backend import DockerSandbox  # noqa: E402
from cairn.task.load import load_task  # noqa: E402

NPM_IMAGE_DOCKERFILE = (
    "FROM debian:bookworm-slim\nRUN apt-get update -qq && "
    "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm "
    "ca-certificates >/dev/null && rm -rf /var/lib/apt/lists/*\n"
)


PIP_IMAGE_DOCKERFILE = (
    "FROM debian:bookworm-slim\nRUN apt-get update -qq && "
    "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv "
    "python3-pip ca-certificates >/dev/null && rm -rf /var/lib/apt/lists/*\n"
)


def _task(root: Path, *, pypi: bool = False) -> Path:
    task = root / "bench-agent-setup"
    (task / "environment").mkdir(parents=True)
    # a Python agent's image has its Python removed: the sealed runtime must not need it
    strip = "RUN rm -rf /usr/bin/python3* /usr/lib/python3*\n" if pypi else ""
    (task / "environment" / "Dockerfile").write_text(f"FROM debian:bookworm-slim\n{strip}WORKDIR /app\n")
    (task / "instruction.md").write_text("Nothing.\n")
    (task / "tests").mkdir()
    (task / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    (task / "task.toml").write_text(
        '[task]\nname = "bench/agent-setup"\n[environment]\nnetwork_mode = "public"\n'
    )
    return task


async def _one_trial(agent_name: str, task, tmp: Path, *, pypi: bool = False) -> tuple[float, float]:
    """(agent setup seconds, sandbox start seconds) of one trial.

    The task image must lack what the agent's runtime brings: Node.js for an npm agent (the
    base image may have a python3, which such an agent never uses), and also Python for a
    PyPI agent (its image has ``python3`` removed)."""
    agent = create_agent(agent_name, None, {})
    started = time.monotonic()
    mounts = await agent.prepare_host(task, can_mount=True)
    host_sec = time.monotonic() - started
    spec = SandboxSpec(
        env_dir=task.env_dir,
        network_mode=task.environment.effective_network_mode,
        env_hash=task.env_hash,
        name="bench-agent-setup",
        job_id="bench",
        trial_id=uuid.uuid4().hex[:12],
        mounts=tuple(mounts),
    )
    t0 = time.monotonic()
    async with DockerSandbox(spec) as sandbox:
        env_sec = time.monotonic() - t0
        ctx = AgentContext(task=task, step=task.steps[0], logs_dir=tmp / "logs", timeout_sec=600)
        t1 = time.monotonic()
        await agent.setup(sandbox, ctx)
        setup_sec = time.monotonic() - t1
        probe = (
            "command -v node || command -v python3 || echo none"
            if pypi
            else "command -v node || command -v nodejs || echo none"
        )
        found = (await sandbox.exec(probe)).stdout.strip()
        assert found == "none", (
            f"the task image must have no {'Node.js or Python' if pypi else 'Node.js'}: {found}"
        )
    return host_sec + setup_sec, env_sec


async def _npm_in_sandbox(
    package: str, version: str, rounds: int, tmp: Path, *, pypi: bool = False
) -> list[float]:
    env_dir = tmp / "npm-image"
    env_dir.mkdir()
    (env_dir / "Dockerfile").write_text(PIP_IMAGE_DOCKERFILE if pypi else NPM_IMAGE_DOCKERFILE)
    from cairn.task.hashing import env_hash

    times = []
    for _ in range(rounds):
        spec = SandboxSpec(
            env_dir=env_dir,
            env_hash=env_hash(env_dir, docker_image=None, workdir=None),
            name="bench-npm",
            job_id="bench",
            trial_id=uuid.uuid4().hex[:12],
            build_timeout_sec=1800,
        )
        async with DockerSandbox(spec) as sandbox:
            cafile = ""
            host_ca = Path(os.environ.get("SSL_CERT_FILE") or "/etc/ssl/certs/ca-certificates.crt")
            if host_ca.is_file():  # this machine's CA bundle (a TLS-intercepting proxy)
                await sandbox.upload(host_ca, "/tmp/host-ca.crt")
                cafile = "--cafile /tmp/host-ca.crt"
            t0 = time.monotonic()
            if pypi:
                cmd = (
                    f"python3 -m venv /tmp/v && /tmp/v/bin/pip install -q --no-cache-dir "
                    f"{'--cert /tmp/host-ca.crt' if cafile else ''} {package}=={version}"
                )
            else:
                cmd = f"npm install -g --no-audit --no-fund --cache /tmp/npmc {cafile} {package}@{version}"
            r = await sandbox.exec(cmd, user="root", timeout_sec=1800)
            times.append(time.monotonic() - t0)
            if not r.ok:
                print(f"install in the sandbox failed: {r.stderr[-800:]}", file=sys.stderr)
                return []
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agent", default="claude-code")
    ap.add_argument("-n", type=int, default=5, help="cached trials (median)")
    ap.add_argument(
        "--npm-rounds", type=int, default=1, help="npm (pip, for a Python agent) in-sandbox rounds (0: skip)"
    )
    ap.add_argument(
        "--reuse-cache",
        action="store_true",
        help="measure on the machine's own cache; skip the uncached trial",
    )
    args = ap.parse_args()
    from cairn.agents.runtime import PypiPackaging

    pypi = isinstance(create_agent(args.agent, None, {}).spec.packaging, PypiPackaging)

    with tempfile.TemporaryDirectory() as tmpd:
        tmp = Path(tmpd)
        task = load_task(_task(tmp, pypi=pypi))
        first = None
        if not args.reuse_cache:
            os.environ["CAIRN_CACHE_DIR"] = str(tmp / "cache")
            os.environ["npm_config_cache"] = str(tmp / "npm-cache")  # noqa: SIM112 - npm reads this spelling
            first, _ = asyncio.run(_one_trial(args.agent, task, tmp, pypi=pypi))
        cached, envs = [], []
        for _ in range(args.n):
            s, e = asyncio.run(_one_trial(args.agent, task, tmp, pypi=pypi))
            cached.append(s)
            envs.append(e)
        agent = create_agent(args.agent, None, {})
        npm = (
            asyncio.run(_npm_in_sandbox(agent.spec.package, agent.version, args.npm_rounds, tmp, pypi=pypi))
            if args.npm_rounds
            else []
        )
    med = statistics.median(cached)
    print(f"agent {args.agent} {agent.version}: agent setup per trial")
    if first is not None:
        source = "Debian + PyPI" if pypi else "npm registry"
        print(f"  first (uncached: {source} download into the cache): {first:8.2f} s")
    print(
        f"  cached (trials 2..{args.n + 1}, median of {args.n}):              {med:8.2f} s  "
        f"(min {min(cached):.2f}, max {max(cached):.2f})"
    )
    if npm:
        nmed = statistics.median(npm)
        what = "pip install" if pypi else "npm install -g"
        print(
            f"  {what} in the sandbox (median of {len(npm)}):          {nmed:8.2f} s  "
            f"→ cached is {nmed / med:.0f}x faster"
        )
    print(f"  (sandbox start, for scale: median {statistics.median(envs):.2f} s)")
    ok = med < 2.0
    print("target cached < 2 s:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
