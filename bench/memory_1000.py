"""Peak memory of the cairn process on a 1,000-trial job (design §12: under 200 MB).

A single-step task run with the ``nop`` agent (the verifier still runs), N trials (default
1000) as attempts of one task, ``-n 16`` at once, on docker. A small job (``--small``, default
50 trials) runs first, so the printout shows how peak memory grows with the number of trials.

Usage:
    python3 bench/memory_1000.py [--trials 1000] [--small 50] [-n 16] [-e docker]

Exit status 0 when the peak is under the limit (default 200 MiB), 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _jobbench import run_cairn, summary, write_task  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--small", type=int, default=50, help="trials of the comparison job")
    ap.add_argument("-n", type=int, default=16, help="concurrent trials")
    ap.add_argument("-e", default="docker", help="sandbox backend")
    ap.add_argument("--limit", type=float, default=200.0, help="peak RSS target, MiB")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="cairn-bench-") as tmp:
        root = Path(tmp)
        task = write_task(root / "tasks", "nop-target", steps=1)
        jobs = root / "jobs"
        base = ["run", "-p", str(task), "-a", "nop", "-e", args.e, "--jobs-dir", str(jobs), "-n", str(args.n)]
        rows = []
        for n in (args.small, args.trials):
            run = run_cairn([*base, "--job-name", f"mem-{n}", "-k", str(n)])
            s = summary(jobs / f"mem-{n}")
            rows.append((n, run))
            print(
                f"{n:5d} trials: peak RSS {run.rss_mib:7.1f} MiB, wall {run.wall:7.1f} s "
                f"({n / run.wall:.2f} trials/s), cairn CPU {run.cpu_sec:.1f} s, "
                f"outcomes {', '.join(f'{k} {v}' for k, v in s['outcomes'].items() if v)}",
                flush=True,
            )
    (n0, r0), (n1, r1) = rows
    slope = (r1.rss_mib - r0.rss_mib) / max(1, n1 - n0) * 1024
    print(
        f"growth: {slope:.1f} KiB per trial; peak at {n1} trials {r1.rss_mib:.1f} MiB "
        f"(limit {args.limit:.0f} MiB): {'PASS' if r1.rss_mib < args.limit else 'FAIL'}"
    )
    return 0 if r1.rss_mib < args.limit else 1


if __name__ == "__main__":
    sys.exit(main())
