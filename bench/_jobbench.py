"""Shared helpers of the job benchmarks: write a task, run ``cairn run`` as a child process and
measure its wall time and peak resident memory (``wait4`` rusage of that child)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def write_task(
    root: Path, name: str, steps: int, image: str = "debian:bookworm-slim", network: str | None = "no-network"
) -> Path:
    """A task of ``steps`` steps (1 = single-step), each solved by touching a file and checked
    by a test that also re-checks the earlier steps' files; ``network=None`` leaves the
    network mode to the harness's default (Harbor's docker environment refuses
    ``no-network``)."""
    task = root / name
    (task / "environment").mkdir(parents=True)
    (task / "environment" / "Dockerfile").write_text(f"FROM {image}\nWORKDIR /app\n")
    toml = [f'[task]\nname = "bench/{name}"\n']
    if network is not None:
        toml.append(f'[environment]\nnetwork_mode = "{network}"\n')
    if steps == 1:
        (task / "instruction.md").write_text("Create /app/s1.\n")
        for sub, body in (("solution/solve.sh", "touch /app/s1\n"), ("tests/test.sh", _test(1))):
            (task / sub).parent.mkdir(parents=True, exist_ok=True)
            (task / sub).write_text("#!/bin/bash\n" + body)
    for i in range(1, steps + 1 if steps > 1 else 1):
        toml.append(f'[[steps]]\nname = "s{i}"\n')
        d = task / "steps" / f"s{i}"
        (d / "solution").mkdir(parents=True)
        (d / "tests").mkdir()
        (d / "instruction.md").write_text(f"Create /app/s{i}.\n")
        (d / "solution" / "solve.sh").write_text(f"#!/bin/bash\ntouch /app/s{i}\n")
        (d / "tests" / "test.sh").write_text("#!/bin/bash\n" + _test(i))
    (task / "task.toml").write_text("\n".join(toml))
    return task


def _test(i: int) -> str:
    files = " && ".join(f"test -f /app/s{j}" for j in range(1, i + 1))
    return (
        f"if {files}; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n"
    )


@dataclass
class Run:
    """One ``cairn run`` process: wall seconds, peak RSS (MiB), CPU seconds, exit code, and the
    CPU seconds the Docker engine's processes used meanwhile (dockerd, containerd, shims, runc:
    shared with anything else using the engine, so approximate)."""

    wall: float
    rss_mib: float
    cpu_sec: float
    code: int
    engine_cpu_sec: float


def engine_cpu() -> float:
    """CPU seconds used so far by the Docker engine's processes (from /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        if name.startswith(("dockerd", "containerd", "runc", "docker-init", "docker-proxy")):
            f = stat[stat.rindex(")") + 2 :].split()
            total += int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])
    return total / tick


def run_cairn(args: list[str], *, quiet: bool = True, src: Path | None = None) -> Run:
    """Run ``python3 -m cairn ARGS`` to its end and measure it (the cairn of ``src``, a
    checkout's ``src`` folder, default this repository's)."""
    env = {
        **os.environ,
        "PYTHONPATH": str(src or REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    out = subprocess.DEVNULL if quiet else None
    e0 = engine_cpu()
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "cairn", *args], env=env, stdout=out, stderr=subprocess.PIPE if quiet else None
    )
    err = proc.stderr.read() if quiet and proc.stderr else b""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    engine = engine_cpu() - e0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):
        sys.stderr.write(err.decode("utf-8", "replace")[-3000:])
    return Run(
        wall=wall,
        rss_mib=usage.ru_maxrss / 1024.0,
        cpu_sec=usage.ru_utime + usage.ru_stime,
        code=proc.returncode,
        engine_cpu_sec=engine,
    )


def summary(job_dir: Path) -> dict:
    """The job's summary.json."""
    return json.loads((job_dir / "summary.json").read_text())


def api_version(docker: str = "docker") -> str:
    """The engine's API version, for ``bench/_sdkfloor.py`` (read outside the timed runs)."""
    return (
        subprocess.run(
            [docker, "version", "--format", "{{.Server.APIVersion}}"], capture_output=True, check=True
        )
        .stdout.decode()
        .strip()
    )


def sdk_floor(args: list[str]) -> tuple[float, dict]:
    """Run ``bench/_sdkfloor.py ARGS`` (bytecode cache on, as an installed cairn has it) to its
    end: (whole-process wall seconds, its JSON line). Exits with its stderr if it fails."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, str(REPO / "bench" / "_sdkfloor.py"), *args],
        capture_output=True,
        check=False,
        env=env,
    )
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(
            f"bench/_sdkfloor.py failed ({p.returncode}):\n{p.stderr.decode('utf-8', 'replace')[-3000:]}"
        )
    return wall, json.loads(p.stdout)
