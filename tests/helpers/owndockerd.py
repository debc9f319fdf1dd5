"""A Docker engine of the test's own: a real ``dockerd`` on its own socket, data root, exec
root, pid file, address pool and network namespace, with no iptables rules, so it can be
killed and started again mid-job without touching the machine's shared engine (issue #29).

Needs root and the ``dockerd`` binary (CI's engine package ships it); the base image is copied
in from the machine's engine (``docker save | docker -H … load``).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

IMAGES = ("cairn-base:bookworm", "debian:bookworm-slim")
"""What the test tasks build from, copied into the engine once it runs."""

ADDRESS_POOL = "base=10.213.0.0/16,size=24"
"""The engine's own address pool for networks it creates (apart from the shared engine's)."""


def available() -> str | None:
    """Why an own engine cannot run here, or None."""
    if os.geteuid() != 0:
        return "an own dockerd needs root"
    if shutil.which("dockerd") is None:
        return "no dockerd binary"
    if shutil.which("docker") is None:
        return "no docker CLI (it copies the base image in)"
    if shutil.which("ip") is None or shutil.which("nsenter") is None:
        return "no ip or nsenter command (the engine gets a network namespace of its own)"
    return None


class OwnDockerd:
    """One private ``dockerd`` that can be stopped (SIGKILL, as a crash, or SIGTERM, as a
    service restart) and started again with the same state.

    Args:
        root: a short folder of the test's (the socket path must stay under 108 bytes).
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sock = root / "d.sock"
        self.host = f"unix://{self.sock}"
        self.pidfile = root / "d.pid"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.namespace = "cairntest" + re.sub(r"[^a-z0-9]", "", root.name.lower())
        self.netns = "cft" + re.sub(r"[^a-z0-9]", "", root.name.lower())[-10:]
        """A network namespace of its own: a second dockerd in the host's namespace deletes
        the host's ``docker0`` (the shared engine's bridge) when it starts again; in its own
        namespace its bridges and rules touch nothing of the host's."""
        """containerd namespaces of its own (a shared containerd never mixes them up)."""

    def start(self, timeout: float = 90, attempts: int = 3) -> None:
        """Start the daemon and wait until it answers a ping; on a loaded machine its own
        containerd may miss dockerd's start-up bound, so a daemon that exits is started again
        (up to ``attempts`` times).

        Raises:
            RuntimeError: it did not answer (its log tail said).
        """
        for attempt in range(attempts):
            try:
                self._start_once(timeout)
                return
            except RuntimeError:
                if attempt == attempts - 1:
                    raise
                self.stop(signal.SIGKILL)

    def _own_netns(self) -> None:
        """Create this engine's network namespace unless it exists."""
        if not Path(f"/run/netns/{self.netns}").exists():
            subprocess.run(["ip", "netns", "add", self.netns], check=True, capture_output=True)
            subprocess.run(
                ["ip", "netns", "exec", self.netns, "ip", "link", "set", "lo", "up"],
                check=True,
                capture_output=True,
            )

    def _start_once(self, timeout: float) -> None:
        self._own_netns()
        self.starts += 1
        log = open(self.root / f"dockerd-{self.starts}.log", "wb")  # noqa: SIM115 - the daemon's
        self.proc = subprocess.Popen(
            [
                "nsenter",
                f"--net=/run/netns/{self.netns}",  # not `ip netns exec`: it remounts /sys
                "dockerd",
                "--host",
                self.host,
                "--data-root",
                str(self.root / "data"),
                "--exec-root",
                str(self.root / "exec"),
                "--pidfile",
                str(self.pidfile),
                "--iptables=false",
                "--ip-masq=false",
                "--ip-forward=false",
                "--default-address-pool",
                ADDRESS_POOL,
                "--userland-proxy=false",
                "--containerd-namespace",
                self.namespace,
                "--containerd-plugins-namespace",
                f"{self.namespace}-plugins",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            if self.answers():
                return
            time.sleep(0.3)
        raise RuntimeError(f"own dockerd did not come up: {self.log_tail()}")

    def answers(self) -> bool:
        """Whether the daemon answers ``docker version`` now."""
        r = subprocess.run(
            ["docker", "-H", self.host, "version", "--format", "{{.Server.Version}}"],
            capture_output=True,
            timeout=20,
            check=False,
        )
        return r.returncode == 0

    def stop(self, sig: int = signal.SIGKILL, timeout: float = 60) -> None:
        """Stop the daemon with ``sig`` and wait until it and its own containerd are gone."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)
        if sig == signal.SIGKILL:  # a crash: the supervised containerd dies with its parent
            self._kill_own_containerd()

    def _kill_own_containerd(self) -> None:
        pid_file = self.root / "exec" / "containerd" / "containerd.pid"
        with contextlib.suppress(OSError, ValueError):
            pid = int(pid_file.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if str(self.root).encode() in cmdline:  # ours, never the shared engine's
                os.kill(pid, signal.SIGKILL)
                for _ in range(100):
                    if not Path(f"/proc/{pid}").exists():
                        break
                    time.sleep(0.1)

    def _kill_own_shims(self) -> None:
        """SIGKILL the container shims of this engine's containerd namespace and what they
        run (a daemon that never came back leaves them; never another engine's: matched by
        the namespace argument, which is this engine's own)."""
        mine: list[int] = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                if (
                    b"-namespace" in argv
                    and argv.index(b"-namespace") + 1 < len(argv)
                    and argv[argv.index(b"-namespace") + 1] == self.namespace.encode()
                ):
                    mine.append(int(entry.name))
        for shim in mine:
            for pid in [*_descendants(shim), shim]:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)

    def load_images(self, images: tuple[str, ...] = IMAGES) -> None:
        """Copy ``images`` from the machine's engine into this one.

        Raises:
            RuntimeError: the save or the load failed.
        """
        env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
        save = subprocess.Popen(["docker", "save", *images], stdout=subprocess.PIPE, env=env)
        load = subprocess.run(
            ["docker", "-H", self.host, "load", "-q"],
            stdin=save.stdout,
            capture_output=True,
            timeout=300,
            check=False,
        )
        assert save.stdout is not None
        save.stdout.close()
        if save.wait(60) != 0 or load.returncode != 0:
            raise RuntimeError(
                f"copying {images} into the own engine failed: {load.stderr.decode(errors='replace')[-500:]}"
            )

    def log_tail(self, n: int = 2000) -> str:
        """The last ``n`` characters of the current daemon log."""
        with contextlib.suppress(OSError):
            return (self.root / f"dockerd-{self.starts}.log").read_text(errors="replace")[-n:]
        return ""

    def close(self) -> None:
        """Remove every container of this engine, stop it, unmount and delete its state."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                ids = subprocess.run(
                    ["docker", "-H", self.host, "ps", "-aq"], capture_output=True, text=True, timeout=60
                ).stdout.split()
                if ids:
                    subprocess.run(
                        ["docker", "-H", self.host, "rm", "-f", *ids],
                        capture_output=True,
                        timeout=120,
                        check=False,
                    )
            self.stop(signal.SIGTERM)
        self._kill_own_containerd()
        self._kill_own_shims()
        for m in reversed(Path("/proc/self/mounts").read_text().splitlines()):
            parts = m.split()
            if len(parts) > 1 and parts[1].startswith(str(self.root)):
                subprocess.run(["umount", "-l", parts[1]], capture_output=True, check=False)
        shutil.rmtree(self.root, ignore_errors=True)
        if Path(f"/run/netns/{self.netns}").exists():
            subprocess.run(["ip", "netns", "del", self.netns], capture_output=True, check=False)


def _descendants(pid: int) -> list[int]:
    """Every descendant of ``pid`` (children first found, deepest last)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = (entry / "stat").read_text()
                ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    out: list[int] = []
    todo = [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def make_root() -> Path:
    """A short, fresh folder for an own engine."""
    base = tempfile.gettempdir()
    return Path(tempfile.mkdtemp(prefix="cdk", dir=base if len(base) < 40 else "/tmp"))
