"""Host side of the local backend's root file system (design §3.2): where state lives, what the
host supports, and the mount plan the sandbox init executes.

The sandbox root is one overlay (Dockerfile layers over a per-sandbox *skeleton* of fresh
folders), with one more overlay per visible host system folder mounted on top of it::

    /            overlay: layer/root … : skeleton           upper: <sandbox>/up/root
    /usr         overlay: layer/root/usr … : host /usr      upper: <sandbox>/up/usr
    /etc         overlay: layer/root/etc … : mask/etc : host /etc
    /var/lib     overlay: layer/root/var/lib … : mask/var/lib : host /var/lib
    /opt, /lib*, other /var/* folders likewise; /proc, /dev, /sys fresh

Per-folder overlays are needed because an overlay layer never shows what is mounted beneath
it, and because overlayfs refuses a layer that lies inside another layer: state therefore lives
in ``/var/tmp/cairn`` (``/var/tmp`` is fresh inside, never a layer). The *mask* layer holds
whiteouts for ``/etc/shadow``, ``/etc/gshadow``, ``/etc/ssh/*key*``, ``/var/lib/docker`` and
``/var/lib/containerd`` and generated ``/etc/hostname``, ``/etc/hosts``, ``/etc/resolv.conf``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import stat
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cairn.errors import UnsupportedError

STATE_DIR_ENV = "CAIRN_LOCAL_DIR"
"""Environment variable overriding the state folder (default ``/var/tmp/cairn``)."""

MARKER_NAME = "cairn.json"
"""The marker file in every sandbox folder: backend, job and trial ids, job dir, init pid."""

SYSTEM_TOP_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "opt")
"""Host folders visible (read-only beneath the overlay) at the top level; /var is handled per
child folder."""

VAR_FRESH = ("tmp", "run", "lock")
"""Children of /var never taken from the host (fresh folder, or the host's symlink into the
sandbox's own /run)."""

FRESH_TOP_DIRS = {
    "tmp": 0o1777,
    "root": 0o700,
    "home": 0o755,
    "run": 0o755,
    "mnt": 0o755,
    "media": 0o755,
    "srv": 0o755,
    "boot": 0o755,
    "proc": 0o555,
    "sys": 0o555,
    "dev": 0o755,
    "var": 0o755,
}
"""Top-level folders created empty in the skeleton (host content never shows there)."""

ETC_WHITEOUTS = ("shadow", "gshadow", "shadow-", "gshadow-")
VAR_LIB_WHITEOUTS = ("docker", "containerd")

DOCKER_CAPS = (0, 1, 3, 4, 5, 6, 7, 8, 10, 13, 18, 27, 29, 31)
"""Capabilities a Docker container's root keeps: CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL,
SETGID, SETUID, SETPCAP, NET_BIND_SERVICE, NET_RAW, SYS_CHROOT, MKNOD, AUDIT_WRITE, SETFCAP."""

PROC_MASKED = (
    "acpi",
    "asound",
    "kcore",
    "keys",
    "latency_stats",
    "timer_list",
    "timer_stats",
    "sched_debug",
    "scsi",
)
PROC_READONLY = ("bus", "fs", "irq", "sys", "sysrq-trigger")
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8

_BAD_PATH_CHARS = re.compile(r"[:,\\\n]")


# ---- state folders ------------------------------------------------------------------------
def state_dir() -> Path:
    """The local backend's state folder: ``$CAIRN_LOCAL_DIR``, else ``/var/tmp/cairn`` for root
    and ``/var/tmp/cairn-<uid>`` for other users."""
    env = os.environ.get(STATE_DIR_ENV)
    if env:
        return Path(env)
    uid = os.geteuid()
    return Path("/var/tmp/cairn" if uid == 0 else f"/var/tmp/cairn-{uid}")


def sandboxes_dir() -> Path:
    """Folder holding one sub-folder per running (or left-over) local sandbox."""
    return state_dir() / "local"


def layers_dir() -> Path:
    """Folder holding the cached Dockerfile layers, one per environment hash."""
    return state_dir() / "layers"


def mounted_system_dirs(host_root: Path = Path("/")) -> list[str]:
    """The host folders mounted as their own overlay, as relative paths (``usr``,
    ``var/lib``…): real directories among :data:`SYSTEM_TOP_DIRS` and the children of /var."""
    out = [d for d in SYSTEM_TOP_DIRS if (host_root / d).is_dir() and not (host_root / d).is_symlink()]
    var = host_root / "var"
    if var.is_dir():
        for child in sorted(os.listdir(var)):
            p = var / child
            if child not in VAR_FRESH and p.is_dir() and not p.is_symlink():
                out.append(f"var/{child}")
    return out


def check_state_dir(path: Path) -> None:
    """Refuse a state folder overlayfs cannot use.

    Raises:
        UnsupportedError: the path holds ``:``, ``,`` or ``\\`` (overlay option syntax), or
            lies inside a folder that is itself an overlay layer (``/usr``, ``/etc``, ``/opt``,
            ``/var/lib``…).
    """
    real = Path(os.path.realpath(path))
    if _BAD_PATH_CHARS.search(str(real)):
        raise UnsupportedError(
            f"local sandbox state folder {real} must not contain ':', ',' or '\\' (set CAIRN_LOCAL_DIR)"
        )
    for d in mounted_system_dirs():
        base = Path("/", d)
        if real == base or base in real.parents:
            raise UnsupportedError(
                f"local sandbox state folder {real} lies inside {base}, which "
                "the sandbox mounts as a layer; set CAIRN_LOCAL_DIR elsewhere "
                "(e.g. under /var/tmp)"
            )


# ---- host support -------------------------------------------------------------------------
@dataclass(frozen=True)
class HostSupport:
    """How this host can run local sandboxes.

    Attributes:
        privileged: True when running as root (full uid/gid mapping); False for an
            unprivileged user namespace (only root inside is mapped, to the calling user).
        unshare: absolute path of util-linux ``unshare``.
    """

    privileged: bool
    unshare: str


UNSHARE_OPTIONS = ("--keep-caps", "--kill-child", "--map-root-user", "--propagation")
"""``unshare`` options the backend uses (``--keep-caps`` needs a recent util-linux)."""


@functools.lru_cache(maxsize=8)
def _unshare_missing_options(unshare: str) -> tuple[str, ...]:
    try:
        out = subprocess.run(
            [unshare, "--help"],
            capture_output=True,
            encoding="utf-8",
            errors="replace",
            timeout=10,
            check=False,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return UNSHARE_OPTIONS
    return tuple(o for o in UNSHARE_OPTIONS if o not in out)


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None


def probe_host(
    *, euid: int | None = None, proc_root: Path = Path("/proc"), which: object = shutil.which
) -> HostSupport:
    """Check that this host can run local sandboxes.

    Args:
        euid: the effective uid to judge (default: this process's).
        proc_root: where to read ``sys/kernel/...`` and ``filesystems`` (a test seam).
        which: ``shutil.which``-like lookup of executables (a test seam).

    Returns:
        The :class:`HostSupport`.

    Raises:
        UnsupportedError: not Linux, util-linux ``unshare`` missing or too old, no overlayfs,
            or neither
            root nor unprivileged user namespaces are available.
    """
    if not (proc_root / "self").exists() and proc_root == Path("/proc"):
        raise UnsupportedError("the local backend needs Linux (/proc is missing)")
    unshare = which("unshare")  # type: ignore[operator]
    if not unshare:
        raise UnsupportedError(
            "the local backend needs util-linux 'unshare' on PATH (Debian/Ubuntu: apt-get install util-linux)"
        )
    missing = _unshare_missing_options(str(unshare))
    if missing:
        raise UnsupportedError(
            f"the local backend needs a newer util-linux: {unshare} lacks {', '.join(missing)}"
        )
    try:
        filesystems = (proc_root / "filesystems").read_text(encoding="utf-8")
    except OSError:
        filesystems = ""
    if "overlay" not in filesystems.split():
        raise UnsupportedError("the local backend needs kernel overlayfs (modprobe overlay)")
    euid = os.geteuid() if euid is None else euid
    if euid == 0:
        return HostSupport(privileged=True, unshare=str(unshare))
    sysk = proc_root / "sys"
    reasons = []
    if _read_int(sysk / "kernel" / "unprivileged_userns_clone") == 0:
        reasons.append("kernel.unprivileged_userns_clone = 0")
    if _read_int(sysk / "user" / "max_user_namespaces") == 0:
        reasons.append("user.max_user_namespaces = 0")
    if _read_int(sysk / "kernel" / "apparmor_restrict_unprivileged_userns") == 1:
        reasons.append("kernel.apparmor_restrict_unprivileged_userns = 1")
    if reasons:
        raise UnsupportedError(
            "the local backend needs root or unprivileged user namespaces, and neither is "
            f"available here ({'; '.join(reasons)}); run as root, enable user namespaces, or "
            "use -e docker"
        )
    return HostSupport(privileged=False, unshare=str(unshare))


# ---- per-sandbox folders and the plan -----------------------------------------------------
def _whiteout(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mknod(path, stat.S_IFCHR | 0o000, os.makedev(0, 0))


def _hosts_file(hostname: str) -> str:
    return (
        "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
        "fe00::0\tip6-localnet\nff00::0\tip6-mcastprefix\nff02::1\tip6-allnodes\n"
        f"ff02::2\tip6-allrouters\n127.0.1.1\t{hostname}\n"
    )


def prepare_skeleton(skel: Path, host_root: Path = Path("/")) -> None:
    """Create the lowest layer of the sandbox root: fresh top-level folders, mount points for
    the host system folders, and the host's symlinks (``/bin -> usr/bin`` on merged-/usr)."""
    skel.mkdir(parents=True, exist_ok=True)
    for name, mode in FRESH_TOP_DIRS.items():
        (skel / name).mkdir(exist_ok=True)
        os.chmod(skel / name, mode)
    for name in SYSTEM_TOP_DIRS:
        p = host_root / name
        if p.is_symlink():
            with contextlib.suppress(FileExistsError):
                os.symlink(os.readlink(p), skel / name)
        elif p.is_dir():
            (skel / name).mkdir(exist_ok=True)
            os.chmod(skel / name, stat.S_IMODE(p.stat().st_mode))
    var = host_root / "var"
    if var.is_dir():
        for child in sorted(os.listdir(var)):
            p = var / child
            if p.is_symlink():
                with contextlib.suppress(FileExistsError):
                    os.symlink(os.readlink(p), skel / "var" / child)
            elif p.is_dir():
                (skel / "var" / child).mkdir(exist_ok=True)
                mode = 0o1777 if child == "tmp" else stat.S_IMODE(p.stat().st_mode)
                os.chmod(skel / "var" / child, mode)
    (skel / "var" / "tmp").mkdir(exist_ok=True)
    os.chmod(skel / "var" / "tmp", 0o1777)


def prepare_mask(mask: Path, hostname: str, host_root: Path = Path("/")) -> None:
    """Create the mask layer: whiteouts hiding host secrets and Docker state, and generated
    ``/etc/hostname``, ``/etc/hosts`` and ``/etc/resolv.conf``."""
    etc = mask / "etc"
    etc.mkdir(parents=True, exist_ok=True)
    for name in ETC_WHITEOUTS:
        _whiteout(etc / name)
    ssh = host_root / "etc" / "ssh"
    if ssh.is_dir() and not ssh.is_symlink():
        (etc / "ssh").mkdir(exist_ok=True)
        os.chmod(etc / "ssh", stat.S_IMODE(ssh.stat().st_mode))
        for name in os.listdir(ssh):
            if "key" in name:
                _whiteout(etc / "ssh" / name)
    (etc / "hostname").write_text(hostname + "\n", encoding="utf-8")
    (etc / "hosts").write_text(_hosts_file(hostname), encoding="utf-8")
    try:
        resolv = (host_root / "etc" / "resolv.conf").read_text(encoding="utf-8")
    except OSError:
        resolv = ""
    (etc / "resolv.conf").write_text(resolv, encoding="utf-8")
    for name in ("hostname", "hosts", "resolv.conf"):
        os.chmod(etc / name, 0o644)
    for name in VAR_LIB_WHITEOUTS:
        _whiteout(mask / "var" / "lib" / name)


def host_mount_points(mountinfo: str | None = None) -> list[str]:
    """Mount points of this mount namespace (``/proc/self/mountinfo`` field 5, unescaped)."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text(encoding="utf-8")
        except OSError:
            return []
    out = []
    for line in mountinfo.splitlines():
        f = line.split()
        if len(f) > 4:
            out.append(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), f[4]))
    return out


def root_plan(
    sandbox_dir: Path,
    layer_roots: list[Path],
    *,
    own_net: bool,
    privileged: bool,
    host_root: Path = Path("/"),
    mount_points: list[str] | None = None,
) -> list[dict]:
    """The mount plan the init runs (see :mod:`cairn.sandbox.local.pid1`), in order.

    Creates the upper and work folders it names (and, unprivileged, extra skeleton folders).
    Privileged, the overlays are mounted in a first stage by real root (``"stage": "outer"``);
    unprivileged, everything happens inside the user namespace, where a host folder with
    mounts beneath it cannot be a layer, so such a folder is split: its sub-folders get their
    own overlays, its files are bound read-only, Docker's state is left out.

    Args:
        sandbox_dir: the sandbox folder (holds ``skel``, ``mask``, ``up``, ``wk``, ``rootfs``).
        layer_roots: the ``root`` trees of the Dockerfile layers, topmost first.
        own_net: whether the sandbox has its own network namespace (then a fresh sysfs).
        privileged: whether we are root (all ids mapped; two-stage mounting).
        host_root: the host root (a test seam).
        mount_points: the host's mount points (default: read from ``/proc/self/mountinfo``).

    Returns:
        A list of JSON-able steps.
    """
    rootfs = sandbox_dir / "rootfs"
    rootfs.mkdir(exist_ok=True)
    skel = sandbox_dir / "skel"
    plan: list[dict] = []
    stage = "outer" if privileged else "inner"
    mps = (
        [] if privileged else [m for m in (mount_points if mount_points is not None else host_mount_points())]
    )
    excluded = {f"var/lib/{n}" for n in VAR_LIB_WHITEOUTS}

    def overlay(rel: str, lowers: list[Path], target: Path) -> None:
        up, wk = sandbox_dir / "up" / rel, sandbox_dir / "wk" / rel
        up.mkdir(parents=True, exist_ok=True)
        wk.mkdir(parents=True, exist_ok=True)
        plan.append(
            {
                "op": "overlay",
                "rel": rel,
                "target": str(target),
                "stage": stage,
                "lower": [str(p) for p in lowers],
                "upper": str(up),
                "work": str(wk),
            }
        )

    def system_dir(rel: str) -> None:
        host = host_root / rel
        below = [m for m in mps if m.startswith(str(host).rstrip("/") + "/")]
        if not below:
            lowers = [lr / rel for lr in layer_roots if (lr / rel).is_dir() and not (lr / rel).is_symlink()]
            mask = sandbox_dir / "mask" / rel
            if mask.is_dir():
                lowers.append(mask)
            lowers.append(host)
            overlay(rel, lowers, rootfs / rel)
            return
        for child in sorted(os.listdir(host)):
            crel, p = f"{rel}/{child}", host / child
            if crel in excluded:
                continue
            if p.is_symlink():
                with contextlib.suppress(FileExistsError):
                    os.symlink(os.readlink(p), skel / crel)
            elif p.is_dir():
                (skel / crel).mkdir(parents=True, exist_ok=True)
                os.chmod(skel / crel, stat.S_IMODE(p.stat().st_mode))
                system_dir(crel)
            elif p.is_file():
                (skel / crel).touch()
                plan.append(
                    {"op": "bind", "source": str(p), "target": str(rootfs / crel), "ro": True, "stage": stage}
                )

    overlay("root", [*layer_roots, skel], rootfs)
    for rel in mounted_system_dirs(host_root):
        system_dir(rel)

    nosuid_nodev_noexec = MS_NOSUID | MS_NODEV | MS_NOEXEC
    proc = rootfs / "proc"
    plan.append(
        {"op": "mount", "source": "proc", "target": str(proc), "fstype": "proc", "flags": nosuid_nodev_noexec}
    )
    plan += [{"op": "mask", "target": str(proc / n), "null": "/dev/null"} for n in PROC_MASKED]
    plan += [{"op": "readonly", "target": str(proc / n)} for n in PROC_READONLY]

    dev = rootfs / "dev"
    plan.append(
        {
            "op": "mount",
            "source": "tmpfs",
            "target": str(dev),
            "fstype": "tmpfs",
            "flags": MS_NOSUID | MS_NOEXEC,
            "data": "mode=755,size=65536k",
        }
    )
    plan += [{"op": "bind", "source": f"/dev/{n}", "target": str(dev / n)} for n in DEVICES]
    plan.append({"op": "mkdir", "target": str(dev / "pts"), "mode": 0o755})
    pts_opts = "newinstance,ptmxmode=0666,mode=0620" + (",gid=5" if privileged else "")
    plan.append(
        {
            "op": "mount",
            "source": "devpts",
            "target": str(dev / "pts"),
            "fstype": "devpts",
            "flags": MS_NOSUID | MS_NOEXEC,
            "data": pts_opts,
            "optional": True,
        }
    )
    plan.append({"op": "symlink", "source": "pts/ptmx", "target": str(dev / "ptmx")})
    plan.append({"op": "mkdir", "target": str(dev / "shm"), "mode": 0o1777})
    plan.append(
        {
            "op": "mount",
            "source": "shm",
            "target": str(dev / "shm"),
            "fstype": "tmpfs",
            "flags": nosuid_nodev_noexec,
            "data": "mode=1777,size=65536k",
        }
    )
    plan.append({"op": "mkdir", "target": str(dev / "mqueue"), "mode": 0o755})
    for name, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("core", "/proc/kcore"),
    ):
        plan.append({"op": "symlink", "source": target, "target": str(dev / name)})
    if own_net:
        plan.append(
            {
                "op": "mount",
                "source": "sysfs",
                "target": str(rootfs / "sys"),
                "fstype": "sysfs",
                "flags": MS_RDONLY | nosuid_nodev_noexec,
                "optional": True,
            }
        )
        plan.append({"op": "mask", "target": str(rootfs / "sys" / "firmware"), "null": "/dev/null"})
    return plan


# ---- markers and clean-up -----------------------------------------------------------------
def write_marker(sandbox_dir: Path, marker: dict) -> None:
    """Write ``cairn.json`` atomically (temp file, fsync, rename)."""
    tmp = sandbox_dir / (MARKER_NAME + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(marker, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, sandbox_dir / MARKER_NAME)


def read_marker(sandbox_dir: Path) -> dict:
    """Read a sandbox folder's marker.

    Raises:
        OSError: it cannot be read. ValueError: it is not JSON.
    """
    return json.loads((sandbox_dir / MARKER_NAME).read_text(encoding="utf-8"))


def list_state_folders(
    base: Path,
    read: Callable[[Path], dict | None],
) -> list[tuple[Path, dict]]:
    """The folders right under ``base`` (sandboxes, layers, snapshots), sorted by name, with
    what ``read`` says of each; files and symlinks are left out.

    Args:
        base: the state folder to list (missing: nothing listed).
        read: a folder's marker, or ``None`` to leave the folder out; an ``OSError`` or
            ``ValueError`` it raises lists the folder as ``{"unreadable": "<reason>"}``.

    Returns:
        ``(folder, marker)`` pairs.
    """
    out: list[tuple[Path, dict]] = []
    if not base.is_dir():
        return out
    for d in sorted(base.iterdir()):
        if not d.is_dir() or d.is_symlink():
            continue
        try:
            info = read(d)
        except (OSError, ValueError) as exc:
            info = {"unreadable": str(exc)}
        if info is not None:
            out.append((d, info))
    return out


def process_start_ticks(pid: int) -> int | None:
    """Field 22 of ``/proc/<pid>/stat`` (start time in clock ticks), or None if gone."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2 :].split()
    return int(fields[19])


def kill_init(pid: int | None, start_ticks: int | None, *, wait_sec: float = 5.0) -> None:
    """SIGKILL a sandbox init (which takes its whole pid namespace with it) if ``pid`` still
    is that process (same start time), and wait until it is gone."""
    if not pid or start_ticks is None or process_start_ticks(pid) != start_ticks:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, 9)
    deadline = time.monotonic() + wait_sec
    while process_start_ticks(pid) == start_ticks and time.monotonic() < deadline:
        time.sleep(0.005)


def remove_tree(path: Path) -> None:
    """Remove a sandbox or layer folder, also overlay work folders with mode 000; a missing
    folder is fine."""

    def onerror(func, p, exc_info):
        if isinstance(exc_info[1], FileNotFoundError):
            return
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700)
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)

    if path.is_symlink():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path, onerror=onerror)
