"""A trivial single-step task with the oracle on docker: cairn vs the raw docker floor (design §12).

Measured side by side, interleaved (so all see the same machine load), medians over N rounds,
as whole-process wall times:

- cairn: ``python3 -m cairn run -p TASK -a oracle -e docker`` (one trial, cached image);
- floor (same ops): the docker CLI doing exactly the container operations that one cairn trial
  does — captured from the engine's event stream during a warm-up run: ``docker create
  --init`` + ``start`` + the same execs (the same command lines, through ``docker exec``) + the
  same archive transfers (``docker cp``) + ``docker rm -f``. This is design §12's floor
  ("create + start + the same execs + remove"); target: cairn ≤ 1.3× it;
- floor (minimal): what a hand-written script needs for the same task: create, start, cp the
  solution, exec solve.sh, cp the tests, exec test.sh, cp the reward out, rm -f. Shown for
  information (it tells what cairn's own bookkeeping execs cost);
- Harbor, when the environment variable ``HARBOR`` names a Harbor install (the ``harbor``
  executable, or a folder holding ``bin/harbor``): ``harbor run --path TASK --agent oracle``;
  target: cairn ≥ 10× faster. Harbor is not installed here, so the script says it skips it.

Usage:
    python3 bench/trivial_vs_floor.py [-n 7] [--image debian:bookworm-slim] [--limit 1.3]

Exit status 0 when cairn / floor (same ops) ≤ limit, 1 otherwise.
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


def docker_cli() -> str:
    """The docker CLI (``/usr/local/bin/docker`` first, else PATH)."""
    for cand in ("/usr/local/bin/docker", shutil.which("docker")):
        if cand and Path(cand).exists():
            return cand
    sys.exit("docker CLI not found")


def write_task(root: Path, image: str) -> Path:
    """A trivial single-step task: solve touches a file, the test checks it."""
    task = root / "trivial"
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "solution").mkdir()
    (task / "task.toml").write_text('[task]\nname = "bench/trivial"\n\n[environment]\n'
                                    'network_mode = "no-network"\n')
    (task / "instruction.md").write_text("Create /app/done.\n")
    (task / "environment" / "Dockerfile").write_text(f"FROM {image}\nWORKDIR /app\n")
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\ntouch /app/done\n")
    (task / "tests" / "test.sh").write_text(
        "#!/bin/bash\nif test -f /app/done; then echo 1 > /logs/verifier/reward.txt; "
        "else echo 0 > /logs/verifier/reward.txt; fi\n")
    return task


def cairn_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO / "src") + os.pathsep +
            os.environ.get("PYTHONPATH", "")}


def run_cairn(task: Path, jobs: Path, name: str) -> tuple[float, dict]:
    """One whole ``cairn run`` process; (wall seconds, result.json)."""
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "cairn", "run", "-p", str(task), "-a", "oracle",
                        "-e", "docker", "--jobs-dir", str(jobs), "--job-name", name],
                       capture_output=True, text=True, env=cairn_env(), check=False)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"cairn run failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    (result,) = [json.loads(f.read_text()) for f in (jobs / name).glob("trials/*/result.json")]
    return wall, result


def capture_ops(task: Path, jobs: Path) -> tuple[list[tuple[str, str]], dict]:
    """Run one cairn trial while recording its container's engine events.

    Returns:
        (the container operations in order: ("exec", command line) / ("extract", "") /
        ("archive", ""), the trial's result.json).
    """
    import docker

    client = docker.from_env()
    name = f"bench-{uuid.uuid4().hex[:8]}"
    events: list[dict] = []
    stream = client.events(decode=True, since=time.time(),
                           filters={"type": "container", "label": f"cairn.job={name}"})

    def listen() -> None:
        for e in stream:
            events.append(e)
            if e.get("Action") == "destroy":
                return

    th = threading.Thread(target=listen, daemon=True)
    th.start()
    time.sleep(0.3)
    _, result = run_cairn(task, jobs, name)
    th.join(timeout=10)
    stream.close()
    ops: list[tuple[str, str]] = []
    for e in events:
        action = e.get("Action", "")
        if action.startswith("exec_create: "):
            ops.append(("exec", action[len("exec_create: "):]))
        elif action == "extract-to-dir":
            ops.append(("extract", ""))
        elif action == "archive-path":
            ops.append(("archive", ""))
    client.close()
    return ops, result


def floor_same_ops(docker: str, image: str, ops: list[tuple[str, str]], scratch: Path) -> float:
    """The docker CLI replaying the trial's container operations; wall seconds."""
    payload = scratch / "payload"
    payload.mkdir(exist_ok=True)
    (payload / "solve.sh").write_text("touch /app/done\n")
    name = f"cairn-bench-floor-{uuid.uuid4().hex[:8]}"
    run = lambda *a: subprocess.run([docker, *a], capture_output=True, check=False)  # noqa: E731
    t0 = time.perf_counter()
    subprocess.run([docker, "create", "--init", "--network", "none", "--label",
                    "cairn.bench=1", "--name", name, "-w", "/app", image, "sleep", "infinity"],
                   capture_output=True, check=True)
    subprocess.run([docker, "start", name], capture_output=True, check=True)
    for i, (kind, cmd) in enumerate(ops):
        if kind == "exec":
            run("exec", name, "sh", "-c", cmd)
        elif kind == "extract":
            run("cp", str(payload), f"{name}:/tmp/in-{i}")
        else:
            run("cp", f"{name}:/etc/hostname", str(scratch / f"out-{i}"))
    subprocess.run([docker, "rm", "-f", name], capture_output=True, check=True)
    return time.perf_counter() - t0


def floor_minimal(docker: str, image: str, task: Path, scratch: Path) -> float:
    """A hand-written script for the same task through the docker CLI; wall seconds."""
    name = f"cairn-bench-min-{uuid.uuid4().hex[:8]}"
    t0 = time.perf_counter()
    ok = lambda *a: subprocess.run([docker, *a], capture_output=True, check=True)  # noqa: E731
    ok("create", "--init", "--network", "none", "--label", "cairn.bench=1", "--name", name,
       "-w", "/app", image, "sleep", "infinity")
    ok("start", name)
    ok("cp", str(task / "solution"), f"{name}:/solution")
    ok("exec", name, "bash", "/solution/solve.sh")
    ok("cp", str(task / "tests"), f"{name}:/tests")
    ok("exec", name, "sh", "-c", "mkdir -p /logs/verifier && bash /tests/test.sh")
    ok("cp", f"{name}:/logs/verifier/reward.txt", str(scratch / "reward.txt"))
    ok("rm", "-f", name)
    wall = time.perf_counter() - t0
    assert (scratch / "reward.txt").read_text().strip() == "1"
    return wall


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
    subprocess.run([*cmd, "run", "--path", str(task), "--agent", "oracle", "--job-name",
                    f"h-{uuid.uuid4().hex[:8]}", "-o", str(jobs)], capture_output=True,
                   check=True)
    return time.perf_counter() - t0


def ms(x: float) -> str:
    return f"{x * 1000:8.1f} ms"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=7, help="rounds (medians taken; default 7)")
    ap.add_argument("--image", default="debian:bookworm-slim", help="base image (local)")
    ap.add_argument("--limit", type=float, default=1.3, help="target cairn / floor ratio")
    args = ap.parse_args()
    docker = docker_cli()
    harbor = harbor_command()
    with tempfile.TemporaryDirectory(prefix="cairn-bench-") as tmp:
        root = Path(tmp)
        task = write_task(root / "tasks", args.image)
        jobs = root / "jobs"
        run_cairn(task, jobs, "warm-up")  # builds and caches the image, warms .pyc files
        ops, result = capture_ops(task, jobs)
        image = result["image_id"]
        n_exec = sum(k == "exec" for k, _ in ops)
        n_cp = len(ops) - n_exec
        floor_same_ops(docker, image, ops, root)
        floor_minimal(docker, image, task, root)
        c_wall, c_trial, f_same, f_min, h_wall = [], [], [], [], []
        for i in range(args.n):
            wall, res = run_cairn(task, jobs, f"r{i}")
            c_wall.append(wall)
            c_trial.append(res["timings"]["total_sec"])
            f_same.append(floor_same_ops(docker, image, ops, root))
            f_min.append(floor_minimal(docker, image, task, root))
            if harbor:
                h_wall.append(run_harbor(harbor, task, root / "harbor-jobs"))
    med = statistics.median
    c, ct, fs, fm = med(c_wall), med(c_trial), med(f_same), med(f_min)
    print(f"rounds: {args.n}; one cairn trial = create + start + {n_exec} execs + {n_cp} "
          "archive transfers + remove")
    print(f"cairn run (whole process)      {ms(c)}")
    print(f"  of which the trial itself    {ms(ct)}  (result.json timings.total_sec)")
    print(f"  process start, imports, job  {ms(c - ct)}")
    print(f"docker CLI floor, same ops     {ms(fs)}")
    print(f"docker CLI floor, minimal (8)  {ms(fm)}")
    ratio = c / fs
    print(f"ratio cairn / floor (same ops) {ratio:8.2f}x  (target <= {args.limit:.2f})")
    print(f"ratio cairn / floor (minimal)  {c / fm:8.2f}x  (information)")
    if harbor:
        h = med(h_wall)
        print(f"harbor run (whole process)     {ms(h)}")
        print(f"speed-up over Harbor           {h / c:8.2f}x  (target >= 10)")
    else:
        print("Harbor: skipped (set HARBOR to a Harbor install's `harbor` executable to compare;"
              " Harbor is not installed here)")
    return 0 if ratio <= args.limit else 1


if __name__ == "__main__":
    sys.exit(main())
