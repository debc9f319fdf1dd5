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

Beside cairn it runs the same job as the MINIMAL hand-written docker CLI script (the floor,
printed as ``minimal``): ``docker build -q`` once (cached); per trial ``docker run -d`` on the
engine's default bridge; per step ``cp`` of the solution, ``exec`` of solve.sh, ``cp`` of the
tests, ``exec`` of test.sh and ``cp`` of the reward out; then ``rm -f``; ``-n`` trials at once
from a thread pool. It is what the engine allows on this machine with no harness at all (no
image check, no isolation of trials from each other, no clean ``/tests`` or process checks, no
results written). Beside it, ``SDK`` is the same least work through the Docker SDK
(``bench/_sdkfloor.py``: no CLI process per call, one exec runs the test and prints the reward;
the process first imports typer, pydantic, asyncio and docker, as cairn must), and
``SDK+net`` the same with a bridge network created for each trial and removed after it. The
CLI script's wall includes its one ``docker build -q`` of the (cached) image; the SDK floors
are given the image id (the
isolation of cairn's and Harbor's ``public`` trials: concurrent trials cannot reach each
other). The floors are references for the least work, not proofs that nothing is faster.

Usage:
    HARBOR=/work/harbor-venv/bin/harbor python3 bench/job_throughput.py [--trials 16] [-n 8] \\
        [--rounds 3]
    python3 bench/job_throughput.py --prestart-ab 3 [--trials 8 -n 1]
    python3 bench/job_throughput.py --compare /path/to/other/src --rounds 5

With ``--compare SRC`` (another checkout's ``src`` folder, e.g. the code before a change) it
runs this cairn and that one ``--rounds`` times each, interleaved, and prints the medians and
their ratio instead (neither the minimal script nor Harbor is run then).

Exit status 0 when every cairn trial passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _jobbench import (  # noqa: E402
    Run,
    api_version,
    engine_cpu,
    run_cairn,
    sdk_floor,
    summary,
    write_task,
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=16, help="trials (attempts of the task)")
    ap.add_argument("-n", type=int, default=8, help="concurrent trials (default 8)")
    ap.add_argument("-e", default="docker", help="sandbox backend (default docker)")
    ap.add_argument("--steps", type=int, default=2, help="steps of the task (default 2)")
    ap.add_argument("--prestart", action="store_true", help="run cairn with --prestart")
    ap.add_argument(
        "--prestart-ab",
        type=int,
        default=0,
        metavar="R",
        help="R interleaved rounds of cairn with and without --prestart",
    )
    ap.add_argument(
        "--compare",
        type=Path,
        metavar="SRC",
        help="also run the cairn of this src folder, interleaved (before/after)",
    )
    ap.add_argument("--rounds", type=int, default=None, help="rounds (default 3; --compare: 5)")
    args = ap.parse_args()
    if args.compare:
        return compare(args)
    if args.prestart_ab:
        return prestart_ab(args)
    rounds = args.rounds if args.rounds is not None else 3
    if rounds < 1:
        ap.error("--rounds must be at least 1")
    med = statistics.median
    with tempfile.TemporaryDirectory(prefix="cairn-bench-") as tmp:
        root = Path(tmp)
        # the harness's default network for all (Harbor's docker environment refuses no-network)
        task = write_task(root / "tasks", "multi-step", steps=args.steps, network=None)
        jobs = root / "jobs"
        base = ["run", "-p", str(task), "-a", "oracle", "-e", args.e, "--jobs-dir", str(jobs)]
        run_cairn([*base, "--job-name", "warm-up"])  # image build, .pyc files
        image = (
            subprocess.run(
                ["docker", "build", "-q", str(task / "environment")], check=True, capture_output=True
            )
            .stdout.decode()
            .strip()
        )  # cached: its id
        api = api_version()
        got: dict[str, list[Run]] = {"cairn": [], "minimal": [], "SDK": [], "SDK+net": []}
        summaries: list[dict] = []
        loads = [os.getloadavg()[0]]

        def one(kind: str, r: int) -> None:
            if kind == "cairn":
                name = f"bench-{r}"
                got[kind].append(
                    run_cairn(
                        [
                            *base,
                            "--job-name",
                            name,
                            "-k",
                            str(args.trials),
                            "-n",
                            str(args.n),
                            *(["--prestart"] if args.prestart else []),
                        ]
                    )
                )
                summaries.append(summary(jobs / name))
            elif kind == "minimal":
                got[kind].append(run_floor(task, args.trials, args.n, args.steps))
            else:
                got[kind].append(
                    run_sdk_floor(
                        task,
                        args.trials,
                        args.n,
                        args.steps,
                        image,
                        api,
                        "own" if kind == "SDK+net" else "bridge",
                    )
                )
            loads.append(os.getloadavg()[0])

        kinds = list(got)
        for r in range(rounds):  # the order rotated every round
            for kind in kinds[r % len(kinds) :] + kinds[: r % len(kinds)]:
                one(kind, r)
        print(f"load average (1 min) during the rounds: {min(loads):.2f} .. {max(loads):.2f}")
        print(
            f"job: {args.steps}-step task x {args.trials} trials, -n {args.n}, "
            f"backend {args.e}; medians of {rounds} rotated rounds"
        )
        outcomes: dict[str, int] = {}
        for sm in summaries:
            for k, v in sm["outcomes"].items():
                outcomes[k] = outcomes.get(k, 0) + v
        print(f"cairn outcomes: {', '.join(f'{k} {v}' for k, v in outcomes.items() if v)}")
        print(f"{'':8s} {'wall':>8s} {'trials/min':>11s} {'own CPU':>9s} {'engine CPU':>11s}")
        walls = {k: med(x.wall for x in v) for k, v in got.items()}
        notes = {
            "cairn": f"peak RSS {max(x.rss_mib for x in got['cairn']):.0f} MiB",
            "minimal": "docker CLI script",
            "SDK": "bench/_sdkfloor.py: the least work through the Docker SDK",
            "SDK+net": "the same, each trial on a bridge network of its own",
        }
        for kind, runs in got.items():
            ok = (
                ""
                if kind == "cairn"
                else f"{min(x.code for x in runs)} of {args.trials} trials with reward 1 (worst); "
            )
            print(
                f"{kind:8s} {walls[kind]:7.1f}s {args.trials / walls[kind] * 60:11.1f} "
                f"{med(x.cpu_sec for x in runs):8.1f}s {med(x.engine_cpu_sec for x in runs):10.1f}s"
                f"   ({ok}{notes[kind]}; walls {_walls(runs)})"
            )
        wall = walls["cairn"]
        best = min(walls["minimal"], walls["SDK"])
        print(
            f"throughput ratio cairn / minimal script: {walls['minimal'] / wall:.2f}x; "
            f"cairn / SDK floor: {walls['SDK'] / wall:.2f}x; cairn / SDK floor with a "
            f"network per trial: {walls['SDK+net'] / wall:.2f}x"
        )
        harbor = os.environ.get("HARBOR")
        if harbor:
            exe = Path(harbor) / "bin" / "harbor" if Path(harbor).is_dir() else Path(harbor)
            subprocess.run(
                [
                    str(exe),
                    "run",
                    "--path",
                    str(task),
                    "--agent",
                    "oracle",
                    "-k",
                    "1",
                    "-o",
                    str(root / "harbor-warm-up"),
                ],
                capture_output=True,
                check=False,
            )  # its image build
            e0, r0 = engine_cpu(), resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            p = subprocess.run(
                [
                    str(exe),
                    "run",
                    "--path",
                    str(task),
                    "--agent",
                    "oracle",
                    "-k",
                    str(args.trials),
                    "--n-concurrent",
                    str(args.n),
                    "-o",
                    str(root / "harbor-jobs"),
                ],
                capture_output=True,
                check=False,
            )
            h = time.perf_counter() - t0
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            hcpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
            rewards = [
                json.loads(f.read_text()).get("verifier_result") or {}
                for f in (root / "harbor-jobs").glob("*/*/result.json")
            ]
            n_ok = sum(1 for r in rewards if (r.get("rewards") or {}).get("reward") == 1)
            print(
                f"{'harbor':8s} {h:7.1f}s {args.trials / h * 60:11.1f} {hcpu:8.1f}s "
                f"{engine_cpu() - e0:10.1f}s   (exit {p.returncode}; {len(rewards)} trial "
                f"results, {n_ok} with reward 1; one run, after a 1-trial warm-up)"
            )
            if p.returncode != 0:
                print(p.stdout.decode("utf-8", "replace")[-1500:])
                print(p.stderr.decode("utf-8", "replace")[-1500:])
            print(
                f"throughput ratio cairn / Harbor: {h / wall:.2f}x (target >= 10); "
                f"minimal script / Harbor: {h / walls['minimal']:.2f}x, SDK floor / Harbor: "
                f"{h / walls['SDK']:.2f}x (the faster floor: {h / best:.2f}x), with a "
                f"network per trial: {h / walls['SDK+net']:.2f}x"
            )
        else:
            print("Harbor: skipped (set HARBOR to a Harbor install's `harbor` executable)")
        passed = all(r.code == 0 for r in got["cairn"]) and all(
            sm["n_passed"] == args.trials for sm in summaries
        )
        return 0 if passed else 1


def _floor_trial(task: Path, steps: int, image: str) -> bool:
    """One trial of the minimal docker CLI script; True when every step's reward is 1 (a
    step whose test writes no reward fails the trial)."""

    def docker(*a: str) -> bytes:
        p = subprocess.run(["docker", *a], check=False, capture_output=True)
        if p.returncode != 0 and a[0] == "cp" and a[-1] == "-":
            return b""  # no reward file
        p.check_returncode()
        return p.stdout

    cid = (
        docker("run", "-d", "--init", "--label", "cairn.bench=1", image, "sleep", "infinity").decode().strip()
    )
    ok = True
    try:
        docker("exec", cid, "mkdir", "-p", "/logs/verifier")
        dirs = [task] if steps == 1 else [task / "steps" / f"s{i}" for i in range(1, steps + 1)]
        for d in dirs:
            docker("cp", str(d / "solution"), f"{cid}:/solution")
            docker("exec", cid, "bash", "-c", "bash /solution/solve.sh && rm -rf /solution")
            docker("cp", str(d / "tests"), f"{cid}:/tests")
            docker(
                "exec",
                cid,
                "bash",
                "-c",
                "rm -f /logs/verifier/reward.txt; bash /tests/test.sh; rm -rf /tests",
            )  # a stale or planted reward is not read
            out = docker("cp", f"{cid}:/logs/verifier/reward.txt", "-")  # a tar stream
            if not out:
                ok = False
                continue
            with tarfile.open(fileobj=io.BytesIO(out)) as tar:
                member = tar.extractfile("reward.txt")
                ok = ok and member is not None and member.read().strip() == b"1"
    finally:
        docker("rm", "-f", cid)
    return ok


def run_floor(task: Path, trials: int, n: int, steps: int) -> Run:
    """The job as the minimal docker CLI script (module docstring): wall, CPU of the script's
    children, engine CPU; ``code`` holds how many trials scored 1 on every step."""
    from concurrent.futures import ThreadPoolExecutor

    e0, r0 = engine_cpu(), resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    image = (
        subprocess.run(["docker", "build", "-q", str(task / "environment")], check=True, capture_output=True)
        .stdout.decode()
        .strip()
    )  # cached after cairn's
    with ThreadPoolExecutor(n) as pool:
        oks = list(pool.map(lambda _: _floor_trial(task, steps, image), range(trials)))
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return Run(wall=wall, rss_mib=0.0, cpu_sec=cpu, code=sum(oks), engine_cpu_sec=engine_cpu() - e0)


def run_sdk_floor(
    task: Path, trials: int, n: int, steps: int, image: str, api: str, network: str = "bridge"
) -> Run:
    """The job through ``bench/_sdkfloor.py job`` (a process importing cairn's libraries, then
    the least work per trial through the Docker SDK, ``n`` trials at once) with the image id
    and API version read once by the caller: wall, CPU of that process, engine CPU; ``code``
    holds how many trials scored 1 on every step."""
    e0, r0 = engine_cpu(), resource.getrusage(resource.RUSAGE_CHILDREN)
    wall, got = sdk_floor(["job", str(task), image, api, str(trials), str(n), str(steps), network])
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return Run(wall=wall, rss_mib=0.0, cpu_sec=cpu, code=got["ok"], engine_cpu_sec=engine_cpu() - e0)


@dataclass
class Rounds:
    """The runs of :func:`interleaved`, per variant label, and the 1-minute load averages."""

    runs: dict[str, list[Run]]
    loads: list[float]
    ok: bool


def interleaved(
    args: argparse.Namespace,
    variants: dict[str, tuple[list[str], Path | None]],
    rounds: int,
    *,
    alternate: bool,
    after: Callable[[str, Path], None] | None = None,
) -> Rounds:
    """Run the 2-step job once per variant as a warm-up, then ``rounds`` rounds of every
    variant (label → extra ``cairn run`` options and the ``src`` folder, ``None``: this
    repository's), in the given order, or reversed every other round with ``alternate``;
    ``after(label, job_dir)`` reads a run's job folder before it is deleted."""
    runs: dict[str, list[Run]] = {k: [] for k in variants}
    ok = True
    with tempfile.TemporaryDirectory(prefix="cairn-bench-") as tmp:
        root = Path(tmp)
        task = write_task(root / "tasks", "multi-step", steps=args.steps, network=None)
        jobs = root / "jobs"
        base = ["run", "-p", str(task), "-a", "oracle", "-e", args.e, "--jobs-dir", str(jobs)]
        for label, (_, src) in variants.items():
            run_cairn([*base, "--job-name", f"warm-up-{label.strip('-')}"], src=src)
        loads = [os.getloadavg()[0]]
        for r in range(rounds):
            order = list(variants.items())
            if alternate and r % 2:
                order.reverse()
            for label, (extra, src) in order:
                name = f"{label.strip('-')}-{r}"
                run = run_cairn(
                    [*base, "--job-name", name, "-k", str(args.trials), "-n", str(args.n), *extra], src=src
                )
                s = summary(jobs / name)
                ok = ok and run.code == 0 and s["n_passed"] == args.trials
                runs[label].append(run)
                if after is not None:
                    after(label, jobs / name)
                loads.append(os.getloadavg()[0])
    return Rounds(runs, loads, ok)


def _walls(runs: list[Run]) -> str:
    return ", ".join(f"{r.wall:.1f}" for r in runs)


def compare(args: argparse.Namespace) -> int:
    """Interleaved rounds of this cairn and the one in ``args.compare``; medians, ratio."""
    this = Path(__file__).resolve().parents[1] / "src"
    srcs = {"this": this, "--compare": args.compare.resolve()}
    args.rounds = args.rounds if args.rounds is not None else 5
    if args.rounds < 1:
        sys.exit("--rounds must be at least 1")
    got = interleaved(args, {k: ([], v) for k, v in srcs.items()}, args.rounds, alternate=True)
    med = statistics.median
    wall = {k: med(r.wall for r in v) for k, v in got.runs.items()}
    engine = {k: med(r.engine_cpu_sec for r in v) for k, v in got.runs.items()}
    print(f"load average (1 min) during the rounds: {min(got.loads):.2f} .. {max(got.loads):.2f}")
    print(
        f"job: {args.steps}-step task x {args.trials} trials, -n {args.n}, backend {args.e}, "
        f"{args.rounds} interleaved rounds"
    )
    print(f"{'':10s} {'wall':>8s} {'trials/min':>11s} {'engine CPU':>11s}")
    for label, src in srcs.items():
        print(
            f"{label:10s} {wall[label]:7.1f}s {args.trials / wall[label] * 60:11.1f} "
            f"{engine[label]:10.1f}s   (walls {_walls(got.runs[label])}; {src})"
        )
    print(
        f"throughput ratio this / --compare: {wall['--compare'] / wall['this']:.2f}x"
        f"; engine CPU ratio: {engine['this'] / engine['--compare']:.2f}x"
    )
    return 0 if got.ok else 1


def prestart_ab(args: argparse.Namespace) -> int:
    """Interleaved rounds of the cairn job without and with ``--prestart``; medians, ratio."""
    waits: list[float] = []

    def read_waits(label: str, job_dir: Path) -> None:
        if label == "on":
            for f in job_dir.rglob("result.json"):
                t = json.loads(f.read_text()).get("timings") or {}
                if t.get("prestarted"):
                    waits.append(t.get("environment_sec") or 0.0)

    got = interleaved(
        args,
        {"off": ([], None), "on": (["--prestart"], None)},
        args.prestart_ab,
        alternate=False,
        after=read_waits,
    )
    med = statistics.median
    print(f"load average (1 min) during the rounds: {min(got.loads):.2f} .. {max(got.loads):.2f}")
    print(
        f"job: {args.steps}-step task x {args.trials} trials, -n {args.n}, backend {args.e}, "
        f"{args.prestart_ab} interleaved rounds"
    )
    print(f"{'':14s} {'wall':>8s} {'trials/min':>11s} {'own CPU':>9s} {'engine CPU':>11s}")
    walls = {k: med(r.wall for r in v) for k, v in got.runs.items()}
    for variant, runs in got.runs.items():
        print(
            f"{'prestart ' + variant:14s} {walls[variant]:7.1f}s "
            f"{args.trials / walls[variant] * 60:11.1f} {med(r.cpu_sec for r in runs):8.1f}s "
            f"{med(r.engine_cpu_sec for r in runs):10.1f}s   (walls {_walls(runs)})"
        )
    print(
        f"pre-started sandboxes used: {len(waits)} of {args.trials * args.prestart_ab} "
        f"trials; median wait for one {med(waits) if waits else 0.0:.2f} s"
    )
    print(f"throughput ratio on / off: {walls['off'] / walls['on']:.2f}x")
    return 0 if got.ok else 1


if __name__ == "__main__":
    sys.exit(main())
