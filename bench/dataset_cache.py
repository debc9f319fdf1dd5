"""Datasets by name (issue 16): what fetching and the task cache cost, side by side.

Makes a repository of N tiny tasks, serves it with ``git daemon`` on 127.0.0.1 and a
registry.json from a file, then prints medians of:

- cold: ``cairn datasets download`` into an empty cache vs ``git clone --depth 1`` of the same
  repository (the baseline: the least a git fetch of it can cost);
- warm: ``cairn run -d`` from the filled cache (no network) vs ``cairn run -p`` of the same
  task folders (the baseline: no dataset resolution at all), oracle on the local backend.

Usage: ``python3 bench/dataset_cache.py [--tasks 20] [-n 5]``. Nothing leaves the machine.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "helpers")]

from gitserve import GitDaemon, bare_clone, commit_all, init_repo  # noqa: E402
from taskgen import reward_if, write_task  # noqa: E402


def wall(cmd: list[str], env: dict[str, str], cwd: Path) -> float:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=20)
    ap.add_argument("-n", type=int, default=5)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="cairn-bench-ds-"))
    try:
        work = init_repo(tmp / "work")
        for i in range(args.tasks):
            write_task(
                work / "tasks",
                f"t{i:03d}",
                solve=f"echo {i} > /app/out\n",
                test=reward_if(f"grep -qx {i} /app/out"),
            )
        commit = commit_all(work)
        (tmp / "srv").mkdir()
        bare_clone(work, tmp / "srv" / "tasks.git")
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        cairn = [sys.executable, "-m", "cairn"]
        with GitDaemon(tmp / "srv") as d:
            reg = tmp / "registry.json"
            reg.write_text(
                json.dumps(
                    [
                        {
                            "name": "bench",
                            "version": "1",
                            "description": "",
                            "tasks": [
                                {
                                    "name": f"t{i:03d}",
                                    "git_url": d.url("tasks.git"),
                                    "git_commit_id": commit,
                                    "path": f"tasks/t{i:03d}",
                                }
                                for i in range(args.tasks)
                            ],
                        }
                    ]
                )
            )
            cold, clone = [], []
            for k in range(args.n):
                cenv = {**env, "CAIRN_CACHE_DIR": str(tmp / f"cache-{k}")}
                cold.append(
                    wall([*cairn, "datasets", "download", "bench@1", "--registry-path", str(reg)], cenv, tmp)
                )
                dest = tmp / f"clone-{k}"
                clone.append(
                    wall(["git", "clone", "-q", "--depth", "1", d.url("tasks.git"), str(dest)], env, tmp)
                )
        # the daemon is stopped: warm runs have no network
        wenv = {**env, "CAIRN_CACHE_DIR": str(tmp / "cache-0")}
        warm, plain = [], []
        for k in range(args.n):
            warm.append(
                wall(
                    [
                        *cairn,
                        "run",
                        "-d",
                        "bench@1",
                        "--registry-path",
                        str(reg),
                        "-a",
                        "oracle",
                        "-e",
                        "local",
                        "--jobs-dir",
                        str(tmp / "jobs"),
                        "--job-name",
                        f"warm-{k}",
                    ],
                    wenv,
                    tmp,
                )
            )
            plain.append(
                wall(
                    [
                        *cairn,
                        "run",
                        "-p",
                        str(work / "tasks"),
                        "-a",
                        "oracle",
                        "-e",
                        "local",
                        "--jobs-dir",
                        str(tmp / "jobs"),
                        "--job-name",
                        f"plain-{k}",
                    ],
                    env,
                    tmp,
                )
            )
        m = statistics.median
        print(f"{args.tasks} tasks, median of {args.n}")
        print(
            f"cold: cairn datasets download {m(cold):.2f} s   git clone --depth 1 "
            f"{m(clone):.2f} s   ratio {m(cold) / m(clone):.2f}"
        )
        print(
            f"warm: cairn run -d (cache) {m(warm):.2f} s   cairn run -p {m(plain):.2f} s   "
            f"ratio {m(warm) / m(plain):.2f}"
        )
    finally:
        for p in tmp.rglob("*"):
            if p.is_dir() and not p.is_symlink():
                p.chmod(0o755)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
