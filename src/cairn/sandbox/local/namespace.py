"""The running part of a local sandbox: one ``unshare`` + init per sandbox, and its execs.

:class:`NamespaceRuntime` starts ``unshare --user --mount --pid --ipc --uts [--net] --fork``
running :mod:`cairn.sandbox.local.pid1` as PID 1, maps user ids, hands it the mount plan, and
then asks it (over a ``SOCK_SEQPACKET`` control socket) to fork every exec with the exec's
stdout/stderr pipes. Processes of the sandbox are host processes too; the host reads and kills
them through the sandbox's own ``/proc`` (``/proc/<init>/root/proc``), with ``pidfd`` signals
matched by start time, so a reused pid is never hit.

Exec timeouts kill the exec's whole tree: every exec carries a unique ``CAIRN_EXEC_ID`` in its
environment, inherited by everything it starts (also double-forked, ``setsid`` and ``nohup``
children); on timeout every process of the pid namespace carrying it, and every descendant of
one, gets SIGKILL until none is left.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import itertools
import marshal
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from cairn._util.tail import TailBuffer
from cairn.errors import ErrorKind, SandboxError, SandboxLostError
from cairn.sandbox.base import ExecResult, ProcessInfo
from cairn.sandbox.local.proc import (
    kill_processes,
    kill_tagged,
    list_processes,
    signal_processes,
    tagged_processes,
)
from cairn.sandbox.local.rootfs import DOCKER_CAPS, HostSupport

INIT_SCRIPT = Path(__file__).with_name("pid1.py")
EXEC_TAG_VAR = "CAIRN_EXEC_ID"
DRAIN_GRACE_SEC = 0.1
"""After an exec's main process ended, how long its pipes may stay open (a background process
that kept them) before the exec returns; the pipes are then drained in the background."""
INLINE_REQUEST_BYTES = 60_000
SETTLE_MAX_SEC = 0.05
SETTLE_POLL_SEC = 0.005


class _PipeReader:
    """Reads one pipe into a :class:`TailBuffer` through the event loop until EOF."""

    def __init__(self, fd: int, tail: TailBuffer) -> None:
        self.fd = fd
        self.tail = tail
        self.loop = asyncio.get_running_loop()
        self.done: asyncio.Future[None] = self.loop.create_future()
        os.set_blocking(fd, False)
        self.loop.add_reader(fd, self._on_readable)

    def _on_readable(self) -> None:
        try:
            data = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self.tail.append(data)
        else:
            self.close()

    def close(self) -> None:
        """Stop reading and close the pipe (idempotent)."""
        if self.fd >= 0:
            self.loop.remove_reader(self.fd)
            os.close(self.fd)
            self.fd = -1
        if not self.done.done():
            self.done.set_result(None)


@dataclass(frozen=True)
class InitConfig:
    """What the init needs: the mount plan and the sandbox's identity.

    Attributes:
        plan: steps from :func:`cairn.sandbox.local.rootfs.root_plan`.
        rootfs: host path where the plan mounts the root (pivot target).
        hostname: the UTS hostname.
        own_net: whether to create a network namespace (no-network: loopback only).
        keep: whether the init keeps running when the host end of the control socket closes.
    """

    plan: list[dict]
    rootfs: Path
    hostname: str
    own_net: bool
    keep: bool = False


def _last_cap() -> int:
    try:
        return int(Path("/proc/sys/kernel/cap_last_cap").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 40


class NamespaceRuntime:
    """One running namespace tree: its init, control channel and execs.

    Args:
        support: what the host supports (privileged or unprivileged user namespace).
    """

    def __init__(self, support: HostSupport) -> None:
        self.support = support
        self.proc: asyncio.subprocess.Process | None = None
        self.sock: socket.socket | None = None
        self.host_pid: int | None = None
        self.start_ticks: int | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[asyncio.Future, asyncio.Future]] = {}
        self._reader: asyncio.Task | None = None
        self._drainers: set[_PipeReader] = set()
        self._lost: str | None = None
        self._log = Path("/dev/null")
        self._stopped = False

    # ---- lifecycle ------------------------------------------------------------------------
    @property
    def root(self) -> str:
        """Host path of the sandbox's root: ``/proc/<init>/root``."""
        return f"/proc/{self.host_pid}/root"

    async def start(self, cfg: InitConfig) -> None:
        """Start ``unshare`` + init and wait until the root is built.

        Raises:
            SandboxError: kind ``start_failed`` with the init's reason.
        """
        from cairn.sandbox.local.rootfs import process_start_ticks

        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        inner = [
            self.support.unshare,
            "--user",
            "--pid",
            "--ipc",
            "--uts",
            "--mount",
            "--fork",
            "--kill-child",
            "--propagation",
            "private",
            "--keep-caps",
        ]
        if not self.support.privileged:
            inner.append("--map-root-user")
        if cfg.own_net:
            inner.append("--net")
        inner.append("--")
        init_cfg = {
            "plan": cfg.plan,
            "root": str(cfg.rootfs),
            "hostname": cfg.hostname,
            "own_net": cfg.own_net,
            "keep": cfg.keep,
            "keep_caps": list(DOCKER_CAPS),
            "last_cap": _last_cap(),
            "inner_unshare": inner,
            "privileged": self.support.privileged,
        }
        cfg_path = cfg.rootfs.parent / "init.cfg"
        cfg_path.write_bytes(marshal.dumps(init_cfg))
        script = [sys.executable, "-I", "-S", str(INIT_SCRIPT)]
        if self.support.privileged:
            argv = [
                self.support.unshare,
                "--mount",
                "--propagation",
                "private",
                "--",
                *script,
                "outer",
                str(child.fileno()),
                str(cfg_path),
            ]
        else:
            argv = [*inner, *script, "inner", str(child.fileno()), str(cfg_path)]
        self._log = cfg.rootfs.parent / "init.log"
        log_fd = os.open(self._log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *argv,
                pass_fds=(child.fileno(),),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log_fd,
                stderr=log_fd,
                start_new_session=True,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8"},
            )
        finally:
            child.close()
            os.close(log_fd)
        parent.setblocking(False)
        self.sock = parent
        hello = await self._recv_setup()
        if hello.get("op") != "hello":
            raise await self._start_error(hello)
        self.host_pid = int(hello["host_pid"])
        self.start_ticks = process_start_ticks(self.host_pid)
        if self.support.privileged:
            try:
                Path(f"/proc/{self.host_pid}/uid_map").write_text("0 0 4294967295\n", encoding="utf-8")
                Path(f"/proc/{self.host_pid}/gid_map").write_text("0 0 4294967295\n", encoding="utf-8")
            except OSError as exc:
                raise SandboxError(
                    f"cannot map user ids of the local sandbox: {exc}", kind=ErrorKind.START_FAILED
                ) from exc
        await asyncio.get_running_loop().sock_sendall(parent, marshal.dumps({"op": "go"}))
        ready = await self._recv_setup()
        if ready.get("op") != "ready":
            raise await self._start_error(ready)
        self._reader = asyncio.create_task(self._read_control(), name="local-sandbox-control")

    async def _recv_setup(self) -> dict:
        assert self.sock is not None
        data = await asyncio.get_running_loop().sock_recv(self.sock, 1 << 16)
        return marshal.loads(data) if data else {}

    async def _start_error(self, msg: dict) -> SandboxError:
        reason = msg.get("msg", "")
        if not reason and self.proc is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.proc.wait(), 2)
            with contextlib.suppress(OSError):
                reason = self._log.read_bytes()[-8192:].decode("utf-8", "replace")
        return SandboxError(
            f"local sandbox failed to start: {reason.strip() or 'init exited'}",
            kind=ErrorKind.START_FAILED,
            detail={"log_tail": reason[-4000:]},
        )

    async def stop(self) -> None:
        """SIGKILL the init (the kernel then kills every process of the pid namespace) and
        wait for ``unshare`` to exit. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        if self.host_pid:
            with contextlib.suppress(OSError):
                fd = os.pidfd_open(self.host_pid)
                try:
                    from cairn.sandbox.local.rootfs import process_start_ticks

                    if process_start_ticks(self.host_pid) == self.start_ticks:
                        signal.pidfd_send_signal(fd, signal.SIGKILL)
                finally:
                    os.close(fd)
        if self.proc is not None:
            # unshare reaps the killed init and exits; kill it only if it does not.
            try:
                await asyncio.wait_for(self.proc.wait(), 2)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self.proc.wait(), 5)
        self._shutdown_channel("the local sandbox was stopped")

    def detach(self) -> None:
        """Leave a kept sandbox running: close the host end without killing anything."""
        self._stopped = True
        self._shutdown_channel("the local sandbox was detached (kept)")

    def _shutdown_channel(self, reason: str) -> None:
        self._lost = self._lost or reason
        if self._reader is not None:
            self._reader.cancel()
        for started, exited in self._pending.values():
            for fut in (started, exited):
                if not fut.done():
                    fut.set_exception(SandboxLostError(reason))
                    fut.exception()
        self._pending.clear()
        for d in list(self._drainers):
            d.close()
        self._drainers.clear()
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    async def _read_control(self) -> None:
        loop = asyncio.get_running_loop()
        assert self.sock is not None
        try:
            while True:
                data = await loop.sock_recv(self.sock, 1 << 16)
                if not data:
                    break
                msg = marshal.loads(data)
                futs = self._pending.get(msg.get("id"))
                if futs is None:
                    continue
                started, exited = futs
                op = msg.get("op")
                if op == "started" and not started.done():
                    started.set_result(int(msg["pid"]))
                elif op == "failed" and not started.done():
                    started.set_exception(SandboxError(f"exec could not start: {msg.get('msg')}"))
                elif op == "exit" and not exited.done():
                    exited.set_result(int(msg["status"]))
        except (OSError, ValueError, EOFError, TypeError):
            pass
        if not self._stopped:
            self._lost = "the local sandbox's init exited"
            for started, exited in self._pending.values():
                for fut in (started, exited):
                    if not fut.done():
                        fut.set_exception(SandboxLostError(self._lost))

    # ---- exec -----------------------------------------------------------------------------
    async def run(
        self,
        argv: list[str],
        *,
        uid: int,
        gid: int,
        groups: list[int],
        cwd: str,
        env: dict[str, str],
        timeout_sec: float | None,
        max_output_bytes: int,
    ) -> ExecResult:
        """Fork ``argv`` inside the sandbox and wait for it (see ``Sandbox.exec``).

        Raises:
            SandboxLostError: the init is gone. SandboxError: the exec could not start.
        """
        if self._lost or self.sock is None:
            raise SandboxLostError(self._lost or "the local sandbox is not running")
        loop = asyncio.get_running_loop()
        t0 = time.monotonic()
        exec_id = next(self._ids)
        tag = f"{os.getpid()}-{id(self):x}-{exec_id}"
        env = {**env, EXEC_TAG_VAR: tag}
        req = {
            "op": "exec",
            "id": exec_id,
            "argv": argv,
            "env": env,
            "cwd": cwd,
            "uid": uid,
            "gid": gid,
            "groups": groups,
            "setgroups": self.support.privileged,
        }
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        out_tail, err_tail = TailBuffer(max_output_bytes), TailBuffer(max_output_bytes)
        readers = [_PipeReader(out_r, out_tail), _PipeReader(err_r, err_tail)]
        started, exited = loop.create_future(), loop.create_future()
        self._pending[exec_id] = (started, exited)
        try:
            await self._send(req, [out_w, err_w])
        except BaseException:
            self._pending.pop(exec_id, None)
            for r in readers:
                r.close()
            raise
        finally:
            os.close(out_w)
            os.close(err_w)
        timed_out = False
        status: int | None = None
        try:
            try:
                async with asyncio.timeout(timeout_sec):
                    await asyncio.shield(started)
                    status = await asyncio.shield(exited)
            except TimeoutError:
                timed_out = True
                await asyncio.to_thread(self.kill_tagged, tag)
                with contextlib.suppress(TimeoutError, SandboxError):
                    async with asyncio.timeout(2):
                        await asyncio.shield(exited)
        except BaseException:
            # The caller gave up on this exec (cancelled): end its whole tree, like a timeout.
            with contextlib.suppress(Exception):
                self.kill_tagged(tag)
            for r in readers:
                r.close()
            raise
        finally:
            self._pending.pop(exec_id, None)
        if not timed_out:
            await self._settle(tag, " ".join(argv))
        await self._finish_readers(readers)
        exit_code = None if timed_out else _exit_code(status)
        return ExecResult(
            exit_code=exit_code,
            stdout=out_tail.text(),
            stderr=err_tail.text(),
            timed_out=timed_out,
            elapsed_sec=time.monotonic() - t0,
            stdout_truncated=out_tail.truncated,
            stderr_truncated=err_tail.truncated,
        )

    async def _settle(self, tag: str, own_cmdline: str) -> None:
        """Let background processes the exec left finish starting: wait (at most
        :data:`SETTLE_MAX_SEC`) until their command lines stop changing and none is still an
        un-exec'd fork of the exec's own command. Costs one scan when nothing was left."""
        entry = f"{EXEC_TAG_VAR}={tag}"
        previous: dict[int, str] | None = None
        deadline = time.monotonic() + SETTLE_MAX_SEC
        while True:
            now = tagged_processes(self.root, entry)
            if not now or (now == previous and own_cmdline not in now.values()):
                return
            if time.monotonic() >= deadline:
                return
            previous = now
            await asyncio.sleep(SETTLE_POLL_SEC)

    async def _finish_readers(self, readers: list[_PipeReader]) -> None:
        pending = [r.done for r in readers if not r.done.done()]
        if pending:
            await asyncio.wait(pending, timeout=DRAIN_GRACE_SEC)
        for r in readers:
            if not r.done.done():
                # A background process holds the pipe: keep draining (discarding) so it
                # never blocks or gets SIGPIPE; stop() closes it.
                r.tail._trim()
                r.tail.discard = True
                self._drainers.add(r)

                def forget(_f: asyncio.Future[None], r: _PipeReader = r) -> None:
                    self._drainers.discard(r)

                r.done.add_done_callback(forget)

    async def _send(self, req: dict, fds: list[int]) -> None:
        assert self.sock is not None
        payload = marshal.dumps(req)
        extra: list[int] = []
        if len(payload) > INLINE_REQUEST_BYTES:
            mfd = os.memfd_create("cairn-exec", os.MFD_CLOEXEC)
            os.write(mfd, payload)
            extra = [mfd]
            payload = marshal.dumps({"op": "exec_fd"})
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds + extra))]
        try:
            for _ in range(2000):
                try:
                    self.sock.sendmsg([payload], anc)
                    return
                except BlockingIOError:
                    await asyncio.sleep(0.001)
            raise SandboxError("the local sandbox's control socket is stuck")
        except OSError as exc:
            raise SandboxLostError(f"the local sandbox's init is gone: {exc}") from exc
        finally:
            for fd in extra:
                os.close(fd)

    # ---- processes ------------------------------------------------------------------------
    def processes(self) -> list[ProcessInfo]:
        """Processes of the sandbox's pid namespace, as it sees them (zombies left out).

        Raises:
            SandboxLostError: the sandbox is gone.
        """
        return list_processes(self.root)

    def kill(self, targets: list[ProcessInfo]) -> None:
        """SIGKILL processes matched by ``(pid, start_ticks)``; pid 1 and gone ones skipped."""
        kill_processes(self.root, targets)

    def freeze(self, targets: list[ProcessInfo]) -> None:
        """SIGSTOP processes matched by ``(pid, start_ticks)`` (they can fork no more); pid 1
        and gone ones skipped."""
        signal_processes(self.root, targets, signal.SIGSTOP)

    def kill_tagged(self, tag: str) -> int:
        """SIGKILL every process of the exec tagged ``tag`` and its descendants (see
        :func:`~cairn.sandbox.local.proc.kill_tagged`)."""
        return kill_tagged(self.root, f"{EXEC_TAG_VAR}={tag}")


def _exit_code(status: int | None) -> int | None:
    if status is None:
        return None
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.waitstatus_to_exitcode(status)
