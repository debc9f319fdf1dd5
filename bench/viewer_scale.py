"""``cairn view`` on a 10,000-trial job: job-page latency and server memory, beside a baseline.

Generates (once; reused with ``--dir``) a job folder of N trials of a 3-step task written through
the real store (:class:`cairn.results.store.TrialStore`, ``write_summary``): mixed outcomes,
rewards, error kinds and stop steps, each step folder with an instruction, verifier output and a
reward file. Then:

- baseline: a child process that reads and parses every ``result.json`` once (the least work
  any viewer of these files must do for a cold summary), its wall time and peak RSS;
- viewer: ``cairn view DIR --port 0`` in a child process; wall time of the job page (first
  request and median of repeats), a filtered + sorted page, page 100, a trial page; its RSS
  after all requests (VmRSS and peak VmHWM from /proc).

Target (issue 18): the job page answers in < 1 s and the server's memory stays bounded.

Usage: python3 bench/viewer_scale.py [--trials 10000] [--dir /tmp/cairn-viewer-bench] [-n 5]
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
sys.path.insert(0, str(SRC))

from cairn.errors import Category, ErrorKind, Phase  # noqa: E402
from cairn.results.model import (  # noqa: E402
    AgentRef,
    ErrorInfo,
    JobMeta,
    Outcome,
    StepResult,
    StepSource,
    StepTimings,
    StopReason,
    TaskRef,
    Tokens,
    TrialResult,
)
from cairn.results.store import JobPaths, TrialStore, write_job_json, write_summary  # noqa: E402
from cairn.results.summary import summarize_job  # noqa: E402

STEPS = ("fetch", "fix", "ship")
TASKS = [f"bench/task-{i:03d}" for i in range(100)]


def _trial(i: int) -> TrialResult:
    task = TASKS[i % len(TASKS)]
    kind = i % 10
    now = datetime(2026, 12, 1, tzinfo=UTC)
    rows, outcome, error, stop = [], Outcome.COMPLETED, None, None
    for idx, name in enumerate(STEPS, start=1):
        timings = StepTimings(setup_sec=0.1, agent_sec=2.0 + idx, verifier_sec=0.5)
        if kind == 9 and idx == 2:  # errored at step 2
            error = ErrorInfo(
                kind=ErrorKind.REWARD_MISSING,
                category=Category.TASK,
                phase=Phase.VERIFIER,
                step=name,
                message="no reward written",
            )
            rows.append(
                StepResult(index=idx, name=name, source=StepSource.ERROR, error=error, timings=timings)
            )
            outcome = Outcome.ERRORED
            break
        reward = 0.0 if (kind in (7, 8) and idx == 1) else 1.0
        rows.append(
            StepResult(
                index=idx,
                name=name,
                source=StepSource.VERIFIER,
                reward=reward,
                rewards={"reward": reward},
                passed=reward >= 1.0,
                agent_exit="ok",
                timings=timings,
                verifier_exit_code=0,
                reward_file="reward.txt",
                tokens=Tokens(prompt=900, completion=120),
                cost_usd=0.001,
            )
        )
        if reward < 1.0 and idx < len(STEPS):
            stop = StopReason(kind="min_reward", step=name, key="reward", value=reward, threshold=1.0)
            outcome = Outcome.STOPPED
            break
    steps_run = len(rows)
    rows += [
        StepResult(index=j, name=STEPS[j - 1], source=StepSource.NOT_RUN)
        for j in range(len(rows) + 1, len(STEPS) + 1)
    ]
    counted = [r.reward for r in rows if r.reward is not None]
    reward = sum(counted) / len(counted) if counted else None
    return TrialResult(
        trial_id=f"{i:08x}" + "0" * 56,
        trial_name="",
        attempt=1 + (i // len(TASKS)) % 3,
        task=TaskRef(name=task, content_hash="0" * 64),
        agent=AgentRef(name="oracle"),
        backend="local",
        outcome=outcome,
        error=error,
        reward=reward,
        rewards={"reward": reward} if reward is not None else None,
        passed=outcome is Outcome.COMPLETED and reward == 1.0,
        steps_total=len(STEPS),
        steps_run=steps_run,
        stopped_after=stop.step if stop else None,
        stop_reason=stop,
        tokens=Tokens(prompt=900 * steps_run, completion=120 * steps_run),
        cost_usd=0.001 * steps_run,
        started_at=now,
        finished_at=now,
        steps=rows,
    )


def generate(job: Path, n: int) -> None:
    """Write an N-trial job folder through the store."""
    write_job_json(
        job,
        JobMeta(
            job_name=job.name,
            cairn_version="bench",
            backend="local",
            config={"agent": "oracle", "model": None, "backend": "local"},
            started_at=datetime(2026, 12, 1, tzinfo=UTC),
        ),
    )
    results = []
    for i in range(n):
        r = _trial(i)
        paths = JobPaths(job).trial(r.task.name, r.attempt, r.trial_id)
        r = r.model_copy(update={"trial_name": paths.root.name})
        store = TrialStore(paths).create()
        for s in r.steps:
            if s.source is StepSource.NOT_RUN:
                continue
            sp = store.step_dirs(s.index, s.name)
            store.write_instruction(s.index, s.name, f"Do step {s.name} of {r.task.name}.\n")
            (sp.verifier / "test-stdout.txt").write_text(f"checking {s.name}\nok\n")
            if s.reward is not None:
                (sp.verifier / "reward.txt").write_text(f"{s.reward}\n")
        store.write_result(r)
        results.append(r)
        if (i + 1) % 1000 == 0:
            print(f"  generated {i + 1}/{n}", file=sys.stderr, flush=True)
    write_summary(job, summarize_job(results))


BASELINE = r"""
import json, os, resource, sys, time
t = time.perf_counter()
trials = os.path.join(sys.argv[1], "trials")
n = 0
for name in os.listdir(trials):
    try:
        with open(os.path.join(trials, name, "result.json"), "rb") as f:
            json.loads(f.read())
        n += 1
    except OSError:
        pass
print(n, time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def _get(port: int, path: str) -> tuple[float, int, int]:
    t = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("GET", path)
    r = conn.getresponse()
    body = r.read()
    conn.close()
    return time.perf_counter() - t, r.status, len(body)


def _rss(pid: int) -> tuple[int, int]:
    text = Path(f"/proc/{pid}/status").read_text()
    get = lambda key: int(re.search(rf"{key}:\s+(\d+) kB", text).group(1))  # noqa: E731
    return get("VmRSS"), get("VmHWM")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10_000)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/cairn-viewer-bench"))
    ap.add_argument("-n", type=int, default=5, help="repeats per request")
    a = ap.parse_args()
    job = a.dir / f"job-{a.trials}"
    if not (job / "summary.json").is_file():
        print(f"generating {a.trials} trials in {job} …", file=sys.stderr)
        t = time.perf_counter()
        generate(job, a.trials)
        print(f"  took {time.perf_counter() - t:.0f} s", file=sys.stderr)
    env = {**os.environ, "PYTHONPATH": str(SRC)}

    base = subprocess.run(
        [sys.executable, "-c", BASELINE, str(job)], capture_output=True, text=True, env=env, check=True
    ).stdout.split()
    base_n, base_sec, base_kb = int(base[0]), float(base[1]), int(base[2])
    idle = subprocess.run(
        [sys.executable, "-c", "import resource;print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"],
        capture_output=True,
        text=True,
        check=True,
    )
    interp_kb = int(idle.stdout)

    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "cairn", "view", str(job), "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        m = re.search(r":(\d+)/", line)
        if m is None:
            proc.wait(timeout=30)
            raise SystemExit(f"cairn view did not start: {line}{proc.stderr.read()}")
        port = int(m.group(1))
        ready = time.perf_counter() - t0
        jp = f"/jobs/{job.name}/"
        first = _get(port, jp)
        reps = [_get(port, jp)[0] for _ in range(a.n)]
        filt = [
            _get(port, jp + "?outcome=stopped&sort=reward&desc=1&task=bench%2Ftask-007")[0]
            for _ in range(a.n)
        ]
        deep = [_get(port, jp + "?page=100")[0] for _ in range(a.n)]
        trial = sorted(p.name for p in (job / "trials").iterdir())[4321]
        tri = [_get(port, f"/jobs/{job.name}/trials/{trial}/")[0] for _ in range(a.n)]
        assert first[1] == 200
        rss, hwm = _rss(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    med = statistics.median
    print(f"job folder: {base_n} trials ({job})")
    print(f"{'':38} {'wall':>9} {'memory':>24}")
    print(
        f"{'baseline: parse every result.json':38} {base_sec:8.3f}s {base_kb / 1024:8.1f} MB peak RSS"
        f"  (bare interpreter {interp_kb / 1024:.1f} MB)"
    )
    print(f"{'cairn view: start + index (ready)':38} {ready:8.3f}s")
    print(f"{'cairn view: job page, first request':38} {first[0]:8.3f}s  ({first[2] // 1024} KiB)")
    print(f"{'cairn view: job page, median':38} {med(reps):8.3f}s")
    print(f"{'cairn view: filtered + sorted page':38} {med(filt):8.3f}s")
    print(f"{'cairn view: page 100':38} {med(deep):8.3f}s")
    print(f"{'cairn view: a trial page':38} {med(tri):8.3f}s")
    print(
        f"{'cairn view: server RSS after requests':38} {'':9} {rss / 1024:8.1f} MB (peak {hwm / 1024:.1f} MB)"
    )
    print(
        f"ratios: job page / baseline parse = {med(reps) / base_sec:.2f}; "
        f"server peak RSS / baseline peak RSS = {hwm / base_kb:.2f}"
    )
    print(f"target: job page < 1 s -> {'OK' if max(first[0], med(reps)) < 1.0 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
