"""Results on disk (design §7): the only module that decides paths under ``jobs/`` or writes JSON.

Layout::

    jobs/<job_name>/
      job.json  summary.json  job.log  lock
      trials/<task-slug>__<attempt>__<id8>/
        config.json  result.json  steps.json  trial.log
        steps/<nn>-<name>/{agent,verifier,artifacts}/
        attempts/<n>/            earlier infra-failed attempts, never deleted

Every JSON file is written atomically (temp file in the same folder, fsync, ``os.replace``) and
read with a strict parser (no NaN/Infinity). ``result.json`` is written last: its presence
means the trial is finished. Secret values are masked as ``***`` in what cairn writes
(:class:`Masker`, :func:`mask_tree`); artifacts are left as they are and only checked
(:func:`find_secrets`). Reporting code reads only what this module wrote.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cairn._util.atomic import FILE_MODE, write_bytes_atomic
from cairn._util.jsonio import dumps_strict, loads_strict, to_jsonable, write_json_atomic
from cairn._util.names import bounded_part
from cairn.results.masking import Masker, find_secrets, mask_tree
from cairn.results.model import (
    RESULT_SCHEMA_VERSION,
    ArtifactEntry,
    ConnectionRecord,
    JobMeta,
    JobSummary,
    NetworkCounts,
    StepResult,
    StepsFile,
    TrialConfigFile,
    TrialResult,
    TrialStatus,
)
from cairn.task.model import step_folder_name, task_slug

JOB_JSON = "job.json"
SUMMARY_JSON = "summary.json"
JOB_LOG = "job.log"
LOCK = "lock"
TRIALS = "trials"
CONFIG_JSON = "config.json"
RESULT_JSON = "result.json"
STEPS_JSON = "steps.json"
TRIAL_LOG = "trial.log"
STATUS_JSON = "status.json"
INSTRUCTION_MD = "instruction.md"
STEPS = "steps"
ATTEMPTS = "attempts"
STEP_SUBDIRS = ("agent", "verifier", "artifacts")
ARTIFACTS_MANIFEST = "manifest.json"


__all__ = [
    "FILE_MODE",
    "JobPaths",
    "Masker",
    "ResultFile",
    "StepPaths",
    "TrialPaths",
    "TrialStore",
    "find_secrets",
    "iter_trial_results",
    "mask_tree",
    "move_attempt_aside",
    "read_json",
    "read_result",
    "read_job_json",
    "read_status",
    "read_steps",
    "read_summary",
    "move_superseded",
    "read_config",
    "read_artifacts_manifest",
    "read_network_records",
    "read_trajectory",
    "write_artifacts_manifest",
    "trial_dir_group",
    "legacy_step_dir_name",
    "step_dir_name",
    "task_slug",
    "trial_dir_name",
    "TRIAL_SLUG_MAX_BYTES",
    "write_bytes_atomic",
    "write_job_json",
    "write_json_atomic",
    "write_summary",
]


# ------------------------------------------------------------------------------------------
# Atomic, strict files


def read_json(path: Path) -> Any:
    """Read a JSON file strictly (no NaN, Infinity or overflowing numbers).

    Args:
        path: the file.

    Returns:
        The parsed value.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: the content is not strict JSON.
    """
    return loads_strict(Path(path).read_bytes())


# ------------------------------------------------------------------------------------------
# Names and paths


_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _printable(text: str) -> str:
    """``text`` with control and bidi characters replaced by ``?`` (agent output shown to a
    reviewer must not move their cursor or reorder their screen)."""
    return _UNPRINTABLE.sub("?", text)


def trial_dir_name(task_slug_: str, attempt: int, trial_id: str) -> str:
    """A trial's folder name: ``<task-slug>__<attempt>__<id8>`` (design §7).

    Args:
        task_slug_: the task slug (slugified again, so a raw name is safe too).
        attempt: the 1-based attempt number.
        trial_id: the trial id; its first 8 hex digits (dashes and other characters dropped,
            lower-cased) form ``id8``.

    Returns:
        The folder name, e.g. ``two-steps__1__3fa85f64``.

    Raises:
        ValueError: ``attempt`` < 1 or the id has fewer than 8 hex digits.
    """
    if attempt < 1:
        raise ValueError(f"attempt is 1-based, got {attempt}")
    hex_digits = re.sub(r"[^0-9a-f]", "", trial_id.lower())
    if len(hex_digits) < 8:
        raise ValueError(f"trial id {trial_id!r} has fewer than 8 hex digits")
    slug = bounded_part(task_slug(task_slug_), TRIAL_SLUG_MAX_BYTES, key=task_slug_)
    return f"{slug}__{attempt}__{hex_digits[:8]}"


TRIAL_SLUG_MAX_BYTES = 120
"""The longest task-slug part of a trial folder name, bytes: the whole name stays near 140
bytes (the filesystem's limit is 255 a name) and a trial folder's deepest paths well inside
PATH_MAX (issue #29)."""


def step_dir_name(index: int, name: str) -> str:
    """A step's folder name: ``<nn>-<name>``, nn the 1-based index on two digits (design §7),
    without doubling a number the name starts with (``19-recall`` at step 19 stays
    ``19-recall``; see :func:`cairn.task.model.step_folder_name`).

    Args:
        index: 1-based step index.
        name: the step name.

    Returns:
        e.g. ``01-main``; a long name is shortened (:func:`cairn.task.model.step_folder_name`).
    """
    return step_folder_name(index, name)


def legacy_step_dir_name(index: int, name: str) -> str:
    """The folder name cairn used before numbered names were folded (``19-19-recall``), still
    read in job folders written then."""
    return f"{index:02d}-{name}"


@dataclass(frozen=True)
class StepPaths:
    """The folders of one step: ``steps/<nn>-<name>/{agent,verifier,artifacts}``."""

    root: Path

    @property
    def agent(self) -> Path:
        """Agent logs and ``trajectory.json``; planted reward files are kept here."""
        return self.root / "agent"

    @property
    def verifier(self) -> Path:
        """``test-stdout.txt``, ``test-stderr.txt``, ``reward.json|reward.txt``."""
        return self.root / "verifier"

    @property
    def artifacts(self) -> Path:
        """``manifest.json`` and the collected files (never modified by masking)."""
        return self.root / "artifacts"

    @property
    def network(self) -> Path:
        """``network.jsonl``: the egress gateway's record of the step's connection attempts."""
        return self.root / "network.jsonl"

    @property
    def instruction(self) -> Path:
        """``instruction.md``: the instruction the agent was given (canary lines removed)."""
        return self.root / INSTRUCTION_MD

    def create(self) -> StepPaths:
        """Create the three folders (idempotent). Returns: ``self``."""
        for sub in (self.agent, self.verifier, self.artifacts):
            sub.mkdir(parents=True, exist_ok=True)
        return self


@dataclass(frozen=True)
class TrialPaths:
    """The files of one trial folder ``trials/<slug>__<attempt>__<id8>/``."""

    root: Path

    config_json = property(lambda self: self.root / CONFIG_JSON, doc="The trial's plan.")
    result_json = property(lambda self: self.root / RESULT_JSON, doc="Written last.")
    steps_json = property(lambda self: self.root / STEPS_JSON, doc="Rewritten after each step.")
    trial_log = property(lambda self: self.root / TRIAL_LOG, doc="The trial's log.")
    status_json = property(
        lambda self: self.root / STATUS_JSON,
        doc="Live phase of a running trial (advisory; see write_status).",
    )
    steps_dir = property(lambda self: self.root / STEPS, doc="Parent of the step folders.")
    attempts_dir = property(lambda self: self.root / ATTEMPTS, doc="Earlier attempts.")

    def step(self, index: int, name: str) -> StepPaths:
        """The folders of step ``index`` (1-based) named ``name`` (not created).

        In a trial folder written before numbered step names were folded, the old
        ``<nn>-<name>`` folder is used when it exists and the new one does not.
        """
        new = self.steps_dir / step_dir_name(index, name)
        old = self.steps_dir / legacy_step_dir_name(index, name)
        return StepPaths(old if old != new and old.is_dir() and not new.exists() else new)

    def attempt(self, n: int) -> Path:
        """``attempts/<n>/`` (1-based)."""
        return self.attempts_dir / str(n)

    @property
    def finished(self) -> bool:
        """Whether ``result.json`` exists (the trial is finished)."""
        return self.result_json.is_file()


@dataclass(frozen=True)
class JobPaths:
    """The files of one job folder ``jobs/<job_name>/``."""

    root: Path

    job_json = property(lambda self: self.root / JOB_JSON, doc="Resolved config, versions.")
    summary_json = property(lambda self: self.root / SUMMARY_JSON, doc="The job summary.")
    job_log = property(lambda self: self.root / JOB_LOG, doc="The job's log.")
    lock = property(lambda self: self.root / LOCK, doc="flock'ed while a process runs the job.")
    trials_dir = property(lambda self: self.root / TRIALS, doc="Parent of the trial folders.")

    def trial(self, task_name: str, attempt: int, trial_id: str) -> TrialPaths:
        """The folder of a trial (not created); see :func:`trial_dir_name`."""
        return TrialPaths(self.trials_dir / trial_dir_name(task_name, attempt, trial_id))

    def trial_dirs(self) -> list[TrialPaths]:
        """Every trial folder present, sorted by name (finished or not)."""
        if not self.trials_dir.is_dir():
            return []
        return [
            TrialPaths(p)
            for p in sorted(self.trials_dir.iterdir())
            if p.is_dir() and not p.name.startswith(INCOMING_PREFIX)
        ]


def trial_dir_group(name: str) -> str:
    """The ``<task-slug>__<attempt>`` part of a trial folder name (:func:`trial_dir_name`):
    folders of one (task, attempt) under different trial ids share it."""
    return name.rsplit("__", 1)[0]


def _next_attempt_dir(trial: TrialPaths) -> Path:
    used = (
        [int(p.name) for p in trial.attempts_dir.glob("*") if p.name.isdigit()]
        if trial.attempts_dir.is_dir()
        else []
    )
    return trial.attempt(max(used, default=0) + 1)


def move_superseded(old: TrialPaths, new: TrialPaths) -> Path:
    """Move a whole trial folder that ran under an older trial id into ``new``'s
    ``attempts/<n>/`` (the task changed since; design §8). Nothing is deleted.

    Returns:
        Where the old folder now is.
    """
    new.attempts_dir.mkdir(parents=True, exist_ok=True)
    dest = _next_attempt_dir(new)
    old.root.rename(dest)
    return dest


def move_attempt_aside(trial: TrialPaths) -> Path | None:
    """Move a failed attempt's files into ``attempts/<n>/`` so the trial can run again.

    Everything in the trial folder except ``attempts/`` moves (renames, same filesystem) into
    the next free ``attempts/<n>`` (n = 1 + the largest number there). Nothing is deleted.

    Args:
        trial: the trial folder.

    Returns:
        The ``attempts/<n>`` folder, or ``None`` when there was nothing to move.
    """
    if not trial.root.is_dir():
        return None
    entries = sorted(p for p in trial.root.iterdir() if p.name != ATTEMPTS)
    if not entries:
        return None
    dest = _next_attempt_dir(trial)
    dest.mkdir(parents=True)
    for p in entries:
        os.rename(p, dest / p.name)
    return dest


# ------------------------------------------------------------------------------------------
# One trial folder


class TrialStore:
    """Writes one trial's folder (design §7). The trial loop hands it values; it decides paths.

    Every text or JSON file written through it has secret values masked. Call
    :meth:`write_result` last.

    Args:
        paths: the trial folder.
        masker: the secrets to mask (default: none).
    """

    def __init__(self, paths: TrialPaths, masker: Masker | None = None) -> None:
        self.paths = paths
        self.masker = masker or Masker(())

    def create(self) -> TrialStore:
        """Create the trial folder and ``steps/`` (idempotent). Returns: ``self``."""
        self.paths.steps_dir.mkdir(parents=True, exist_ok=True)
        return self

    def step_dirs(self, index: int, name: str) -> StepPaths:
        """Create and return a step's ``agent``, ``verifier`` and ``artifacts`` folders.

        Args:
            index: 1-based step index.
            name: the step name.
        """
        return self.paths.step(index, name).create()

    def _write_json(self, path: Path, obj: Any, *, durable: bool = True, sync_dir: bool = True) -> None:
        write_json_atomic(path, self.masker.mask_json(to_jsonable(obj)), durable=durable, sync_dir=sync_dir)

    def write_config(self, config: Any) -> None:
        """Write ``config.json`` (the trial's plan: task, agent, model, backend, image id).

        Args:
            config: a pydantic model or a dict; a ``schema_version`` key is added to a dict that
                lacks one.

        Raises:
            ValueError: non-finite numbers.
        """
        data = to_jsonable(config)
        if isinstance(data, dict):
            data = {"schema_version": RESULT_SCHEMA_VERSION, **data}
        self._write_json(self.paths.config_json, data)

    def write_steps(self, steps: Sequence[StepResult]) -> None:
        """Write ``steps.json`` (one row per declared step), after each step.

        Atomic for readers but not fsync'ed: while the trial runs the file is a live view;
        :meth:`write_result` rewrites it durably just before ``result.json`` (a trial without
        ``result.json`` is re-run on resume, whatever its steps.json says).

        Args:
            steps: the rows so far (steps not reached yet with source ``not-run``).
        """
        self._write_json(self.paths.steps_json, StepsFile(steps=list(steps)), durable=False)

    def write_result(self, result: TrialResult) -> None:
        """Write ``result.json`` — last, since its presence marks the trial finished.

        ``steps.json`` is rewritten first with the same rows, so the two always agree; both
        are fsync'ed, and the one folder fsync after ``result.json``'s rename covers both
        renames (the same folder).

        Args:
            result: the finished trial.
        """
        self._write_json(self.paths.steps_json, StepsFile(steps=list(result.steps)), sync_dir=False)
        self._write_json(self.paths.result_json, result)

    def append_network_records(
        self, index: int, name: str, records: Sequence[Mapping[str, Any]]
    ) -> NetworkCounts:
        """Append connection records to the step's ``network.jsonl`` (one JSON object a line,
        masked; hostile text stays inside JSON strings) and count them.

        Args:
            index: 1-based step index.
            name: the step name.
            records: the gateway's records (:meth:`cairn.sandbox.base.Sandbox.network_records`),
                each the fields of a :class:`~cairn.results.model.ConnectionRecord`.

        Returns:
            The step's :class:`NetworkCounts` for these records.

        Raises:
            pydantic.ValidationError: a record is not a :class:`ConnectionRecord`.
        """
        path = self.paths.step(index, name).network
        path.parent.mkdir(parents=True, exist_ok=True)
        denied_hosts: list[str] = []
        allowed = denied = 0
        lines = []
        for raw in records:
            rec = ConnectionRecord.model_validate(self.masker.mask_json(to_jsonable(dict(raw))))
            line = rec.model_dump(mode="json", exclude={"generation"} if rec.generation is None else set())
            lines.append(json.dumps(line, ensure_ascii=True, sort_keys=True) + "\n")
            if rec.verdict == "denied":
                denied += 1
                host = _printable(rec.host or "?")[:120]
                if host not in denied_hosts and len(denied_hosts) < 10:
                    denied_hosts.append(host)
            else:
                allowed += 1
        with open(path, "a", encoding="utf-8") as f:
            f.writelines(lines)
            f.flush()
            os.fsync(f.fileno())
        return NetworkCounts(allowed=allowed, denied=denied, denied_hosts=denied_hosts)

    # ---- live status (read by `cairn view`; advisory, never part of the result) ----------
    def write_status(self, phase: str, step_index: int | None = None, step_name: str | None = None) -> None:
        """Record where a running trial is: ``status.json`` ``{phase, step_index, step, at}``.

        Rewritten atomically at each phase change. Advisory: a viewer shows it only while
        ``result.json`` is absent; a write failure is ignored (it never fails a trial).

        Args:
            phase: the phase name (``environment``, ``agent_setup``, ``setup``, ``agent`` …).
            step_index: 1-based index of the running step, ``None`` outside steps.
            step_name: its name.
        """
        from datetime import UTC, datetime

        status = TrialStatus(
            phase=str(phase),
            step_index=step_index,
            step=step_name,
            at=datetime.now(UTC).isoformat(timespec="milliseconds"),
        ).model_dump(mode="json")
        target = self.paths.status_json
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:  # atomic for readers (rename), but no fsync: the file is advisory and frequent
            tmp.write_bytes(dumps_strict(self.masker.mask_json(status)).encode("utf-8"))
            os.replace(tmp, target)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink()

    def write_instruction(self, index: int, name: str, text: str) -> None:
        """Write a step's ``instruction.md`` (the text the agent got; masked).

        Args:
            index: 1-based step index.
            name: the step name.
            text: the instruction, canary lines already removed.

        Atomic for readers, not fsync'ed on its own (#31: two fsyncs per step on the job's
        event loop, slow while the engine writes): it is a copy of the task's text, written
        again when the step runs again, and the durable writes of the trial's record that
        follow (``result.json``) commit the filesystem's journal with it.
        """
        path = self.paths.step(index, name).instruction.relative_to(self.paths.root)
        self.write_text(path, text, durable=False)

    def append_log(self, text: str) -> None:
        """Append text to ``trial.log`` (masked; a newline is added when missing).

        Args:
            text: one or more lines.
        """
        if not text.endswith("\n"):
            text += "\n"
        self.paths.root.mkdir(parents=True, exist_ok=True)
        with open(self.paths.trial_log, "a", encoding="utf-8") as f:
            f.write(self.masker.mask(text))

    def write_text(self, path: Path | str, text: str | bytes, *, durable: bool = True) -> Path:
        """Write a text file cairn produces inside the trial folder (masked, atomic).

        Args:
            path: relative to the trial folder (e.g. ``steps/01-main/verifier/test-stdout.txt``)
                or absolute inside it. Parent folders are created.
            text: the content; bytes are masked as bytes (any encoding that keeps the secret's
                UTF-8 form).
            durable: fsync the file and its folder (``False``: atomic for readers only).

        Returns:
            The absolute path written.

        Raises:
            ValueError: when ``path`` points outside the trial folder.
        """
        target = self._inside(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        data = text.encode("utf-8") if isinstance(text, str) else text
        write_bytes_atomic(target, self.masker.mask_bytes(data), durable=durable)
        return target

    def _inside(self, path: Path | str) -> Path:
        root = self.paths.root.resolve()
        target = (root / path).resolve() if not Path(path).is_absolute() else Path(path).resolve()
        if target != root and root not in target.parents:
            raise ValueError(f"{path} is outside the trial folder {root}")
        return target

    def mask_files(self) -> list[str]:
        """Mask secrets in every file of the trial folder except artifacts; check artifacts.

        Run before :meth:`write_result`. Agent logs, trajectories and copies of test output
        (written by other code) are rewritten in place; files under a step's ``artifacts/``
        and under ``attempts/`` (already processed) are not modified.

        Returns:
            One warning per artifact file that contains a secret value.
        """
        if not self.masker:
            return []
        skip = {self.paths.attempts_dir}
        artifact_dirs = (
            sorted(self.paths.steps_dir.glob(f"*/{STEP_SUBDIRS[2]}")) if self.paths.steps_dir.is_dir() else []
        )
        mask_tree(self.paths.root, self.masker, skip=skip | set(artifact_dirs))
        rel = self.paths.root
        return [
            f"artifact {p.relative_to(rel)} contains a secret value (kept as collected)"
            for d in artifact_dirs
            for p in find_secrets(d, self.masker)
        ]


def install_trial(paths: TrialPaths, archive: bytes, result: TrialResult) -> list[str]:
    """Store a trial folder produced elsewhere (a Ray worker node) as a local trial would be.

    The archive (an uncompressed tar of the trial folder's contents, as
    :func:`cairn._util.tar.tar_stream` with ``include_root=False`` makes) is unpacked safely into
    a fresh folder beside the trial's, its entries are moved into the trial folder (earlier
    ``attempts/`` stay where they are), and ``result.json`` is written last from ``result`` — so
    the folder is finished exactly when a local trial's would be, and a crash midway leaves a
    folder without result.json that ``cairn resume`` re-runs.

    Args:
        paths: the trial folder (may exist, holding ``attempts/``).
        archive: the tar bytes; a ``result.json`` or ``attempts/`` inside is ignored.
        result: the trial's result (the driver's copy, e.g. with ``executor`` set).

    Returns:
        Member names refused by the safe unpacker (absolute, ``..``, through a link).

    Raises:
        tarfile.TarError: the archive is not a valid tar.
        OSError: writing the job folder failed.
    """
    import shutil
    import tempfile

    from cairn._util.tar import extract_tar_stream

    paths.root.parent.mkdir(parents=True, exist_ok=True)
    incoming = Path(
        tempfile.mkdtemp(prefix=f"{INCOMING_PREFIX}{paths.root.name[:40]}-", dir=paths.root.parent)
    )
    try:
        report = extract_tar_stream([archive], incoming / "t")
        paths.root.mkdir(parents=True, exist_ok=True)
        for entry in sorted((incoming / "t").iterdir()):
            if entry.name in (RESULT_JSON, ATTEMPTS):
                continue
            dest = paths.root / entry.name
            if dest.is_dir() and not dest.is_symlink():
                shutil.rmtree(dest)
            elif dest.exists() or dest.is_symlink():
                dest.unlink()
            os.replace(entry, dest)
        TrialStore(paths).create().write_result(result)
    finally:
        shutil.rmtree(incoming, ignore_errors=True)
    return report.refused


INCOMING_PREFIX = ".incoming-"
"""Name prefix of :func:`install_trial`'s unpacking folders beside the trial folders."""


def remove_partial_installs(paths: JobPaths) -> list[Path]:
    """Remove unpacking folders an interrupted :func:`install_trial` left in ``trials/`` (the
    driver died midway; that trial has no result.json and is re-run).

    Returns:
        The folders removed.
    """
    import shutil

    gone: list[Path] = []
    trials = paths.root / TRIALS
    if trials.is_dir():
        for d in trials.iterdir():
            if d.name.startswith(INCOMING_PREFIX) and d.is_dir() and not d.is_symlink():
                shutil.rmtree(d, ignore_errors=True)
                gone.append(d)
    return gone


def read_result(path: Path) -> TrialResult:
    """Read and validate a ``result.json``.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: not strict JSON, or not a valid TrialResult (pydantic ``ValidationError``).
    """
    return TrialResult.model_validate(read_json(path))


def read_status(trial: TrialPaths) -> TrialStatus | None:
    """A running trial's ``status.json`` (see :meth:`TrialStore.write_status`).

    Returns:
        The :class:`TrialStatus`, or ``None`` when the trial is finished, has no status file
        or the file is unreadable.
    """
    if trial.finished:
        return None
    try:
        return TrialStatus.model_validate(read_json(trial.status_json))
    except (OSError, ValueError):
        return None


def read_config(path: Path) -> TrialConfigFile:
    """Read and validate a trial's ``config.json`` (a trial folder, or the file itself).

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: not strict JSON, or not a valid config.json.
    """
    path = Path(path)
    if path.is_dir():
        path = path / CONFIG_JSON
    return TrialConfigFile.model_validate(read_json(path))


def read_trajectory(path: Path) -> Any:
    """An agent's ``trajectory.json`` as parsed JSON (ATIF, written by the agent: hostile
    input the caller checks; cairn keeps no model of it).

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: not strict JSON.
    """
    return read_json(path)


def read_steps(path: Path) -> StepsFile:
    """Read and validate a ``steps.json``.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: not strict JSON, or not a valid steps file.
    """
    return StepsFile.model_validate(read_json(path))


# ------------------------------------------------------------------------------------------
# Job folder


def write_artifacts_manifest(artifacts_dir: Path, rows: Sequence[ArtifactEntry]) -> Path:
    """Write a step's ``artifacts/manifest.json`` (one row per artifact entry), atomically;
    a main-container row carries no ``service`` key.

    Returns:
        The manifest's path.
    """
    path = Path(artifacts_dir) / ARTIFACTS_MANIFEST
    write_json_atomic(
        path, [r.model_dump(mode="json", exclude={"service"} if r.service is None else set()) for r in rows]
    )
    return path


def read_artifacts_manifest(artifacts_dir: Path) -> list[ArtifactEntry]:
    """The rows of a step's ``artifacts/manifest.json``; ``[]`` when absent or unreadable (a
    row that is not a valid :class:`ArtifactEntry` is left out: the manifest is advisory, the
    collected files are on disk)."""
    try:
        rows = read_json(Path(artifacts_dir) / ARTIFACTS_MANIFEST)
    except (OSError, ValueError):
        return []
    out: list[ArtifactEntry] = []
    for row in rows if isinstance(rows, list) else []:
        with contextlib.suppress(ValueError):
            out.append(ArtifactEntry.model_validate(row))
    return out


def read_network_records(path: Path) -> list[ConnectionRecord]:
    """The records of a step's ``network.jsonl`` (:attr:`StepPaths.network`), in order;
    ``[]`` when absent. A line that is not a :class:`ConnectionRecord` (a torn last line of a
    killed run, a foreign edit) is left out: the counts in result.json stand on their own.

    Raises:
        OSError: the file exists but cannot be read.
    """
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    out: list[ConnectionRecord] = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            out.append(ConnectionRecord.model_validate_json(line))
    return out


def read_job_json(job_dir: Path) -> JobMeta:
    """Read and validate ``job.json``.

    Raises:
        OSError: unreadable; ValueError: not strict JSON or not a job.json.
    """
    return JobMeta.model_validate(read_json(JobPaths(Path(job_dir)).job_json))


def write_job_json(job_dir: Path, job: Any) -> None:
    """Write ``job.json``: the resolved config (templates, not secret values) and versions.

    Args:
        job_dir: the job folder (created if missing).
        job: a pydantic model or a dict; a ``schema_version`` key is added to a dict lacking
            one.

    Raises:
        ValueError: non-finite numbers.
    """
    paths = JobPaths(Path(job_dir))
    paths.root.mkdir(parents=True, exist_ok=True)
    data = to_jsonable(job)
    if isinstance(data, dict):
        data = {"schema_version": RESULT_SCHEMA_VERSION, **data}
    write_json_atomic(paths.job_json, data)


def write_summary(job_dir: Path, summary: JobSummary) -> None:
    """Write ``summary.json`` atomically (rewritten after each trial).

    Args:
        job_dir: the job folder (created if missing).
        summary: the summary.
    """
    paths = JobPaths(Path(job_dir))
    paths.root.mkdir(parents=True, exist_ok=True)
    write_json_atomic(paths.summary_json, summary)


def read_summary(job_dir: Path) -> JobSummary:
    """Read and validate ``summary.json``.

    Raises:
        FileNotFoundError: no summary yet.
        ValueError: not strict JSON, or not a valid summary.
    """
    return JobSummary.model_validate(read_json(JobPaths(Path(job_dir)).summary_json))


@dataclass(frozen=True)
class ResultFile:
    """One ``result.json`` found in a job folder: either a result or why it could not be read.

    Attributes:
        path: the file.
        result: the parsed result, or ``None`` when it failed to load.
        error: the reason it failed to load (``None`` when it loaded).
    """

    path: Path
    result: TrialResult | None
    error: str | None = None


def iter_trial_results(job_dir: Path) -> Iterator[ResultFile]:
    """Read every finished trial's ``result.json`` of a job, in folder-name order.

    Folders without result.json (unfinished trials) are not yielded; a result.json that does
    not parse or validate is yielded with its error, never skipped silently. Earlier attempts
    under ``attempts/`` are not read.

    Args:
        job_dir: the job folder.

    Yields:
        One :class:`ResultFile` per result.json.
    """
    for trial in JobPaths(Path(job_dir)).trial_dirs():
        if not trial.result_json.exists():
            continue
        try:
            yield ResultFile(trial.result_json, read_result(trial.result_json))
        except (OSError, ValueError) as exc:
            yield ResultFile(trial.result_json, None, f"{type(exc).__name__}: {exc}")


# ------------------------------------------------------------------------------------------
# Derived jobs (cairn regrade)


def copy_job_folder(src: Path, dest: Path) -> None:
    """Copy a job folder to a new one for a derived job (``cairn regrade``): every file as it
    is (symlinks as links), except the lock. The source is only read.

    Raises:
        FileExistsError: ``dest`` exists.
        OSError: the copy failed.
    """
    import shutil

    dest = Path(dest)
    if dest.exists():
        raise FileExistsError(f"{dest} exists")
    shutil.copytree(Path(src), dest, symlinks=True, ignore=shutil.ignore_patterns(LOCK))


def empty_folder(path: Path) -> None:
    """Remove everything inside ``path`` (a step's ``verifier/`` folder in a derived job before
    its verifier runs again); create it when missing."""
    import shutil

    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        for child in path.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    path.mkdir(parents=True, exist_ok=True)
