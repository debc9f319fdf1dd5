"""Remove left-over sandbox resources (design §3 "Ownership and cleanup", §8).

A cairn container or network carries ``cairn.job``, ``cairn.trial``, ``cairn.owner`` (the
creating process: host, pid, start time) and, inside a job, ``cairn.job_dir``. It is *left over*
when nothing that owns it is running:

- its job's lock is free (the job folder is gone, or no process holds ``<job_dir>/lock``), and
- its creating process is gone (so a sandbox made outside a job, or by a process that has not
  taken a lock, is never pulled from under a live process).

A resource whose owner cannot be judged (another host, no label) is kept. Resources without
cairn labels are never listed, so never touched. ``images=True`` also removes cairn's images
(``cairn-env:*``, label ``cairn.env_hash``) that no container uses and no build is writing.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cairn.lock import is_locked, owner_alive, owner_token
from cairn.sandbox.base import SNAPSHOT_LABEL

log = logging.getLogger(__name__)

LABEL_JOB = "cairn.job"
LABEL_JOB_DIR = "cairn.job_dir"
LABEL_OWNER = "cairn.owner"
LABEL_ENV_HASH = "cairn.env_hash"
IMAGE_REPO = "cairn-env"


@dataclass
class CleanReport:
    """What :func:`clean` did.

    Attributes:
        containers: names of the containers removed.
        networks: names of the networks removed.
        volumes: names of the volumes removed (compose projects).
        images: tags (or ids) of the images removed.
        folders: local-backend sandbox folders removed.
        snapshots: step snapshots removed (Docker image ids, local snapshot folders).
        kept: cairn resources left alone because their job or owner still runs (or cannot
            be judged), as ``kind name (reason)``.
        errors: removals that failed.
        engine_reachable: False when no Docker engine answered (nothing was cleaned there).
    """

    containers: list[str] = field(default_factory=list)
    networks: list[str] = field(default_factory=list)
    volumes: list[str] = field(default_factory=list)
    images: list[str] = field(default_factory=list)
    folders: list[str] = field(default_factory=list)
    snapshots: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    engine_reachable: bool = True

    @property
    def removed(self) -> int:
        """Number of resources removed."""
        return (
            len(self.containers)
            + len(self.networks)
            + len(self.volumes)
            + len(self.images)
            + len(self.folders)
            + len(self.snapshots)
        )


def leftover_reason(labels: Mapping[str, str], *, own_job_dir: Path | None = None) -> str | None:
    """Why a labelled resource must be kept, or None when it is left over.

    Args:
        labels: the resource's labels.
        own_job_dir: a job folder whose lock the caller itself holds (``cairn run`` /
            ``cairn resume`` cleaning their job before starting); its lock counts as free.

    Returns:
        ``None`` for a left-over, else a short reason (``job running``, ``owner running``,
        ``owner unknown``).
    """
    job_dir = labels.get(LABEL_JOB_DIR)
    if job_dir:
        own = own_job_dir is not None and Path(job_dir) == Path(own_job_dir).absolute()
        if not own and is_locked(Path(job_dir)):
            return "job running"
    owner = labels.get(LABEL_OWNER)
    alive = owner_alive(owner) if owner else None
    if alive:
        return "owner running"
    if alive is None and not job_dir:
        return "owner unknown"
    return None


def _matches_job(labels: Mapping[str, str], job: str | None) -> bool:
    if job is None:
        return True
    job_dir = labels.get(LABEL_JOB_DIR) or ""
    return labels.get(LABEL_JOB) == job or (bool(job_dir) and Path(job_dir).name == job)


def clean(
    *,
    job: str | None = None,
    images: bool = False,
    own_job_dir: Path | None = None,
    client: Any = None,
    snapshots: bool = False,
) -> CleanReport:
    """Remove left-over cairn containers and networks (and, with ``images``, cairn images),
    left-over local-backend sandbox folders, and step snapshots whose job folder is gone.

    Args:
        job: only resources of this job (its ``cairn.job`` id or its folder's name).
        images: also remove cairn's images that nothing uses.
        snapshots: also remove the step snapshots of jobs that still exist (not running);
            without it only snapshots whose job folder is gone are removed.
        own_job_dir: the job folder the caller holds the lock of (see :func:`leftover_reason`).
        client: a Docker SDK client to use (default: one from the environment).

    Returns:
        A :class:`CleanReport`.
    """
    report = CleanReport()
    _clean_local(job, own_job_dir, report)
    _clean_local_snapshots(job, snapshots, report)
    if client is None:
        try:
            import docker

            client = docker.from_env(timeout=60)
        except Exception as exc:  # noqa: BLE001 - no SDK or no engine: nothing of docker's to clean
            log.info("docker engine not reachable: %s", exc)
            report.engine_reachable = False
            return report
        owned = True
    else:
        owned = False
    try:
        _clean_labelled(client, job, own_job_dir, report)
        _clean_snapshot_images(client, job, snapshots, report)
        if images:
            _clean_images(client, report)
    except Exception as exc:  # noqa: BLE001 - cleaning is best effort; every failure is reported
        import docker.errors

        if isinstance(exc, docker.errors.APIError):
            report.errors.append(str(exc))
        else:
            report.engine_reachable = False
            report.errors.append(f"docker engine: {exc}")
    finally:
        if owned:
            with contextlib.suppress(Exception):
                client.close()
    return report


_Item = tuple[Any, str, Any]
"""One removable resource: ``(what to pass to the remover, its name in reports, what the
verdict looks at: labels or a marker)``."""


def _docker_kinds(
    client: Any,
    filters: dict[str, str],
) -> dict[str, tuple[Callable[[], list[_Item]], Callable[[str], Any]]]:
    """The labelled Docker resources a sweep removes, containers first (they hold the
    networks and volumes): ``kind -> (list them under filters, remove one by id)``."""
    api = client.api
    return {
        "container": (
            lambda: [
                (c["Id"], (c.get("Names") or [c["Id"][:12]])[0].lstrip("/"), c.get("Labels") or {})
                for c in api.containers(all=True, filters=filters)
            ],
            lambda ident: api.remove_container(ident, force=True, v=True),
        ),
        "network": (
            lambda: [
                (n["Id"], n.get("Name") or n["Id"][:12], n.get("Labels") or {})
                for n in api.networks(filters=filters)
            ],
            api.remove_network,
        ),
        "volume": (
            lambda: [
                (v["Name"], v["Name"], v.get("Labels") or {})
                for v in (api.volumes(filters=filters) or {}).get("Volumes") or []
            ],
            api.remove_volume,
        ),
    }


def _remove_each(
    kind: str,
    items: list[_Item],
    remove: Callable[[Any], Any],
    verdict: Callable[[Any], str | None],
    removed: list[str],
    report: CleanReport,
    *,
    gone: tuple[type[BaseException], ...] = (),
    failed: tuple[type[BaseException], ...] = (Exception,),
) -> None:
    """The one removal loop of the sweeps: remove each item ``verdict`` lets go.

    Args:
        kind: the word reports use (``container``, ``folder`` …).
        items: the candidates.
        remove: removes one (given the item's first element).
        verdict: given the item's third element: ``None`` to remove it, ``""`` to pass over
            it silently (not this sweep's), else the reason it is kept (``report.kept``).
        removed: where the names of the removed items go.
        report: gets ``kept`` and ``errors`` lines (``kind name: why``).
        gone: exceptions meaning the item is already gone (neither removed nor an error).
        failed: exceptions reported as errors (anything else propagates).
    """
    for ident, name, facts in items:
        reason = verdict(facts)
        if reason is not None:
            if reason:
                report.kept.append(f"{kind} {name} ({reason})")
            continue
        try:
            remove(ident)
            removed.append(name)
        except gone:
            pass
        except failed as exc:
            report.errors.append(f"{kind} {name}: {getattr(exc, 'explanation', None) or exc}")


def _remove_local_sandboxes(
    verdict: Callable[[dict], str | None],
    report: CleanReport,
) -> None:
    """Remove the local-backend sandbox folders ``verdict`` (given a folder's marker, see
    :func:`_remove_each`) lets go; nothing when the local backend is not installed."""
    try:
        from cairn.sandbox.local.backend import find_local_sandboxes, remove_local_sandbox
    except ImportError:
        return
    items = [(folder, str(folder), marker) for folder, marker in find_local_sandboxes()]
    _remove_each(
        "folder", items, remove_local_sandbox, verdict, report.folders, report, failed=(OSError, ValueError)
    )


def _clean_labelled(client: Any, job: str | None, own_job_dir: Path | None, report: CleanReport) -> None:
    """Remove left-over labelled containers (with their anonymous volumes), networks
    (per-trial and compose networks) and volumes (compose projects' named volumes)."""
    import docker.errors

    def verdict(labels: Mapping[str, str]) -> str | None:
        if not _matches_job(labels, job):
            return ""
        return leftover_reason(labels, own_job_dir=own_job_dir) or None

    for kind, (listing, remove) in _docker_kinds(client, {"label": LABEL_JOB}).items():
        _remove_each(
            kind,
            listing(),
            remove,
            verdict,
            getattr(report, f"{kind}s"),
            report,
            gone=(docker.errors.NotFound,),
            failed=(docker.errors.APIError,),
        )


def snapshot_leftover(labels: Mapping[str, str], *, job: str | None, all_of_them: bool) -> str | None:
    """Whether a step snapshot is to be removed: ``None`` to remove it, else why it is kept.

    A snapshot whose job folder is gone is always removed; with ``all_of_them``
    (``cairn clean --snapshots``) every snapshot of a job that is not running is.
    """
    if not _matches_job(labels, job):
        return "other job"
    job_dir = labels.get(LABEL_JOB_DIR) or ""
    if job_dir and not Path(job_dir).exists():
        return None
    if not all_of_them:
        return "its job exists (cairn clean --snapshots removes it)"
    if job_dir and is_locked(Path(job_dir)):
        return "job running"
    return None


def _clean_snapshot_images(client: Any, job: str | None, all_of_them: bool, report: CleanReport) -> None:
    """Step snapshot images (label ``cairn.snapshot``) whose job is gone, or all with
    ``--snapshots``."""
    import docker.errors

    for img in client.api.images(filters={"label": f"{SNAPSHOT_LABEL}=1"}):
        labels = img.get("Labels") or {}
        ident = img["Id"]
        reason = _snapshot_verdict(labels, job, all_of_them)
        if reason is not None:
            if reason:
                report.kept.append(f"snapshot {ident[:19]} ({reason})")
            continue
        try:
            for t in img.get("RepoTags") or []:
                if t != "<none>:<none>":
                    client.api.remove_image(t)
            with contextlib.suppress(docker.errors.NotFound):
                client.api.remove_image(ident)
            report.snapshots.append(ident)
        except docker.errors.NotFound:
            report.snapshots.append(ident)
        except docker.errors.APIError as exc:
            if exc.status_code == 409:
                report.kept.append(f"snapshot {ident[:19]} (in use by a container)")
            else:
                report.errors.append(f"snapshot {ident[:19]}: {exc.explanation or exc}")


def _snapshot_verdict(
    labels: Mapping[str, str],
    job: str | None,
    all_of_them: bool,
) -> str | None:
    """:func:`snapshot_leftover` as a :func:`_remove_each` verdict: a kept snapshot is
    reported only with ``--snapshots`` and only when it is of the job asked for."""
    reason = snapshot_leftover(labels, job=job, all_of_them=all_of_them)
    if reason is None:
        return None
    return reason if all_of_them and reason != "other job" else ""


def _clean_local_snapshots(job: str | None, all_of_them: bool, report: CleanReport) -> None:
    """Local step snapshot folders whose job is gone, or all with ``--snapshots``."""
    try:
        from cairn.sandbox.local.snapshot import find_local_snapshots, remove_local_snapshot
    except ImportError:
        return

    def verdict(marker: dict) -> str | None:
        if "unreadable" in marker:
            return "marker unreadable"
        labels = {k: str(v) for k, v in (marker.get("labels") or {}).items()}
        return _snapshot_verdict(labels, job, all_of_them)

    items = [(folder, str(folder), marker) for folder, marker in find_local_snapshots()]
    _remove_each(
        "snapshot",
        items,
        remove_local_snapshot,
        verdict,
        report.snapshots,
        report,
        failed=(OSError, ValueError),
    )


def _clean_images(client: Any, report: CleanReport) -> None:
    import docker.errors

    from cairn.sandbox.docker.build import build_in_progress

    in_use = {c.get("ImageID") for c in client.api.containers(all=True)}
    for img in client.api.images(filters={"label": LABEL_ENV_HASH}):
        tags = [t for t in (img.get("RepoTags") or []) if t != "<none>:<none>"]
        label = (img.get("Labels") or {}).get(LABEL_ENV_HASH, "")
        ident = tags[0] if tags else img["Id"][:19]
        if (img.get("Labels") or {}).get(SNAPSHOT_LABEL) == "1":
            continue  # step snapshots are removed by their own rule
        if any(not t.startswith(IMAGE_REPO + ":") for t in tags):
            continue  # someone's own image built on top of ours: not cairn's to remove
        if img["Id"] in in_use:
            report.kept.append(f"image {ident} (used by a container)")
            continue
        if label and build_in_progress(label):
            report.kept.append(f"image {ident} (a build is running)")
            continue
        try:
            for t in tags[1:]:
                client.api.remove_image(t)
            client.api.remove_image(tags[0] if tags else img["Id"])
            report.images.append(ident)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if exc.status_code == 409:
                report.kept.append(f"image {ident} (in use)")
            else:
                report.errors.append(f"image {ident}: {exc.explanation or exc}")


def _clean_local(job: str | None, own_job_dir: Path | None, report: CleanReport) -> None:
    """Left-over local-backend sandbox folders (their marker file carries the owner)."""

    def verdict(marker: dict) -> str | None:
        if "unreadable" in marker:
            return "marker unreadable"
        labels = {LABEL_JOB: str(marker.get("job_id") or ""), LABEL_JOB_DIR: str(marker.get("job_dir") or "")}
        if marker.get("owner"):
            labels[LABEL_OWNER] = str(marker["owner"])
        elif str(marker.get("owner_pid") or "").isdigit():
            # pid only (no start time): a live pid counts as the owner (errs on keeping)
            labels[LABEL_OWNER] = owner_token(int(marker["owner_pid"]))
        if not _matches_job(labels, job):
            return ""
        return leftover_reason(labels, own_job_dir=own_job_dir) or None

    _remove_local_sandboxes(verdict, report)


def remove_trial_sandboxes(trial_id: str) -> CleanReport:
    """Remove every sandbox of one trial on this host, whatever its owner: its runner was
    interrupted (a Ray worker whose task was cancelled) and gives up on it. The local backend's
    folders by their marker's ``trial_id``, Docker containers by the ``cairn.trial`` label.

    Args:
        trial_id: the trial's id (64 hex characters).

    Returns:
        A :class:`CleanReport` of what was removed (errors listed, never raised).
    """
    report = CleanReport()
    _remove_local_sandboxes(lambda m: None if m.get("trial_id") == trial_id else "", report)
    try:
        import docker

        client = docker.from_env(timeout=60)
    except Exception:  # noqa: BLE001 - no SDK or no engine: nothing of docker's to remove
        report.engine_reachable = False
        return report
    try:
        listing, remove = _docker_kinds(client, {"label": f"cairn.trial={trial_id}"})["container"]
        _remove_each(
            "container", listing(), remove, lambda labels: None, report.containers, report
        )  # any failure is reported, the next one is still tried
    except Exception as exc:  # noqa: BLE001 - best effort; reported
        report.errors.append(f"docker engine: {exc}")
    finally:
        with contextlib.suppress(Exception):
            client.close()
    return report


SETTLE_WAIT_SEC = 60.0
"""How long :func:`settle_job` waits for the engine to finish removing a job's sandboxes."""


def settle_job(
    job_dir: Path, backend: str, *, wait_sec: float = SETTLE_WAIT_SEC, client: Any = None
) -> list[str]:
    """Make sure no sandbox of a job is left once its trials have all ended.

    Called by the job (which holds the job's lock) after its last trial ended — also when a
    consumer stopped early or Ctrl-C/SIGTERM cancelled it — so that it does not return while
    a container is still running or "Removal In Progress". Every container, network and
    volume labelled with this job folder (docker), and every local sandbox folder whose marker
    names it (local), is removed; removals are re-issued with backoff until the engine no
    longer lists them or ``wait_sec`` has passed.

    Args:
        job_dir: the job folder (absolute, as in the ``cairn.job_dir`` label).
        backend: the job's backend (``docker`` or ``local``; others: nothing to do).
        wait_sec: the bound on the whole wait, seconds.
        client: a Docker SDK client to use (default: one from the environment).

    Returns:
        ``kind name: reason`` of each resource that could not be removed in time (empty
        when everything is gone).
    """
    job_dir = Path(job_dir).absolute()
    if backend == "local":
        return _settle_local(job_dir)
    if backend != "docker":
        return []
    import docker.errors

    from cairn.sandbox.caches import SandboxCaches
    from cairn.sandbox.docker.client import make_client  # the early ping's API version, if fresh

    owned = client is None
    try:
        client = client or make_client(SandboxCaches(), timeout=30)
    except Exception as exc:  # noqa: BLE001 - no engine: nothing can be checked
        return [f"docker engine: {exc}"]
    listers = _docker_kinds(client, {"label": f"{LABEL_JOB_DIR}={job_dir}"})
    deadline = time.monotonic() + wait_sec
    delay = 0.1
    errors: dict[str, str] = {}
    try:
        while True:
            left: list[str] = []
            for kind, (listing, remove) in listers.items():  # containers first: they hold
                try:  # the networks and volumes
                    items = listing()
                except Exception as exc:  # noqa: BLE001 - an engine not answering: retried
                    errors[f"{kind}s"] = str(exc)
                    left.append(f"{kind}s")
                    continue
                for ident, name, _labels in items:
                    left.append(f"{kind} {name}")
                    try:
                        remove(ident)
                    except docker.errors.NotFound:
                        pass
                    except Exception as exc:  # noqa: BLE001 - retried, reported at the end
                        errors[f"{kind} {name}"] = str(getattr(exc, "explanation", None) or exc)
            if not left:
                return []
            if time.monotonic() >= deadline:
                return [f"{what}: {errors.get(what, 'still present')}" for what in left]
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
    finally:
        if owned:
            with contextlib.suppress(Exception):
                client.close()


def _settle_local(job_dir: Path) -> list[str]:
    report = CleanReport()
    _remove_local_sandboxes(lambda m: None if str(m.get("job_dir") or "") == str(job_dir) else "", report)
    return report.errors
