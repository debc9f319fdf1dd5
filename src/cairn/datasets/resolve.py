"""A job's datasets (``-d``) and repositories (``--repo``) → task folders with provenance.

:func:`resolve_sources` runs before anything starts (design §9 exit 2 on any bad source): it
reads the registry, pins every task to a commit, fetches what the cache lacks and returns the
cached task folders, each with its :class:`~cairn.results.model.TaskSource`, and the records
that job.json keeps under ``sources``. A resumed job passes the records of its first run:
refs are not resolved again (a force-pushed branch does not change what the job runs), and a
dataset whose registry entry now names other tasks or commits is refused.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from cairn.datasets import git
from cairn.datasets.cache import CachedTask, TaskCache, remove_tree
from cairn.datasets.registry import Registry, RegistryDataset, load_registry, parse_spec
from cairn.errors import DatasetError
from cairn.events import Note
from cairn.results.model import TaskSource

Notify = Callable[[str], None]


@dataclass(frozen=True)
class ResolvedTask:
    """A task folder ready to load.

    Attributes:
        path: the folder (in the cache, or next to a registry file).
        source: its provenance.
    """

    path: Path
    source: TaskSource


@dataclass
class Resolution:
    """What :func:`resolve_sources` found.

    Attributes:
        tasks: the task folders, datasets in the order given (registry order inside each),
            then repositories.
        records: one JSON-ready record per ``-d`` / ``--repo`` (job.json ``sources``).
        notes: warnings and choices to report (a version picked, an entry with no pin, a
            registry read from its saved copy).
    """

    tasks: list[ResolvedTask] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)


@dataclass
class _Want:
    """One task to have in the cache: (git_url, commit, path) and its folder name."""

    git_url: str
    commit: str | None
    ref: str | None
    path: str
    name: str
    where: str


def _folder_name(path: str, fallback: str) -> str:
    name = PurePosixPath(path.strip("/")).name if path.strip("/") not in ("", ".") else ""
    name = name or fallback
    return "".join(c if c.isalnum() or c in "._-" else "-" for c in name) or "task"


def _norm(path: str) -> str:
    p = path.strip().strip("/")
    return "" if p in ("", ".") else PurePosixPath(p).as_posix()


def _check_relative(path: str, where: str) -> str:
    p = PurePosixPath(_norm(path))
    if p.is_absolute() or ".." in p.parts:
        raise DatasetError(f"{where}: path {path!r} must stay inside the repository")
    return p.as_posix() if str(p) != "." else ""


def _fetch_group(
    cache: TaskCache, url: str, commit: str | None, wants: list[_Want], notify: Notify
) -> dict[str, CachedTask]:
    """Have every wanted path of (url, commit) in the cache; path → cached task.

    Holds the (url, commit) lock so that a concurrent job waits and then reuses the entries.
    """
    from cairn.task.load import is_task_dir

    out: dict[str, CachedTask] = {}
    if commit is not None:
        for w in wants:
            hit = cache.lookup(url, commit, w.path)
            if hit is not None:
                out[w.path] = hit
        if len(out) == len({w.path for w in wants}):
            return out
    lock_commit = commit or f"abbrev:{wants[0].ref}"
    try:
        lock = cache.lock(url, lock_commit)
        lock.__enter__()
    except (OSError, TimeoutError) as exc:
        raise DatasetError(f"task cache {cache.root}: {exc}") from None
    try:
        if commit is not None:  # another job may have fetched it while we waited
            for w in wants:
                if w.path not in out and (hit := cache.lookup(url, commit, w.path)):
                    out[w.path] = hit
            missing = [w for w in wants if w.path not in out]
            if not missing:
                return out
        else:
            missing = wants
        try:
            work = git.temp_checkout_dir(cache.tmp)
        except OSError as exc:
            raise DatasetError(f"task cache {cache.root}: cannot write: {exc}") from None
        try:
            paths = sorted({w.path for w in missing})
            shown = commit or wants[0].ref
            notify(f"fetching {len(paths)} task folder(s) from {url} at {shown}")
            full, how = git.checkout_commit(url, commit or str(wants[0].ref), paths, work)
            for w in missing:
                src = work / w.path if w.path else work
                if not src.is_dir() or src.is_symlink() or not is_task_dir(src):
                    what = "does not exist" if not src.exists() else "is not a task (no task.toml or task.md)"
                    raise DatasetError(f"{w.where}: path {w.path or '.'!r} at commit {full} of {url} {what}")
                try:
                    out[w.path] = cache.store(url, full, w.path, src, w.name)
                except OSError as exc:
                    raise DatasetError(
                        f"task cache {cache.root}: cannot store {w.path or '.'} of {url}@{full}: {exc}"
                    ) from None
            notify(f"fetched {url} at {full[:12]} ({how}); {len(paths)} task(s) cached")
        finally:
            remove_tree(work)
        return out
    finally:
        lock.__exit__(None, None, None)


def _registry_task_list(
    ds: RegistryDataset, registry: Registry
) -> list[tuple[str, str | None, str | None, str]]:
    """(name, git_url, git_commit_id, path) of every task of a dataset, paths normalised."""
    out = []
    for t in ds.tasks:
        where = f"dataset {ds.spec}: task {t.name}"
        path = _check_relative(t.path, where) if t.git_url else t.path
        out.append((t.name, git.normalize_url(t.git_url) if t.git_url else None, t.git_commit_id, path))
    return out


def _previous(previous: Sequence[dict] | None, kind: str, **match: Any) -> dict | None:
    for rec in previous or ():
        if (
            isinstance(rec, dict)
            and rec.get("kind") == kind
            and all(rec.get(k) == v for k, v in match.items())
        ):
            return rec
    return None


def _resolve_dataset(
    spec: str, registry: Registry, cache: TaskCache, res: Resolution, prev: dict | None, notify: Notify
) -> None:
    from cairn.datasets.registry import resolve_dataset

    ds, note = resolve_dataset(registry, spec)
    if note:
        res.notes.append(Note(note))
    listed = _registry_task_list(ds, registry)
    if not listed:
        raise DatasetError(f"dataset {ds.spec} in registry {registry.source} lists no task")
    prev_tasks = {
        (t.get("name"), t.get("git_url"), t.get("path")): t
        for t in (prev or {}).get("tasks", [])
        if isinstance(t, dict)
    }
    if prev is not None:
        now = [(n, u, c if git.is_full_commit(c) else None, p) for n, u, c, p in listed]
        before = [
            (
                t.get("name"),
                t.get("git_url"),
                t.get("commit") if t.get("git_ref") is None else None,
                t.get("path"),
            )
            for t in prev.get("tasks", [])
            if isinstance(t, dict)
        ]
        if [tuple(x) for x in now] != [tuple(x) for x in before]:
            changed = sorted({str(x[0]) for x in set(now) ^ set(before)})
            raise DatasetError(
                f"dataset {ds.spec} in registry {registry.source} resolves differently than "
                f"when this job started (tasks or commits changed: {', '.join(changed[:8])}"
                f"{' …' if len(changed) > 8 else ''}); refusing to mix them in one job — "
                "start a new job (another --job-name)"
            )
    wants: list[_Want] = []
    local: list[tuple[int, ResolvedTask]] = []
    records: list[dict[str, Any]] = []
    for i, (name, url, commit_id, path) in enumerate(listed):
        where = f"dataset {ds.spec}: task {name}"
        if url is None:
            if registry.base_dir is None:
                raise DatasetError(
                    f"{where} has no git_url; a task given by path alone needs a "
                    f"registry file (--registry-path), not a URL "
                    f"({registry.source})"
                )
            folder = (registry.base_dir / path).absolute()
            from cairn.task.load import is_task_dir

            if not folder.is_dir() or not is_task_dir(folder):
                raise DatasetError(f"{where}: {folder} is not a task folder (no task.toml or task.md)")
            src = TaskSource(registry=registry.source, dataset=ds.name, dataset_version=ds.version, path=path)
            local.append((i, ResolvedTask(folder, src)))
            records.append({"name": name, "git_url": None, "git_ref": None, "commit": None, "path": path})
            continue
        ref: str | None = None
        if git.is_full_commit(commit_id):
            commit: str | None = commit_id.lower()
        else:
            ref = commit_id or "HEAD"
            old = prev_tasks.get((name, url, path))
            if old is not None and git.is_full_commit(old.get("commit")):
                commit = old["commit"]
            else:
                commit = git.resolve_ref(url, commit_id)
                if commit_id is None:
                    res.notes.append(
                        Note.warn(
                            f"{where} has no git_commit_id pin; using {url} "
                            f"HEAD = {commit} (recorded in job.json)"
                        )
                    )
                elif commit is not None:
                    res.notes.append(
                        Note.warn(f"{where} names ref {commit_id!r}, not a commit; using {commit}")
                    )
        wants.append(_Want(url, commit, ref, path, _folder_name(path, name), where))
        records.append({"name": name, "git_url": url, "git_ref": ref, "commit": commit, "path": path})
    fetched: dict[tuple[str, str | None, str], CachedTask] = {}
    groups: dict[tuple[str, str | None, str | None], list[_Want]] = {}
    for w in wants:
        groups.setdefault((w.git_url, w.commit, None if w.commit else w.ref), []).append(w)
    for (url, commit, _ref), ws in groups.items():
        for p, hit in _fetch_group(cache, url, commit, ws, notify).items():
            fetched[(url, commit, p)] = hit
    tasks: list[tuple[int, ResolvedTask]] = list(local)
    wi = iter(wants)
    for i, rec in enumerate(records):
        if rec["git_url"] is None:
            continue
        w = next(wi)
        hit = fetched[(w.git_url, w.commit, w.path)]
        rec["commit"] = hit.commit
        rec["content_hash"] = hit.content_hash
        tasks.append(
            (
                i,
                ResolvedTask(
                    hit.path,
                    TaskSource(
                        registry=registry.source,
                        dataset=ds.name,
                        dataset_version=ds.version,
                        git_url=w.git_url,
                        git_ref=w.ref,
                        commit=hit.commit,
                        path=w.path,
                    ),
                ),
            )
        )
    tasks.sort(key=lambda x: x[0])
    res.tasks.extend(t for _, t in tasks)
    res.records.append(
        {
            "kind": "dataset",
            "spec": spec,
            "name": ds.name,
            "version": ds.version,
            "registry": registry.source,
            "tasks": records,
        }
    )


def _resolve_repo(
    spec: str, sub: str, cache: TaskCache, res: Resolution, prev: dict | None, notify: Notify
) -> None:
    from cairn.task.load import find_tasks

    url, ref = git.split_repo_spec(spec)
    url = git.normalize_url(url)
    sub = _check_relative(sub, f"repository {url}")
    if prev is not None and git.is_full_commit(prev.get("commit")):
        commit: str | None = prev["commit"]
        if ref is not None and not git.is_full_commit(ref):
            res.notes.append(
                Note(f"repository {url}@{ref}: running commit {commit}, resolved when the job started")
            )
    else:
        commit = git.resolve_ref(url, ref)
    where = f"repository {url}" + (f"@{ref}" if ref else "")
    paths = cache.listing(url, commit, sub) if commit else None
    if paths is None:
        try:
            lock = cache.lock(url, commit or f"abbrev:{ref}")
            lock.__enter__()
        except (OSError, TimeoutError) as exc:
            raise DatasetError(f"task cache {cache.root}: {exc}") from None
        try:
            work = git.temp_checkout_dir(cache.tmp)
            try:
                notify(f"fetching {url} at {commit or ref}" + (f" (folder {sub})" if sub else ""))
                full, how = git.checkout_commit(url, commit or str(ref), [sub], work)
                base = work / sub if sub else work
                dirs = find_tasks(base) if base.is_dir() else []
                if not dirs:
                    what = (
                        "does not exist"
                        if not base.exists()
                        else "is not a task and holds no task folders (task.toml or task.md)"
                    )
                    raise DatasetError(f"{where}: path {sub or '.'!r} at commit {full} {what}")
                paths = []
                for d in dirs:
                    rel = d.relative_to(work).as_posix() if d != work else ""
                    cache.store(url, full, rel, d, _folder_name(rel, _repo_name(url)))
                    paths.append(rel)
                cache.save_listing(url, full, sub, paths)
                commit = full
                notify(f"fetched {url} at {full[:12]} ({how}); {len(paths)} task(s) cached")
            except OSError as exc:
                raise DatasetError(f"task cache {cache.root}: {exc}") from None
            finally:
                with contextlib.suppress(OSError):
                    remove_tree(work)
        finally:
            lock.__exit__(None, None, None)
    wants = [_Want(url, commit, ref, p, _folder_name(p, _repo_name(url)), where) for p in paths]
    hits = _fetch_group(cache, url, commit, wants, notify)
    recs = []
    for w in wants:
        hit = hits[w.path]
        res.tasks.append(
            ResolvedTask(
                hit.path,
                TaskSource(
                    git_url=url,
                    git_ref=None if git.is_full_commit(ref) else (ref or "HEAD"),
                    commit=hit.commit,
                    path=w.path,
                ),
            )
        )
        recs.append({"path": w.path, "content_hash": hit.content_hash})
    res.records.append(
        {"kind": "repo", "spec": spec, "url": url, "ref": ref, "commit": commit, "path": sub, "tasks": recs}
    )


def _repo_name(url: str) -> str:
    name = url.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1]
    return name.removesuffix(".git") or "task"


def resolve_sources(
    *,
    datasets: Sequence[str] = (),
    repos: Sequence[str] = (),
    registry_url: str | None = None,
    registry_path: Path | None = None,
    repo_path: str | None = None,
    previous: Sequence[dict] | None = None,
    cache: TaskCache | None = None,
    notify: Notify | None = None,
) -> Resolution:
    """Resolve datasets and repositories to cached task folders (fetching what is missing).

    Args:
        datasets: ``NAME@VERSION`` or ``NAME`` specs (``-d``).
        repos: ``GIT_URL[@REF]`` specs (``--repo``).
        registry_url: the registry URL (default Harbor's public registry).
        registry_path: a registry.json file (wins over the URL).
        repo_path: the folder of every repository that is a task or holds task folders.
        previous: the ``sources`` records of the job's first run (resume), or ``None``.
        cache: the task cache (default the one at :func:`cairn.datasets.cache.cache_root`).
        notify: receives progress lines (fetching …) as they happen.

    Returns:
        The :class:`Resolution`.

    Raises:
        DatasetError: an unknown dataset or version, an unreachable registry or repository,
            a commit that does not exist, a path that is not a task, or (resume) a dataset
            that resolves differently now.
    """
    cache = cache or TaskCache()
    notify = notify or (lambda line: None)
    res = Resolution()
    if datasets:
        for spec in datasets:
            parse_spec(spec)
        registry: Registry | None = None
        try:
            registry = load_registry(url=registry_url, path=registry_path, cache_dir=cache.root)
        except DatasetError:
            if previous is None or not all(_previous(previous, "dataset", spec=s) for s in datasets):
                raise
            res.notes.append(
                Note.warn(
                    "the registry cannot be read; running the tasks and commits recorded when the job started"
                )
            )
        if registry is not None:
            res.notes.extend(Note.warn(w) for w in registry.warnings)
        for spec in datasets:
            prev = _previous(previous, "dataset", spec=spec)
            if registry is None:
                assert prev is not None  # checked above: every dataset has its record
                _replay_dataset(prev, cache, res, notify)
            else:
                _resolve_dataset(spec, registry, cache, res, prev, notify)
    for spec in repos:
        prev = _previous(previous, "repo", spec=spec, path=_norm(repo_path or ""))
        _resolve_repo(spec, repo_path or "", cache, res, prev, notify)
    return res


def _replay_dataset(prev: dict, cache: TaskCache, res: Resolution, notify: Notify) -> None:
    """A resumed dataset whose registry cannot be read: the recorded tasks and commits."""
    groups: dict[tuple[str, str], list[_Want]] = {}
    order: list[tuple[dict, _Want]] = []
    for t in prev.get("tasks", []):
        if not isinstance(t, dict) or not t.get("git_url") or not git.is_full_commit(t.get("commit")):
            raise DatasetError(
                f"dataset {prev.get('spec')}: the registry cannot be read and "
                "job.json records a task that is not a pinned git task"
            )
        w = _Want(
            t["git_url"],
            t["commit"],
            t.get("git_ref"),
            str(t.get("path") or ""),
            _folder_name(str(t.get("path") or ""), str(t.get("name"))),
            f"dataset {prev.get('spec')}: task {t.get('name')}",
        )
        groups.setdefault((w.git_url, t["commit"]), []).append(w)
        order.append((t, w))
    hits: dict[tuple[str, str, str], CachedTask] = {}
    for (url, commit), ws in groups.items():
        for p, hit in _fetch_group(cache, url, commit, ws, notify).items():
            hits[(url, commit, p)] = hit
    for _t, w in order:
        hit = hits[(w.git_url, str(w.commit), w.path)]
        res.tasks.append(
            ResolvedTask(
                hit.path,
                TaskSource(
                    registry=prev.get("registry"),
                    dataset=prev.get("name"),
                    dataset_version=prev.get("version"),
                    git_url=w.git_url,
                    git_ref=w.ref,
                    commit=hit.commit,
                    path=w.path,
                ),
            )
        )
    res.records.append(dict(prev))


def export_tasks(tasks: Sequence[ResolvedTask], out_dir: Path) -> list[Path]:
    """Copy resolved task folders into ``out_dir`` as plain, writable folders.

    Args:
        tasks: the resolved tasks.
        out_dir: the destination (created); each task lands in ``out_dir/<folder name>``.

    Returns:
        The folders written.

    Raises:
        DatasetError: two tasks share a folder name, or a destination folder exists.
    """
    out_dir = Path(out_dir)
    names: dict[str, Path] = {}
    for t in tasks:
        n = t.path.name
        if n in names and names[n] != t.path:
            raise DatasetError(
                f"two tasks would be exported as {out_dir / n} ({names[n]} and "
                f"{t.path}); export them one dataset at a time"
            )
        names[n] = t.path
        if (out_dir / n).exists():
            raise DatasetError(f"{out_dir / n} exists; remove it or choose another -o")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for n, src in names.items():
        dest = out_dir / n
        shutil.copytree(src, dest, symlinks=True, copy_function=shutil.copy)
        from cairn.datasets.cache import make_writable

        make_writable(dest)
        written.append(dest)
    return written
