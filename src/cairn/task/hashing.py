"""Content hashes of tasks and environments (design §3.1, §8).

Both hashes are sha256 hex digests over the sorted relative paths, the bytes and the exec bit
of every file (symlinks by their target text, never followed), so they are stable across
machines and ignore mtimes, ownership, ``__pycache__`` and ``.git``.
"""

from __future__ import annotations

import hashlib
import json
import os
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


def _update_tree(h: "hashlib._Hash", root: Path) -> None:
    for rel, path in _entries(root):
        name = rel.encode("utf-8", "surrogateescape")
        if path.is_symlink():
            target = os.readlink(path).encode("utf-8", "surrogateescape")
            h.update(b"L\0" + name + b"\0" + target + b"\0")
            continue
        try:
            st = path.stat()
        except OSError:
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


def task_content_hash(path: Path) -> str:
    """The content hash of a task folder (design §8: part of the trial id).

    Args:
        path: the task folder.

    Returns:
        64 hex characters; equal for byte-identical copies of the task on any machine.
    """
    return tree_hash(Path(path))


def env_hash(env_dir: Path | None, *, docker_image: str | None, workdir: str | None) -> str:
    """The hash that keys a task environment's image (design §3.1).

    Args:
        env_dir: the task's ``environment/`` folder, or ``None`` when it has none.
        docker_image: ``[environment].docker_image``.
        workdir: ``[environment].workdir``.

    Returns:
        64 hex characters.
    """
    h = hashlib.sha256(b"cairn-env-v1\0")
    h.update(json.dumps({"docker_image": docker_image, "workdir": workdir},
                        sort_keys=True).encode() + b"\0")
    if env_dir is not None and env_dir.is_dir():
        _update_tree(h, env_dir)
    return h.hexdigest()
