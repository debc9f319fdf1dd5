"""Shared machinery of the fault-injection suite tests/faults/ (issue #12; docs/guarantees.md).

Every case runs real ``cairn`` processes on a real backend, injects one fault, and then checks
the invariants cairn guarantees:

- every planned trial has exactly one final result (one trial folder per (task, attempt),
  each with a readable result.json), none scored twice;
- the exit code is the documented one (docs/cli.md);
- after ``cairn clean`` no container, network, volume or local sandbox folder of the job is
  left;
- a following ``cairn resume`` completes the job with the scores a clean run gives.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

from cairncli import run_cairn, start_cairn
from taskgen import StepSpec, reward_if, write_task

TESTS = Path(__file__).resolve().parents[1]
SRC = TESTS.parent / "src"


def env(**extra: str | None) -> dict[str, str]:
    """The environment for a cairn subprocess: this checkout's sources first."""
    out = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), str(TESTS / "helpers")]),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    for k, v in extra.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def cairn(*args: str, cwd: Path, timeout: float = 300, **extra: str | None) -> subprocess.CompletedProcess:
    """Run ``python -m cairn ARGS`` to its end (stdout and stderr captured)."""
    return run_cairn(*args, cwd=cwd, timeout=timeout, env=env(**extra))


class Proc:
    """A background ``cairn`` process whose output lines can be waited for.

    Args:
        args: the cairn arguments.
        cwd: its working folder.
    """

    def __init__(self, *args: str, cwd: Path, **extra: str | None) -> None:
        self.proc = start_cairn(*args, cwd=cwd, env=env(**extra), merge_stderr=True)
        self.lines: list[str] = []
        self._q: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._q.put(line.rstrip("\n"))
        self._q.put(None)

    def wait_line(self, pattern: str, timeout: float = 180) -> str:
        """Block until an output line matches ``pattern`` (a regex); fail after ``timeout``."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    f"no line matching {pattern!r} within {timeout} s:\n" + "\n".join(self.lines)
                )
            try:
                line = self._q.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(
                    f"cairn exited ({self.proc.wait()}) before a line matching "
                    f"{pattern!r}:\n" + "\n".join(self.lines)
                )
            self.lines.append(line)
            if rx.search(line):
                return line

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def finish(self, timeout: float = 300) -> int:
        """Wait for the exit; returns the exit code (negative: killed by that signal)."""
        rc = self.proc.wait(timeout)
        while True:
            try:
                line = self._q.get(timeout=10)
            except queue.Empty:
                break
            if line is None:
                break
            self.lines.append(line)
        return rc

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)


def three_step_task(
    root: Path, name: str = "three", *, pause: float = 0.0, dockerfile: str | None = None
) -> Path:
    """A 3-step task whose steps depend on each other (each appends to /app/log); ``pause``
    seconds of sleep in every step's agent, so a signal can land inside a step."""
    sleep = f"sleep {pause}; " if pause else ""
    steps = [
        StepSpec(s, solve=f"{sleep}echo {s} >> /app/log\n", test=reward_if(f"grep -qx {s} /app/log"))
        for s in ("a", "b", "c")
    ]
    kw = {"dockerfile": dockerfile} if dockerfile else {}
    return write_task(root, name, steps=steps, **kw)


def trial_results(job_dir: Path) -> dict[tuple[str, int], dict]:
    """(task, attempt) → result.json of every trial folder; fails on a duplicate key, a
    folder without result.json, or an unreadable one."""
    out: dict[tuple[str, int], dict] = {}
    for d in sorted((job_dir / "trials").iterdir()):
        r = json.loads((d / "result.json").read_text(encoding="utf-8"))
        key = (r["task"]["name"], r["attempt"])
        assert key not in out, f"{key} has two trial folders: scored twice"
        out[key] = r
    return out


def assert_one_result_each(job_dir: Path, planned: set[tuple[str, int]]) -> dict:
    """Every planned trial has exactly one final result and nothing else is there."""
    results = trial_results(job_dir)
    assert set(results) == planned, (sorted(results), sorted(planned))
    for r in results.values():  # an earlier attempt kept aside is never a second score
        for prev in (job_dir / "trials").glob(f"*{r['trial_id'][:8]}/attempts/*/result.json"):
            try:
                old = json.loads(prev.read_text(encoding="utf-8"))
            except ValueError:  # a torn file kept aside: not a score
                continue
            assert old["outcome"] != "completed", f"{prev} is a second score"
    return results


def job_resources(job_dir: Path) -> list[str]:
    """Containers, networks and volumes labelled with this job folder (docker), and local
    sandbox folders whose marker names it."""
    left: list[str] = []
    job_dir = Path(job_dir).absolute()
    if backend_available("docker"):
        import docker

        client = docker.from_env(timeout=60)
        try:
            flt = {"label": f"cairn.job_dir={job_dir}"}
            left += [
                f"container {c['Names']} {c['State']}" for c in client.api.containers(all=True, filters=flt)
            ]
            left += [f"network {n['Name']}" for n in client.api.networks(filters=flt)]
            left += [
                f"volume {v['Name']}" for v in (client.api.volumes(filters=flt) or {}).get("Volumes") or []
            ]
        finally:
            client.close()
    try:
        from cairn.sandbox.local.backend import find_local_sandboxes
    except ImportError:
        return left
    left += [f"folder {f}" for f, m in find_local_sandboxes() if str(m.get("job_dir") or "") == str(job_dir)]
    return left


def assert_clean_leaves_nothing(job_dir: Path, cwd: Path) -> None:
    """``cairn clean --job NAME`` exits 0 and nothing of the job is left afterwards."""
    res = cairn("clean", "--job", job_dir.name, cwd=cwd)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    assert job_resources(job_dir) == []


def containers_holding(job_dir: Path, path: str) -> list[dict]:
    """The job's running docker containers (the engine's listing entries: ``Id``, ``Names``
    …) that hold the file ``path``, asked with ``test -f`` (the engine's exec); one going away
    meanwhile is left out."""
    import docker

    client = docker.from_env(timeout=60)
    out: list[dict] = []
    try:
        flt = {"label": f"cairn.job_dir={Path(job_dir).absolute()}", "status": "running"}
        for c in client.api.containers(filters=flt):
            try:
                ex = client.api.exec_create(c["Id"], ["test", "-f", path])
                client.api.exec_start(ex["Id"])
                if client.api.exec_inspect(ex["Id"]).get("ExitCode") == 0:
                    out.append(c)
            except docker.errors.APIError:  # the container is going away
                continue
    finally:
        client.close()
    return out


def sandboxes_holding(job_dir: Path, path: str) -> int:
    """How many live sandboxes of this job hold the file ``path`` (an absolute sandbox path).

    docker: the job's running containers, asked with ``test -f`` (the engine's exec);
    local: the job's sandbox folders, looked up in their root overlay's upper folder (where a
    file the sandbox wrote under a fresh folder such as ``/tmp`` lands).
    """
    job_dir = Path(job_dir).absolute()
    n = len(containers_holding(job_dir, path)) if backend_available("docker") else 0
    try:
        from cairn.sandbox.local.backend import find_local_sandboxes
    except ImportError:
        return n
    n += sum(
        (f / "up" / "root" / path.lstrip("/")).is_file()
        for f, m in find_local_sandboxes()
        if str(m.get("job_dir") or "") == str(job_dir)
    )
    return n


def wait_for_sandboxes_holding(
    job_dir: Path, path: str, count: int, *, proc: Proc | None = None, timeout: float = 180
) -> None:
    """Block until ``count`` live sandboxes of the job hold ``path`` (a marker a blocked
    verifier or collect hook wrote); fail after ``timeout`` seconds or when ``proc`` exits."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while sandboxes_holding(job_dir, path) < count:
        if proc is not None and proc.proc.poll() is not None:
            raise AssertionError(
                f"cairn exited ({proc.proc.returncode}) before {count} "
                f"sandbox(es) held {path}:\n{proc.output}"
            )
        if time.monotonic() > deadline:
            raise AssertionError(
                f"fewer than {count} sandbox(es) of {job_dir} held {path} within {timeout} s"
            )
        time.sleep(delay)  # polling a bounded condition, not a sleep standing in for sync
        delay = min(delay * 2, 0.5)


MARKER = "/tmp/fault-blocked"
"""The file a blocked phase writes inside its sandbox once it blocks."""
RELEASE = "/tmp/fault-release"
"""The file that lets a phase blocked by :data:`BLOCK_UNTIL_RELEASED` go on."""
BLOCK_UNTIL_RELEASED = (
    f'if [ "$FAULT_BLOCK" = 1 ]; then touch {MARKER}; while [ ! -e {RELEASE} ]; do sleep 0.1; done; fi\n'
)
"""Shell lines that, while the host passes FAULT_BLOCK=1 (see :func:`block_template`), write
:data:`MARKER` and wait for :func:`release_sandboxes` (docker)."""


def block_template(task: Path) -> None:
    """Give a task's ``[environment].env`` ``FAULT_BLOCK = "${FAULT_BLOCK:-0}"``: the block
    snippets act only in a cairn process started with FAULT_BLOCK=1."""
    toml = task / "task.toml"
    toml.write_text(
        toml.read_text(encoding="utf-8").replace(
            "[environment]\n", '[environment]\nenv = { FAULT_BLOCK = "${FAULT_BLOCK:-0}" }\n', 1
        ),
        encoding="utf-8",
    )


def release_sandboxes(job_dir: Path) -> int:
    """Create :data:`RELEASE` in every running container of the job (docker); returns how many
    (a container that stops meanwhile is skipped)."""
    import docker

    client = docker.from_env(timeout=60)
    n = 0
    try:
        flt = {"label": f"cairn.job_dir={Path(job_dir).absolute()}", "status": "running"}
        for c in client.api.containers(filters=flt):
            try:
                ex = client.api.exec_create(c["Id"], ["touch", RELEASE])
                client.api.exec_start(ex["Id"])
                n += client.api.exec_inspect(ex["Id"]).get("ExitCode") == 0
            except docker.errors.APIError:  # the container is going away (its trial ended)
                continue
    finally:
        client.close()
    return n


def rewards(results: dict) -> dict:
    """(task, attempt) → (outcome, reward, per-step rewards): what a clean run must match."""
    return {k: (r["outcome"], r["reward"], [s.get("reward") for s in r["steps"]]) for k, r in results.items()}


def backend_available(name: str) -> bool:
    """Whether a backend runs here (the suite's own probe; see tests/conftest.py)."""
    from testbed import backend_available as probe

    return probe(name)


def need(backend: str) -> None:
    """Skip the calling test, naming what is missing, when ``backend`` cannot run here."""
    from testbed import need_backend

    need_backend(backend)
