"""RL-shaped throughput (#31): 128 trials of a two-step task at ``-n 16``, cairn beside the floor.

Trainers run a task as a group of many attempts at once (group sizes of 8-64); this is that
shape on docker: a 2-step task (``bench/_jobbench.py``'s, each step solved by the oracle and
checked by a test), ``--trials`` trials (default 128), ``-n`` at once (default 16), on the
harness's default network (cairn's ``public``: a bridge network per trial, so concurrent trials
cannot reach each other). Side by side, in rotated order every round, medians of ``--rounds``:

- ``cairn``: ``python3 -m cairn run -p TASK -a oracle -e docker -k TRIALS -n N``;
- ``cairn --no-relay``: the same with the job's model relay switched off. The oracle makes no
  model calls and is not model-driven, so the relay never starts for it; the two must read the
  same (the relay guard: its ratio is printed, and the run checks that no process of the
  relayed side imported ``cairn.relay`` or ``aiohttp``, from one ``-X importtime`` trial);
- ``SDK+net``: ``bench/_sdkfloor.py job ... own``: the least work of the same trials through the
  Docker SDK, each trial on a bridge network created for it and removed after it (the floor
  for isolated trials; design §12);
- ``SDK+pool``: the same, each trial on a network of its own taken over from a trial whose
  container is gone (``pool``: what cairn's bridge reuse does, at the floor).

Printed per side: wall, trials per minute, the process's own CPU per trial, and the Docker
engine's CPU per trial meanwhile (read from /proc; on a shared engine it includes other users'
work, so read it beside the floor's). Then cairn's throughput as a fraction of the floor's
(target >= 0.9) and the relay guard's ratio.

Usage:
    python3 bench/rl_throughput.py [--trials 128] [-n 16] [--rounds 3]

Exit status 0 when every cairn trial passed and the relay did not start, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _jobbench import REPO, Run, api_version, engine_cpu, run_cairn, sdk_floor, summary, write_task  # noqa: E402


def run_sdk_net(task: Path, trials: int, n: int, image: str, api: str, mode: str = "own") -> Run:
    """The job through ``bench/_sdkfloor.py job ... MODE`` (``own`` or ``pool``): wall, CPU,
    engine CPU; ``code`` is how many trials scored 1 on both steps."""
    e0, r0 = engine_cpu(), resource.getrusage(resource.RUSAGE_CHILDREN)
    wall, got = sdk_floor(["job", str(task), image, api, str(trials), str(n), "2", mode])
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return Run(wall=wall, rss_mib=0.0, cpu_sec=cpu, code=got["ok"], engine_cpu_sec=engine_cpu() - e0)


def relay_imports(base: list[str], jobs: Path) -> list[str]:
    """The relay's modules (``cairn.relay*``, ``aiohttp*``) one oracle trial imports: run
    once under ``-X importtime`` (its stderr lists every module imported)."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "cairn", *base, "--job-name", "relay-guard"],
        capture_output=True,
        env=env,
        check=False,
    )
    if p.returncode != 0 or summary(jobs / "relay-guard")["n_passed"] != 1:
        sys.exit(f"the relay-guard trial failed:\n{p.stderr.decode('utf-8', 'replace')[-2000:]}")
    mods = []
    for line in p.stderr.decode("utf-8", "replace").splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name.startswith(("cairn.relay", "aiohttp")):
                mods.append(name)
    return mods


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=128, help="trials (default 128)")
    ap.add_argument("-n", type=int, default=16, help="concurrent trials (default 16)")
    ap.add_argument("--rounds", type=int, default=3, help="rotated rounds (default 3)")
    ap.add_argument("--target", type=float, default=0.9, help="cairn / floor throughput target")
    args = ap.parse_args()
    if args.rounds < 1 or args.trials < 1 or args.n < 1:
        ap.error("--rounds, --trials and -n must be at least 1")
    med = statistics.median
    with tempfile.TemporaryDirectory(prefix="cairn-bench-rl-") as tmp:
        root = Path(tmp)
        task = write_task(root / "tasks", "two-step", steps=2, network=None)
        jobs = root / "jobs"
        base = ["run", "-p", str(task), "-a", "oracle", "-e", "docker", "--jobs-dir", str(jobs)]
        run_cairn([*base, "--job-name", "warm-up"])  # image build, .pyc files
        image = (
            subprocess.run(
                ["docker", "build", "-q", str(task / "environment")], check=True, capture_output=True
            )
            .stdout.decode()
            .strip()
        )
        api = api_version()
        leaked = relay_imports(base, jobs)
        sides: dict[str, list[str] | None] = {
            "cairn": [],
            "cairn --no-relay": ["--no-relay"],
            "SDK+net": None,
            "SDK+pool": None,
        }
        got: dict[str, list[Run]] = {k: [] for k in sides}
        ok = True
        loads = [os.getloadavg()[0]]
        kinds = list(sides)
        for r in range(args.rounds):
            for kind in kinds[r % len(kinds) :] + kinds[: r % len(kinds)]:
                extra = sides[kind]
                if extra is None:
                    mode = "pool" if kind == "SDK+pool" else "own"
                    got[kind].append(run_sdk_net(task, args.trials, args.n, image, api, mode))
                else:
                    name = f"{kind.replace(' ', '').replace('-', '')}-{r}"
                    run = run_cairn(
                        [*base, "--job-name", name, "-k", str(args.trials), "-n", str(args.n), *extra]
                    )
                    ok = ok and run.code == 0 and summary(jobs / name)["n_passed"] == args.trials
                    got[kind].append(run)
                loads.append(os.getloadavg()[0])
    print(f"load average (1 min) during the rounds: {min(loads):.2f} .. {max(loads):.2f}")
    print(
        f"job: 2-step task x {args.trials} trials, -n {args.n}, docker; "
        f"medians of {args.rounds} rotated rounds"
    )
    print(f"{'':17s} {'wall':>8s} {'trials/min':>11s} {'CPU/trial':>10s} {'engine CPU/trial':>17s}")
    wall = {k: med(x.wall for x in v) for k, v in got.items()}
    for kind, runs in got.items():
        note = (
            f"{min(x.code for x in runs)} of {args.trials} trials with reward 1 (worst)"
            if sides[kind] is None
            else f"peak RSS {max(x.rss_mib for x in runs):.0f} MiB"
        )
        print(
            f"{kind:17s} {wall[kind]:7.1f}s {args.trials / wall[kind] * 60:11.1f} "
            f"{med(x.cpu_sec for x in runs) / args.trials * 1000:8.1f}ms "
            f"{med(x.engine_cpu_sec for x in runs) / args.trials * 1000:15.1f}ms"
            f"   (walls {', '.join(f'{x.wall:.1f}' for x in runs)}; {note})"
        )
    ratio = wall["SDK+net"] / wall["cairn"]
    guard = wall["cairn --no-relay"] / wall["cairn"]
    print(f"throughput cairn / SDK floor with pooled networks: {wall['SDK+pool'] / wall['cairn']:.2f}x")
    print(f"throughput cairn / SDK floor with a network per trial: {ratio:.2f}x (target >= {args.target})")
    print(
        f"relay guard: cairn / cairn --no-relay throughput {guard:.2f}x; relay modules imported by "
        f"an oracle trial: {', '.join(leaked) if leaked else 'none'}"
    )
    return 0 if ok and not leaked else 1


if __name__ == "__main__":
    sys.exit(main())
