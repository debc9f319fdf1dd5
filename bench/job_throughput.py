"""Job throughput (design §12): a 3-step task, N trials (default 200) at ``-n 8`` on docker.

Prints trials per second, mean wall time per trial, and the cairn process's peak resident
memory. When ``HARBOR`` names a Harbor install (its ``harbor`` executable, or a folder holding
``bin/harbor``), runs the same job through Harbor and prints the throughput ratio (target:
cairn ≥ 5× Harbor's throughput); Harbor is not installed here, so the script says it skips it.

Usage:
    python3 bench/job_throughput.py [--trials 200] [-n 8] [-e docker]

Exit status 0 when every trial passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _jobbench import run_cairn, summary, write_task  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=200, help="trials (attempts of the task)")
    ap.add_argument("-n", type=int, default=8, help="concurrent trials (default 8)")
    ap.add_argument("-e", default="docker", help="sandbox backend (default docker)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="cairn-bench-") as tmp:
        root = Path(tmp)
        task = write_task(root / "tasks", "three-steps", steps=3)
        jobs = root / "jobs"
        base = ["run", "-p", str(task), "-a", "oracle", "-e", args.e, "--jobs-dir", str(jobs)]
        run_cairn([*base, "--job-name", "warm-up"])  # image build, .pyc files
        run = run_cairn([*base, "--job-name", "bench", "-k", str(args.trials),
                         "-n", str(args.n)])
        wall, rss, code = run.wall, run.rss_mib, run.code
        s = summary(jobs / "bench")
        print(f"job: 3-step task x {args.trials} trials, -n {args.n}, backend {args.e}")
        print(f"outcomes: {', '.join(f'{k} {v}' for k, v in s['outcomes'].items() if v)}; "
              f"mean reward {s['mean_reward']}")
        print(f"wall time:        {wall:8.1f} s")
        print(f"throughput:       {args.trials / wall:8.2f} trials/s "
              f"({wall / args.trials * 1000:.0f} ms per trial)")
        print(f"trial time:       mean {s['timings']['total_sec_mean']:.2f} s inside cairn")
        print(f"cairn peak RSS:   {rss:8.1f} MiB")
        print(f"CPU: cairn process {run.cpu_sec:.1f} s, Docker engine processes "
              f"{run.engine_cpu_sec:.1f} s, over {wall:.1f} s wall on {os.cpu_count()} cores")
        harbor = os.environ.get("HARBOR")
        if harbor:
            exe = Path(harbor) / "bin" / "harbor" if Path(harbor).is_dir() else Path(harbor)
            t0 = time.perf_counter()
            subprocess.run([str(exe), "run", "--path", str(task), "--agent", "oracle",
                            "-k", str(args.trials), "--n-concurrent", str(args.n),
                            "-o", str(root / "harbor-jobs")], capture_output=True, check=True)
            h = time.perf_counter() - t0
            print(f"harbor wall time: {h:8.1f} s ({args.trials / h:.2f} trials/s)")
            print(f"throughput ratio cairn / Harbor: {h / wall:.2f}x (target >= 5)")
        else:
            print("Harbor: skipped (set HARBOR to a Harbor install's `harbor` executable to "
                  "compare; Harbor is not installed here)")
        return 0 if code == 0 and s["n_passed"] == args.trials else 1


if __name__ == "__main__":
    sys.exit(main())
