"""Processes of a local sandbox, read and killed from the host (design §3, §4.4).

The sandbox's processes are host processes too. The host reads them through the sandbox's own
``/proc`` (``/proc/<init>/root/proc``), which shows exactly its pid namespace with the pids it
sees, and kills them with ``pidfd_send_signal`` on a ``/proc/<pid>`` directory descriptor
after checking the start time through that same descriptor — so a pid reused by another
process is never hit.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

from cairn.errors import SandboxLostError
from cairn.sandbox.base import ProcessInfo

KILL_ROUNDS = 50
"""Rounds of :func:`kill_tagged` (each catches what forked during the previous one)."""


def _proc_fd(root: str) -> int:
    try:
        return os.open(f"{root}/proc", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise SandboxLostError(f"cannot read the local sandbox's processes: {exc}") from exc


def _read_at(dir_fd: int, rel: str) -> bytes:
    fd = os.open(rel, os.O_RDONLY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _read_process(pfd: int, name: str) -> ProcessInfo | None:
    try:
        stat = _read_at(pfd, f"{name}/stat")
        cmdline = _read_at(pfd, f"{name}/cmdline")
        uid: int | None = os.stat(name, dir_fd=pfd).st_uid  # /proc/<pid> is owned by its euid
    except OSError:
        return None
    rest = stat[stat.rindex(b")") + 2 :].split()
    if rest[0] in (b"Z", b"X"):
        return None
    return ProcessInfo(
        pid=int(name),
        ppid=int(rest[1]),
        start_ticks=int(rest[19]),
        cmdline=cmdline.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace"),
        uid=uid,
    )


def _kill_if_same(pfd: int, name: str, start_ticks: int, sig: int = signal.SIGKILL) -> bool:
    """Send ``sig`` (default SIGKILL) to ``/proc/<name>`` through a pidfd if its start time
    still matches."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=pfd)
    except OSError:
        return False
    try:
        stat = _read_at(fd, "stat")
        if int(stat[stat.rindex(b")") + 2 :].split()[19]) != start_ticks:
            return False
        signal.pidfd_send_signal(fd, sig)
        return True
    except (OSError, ValueError, IndexError):
        return False
    finally:
        os.close(fd)


def list_processes(root: str) -> list[ProcessInfo]:
    """The processes of the sandbox whose root is ``root`` (``/proc/<init>/root``), by pid,
    zombies left out.

    Raises:
        SandboxLostError: the sandbox is gone.
    """
    pfd = _proc_fd(root)
    out = []
    try:
        for name in os.listdir(pfd):
            if name.isdigit() and (info := _read_process(pfd, name)) is not None:
                out.append(info)
    finally:
        os.close(pfd)
    return sorted(out, key=lambda p: p.pid)


def signal_processes(root: str, targets: list[ProcessInfo], sig: int) -> None:
    """Send ``sig`` to ``targets`` matched by ``(pid, start_ticks)``; pid 1 and gone ones
    skipped.

    Raises:
        SandboxLostError: the sandbox is gone.
    """
    pfd = _proc_fd(root)
    try:
        for p in targets:
            if p.pid > 1:
                _kill_if_same(pfd, str(p.pid), p.start_ticks, sig)
    finally:
        os.close(pfd)


def kill_processes(root: str, targets: list[ProcessInfo]) -> None:
    """SIGKILL ``targets`` matched by ``(pid, start_ticks)``; pid 1 and gone ones skipped.

    Raises:
        SandboxLostError: the sandbox is gone.
    """
    signal_processes(root, targets, signal.SIGKILL)


def tagged_processes(root: str, env_entry: str) -> dict[int, str]:
    """``{pid: cmdline}`` of the processes whose initial environment holds ``env_entry``
    (empty when the sandbox is gone)."""
    needle = env_entry.encode()
    out: dict[int, str] = {}
    try:
        pfd = _proc_fd(root)
    except SandboxLostError:
        return out
    try:
        for name in os.listdir(pfd):
            if not name.isdigit() or name == "1":
                continue
            with contextlib.suppress(OSError):
                if needle in _read_at(pfd, f"{name}/environ").split(b"\0"):
                    info = _read_process(pfd, name)
                    if info is not None:
                        out[info.pid] = info.cmdline
    finally:
        os.close(pfd)
    return out


def kill_tagged(root: str, env_entry: str) -> int:
    """SIGKILL every process whose initial environment holds ``env_entry`` (``NAME=value``)
    and every descendant of one, round after round until none is left (a fork racing a
    round is caught by the next). Never kills pid 1.

    Returns:
        How many processes were killed (0 when the sandbox is gone).
    """
    needle = env_entry.encode()
    killed = 0
    try:
        pfd = _proc_fd(root)
    except SandboxLostError:
        return 0
    try:
        for _ in range(KILL_ROUNDS):
            procs: dict[int, tuple[int, int]] = {}
            victims: set[int] = set()
            for name in os.listdir(pfd):
                if not name.isdigit() or name == "1":
                    continue
                info = _read_process(pfd, name)
                if info is None:
                    continue
                procs[info.pid] = (info.ppid, info.start_ticks)
                with contextlib.suppress(OSError):
                    if needle in _read_at(pfd, f"{name}/environ").split(b"\0"):
                        victims.add(info.pid)
            grew = True
            while grew:
                grew = False
                for pid, (ppid, _start) in procs.items():
                    if ppid in victims and pid not in victims:
                        victims.add(pid)
                        grew = True
            if not victims:
                break
            for pid in victims:
                killed += _kill_if_same(pfd, str(pid), procs[pid][1])
            time.sleep(0.005)
    finally:
        os.close(pfd)
    return killed
