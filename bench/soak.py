"""Soak: a long job of a 3-step task, sampling the cairn process and the engine (issue #12).

Runs ``cairn run`` of a 3-step task as N attempts (default 200) at ``-n 16`` on each backend
asked for, as a child process, and every 0.5 s samples: the child's resident memory
(``VmRSS``) and open file descriptors (``/proc/<pid>/fd``), the number of the job's
containers the engine holds (docker; label ``cairn.job_dir``) or of its local sandbox
folders (local), and the trials finished so far (result.json files). Afterwards it checks
that every trial has exactly one result and that nothing of the job is left.

Printed per backend: peak RSS / fds / sandboxes, and the growth per 100 trials of RSS and fds
(median over the last quarter of the run minus the median over the second quarter, scaled by
the trials finished between them). Targets (issue #12): RSS < 200 MB, no fd or sandbox
growth, zero lost or duplicated results.

Usage:
    python3 bench/soak.py [--trials 200] [-n 16] [-e docker -e local]

Exit status 0 when every target is met, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _jobbench import REPO, write_task  # noqa: E402


def _rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def _fds(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def _sandboxes(backend: str, job_dir: Path, client) -> int:
    if backend == "docker":
        flt = {"label": f"cairn.job_dir={job_dir.absolute()}"}
        return len(client.api.containers(all=True, filters=flt))
    sys.path.insert(0, str(REPO / "src"))
    from cairn.sandbox.local.backend import find_local_sandboxes

    return sum(1 for _, m in find_local_sandboxes() if str(m.get("job_dir") or "") == str(job_dir.absolute()))


def _growth(samples: list[tuple[int, float]], total: int) -> float | None:
    """Per 100 trials: median of the last quarter minus median of the second quarter."""
    a = [(d, v) for d, v in samples if total * 0.25 <= d < total * 0.5]
    b = [(d, v) for d, v in samples if d >= total * 0.75]
    if not a or not b:
        return None
    da, db = statistics.median(d for d, _ in a), statistics.median(d for d, _ in b)
    if db <= da:
        return None
    return (statistics.median(v for _, v in b) - statistics.median(v for _, v in a)) / (db - da) * 100


def soak(backend: str, trials: int, n: int, root: Path) -> dict:
    """Run one soak job on ``backend``; return its figures."""
    task = write_task(root / "tasks", f"soak-{backend}", steps=3)
    job = root / "jobs" / f"soak-{backend}"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    client = None
    if backend == "docker":
        import docker

        client = docker.from_env(timeout=60)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cairn",
            "run",
            "-p",
            str(task),
            "-e",
            backend,
            "-k",
            str(trials),
            "-n",
            str(n),
            "--jobs-dir",
            str(root / "jobs"),
            "--job-name",
            job.name,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    rss: list[tuple[int, float]] = []
    fds: list[tuple[int, float]] = []
    boxes: list[int] = []
    while proc.poll() is None:
        done = len(list(job.glob("trials/*/result.json")))
        r, f = _rss_mib(proc.pid), _fds(proc.pid)
        if r is not None and f is not None:
            rss.append((done, r))
            fds.append((done, f))
        try:
            boxes.append(_sandboxes(backend, job, client))
        except Exception:  # noqa: BLE001 - a busy engine: skip this sample
            pass
        time.sleep(0.5)
    err = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
    wall = time.monotonic() - t0
    keys = []
    for p in job.glob("trials/*/result.json"):
        r = json.loads(p.read_text(encoding="utf-8"))
        keys.append((r["task"]["name"], r["attempt"], r["outcome"]))
    left = _sandboxes(backend, job, client)
    if client is not None:
        client.close()
    attempts = [k[1] for k in keys]
    return {
        "backend": backend,
        "exit": proc.returncode,
        "wall_sec": wall,
        "trials": trials,
        "results": len(keys),
        "lost": trials - len(set(attempts)),
        "duplicated": len(attempts) - len(set(attempts)),
        "completed": sum(1 for k in keys if k[2] == "completed"),
        "peak_rss_mib": max((v for _, v in rss), default=None),
        "rss_growth_mib_per_100": _growth(rss, trials),
        "peak_fds": max((v for _, v in fds), default=None),
        "fd_growth_per_100": _growth(fds, trials),
        "peak_sandboxes": max(boxes, default=None),
        "sandboxes_left": left,
        "stderr_tail": err[-1500:] if proc.returncode not in (0,) else "",
    }


def _fmt(v) -> str:
    return "n/a" if v is None else f"{v:.1f}" if isinstance(v, float) else str(v)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("-n", type=int, default=16, help="concurrent trials")
    ap.add_argument("-e", action="append", help="backend (repeatable; default docker and local)")
    ap.add_argument("--rss-limit", type=float, default=200.0, help="peak RSS target, MiB")
    args = ap.parse_args()
    ok = True
    with tempfile.TemporaryDirectory(prefix="cairn-soak-") as tmp:
        for backend in args.e or ["docker", "local"]:
            fig = soak(backend, args.trials, args.n, Path(tmp))
            print(
                f"soak {backend}: {fig['trials']} trials of a 3-step task at -n {args.n}, "
                f"{fig['wall_sec']:.0f} s, exit {fig['exit']}"
            )
            for key in (
                "results",
                "completed",
                "lost",
                "duplicated",
                "peak_rss_mib",
                "rss_growth_mib_per_100",
                "peak_fds",
                "fd_growth_per_100",
                "peak_sandboxes",
                "sandboxes_left",
            ):
                print(f"  {key:24} {_fmt(fig[key])}")
            if fig["stderr_tail"]:
                print("  stderr: " + fig["stderr_tail"].replace("\n", "\n          "))
            checks = {
                "exit 0": fig["exit"] == 0,
                "none lost": fig["lost"] == 0,
                "none duplicated": fig["duplicated"] == 0,
                f"peak RSS < {args.rss_limit:g} MiB": (fig["peak_rss_mib"] or 0) < args.rss_limit,
                "fd growth < 1 per 100 trials": (fig["fd_growth_per_100"] or 0.0) < 1.0,
                f"at most {args.n} sandboxes at once": (fig["peak_sandboxes"] or 0) <= args.n,
                "no sandbox left": fig["sandboxes_left"] == 0,
            }
            missed = [k for k, v in checks.items() if not v]
            print("  targets: " + ("all met" if not missed else "MISSED " + "; ".join(missed)))
            ok &= not missed
    print("targets met" if ok else "TARGETS NOT MET")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
