"""Folder names that fit every filesystem (issue #29): a name part bounded in bytes, shortened
readably with a digest of what it names, so two long names that share their start stay apart."""

from __future__ import annotations

import hashlib

NAME_MAX_BYTES = 255
"""The longest file name most filesystems take (ext4, xfs, btrfs, tmpfs, overlayfs), bytes."""


def bounded_part(part: str, limit: int, *, key: str) -> str:
    """``part`` when it fits in ``limit`` UTF-8 bytes, else shortened readably: its start, ``-``
    and the first 8 hex digits of the SHA-256 of ``key``.

    Args:
        part: a folder-name part (a task slug, a step folder name).
        limit: the bound, bytes (at least 16).
        key: what identifies the named thing (the task name, the step name); equal keys give
            equal names, different keys differ in the digest.

    Returns:
        A string of at most ``limit`` UTF-8 bytes, never cut inside a character.

    Raises:
        ValueError: ``limit`` < 16.
    """
    if limit < 16:
        raise ValueError(f"a name bound of {limit} bytes leaves no room for the digest")
    if len(part.encode("utf-8")) <= limit:
        return part
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    head = part.encode("utf-8")[: limit - 9].decode("utf-8", "ignore").rstrip("-_.")
    return f"{head}-{digest}"
