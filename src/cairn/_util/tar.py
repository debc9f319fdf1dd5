"""Streaming tar helpers for sandbox transfers: bounded memory, symlink-safe.

- :func:`tar_stream` yields a tar archive of a host file or folder chunk by chunk (files are read
  1 MiB at a time, never whole), symlinks stored as links, owned by root.
- :func:`extract_tar_stream` unpacks a chunk iterator into a host target without ever following a
  link on the host and without writing outside the target: members that are absolute, contain
  ``..``, or would pass through a symlink are refused and reported.
"""

from __future__ import annotations

import errno
import io
import os
import shutil
import stat
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

CHUNK_BYTES = 1 << 20
"""Read/write chunk size, bytes."""

_BLOCK = tarfile.BLOCKSIZE


# ---- writing ------------------------------------------------------------------------------
def _tarinfo(path: Path, name: str, st: os.stat_result) -> tarfile.TarInfo | None:
    ti = tarfile.TarInfo(name)
    ti.mode = stat.S_IMODE(st.st_mode)
    ti.mtime = int(st.st_mtime)
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = "root"
    if stat.S_ISLNK(st.st_mode):
        ti.type = tarfile.SYMTYPE
        ti.linkname = os.readlink(path)
    elif stat.S_ISDIR(st.st_mode):
        ti.type = tarfile.DIRTYPE
    elif stat.S_ISREG(st.st_mode):
        ti.type = tarfile.REGTYPE
        ti.size = st.st_size
    else:
        return None  # fifos, sockets, devices are not transferred
    return ti


def _file_chunks(path: Path, size: int) -> Iterator[bytes]:
    """Exactly ``size`` bytes of ``path`` (zero-padded if it shrank), then block padding."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        left = size
        while left > 0:
            chunk = os.read(fd, min(CHUNK_BYTES, left))
            if not chunk:
                chunk = bytes(min(CHUNK_BYTES, left))
            left -= len(chunk)
            yield chunk
    finally:
        os.close(fd)
    if size % _BLOCK:
        yield bytes(_BLOCK - size % _BLOCK)


def _header(ti: tarfile.TarInfo) -> bytes:
    return ti.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def tar_stream(host_path: Path, arcname: str = "", *, include_root: bool = True) -> Iterator[bytes]:
    """Yield a tar archive of ``host_path`` in chunks of at most ~1 MiB.

    Args:
        host_path: a file, symlink or folder on the host (a symlink is stored as a link).
        arcname: the member name of ``host_path`` itself. For a folder, every member is
            prefixed with it (``""``: names relative to the folder, so extracting into a folder
            merges them there).
        include_root: for a folder with a non-empty ``arcname``, also store the folder's own
            entry (its mode and mtime). Without it, extraction keeps an existing folder's
            owner and mode and creates a missing one with the extractor's defaults.

    Yields:
        Consecutive pieces of the archive.

    Raises:
        FileNotFoundError: ``host_path`` does not exist.
    """
    st = os.lstat(host_path)
    if stat.S_ISDIR(st.st_mode):
        if arcname and include_root:
            ti = _tarinfo(host_path, arcname, st)
            assert ti is not None
            yield _header(ti)
        yield from _tar_dir(host_path, arcname)
    else:
        if not arcname:
            raise ValueError("a file needs an arcname")
        ti = _tarinfo(host_path, arcname, st)
        if ti is not None:
            yield _header(ti)
            if ti.type == tarfile.REGTYPE:
                yield from _file_chunks(host_path, ti.size)
    yield bytes(2 * _BLOCK)


def _tar_dir(root: Path, prefix: str) -> Iterator[bytes]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, root)
        for n in sorted(dirnames + filenames):
            p = Path(dirpath, n)
            rel = n if rel_dir == "." else f"{rel_dir}/{n}"
            name = f"{prefix}/{rel}" if prefix else rel
            try:
                st = os.lstat(p)
            except FileNotFoundError:
                continue
            ti = _tarinfo(p, name, st)
            if ti is None:
                continue
            yield _header(ti)
            if ti.type == tarfile.REGTYPE:
                yield from _file_chunks(p, ti.size)
        # os.walk does not descend into symlinked folders (followlinks=False).


def _a_rwx(ti: tarfile.TarInfo) -> None:
    """``chmod a+rwX`` on one member (symlinks keep their mode)."""
    if ti.type == tarfile.SYMTYPE:
        return
    ti.mode |= 0o666
    if ti.type == tarfile.DIRTYPE or ti.mode & 0o111:
        ti.mode |= 0o111


def _lf(data: bytes) -> bytes:
    """``sed 's/\\r$//'``: drop a CR that ends a line (or the file)."""
    out = data.replace(b"\r\n", b"\n")
    return out[:-1] if out.endswith(b"\r") else out


def tar_stream_many(items: Iterable[tuple[Path, str, bool, tuple[str, ...]]]) -> Iterator[bytes]:
    """Yield one tar archive holding several host files or folders, for one upload.

    Args:
        items: ``(host_path, arcname, world_writable, crlf)``: as :func:`tar_stream` with
            ``include_root=False`` for each; with ``world_writable`` every member (and the
            folder's own entry, then stored) gets ``a+rwX``; files named in ``crlf`` (relative
            to ``host_path``) have CRLF line endings normalised (read whole: scripts only).

    Yields:
        Consecutive pieces of the archive (one end-of-archive marker, at the end).

    Raises:
        FileNotFoundError: a ``host_path`` does not exist.
    """
    for host_path, arcname, world_writable, crlf in items:
        host_path = Path(host_path)
        st = os.lstat(host_path)
        if stat.S_ISDIR(st.st_mode):
            members: list[tuple[Path, str, os.stat_result]] = []
            if arcname and (world_writable or not any(os.scandir(host_path))):
                members.append((host_path, arcname, st))
            for dirpath, dirnames, filenames in os.walk(host_path):
                dirnames.sort()
                rel_dir = os.path.relpath(dirpath, host_path)
                for n in sorted(dirnames + filenames):
                    rel = n if rel_dir == "." else f"{rel_dir}/{n}"
                    try:
                        members.append(
                            (
                                Path(dirpath, n),
                                f"{arcname}/{rel}" if arcname else rel,
                                os.lstat(Path(dirpath, n)),
                            )
                        )
                    except FileNotFoundError:
                        continue
            root = arcname
        else:
            if not arcname:
                raise ValueError("a file needs an arcname")
            members = [(host_path, arcname, st)]
            root = posixpath_dirname(arcname)
        for path, name, mst in members:
            ti = _tarinfo(path, name, mst)
            if ti is None:
                continue
            if world_writable:
                _a_rwx(ti)
            rel = name[len(root) :].lstrip("/") if root else name
            if ti.type == tarfile.REGTYPE and rel in crlf:
                data = _lf(path.read_bytes())
                ti.size = len(data)
                yield _header(ti)
                yield data
                if len(data) % _BLOCK:
                    yield bytes(_BLOCK - len(data) % _BLOCK)
                continue
            yield _header(ti)
            if ti.type == tarfile.REGTYPE:
                yield from _file_chunks(path, ti.size)
    yield bytes(2 * _BLOCK)


def posixpath_dirname(name: str) -> str:
    """The folder part of a member name (``""`` at the top)."""
    return name.rsplit("/", 1)[0] if "/" in name else ""


# ---- reading ------------------------------------------------------------------------------
class IterReader(io.RawIOBase):
    """A read-only file object over an iterator of byte chunks (no more than one chunk held)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._it = iter(chunks)
        self._buf = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._buf:
            try:
                self._buf = memoryview(next(self._it))
            except StopIteration:
                return 0
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n


@dataclass
class ExtractReport:
    """What :func:`extract_tar_stream` did.

    Attributes:
        refused: member names not written because they were unsafe (absolute, ``..``, through
            a symlink, onto a folder), each with the reason.
        skipped: special files (devices, fifos) not written.
        too_long: member names the host cannot hold (a name over 255 bytes or a path over
            PATH_MAX there: ``ENAMETOOLONG``), not written; the rest of the archive still is
            (issue #29). At most :data:`TOO_LONG_KEPT` are listed; :attr:`too_long_count`
            counts them all.
        too_long_count: how many members were too long for the host.
        files: regular files written.
        bytes: bytes of file content written.
    """

    refused: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    too_long: list[str] = field(default_factory=list)
    too_long_count: int = 0
    files: int = 0
    bytes: int = 0


TOO_LONG_KEPT = 100
"""How many too-long member names an :class:`ExtractReport` lists."""


def _rel_parts(name: str, root_name: str | None) -> tuple[str, ...] | None:
    """Split a member name into the parts below the target, or None when unsafe."""
    if name.startswith("/"):
        return None
    parts = tuple(p for p in PurePosixPath(name).parts if p not in (".", ""))
    if ".." in parts:
        return None
    if root_name is not None:
        root = tuple(p for p in PurePosixPath(root_name).parts if p not in (".", ""))
        if parts[: len(root)] != root:
            return None
        parts = parts[len(root) :]
    return parts


def _safe_parent(target: Path, parts: tuple[str, ...]) -> Path | None:
    """Create the parents of ``target/parts`` as real folders; None when one is a link/file."""
    try:
        if not stat.S_ISDIR(os.lstat(target).st_mode):
            return None
    except FileNotFoundError:
        os.mkdir(target, 0o755)
    cur = target
    for p in parts[:-1]:
        cur = cur / p
        try:
            st = os.lstat(cur)
        except FileNotFoundError:
            os.mkdir(cur, 0o755)
            continue
        if not stat.S_ISDIR(st.st_mode):
            return None
    return cur


def _plain_path(target: Path, parts: tuple[str, ...]) -> bool:
    """Whether ``target/parts`` is a regular file reached through real folders only."""
    cur = target
    for i, p in enumerate(parts):
        cur = cur / p
        try:
            st = os.lstat(cur)
        except FileNotFoundError:
            return False
        last = i == len(parts) - 1
        if (last and not stat.S_ISREG(st.st_mode)) or (not last and not stat.S_ISDIR(st.st_mode)):
            return False
    return bool(parts)


def _clear_for(dest: Path, *, want_dir: bool) -> bool:
    """Make room for a new member at ``dest``: remove a file or link there, never following
    it. Returns False when ``dest`` is a folder and the member is not."""
    try:
        st = os.lstat(dest)
    except FileNotFoundError:
        return True
    if stat.S_ISDIR(st.st_mode):
        return want_dir
    os.unlink(dest)
    return True


def extract_tar_stream(
    chunks: Iterable[bytes], target: Path, *, root_name: str | None = None
) -> ExtractReport:
    """Unpack a streamed tar archive into ``target``, safely.

    Args:
        chunks: the archive, piece by piece.
        target: where the archive's root lands: a folder (created) when the root is a folder,
            else the file/link path itself. An existing link at ``target`` is replaced, never
            followed. Parents of ``target`` are created.
        root_name: the archive's root member name (e.g. ``"dir"`` for members ``dir``,
            ``dir/a``); it is stripped so its contents land in ``target``. ``None`` extracts
            member names as they are under ``target`` (a folder).

    Returns:
        An :class:`ExtractReport`; callers decide whether refusals are errors.

    Raises:
        tarfile.TarError: the stream is not a valid tar archive.
        OSError: writing on the host failed.
    """
    report = ExtractReport()
    target = Path(os.path.abspath(target))
    target.parent.mkdir(parents=True, exist_ok=True)
    if root_name is None:
        _clear_for(target, want_dir=True)
        target.mkdir(exist_ok=True)
    dir_modes: list[tuple[Path, int, int]] = []
    with tarfile.open(fileobj=IterReader(chunks), mode="r|") as tf:
        for m in tf:
            parts = _rel_parts(m.name, root_name)
            if parts is None:
                report.refused.append(f"{m.name}: outside the target")
                continue
            try:
                _extract_member(tf, m, parts, target, report, dir_modes, root_name)
            except OSError as exc:  # a path the host cannot hold is skipped, not fatal (#29)
                if exc.errno != errno.ENAMETOOLONG:
                    raise
                report.too_long_count += 1
                if len(report.too_long) < TOO_LONG_KEPT:
                    report.too_long.append(m.name)
    for dest, mode, mtime in reversed(dir_modes):
        os.chmod(dest, mode)
        os.utime(dest, (mtime, mtime))
    return report


def _extract_member(
    tf: tarfile.TarFile,
    m: tarfile.TarInfo,
    parts: tuple[str, ...],
    target: Path,
    report: ExtractReport,
    dir_modes: list[tuple[Path, int, int]],
    root_name: str | None,
) -> None:
    """Write one member of :func:`extract_tar_stream` (refusals go into ``report``).

    Raises:
        OSError: writing on the host failed (``ENAMETOOLONG`` for a path it cannot hold).
    """
    if m.isdir():
        dest = target.joinpath(*parts)
        parent = _safe_parent(target, parts) if parts else target.parent
        if parent is None or not _clear_for(dest, want_dir=True):
            report.refused.append(f"{m.name}: path passes through a link or file")
            return
        if not os.path.isdir(dest) or os.path.islink(dest):
            os.mkdir(dest, 0o755)
        dir_modes.append((dest, m.mode & 0o777, int(m.mtime)))
        return
    if not parts:  # the root itself is a file or link: it lands at `target`
        dest = target
        ok = _clear_for(dest, want_dir=False)
    else:
        dest = target.joinpath(*parts)
        parent = _safe_parent(target, parts)
        ok = parent is not None and _clear_for(dest, want_dir=False)
    if not ok:
        report.refused.append(f"{m.name}: path passes through a link or onto a folder")
        return
    if m.issym():
        os.symlink(m.linkname, dest)
        os.utime(dest, (m.mtime, m.mtime), follow_symlinks=False)
    elif m.islnk():
        src_parts = _rel_parts(m.linkname, root_name)
        src = target.joinpath(*src_parts) if src_parts else None
        if src is None or not _plain_path(target, src_parts or ()):
            report.refused.append(f"{m.name}: hard link to {m.linkname!r} outside")
            return
        shutil.copyfile(src, dest, follow_symlinks=False)
        os.chmod(dest, m.mode & 0o777)
        report.files += 1
    elif m.isreg():
        _write_member(tf, m, dest, report)
    else:
        report.skipped.append(m.name)


def _write_member(tf: tarfile.TarFile, m: tarfile.TarInfo, dest: Path, report: ExtractReport) -> None:
    src = tf.extractfile(m)
    assert src is not None
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        while chunk := src.read(CHUNK_BYTES):
            _write_all(fd, chunk)
            report.bytes += len(chunk)
        os.fchmod(fd, m.mode & 0o777)
    finally:
        os.close(fd)
    os.utime(dest, (m.mtime, m.mtime))
    report.files += 1


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]
