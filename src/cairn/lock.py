"""Job locks and resource ownership (design §3 "Ownership and cleanup", §7 ``lock``).

A running job holds ``jobs/<name>/lock`` with ``flock``; the file's mere presence means nothing
(a SIGKILLed process leaves it behind, and the kernel has already released its lock). Every
sandbox resource records its owning process as an *owner token* (host, pid, process start time),
so a left-over can be told from a live one even outside a job.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import socket
import time
from pathlib import Path

from cairn.errors import UsageError

LOCK_FILE = "lock"
"""Name of the lock file inside a job folder."""


def _flock_within(fd: int, wait_sec: float, *, delay: float, max_delay: float) -> bool:
    """Take an exclusive ``flock`` on ``fd``, polling (every ``delay`` seconds, doubled up to
    ``max_delay``) until ``wait_sec`` has passed; whether it was taken."""
    deadline = time.monotonic() + wait_sec
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, max_delay)


async def flock_async(fd: int, poll_sec: float, deadline: float | None = None) -> None:
    """Take an exclusive ``flock`` on ``fd`` without blocking the event loop: poll every
    ``poll_sec`` seconds.

    Args:
        fd: an open file descriptor of the lock file.
        poll_sec: seconds between tries.
        deadline: event-loop time (``loop.time()``) after which to give up; ``None`` waits on.

    Raises:
        TimeoutError: ``deadline`` passed with the lock still taken.
    """
    loop = asyncio.get_running_loop()
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if deadline is not None and loop.time() >= deadline:
                raise TimeoutError from None
            await asyncio.sleep(poll_sec)


def _unlock(fd: int | None) -> None:
    """Release and close a lock file descriptor taken by :func:`_flock_within` (``None``: not
    held, nothing to do)."""
    if fd is not None:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


class JobLockedError(UsageError):
    """Another process is running this job (its lock is held)."""


def _proc_start_ticks(pid: int, *, living: bool = False) -> int | None:
    """Field 22 of ``/proc/<pid>/stat`` (start time in clock ticks since boot), or None.

    With ``living``, a zombie (state ``Z``: dead, not yet reaped by its parent) counts as gone.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except OSError:
        return None
    try:
        fields = stat[stat.rindex(")") + 2 :].split()
        if living and fields[0] in ("Z", "X"):
            return None
        return int(fields[19])
    except (ValueError, IndexError):
        return None


def owner_token(pid: int | None = None) -> str:
    """``<hostname>:<pid>:<start_ticks>`` of this (or the given) process; survives pid reuse."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:{_proc_start_ticks(pid) or 0}"


def owner_alive(token: str) -> bool | None:
    """Whether the process named by an :func:`owner_token` still runs.

    Returns:
        True or False for a process on this host; None when the token is malformed or names
        another host (then it cannot be known).
    """
    host, _, rest = token.rpartition(":")
    host, _, pid_s = host.rpartition(":")
    if not host or not pid_s.isdigit() or not rest.isdigit():
        return None
    if host != socket.gethostname():
        return None
    ticks = _proc_start_ticks(int(pid_s), living=True)
    return ticks is not None and ticks == int(rest)


class JobLock:
    """Hold a job folder's lock for the lifetime of a ``with`` block (or acquire/release).

    Args:
        job_dir: the job folder (created if missing).
        wait_sec: how long to retry when the lock is busy, seconds (a concurrent
            :func:`is_locked` probe holds it for microseconds).

    Raises:
        JobLockedError: on enter, when another process holds the lock.
    """

    def __init__(self, job_dir: Path, *, wait_sec: float = 0.5) -> None:
        self.job_dir = Path(job_dir)
        self.path = self.job_dir / LOCK_FILE
        self.wait_sec = wait_sec
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock, writing the holder's pid and owner token into the file.

        Raises:
            JobLockedError: another process (or another JobLock) holds it.
        """
        if self._fd is not None:
            return
        self.job_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        if not _flock_within(fd, self.wait_sec, delay=0.02, max_delay=0.02):
            holder = _read_holder(fd)
            os.close(fd)
            raise JobLockedError(
                f"job {self.job_dir} is already running{holder}; wait for it or stop that process"
            )
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "owner": owner_token()}).encode() + b"\n", 0)
        self._fd = fd

    def release(self) -> None:
        """Release the lock (the file stays; its presence means nothing)."""
        fd, self._fd = self._fd, None
        _unlock(fd)

    def __enter__(self) -> JobLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_holder(fd: int) -> str:
    with contextlib.suppress(OSError, ValueError):
        data = json.loads(os.pread(fd, 4096, 0) or b"{}")
        if data.get("pid"):
            return f" (pid {data['pid']})"
    return ""


def is_locked(job_dir: Path) -> bool:
    """Whether a process holds ``job_dir``'s lock (i.e. the job is running).

    A missing folder or lock file means not running. Probing takes a shared lock for an
    instant and never blocks.
    """
    return flock_held(Path(job_dir) / LOCK_FILE)


def flock_held(path: Path) -> bool:
    """Whether some process holds an exclusive ``flock`` on ``path`` right now.

    A missing file means no. Probing takes a shared lock for an instant and never blocks.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


class FileLock:
    """An exclusive ``flock`` on one file, waited for (the task cache's writers use it).

    Unlike :class:`JobLock`, a busy lock is waited for: concurrent jobs fetching the same
    repository commit take turns, and the second finds the first one's result.

    Args:
        path: the lock file (created, with its folder, if missing; never removed).
        wait_sec: how long to wait for the lock, seconds.

    Raises:
        TimeoutError: on enter, when the lock stayed busy for ``wait_sec``.
    """

    def __init__(self, path: Path, *, wait_sec: float = 1800.0) -> None:
        self.path = Path(path)
        self.wait_sec = wait_sec
        self._fd: int | None = None

    def __enter__(self) -> FileLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        if not _flock_within(fd, self.wait_sec, delay=0.01, max_delay=0.5):
            os.close(fd)
            raise TimeoutError(f"{self.path} stayed locked by another process for {self.wait_sec:g} s")
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        fd, self._fd = self._fd, None
        _unlock(fd)
