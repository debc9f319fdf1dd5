"""A jobs folder where a job folder is expected (issue 27): commands that only read a job
(``report``, ``export``) take the latest job in it and say so on a line; commands that act on
a job (``resume``, ``regrade``) name the jobs found and how to pick one; ``shell`` takes a job
folder holding one trial.

"Latest" is the job whose job.json records the latest ``started_at`` (its file's modification
time when unreadable), never a guess from folder names (``--job-name`` names sort anyhow).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from cairn.errors import UsageError


def is_job_dir(path: Path) -> bool:
    """Whether ``path`` holds a job (its job.json, or a ``trials/`` folder of a copied job)."""
    return (path / "job.json").is_file() or (path / "trials").is_dir()


def jobs_in(path: Path) -> list[Path]:
    """The job folders directly inside ``path``, latest first (see the module docstring).

    Args:
        path: a folder (a jobs folder, ``jobs/`` by default of ``cairn run``).

    Returns:
        Job folders, latest started first; ``[]`` when ``path`` holds none or is no folder.
    """
    if not path.is_dir():
        return []
    found: list[tuple[str, float, Path]] = []
    for child in path.iterdir():
        if not child.is_dir() or not is_job_dir(child):
            continue
        started, mtime = "", 0.0
        try:
            meta = json.loads((child / "job.json").read_text(encoding="utf-8"))
            started = str(meta.get("started_at") or "") if isinstance(meta, dict) else ""
            mtime = (child / "job.json").stat().st_mtime
        except (OSError, ValueError):
            try:
                mtime = child.stat().st_mtime
            except OSError:
                pass
        found.append((started, mtime, child))
    found.sort(key=lambda t: (t[0], t[1], t[2].name), reverse=True)
    return [p for _, _, p in found]


def _no_job(path: Path) -> str:
    if not path.exists():
        return f"{path} does not exist"
    return f"{path} is not a job folder (no job.json) and holds no job folders"


def _listing(jobs: list[Path], command: str) -> str:
    shown = ", ".join(str(j) for j in jobs[:5]) + (f", … ({len(jobs)} in all)" if len(jobs) > 5 else "")
    return f"it holds {len(jobs)} jobs, latest first: {shown}; give one: cairn {command} {jobs[0]}"


def read_job_dir(path: Path, command: str) -> Path:
    """The job folder a read-only command (``report``, ``export``) works on.

    A job folder is returned as given; a jobs folder gives its latest job, with a line on
    stderr saying which (``cairn report: jobs holds 3 jobs; reading the latest, jobs/nightly``).

    Args:
        path: what the user gave.
        command: the command's name, for the lines.

    Returns:
        A job folder.

    Raises:
        UsageError: ``path`` is neither a job folder nor a folder holding jobs.
    """
    if is_job_dir(path):
        return path
    jobs = jobs_in(path)
    if not jobs:
        raise UsageError(_no_job(path))
    if len(jobs) > 1:
        print(
            f"cairn {command}: {path} holds {len(jobs)} jobs; reading the latest, {jobs[0]} "
            f"(give a job folder to pick another)",
            file=sys.stderr,
            flush=True,
        )
    else:
        print(f"cairn {command}: reading {jobs[0]}, the one job in {path}", file=sys.stderr, flush=True)
    return jobs[0]


def act_job_dir(path: Path, command: str) -> Path:
    """The job folder a command that acts on a job (``resume``, ``regrade``) works on: a job
    folder, or a jobs folder holding exactly one job (said on stderr).

    Raises:
        UsageError: ``path`` holds several jobs (they are named, latest first, with the
            command for the latest), or none.
    """
    if is_job_dir(path):
        return path
    jobs = jobs_in(path)
    if not jobs:
        raise UsageError(_no_job(path))
    if len(jobs) > 1:
        raise UsageError(f"{path} is a jobs folder, not a job folder: {_listing(jobs, command)}")
    print(f"cairn {command}: {jobs[0]}, the one job in {path}", file=sys.stderr, flush=True)
    return jobs[0]


def trial_dir_of(path: Path, command: str) -> Path:
    """The trial folder ``cairn shell`` opens: a trial folder as given, or the one trial of a
    job folder (or of the one job of a jobs folder), said on stderr.

    Raises:
        UsageError: a job with several trials (they are named, with the command for one).
    """
    if (path / "result.json").is_file() or (path / "steps").is_dir() or not path.is_dir():
        return path
    job = path if is_job_dir(path) else (jobs_in(path)[0] if len(jobs_in(path)) == 1 else None)
    if job is None:
        jobs = jobs_in(path)
        if jobs:
            raise UsageError(f"{path} is a jobs folder, not a trial folder: {_listing(jobs, command)}")
        return path
    trials = sorted(p for p in (job / "trials").iterdir() if p.is_dir()) if (job / "trials").is_dir() else []
    if len(trials) == 1:
        print(f"cairn {command}: {trials[0]}, the one trial of {job}", file=sys.stderr, flush=True)
        return trials[0]
    if not trials:
        raise UsageError(f"{job} has no trials")
    names = ", ".join(t.name for t in trials[:5]) + (", …" if len(trials) > 5 else "")
    raise UsageError(
        f"{job} is a job folder of {len(trials)} trials ({names}); give one: cairn {command} {trials[0]}"
    )


__all__ = ["act_job_dir", "is_job_dir", "jobs_in", "read_job_dir", "trial_dir_of"]
