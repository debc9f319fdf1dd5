"""Cost of step snapshots (``--snapshot-steps``, docs/snapshots.md), side by side with the step.

A two-step task: step 1 writes the working set (``small``: 16 KiB, ``large``: 500 MB of random
bytes) into ``/app``, step 2 adds one small file. Each variant runs as a whole ``cairn run``
process, ``--rounds`` times, on each backend:

- ``before``: this job without ``--snapshot-steps`` on the code of ``$CAIRN_BEFORE_SRC``
  (default ``/work/main/src``, the main branch; skipped when it does not exist);
- ``off``: the same job on this tree without ``--snapshot-steps``;
- ``on``: the same job with ``--snapshot-steps``.

Printed per backend and working set: job wall time (median) of each variant and the ratios
``off/before`` (the flag costs nothing when it is off) and ``on/off``; per step, the step's own
time (setup + agent + verifier, median) next to the snapshot's time and the disk it adds.

Usage: ``python bench/snapshots.py [--rounds 3] [--backends docker,local] [--sets small,large]``.
The snapshots the bench makes are removed at the end (``cairn clean --snapshots`` for its jobs).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
SETS = {"small": 16 * 1024, "large": 500 * 1000 * 1000}


def write_task(root: Path, name: str, nbytes: int) -> Path:
    """The bench task: step 1 writes ``nbytes`` random bytes, step 2 one small file."""
    t = root / name
    for step, solve, check in (
        (
            "write",
            f"head -c {nbytes} /dev/urandom > /app/data.bin\n",
            f"test $(stat -c %s /app/data.bin) -eq {nbytes}",
        ),
        ("add", "echo two > /app/two.txt\n", "test -f /app/two.txt"),
    ):
        d = t / "steps" / step
        (d / "tests").mkdir(parents=True)
        (d / "solution").mkdir()
        (d / "instruction.md").write_text(f"Step {step}.\n")
        (d / "solution" / "solve.sh").write_text("#!/bin/bash\n" + solve)
        (d / "tests" / "test.sh").write_text(
            f"#!/bin/bash\nif {check}; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"
        )
    (t / "environment").mkdir()
    (t / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    (t / "task.toml").write_text(
        f'[task]\nname = "bench/{name}"\n\n[environment]\n'
        'network_mode = "no-network"\n\n[[steps]]\nname = "write"\n\n'
        '[[steps]]\nname = "add"\n'
    )
    return t


def run(src: Path, task: Path, jobs: Path, name: str, backend: str, snapshots: bool) -> tuple[float, dict]:
    """One ``cairn run`` process; returns (wall seconds, result.json)."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    argv = [
        sys.executable,
        "-m",
        "cairn",
        "run",
        "-p",
        str(task),
        "-a",
        "oracle",
        "-e",
        backend,
        "--jobs-dir",
        str(jobs),
        "--job-name",
        name,
    ]
    if snapshots:
        argv.append("--snapshot-steps")
    t0 = time.perf_counter()
    p = subprocess.run(argv, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"cairn run failed ({p.returncode}):\n{p.stderr[-3000:]}")
    result = json.loads(next((jobs / name / "trials").glob("*/result.json")).read_text())
    if result["reward"] != 1.0:
        raise SystemExit(f"bench trial did not pass: {result['outcome']} {result['reward']}")
    return wall, result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--backends", default="docker,local")
    ap.add_argument("--sets", default="small,large")
    args = ap.parse_args()
    before = Path(os.environ.get("CAIRN_BEFORE_SRC", "/work/main/src"))
    have_before = (before / "cairn").is_dir() and before.resolve() != SRC.resolve()
    tmp = Path(tempfile.mkdtemp(prefix="cairn-bench-snap-"))
    print(
        f"load average {os.getloadavg()[0]:.2f}; rounds {args.rounds}; before = "
        f"{before if have_before else '(none)'}"
    )
    jobs_made: list[Path] = []
    try:
        for backend in args.backends.split(","):
            for set_name in args.sets.split(","):
                task = write_task(tmp / "tasks", f"{set_name}-{backend}", SETS[set_name])
                walls: dict[str, list[float]] = {"before": [], "off": [], "on": []}
                steps: dict[str, dict[str, list[float]]] = {}
                for r in range(args.rounds):
                    variants = [("off", SRC, False), ("on", SRC, True)]
                    if have_before:
                        variants.insert(0, ("before", before, False))
                    for label, src, snap in variants:
                        name = f"{backend}-{set_name}-{label}-{r}"
                        wall, result = run(src, task, tmp / "jobs", name, backend, snap)
                        jobs_made.append(tmp / "jobs" / name)
                        walls[label].append(wall)
                        for s in result["steps"]:
                            t = s["timings"]
                            own = sum(t[k] or 0.0 for k in ("setup_sec", "agent_sec", "verifier_sec"))
                            d = steps.setdefault(s["name"], {"step": [], "snap": [], "mb": []})
                            if label == "on":
                                d["step"].append(own)
                                d["snap"].append(s["snapshot"]["seconds"])
                                d["mb"].append((s["snapshot"]["size_bytes"] or 0) / 1e6)
                med = {k: statistics.median(v) for k, v in walls.items() if v}
                line = f"\n{backend} / {set_name} working set: job wall "
                line += ", ".join(f"{k} {v:.2f} s" for k, v in med.items())
                if "before" in med:
                    line += f"; off/before {med['off'] / med['before']:.2f}x"
                line += f"; on/off {med['on'] / med['off']:.2f}x"
                print(line)
                print(f"  {'step':<8} {'step time':>10} {'snapshot':>10} {'disk added':>11} {'snap/step':>9}")
                for name, d in steps.items():
                    st, sn, mb = (statistics.median(d[k]) for k in ("step", "snap", "mb"))
                    print(
                        f"  {name:<8} {st:>8.3f} s {sn:>8.3f} s {mb:>8.3f} MB "
                        f"{sn / st if st else float('nan'):>8.2f}x"
                    )
    finally:
        env = {**os.environ, "PYTHONPATH": str(SRC)}
        for job in jobs_made:
            subprocess.run(
                [sys.executable, "-m", "cairn", "clean", "--snapshots", "--job", job.name],
                env=env,
                capture_output=True,
            )
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
