"""Masking secret values in what cairn writes (design §7, §11).

Resolved secret values (from ``${VAR}`` templates, 4+ characters) are replaced with ``***`` in
every text file cairn writes: logs, copies of test output, trajectories, JSON results.
Artifacts are copied as they are; :func:`find_secrets` only reports the files that contain one.

Besides the raw value, its JSON-escaped spellings are masked too, so a secret holding a quote,
a backslash or non-ASCII text is still caught inside a trajectory.json.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from cairn._util.atomic import write_bytes_atomic

MASK = "***"
"""What a secret value is replaced with."""

MIN_SECRET_LEN = 4
"""Shorter values are not masked (masking ``"1"`` everywhere would destroy every file)."""

BINARY_SNIFF_BYTES = 8192
"""A file with a NUL byte in its first this-many bytes is binary and left alone."""


def _variants(secret: str) -> set[str]:
    return {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]}


class Masker:
    """Replaces secret values with ``***``.

    Longer secrets are matched first, so a secret that contains another is masked whole.

    Args:
        secrets: the resolved secret values; values shorter than :data:`MIN_SECRET_LEN`
            characters (and non-strings) are ignored.
    """

    def __init__(self, secrets: Iterable[str]) -> None:
        values = {s for s in secrets if isinstance(s, str) and len(s) >= MIN_SECRET_LEN}
        self.secrets: tuple[str, ...] = tuple(sorted(values, key=lambda s: (-len(s), s)))
        spellings = sorted({v for s in values for v in _variants(s)}, key=lambda s: (-len(s), s))
        self._text_re = re.compile("|".join(map(re.escape, spellings))) if spellings else None
        encoded = sorted({v.encode("utf-8") for v in spellings}, key=lambda b: (-len(b), b))
        self._bytes_re = re.compile(b"|".join(map(re.escape, encoded))) if encoded else None

    def __bool__(self) -> bool:
        """Whether there is anything to mask."""
        return bool(self.secrets)

    def mask(self, text: str) -> str:
        """Return ``text`` with every secret value replaced by ``***``."""
        return self._text_re.sub(MASK, text) if self._text_re is not None else text

    def mask_bytes(self, data: bytes) -> bytes:
        """Return ``data`` with every secret value's UTF-8 bytes replaced by ``b"***"``."""
        return self._bytes_re.sub(MASK.encode(), data) if self._bytes_re is not None else data

    def mask_json(self, value: Any) -> Any:
        """Mask every string (keys included) inside a tree of plain JSON values.

        Args:
            value: dicts, lists, strings, numbers, booleans, ``None``.

        Returns:
            A new tree with strings masked; other values unchanged.
        """
        if self._text_re is None:
            return value
        if isinstance(value, str):
            return self.mask(value)
        if isinstance(value, dict):
            return {self.mask(str(k)): self.mask_json(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.mask_json(v) for v in value]
        return value

    def contains(self, data: str | bytes) -> bool:
        """Whether ``data`` contains any secret value (in any masked spelling)."""
        if isinstance(data, str):
            return self._text_re is not None and self._text_re.search(data) is not None
        return self._bytes_re is not None and self._bytes_re.search(data) is not None


def _files(folder: Path, skip: set[Path]) -> Iterable[Path]:
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        here = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if here / d not in skip)
        for name in sorted(filenames):
            path = here / name
            st = path.lstat()
            if stat.S_ISREG(st.st_mode):
                yield path


def _is_binary(data: bytes) -> bool:
    return b"\0" in data[:BINARY_SNIFF_BYTES]


def mask_tree(folder: Path, masker: Masker, *, skip: Iterable[Path] = ()) -> list[Path]:
    """Mask secrets in place in the text files under a folder (the files cairn wrote).

    Regular files only: symlinks are not followed, binary files (a NUL byte near the start)
    are left alone. A changed file is rewritten atomically with its permission bits kept.

    Args:
        folder: the folder to walk.
        masker: the secrets.
        skip: folders (as paths under ``folder``) not to enter, e.g. artifacts.

    Returns:
        The files that were changed, in walk order.
    """
    if not masker or not Path(folder).is_dir():
        return []
    skip_set = {Path(p) for p in skip}
    changed = []
    for path in _files(Path(folder), skip_set):
        data = path.read_bytes()
        if _is_binary(data):
            continue
        masked = masker.mask_bytes(data)
        if masked != data:
            write_bytes_atomic(path, masked, mode=stat.S_IMODE(path.stat().st_mode))
            changed.append(path)
    return changed


def find_secrets(folder: Path, masker: Masker) -> list[Path]:
    """List the files under a folder that contain a secret value, without modifying them.

    Used on artifacts, which are kept as collected (design §7) but warned about. Binary files
    are searched too; symlinks are not followed.

    Args:
        folder: the folder to search.
        masker: the secrets.

    Returns:
        The files containing a secret, in walk order.
    """
    if not masker or not Path(folder).is_dir():
        return []
    return [p for p in _files(Path(folder), set()) if masker.contains(p.read_bytes())]
