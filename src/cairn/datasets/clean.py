"""``cairn cache clean``: remove the cached tasks that no job needs.

A cached task is *needed* when a job under one of the given jobs folders refers to it: its
job.json ``sources`` records list the task's content hash, or one of its trials' result.json
names it (``task.content_hash`` of a trial whose ``task.source`` is set). Everything else —
task folders, index and listing entries, stale staging folders — is removed; ``everything``
removes the whole cache, saved registry copies included. A job folder copied elsewhere keeps
nothing alive: pass its jobs folder too (``--jobs-dir``, repeatable).
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from cairn.datasets.cache import TaskCache, remove_tree
from cairn.lock import flock_held


@dataclass
class CleanReport:
    """What :func:`clean_cache` removed (or would remove, with ``dry_run``).

    Attributes:
        removed: task folders removed (``objects/<hash>/<name>``).
        kept: task folders kept because a job needs them.
        entries_removed: index and listing files removed.
        bytes_freed: size of the removed task folders, bytes.
    """

    removed: list[Path] = field(default_factory=list)
    kept: list[Path] = field(default_factory=list)
    entries_removed: int = 0
    bytes_freed: int = 0


def needed_hashes(jobs_dirs: list[Path]) -> set[str]:
    """The content hashes of cached tasks that jobs under ``jobs_dirs`` refer to."""
    out: set[str] = set()
    for jobs in jobs_dirs:
        jobs = Path(jobs)
        if not jobs.is_dir():
            continue
        for job_json in jobs.glob("*/job.json"):
            with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
                meta = json.loads(job_json.read_text(encoding="utf-8"))
                for rec in meta.get("sources") or []:
                    for t in rec.get("tasks") or []:
                        if isinstance(t, dict) and isinstance(t.get("content_hash"), str):
                            out.add(t["content_hash"])
        for result in jobs.glob("*/trials/*/result.json"):
            with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
                task = json.loads(result.read_text(encoding="utf-8")).get("task") or {}
                if task.get("source") and isinstance(task.get("content_hash"), str):
                    out.add(task["content_hash"])
    return out


def _size(root: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            with contextlib.suppress(OSError):
                total += (Path(dirpath) / f).lstat().st_size
    return total


def clean_cache(
    cache: TaskCache, jobs_dirs: list[Path], *, everything: bool = False, dry_run: bool = False
) -> CleanReport:
    """Remove cached tasks that no job under ``jobs_dirs`` needs.

    Args:
        cache: the task cache.
        jobs_dirs: jobs folders whose jobs keep their tasks (``./jobs`` by default in the CLI).
        everything: remove every cached task, listing and registry copy.
        dry_run: only report.

    Returns:
        The :class:`CleanReport`.
    """
    report = CleanReport()
    keep = set() if everything else needed_hashes(jobs_dirs)
    objects = cache.objects
    kept_hashes: set[str] = set()
    if objects.is_dir():
        for hdir in sorted(objects.iterdir()):
            for folder in sorted(p for p in hdir.iterdir()) if hdir.is_dir() else []:
                if hdir.name in keep:
                    report.kept.append(folder)
                    kept_hashes.add(hdir.name)
                    continue
                report.removed.append(folder)
                report.bytes_freed += _size(folder)
                if not dry_run:
                    remove_tree(folder)
            if not dry_run and hdir.is_dir() and not any(hdir.iterdir()):
                with contextlib.suppress(OSError):
                    hdir.rmdir()
    removed_keys: set[tuple[str, str]] = set()
    for rec in cache.entries():
        if rec.get("content_hash") in kept_hashes:
            continue
        removed_keys.add((str(rec.get("git_url")), str(rec.get("commit"))))
        report.entries_removed += 1
        if not dry_run:
            with contextlib.suppress(OSError):
                Path(rec["file"]).unlink()
    kept_keys = (
        {(str(r.get("git_url")), str(r.get("commit"))) for r in cache.entries()} if not dry_run else set()
    )
    for rec in cache.listings():
        key = (str(rec.get("git_url")), str(rec.get("commit")))
        if everything or (key in removed_keys and key not in kept_keys):
            report.entries_removed += 1
            if not dry_run:
                with contextlib.suppress(OSError):
                    Path(rec["file"]).unlink()
    if not dry_run:
        _clean_tmp(cache)
        if everything:
            for sub in ("registries", "locks", "index", "listings", "objects"):
                with contextlib.suppress(OSError):
                    remove_tree(cache.root / sub)
    return report


def _clean_tmp(cache: TaskCache) -> None:
    """Remove staging folders no fetch holds (a fetch holds its (url, commit) lock)."""
    locks = cache.root / "locks"
    busy = any(flock_held(p) for p in locks.glob("*.lock")) if locks.is_dir() else False
    if busy or not cache.tmp.is_dir():
        return  # a fetch is under way: its checkout stays
    for p in cache.tmp.iterdir():
        with contextlib.suppress(OSError):
            remove_tree(p)
