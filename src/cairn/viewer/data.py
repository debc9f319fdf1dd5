"""What the viewer shows, read from job folders (design §7) through :mod:`cairn.results.store`.

Nothing here writes. A :class:`Library` is a jobs folder (or one job folder); each job has a
:class:`JobIndex` — one light :class:`TrialRow` per trial folder, cached by the ``result.json``
file's (mtime, size), so a page of a 10,000-trial job costs one ``stat`` per trial, not one parse.
The job summary is the ``summary.json`` the store rewrites after every trial when it is current
(it counts every finished trial), else it is recomputed from the results with
:func:`cairn.results.summary.summarize_job` (what ``cairn report`` does) and cached.

Every path a request names is checked by :func:`safe_path`: relative, no ``..``, no symlink
component, inside the job folder.
"""

from __future__ import annotations

import hashlib
import math
import os
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from cairn.layout import REWARD_FILES
from cairn.results.model import (
    ArtifactEntry,
    JobSummary,
    Outcome,
    StepResult,
    TrialResult,
)
from cairn.results.model_calls import MODEL_CALLS_FILE, CallLog, CallSums, ModelCall, read_calls
from cairn.results.store import (
    ATTEMPTS,
    JOB_JSON,
    RESULT_JSON,
    STEPS_JSON,
    TRIALS,
    JobPaths,
    TrialPaths,
    read_artifacts_manifest,
    read_config,
    read_job_json,
    read_result,
    read_status,
    read_steps,
    read_summary,
    read_trajectory,
)

TEXT_PREVIEW_BYTES = 256 * 1024
"""How much of a text file a page shows inline (the rest is a download)."""

REFRESH_SEC = 1.0
"""The server rescans a job folder at most once per this many seconds (pages poll each second)."""

FULL_RESCAN_SEC = 10.0
"""Finished trials are re-checked (one ``stat`` of result.json each) at most this often; new
and running trial folders at every refresh."""

CALL_ROWS_SHOWN = 500
"""A step's calls pane lists at most this many calls (the rest: the raw file)."""

BODY_PREVIEW_CHARS = 64 * 1024
"""How much of one recorded request or response body the calls pane shows."""

CALLS_BODIES_MAX_BYTES = 32 * 1024 * 1024
"""A ``model_calls.jsonl`` larger than this is read without its bodies (the raw file has them)."""

RUNNING = "running"
"""The pseudo-outcome of a trial folder without result.json."""


def is_job_dir(path: Path) -> bool:
    """Whether ``path`` looks like a job folder (has ``job.json`` or ``trials/``)."""
    return (path / JOB_JSON).is_file() or (path / TRIALS).is_dir()


# ------------------------------------------------------------------------------------------
# Safe paths


def safe_path(root: Path, rel: str) -> Path | None:
    """Resolve ``rel`` inside ``root``, refusing anything that could leave it.

    Args:
        root: the folder being served (a job folder).
        rel: a relative POSIX path from a URL.

    Returns:
        The file's path, or ``None`` when ``rel`` is absolute, has a ``..``, ``.`` or empty
        part, a NUL or backslash, when any component is a symlink, when the resolved path is
        outside ``root``, or when it is not a regular file.
    """
    if not rel or "\x00" in rel or "\\" in rel or rel.startswith("/"):
        return None
    parts = PurePosixPath(rel).parts
    if any(p in ("", ".", "..") for p in rel.split("/")) or not parts:
        return None
    base = root.resolve()
    cur = base
    for part in parts:
        cur = cur / part
        if cur.is_symlink():
            return None
    try:
        resolved = cur.resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    if base not in resolved.parents or not resolved.is_file():
        return None
    return resolved


def read_text_preview(path: Path, limit: int = TEXT_PREVIEW_BYTES) -> tuple[str | None, bool]:
    """A file's text for inline display.

    Args:
        path: the file (already checked with :func:`safe_path`).
        limit: bytes to read at most.

    Returns:
        ``(text, truncated)``; ``text`` is ``None`` when the file looks binary (a NUL byte in
        its first 8 KiB or not valid UTF-8 beyond a cut character) or cannot be read.
    """
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError:
        return None, False
    truncated = len(data) > limit
    data = data[:limit]
    if b"\x00" in data[:8192]:
        return None, truncated
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(data) - 4:
            return None, truncated
        text = data[: exc.start].decode("utf-8")
    return text, truncated


def is_text_file(path: Path) -> bool:
    """Whether :func:`read_text_preview` would show the file as text."""
    return read_text_preview(path, 8192)[0] is not None


# ------------------------------------------------------------------------------------------
# One light row per trial


@dataclass(frozen=True)
class TrialRow:
    """What the trials table shows of one trial folder.

    Attributes:
        name: the trial folder name (``<slug>__<attempt>__<id8>``), the URL key.
        task: the task name.
        attempt: the 1-based attempt number (pass@k).
        outcome: ``completed``/``stopped``/``errored``/``cancelled``, or ``running``.
        reward: the primary reward (``None`` without one).
        passed: whether the trial passed.
        error_kind: the trial error's kind, if any.
        error_category: its category.
        ended_at: the step it stopped or errored at (``None`` otherwise).
        steps_run: steps whose procedure began.
        steps_total: declared steps.
        total_sec: wall time in seconds.
        tokens: prompt + completion tokens.
        cost_usd: the cost, if reported.
        started_at: ISO start time.
        phase: for a running trial, its phase from status.json.
        step: for a running trial, its current step (``"2/3 fix"``).
        load_error: why result.json could not be read (the row is then ``errored``).
        earlier_attempts: how many infra-failed attempts were moved aside.
    """

    name: str
    task: str
    attempt: int = 1
    outcome: str = RUNNING
    reward: float | None = None
    passed: bool = False
    error_kind: str | None = None
    error_category: str | None = None
    ended_at: str | None = None
    steps_run: int = 0
    steps_total: int = 0
    total_sec: float | None = None
    tokens: int = 0
    cost_usd: float | None = None
    started_at: str | None = None
    phase: str | None = None
    step: str | None = None
    load_error: str | None = None
    earlier_attempts: int = 0


def _task_of_dir(name: str) -> tuple[str, int]:
    slug, _, rest = name.partition("__")
    attempt = rest.partition("__")[0]
    return slug, int(attempt) if attempt.isdigit() else 1


def _row_from_result(name: str, d: dict[str, Any], earlier: int) -> TrialRow:
    err = d.get("error") or {}
    outcome = d.get("outcome", "errored")
    ended = (
        d.get("stopped_after")
        if outcome == Outcome.STOPPED
        else (err.get("step") if outcome in (Outcome.ERRORED, Outcome.CANCELLED) else None)
    )
    tok = d.get("tokens") or {}
    return TrialRow(
        name=name,
        task=(d.get("task") or {}).get("name", name),
        attempt=int(d.get("attempt", 1)),
        outcome=outcome,
        reward=d.get("reward"),
        passed=bool(d.get("passed")),
        error_kind=err.get("kind"),
        error_category=err.get("category"),
        ended_at=ended,
        steps_run=int(d.get("steps_run", 0)),
        steps_total=int(d.get("steps_total", 0)),
        total_sec=(d.get("timings") or {}).get("total_sec"),
        tokens=int(tok.get("prompt", 0)) + int(tok.get("completion", 0)),
        cost_usd=d.get("cost_usd"),
        started_at=d.get("started_at"),
        earlier_attempts=earlier,
    )


def _running_row(trial: TrialPaths, earlier: int) -> TrialRow:
    task, attempt = _task_of_dir(trial.root.name)
    total = 0
    try:
        cfg = read_config(trial.config_json)
        task, attempt = cfg.task.name, cfg.attempt
    except (OSError, ValueError):
        pass
    steps_run = 0
    try:
        rows = read_steps(trial.steps_json).steps
        total = len(rows)
        steps_run = sum(r.source.value != "not-run" for r in rows)
    except (OSError, ValueError):
        pass
    status = read_status(trial)
    step = None
    if status is not None and status.step:
        step = f"{status.step_index}/{total or '?'} {status.step}"
    return TrialRow(
        name=trial.root.name,
        task=task,
        attempt=attempt,
        outcome=RUNNING,
        steps_run=steps_run,
        steps_total=total,
        phase=status.phase if status is not None else None,
        step=step,
        earlier_attempts=earlier,
    )


def _count_attempts(trial_root: Path) -> int:
    try:
        return sum(1 for e in os.scandir(trial_root / ATTEMPTS) if e.name.isdigit())
    except OSError:
        return 0


# ------------------------------------------------------------------------------------------
# A job


SORT_KEYS = (
    "name",
    "task",
    "attempt",
    "outcome",
    "reward",
    "ended_at",
    "steps_run",
    "total_sec",
    "tokens",
    "cost_usd",
    "error_kind",
)


@dataclass
class TrialQuery:
    """A filter, sort and page over a job's trials (all from URL query parameters).

    Attributes:
        task: keep this task only.
        outcome: keep this outcome (``running``, ``passed`` and ``failed`` too).
        error: keep this error kind.
        step: keep trials that stopped or errored at this step.
        sort: a :data:`SORT_KEYS` column.
        desc: descending order.
        page: 1-based page.
        per_page: rows per page (1–500).
    """

    task: str = ""
    outcome: str = ""
    error: str = ""
    step: str = ""
    sort: str = "name"
    desc: bool = False
    page: int = 1
    per_page: int = 50

    @classmethod
    def from_params(cls, params: Any) -> TrialQuery:
        """Build from a mapping of query parameters; bad values fall back to defaults."""

        def num(key: str, default: int, lo: int, hi: int) -> int:
            try:
                return min(hi, max(lo, int(params.get(key, default))))
            except (TypeError, ValueError):
                return default

        sort = params.get("sort", "name")
        return cls(
            task=params.get("task", ""),
            outcome=params.get("outcome", ""),
            error=params.get("error", ""),
            step=params.get("step", ""),
            sort=sort if sort in SORT_KEYS else "name",
            desc=params.get("desc", "") in ("1", "true"),
            page=num("page", 1, 1, 10**9),
            per_page=num("per_page", 50, 1, 500),
        )

    def params(self, **changes: Any) -> dict[str, str]:
        """The non-default parameters, with ``changes`` applied (for links)."""
        values = {
            "task": self.task,
            "outcome": self.outcome,
            "error": self.error,
            "step": self.step,
            "sort": self.sort,
            "desc": "1" if self.desc else "",
            "page": str(self.page),
            "per_page": str(self.per_page),
        }
        values.update({k: ("" if v is None else str(v)) for k, v in changes.items()})
        defaults = {"sort": "name", "page": "1", "per_page": "50"}
        return {k: v for k, v in values.items() if v and defaults.get(k) != v}

    def matches(self, r: TrialRow) -> bool:
        """Whether a row passes the filter."""
        if self.task and r.task != self.task:
            return False
        if self.outcome == "passed" and not r.passed:
            return False
        if self.outcome == "failed" and (r.passed or r.outcome != Outcome.COMPLETED):
            return False
        if self.outcome and self.outcome not in ("passed", "failed") and r.outcome != self.outcome:
            return False
        if self.error and r.error_kind != self.error:
            return False
        return not (self.step and r.ended_at != self.step)


def _sorted(rows: list[TrialRow], key: str, desc: bool) -> list[TrialRow]:
    """Rows sorted by ``key`` (ties by name); rows without a value last in either order."""
    have = [r for r in rows if getattr(r, key) is not None]
    rest = sorted((r for r in rows if getattr(r, key) is None), key=lambda r: r.name)
    have.sort(key=lambda r: (getattr(r, key), r.name), reverse=desc)
    return have + rest


@dataclass
class TrialPage:
    """One page of the trials table.

    Attributes:
        rows: the rows on this page.
        total: rows matching the filter.
        pages: the number of pages.
        query: the query (page clamped to the last page).
    """

    rows: list[TrialRow]
    total: int
    pages: int
    query: TrialQuery


class JobIndex:
    """The light rows of one job, refreshed from disk on demand (thread-safe).

    Args:
        root: the job folder.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.paths = JobPaths(root)
        self._lock = threading.Lock()
        self._rows: dict[str, tuple[tuple[int, int], TrialRow]] = {}
        self._summary: tuple[str, JobSummary] | None = None
        self._facets: tuple[str, dict[str, Any]] | None = None
        self._ordered: tuple[tuple, list[TrialRow]] | None = None
        """The last query's filtered and sorted rows, keyed by (version, filter, order):
        paging, polling and reloads of one view sort 10,000 rows once."""
        self._refreshed = 0.0
        self._full_at = 0.0
        self.version = ""

    @property
    def name(self) -> str:
        """The job's name (its folder name)."""
        return self.root.name

    def refresh(self, max_age: float = 0.0) -> list[TrialRow]:
        """List the trial folders; stat new and running ones (every one at most each
        :data:`FULL_RESCAN_SEC`), re-read the result.json files that changed.

        Args:
            max_age: seconds; when the last refresh is younger, its rows are returned as they
                are (the server passes :data:`REFRESH_SEC`, so any number of pages and polls
                cost at most one scan per interval).

        Returns:
            Every row, sorted by trial name; running trials re-read their status each time.
        """
        with self._lock:
            if max_age > 0 and self.version and time.monotonic() - self._refreshed < max_age:
                return [v[1] for v in self._rows.values()]
            seen: dict[str, tuple[tuple[int, int], TrialRow]] = {}
            digest = hashlib.blake2b(digest_size=12)
            try:
                entries = sorted(
                    (e for e in os.scandir(self.paths.trials_dir) if e.is_dir()), key=lambda e: e.name
                )
            except OSError:
                entries = []
            full = not self.version or time.monotonic() - self._full_at >= FULL_RESCAN_SEC
            for e in entries:
                cached = self._rows.get(e.name)
                if not full and cached is not None and cached[0] != (0, 0):
                    # finished and seen: a result changes only when the trial is re-run in
                    # place, which the next full rescan notices
                    seen[e.name] = cached
                    digest.update(f"{e.name}|{cached[0]}\n".encode())
                    continue
                res = os.path.join(e.path, RESULT_JSON)
                try:
                    st = os.stat(res)
                    key = (st.st_mtime_ns, st.st_size)
                except OSError:
                    key = None
                if key is None:
                    trial = TrialPaths(Path(e.path))
                    row = _running_row(trial, _count_attempts(trial.root))
                    seen[e.name] = ((0, 0), row)
                    digest.update(f"{e.name}|r|{row.phase}|{row.step}|{row.steps_run}\n".encode())
                    continue
                if cached is not None and cached[0] == key:
                    seen[e.name] = cached
                else:
                    earlier = _count_attempts(Path(e.path))
                    try:
                        data = read_result(Path(res)).model_dump(mode="json")
                        row = _row_from_result(e.name, data, earlier)
                    except (OSError, ValueError, TypeError) as exc:
                        task, attempt = _task_of_dir(e.name)
                        row = TrialRow(
                            name=e.name,
                            task=task,
                            attempt=attempt,
                            outcome=Outcome.ERRORED.value,
                            load_error=f"{type(exc).__name__}: {exc}",
                        )
                    seen[e.name] = (key, row)
                digest.update(f"{e.name}|{key}\n".encode())
            self._rows = seen
            self.version = digest.hexdigest()
            self._refreshed = time.monotonic()
            if full:
                self._full_at = self._refreshed
            return [v[1] for v in seen.values()]

    def rows(self) -> list[TrialRow]:
        """The rows as last refreshed (refreshing first when never done)."""
        if not self.version:
            return self.refresh()
        with self._lock:
            return [v[1] for v in self._rows.values()]

    def query(self, q: TrialQuery) -> TrialPage:
        """Filter, sort and page the rows (server-side).

        Args:
            q: the query.

        Returns:
            The :class:`TrialPage`.
        """
        # the version is taken before the rows: a refresh in between files newer rows under
        # the older version, never older rows under the newer one
        key = (self.version, q.task, q.outcome, q.error, q.step, q.sort, q.desc)
        all_rows = self.rows()
        with self._lock:
            cached = self._ordered if self._ordered is not None and self._ordered[0] == key else None
        if cached is not None:
            rows = cached[1]
        else:
            rows = _sorted([r for r in all_rows if q.matches(r)], q.sort, q.desc)
            with self._lock:
                self._ordered = (key, rows)
        pages = max(1, math.ceil(len(rows) / q.per_page))
        page = min(q.page, pages)
        q = TrialQuery(**{**q.__dict__, "page": page})
        start = (page - 1) * q.per_page
        return TrialPage(rows=rows[start : start + q.per_page], total=len(rows), pages=pages, query=q)

    def facets(self) -> dict[str, Any]:
        """What the job page derives from every row, cached until the rows change.

        Returns:
            ``{tasks, errors, steps}`` (sorted filter choices: task names, error kinds, steps
            trials stopped or errored at), ``n_running``, ``n_rows`` and ``histogram``
            (:func:`reward_histogram`).
        """
        rows = self.rows()
        with self._lock:
            if self._facets is not None and self._facets[0] == self.version:
                return self._facets[1]
        facets = {
            "tasks": sorted({r.task for r in rows}),
            "errors": sorted({r.error_kind for r in rows if r.error_kind}),
            "steps": sorted({r.ended_at for r in rows if r.ended_at}),
            "n_running": sum(r.outcome == RUNNING for r in rows),
            "n_rows": len(rows),
            "histogram": reward_histogram(rows),
        }
        with self._lock:
            self._facets = (self.version, facets)
        return facets

    def summary(self) -> JobSummary:
        """The job summary: summary.json when it counts every finished trial, else recomputed.

        Returns:
            The :class:`~cairn.results.model.JobSummary`.
        """
        rows = self.rows()
        finished = [r for r in rows if r.outcome != RUNNING and r.load_error is None]
        with self._lock:
            if self._summary is not None and self._summary[0] == self.version:
                return self._summary[1]
        summary: JobSummary | None = None
        try:
            stored = read_summary(self.root)
            if stored.n_trials == len(finished):
                summary = stored
        except (OSError, ValueError):
            pass
        if summary is None:
            from cairn.job.run import read_job

            summary = read_job(self.root).summary
        with self._lock:
            self._summary = (self.version, summary)
        return summary

    def meta(self) -> dict[str, Any]:
        """job.json's content (``{}`` when absent, unreadable or not a valid job.json)."""
        try:
            return read_job_json(self.paths.root).model_dump(mode="json")
        except (OSError, ValueError):
            return {}


# ------------------------------------------------------------------------------------------
# Jobs list


@dataclass(frozen=True)
class JobCard:
    """One line of the jobs page."""

    name: str
    agent: str | None
    model: str | None
    backend: str | None
    started_at: str | None
    finished_at: str | None
    n_trials: int
    n_running: int
    mean_reward: float | None
    pass_rate: float | None
    error_categories: dict[str, int]
    tokens: int
    cost_usd: float | None


class Library:
    """The job folders under a path: a jobs folder (each child job folder) or one job folder.

    Args:
        root: the folder given to ``cairn view``.

    Raises:
        FileNotFoundError: ``root`` is not a folder.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()
        if not self.root.is_dir():
            raise FileNotFoundError(f"{root} is not a folder")
        self.single = is_job_dir(self.root)
        self._jobs: dict[str, JobIndex] = {}
        self._lock = threading.Lock()

    def job_dirs(self) -> list[Path]:
        """The job folders, newest name first (a single job folder: just it)."""
        if self.single:
            return [self.root]
        try:
            dirs = [p for p in self.root.iterdir() if p.is_dir() and not p.is_symlink() and is_job_dir(p)]
        except OSError:
            return []
        return sorted(dirs, key=lambda p: p.name, reverse=True)

    def job(self, name: str) -> JobIndex | None:
        """The index of job ``name`` (``None`` when there is no such job folder)."""
        with self._lock:
            if name in self._jobs:
                return self._jobs[name]
        if self.single:
            path = self.root if name == self.root.name else None
        else:
            path = self.root / name if name and "/" not in name and name not in (".", "..") else None
            if path is not None and (path.is_symlink() or not path.is_dir() or not is_job_dir(path)):
                path = None
        if path is None:
            return None
        with self._lock:
            return self._jobs.setdefault(name, JobIndex(path))

    def cards(self) -> list[JobCard]:
        """One :class:`JobCard` per job (refreshes each job's rows)."""
        cards = []
        for d in self.job_dirs():
            job = self.job(d.name)
            if job is None:
                continue
            rows = job.refresh(REFRESH_SEC)
            meta = job.meta()
            raw_cfg = meta.get("config")
            cfg: dict[str, Any] = raw_cfg if isinstance(raw_cfg, dict) else {}
            s = job.summary()
            cards.append(
                JobCard(
                    name=d.name,
                    agent=cfg.get("agent"),
                    model=cfg.get("model"),
                    backend=meta.get("backend") or cfg.get("backend"),
                    started_at=meta.get("started_at"),
                    finished_at=meta.get("finished_at"),
                    n_trials=s.n_trials,
                    n_running=sum(r.outcome == RUNNING for r in rows),
                    mean_reward=s.mean_reward,
                    pass_rate=s.pass_rate,
                    error_categories={str(k.value): v for k, v in s.error_categories.items()},
                    tokens=s.tokens.prompt + s.tokens.completion,
                    cost_usd=s.cost_usd,
                )
            )
        return cards

    def version(self) -> str:
        """A fingerprint of every job's rows (changes when any trial changes)."""
        digest = hashlib.blake2b(digest_size=12)
        for d in self.job_dirs():
            job = self.job(d.name)
            if job is not None:
                job.refresh(REFRESH_SEC)
                digest.update(f"{d.name}:{job.version}\n".encode())
        return digest.hexdigest()


# ------------------------------------------------------------------------------------------
# One trial in full


@dataclass
class FileEntry:
    """A file shown on the trial page.

    Attributes:
        rel: its path relative to the job folder (the URL key).
        name: its path relative to the folder listed.
        size: bytes.
        text: the inline preview (``None`` for binary files or when not previewed).
        truncated: whether the preview is cut.
    """

    rel: str
    name: str
    size: int
    text: str | None = None
    truncated: bool = False


@dataclass
class CallView:
    """One model call as the calls pane shows it.

    Attributes:
        call: the record.
        request_text: the recorded request body as text (JSON indented), ``None`` when not
            recorded.
        response_text: the recorded answer likewise (a stream: its event text).
        request_cut: ``request_text`` is cut at :data:`BODY_PREVIEW_CHARS`.
        response_cut: ``response_text`` likewise.
    """

    call: ModelCall
    request_text: str | None = None
    response_text: str | None = None
    request_cut: bool = False
    response_cut: bool = False


@dataclass
class CallsPane:
    """A step's model calls (its ``model_calls.jsonl``), for the pane beside its trajectory.

    Attributes:
        rows: the calls shown, in file order (at most :data:`CALL_ROWS_SHOWN`).
        hidden: calls not listed (beyond :data:`CALL_ROWS_SHOWN`).
        sums: what every readable call adds up to.
        unreadable: lines skipped as not of the record's shape.
        bodies_recorded: any call carries its bodies (``--record-model-bodies``).
        bodies_dropped: the file was too large to read its bodies here.
        file: the raw file (link and download).
    """

    rows: list[CallView]
    hidden: int
    sums: CallSums
    unreadable: int
    bodies_recorded: bool
    bodies_dropped: bool
    file: FileEntry | None


def _body_text(value: Any) -> tuple[str, bool]:
    text = value if isinstance(value, str) else pretty_body(value)
    if len(text) > BODY_PREVIEW_CHARS:
        return text[:BODY_PREVIEW_CHARS], True
    return text, False


def pretty_body(value: Any) -> str:
    """A recorded body as indented JSON text (shown escaped, like any agent output).

    Args:
        value: the parsed body (any JSON value; hostile).

    Returns:
        The text; ``repr`` of the value when it cannot be written as JSON.
    """
    import json

    try:
        return json.dumps(value, indent=2, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return repr(value)


def calls_pane(job_root: Path, path: Path) -> CallsPane | None:
    """Read a step's ``model_calls.jsonl`` for its calls pane.

    Args:
        job_root: the job folder (for the raw file's link).
        path: the step's ``agent/model_calls.jsonl``.

    Returns:
        The pane, or ``None`` when the file is absent (or a symlink).
    """
    try:
        size = path.stat().st_size if path.is_file() and not path.is_symlink() else None
    except OSError:
        size = None
    if size is None:
        return None
    log: CallLog = read_calls(path, bodies=size <= CALLS_BODIES_MAX_BYTES)
    if not log.present:
        return None
    rows: list[CallView] = []
    for c in log.calls[:CALL_ROWS_SHOWN]:
        v = CallView(call=c)
        if c.has_bodies and not log.bodies_dropped:
            if c.request_body is not None:
                v.request_text, v.request_cut = _body_text(c.request_body)
            if c.response_body is not None:
                v.response_text, v.response_cut = _body_text(c.response_body)
        rows.append(v)
    return CallsPane(
        rows=rows,
        hidden=max(0, len(log.calls) - CALL_ROWS_SHOWN),
        sums=log.sums,
        unreadable=log.unreadable,
        bodies_recorded=any(c.has_bodies for c in log.calls),
        bodies_dropped=log.bodies_dropped,
        file=FileEntry(rel=path.relative_to(job_root).as_posix(), name=path.name, size=size),
    )


@dataclass
class StepView:
    """One declared step of a trial, with its files."""

    row: StepResult
    dir_rel: str | None
    instruction: str | None = None
    trajectory: dict[str, Any] | None = None
    trajectory_error: str | None = None
    agent_files: list[FileEntry] = field(default_factory=list)
    verifier_files: list[FileEntry] = field(default_factory=list)
    reward_file: FileEntry | None = None
    artifacts: list[FileEntry] = field(default_factory=list)
    manifest: list[ArtifactEntry] = field(default_factory=list)
    running_phase: str | None = None
    calls: CallsPane | None = None
    """The step's model calls (``model_calls.jsonl``), or ``None`` when it has none."""


@dataclass
class AttemptView:
    """An earlier attempt of the trial (``attempts/<n>/``), moved aside after an infra error."""

    number: int
    outcome: str | None
    error: dict | None
    steps: list[StepResult]


@dataclass
class TrialView:
    """Everything the trial page shows."""

    job: str
    name: str
    result: TrialResult | None
    steps: list[StepView]
    config: dict[str, Any]
    status: dict[str, Any] | None
    """status.json of a running trial (:class:`~cairn.results.model.TrialStatus` as JSON)."""
    attempts: list[AttemptView]
    trial_log: FileEntry | None
    load_error: str | None = None


def _listing(job_root: Path, folder: Path, *, preview: bool, skip: Iterable[str] = ()) -> list[FileEntry]:
    out: list[FileEntry] = []
    if not folder.is_dir() or folder.is_symlink():
        return out
    skip = set(skip)
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        dirnames.sort()
        for fn in sorted(filenames):
            p = Path(dirpath) / fn
            name = p.relative_to(folder).as_posix()
            if name in skip or p.is_symlink():
                continue
            rel = p.relative_to(job_root).as_posix()
            try:
                size = p.stat().st_size
            except OSError:
                continue
            entry = FileEntry(rel=rel, name=name, size=size)
            if preview:
                entry.text, entry.truncated = read_text_preview(p)
            out.append(entry)
    return out


def _file(job_root: Path, path: Path) -> FileEntry | None:
    if not path.is_file() or path.is_symlink():
        return None
    text, truncated = read_text_preview(path)
    return FileEntry(
        rel=path.relative_to(job_root).as_posix(),
        name=path.name,
        size=path.stat().st_size,
        text=text,
        truncated=truncated,
    )


def _read_trajectory(path: Path) -> tuple[dict | None, str | None]:
    if not path.is_file() or path.is_symlink():
        return None, None
    try:
        data = read_trajectory(path)
    except (OSError, ValueError) as exc:
        return None, f"trajectory.json unreadable: {exc}"
    if not isinstance(data, dict) or not isinstance(data.get("steps"), list):
        return None, "trajectory.json is not an ATIF trajectory (no steps list)"
    return data, None


def _step_rows(trial: TrialPaths) -> tuple[TrialResult | None, list[StepResult], str | None]:
    if trial.result_json.is_file():
        try:
            result = read_result(trial.result_json)
            return result, list(result.steps), None
        except (OSError, ValueError) as exc:
            err = f"result.json unreadable: {type(exc).__name__}: {exc}"
    else:
        err = None
    try:
        return None, list(read_steps(trial.steps_json).steps), err
    except (OSError, ValueError):
        return None, [], err


def load_trial(job: JobIndex, name: str) -> TrialView | None:
    """Read one trial folder for the trial page.

    Args:
        job: the job.
        name: the trial folder name.

    Returns:
        The :class:`TrialView`, or ``None`` when there is no such trial folder.
    """
    if not name or "/" in name or name in (".", ".."):
        return None
    root = job.paths.trials_dir / name
    if root.is_symlink() or not root.is_dir():
        return None
    trial = TrialPaths(root)
    job_root = job.root
    result, rows, load_error = _step_rows(trial)
    status = read_status(trial) if result is None else None
    steps: list[StepView] = []
    for row in rows:
        sp = trial.step(row.index, row.name)
        v = StepView(row=row, dir_rel=sp.root.relative_to(job_root).as_posix() if sp.root.is_dir() else None)
        if sp.root.is_dir() and not sp.root.is_symlink():
            if sp.instruction.is_file() and not sp.instruction.is_symlink():
                v.instruction = read_text_preview(sp.instruction)[0]
            v.trajectory, v.trajectory_error = _read_trajectory(sp.agent / "trajectory.json")
            v.calls = calls_pane(job_root, sp.agent / MODEL_CALLS_FILE)
            v.agent_files = _listing(job_root, sp.agent, preview=True, skip={"trajectory.json"})
            if v.calls is not None:  # link the pane to the listed copy (the bundle copies that one)
                v.calls.file = next((f for f in v.agent_files if f.name == MODEL_CALLS_FILE), v.calls.file)
            reward_names = set(REWARD_FILES)
            v.verifier_files = [
                f for f in _listing(job_root, sp.verifier, preview=True) if f.name not in reward_names
            ]
            for rn in ((row.reward_file,) if row.reward_file else ()) + tuple(sorted(reward_names)):
                if v.reward_file is None and rn:
                    v.reward_file = _file(job_root, sp.verifier / rn)
            v.manifest = read_artifacts_manifest(sp.artifacts)
            v.artifacts = _listing(job_root, sp.artifacts, preview=True, skip={"manifest.json"})
            if v.instruction is None and v.trajectory:
                first_user = next(
                    (s for s in v.trajectory["steps"] if isinstance(s, dict) and s.get("source") == "user"),
                    None,
                )
                if first_user and isinstance(first_user.get("message"), str):
                    v.instruction = first_user["message"]
        if status is not None and status.step_index == row.index:
            v.running_phase = status.phase
        steps.append(v)
    try:
        config: dict[str, Any] = read_config(trial.config_json).model_dump(mode="json")
    except (OSError, ValueError):
        config = {}
    attempts: list[AttemptView] = []
    if trial.attempts_dir.is_dir():
        for p in sorted(
            (p for p in trial.attempts_dir.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)
        ):
            a = TrialPaths(p)
            outcome, error, arows = None, None, []
            try:
                prior = read_result(a.result_json)
                outcome = prior.outcome.value
                error = prior.error.model_dump(mode="json") if prior.error else None
                arows = list(prior.steps)
            except (OSError, ValueError):
                try:
                    arows = list(read_steps(a.steps_json).steps)
                except (OSError, ValueError):
                    pass
            attempts.append(AttemptView(number=int(p.name), outcome=outcome, error=error, steps=arows))
    return TrialView(
        job=job.name,
        name=name,
        result=result,
        steps=steps,
        config=config,
        status=status.model_dump(mode="json") if status is not None else None,
        attempts=attempts,
        load_error=load_error,
        trial_log=_file(job_root, trial.trial_log),
    )


def trial_version(job: JobIndex, name: str) -> str:
    """A fingerprint of a trial folder's live files (result, steps, status, trial.log, and each
    step's ``model_calls.jsonl``, which grows call by call while a step runs)."""
    root = job.paths.trials_dir / name
    digest = hashlib.blake2b(digest_size=12)
    names = [RESULT_JSON, STEPS_JSON, "status.json", "trial.log"]
    try:
        with os.scandir(root / "steps") as it:
            names += sorted(f"steps/{e.name}/agent/{MODEL_CALLS_FILE}" for e in it if e.is_dir())
    except OSError:
        pass
    for fn in names:
        try:
            st = os.stat(root / fn)
            digest.update(f"{fn}:{st.st_mtime_ns}:{st.st_size}\n".encode())
        except OSError:
            digest.update(f"{fn}:-\n".encode())
    return digest.hexdigest()


# ------------------------------------------------------------------------------------------
# Figures


def reward_histogram(rows: Sequence[TrialRow], bins: int = 10) -> list[dict[str, Any]]:
    """Scored trials' primary rewards in ``bins`` equal bins over [0, 1] (1.0 gets its own).

    Rewards below 0 count in the first bin, above 1 in the last.

    Returns:
        ``[{label, n}]``, ``bins + 1`` entries.
    """
    counts = [0] * (bins + 1)
    for r in rows:
        if r.outcome in (Outcome.COMPLETED, Outcome.STOPPED) and r.reward is not None:
            i = bins if r.reward >= 1.0 else max(0, min(bins - 1, int(r.reward * bins)))
            counts[i] += 1
    labels = [f"{i / bins:.1f}–{(i + 1) / bins:.1f}" for i in range(bins)] + ["≥1.0"]
    return [{"label": lab, "n": n} for lab, n in zip(labels, counts, strict=True)]
