"""Content hashes of tasks and environments (design §3.1, §8).

Both hashes are sha256 hex digests over the sorted relative paths, the bytes and the exec bit
of every file (symlinks by their target text, never followed), so they are stable across
machines and ignore mtimes, ownership, ``__pycache__`` and ``.git``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from cairn._util.treehash import IGNORED_NAMES, _update_tree, tree_hash  # noqa: F401 - re-exported


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
    h.update(json.dumps({"docker_image": docker_image, "workdir": workdir}, sort_keys=True).encode() + b"\0")
    if env_dir is not None and env_dir.is_dir():
        _update_tree(h, env_dir)
    return h.hexdigest()
