"""How long `cairn --help` takes (design §12: under 0.3 s), next to a bare interpreter start.

Runs `cairn --help` N times in fresh processes (alternating with `python -c pass`, so both see
the same machine load) and prints the median wall times and their ratio.

Usage:
    python3 bench/help_time.py [-n 20] [--limit 0.3]

Exit status 0 when the median is under the limit, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def cairn_command() -> list[str]:
    """The console script installed next to this interpreter (not a shim), else `-m cairn`."""
    script = Path(sys.executable).parent / "cairn"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    found = shutil.which("cairn")
    if found and "shims" not in found:
        return [found]
    return [sys.executable, "-m", "cairn"]


def wall_time(argv: list[str]) -> float:
    """Seconds one process takes from spawn to exit (output discarded)."""
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> int:
    """Run the benchmark and print medians and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=20, help="runs of each command (default 20)")
    parser.add_argument("--limit", type=float, default=0.3, help="target median in seconds")
    args = parser.parse_args()

    cairn = cairn_command() + ["--help"]
    baseline = [sys.executable, "-c", "pass"]
    wall_time(cairn)  # warm the page cache and .pyc files
    cairn_times, base_times = [], []
    for _ in range(args.n):
        cairn_times.append(wall_time(cairn))
        base_times.append(wall_time(baseline))
    c, b = statistics.median(cairn_times), statistics.median(base_times)
    print(f"command:               {' '.join(cairn)}")
    print(f"cairn --help median:   {c * 1000:7.1f} ms  (n={args.n})")
    print(f"python -c pass median: {b * 1000:7.1f} ms")
    print(f"ratio:                 {c / b:7.2f}x")
    print(f"cairn's own cost:      {(c - b) * 1000:7.1f} ms")
    ok = c < args.limit
    print(f"target < {args.limit * 1000:.0f} ms: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
