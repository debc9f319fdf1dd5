"""Collect a step's artifacts from the sandbox to the host (design §4.5).

Best-effort: a failed entry is recorded in the manifest, never fatal. Symlinks are stored as
links and never followed (the sandbox's download guarantees it); a per-entry size cap protects
the host.
"""

from __future__ import annotations

import fnmatch
import os
import shlex
import shutil
from pathlib import Path, PurePosixPath
from typing import Any

from cairn.errors import HostPathsSkippedError, SandboxLostError
from cairn.layout import ARTIFACTS_DIR
from cairn.results.model import ArtifactEntry
from cairn.sandbox.base import Sandbox
from cairn.task.model import MAIN_SERVICE, Artifact, CollectHook

DEFAULT_ARTIFACT_CAP_BYTES = 1 << 30
"""Per-entry size cap: 1 GiB."""

LOGS_ARTIFACTS = ARTIFACTS_DIR


def _remove_excluded(root: Path, patterns: tuple[str, ...]) -> list[str]:
    """Delete files under ``root`` whose relative path (or name) matches a glob; no link following."""
    removed: list[str] = []
    if not patterns or not root.exists():
        return removed
    if root.is_file() or root.is_symlink():
        if any(fnmatch.fnmatch(root.name, p) for p in patterns):
            root.unlink()
            removed.append(root.name)
        return removed
    for dirpath, dirnames, filenames in os.walk(root, topdown=True, followlinks=False):
        for name in list(dirnames) + filenames:
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            if any(fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(name, p) for p in patterns):
                if full.is_dir() and not full.is_symlink():
                    shutil.rmtree(full)
                    if name in dirnames:
                        dirnames.remove(name)
                else:
                    full.unlink()
                removed.append(rel)
    return removed


async def _size_bytes(sandbox: Sandbox, source: str) -> int | None:
    """Total size of a sandbox path in bytes (``du -sb``, not following links); None if absent."""
    r = await sandbox.exec(
        f"du -sb --apparent-size {shlex.quote(source)} 2>/dev/null | tail -n1", user="root"
    )
    try:
        return int(r.stdout.split()[0])
    except (IndexError, ValueError):
        return None


async def _logs_artifacts_hold_files(sandbox: Sandbox, known: bool | None) -> bool:
    """Whether ``/logs/artifacts`` holds anything (``known`` when the caller already knows;
    else one probe)."""
    if known is not None:
        return known
    r = await sandbox.exec(f"find {LOGS_ARTIFACTS} -mindepth 1 | head -n 1", user="root")
    return bool(r.stdout.strip())


async def collect_artifacts(
    sandbox: Sandbox,
    entries: tuple[Artifact, ...],
    dest_dir: Path,
    *,
    cap_bytes: int = DEFAULT_ARTIFACT_CAP_BYTES,
    logs_artifacts_written: bool | None = None,
    include_logs: bool = True,
    sized: dict[str, tuple[int | None, str]] | None = None,
) -> list[ArtifactEntry]:
    """Copy ``entries`` and ``/logs/artifacts`` from the sandbox into ``dest_dir``.

    Args:
        sandbox: the trial's sandbox.
        entries: task-level then step-level artifact entries.
        dest_dir: the step's ``artifacts/`` folder (exists).
        cap_bytes: per-entry size cap in bytes.
        logs_artifacts_written: whether ``/logs/artifacts`` holds files, when the caller
            already knows (saves a probe); ``None`` probes.
        include_logs: also collect ``/logs/artifacts`` (the main container's; not a sidecar's).
        sized: source → ``(bytes or None when absent, kind d|f|l|-)`` when the caller already
            sized the entries (:mod:`cairn.trial.helper`; saves two execs per entry).

    Returns:
        The manifest rows: ``{source, destination, status: "copied"|"failed", bytes, error,
        excluded}``, plus ``skipped_too_long`` (member paths, at most 100) and
        ``skipped_too_long_count`` when some paths of a copied entry could not exist on the
        host (issue #29); ``/logs/artifacts`` contents land at the folder's root.

    Raises:
        SandboxLostError: the engine is gone (every other failure is recorded per entry).
    """
    all_entries = [*entries] + ([Artifact(source=LOGS_ARTIFACTS, destination=".")] if include_logs else [])
    rows: list[dict[str, Any]] = []
    for entry in all_entries:
        row = await _collect_entry(
            sandbox,
            entry,
            dest_dir,
            cap_bytes=cap_bytes,
            logs_artifacts_written=logs_artifacts_written,
            known=(sized or {}).get(entry.source),
        )
        if row is not None:
            rows.append(row)
    # the sandbox's /logs/artifacts is world-writable; its host copy must not be
    dest_dir.chmod(0o755)
    return [ArtifactEntry.model_validate(row) for row in rows]


async def _collect_entry(
    sandbox: Sandbox,
    entry: Artifact,
    dest_dir: Path,
    *,
    cap_bytes: int,
    logs_artifacts_written: bool | None,
    known: tuple[int | None, str] | None,
) -> dict[str, Any] | None:
    """One entry's manifest row (``None``: an empty or absent ``/logs/artifacts``, no row).

    Every failure but a lost engine is recorded in the row (best effort by spec).

    Raises:
        SandboxLostError: the engine is gone.
    """
    dest_rel = entry.effective_destination
    row: dict[str, Any] = {
        "source": entry.source,
        "destination": str(PurePosixPath(dest_rel)),
        "status": "failed",
        "bytes": None,
        "error": None,
        "excluded": [],
    }
    target = (dest_dir / dest_rel) if dest_rel not in ("", ".") else dest_dir
    try:
        if entry.source == LOGS_ARTIFACTS and not await _logs_artifacts_hold_files(
            sandbox, logs_artifacts_written
        ):
            return None
        size = known[0] if known is not None else await _size_bytes(sandbox, entry.source)
        if size is None:
            if entry.source == LOGS_ARTIFACTS:
                return None
            row["error"] = "not found in the sandbox"
            return row
        row["bytes"] = size
        if size > cap_bytes:
            row["error"] = f"{size} bytes is over the {cap_bytes}-byte cap"
            return row
        await _copy_entry(sandbox, entry, target, row, is_dir=await _is_dir(sandbox, entry.source, known))
    except SandboxLostError:
        raise
    except OSError as exc:  # a destination the host cannot hold (ENAMETOOLONG, ...)
        row["error"] = f"not collected: the host refused its path ({exc.strerror or exc})"
    except Exception as exc:  # noqa: BLE001 - best effort by spec: recorded, never fatal
        row["error"] = f"{type(exc).__name__}: {exc}"
    return row


async def _is_dir(sandbox: Sandbox, source: str, known: tuple[int | None, str] | None) -> bool:
    """Whether ``source`` is a folder in the sandbox (from ``known`` when the caller sized it)."""
    if known is not None:
        return known[1] == "d"
    r = await sandbox.exec(["test", "-d", source], user="root")
    return r.exit_code == 0


async def _copy_entry(
    sandbox: Sandbox, entry: Artifact, target: Path, row: dict[str, Any], *, is_dir: bool
) -> None:
    """Download one sized entry to ``target`` and fill ``row`` (status, skipped paths, excluded).

    Raises:
        SandboxLostError: the engine is gone.
        OSError: the host cannot hold the destination.
    """
    if is_dir:
        target.mkdir(parents=True, exist_ok=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
    if not is_dir and target.resolve(strict=False).parent != target.parent.resolve():
        row["error"] = "destination escapes the artifacts folder"
        return
    try:
        await sandbox.download(entry.source, target)
    except HostPathsSkippedError as exc:  # issue #29: the rest is copied; say what not
        row["skipped_too_long"] = exc.paths
        row["skipped_too_long_count"] = exc.count
    row["excluded"] = _remove_excluded(target, tuple(entry.exclude))
    row["status"] = "copied"


def _service_of(entry: Artifact | CollectHook) -> str:
    svc = (entry.service or MAIN_SERVICE).strip()
    return svc or MAIN_SERVICE


async def run_collect_hooks(
    sandbox: Sandbox, hooks: tuple[CollectHook, ...], *, timeout_multiplier: float = 1.0
) -> list[str]:
    """Run ``[[verifier.collect]]`` hooks in their services, in order; best effort.

    Args:
        sandbox: the trial's sandbox (services reached with :meth:`Sandbox.for_service`).
        hooks: the hooks to run.
        timeout_multiplier: ``--timeout-multiplier``.

    Returns:
        One warning per hook that failed, timed out or could not reach its service (as
        Harbor 0.26's ``_run_collect_hooks``: a hook never stops the trial).

    Raises:
        SandboxLostError: the engine is gone.
    """
    warnings: list[str] = []
    for hook in hooks:
        svc = _service_of(hook)
        try:
            target = await sandbox.for_service(svc)
            r = await target.exec(
                hook.command, user=hook.user, timeout_sec=hook.timeout_sec * timeout_multiplier
            )
        except SandboxLostError:
            raise
        except Exception as exc:  # noqa: BLE001 - best effort, recorded
            warnings.append(f"collect hook in service {svc} failed ({hook.command!r}): {exc}")
            continue
        if r.timed_out:
            warnings.append(
                f"collect hook in service {svc} timed out after "
                f"{hook.timeout_sec * timeout_multiplier:g} s ({hook.command!r})"
            )
        elif r.exit_code != 0:
            warnings.append(
                f"collect hook in service {svc} exited {r.exit_code} "
                f"({hook.command!r}): {r.stderr.strip()[-300:]}"
            )
    return warnings


async def collect_step_artifacts(
    sandbox: Sandbox,
    entries: tuple[Artifact, ...],
    hooks: tuple[CollectHook, ...],
    dest_dir: Path,
    *,
    timeout_multiplier: float = 1.0,
    logs_artifacts_written: bool | None = None,
    sized: dict[str, tuple[int | None, str]] | None = None,
) -> tuple[list[ArtifactEntry], list[str]]:
    """A step's collection pass, as Harbor 0.26 orders it: hooks on ``main``, ``main``'s
    artifacts (and ``/logs/artifacts``), then hooks on the other services, then their
    artifacts (each entry's ``service``).

    Args:
        sandbox: the trial's sandbox.
        entries: the step's artifact entries (task-level then step-level).
        hooks: the step's collect hooks (task-level then step-level).
        dest_dir: the step's ``artifacts/`` folder.
        timeout_multiplier: ``--timeout-multiplier``.
        logs_artifacts_written: as :func:`collect_artifacts`.
        sized: as :func:`collect_artifacts`, for ``main``'s entries (only when no hook runs).

    Returns:
        ``(manifest rows, warnings)``; rows of a service's entries carry ``service``.

    Raises:
        SandboxLostError: the engine is gone.
    """
    main_hooks = tuple(h for h in hooks if _service_of(h) == MAIN_SERVICE)
    warnings = await run_collect_hooks(sandbox, main_hooks, timeout_multiplier=timeout_multiplier)
    main_entries = tuple(e for e in entries if _service_of(e) == MAIN_SERVICE)
    rows = await collect_artifacts(
        sandbox,
        main_entries,
        dest_dir,
        logs_artifacts_written=logs_artifacts_written,
        sized=sized if not main_hooks else None,
    )
    side_hooks = tuple(h for h in hooks if _service_of(h) != MAIN_SERVICE)
    warnings += await run_collect_hooks(sandbox, side_hooks, timeout_multiplier=timeout_multiplier)
    services = sorted({_service_of(e) for e in entries} - {MAIN_SERVICE})
    for svc in services:
        svc_entries = tuple(e for e in entries if _service_of(e) == svc)
        try:
            target = await sandbox.for_service(svc)
        except SandboxLostError:
            raise
        except Exception as exc:  # noqa: BLE001 - recorded per entry
            rows += [
                ArtifactEntry(
                    source=e.source,
                    destination=e.effective_destination,
                    service=svc,
                    status="failed",
                    error=f"service {svc}: {exc}",
                )
                for e in svc_entries
            ]
            continue
        svc_rows = await collect_artifacts(target, svc_entries, dest_dir, include_logs=False)
        rows += [row.model_copy(update={"service": svc}) for row in svc_rows]
    return rows, warnings
