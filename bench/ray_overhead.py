"""Per-trial overhead of ``--executor ray`` against the in-process ``local`` executor (issue 20:
target < 100 ms per trial).

Runs the same job — a 3-step task on the local sandbox backend, one trial at a time (``-n 1``)
— with each executor, alternating in rounds so both see the same machine load, and times every
trial from the run loop's start to its end (:class:`~cairn.events.JobObserver`
``trial_started`` → ``trial_finished``). The first trial of each job is a warm-up (Ray ships
the task folder to the node's cache then) and is left out.
The difference of the medians is what Ray adds per trial: task submission, the trial folder's
tar round trip, the event actor, and the driver installing the folder.

Usage: ``python bench/ray_overhead.py [--trials N] [--ray-address ADDR]`` (root or
unprivileged user namespaces, for the local backend). Without ``--ray-address`` a fresh local
Ray is started (its start-up time is not counted).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _jobbench import write_task  # noqa: E402

from cairn.events import JobObserver  # noqa: E402
from cairn.job import arun_job  # noqa: E402
from cairn.plan import JobConfig, TrialPlan  # noqa: E402

TARGET_MS = 100.0


class _Timer(JobObserver):
    def __init__(self) -> None:
        self.start: dict[str, float] = {}
        self.ms: list[float] = []

    def trial_started(self, plan: TrialPlan) -> None:
        self.start[plan.trial_id] = time.perf_counter()

    def trial_finished(self, plan: TrialPlan) -> None:
        self.ms.append((time.perf_counter() - self.start[plan.trial_id]) * 1000)


def _run(task: Path, jobs: Path, executor: str, trials: int, address: str | None, name: str) -> list[float]:
    timer = _Timer()
    cfg = JobConfig(
        paths=(task,),
        attempts=trials,
        backend="local",
        n_concurrent=1,
        jobs_dir=jobs,
        job_name=name,
        executor=executor,
        ray_address=address,
    )
    result = asyncio.run(arun_job(cfg, observer=timer))
    bad = [r.trial_name for r in result.results if not r.passed]
    if bad:
        raise SystemExit(f"{executor}: trials did not pass: {bad[:3]}")
    return timer.ms[1:]


def main() -> None:
    """Print the median ms per trial of both executors side by side."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=6, help="trials per job (one is a warm-up)")
    ap.add_argument("--rounds", type=int, default=3, help="local, ray jobs alternating")
    ap.add_argument("--ray-address", default=os.environ.get("RAY_ADDRESS"))
    args = ap.parse_args()
    import ray

    from cairn.job.executors.ray import SLOT, backend_resource

    if args.ray_address:
        ray.init(address=args.ray_address, logging_level="WARNING")
    else:  # one fresh local Ray for every round (its start-up is not timed)
        ray.init(
            address="local",
            include_dashboard=False,
            logging_level="WARNING",
            resources={SLOT: 2, backend_resource("local"): 2},
        )
    local: list[float] = []
    remote: list[float] = []
    try:
        with tempfile.TemporaryDirectory(prefix="cairn-raybench-") as tmp:
            task = write_task(Path(tmp) / "tasks", "three", steps=3)
            jobs = Path(tmp) / "jobs"
            for i in range(args.rounds):
                local += _run(task, jobs, "local", args.trials, None, f"local-{i}")
                remote += _run(task, jobs, "ray", args.trials, args.ray_address, f"ray-{i}")
    finally:
        ray.shutdown()
    ray_ms = remote
    lm, rm = statistics.median(local), statistics.median(ray_ms)
    print(
        f"trials timed per executor: {len(local)} ({args.rounds} rounds); load average "
        f"{os.getloadavg()[0]:.2f}"
    )
    print(f"{'executor':<10}{'median ms/trial':>18}{'min':>10}{'max':>10}")
    for name, ms in (("local", local), ("ray", ray_ms)):
        print(f"{name:<10}{statistics.median(ms):>18.1f}{min(ms):>10.1f}{max(ms):>10.1f}")
    over = rm - lm
    print(
        f"ray overhead per trial: {over:.1f} ms (ratio {rm / lm:.2f}x; target < "
        f"{TARGET_MS:.0f} ms: {'met' if over < TARGET_MS else 'NOT met'})"
    )


if __name__ == "__main__":
    main()
