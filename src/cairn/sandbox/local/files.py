"""Symlink-safe host-side file access to a local sandbox's root (design §3, upload/download).

The host reaches a running sandbox's merged root through ``/proc/<init>/root``. A plain path
walk there is unsafe: an absolute symlink planted inside (``/app/x -> /etc/passwd``) would be
resolved against the *host's* root. :class:`SandboxFS` therefore walks every path itself, one
component at a time with ``O_NOFOLLOW`` directory descriptors, resolving symlinks *inside* the
sandbox root (like ``openat2(RESOLVE_IN_ROOT)``), never climbing above it. Writes on the host
side (downloads) never follow a symlink either: an existing link in the way is replaced.

All functions are synchronous and stream with ``sendfile`` (bounded memory); callers run them
in a worker thread.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cairn.errors import HostPathsSkippedError

MAX_SYMLINKS = 40
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1 << 20


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _copy_fd(src: int, dst: int) -> None:
    """Copy a whole regular file between descriptors in the kernel (bounded memory)."""
    offset = 0
    while True:
        try:
            n = os.sendfile(dst, src, offset, _CHUNK * 8)
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.ENOSYS):
                raise
            return _copy_fd_read(src, dst, offset)
        if n == 0:
            return None
        offset += n


def _copy_fd_read(src: int, dst: int, offset: int) -> None:
    while chunk := os.pread(src, _CHUNK, offset):
        os.write(dst, chunk)
        offset += len(chunk)


def _remove_entry(dir_fd: int, name: str) -> None:
    """Remove ``name`` in ``dir_fd`` whatever it is (a folder recursively); never follows."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=dir_fd)
    else:
        os.unlink(name, dir_fd=dir_fd)


@dataclass(frozen=True)
class PasswdEntry:
    """One user of a sandbox's ``/etc/passwd``."""

    name: str
    uid: int
    gid: int
    home: str


class SandboxFS:
    """Safe access to a directory tree treated as a root (a sandbox's ``/proc/<pid>/root``).

    Args:
        root: the host path of the root, e.g. ``/proc/1234/root``.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = str(root)

    # ---- resolution -----------------------------------------------------------------------
    def _open_root(self) -> int:
        return os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def resolve_parent(
        self,
        path: str,
        *,
        create: bool = False,
        mode: int = 0o755,
    ) -> tuple[int, str]:
        """Resolve every component of ``path`` but the last inside the root.

        Args:
            path: an absolute sandbox path.
            create: create missing parent folders (``mkdir -p``).
            mode: mode of created folders.

        Returns:
            ``(dir_fd, name)``: an open descriptor of the parent folder (the caller closes it)
            and the last component (``""`` when ``path`` is the root itself).

        Raises:
            FileNotFoundError, NotADirectoryError: a parent is missing or not a folder.
            OSError: ``ELOOP`` after too many symlinks.
        """
        parts = deque(p for p in path.split("/") if p and p != ".")
        stack = [self._open_root()]
        links = 0
        try:
            while parts:
                name = parts.popleft()
                if name == "..":
                    if len(stack) > 1:
                        os.close(stack.pop())
                    continue
                if not parts:
                    fd = stack.pop()
                    return fd, name
                cur = stack[-1]
                try:
                    st = os.stat(name, dir_fd=cur, follow_symlinks=False)
                except FileNotFoundError:
                    if not create:
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, mode, dir_fd=cur)
                    st = os.stat(name, dir_fd=cur, follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    links += 1
                    if links > MAX_SYMLINKS:
                        raise OSError(errno.ELOOP, "too many symlinks", path)
                    target = os.readlink(name, dir_fd=cur)
                    if target.startswith("/"):
                        _close_all(stack[1:])
                        del stack[1:]
                    parts.extendleft(reversed([p for p in target.split("/") if p and p != "."]))
                    continue
                if not stat.S_ISDIR(st.st_mode):
                    raise NotADirectoryError(errno.ENOTDIR, "not a folder", path)
                stack.append(os.open(name, _DIR_FLAGS, dir_fd=cur))
            fd = stack.pop()
            return fd, ""
        finally:
            _close_all(stack)

    def open_dir(self, path: str, *, create: bool = False, mode: int = 0o755) -> int:
        """Open a sandbox folder (following in-root symlinks, also the last component).

        Raises:
            FileNotFoundError, NotADirectoryError: it is missing or not a folder.
        """
        for _ in range(MAX_SYMLINKS):
            parent, name = self.resolve_parent(path, create=create, mode=mode)
            if not name:
                return parent
            try:
                st = os.stat(name, dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                if not create:
                    os.close(parent)
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, mode, dir_fd=parent)
                st = os.stat(name, dir_fd=parent, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                target = os.readlink(name, dir_fd=parent)
                os.close(parent)
                base = path.rstrip("/").rsplit("/", 1)[0] or "/"
                path = target if target.startswith("/") else f"{base}/{target}"
                continue
            try:
                return os.open(name, _DIR_FLAGS, dir_fd=parent)
            finally:
                os.close(parent)
        raise OSError(errno.ELOOP, "too many symlinks", path)

    def lstat(self, path: str) -> os.stat_result:
        """``lstat`` of a sandbox path (parents resolved in-root, the last one not followed).

        Raises:
            FileNotFoundError: it does not exist.
        """
        parent, name = self.resolve_parent(path)
        try:
            return os.stat(name or ".", dir_fd=parent, follow_symlinks=False)
        finally:
            os.close(parent)

    def read_text(self, path: str, limit: int = 4 << 20) -> str:
        """Read a small sandbox text file (following in-root symlinks), at most ``limit`` bytes.

        Raises:
            FileNotFoundError: it does not exist. OSError: it is not a regular file.
        """
        for _ in range(MAX_SYMLINKS):
            parent, name = self.resolve_parent(path)
            try:
                st = os.stat(name, dir_fd=parent, follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    target = os.readlink(name, dir_fd=parent)
                    base = path.rstrip("/").rsplit("/", 1)[0] or "/"
                    path = target if target.startswith("/") else f"{base}/{target}"
                    continue
                if not stat.S_ISREG(st.st_mode):
                    raise OSError(errno.EINVAL, "not a regular file", path)
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent)
                with os.fdopen(fd, "rb") as f:
                    return f.read(limit).decode("utf-8", "replace")
            finally:
                os.close(parent)
        raise OSError(errno.ELOOP, "too many symlinks", path)

    # ---- users ----------------------------------------------------------------------------
    def passwd(self) -> list[PasswdEntry]:
        """The sandbox's ``/etc/passwd`` entries (empty when it is missing)."""
        try:
            text = self.read_text("/etc/passwd")
        except OSError:
            return []
        out = []
        for line in text.splitlines():
            f = line.split(":")
            if len(f) >= 6 and f[2].isdigit() and f[3].isdigit():
                out.append(PasswdEntry(f[0], int(f[2]), int(f[3]), f[5] or "/"))
        return out

    def supplementary_groups(self, name: str, gid: int) -> list[int]:
        """Gids of the groups in the sandbox's ``/etc/group`` listing ``name``, plus ``gid``."""
        groups = [gid]
        try:
            text = self.read_text("/etc/group")
        except OSError:
            return groups
        for line in text.splitlines():
            f = line.split(":")
            if len(f) >= 4 and f[2].isdigit() and name in f[3].split(",") and int(f[2]) not in groups:
                groups.append(int(f[2]))
        return groups

    def group_gid(self, group: str) -> int | None:
        """The gid of ``group`` (a name in ``/etc/group``, or a number), or ``None``."""
        if group.isdigit():
            return int(group)
        try:
            text = self.read_text("/etc/group")
        except OSError:
            return None
        for line in text.splitlines():
            f = line.split(":")
            if len(f) >= 3 and f[0] == group and f[2].isdigit():
                return int(f[2])
        return None

    # ---- writing into the sandbox ---------------------------------------------------------
    def upload(self, host_path: Path, sandbox_path: str, skip: Callable[[str], bool] | None = None) -> None:
        """Copy a host file or folder to ``sandbox_path`` (see ``Sandbox.upload``).

        Args:
            host_path: the source on the host.
            sandbox_path: the destination inside.
            skip: called with each host path below a folder source; True leaves it out
                (``.dockerignore``).

        Raises:
            FileNotFoundError: ``host_path`` does not exist.
            OSError: the copy failed.
        """
        st = os.stat(host_path, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            dfd = self.open_dir(sandbox_path, create=True)
            try:
                _copy_tree_into(str(host_path), dfd, skip)
            finally:
                os.close(dfd)
            return
        parent, name = self.resolve_parent(sandbox_path, create=True)
        try:
            if not name:
                raise IsADirectoryError(errno.EISDIR, "cannot replace the root", sandbox_path)
            with contextlib.suppress(FileNotFoundError):
                existing = os.stat(name, dir_fd=parent, follow_symlinks=False)
                if stat.S_ISDIR(existing.st_mode):
                    inner = os.open(name, _DIR_FLAGS, dir_fd=parent)
                    os.close(parent)
                    parent, name = inner, os.path.basename(host_path)
            _copy_entry(str(host_path), st, parent, name)
        finally:
            os.close(parent)

    def chown_tree(self, sandbox_path: str, uid: int, gid: int) -> None:
        """``chown -hR uid:gid`` of a sandbox path; symlinks are changed, never followed."""

        def apply(dir_fd: int, name: str, st: os.stat_result) -> None:
            os.chown(name, uid, gid, dir_fd=dir_fd, follow_symlinks=False)

        self._walk_apply(sandbox_path, apply)

    def chmod_tree(self, sandbox_path: str, mode: int) -> None:
        """``chmod -R mode`` of a sandbox path (files and folders; symlinks left alone)."""

        def apply(dir_fd: int, name: str, st: os.stat_result) -> None:
            if not stat.S_ISLNK(st.st_mode):
                fd = os.open(
                    name,
                    os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_PATH", 0),
                    dir_fd=dir_fd,
                )
                try:
                    os.chmod(f"/proc/self/fd/{fd}", mode)
                finally:
                    os.close(fd)

        self._walk_apply(sandbox_path, apply)

    def _walk_apply(self, sandbox_path: str, apply: Callable[[int, str, os.stat_result], None]) -> None:
        parent, name = self.resolve_parent(sandbox_path)
        try:
            _walk_entry(parent, name or ".", apply)
        finally:
            os.close(parent)

    def make_fresh_dir(self, path: str, mode: int) -> None:
        """Replace whatever is at ``path`` by an empty folder with ``mode`` (parents created)."""
        parent, name = self.resolve_parent(path, create=True)
        try:
            _remove_entry(parent, name)
            os.mkdir(name, dir_fd=parent)
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
            try:
                os.fchmod(fd, mode)
            finally:
                os.close(fd)
        finally:
            os.close(parent)

    def remove(self, path: str) -> None:
        """Remove whatever is at ``path`` (a folder recursively; never following a link)."""
        try:
            parent, name = self.resolve_parent(path, create=False)
        except (FileNotFoundError, NotADirectoryError):
            return
        try:
            _remove_entry(parent, name)
        finally:
            os.close(parent)

    # ---- reading out of the sandbox -------------------------------------------------------
    def download(self, sandbox_path: str, host_path: Path) -> None:
        """Copy a sandbox file or folder to ``host_path`` (see ``Sandbox.download``).

        Raises:
            FileNotFoundError: ``sandbox_path`` does not exist.
            OSError: the copy failed.
        """
        parent, name = self.resolve_parent(sandbox_path)
        try:
            st = os.stat(name or ".", dir_fd=parent, follow_symlinks=False)
            host_path = Path(os.path.abspath(host_path))
            host_path.parent.mkdir(parents=True, exist_ok=True)
            hparent = os.open(host_path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            skipped: list[str] = []
            try:
                _download_entry(
                    parent,
                    name or ".",
                    st,
                    hparent,
                    host_path.name,
                    host_len=len(os.fsencode(host_path)),
                    rel="",
                    skipped=skipped,
                )
            finally:
                os.close(hparent)
        finally:
            os.close(parent)
        if skipped:  # issue #29: everything else was copied; say what the host cannot hold
            raise HostPathsSkippedError(
                f"download of {sandbox_path}: {len(skipped)} path(s) too long for the host "
                f"skipped: {'; '.join(skipped[:3])[:600]}",
                paths=skipped,
                count=len(skipped),
            )


def resolve_user(
    fs: SandboxFS,
    user: str | int | None,
) -> tuple[int, int, list[int], str] | None:
    """Resolve ``user`` (a name, a uid, ``"name:group"``; ``None`` = root) in the sandbox.

    Returns:
        ``(uid, gid, groups, home)``, or ``None`` for an unknown name. A uid without a
        passwd entry runs with gid 0 and HOME ``/`` (as Docker does).
    """
    if user is None:
        user = "root"
    group: str | None = None
    if isinstance(user, str) and ":" in user:
        user, group = user.split(":", 1)
    entries = fs.passwd()
    if isinstance(user, int) or str(user).isdigit():
        uid = int(user)
        match = next((e for e in entries if e.uid == uid), None)
    else:
        match = next((e for e in entries if e.name == user), None)
        if match is None:
            return None
        uid = match.uid
    gid = match.gid if match else 0
    groups = fs.supplementary_groups(match.name, gid) if match else [gid]
    if group:
        found = fs.group_gid(group)
        if found is None:
            return None
        gid = found
        groups = [gid]
    return uid, gid, groups, match.home if match else "/"


# ---- helpers both directions share -------------------------------------------------------
def _open_dir_at(dst_dir: int, name: str) -> int:
    """Open directory ``name`` under ``dst_dir``, replacing a non-directory there, creating it
    (mode 0700, fixed up by the caller) when missing; no symlink is followed."""
    try:
        cur = os.stat(name, dir_fd=dst_dir, follow_symlinks=False)
        if not stat.S_ISDIR(cur.st_mode):
            _remove_entry(dst_dir, name)
            raise FileNotFoundError
    except FileNotFoundError:
        os.mkdir(name, 0o700, dir_fd=dst_dir)
    return os.open(name, _DIR_FLAGS, dir_fd=dst_dir)


def _write_file_at(
    sfd: int, dst_dir: int, name: str, create_flag: int, mode: int, st: os.stat_result
) -> None:
    """Copy open file ``sfd`` into ``name`` under ``dst_dir`` (opened with ``create_flag``,
    ``os.O_TRUNC`` or ``os.O_EXCL``, never through a symlink), then set ``mode`` and the
    source's atime/mtime from ``st``."""
    dfd = os.open(
        name, os.O_WRONLY | os.O_CREAT | create_flag | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dst_dir
    )
    try:
        _copy_fd(sfd, dfd)
        os.fchmod(dfd, mode)
        os.utime(dfd, ns=(st.st_atime_ns, st.st_mtime_ns))
    finally:
        os.close(dfd)


# ---- host → sandbox helpers ---------------------------------------------------------------
def _copy_entry(
    src: str, st: os.stat_result, dst_dir: int, name: str, skip: Callable[[str], bool] | None = None
) -> None:
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode):
        _remove_entry(dst_dir, name)
        os.symlink(os.readlink(src), name, dir_fd=dst_dir)
    elif stat.S_ISDIR(st.st_mode):
        fd = _open_dir_at(dst_dir, name)
        try:
            _copy_tree_into(src, fd, skip)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
    elif stat.S_ISREG(st.st_mode):
        with contextlib.suppress(FileNotFoundError):
            cur = os.stat(name, dir_fd=dst_dir, follow_symlinks=False)
            if not stat.S_ISREG(cur.st_mode) or cur.st_nlink > 1:
                _remove_entry(dst_dir, name)
        sfd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            _write_file_at(sfd, dst_dir, name, os.O_TRUNC, mode, st)
        finally:
            os.close(sfd)
    elif stat.S_ISFIFO(st.st_mode):
        _remove_entry(dst_dir, name)
        os.mkfifo(name, mode, dir_fd=dst_dir)
    # sockets and device files are not copied


def _copy_tree_into(
    src_dir: str,
    dst_fd: int,
    skip: Callable[[str], bool] | None = None,
) -> None:
    with os.scandir(src_dir) as it:
        for entry in it:
            if skip is not None and skip(entry.path):
                continue
            _copy_entry(entry.path, entry.stat(follow_symlinks=False), dst_fd, entry.name, skip)


def _walk_entry(dir_fd: int, name: str, apply: Callable[[int, str, os.stat_result], None]) -> None:
    """Call ``apply`` on ``name`` under ``dir_fd`` and, for a directory, on all below it
    (parents before children, no symlink followed)."""
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    apply(dir_fd, name, st)
    if stat.S_ISDIR(st.st_mode):
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
        try:
            for child in os.listdir(fd):
                _walk_entry(fd, child, apply)
        finally:
            os.close(fd)


# ---- sandbox → host helpers ---------------------------------------------------------------
HOST_PATH_MAX = 4096
"""Linux's PATH_MAX, bytes with the final NUL: a copied path longer than this could be made
through folder descriptors but no ordinary tool could open it; it is skipped (issue #29)."""


def _download_entry(
    src_dir: int,
    name: str,
    st: os.stat_result,
    dst_dir: int,
    dst_name: str,
    *,
    host_len: int,
    rel: str,
    skipped: list[str],
) -> None:
    """Copy one entry; ``host_len`` is its host path's length in bytes, ``rel`` its path
    below the download's root; entries whose host path would pass :data:`HOST_PATH_MAX` are
    appended to ``skipped`` instead."""
    if host_len >= HOST_PATH_MAX:
        skipped.append(rel or name)
        return
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(name, dir_fd=src_dir)
        _remove_entry(dst_dir, dst_name)
        os.symlink(target, dst_name, dir_fd=dst_dir)
    elif stat.S_ISDIR(st.st_mode):
        sfd = os.open(name, _DIR_FLAGS, dir_fd=src_dir)
        try:
            dfd = _open_dir_at(dst_dir, dst_name)
            try:
                for child in os.listdir(sfd):
                    cst = os.stat(child, dir_fd=sfd, follow_symlinks=False)
                    _download_entry(
                        sfd,
                        child,
                        cst,
                        dfd,
                        child,
                        host_len=host_len + 1 + len(os.fsencode(child)),
                        rel=f"{rel}/{child}" if rel else child,
                        skipped=skipped,
                    )
                os.fchmod(dfd, mode | 0o700)
            finally:
                os.close(dfd)
        finally:
            os.close(sfd)
    elif stat.S_ISREG(st.st_mode):
        sfd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=src_dir)
        try:
            if not stat.S_ISREG(os.fstat(sfd).st_mode):
                return
            _remove_entry(dst_dir, dst_name)
            _write_file_at(sfd, dst_dir, dst_name, os.O_EXCL, mode, st)
        finally:
            os.close(sfd)
    # fifos, sockets and devices are not copied out
