"""A real Ray cluster on this machine for tests: a head and worker nodes, each a separate
``ray start --block`` process with its own resources and temp dir, all inside a network
namespace that has only ``lo`` — so every byte stays on loopback and nothing collides with
another Ray on the machine. Every process is stopped by pid at the end (never ``ray stop``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

PORT = 6379
ADDRESS = f"127.0.0.1:{PORT}"

_LO_UP = """
import fcntl, socket, struct, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
flags = struct.unpack('16sH', fcntl.ioctl(s, 0x8913, struct.pack('16sH', b'lo', 0))[:18])[1]
fcntl.ioctl(s, 0x8914, struct.pack('16sH', b'lo', flags | 1))
print('up', flush=True)
time.sleep(100000)
"""


def ray_cluster_possible() -> str | None:
    """Why a test cluster cannot start here, or None."""
    if os.geteuid() != 0:
        return "needs root for a network namespace"
    if not (shutil.which("unshare") and shutil.which("nsenter") and shutil.which("ray")):
        return "needs unshare, nsenter and the ray CLI (pip install 'cairn-eval[ray]')"
    return None


def _netns(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


@dataclass
class Node:
    """One ``ray start --block`` process."""

    name: str
    proc: subprocess.Popen
    log: Path


@dataclass
class RayCluster:
    """The running test cluster (see the module docstring)."""

    root: Path
    ns_holder: subprocess.Popen
    env: dict[str, str]
    nodes: dict[str, Node] = field(default_factory=dict)

    @property
    def ns(self) -> str:
        """``/proc/<pid>/ns/net`` of the namespace."""
        return f"/proc/{self.ns_holder.pid}/ns/net"

    def argv(self, *cmd: str) -> list[str]:
        """``cmd`` run inside the namespace."""
        return ["nsenter", f"--net={self.ns}", "--", *cmd]

    def popen(
        self, cmd: Sequence[str], *, log: Path, cwd: Path | None = None, env: dict[str, str] | None = None
    ) -> subprocess.Popen:
        """Start ``cmd`` inside the namespace, stdout+stderr to ``log``."""
        with open(log, "ab") as out:
            return subprocess.Popen(
                self.argv(*cmd),
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env={**self.env, **(env or {})},
            )

    def run(
        self,
        cmd: Sequence[str],
        *,
        cwd: Path | None = None,
        timeout: float = 600,
    ) -> subprocess.CompletedProcess:
        """Run ``cmd`` inside the namespace to its end (text output captured)."""
        return subprocess.run(
            self.argv(*cmd),
            capture_output=True,
            text=True,
            cwd=cwd,
            env=self.env,
            timeout=timeout,
            check=False,
        )

    def start_node(
        self, name: str, *args: str, timeout: float = 120, env: dict[str, str] | None = None
    ) -> Node:
        """Start a node (``env``: extra variables of its processes) and wait (bounded) until
        it says it is up."""
        log = self.root / f"{name}.log"
        proc = self.popen(
            [
                "ray",
                "start",
                "--block",
                "--disable-usage-stats",
                "--node-ip-address=127.0.0.1",
                f"--temp-dir={self.root / name}",
                *args,
            ],
            log=log,
            env=env,
        )
        node = Node(name, proc, log)
        self.nodes[name] = node
        deadline = time.monotonic() + timeout
        while "Ray runtime started" not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"ray node {name} did not start:\n" + log.read_text(errors="replace")[-3000:]
                )
            time.sleep(0.2)
        return node

    def wait_workers(
        self,
        n: int,
        timeout: float = 120,
        resource: str = "cairn_trial_slot",
    ) -> None:
        """Wait (bounded) until ``n`` alive nodes advertise ``resource``."""
        code = (
            f"import ray, json; ray.init(address='{ADDRESS}', logging_level='ERROR'); "
            "print(json.dumps(sum(1 for x in ray.nodes() if x['Alive'] and "
            f"{resource!r} in x['Resources'])))"
        )
        deadline = time.monotonic() + timeout
        while True:
            out = self.run([sys.executable, "-c", code], timeout=120)
            lines = out.stdout.strip().splitlines()
            if out.returncode == 0 and lines and json.loads(lines[-1]) >= n:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {lines} worker nodes up: {out.stderr[-2000:]}")
            time.sleep(1)

    def pids_in_ns(self) -> list[int]:
        """Every process inside the namespace (all started by this cluster)."""
        mine = _netns(self.ns_holder.pid)
        out = []
        for d in os.listdir("/proc"):
            if d.isdigit() and int(d) != self.ns_holder.pid:
                try:
                    if _netns(int(d)) == mine:
                        out.append(int(d))
                except OSError:
                    continue
        return out

    def raylet_pid(self, name: str) -> int:
        """The raylet of node ``name`` (found by its temp dir on its command line)."""
        marker = str(self.root / name)
        for pid in self.pids_in_ns():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "raylet" in cmd.split(" ")[0] and marker in cmd:
                return pid
        raise LookupError(f"no raylet for node {name}")

    def stop(self) -> None:
        """Kill every process of the cluster (by pid) and remove its temp dirs."""
        for _ in range(3):
            pids = self.pids_in_ns()
            for node in self.nodes.values():
                if node.proc.poll() is None:
                    pids.append(node.proc.pid)
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.5)  # a bounded poll: at most three rounds of kill, then look again
        for node in self.nodes.values():
            try:
                node.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.ns_holder.kill()
        self.ns_holder.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)


def _base_env(env: dict[str, str] | None) -> dict[str, str]:
    return {
        **os.environ,
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_ADDRESS": ADDRESS,
        # loopback only, inside a namespace of its own: no token (none is written to ~/.ray)
        "RAY_AUTH_MODE": "disabled",
        # a dead node is noticed within ~3 s instead of ~30 s
        "RAY_health_check_period_ms": "1000",
        "RAY_health_check_failure_threshold": "3",
        "RAY_health_check_initial_delay_ms": "1000",
        **(env or {}),
    }


def start_cluster(workers: dict[str, dict], *, env: dict[str, str] | None = None) -> RayCluster:
    """A head (no trial slots) and one worker node per ``workers`` entry.

    Args:
        workers: node name → ``{"cpus": n, "resources": {...}, "memory": bytes?}``.
        env: extra environment for every process (e.g. ``PYTHONPATH``).
    """
    root = Path(tempfile.mkdtemp(prefix="crc", dir="/tmp"))  # short: unix socket paths
    holder = subprocess.Popen(
        ["unshare", "-n", "--", sys.executable, "-c", _LO_UP], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None
    if holder.stdout.readline().strip() != "up":
        holder.kill()
        raise RuntimeError("could not bring lo up in a new network namespace")
    cluster = RayCluster(root, holder, _base_env(env))
    try:
        cluster.start_node("head", "--head", f"--port={PORT}", "--include-dashboard=false", "--num-cpus=0")
        for name, spec in workers.items():
            args = [
                f"--address={ADDRESS}",
                f"--num-cpus={spec.get('cpus', 4)}",
                "--resources=" + json.dumps(spec["resources"]),
            ]
            if spec.get("memory"):
                args.append(f"--memory={spec['memory']}")
            cluster.start_node(name, *args)
        cluster.wait_workers(len(workers))
    except BaseException:
        cluster.stop()
        raise
    return cluster


def start_plain_cluster(nodes: dict[str, dict[str, str]], *, env: dict[str, str] | None = None) -> RayCluster:
    """A cluster started the ordinary way, no custom resources, no CPU counts: the first
    entry of ``nodes`` is ``ray start --head``, the others ``ray start --address=…``.

    Args:
        nodes: node name → extra environment of that node's processes (e.g. a
            ``DOCKER_HOST`` no engine listens on: a node without Docker).
        env: extra environment for every process (e.g. ``PYTHONPATH``).
    """
    root = Path(tempfile.mkdtemp(prefix="crp", dir="/tmp"))
    holder = subprocess.Popen(
        ["unshare", "-n", "--", sys.executable, "-c", _LO_UP], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None
    if holder.stdout.readline().strip() != "up":
        holder.kill()
        raise RuntimeError("could not bring lo up in a new network namespace")
    cluster = RayCluster(root, holder, _base_env(env))
    try:
        for i, (name, node_env) in enumerate(nodes.items()):
            if i == 0:
                cluster.start_node(name, "--head", f"--port={PORT}", env=node_env)
            else:
                cluster.start_node(name, f"--address={ADDRESS}", env=node_env)
        cluster.wait_workers(len(nodes), resource="CPU")
    except BaseException:
        cluster.stop()
        raise
    return cluster
