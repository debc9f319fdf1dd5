"""Step snapshots of the local backend: a copy of a sandbox's overlay upper folders.

A local sandbox's writes all land in per-overlay *upper* folders (``<sandbox>/up/root`` for
``/``, ``up/usr`` for ``/usr`` …, see :mod:`cairn.sandbox.local.rootfs`). A snapshot merges
them into one tree, ``<snapshot>/root``, laid out like a Dockerfile layer, so a new sandbox
starts from it by stacking it as the topmost lower layer: overlayfs honours the copied
whiteouts (deleted files) and opaque-folder xattrs in a lower layer as it does in an upper.

Space: files are cloned with ``FICLONE`` (a reflink: btrfs, xfs) where the file system can;
a file unchanged since the previous snapshot of the same sandbox (same inode, size, mtime and
ctime in the upper folder — ctime moves on every write, chmod, chown or xattr change) is hard
linked to that snapshot's copy, which is safe because snapshot trees are never written; every
other file is copied. The *upper* files themselves are never hard linked: the running sandbox
keeps writing them in place, which would change the snapshot under its feet.

The running sandbox is not paused: a process that is still writing while the copy runs can
leave a torn file (docs/snapshots.md). Layout::

    <state>/snapshots/<id>/cairn.json    marker: labels, job_dir, created_at, manifest
    <state>/snapshots/<id>/root/         the tree (a lower layer)
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import json
import os
import stat
import uuid
from pathlib import Path

from cairn.sandbox.local.rootfs import MARKER_NAME, list_state_folders, remove_tree, state_dir

FICLONE = 0x40049409
"""``ioctl`` request that clones a file's extents (a reflink), Linux ``FICLONE``."""


def snapshots_dir() -> Path:
    """Folder holding one sub-folder per local step snapshot."""
    return state_dir() / "snapshots"


class _Copier:
    """One snapshot copy: the walk, the hard-link maps, the byte count."""

    def __init__(self, prev: dict[str, list[int]], prev_root: Path | None) -> None:
        self.prev = prev
        self.prev_root = prev_root
        self.manifest: dict[str, list[int]] = {}
        self.inodes: dict[tuple[int, int], str] = {}
        self.copied_bytes = 0

    def tree(self, src: Path, dst: Path, rel: str) -> None:
        """Copy the folder ``src`` (relative path ``rel`` in the snapshot) into ``dst``,
        merging into what ``dst`` already holds (an opaque folder replaces it)."""
        st = os.lstat(src)
        if os.path.lexists(dst) and (not dst.is_dir() or dst.is_symlink() or _opaque(src)):
            remove_tree(dst) if dst.is_dir() and not dst.is_symlink() else os.unlink(dst)
        if not dst.exists():
            os.mkdir(dst, 0o700)
        for entry in os.scandir(src):
            self.entry(Path(entry.path), dst / entry.name, f"{rel}/{entry.name}".lstrip("/"))
        _copy_meta(src, dst, st)

    def entry(self, src: Path, dst: Path, rel: str) -> None:
        st = os.lstat(src)
        mode = st.st_mode
        if stat.S_ISDIR(mode):
            self.tree(src, dst, rel)
            return
        if os.path.lexists(dst):  # the upper's entry replaces the base's (or root overlay's)
            remove_tree(dst) if dst.is_dir() and not dst.is_symlink() else os.unlink(dst)
        if stat.S_ISREG(mode):
            self.file(src, dst, rel, st)
        elif stat.S_ISLNK(mode):
            os.symlink(os.readlink(src), dst)
            _copy_meta(src, dst, st)
        else:  # whiteouts (char 0:0), fifos, devices
            os.mknod(dst, mode, st.st_rdev)
            _copy_meta(src, dst, st)

    def file(self, src: Path, dst: Path, rel: str, st: os.stat_result) -> None:
        key = [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
        self.manifest[rel] = key
        ident = (st.st_dev, st.st_ino)
        if st.st_nlink > 1 and ident in self.inodes:  # hard links inside the sandbox stay links
            os.link(self.inodes[ident], dst)
            return
        if self.prev_root is not None and self.prev.get(rel) == key:
            try:
                os.link(self.prev_root / rel, dst)
                self.inodes[ident] = str(dst)
                return
            except OSError:
                pass  # the earlier snapshot was removed meanwhile: copy
        _clone_or_copy(src, dst)
        self.copied_bytes += st.st_size
        _copy_meta(src, dst, st)
        self.inodes[ident] = str(dst)


def _opaque(path: Path) -> bool:
    """Whether an overlay folder is opaque (it hides the lower layers' folder)."""
    for name in ("trusted.overlay.opaque", "user.overlay.opaque"):
        with contextlib.suppress(OSError):
            if os.getxattr(path, name, follow_symlinks=False) == b"y":
                return True
    return False


def _link_tree(src: Path, dst: Path) -> None:
    """Rebuild the snapshot tree ``src`` at ``dst`` with every file hard linked (snapshot
    trees are never written, so sharing their files is safe)."""
    for dirpath, dirnames, filenames in os.walk(src):
        rel = os.path.relpath(dirpath, src)
        target = dst if rel == "." else dst / rel
        st = os.lstat(dirpath)
        if not target.exists():
            os.mkdir(target, 0o700)
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            s_path = Path(dirpath, name)
            fst = os.lstat(s_path)
            if stat.S_ISREG(fst.st_mode):
                os.link(s_path, target / name)
            elif stat.S_ISLNK(fst.st_mode):
                os.symlink(os.readlink(s_path), target / name)
                _copy_meta(s_path, target / name, fst)
            else:
                os.mknod(target / name, fst.st_mode, fst.st_rdev)
                _copy_meta(s_path, target / name, fst)
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
        _copy_meta(Path(dirpath), target, st)


def _clone_or_copy(src: Path, dst: Path) -> None:
    """A reflink where the file system can (``FICLONE``), else ``copy_file_range`` / a copy."""
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        try:
            fcntl.ioctl(fout.fileno(), FICLONE, fin.fileno())
            return
        except OSError as exc:
            if exc.errno not in (
                errno.EOPNOTSUPP,
                errno.EXDEV,
                errno.EINVAL,
                errno.ENOTTY,
                errno.EBADF,
                errno.ENOSYS,
                errno.EPERM,
            ):
                raise
        size = os.fstat(fin.fileno()).st_size
        done = 0
        try:
            while done < size:
                n = os.copy_file_range(fin.fileno(), fout.fileno(), size - done)
                if n == 0:
                    break
                done += n
        except OSError:
            fin.seek(0)
            fout.seek(0)
            fout.truncate()
            while chunk := fin.read(1 << 20):
                fout.write(chunk)


def _copy_meta(src: Path, dst: Path, st: os.stat_result) -> None:
    """Owner, mode, xattrs (overlay's whiteout/opaque markers included) and times."""
    link = stat.S_ISLNK(st.st_mode)
    with contextlib.suppress(PermissionError):
        os.lchown(dst, st.st_uid, st.st_gid)
    for name in _listxattr(src):
        with contextlib.suppress(OSError):
            os.setxattr(dst, name, os.getxattr(src, name, follow_symlinks=False), follow_symlinks=False)
    if not link:
        os.chmod(dst, stat.S_IMODE(st.st_mode))
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)


def _listxattr(path: Path) -> list[str]:
    try:
        return os.listxattr(path, follow_symlinks=False)
    except OSError:
        return []


def make_snapshot(
    sandbox_dir: Path,
    overlay_rels: list[str],
    labels: dict[str, str],
    prev: Path | None = None,
    base: Path | None = None,
) -> tuple[Path, int]:
    """Copy a local sandbox's upper folders into a new snapshot folder.

    Args:
        sandbox_dir: the sandbox folder (holds ``up/<rel>``).
        overlay_rels: the sandbox's overlays, ``root`` first, then ``usr``, ``etc``,
            ``var/lib`` … (their upper folders are ``up/<rel>``).
        labels: ownership labels recorded in the marker (``cairn.job``, ``cairn.job_dir``…).
        prev: the previous snapshot of the same sandbox, whose unchanged files are hard linked.
        base: the tree of the snapshot this sandbox was started from (its files are part of
            the sandbox's state; they are hard linked, then the upper folders merged over).

    Returns:
        ``(snapshot folder, bytes copied)``.

    Raises:
        OSError: the copy failed (the half-made folder is removed).
    """
    where = snapshots_dir()
    where.mkdir(parents=True, exist_ok=True)
    trial = "".join(c for c in labels.get("cairn.trial", "") if c.isalnum())[:12] or "adhoc"
    folder = where / f"{trial}-{uuid.uuid4().hex[:12]}"
    folder.mkdir(mode=0o711)
    prev_manifest: dict[str, list[int]] = {}
    prev_root = None
    if prev is not None:
        with contextlib.suppress(OSError, ValueError, KeyError):
            prev_manifest = json.loads((prev / MARKER_NAME).read_text(encoding="utf-8"))["manifest"]
            prev_root = prev / "root"
    copier = _Copier(prev_manifest, prev_root)
    try:
        root = folder / "root"
        if base is not None:
            _link_tree(base, root)
        for rel in overlay_rels:
            up = sandbox_dir / "up" / rel
            if not up.is_dir():
                continue
            if rel == "root":
                copier.tree(up, root, "")
            else:
                target = root / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                copier.tree(up, target, rel)
        if not root.exists():
            root.mkdir()
        marker = {
            "snapshot": True,
            "backend": "local",
            "labels": labels,
            "job_dir": labels.get("cairn.job_dir"),
            "created_at": dt.datetime.now(dt.UTC).isoformat(),
            "copied_bytes": copier.copied_bytes,
            "manifest": copier.manifest,
        }
        tmp = folder / (MARKER_NAME + ".tmp")
        tmp.write_text(json.dumps(marker), encoding="utf-8")
        os.replace(tmp, folder / MARKER_NAME)
    except BaseException:
        remove_tree(folder)
        raise
    return folder, copier.copied_bytes


def snapshot_root(ref: str) -> Path:
    """The layer tree of the snapshot ``ref`` (a snapshot folder path).

    Raises:
        FileNotFoundError: the snapshot is gone (``cairn clean --snapshots`` removed it) or is
            not a local snapshot folder.
    """
    folder = Path(ref)
    if (
        folder.parent.resolve() != snapshots_dir().resolve()
        or not (folder / MARKER_NAME).is_file()
        or not (folder / "root").is_dir()
    ):
        raise FileNotFoundError(f"local snapshot {ref} not found (removed by `cairn clean --snapshots`?)")
    return folder / "root"


def find_local_snapshots() -> list[tuple[Path, dict]]:
    """Every local snapshot folder with its marker (the manifest left out).

    Returns:
        ``(folder, marker)`` pairs; an unreadable marker is ``{"unreadable": reason}``.
    """

    def marker(d: Path) -> dict:
        found = json.loads((d / MARKER_NAME).read_text(encoding="utf-8"))
        found.pop("manifest", None)
        return found

    return list_state_folders(snapshots_dir(), marker)


def remove_local_snapshot(path: Path) -> None:
    """Delete one local snapshot folder; a missing one is fine.

    Raises:
        ValueError: ``path`` is not inside the local snapshots folder.
    """
    path = Path(path)
    if path.parent.resolve() != snapshots_dir().resolve():
        raise ValueError(f"{path} is not a local snapshot folder")
    remove_tree(path)
