"""A content hash of a folder tree: sorted relative names, bytes, exec bits and link targets
(never followed); stable across machines, blind to mtimes, ownership, ``__pycache__`` and ``.git``.

Dependency-free, so the sandbox backends (and the local backend's helper programs) can use it.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

IGNORED_NAMES = frozenset({"__pycache__", ".git"})
"""File and folder names left out of every hash."""

_CHUNK = 1 << 20


def _entries(root: Path) -> list[tuple[str, Path]]:
    """(posix relative path, path) of every file and symlink below ``root``, sorted."""
    out: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(dirpath)
        keep = []
        for d in dirnames:
            if d in IGNORED_NAMES:
                continue
            if (base / d).is_symlink():  # os.walk lists links to folders as folders
                out.append(((base / d).relative_to(root).as_posix(), base / d))
            else:
                keep.append(d)
        dirnames[:] = keep
        for f in filenames:
            if f not in IGNORED_NAMES:
                out.append(((base / f).relative_to(root).as_posix(), base / f))
    out.sort(key=lambda e: e[0])
    return out


def _update_tree(h: hashlib._Hash, root: Path) -> None:
    for rel, path in _entries(root):
        name = rel.encode("utf-8", "surrogateescape")
        if path.is_symlink():
            target = os.readlink(path).encode("utf-8", "surrogateescape")
            h.update(b"L\0" + name + b"\0" + target + b"\0")
            continue
        try:
            st = path.lstat()
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):  # a FIFO, socket or device: never opened (a FIFO
            h.update(b"S\0" + name + b"\0")  # blocks the reader); task checks refuse them
            continue
        exec_bit = b"x" if st.st_mode & 0o111 else b"-"
        h.update(b"F\0" + name + b"\0" + exec_bit + b"\0" + str(st.st_size).encode() + b"\0")
        with path.open("rb") as fh:
            while chunk := fh.read(_CHUNK):
                h.update(chunk)


def tree_hash(root: Path) -> str:
    """sha256 of a folder's files (relative names, bytes, exec bits).

    Args:
        root: a folder; a missing folder hashes like an empty one.

    Returns:
        64 hex characters.
    """
    h = hashlib.sha256(b"cairn-tree-v1\0")
    if root.is_dir():
        _update_tree(h, root)
    return h.hexdigest()
