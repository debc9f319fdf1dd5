"""A trivial single-step task with the oracle on docker: cairn vs a minimal docker CLI script.

Measured side by side, interleaved (the order rotated every round, so all see the same machine
load and none always runs after another), medians over N rounds,
as whole-process wall times:

- cairn: ``python3 -m cairn run -p TASK -a oracle -e docker`` (one trial, cached image);
- floor: the MINIMAL hand-written docker CLI script for the same task — ``docker build -q``
  (cached), ``docker run -d``, ``cp`` the solution in, ``exec`` solve.sh, ``cp`` the tests in,
  ``exec`` test.sh, ``exec cat`` the reward, ``rm -f``: 3 execs + 2 copies. It is not a replay
  of cairn's own execs: the floor is the least work the trial needs. Target: cairn ≤ 1.15× it;
- the SDK floor (``bench/_sdkfloor.py trivial``): a process that imports typer, pydantic,
  asyncio and the Docker SDK (what ``cairn run`` cannot do without) and then does the trial's
  least work through the SDK (no image check: it is given the image id; one exec runs the
  test and prints the reward). Its ratio to the script is how much room these libraries leave
  under the target on this machine (a reference, not a proof: nothing is overlapped);
- engine calls per step for both, counted from the engine's event stream (``exec_create``,
  ``extract-to-dir``, ``archive-path`` of the trial's container), beside the wall times;
- Harbor, when the environment variable ``HARBOR`` names a Harbor install (the ``harbor``
  executable, or a folder holding ``bin/harbor``): ``harbor run --path TASK --agent oracle``.

With ``--compare SRC`` (a ``src`` folder of another cairn checkout, e.g. the code before a
change), that cairn runs too, interleaved with this one, and both are printed side by side.

cairn runs with its bytecode cache (``.pyc``) as an installed package has it:
``PYTHONDONTWRITEBYTECODE`` is dropped from the cairn processes' environment, so the warm-up
run writes the cache (otherwise every run compiles all of cairn again, ~0.2 s).

Usage:
    python3 bench/trivial_vs_floor.py [-n 7] [--image debian:bookworm-slim] [--limit 1.15]
    python3 bench/trivial_vs_floor.py -e local [-n 7]   # local backend, whole process,
        # beside python3 -c 'import typer, asyncio; from pydantic import BaseModel'
    python3 bench/trivial_vs_floor.py -e local --compare /path/to/other/src

Exit status 0 when cairn / floor ≤ limit, 1 otherwise.
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
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from _jobbench import api_version, sdk_floor  # noqa: E402


def docker_cli() -> str:
    """The docker CLI (``/usr/local/bin/docker`` first, else PATH)."""
    for cand in ("/usr/local/bin/docker", shutil.which("docker")):
        if cand and Path(cand).exists():
            return cand
    sys.exit("docker CLI not found")


def write_task(root: Path, image: str, *, network: str | None = "no-network") -> Path:
    """A trivial single-step task: solve touches a file, the test checks it. ``network=None``
    leaves the network mode to the harness (Harbor 0.26's docker environment refuses
    ``no-network``, so Harbor runs a copy with its default network)."""
    task = root / ("trivial" if network else "trivial-default-net")
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "solution").mkdir()
    toml = '[task]\nname = "bench/trivial"\n'
    if network:
        toml += f'\n[environment]\nnetwork_mode = "{network}"\n'
    (task / "task.toml").write_text(toml)
    (task / "instruction.md").write_text("Create /app/done.\n")
    (task / "environment" / "Dockerfile").write_text(f"FROM {image}\nWORKDIR /app\n")
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\ntouch /app/done\n")
    (task / "tests" / "test.sh").write_text(
        "#!/bin/bash\nmkdir -p /logs/verifier\nif test -f /app/done; then echo 1 > "
        "/logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n"
    )
    return task


class EngineCalls:
    """Counts the engine calls (execs, archive uploads and downloads) made on containers whose
    name holds ``marker``, from the engine's event stream, while the block runs."""

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.calls: list[str] = []

    def __enter__(self) -> EngineCalls:
        import docker

        self._client = docker.from_env()
        self._done = threading.Event()
        self._stream = self._client.events(decode=True, since=time.time() - 1, filters={"type": "container"})

        def listen() -> None:
            for e in self._stream:
                if self.marker not in (e.get("Actor", {}).get("Attributes", {}).get("name") or ""):
                    continue
                a = e.get("Action", "")
                if a.startswith("exec_create: "):
                    self.calls.append("exec")
                elif a == "extract-to-dir":
                    self.calls.append("put-archive")
                elif a == "archive-path":
                    self.calls.append("get-archive")
                elif a == "destroy":
                    self._done.set()
                    return

        self._th = threading.Thread(target=listen, daemon=True)
        self._th.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.wait(20)
        self._stream.close()
        self._client.close()


SRC = REPO / "src"
LOCAL_LIBS = "typer, asyncio; from pydantic import BaseModel"
"""What a local ``cairn run`` cannot run without: the CLI (Typer), the trial's event loop, the
task and result models (pydantic's model machinery: ``import pydantic`` alone is lazy)."""


def cairn_env(src: Path = SRC) -> dict[str, str]:
    """The environment of a cairn process: ``src`` first on ``PYTHONPATH``, bytecode cache on."""
    env = {**os.environ, "PYTHONPATH": str(src) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def run_cairn(
    task: Path, jobs: Path, name: str, backend: str = "docker", src: Path = SRC
) -> tuple[float, dict]:
    """One whole ``cairn run`` process of the cairn in ``src``; (wall seconds, result.json)."""
    wall, _cpu, result = run_cairn_cpu(task, jobs, name, backend, src)
    return wall, result


def run_cairn_cpu(
    task: Path, jobs: Path, name: str, backend: str = "docker", src: Path = SRC
) -> tuple[float, float, dict]:
    """:func:`run_cairn`, also with the CPU seconds (user + sys) of the cairn process and its
    children (the sandbox's init and the task's scripts), from ``wait4``: (wall, cpu, result)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cairn",
                "run",
                "-p",
                str(task),
                "-a",
                "oracle",
                "-e",
                backend,
                "--jobs-dir",
                str(jobs),
                "--job-name",
                name,
            ],
            stdout=out,
            stderr=err,
            env=cairn_env(src),
        )
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        if p.returncode != 0:
            out.seek(0)
            err.seek(0)
            sys.exit(f"cairn run failed ({p.returncode}):\n{out.read().decode()}\n{err.read().decode()}")
    (result,) = [json.loads(f.read_text()) for f in (jobs / name).glob("trials/*/result.json")]
    return wall, usage.ru_utime + usage.ru_stime, result


def floor_minimal(docker: str, task: Path, scratch: Path, name: str) -> float:
    """The minimal hand-written docker CLI script for the task; wall seconds. build -q (cached),
    run -d, cp solution in, exec solve.sh, cp tests in, exec test.sh, exec cat reward, rm -f."""
    t0 = time.perf_counter()
    ok = lambda *a: subprocess.run([docker, *a], capture_output=True, check=True)  # noqa: E731
    image = ok("build", "-q", str(task / "environment")).stdout.decode().strip()
    ok(
        "run",
        "-d",
        "--init",
        "--network",
        "none",
        "--label",
        "cairn.bench=1",
        "--name",
        name,
        image,
        "sleep",
        "infinity",
    )
    ok("cp", str(task / "solution"), f"{name}:/solution")
    ok("exec", name, "bash", "/solution/solve.sh")
    ok("cp", str(task / "tests"), f"{name}:/tests")
    ok("exec", name, "bash", "/tests/test.sh")
    reward = ok("exec", name, "cat", "/logs/verifier/reward.txt").stdout.decode().strip()
    ok("rm", "-f", name)
    wall = time.perf_counter() - t0
    assert reward == "1", reward
    return wall


def floor_sdk(task: Path, image: str, api: str, name: str | None = None) -> tuple[float, float]:
    """``bench/_sdkfloor.py trivial``: a process that imports what ``cairn run`` must (typer,
    pydantic, asyncio, the Docker SDK) and does the trial's least work through the SDK;
    (whole-process wall seconds, its import seconds). Exits if it fails or scores below 1."""
    wall, got = sdk_floor(["trivial", str(task), image, api, *([name] if name else [])])
    if got["ok"] != 1:
        sys.exit(f"bench/_sdkfloor.py: the trivial trial did not score 1: {got}")
    return wall, got["import_sec"]


def floor_imports(modules: str) -> float:
    """Wall seconds of a process that only runs ``import MODULES``."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", f"import {modules}"], check=True, env=cairn_env())
    return time.perf_counter() - t0


def harbor_command() -> list[str] | None:
    """The Harbor executable named by ``HARBOR``, or None."""
    h = os.environ.get("HARBOR")
    if not h:
        return None
    p = Path(h)
    exe = p / "bin" / "harbor" if p.is_dir() else p
    if not exe.exists():
        sys.exit(f"HARBOR={h}: no harbor executable there")
    return [str(exe)]


def run_harbor(cmd: list[str], task: Path, jobs: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(
        [
            *cmd,
            "run",
            "--path",
            str(task),
            "--agent",
            "oracle",
            "--job-name",
            f"h-{uuid.uuid4().hex[:8]}",
            "-o",
            str(jobs),
        ],
        capture_output=True,
        check=True,
    )
    return time.perf_counter() - t0


def ms(x: float) -> str:
    return f"{x * 1000:8.1f} ms"


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def local_main(n: int, image: str, compare: Path | None) -> int:
    """The local backend: the trivial trial's whole ``cairn run`` process, median of ``n``
    (interleaved with the cairn in ``compare`` when given)."""
    print(f"load average before: {load()}")
    srcs = [SRC] + ([compare] if compare else [])
    walls: dict[Path, list[float]] = {s: [] for s in srcs}
    cpus: dict[Path, list[float]] = {s: [] for s in srcs}
    trials: dict[Path, list[float]] = {s: [] for s in srcs}
    libs: list[float] = []
    with tempfile.TemporaryDirectory(prefix="cairn-bench-") as tmp:
        root = Path(tmp)
        task = write_task(root / "tasks", image)
        for k, src in enumerate(srcs):
            run_cairn(task, root / "jobs", f"warm-up-{k}", "local", src)
        for i in range(n):  # the order alternates, so a load burst does not favour one side
            for src in srcs if i % 2 == 0 else srcs[::-1]:
                k = srcs.index(src)
                wall, cpu, res = run_cairn_cpu(task, root / "jobs", f"r{i}-{k}", "local", src)
                walls[src].append(wall)
                cpus[src].append(cpu)
                trials[src].append(res["timings"]["total_sec"])
            libs.append(floor_imports(LOCAL_LIBS))
    print(f"rounds: {n}, interleaved; load average after: {load()}")
    med = statistics.median
    for src in srcs:
        c, ct = med(walls[src]), med(trials[src])
        label = "" if src == SRC else f"   [--compare {src}]"
        print(f"cairn run -e local (whole process) {ms(c)}  (target <= 250 ms){label}")
        print(f"  of which the trial itself        {ms(ct)}")
        print(f"  process start, imports, job      {ms(c - ct)}")
        print(f"  CPU (user + sys, with children)  {ms(med(cpus[src]))}  (min {ms(min(cpus[src])).strip()})")
    print(
        f"floor: interpreter + imports only {ms(med(libs))}  (python3 -c 'import {LOCAL_LIBS}':"
        " paid before any work)"
    )
    if compare:
        print(f"ratio this / --compare             {med(walls[SRC]) / med(walls[compare]):8.2f}x")
        print(f"CPU ratio this / --compare         {med(cpus[SRC]) / med(cpus[compare]):8.2f}x")
    return 0 if med(walls[SRC]) <= 0.25 else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=7, help="rounds (medians taken; default 7)")
    ap.add_argument("--image", default="debian:bookworm-slim", help="base image (local)")
    ap.add_argument("--limit", type=float, default=1.15, help="target cairn / floor ratio")
    ap.add_argument(
        "-e",
        default="docker",
        choices=("docker", "local"),
        help="backend; local: cairn's whole process alone (target <= 0.25 s)",
    )
    ap.add_argument(
        "--compare",
        type=Path,
        metavar="SRC",
        help="also run the cairn of this src folder, interleaved (before/after)",
    )
    args = ap.parse_args()
    compare = args.compare.resolve() if args.compare else None
    if args.e == "local":
        return local_main(args.n, args.image, compare)
    docker = docker_cli()
    harbor = harbor_command()
    print(f"load average before: {load()}")
    with tempfile.TemporaryDirectory(prefix="cairn-bench-") as tmp:
        root = Path(tmp)
        task = write_task(root / "tasks", args.image)
        h_task = write_task(root / "tasks", args.image, network=None)
        jobs = root / "jobs"
        if harbor:  # Harbor's first run builds its image of the task
            run_harbor(harbor, h_task, root / "harbor-jobs")
        run_cairn(task, jobs, "warm-up")  # builds and caches the image, warms .pyc files
        if compare:
            run_cairn(task, jobs, "warm-up-compare", src=compare)
        floor_minimal(docker, task, root, f"cairn-bench-min-{uuid.uuid4().hex[:8]}")
        image = (
            subprocess.run(
                [docker, "build", "-q", str(task / "environment")], check=True, capture_output=True
            )
            .stdout.decode()
            .strip()
        )
        api = api_version(docker)
        floor_sdk(task, image, api)  # warm-up
        # engine calls of one trial each, from the engine's events
        with EngineCalls("bench-trivial") as cairn_calls:
            run_cairn(task, jobs, "count")
        marker = f"cairn-bench-min-{uuid.uuid4().hex[:8]}"
        with EngineCalls(marker) as floor_calls:
            floor_minimal(docker, task, root, marker)
        marker = f"cairn-bench-sdk-{uuid.uuid4().hex[:8]}"
        with EngineCalls(marker) as sdk_calls:
            floor_sdk(task, image, api, marker)
        c_wall, c_trial, f_min, h_wall = [], [], [], []
        c_cpu: list[float] = []
        o_cpu: list[float] = []
        s_wall: list[float] = []
        s_imp: list[float] = []
        o_wall: list[float] = []
        o_trial: list[float] = []

        def one(kind: str, i: int) -> None:
            if kind == "cairn":
                wall, cpu, res = run_cairn_cpu(task, jobs, f"r{i}")
                c_wall.append(wall)
                c_cpu.append(cpu)
                c_trial.append(res["timings"]["total_sec"])
            elif kind == "compare":
                wall, cpu, res = run_cairn_cpu(task, jobs, f"c{i}", src=compare)
                o_wall.append(wall)
                o_cpu.append(cpu)
                o_trial.append(res["timings"]["total_sec"])
            elif kind == "minimal":
                f_min.append(floor_minimal(docker, task, root, f"cairn-bench-min-{uuid.uuid4().hex[:8]}"))
            elif kind == "sdk":
                wall, imp = floor_sdk(task, image, api)
                s_wall.append(wall)
                s_imp.append(imp)
            else:
                h_wall.append(run_harbor(harbor, h_task, root / "harbor-jobs"))

        kinds = [
            "cairn",
            *(["compare"] if compare else []),
            "minimal",
            "sdk",
            *(["harbor"] if harbor else []),
        ]
        for i in range(args.n):  # rotated every round: no variant always follows another
            for kind in kinds[i % len(kinds) :] + kinds[: i % len(kinds)]:
                one(kind, i)
    med = statistics.median
    c, ct, fm = med(c_wall), med(c_trial), med(f_min)

    def calls(ec: EngineCalls) -> str:
        return (
            f"{len(ec.calls):2d} ({ec.calls.count('exec')} exec, "
            f"{ec.calls.count('put-archive')} put-archive, "
            f"{ec.calls.count('get-archive')} get-archive)"
        )

    print(f"rounds: {args.n}, interleaved; load average after: {load()}")
    print("engine calls per step (exec + archive, from engine events; 1 step):")
    print(f"  cairn                        {calls(cairn_calls)}")
    print(f"  minimal docker CLI script    {calls(floor_calls)}")
    print(f"  SDK floor                    {calls(sdk_calls)}")
    print(f"cairn run (whole process)      {ms(c)}")
    print(f"  of which the trial itself    {ms(ct)}  (result.json timings.total_sec)")
    print(f"  process start, imports, job  {ms(c - ct)}")
    print(f"  CPU (user + sys, children)   {ms(med(c_cpu))}")
    print(f"minimal docker CLI script      {ms(fm)}  (build -q, run, 3 exec, 2 cp, rm)")
    ratio = c / fm
    print(f"ratio cairn / minimal script   {ratio:8.2f}x  (target <= {args.limit:.2f})")
    sm = med(s_wall)
    print(
        f"SDK floor (bench/_sdkfloor.py) {ms(sm)}  (ratio to the script {sm / fm:.2f}x): "
        "the least work through the Docker SDK"
    )
    print(f"  after importing typer, pydantic, asyncio, docker ({ms(med(s_imp)).strip()} of it)")
    print(f"ratio cairn / SDK floor        {c / sm:8.2f}x  (#31 target <= 1.15)")
    if compare:
        o, ot = med(o_wall), med(o_trial)
        print(f"--compare {compare}:")
        print(f"  cairn run (whole process)    {ms(o)}  (ratio to the script {o / fm:.2f}x)")
        print(f"  of which the trial itself    {ms(ot)}")
        print(f"  process start, imports, job  {ms(o - ot)}")
        print(f"  CPU (user + sys, children)   {ms(med(o_cpu))}")
        print(f"  ratio to the SDK floor       {o / sm:8.2f}x")
        print(f"  ratio this / --compare       {c / o:8.2f}x")
        print(f"  CPU ratio this / --compare   {med(c_cpu) / med(o_cpu):8.2f}x")
    if harbor:
        h = med(h_wall)
        print(f"harbor run (whole process)     {ms(h)}")
        print(f"speed-up over Harbor           {h / c:8.2f}x")
    else:
        print("Harbor: skipped (set HARBOR to a Harbor install's `harbor` executable)")
    return 0 if ratio <= args.limit else 1


if __name__ == "__main__":
    sys.exit(main())
