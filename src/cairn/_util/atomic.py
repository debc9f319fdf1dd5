"""Atomic file replacement: temp file in the same folder, fsync, ``os.replace`` (habit 8)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

FILE_MODE = 0o644
"""Default mode of files written atomically (``mkstemp`` alone would leave 0600)."""


def write_bytes_atomic(
    path: Path, data: bytes, *, mode: int = FILE_MODE, durable: bool = True, sync_dir: bool = True
) -> None:
    """Write a file atomically: temp file in the same folder, fsync, ``os.replace``.

    A reader sees the old content or the new, never a partial file. The parent folder must
    exist. The folder is fsync'ed after the rename where the filesystem allows it.

    Args:
        path: the destination.
        data: the full content.
        mode: the file's permission bits.
        durable: fsync the file before the rename (``False``: atomic for readers only, for a
            file rewritten durably later, e.g. a running trial's ``steps.json``).
        sync_dir: fsync the folder after the rename (``False`` when a durable write into the
            same folder follows at once: its folder fsync covers this rename too).

    Raises:
        OSError: when the folder is missing or not writable (the temp file is removed).
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    if durable and sync_dir:
        _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a directory; the rename is still atomic
    finally:
        os.close(fd)
