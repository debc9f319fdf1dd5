"""Job throughput (design §12): a 2-step task, 16 trials at ``-n 8`` on docker, side by side.

Prints trials per minute, the cairn process's CPU and peak RSS, and the Docker engine's CPU
meanwhile (read from /proc: on a shared engine it includes other users' work). When ``HARBOR``
names a Harbor install (its ``harbor`` executable, or a folder holding ``bin/harbor``; Harbor
0.26 reads the same multi-step task folder), the same job runs through Harbor right after, with
the same figures (Harbor's CPU: it and the processes it waited for), and the throughput ratio
(target: cairn ≥ 10× Harbor's trials per minute).

With ``--prestart-ab R`` it runs the cairn job ``R`` times with and ``R`` times without
``--prestart``, interleaved (off, on, off, on, ...), and prints the median of each and their
ratio instead (Harbor is not run then).

Usage:
    HARBOR=/work/harbor-venv/bin/harbor python3 bench/job_throughput.py [--trials 16] [-n 8]
    python3 bench/job_throughput.py --prestart-ab 3 [--trials 8 -n 1]

Exit status 0 when every cairn trial passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _jobbench import engine_cpu, run_cairn, summary, write_task  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=16, help="trials (attempts of the task)")
    ap.add_argument("-n", type=int, default=8, help="concurrent trials (default 8)")
    ap.add_argument("-e", default="docker", help="sandbox backend (default docker)")
    ap.add_argument("--steps", type=int, default=2, help="steps of the task (default 2)")
    ap.add_argument("--prestart", action="store_true", help="run cairn with --prestart")
    ap.add_argument("--prestart-ab", type=int, default=0, metavar="R",
                    help="R interleaved rounds of cairn with and without --prestart")
    args = ap.parse_args()
    if args.prestart_ab:
        return prestart_ab(args)
    with tempfile.TemporaryDirectory(prefix="cairn-bench-") as tmp:
        root = Path(tmp)
        # the harness's default network for both (Harbor's docker environment refuses no-network)
        task = write_task(root / "tasks", "multi-step", steps=args.steps, network=None)
        jobs = root / "jobs"
        base = ["run", "-p", str(task), "-a", "oracle", "-e", args.e, "--jobs-dir", str(jobs)]
        run_cairn([*base, "--job-name", "warm-up"])  # image build, .pyc files
        run = run_cairn([*base, "--job-name", "bench", "-k", str(args.trials),
                         "-n", str(args.n), *(["--prestart"] if args.prestart else [])])
        wall, rss, code = run.wall, run.rss_mib, run.code
        s = summary(jobs / "bench")
        print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"job: {args.steps}-step task x {args.trials} trials, -n {args.n}, "
              f"backend {args.e}")
        print(f"cairn outcomes: {', '.join(f'{k} {v}' for k, v in s['outcomes'].items() if v)}"
              f"; mean reward {s['mean_reward']}")
        print(f"{'':8s} {'wall':>8s} {'trials/min':>11s} {'own CPU':>9s} {'engine CPU':>11s}")
        print(f"{'cairn':8s} {wall:7.1f}s {args.trials / wall * 60:11.1f} {run.cpu_sec:8.1f}s "
              f"{run.engine_cpu_sec:10.1f}s   (peak RSS {rss:.0f} MiB)")
        harbor = os.environ.get("HARBOR")
        if harbor:
            exe = Path(harbor) / "bin" / "harbor" if Path(harbor).is_dir() else Path(harbor)
            e0, r0 = engine_cpu(), resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            p = subprocess.run([str(exe), "run", "--path", str(task), "--agent", "oracle",
                                "-k", str(args.trials), "--n-concurrent", str(args.n),
                                "-o", str(root / "harbor-jobs")], capture_output=True,
                               check=False)
            h = time.perf_counter() - t0
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            hcpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
            rewards = [json.loads(f.read_text()).get("verifier_result") or {}
                       for f in (root / "harbor-jobs").glob("*/*/result.json")]
            n_ok = sum(1 for r in rewards if (r.get("rewards") or {}).get("reward") == 1)
            print(f"{'harbor':8s} {h:7.1f}s {args.trials / h * 60:11.1f} {hcpu:8.1f}s "
                  f"{engine_cpu() - e0:10.1f}s   (exit {p.returncode}; {len(rewards)} trial "
                  f"results, {n_ok} with reward 1)")
            if p.returncode != 0:
                print(p.stdout.decode("utf-8", "replace")[-1500:])
                print(p.stderr.decode("utf-8", "replace")[-1500:])
            print(f"throughput ratio cairn / Harbor: {h / wall:.2f}x (target >= 10)")
        else:
            print("Harbor: skipped (set HARBOR to a Harbor install's `harbor` executable)")
        return 0 if code == 0 and s["n_passed"] == args.trials else 1


def prestart_ab(args: argparse.Namespace) -> int:
    """Interleaved rounds of the cairn job without and with ``--prestart``; medians, ratio."""
    walls: dict[str, list[float]] = {"off": [], "on": []}
    cpu: dict[str, list[float]] = {"off": [], "on": []}
    engine: dict[str, list[float]] = {"off": [], "on": []}
    waits: list[float] = []
    ok = True
    with tempfile.TemporaryDirectory(prefix="cairn-bench-") as tmp:
        root = Path(tmp)
        task = write_task(root / "tasks", "multi-step", steps=args.steps, network=None)
        jobs = root / "jobs"
        base = ["run", "-p", str(task), "-a", "oracle", "-e", args.e, "--jobs-dir", str(jobs),
                "-k", str(args.trials), "-n", str(args.n)]
        run_cairn([*base[:-4], "--job-name", "warm-up"])
        loads = [os.getloadavg()[0]]
        for r in range(args.prestart_ab):
            for variant in ("off", "on"):
                name = f"{variant}-{r}"
                run = run_cairn([*base, "--job-name", name,
                                 *(["--prestart"] if variant == "on" else [])])
                s = summary(jobs / name)
                ok = ok and run.code == 0 and s["n_passed"] == args.trials
                walls[variant].append(run.wall)
                cpu[variant].append(run.cpu_sec)
                engine[variant].append(run.engine_cpu_sec)
                if variant == "on":
                    for f in (jobs / name).rglob("result.json"):
                        t = json.loads(f.read_text()).get("timings") or {}
                        if t.get("prestarted"):
                            waits.append(t.get("environment_sec") or 0.0)
                loads.append(os.getloadavg()[0])
    med = statistics.median
    print(f"load average (1 min) during the rounds: {min(loads):.2f} .. {max(loads):.2f}")
    print(f"job: {args.steps}-step task x {args.trials} trials, -n {args.n}, backend {args.e}, "
          f"{args.prestart_ab} interleaved rounds")
    print(f"{'':14s} {'wall':>8s} {'trials/min':>11s} {'own CPU':>9s} {'engine CPU':>11s}")
    for variant in ("off", "on"):
        w = med(walls[variant])
        print(f"{'prestart ' + variant:14s} {w:7.1f}s {args.trials / w * 60:11.1f} "
              f"{med(cpu[variant]):8.1f}s {med(engine[variant]):10.1f}s   "
              f"(walls {', '.join(f'{x:.1f}' for x in walls[variant])})")
    n_pre = len(waits)
    print(f"pre-started sandboxes used: {n_pre} of {args.trials * args.prestart_ab} trials; "
          f"median wait for one {med(waits) if waits else 0.0:.2f} s")
    print(f"throughput ratio on / off: {med(walls['off']) / med(walls['on']):.2f}x")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
