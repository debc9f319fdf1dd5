"""PID 1 of a local sandbox: builds the root file system, then spawns every exec (design §3.2).

This file runs as a *standalone program* (``python -I -S pid1.py STAGE CONTROL_FD
CONFIG_PATH``); it imports only the standard library, nothing from cairn, and as little as it
can (it starts once or twice per sandbox). As root it runs twice: stage ``outer`` (in
``unshare --mount``) mounts the overlays as real root — inside a user namespace a host folder
with mounts beneath it could not be an overlay layer — then execs the inner ``unshare --user
--pid --ipc --uts [--net] --mount --fork``, whose child runs stage ``inner`` as PID 1 (the
copied overlays are then locked for the sandbox). Unprivileged, only ``inner`` runs.

Why the init spawns the execs instead of ``nsenter``: joining a user namespace with ``setns``
resets the bounding set to full, and any dynamically linked helper run inside the sandbox
(``setpriv``) could be hijacked by the sandbox's own ``/etc/ld.so.preload`` while it still
holds every capability. The init instead drops to a Docker container root's capabilities and
no-new-privs once, after building the root, and every exec inherits that (the runc model).

Protocol on the control socket (``SOCK_SEQPACKET``; one ``marshal``-ed dict per message — both
ends are the same interpreter):

- init → host ``{"op": "hello", "host_pid": N}``: the user namespace exists; the host writes
  ``uid_map``/``gid_map`` (when it is root) and answers ``{"op": "go"}``.
- init → host ``{"op": "ready"}``, or ``{"op": "error", "msg": ...}`` and exit.
- host → init ``{"op": "exec", "id": K, "argv": [...], "env": {...}, "cwd": ..., "uid": U,
  "gid": G, "groups": [...], "setgroups": bool}`` with the exec's stdout and stderr write ends
  as ``SCM_RIGHTS`` (a big request comes as ``{"op": "exec_fd"}`` plus a memfd holding it);
  init → host ``{"op": "started", "id": K, "pid": P}`` then ``{"op": "exit", "id": K,
  "status": WAITSTATUS}``.

When the host end closes, the init exits (the kernel then kills the whole pid namespace),
unless the sandbox is kept. SIGTERM, SIGINT and SIGHUP do nothing; it is ended with SIGKILL.
"""

import ctypes
import errno
import marshal
import os
import sys

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
PIVOT_ROOT_SYSCALL = {
    "x86_64": 155,
    "aarch64": 41,
    "riscv64": 41,
    "loongarch64": 41,
    "ppc64le": 203,
    "ppc64": 203,
    "s390x": 217,
    "i686": 217,
    "armv7l": 218,
}

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.sethostname.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_libc.syscall.restype = ctypes.c_long


def _check(rc, what):
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def _b(s):
    return None if s is None else os.fsencode(s)


def mount(source, target, fstype, flags=0, data=None):
    """Mount ``source`` on ``target`` (the system call; ``flags`` are ``MS_*`` bits).

    Raises:
        OSError: the call failed; the message names the file system type, source and target.
    """
    _check(
        _libc.mount(_b(source), _b(target), _b(fstype), flags, _b(data)),
        f"mount {fstype or 'bind'} {source} on {target}",
    )


def prctl(option, arg2=0):
    """The process-control system call with ``option`` (a ``PR_*`` number) and one argument.

    Raises:
        OSError: the call failed.
    """
    _check(_libc.prctl(option, arg2, 0, 0, 0), f"prctl {option}")


def pivot_root_here():
    """Make the current directory the root of this mount namespace and drop the old root."""
    machine = os.uname().machine
    nr = PIVOT_ROOT_SYSCALL.get(machine)
    if nr is None:
        raise OSError(errno.ENOSYS, f"pivot_root: unknown architecture {machine}")
    _check(_libc.syscall(ctypes.c_long(nr), b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH), "umount old root")
    os.chdir("/")


def send(fd, obj):
    """Send one message on the control socket (``write`` on a SEQPACKET socket)."""
    try:
        os.write(fd, marshal.dumps(obj))
    except OSError:
        pass


# ---- building the root ------------------------------------------------------------------
def apply_op(op):
    """Run one step of the host-computed root plan (see cairn.sandbox.local.rootfs)."""
    kind = op["op"]
    target = op.get("target")
    if kind == "overlay":
        lower = ":".join(op["lower"])
        data = f"lowerdir={lower},upperdir={op['upper']},workdir={op['work']},userxattr"
        mount("overlay", target, "overlay", 0, data)
    elif kind == "bind":
        if not os.path.lexists(op["source"]):
            return
        if not os.path.lexists(target):
            if os.path.isdir(op["source"]):
                os.makedirs(target, exist_ok=True)
            else:
                os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
        mount(op["source"], target, None, MS_BIND | (MS_REC if op.get("rec") else 0))
        if op.get("ro"):
            mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | op.get("flags", 0))
    elif kind == "mount":
        if op.get("optional") and not os.path.isdir(target):
            return
        try:
            mount(op["source"], target, op["fstype"], op.get("flags", 0), op.get("data"))
        except OSError:
            if not op.get("optional"):
                raise
    elif kind == "mkdir":
        os.makedirs(target, exist_ok=True)
        os.chmod(target, op.get("mode", 0o755))
    elif kind == "symlink":
        if not os.path.lexists(target):
            os.symlink(op["source"], target)
    elif kind == "mask":
        # Hide a file with /dev/null, a folder with an empty read-only tmpfs (Docker's
        # masked paths); a missing path is left alone.
        if not os.path.lexists(target):
            return
        if os.path.isdir(target):
            mount("tmpfs", target, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=0")
        else:
            mount(op["null"], target, None, MS_BIND)
    elif kind == "readonly":
        if not os.path.lexists(target):
            return
        mount(target, target, None, MS_BIND | MS_REC)
        mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    else:
        raise ValueError(f"unknown root plan step {kind!r}")


def loopback_up():
    """Bring ``lo`` up in a fresh network namespace."""
    import fcntl
    import socket
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifr = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s, SIOCGIFFLAGS, ifr))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def build_root(cfg):
    """Mount the inner-stage steps of the plan, set the hostname, pivot into the root."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    root = cfg["root"]
    if any(op.get("stage") == "outer" for op in cfg["plan"]):
        # Mounts copied from the outer stage are locked here; pivot_root needs a new root
        # mount of our own, so bind the tree onto itself (its children stay locked with it).
        mount(root, root, None, MS_BIND | MS_REC)
    for op in cfg["plan"]:
        if op.get("stage") != "outer":
            apply_op(op)
    name = cfg["hostname"].encode()
    _check(_libc.sethostname(name, len(name)), "sethostname")
    if cfg.get("own_net"):
        loopback_up()
    os.chdir(root)
    pivot_root_here()


# ---- privileges ---------------------------------------------------------------------------
class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def drop_privileges(keep_caps, last_cap, privileged):
    """Once the root is built: no-new-privs, bounding, effective and permitted sets cut to
    Docker's, inheritable and ambient sets empty, no supplementary groups, not dumpable (the
    sandbox cannot ptrace its init). Every exec inherits this before its first ``execve``."""
    prctl(PR_SET_DUMPABLE, 0)
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    for cap in range(last_cap + 1):
        if cap not in keep_caps:
            prctl(PR_CAPBSET_DROP, cap)
    try:
        prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    except OSError:
        pass
    if privileged:
        os.setgroups([])
    mask = sum(1 << c for c in keep_caps)
    data = (_CapData * 2)()
    for i, d in enumerate(data):
        d.effective = d.permitted = (mask >> (32 * i)) & 0xFFFFFFFF
        d.inheritable = 0
    _check(_libc.capset(ctypes.byref(_CapHeader(0x20080522, 0)), data), "capset")


def _noop_handler(*_args):
    """Installed instead of SIG_IGN, so that execs start with default dispositions."""


# ---- the loop ---------------------------------------------------------------------------
class Init:
    """The event loop of PID 1: control messages, SIGCHLD reaping, exec bookkeeping."""

    def __init__(self, fd, cfg):
        # Everything the loop and the execs need is imported now, while the host root is
        # still visible (after pivot_root the standard library is gone).
        import array  # noqa: F401
        import select  # noqa: F401
        import socket
        import subprocess
        import warnings  # noqa: F401 - os.get_exec_path imports it lazily

        self.fd = fd
        self.sock = socket.socket(fileno=fd)
        self.subprocess = subprocess
        self.cfg = cfg
        self.running = {}  # pid -> (exec id, Popen); the Popen is kept so it never reaps

    def handle(self, data, fds):
        """Serve one host message: ``data`` (a marshal-ed dict, or the memfd of an ``exec_fd``
        request among ``fds``) and the file descriptors that came with it. An ``exec`` with its
        two pipe ends is spawned; anything else is dropped and its descriptors closed.
        """
        req = marshal.loads(data) if data else {}
        if req.get("op") == "exec_fd" and fds:
            big = fds.pop()
            chunks, offset = [], 0
            while chunk := os.pread(big, 1 << 20, offset):
                chunks.append(chunk)
                offset += len(chunk)
            os.close(big)
            req = marshal.loads(b"".join(chunks))
        if req.get("op") != "exec" or len(fds) < 2:
            for fd in fds:
                os.close(fd)
            return
        self.spawn(req, fds)

    def spawn(self, req, fds):
        """Start one exec with its stdout/stderr pipes (``fds``); report started/exit."""
        sp = self.subprocess
        out_fd, err_fd = fds[0], fds[1]
        uid, gid = req["uid"], req["gid"]
        groups = req.get("groups") or []
        as_root = uid == 0 and gid == 0 and groups in ([], [0])
        proc = None
        try:
            proc = sp.Popen(
                req["argv"],
                stdin=sp.DEVNULL,
                stdout=out_fd,
                stderr=err_fd,
                cwd=req["cwd"],
                env=req["env"],
                close_fds=True,
                restore_signals=True,
                umask=0o022,
                user=None if as_root else uid,
                group=None if as_root else gid,
                extra_groups=None if as_root or not req.get("setgroups", True) else groups,
            )
        except OSError as exc:
            if exc.filename == req["cwd"] and exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.EACCES):
                msg, code = f"chdir to cwd {req['cwd']!r} failed: {exc.strerror}", 126
            else:
                code = 127 if exc.errno in (errno.ENOENT, errno.ENOTDIR) else 126
                msg = f"exec {req['argv'][0]!r} failed: {exc.strerror}"
            try:
                os.write(err_fd, f"cairn: {msg}\n".encode())
            except OSError:
                pass
            send(self.fd, {"op": "started", "id": req["id"], "pid": 0})
            send(self.fd, {"op": "exit", "id": req["id"], "status": code << 8})
        except BaseException as exc:  # noqa: BLE001 - report, keep serving other execs
            send(self.fd, {"op": "failed", "id": req["id"], "msg": repr(exc)})
        finally:
            for fd in fds:
                os.close(fd)
        if proc is not None:
            self.running[proc.pid] = (req["id"], proc)
            send(self.fd, {"op": "started", "id": req["id"], "pid": proc.pid})

    def reap(self):
        """Collect every exited child without blocking; report an exec's wait status to the
        host as ``{"op": "exit"}`` (orphans re-parented to PID 1 are reaped silently)."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            entry = self.running.pop(pid, None)
            if entry is not None:
                exec_id, proc = entry
                proc.returncode = os.waitstatus_to_exitcode(status)
                send(self.fd, {"op": "exit", "id": exec_id, "status": status})

    def loop(self):
        """Serve the control socket; SIGCHLD wakes the loop to reap. When the host end closes,
        exit (the kernel then kills the pid namespace), or for a kept sandbox go on reaping.
        Never returns."""
        import array
        import select
        import signal
        import socket

        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, _noop_handler)
        self.sock.setblocking(False)
        poll = select.poll()
        poll.register(self.fd, select.POLLIN)
        poll.register(wake_r, select.POLLIN)
        space = socket.CMSG_SPACE(16 * array.array("i").itemsize)
        self.reap()
        while True:
            try:
                events = poll.poll()
            except InterruptedError:
                continue
            for fd, _ev in events:
                if fd == wake_r:
                    try:
                        while os.read(wake_r, 512):
                            pass
                    except BlockingIOError:
                        pass
                    self.reap()
                    continue
                try:
                    data, anc, _flags, _addr = self.sock.recvmsg(1 << 18, space)
                except BlockingIOError:
                    continue
                except OSError:
                    data, anc = b"", []
                fds = []
                for level, typ, cdata in anc:
                    if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                        arr = array.array("i")
                        arr.frombytes(cdata[: len(cdata) - len(cdata) % arr.itemsize])
                        fds.extend(arr)
                if not data and not fds:
                    # The host went away: end the sandbox unless it is kept.
                    poll.unregister(self.fd)
                    self.sock.close()
                    if not self.cfg.get("keep"):
                        os._exit(0)
                    continue
                self.handle(data, fds)


# ---- stages -------------------------------------------------------------------------------
def _fail(fd, exc):
    send(fd, {"op": "error", "msg": f"{type(exc).__name__}: {exc}"[-4000:]})
    os._exit(1)


def outer_stage(fd, cfg_path):
    """Privileged first stage: mount the overlays as real root in a private mount namespace,
    then exec the inner ``unshare`` (user, pid, ipc, uts, net, mount), which copies them."""
    with open(cfg_path, "rb") as f:
        cfg = marshal.load(f)
    try:
        mount(None, "/", None, MS_REC | MS_PRIVATE)
        for op in cfg["plan"]:
            if op.get("stage") == "outer":
                apply_op(op)
        os.set_inheritable(fd, True)
        argv = list(cfg["inner_unshare"]) + [
            sys.executable,
            "-I",
            "-S",
            os.path.abspath(__file__),
            "inner",
            str(fd),
            cfg_path,
        ]
        os.execv(argv[0], argv)
    except BaseException as exc:  # noqa: BLE001 - the host gets the reason, then we leave
        _fail(fd, exc)


def inner_stage(fd, cfg_path):
    """PID 1 of the sandbox: handshake, build the root, drop privileges, serve execs."""
    import signal

    with open(cfg_path, "rb") as f:
        cfg = marshal.load(f)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _noop_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    send(fd, {"op": "hello", "host_pid": int(os.readlink("/proc/self"))})
    try:
        go = marshal.loads(os.read(fd, 4096) or marshal.dumps({}))
    except (OSError, ValueError, EOFError):
        go = {}
    if go.get("op") != "go":
        os._exit(1)
    try:
        init = Init(fd, cfg)  # imports what the loop needs before the host root goes away
        build_root(cfg)
        drop_privileges(set(cfg["keep_caps"]), cfg["last_cap"], cfg.get("privileged", True))
        null = os.open("/dev/null", os.O_RDWR)
        for i in (0, 1, 2):
            os.dup2(null, i)
        os.close(null)
    except BaseException as exc:  # noqa: BLE001 - the host gets the reason, then we leave
        _fail(fd, exc)
    send(fd, {"op": "ready"})
    init.loop()


def main():
    """Entry point: ``pid1.py STAGE CONTROL_FD CONFIG_PATH`` (stage ``outer`` or ``inner``)."""
    stage, fd, cfg_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if stage == "outer":
        outer_stage(fd, cfg_path)
    else:
        inner_stage(fd, cfg_path)


if __name__ == "__main__":
    main()
