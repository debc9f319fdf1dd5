"""The content-addressed task cache: each task fetched once per (repository, commit, path).

Layout under :func:`cache_root` (``$CAIRN_CACHE_DIR``, else ``~/.cache/cairn/tasks``)::

    objects/<content-hash>/<folder-name>/   a task folder, read-only, named by its content
                                            hash (cairn.task.hashing: files, bytes, exec bits)
    index/<key>.json                        (git_url, commit, path) → content hash and folder
    listings/<key>.json                     (git_url, commit, sub-folder) → its task paths
    registries/<key>.json                   the last copy read of each registry URL
    locks/<key>.lock                        one flock per (git_url, commit) being fetched
    tmp/                                    checkouts and staged copies in progress

Concurrent jobs share the cache safely: a fetch of one (repository, commit) holds that pair's
lock, so a second job waits and then finds the first one's entries; a task folder is staged
in ``tmp/`` and moved into ``objects/`` with one ``rename`` (a reader sees it whole or not
at all); index files are written atomically. Each lookup re-hashes the folder it returns and
drops an entry whose bytes no longer match its hash (it is fetched again).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cairn._util.atomic import write_bytes_atomic
from cairn.lock import FileLock
from cairn.task.hashing import tree_hash

CACHE_ENV = "CAIRN_CACHE_DIR"
"""Environment variable naming the cache folder (replaces ``~/.cache/cairn/tasks``)."""


def cache_root() -> Path:
    """The task cache folder: ``$CAIRN_CACHE_DIR``, else ``~/.cache/cairn/tasks``."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser().absolute()
    return Path.home() / ".cache" / "cairn" / "tasks"


def _key(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogateescape")).hexdigest()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def make_read_only(root: Path) -> None:
    """Clear every write bit below ``root`` (exec bits stay: they are part of the hash)."""
    for dirpath, _dirs, filenames in os.walk(root):
        for f in filenames:
            p = Path(dirpath) / f
            if not p.is_symlink():
                os.chmod(p, stat.S_IMODE(p.lstat().st_mode) & ~0o222)
    for dirpath, _dirs, _files in os.walk(root, topdown=False):
        os.chmod(dirpath, 0o555)


def make_writable(root: Path) -> None:
    """Give the owner write access below ``root`` again (before removing or exporting)."""
    if not root.exists() or root.is_symlink():
        return
    os.chmod(root, stat.S_IMODE(root.stat().st_mode) | 0o700)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            p = Path(dirpath) / name
            if not p.is_symlink():
                os.chmod(p, stat.S_IMODE(p.lstat().st_mode) | (0o700 if p.is_dir() else 0o600))


def remove_tree(root: Path) -> None:
    """Remove a (read-only) cache folder."""
    if root.is_symlink() or root.is_file():
        root.unlink()
        return
    if root.exists():
        make_writable(root)
        shutil.rmtree(root)


@dataclass(frozen=True)
class CachedTask:
    """A task folder in the cache.

    Attributes:
        path: the read-only task folder (``objects/<content_hash>/<name>``).
        content_hash: its content hash (64 hex).
        git_url: the repository it was fetched from.
        commit: the commit it was fetched at.
        repo_path: its path inside the repository.
    """

    path: Path
    content_hash: str
    git_url: str
    commit: str
    repo_path: str


class TaskCache:
    """The task cache at ``root`` (default :func:`cache_root`).

    Args:
        root: the cache folder (created when first written).
    """

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root is not None else cache_root()

    # ---- paths ----------------------------------------------------------------------------
    @property
    def objects(self) -> Path:
        """``objects/``: the task folders, ``<content-hash>/<folder-name>``."""
        return self.root / "objects"

    @property
    def tmp(self) -> Path:
        """``tmp/``: checkouts and staged copies in progress."""
        return self.root / "tmp"

    def _index_file(self, git_url: str, commit: str, repo_path: str) -> Path:
        return self.root / "index" / f"{_key('task', git_url, commit, _norm(repo_path))}.json"

    def _listing_file(self, git_url: str, commit: str, sub: str) -> Path:
        return self.root / "listings" / f"{_key('listing', git_url, commit, _norm(sub))}.json"

    def lock(self, git_url: str, commit: str) -> FileLock:
        """The lock held while (git_url, commit) is fetched into the cache."""
        return FileLock(self.root / "locks" / f"{_key('fetch', git_url, commit)}.lock")

    # ---- tasks ----------------------------------------------------------------------------
    def lookup(self, git_url: str, commit: str, repo_path: str) -> CachedTask | None:
        """The cached task fetched from (git_url, commit, repo_path), verified; or ``None``.

        An entry whose folder is missing or whose bytes no longer hash to its recorded content
        hash is dropped (and ``None`` returned), so the task is fetched again.
        """
        index = self._index_file(git_url, commit, repo_path)
        try:
            data = json.loads(index.read_text(encoding="utf-8"))
            content_hash, name = str(data["content_hash"]), str(data["name"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        folder = self.objects / content_hash / name
        if not folder.is_dir() or tree_hash(folder) != content_hash:
            with contextlib.suppress(OSError):
                index.unlink()
            return None
        return CachedTask(folder, content_hash, git_url, commit, _norm(repo_path))

    def store(self, git_url: str, commit: str, repo_path: str, src: Path, name: str) -> CachedTask:
        """Copy a checked-out task folder into the cache and index it.

        Args:
            git_url: the repository.
            commit: the full commit id it was checked out at.
            repo_path: its path inside the repository.
            src: the checked-out folder (left in place; ``.git`` is not copied).
            name: the folder name to keep (the task's name falls back to it).

        Returns:
            The :class:`CachedTask` (an identical folder already cached is reused).
        """
        self.tmp.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix="stage-", dir=self.tmp))
        try:
            staged = stage / name
            shutil.copytree(src, staged, symlinks=True, ignore=shutil.ignore_patterns(".git"))
            content_hash = tree_hash(staged)
            make_read_only(staged)
            # a folder moves to another parent only while writable (rename updates its '..'):
            # root may move a 0555 folder, any other user may not; it goes read-only after
            os.chmod(staged, 0o755)
            final = self.objects / content_hash / name
            final.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.rename(staged, final)
                os.chmod(final, 0o555)
            except OSError:
                if not (final.is_dir() and tree_hash(final) == content_hash):
                    remove_tree(final)
                    os.rename(staged, final)
                    os.chmod(final, 0o555)
        finally:
            remove_tree(stage)
        record = {
            "git_url": git_url,
            "commit": commit,
            "path": _norm(repo_path),
            "content_hash": content_hash,
            "name": name,
            "fetched_at": _now(),
        }
        index = self._index_file(git_url, commit, repo_path)
        index.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(index, (json.dumps(record, indent=2) + "\n").encode())
        return CachedTask(final, content_hash, git_url, commit, _norm(repo_path))

    # ---- repository listings --------------------------------------------------------------
    def listing(self, git_url: str, commit: str, sub: str) -> list[str] | None:
        """The task paths found under ``sub`` of (git_url, commit), if recorded."""
        try:
            data = json.loads(self._listing_file(git_url, commit, sub).read_text("utf-8"))
            tasks = data["tasks"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if not isinstance(tasks, list) or not all(isinstance(t, str) for t in tasks):
            return None
        return tasks

    def save_listing(self, git_url: str, commit: str, sub: str, tasks: list[str]) -> None:
        """Record the task paths found under ``sub`` of (git_url, commit)."""
        path = self._listing_file(git_url, commit, sub)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(
            path,
            (
                json.dumps(
                    {
                        "git_url": git_url,
                        "commit": commit,
                        "path": _norm(sub),
                        "tasks": tasks,
                        "fetched_at": _now(),
                    },
                    indent=2,
                )
                + "\n"
            ).encode(),
        )

    # ---- inventory ------------------------------------------------------------------------
    def entries(self) -> list[dict]:
        """Every index record (``git_url``, ``commit``, ``path``, ``content_hash``, ``name``,
        ``fetched_at``, plus ``file``: the index file)."""
        out = []
        for f in sorted((self.root / "index").glob("*.json")):
            with contextlib.suppress(OSError, ValueError, TypeError):
                data = json.loads(f.read_text(encoding="utf-8"))
                if isinstance(data, dict):
                    out.append({**data, "file": f})
        return out

    def listings(self) -> list[dict]:
        """Every listing record (plus ``file``)."""
        out = []
        for f in sorted((self.root / "listings").glob("*.json")):
            with contextlib.suppress(OSError, ValueError, TypeError):
                data = json.loads(f.read_text(encoding="utf-8"))
                if isinstance(data, dict):
                    out.append({**data, "file": f})
        return out


def _norm(repo_path: str) -> str:
    p = repo_path.strip().strip("/")
    return "" if p in ("", ".") else os.path.normpath(p).replace(os.sep, "/")


# ---- registry copies -----------------------------------------------------------------------


def _registry_file(url: str, root: Path | None) -> Path:
    return (Path(root) if root else cache_root()) / "registries" / f"{_key('registry', url)}.json"


def save_registry_copy(url: str, text: str, root: Path | None = None) -> None:
    """Keep the registry document last read from ``url`` (best effort: a read-only cache
    folder only loses the offline fallback)."""
    path = _registry_file(url, root)
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(path, json.dumps({"url": url, "saved_at": _now(), "text": text}).encode())


def read_registry_copy(url: str, root: Path | None = None) -> tuple[str, str] | None:
    """The saved registry document of ``url`` and when it was saved, or ``None``."""
    try:
        data = json.loads(_registry_file(url, root).read_text(encoding="utf-8"))
        return str(data["text"]), str(data["saved_at"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
