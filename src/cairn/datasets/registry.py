"""Dataset registries in Harbor's ``registry.json`` format, and ``NAME[@VERSION]`` resolution.

A registry is a JSON list of datasets::

    [{"name": "demo", "version": "1.0", "description": "…",
      "tasks": [{"name": "hello", "git_url": "https://…/tasks.git",
                 "git_commit_id": "<40 hex>", "path": "tasks/hello"},
                {"name": "local-one", "path": "local/one"}]}]

A task without ``git_url`` is a folder given by ``path`` relative to the registry file (only
possible for a registry read from a file; Harbor takes such a path from the current folder).
Unknown keys (``metrics`` …) are ignored, as Harbor's loader does (its ``DatasetSpec`` and
``RegistryTaskId`` models, harbor 0.26 ``harbor.models.registry``).

Reading a registry over HTTP keeps a copy in the cache (:func:`cairn.datasets.cache
.save_registry_copy`), so a registry that cannot be reached later is read from that copy,
with a warning.
"""

from __future__ import annotations

import difflib
import json
import re
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cairn.errors import DatasetError

DEFAULT_REGISTRY_URL = "https://raw.githubusercontent.com/laude-institute/harbor/main/registry.json"
"""Harbor's public registry: the default of ``harbor run --registry-url`` (harbor 0.26,
``harbor.constants.DEFAULT_REGISTRY_URL``)."""

REGISTRY_TIMEOUT_SEC = 30.0
"""How long one HTTP read of a registry may take, seconds."""

MAX_REGISTRY_BYTES = 64 << 20
"""A registry document larger than this (64 MiB) is refused."""

_HEX40 = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True)
class RegistryTask:
    """One task of a registry dataset.

    Attributes:
        name: the task's name in the registry.
        path: the task folder: inside the repository (``git_url``), or relative to the registry
            file; ``""`` or ``"."`` is the repository's top.
        git_url: the repository, or ``None`` for a folder next to the registry file.
        git_commit_id: the pinned commit (or a ref), or ``None`` when the entry has no pin.
    """

    name: str
    path: str
    git_url: str | None = None
    git_commit_id: str | None = None

    @property
    def pinned(self) -> bool:
        """Whether the entry names a full 40-hex commit id."""
        return bool(self.git_commit_id and _HEX40.fullmatch(self.git_commit_id.lower()))


@dataclass(frozen=True)
class RegistryDataset:
    """One ``(name, version)`` of a registry.

    Attributes:
        name: the dataset name (``terminal-bench``).
        version: its version string (``2.0``, ``head``).
        description: free text.
        tasks: the tasks, in registry order.
    """

    name: str
    version: str
    description: str = ""
    tasks: tuple[RegistryTask, ...] = ()

    @property
    def spec(self) -> str:
        """``NAME@VERSION``."""
        return f"{self.name}@{self.version}"


@dataclass(frozen=True)
class Registry:
    """A parsed registry.

    Attributes:
        source: where it was read from (the URL, or the file's absolute path).
        datasets: every dataset, in file order.
        base_dir: the folder of a registry file (for tasks without ``git_url``); ``None`` for a
            registry read over HTTP.
        warnings: notes on how it was read (e.g. from the cached copy).
    """

    source: str
    datasets: tuple[RegistryDataset, ...]
    base_dir: Path | None = None
    warnings: tuple[str, ...] = field(default_factory=tuple)

    def versions(self, name: str) -> list[str]:
        """The versions of dataset ``name``, the one ``NAME`` alone picks first
        (:func:`version_order`)."""
        return version_order({d.version for d in self.datasets if d.name == name})


def parse_spec(spec: str) -> tuple[str, str | None]:
    """Split ``NAME@VERSION`` (or ``NAME``) into its parts.

    Raises:
        DatasetError: an empty name or version.
    """
    name, at, version = spec.strip().partition("@")
    if not name or (at and not version):
        raise DatasetError(f"bad dataset {spec!r}: expected NAME or NAME@VERSION")
    return name, (version if at else None)


_NUMERIC_VERSION = re.compile(r"v?\d+(\.\d+)*")


def version_key(version: str) -> tuple[int, ...]:
    """The numbers of a dotted version (``2.10`` → ``(2, 10)``), for comparing versions."""
    return tuple(int(p) for p in version.lstrip("v").split("."))


def version_order(versions: set[str] | list[str]) -> list[str]:
    """Versions in the order ``NAME`` alone prefers them, first the one it takes.

    As Harbor's ``resolve_version`` (harbor 0.26 ``harbor.registry.client.base``): ``head``
    when there is one, then dotted numeric versions highest first (``2.10`` before ``2.9``),
    then the other strings in reverse lexical order.
    """
    versions = set(versions)
    head = ["head"] if "head" in versions else []
    numeric = sorted((v for v in versions if _NUMERIC_VERSION.fullmatch(v)), key=version_key, reverse=True)
    rest = sorted((v for v in versions - set(numeric) - set(head)), reverse=True)
    return head + numeric + rest


def _req(value: Any, where: str, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise DatasetError(f"{where}: '{key}' must be a non-empty string, got {value!r}")
    return value


def _opt(value: Any, where: str, key: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise DatasetError(f"{where}: '{key}' must be a non-empty string, got {value!r}")
    return value


def parse_registry(data: Any, source: str, base_dir: Path | None = None) -> Registry:
    """Check and convert a parsed registry.json.

    Args:
        data: the JSON value (a list of dataset objects).
        source: where it came from (for messages and provenance).
        base_dir: the registry file's folder, or ``None`` for a URL.

    Returns:
        The :class:`Registry`.

    Raises:
        DatasetError: the document is not a list of datasets with name, version and tasks,
            or two entries share a name and version.
    """
    if not isinstance(data, list):
        raise DatasetError(f"registry {source}: expected a JSON list of datasets, got {type(data).__name__}")
    out: list[RegistryDataset] = []
    seen: set[tuple[str, str]] = set()
    for i, d in enumerate(data):
        where = f"registry {source}: dataset #{i + 1}"
        if not isinstance(d, dict):
            raise DatasetError(f"{where}: expected an object")
        name = _req(d.get("name"), where, "name")
        version = d.get("version")
        if isinstance(version, (int, float)) and not isinstance(version, bool):
            version = str(version)
        version = _req(version, f"{where} ({name})", "version")
        where = f"registry {source}: dataset {name}@{version}"
        if (name, version) in seen:
            raise DatasetError(f"{where} is listed twice")
        seen.add((name, version))
        tasks_raw = d.get("tasks")
        if not isinstance(tasks_raw, list):
            raise DatasetError(f"{where}: 'tasks' must be a list")
        tasks = []
        for j, t in enumerate(tasks_raw):
            tw = f"{where}: task #{j + 1}"
            if not isinstance(t, dict):
                raise DatasetError(f"{tw}: expected an object")
            tname = _req(t.get("name"), tw, "name")
            tw = f"{where}: task {tname}"
            path = _opt(t.get("path"), tw, "path") or ""
            git_url = _opt(t.get("git_url"), tw, "git_url")
            commit = _opt(t.get("git_commit_id"), tw, "git_commit_id")
            if git_url is None and not path:
                raise DatasetError(f"{tw}: has neither 'git_url' nor 'path'")
            tasks.append(
                RegistryTask(
                    name=tname,
                    path=path or "",
                    git_url=git_url or None,
                    git_commit_id=(commit or "").strip() or None,
                )
            )
        desc = d.get("description")
        out.append(
            RegistryDataset(
                name=name,
                version=version,
                description=desc if isinstance(desc, str) else "",
                tasks=tuple(tasks),
            )
        )
    return Registry(source=source, datasets=tuple(out), base_dir=base_dir)


def read_registry_file(path: Path) -> Registry:
    """Read a registry.json from disk.

    Raises:
        DatasetError: the file cannot be read or parsed (its path and the reason).
    """
    path = Path(path).absolute()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DatasetError(f"cannot read registry file {path}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise DatasetError(f"registry file {path} is not valid JSON: {exc}") from None
    return parse_registry(data, str(path), path.parent)


def fetch_registry_text(url: str, *, timeout_sec: float = REGISTRY_TIMEOUT_SEC) -> str:
    """GET a registry document over HTTP(S) (or ``file://``).

    Raises:
        DatasetError: the URL is unreachable or answers with an error status (the URL and the
            client's message), or the body is over :data:`MAX_REGISTRY_BYTES` or not UTF-8.
    """
    req = urllib.request.Request(url, headers={"User-Agent": "cairn", "Accept": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_sec) as resp:  # noqa: S310 - user URL
            body = resp.read(MAX_REGISTRY_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise DatasetError(f"registry {url} answered HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise DatasetError(f"registry {url} is unreachable: {reason}") from None
    if len(body) > MAX_REGISTRY_BYTES:
        raise DatasetError(f"registry {url} is larger than {MAX_REGISTRY_BYTES >> 20} MiB")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"registry {url} is not UTF-8 text: {exc}") from None


def load_registry(
    *, url: str | None = None, path: Path | None = None, cache_dir: Path | None = None
) -> Registry:
    """Read the registry a job names: a file (``--registry-path``), else a URL
    (``--registry-url``, default :data:`DEFAULT_REGISTRY_URL`).

    A registry read over HTTP is saved in the cache; when the URL cannot be reached later, the
    saved copy is used and the returned registry carries a warning saying so.

    Args:
        url: the registry URL.
        path: the registry file (wins over ``url``).
        cache_dir: the task cache root (default :func:`cairn.datasets.cache.cache_root`).

    Returns:
        The :class:`Registry`.

    Raises:
        DatasetError: unreadable, unreachable with no saved copy, or malformed.
    """
    from cairn.datasets import cache

    if path is not None:
        return read_registry_file(Path(path))
    url = url or DEFAULT_REGISTRY_URL
    if "://" not in url:
        return read_registry_file(Path(url))
    try:
        text = fetch_registry_text(url)
    except DatasetError as exc:
        saved = cache.read_registry_copy(url, cache_dir)
        if saved is None:
            raise
        text, saved_at = saved
        warning = f"{exc}; using the copy saved on {saved_at} (datasets may have changed since)"
        return _parse_text(text, url, warnings=(warning,))
    registry = _parse_text(text, url)
    cache.save_registry_copy(url, text, cache_dir)
    return registry


def _parse_text(text: str, url: str, warnings: tuple[str, ...] = ()) -> Registry:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise DatasetError(f"registry {url} is not valid JSON: {exc}") from None
    reg = parse_registry(data, url)
    return Registry(source=reg.source, datasets=reg.datasets, warnings=warnings)


def resolve_dataset(registry: Registry, spec: str) -> tuple[RegistryDataset, str | None]:
    """Find ``NAME@VERSION`` (or ``NAME``: the highest version) in a registry.

    Args:
        registry: the registry.
        spec: ``NAME`` or ``NAME@VERSION``.

    Returns:
        (the dataset, a note saying which version ``NAME`` alone chose, or ``None``).

    Raises:
        DatasetError: unknown name (with the closest names) or unknown version (with the
            versions there are).
    """
    name, version = parse_spec(spec)
    names = sorted({d.name for d in registry.datasets})
    if name not in names:
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
        hint = (
            f"; did you mean {', '.join(close)}?"
            if close
            else (
                f"; it lists {len(names)} dataset(s) (cairn datasets list)"
                if names
                else "; it lists no dataset"
            )
        )
        raise DatasetError(f"unknown dataset {name!r} in registry {registry.source}{hint}")
    versions = registry.versions(name)
    if version is None:
        chosen = versions[0]
        why = "head" if chosen == "head" else "the highest"
        note = f"dataset {name}: no version given, using {why}, {name}@{chosen}" + (
            f" (also: {', '.join(versions[1:])})" if len(versions) > 1 else ""
        )
    else:
        if version not in versions:
            close = difflib.get_close_matches(version, versions, n=3, cutoff=0.3)
            hint = f"; did you mean {', '.join(f'{name}@{v}' for v in close)}?" if close else ""
            raise DatasetError(
                f"unknown version {name}@{version} in registry "
                f"{registry.source}; versions: {', '.join(versions)}{hint}"
            )
        chosen, note = version, None
    ds = next(d for d in registry.datasets if d.name == name and d.version == chosen)
    return ds, note
