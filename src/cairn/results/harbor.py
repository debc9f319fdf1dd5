"""``cairn export --format harbor``: a cairn job folder rewritten in Harbor 0.26's job layout.

The mapping of every field, and what Harbor has no place for, is in docs/export.md. The
layout and the field names follow Harbor 0.26's own result models (``harbor.models.job.result``
``JobResult``/``JobStats``, ``harbor.models.trial.result`` ``TrialResult``/``StepResult``/
``ExceptionInfo``/``TimingInfo``/``AgentInfo``, ``harbor.models.agent.context.AgentContext``,
``harbor.models.verifier.result.VerifierResult``, ``harbor.models.trial.config`` and
``harbor.models.job.config``) and its ``TrialPaths`` folder names, read from the 0.26 package;
``tests/fixtures/harbor026_fields.json`` records those names for the suite.

Output::

    OUT/
      config.json  result.json  job.log  .cairn-harbor-export.json
      <trial_name>/
        config.json  result.json  trial.log  [exception.txt]
        agent/ verifier/ artifacts/               single-step task (one step named main)
        steps/<step name>/{agent,verifier,artifacts}/   multi-step task

Harbor's models ignore keys they do not declare, so what cairn knows and Harbor has no field
for (outcome, stop reason, ``reward_all_steps``, error kind and category, gates …) goes under
one namespaced key ``cairn`` on the job, trial and step results.

Agent output is hostile: files are copied byte for byte (invalid UTF-8 kept as it is), symlinks
and special files are never followed nor copied (they are listed in the export's report), and
nothing is written outside ``OUT``. The export is built in a temporary sibling folder and moved
into place at the end, so a failed export leaves no half-written ``OUT``.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import stat
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cairn._util.jsonio import dumps_strict
from cairn.errors import ErrorKind
from cairn.results.model import (
    AgentExit,
    ArtifactEntry,
    ErrorInfo,
    JobMeta,
    Outcome,
    StepResult,
    StepSource,
    TrialConfigFile,
    TrialResult,
)
from cairn.results.store import (
    JOB_LOG,
    TRIAL_LOG,
    JobPaths,
    StepPaths,
    TrialPaths,
    read_artifacts_manifest,
    read_job_json,
    read_json,
    read_result,
)
from cairn.results.summary import SCORED_OUTCOMES, summarize_job

HARBOR_VERSION = "0.26"
"""The Harbor release whose job layout is written."""

EXPORT_SCHEMA = "cairn.harbor-export/1"
"""The ``schema`` of the ``cairn`` key and of the marker file."""

MARKER = ".cairn-harbor-export.json"
"""The file that marks a folder as a cairn Harbor export (``--force`` replaces only those)."""

_EXCEPTION_TYPE: dict[ErrorKind, str] = {
    ErrorKind.BUILD_FAILED: "SandboxBuildFailedError",
    ErrorKind.BUILD_TIMEOUT: "EnvironmentStartTimeoutError",
    ErrorKind.ENV_HEALTHCHECK_FAILED: "HealthcheckError",
    ErrorKind.HEALTHCHECK_FAILED: "HealthcheckError",
    ErrorKind.VERIFIER_TIMEOUT: "VerifierTimeoutError",
    ErrorKind.REWARD_MISSING: "RewardFileNotFoundError",
    ErrorKind.REWARD_EMPTY: "RewardFileEmptyError",
    ErrorKind.REWARD_PARSE_ERROR: "VerifierOutputParseError",
    ErrorKind.MODEL_AUTH_FAILED: "AgentAuthenticationError",
    ErrorKind.MODEL_UNAVAILABLE: "ApiError",
    ErrorKind.CANCELLED: "CancelledError",
}
"""cairn error kinds with a Harbor 0.26 exception of the same meaning (its class name)."""

AGENT_TIMEOUT = "AgentTimeoutError"
AGENT_NONZERO_EXIT = "NonZeroAgentExitCodeError"

_NO_VALID_REWARD = frozenset(
    {
        "SandboxBuildFailedError",
        "EnvironmentStartTimeoutError",
        "HealthcheckError",
        "VerifierTimeoutError",
        "RewardFileNotFoundError",
        "RewardFileEmptyError",
        "VerifierOutputParseError",
        "AgentAuthenticationError",
        "ApiError",
        "CancelledError",
    }
)
"""The names above for which Harbor 0.26's error policy says ``has_valid_reward = false``
(``harbor.models.trial.error_policy``); every other name written here keeps the reward valid
there (``AgentTimeoutError``, ``NonZeroAgentExitCodeError`` and the ``Cairn…Error`` names,
which Harbor treats as unknown)."""


class HarborExportError(ValueError):
    """The export cannot start: not a job folder, the output folder is taken, the job is
    running (without ``partial``), or the output would overlap the job folder. Nothing was
    written."""


@dataclass
class HarborExport:
    """What an export wrote.

    Attributes:
        out_dir: the Harbor job folder.
        trials: the trial folder names written.
        unfinished: trial folders of the cairn job without a result.json (left out).
        unreadable: ``path: reason`` of result.json files that did not load (left out).
        skipped: files not copied (symlinks, FIFOs, devices, unreadable), relative to the
            cairn job folder, each with the reason.
        renamed: files whose name is not valid UTF-8, with the name written
            (:func:`portable_name`).
        running: whether the job was running when exported.
        replaced: whether an earlier export at ``out_dir`` was replaced (``force``).
    """

    out_dir: Path
    trials: list[str] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    renamed: list[str] = field(default_factory=list)
    running: bool = False
    replaced: bool = False


def harbor_exception_type(kind: ErrorKind) -> str:
    """The Harbor exception class name written for a cairn error kind.

    Args:
        kind: the cairn error kind.

    Returns:
        Harbor 0.26's class name where one means the same (``reward_missing`` →
        ``RewardFileNotFoundError``), else ``Cairn<Kind>Error`` (``sandbox_lost`` →
        ``CairnSandboxLostError``), which Harbor's error policy treats as unknown.
    """
    if kind in _EXCEPTION_TYPE:
        return _EXCEPTION_TYPE[kind]
    return "Cairn" + "".join(p.capitalize() for p in kind.value.split("_")) + "Error"


def reward_valid(result: dict[str, Any]) -> bool:
    """Harbor's ``reward_valid`` of an exported trial result: rewards present and no recorded
    exception whose Harbor policy voids the reward (see :data:`_NO_VALID_REWARD`)."""
    rewards = (result.get("verifier_result") or {}).get("rewards")
    if not rewards:
        return False
    return not any(t in _NO_VALID_REWARD for t in _exception_types(result))


def _exception_types(result: dict[str, Any]) -> list[str]:
    out = []
    if result.get("exception_info"):
        out.append(result["exception_info"]["exception_type"])
    for s in result.get("step_results") or []:
        if s.get("exception_info"):
            out.append(s["exception_info"]["exception_type"])
    return out


# ------------------------------------------------------------------------------------------
# Values


def _iso(t: datetime | None) -> str | None:
    if t is None:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _uuid_of(text: str) -> str:
    """A stable UUID for a cairn id: the first 32 hex digits of a hex id, else a UUID5."""
    hexd = "".join(c for c in text.lower() if c in "0123456789abcdef")
    if len(hexd) >= 32 and hexd == text.lower():
        return str(uuid.UUID(hex=hexd[:32]))
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "cairn:" + text))


def _model_info(model: str | None) -> dict[str, Any] | None:
    if not model:
        return None
    provider, sep, name = model.partition("/")
    return {"name": name, "provider": provider} if sep and name else {"name": model, "provider": None}


def _error_brief(err: ErrorInfo | None) -> dict[str, Any] | None:
    if err is None:
        return None
    return {
        "kind": err.kind.value,
        "category": err.category.value,
        "phase": err.phase.value if err.phase else None,
        "step": err.step,
        "message": err.message,
    }


def _exception_info(err: ErrorInfo, at: datetime) -> dict[str, Any]:
    lines = [
        f"cairn error kind={err.kind.value} category={err.category.value}"
        + (f" phase={err.phase.value}" if err.phase else "")
        + (f" step={err.step}" if err.step else "")
    ]
    if err.detail:
        lines.append(dumps_strict(err.detail).rstrip("\n"))
    return {
        "exception_type": harbor_exception_type(err.kind),
        "exception_message": err.message or err.kind.value,
        "exception_traceback": "\n".join(lines) + "\n",
        "occurred_at": _iso(at),
    }


def _agent_exit_exception(row: StepResult, at: datetime) -> dict[str, Any] | None:
    if row.agent_exit is AgentExit.TIMEOUT:
        kind = AGENT_TIMEOUT
    elif row.agent_exit is AgentExit.ERROR:
        kind = AGENT_NONZERO_EXIT
    else:
        return None
    return {
        "exception_type": kind,
        "exception_message": f"agent phase of step {row.name} ended: {row.agent_exit.value}",
        "exception_traceback": f"cairn agent_exit={row.agent_exit.value} step={row.name}\n",
        "occurred_at": _iso(at),
    }


def _agent_context(tokens: Any, cost: float | None) -> dict[str, Any]:
    return {
        "n_input_tokens": tokens.prompt if tokens is not None else None,
        "n_cache_tokens": tokens.cached if tokens is not None else None,
        "n_output_tokens": tokens.completion if tokens is not None else None,
        "cost_usd": cost,
        "model_usage": None,
        "rollout_details": None,
        "metadata": None,
    }


class _Clock:
    """Lays phase durations end to end from the trial's start (cairn records durations)."""

    def __init__(self, start: datetime, end: datetime) -> None:
        self.at, self.end = start, end

    def span(self, seconds: float | None) -> dict[str, Any] | None:
        if seconds is None:
            return None
        begin = min(self.at, self.end)
        self.at = min(self.at + timedelta(seconds=max(seconds, 0.0)), self.end)
        return {"started_at": _iso(begin), "finished_at": _iso(self.at)}

    def skip(self, seconds: float | None) -> None:
        self.span(seconds)


def _reached(row: StepResult) -> bool:
    return row.source is not StepSource.NOT_RUN


def _single_step(r: TrialResult) -> bool:
    return r.steps_total == 1 and len(r.steps) == 1 and r.steps[0].name == "main"


def _task_config(r: TrialResult, cfg: TrialConfigFile | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(TaskConfig, task_id) dicts for a trial."""
    src = r.task.source
    path = cfg.task.path if cfg is not None else r.task.name
    source_name = src.dataset if src is not None else None
    if src is not None and src.git_url:
        rel = (src.path or ".").lstrip("/") or "."
        task = {"path": rel, "git_url": src.git_url, "git_commit_id": src.commit, "source": source_name}
        return task, {"git_url": src.git_url, "git_commit_id": src.commit, "path": rel}
    return {"path": path, "source": source_name}, {"path": path}


HARBOR_ENVIRONMENT_TYPES = {"docker": "docker"}
"""cairn backend → the Harbor environment type of the same name (the others export as an
``import_path``)."""


def _environment(backend: str) -> dict[str, Any]:
    if backend in HARBOR_ENVIRONMENT_TYPES:
        return {"type": HARBOR_ENVIRONMENT_TYPES[backend]}
    return {"type": None, "import_path": f"cairn:{backend}"}


def _agent_config(name: str, model: str | None, kwargs: dict[str, Any]) -> dict[str, Any]:
    if ":" in name:
        return {"name": None, "import_path": name, "model_name": model, "kwargs": kwargs}
    return {"name": name, "model_name": model, "kwargs": kwargs}


def _retried_attempts(trial: TrialPaths, trial_id: str) -> int:
    """How many of a trial's ``attempts/<n>/`` folders are infra retries of this trial: the
    ones a resume moved there because the task changed (a superseded trial, design §8) ran
    under another trial id and are not retries (Harbor's ``n_retries`` counts retries only).
    An attempt whose files say no trial id (it died before writing one) counts as a retry."""
    if not trial.attempts_dir.is_dir() or trial.attempts_dir.is_symlink():
        return 0
    n = 0
    for p in trial.attempts_dir.iterdir():
        if not p.is_dir() or p.is_symlink():
            continue
        other: object = None
        for name in ("result.json", "config.json"):
            with contextlib.suppress(OSError, ValueError):
                doc = read_json(p / name)
                if isinstance(doc, dict) and doc.get("trial_id"):
                    other = doc["trial_id"]
                    break
        n += other is None or other == trial_id
    return n


def trial_result_doc(
    r: TrialResult,
    cfg: TrialConfigFile | None,
    *,
    trial_name: str,
    trial_dir: Path,
    job_uuid: str,
    timeout_multiplier: float,
    earlier_attempts: int = 0,
) -> dict[str, Any]:
    """A cairn trial result as Harbor 0.26's ``TrialResult`` JSON (with a ``cairn`` key).

    Args:
        r: the cairn result.json.
        cfg: the cairn config.json of the trial (task path), or ``None`` when unreadable.
        trial_name: the exported trial folder's name.
        trial_dir: the exported trial folder (for ``trial_uri``).
        job_uuid: the exported job's ``id``.
        timeout_multiplier: the job's ``--timeout-multiplier``.
        earlier_attempts: infra-failed attempts kept under the cairn trial's ``attempts/``.

    Returns:
        The document: Harbor's fields (docs/export.md has the mapping) plus ``cairn``.
    """
    task, task_id = _task_config(r, cfg)
    verify = cfg.options.verify if cfg is not None else True
    single = _single_step(r)
    clock = _Clock(r.started_at, r.finished_at)
    env_span = clock.span(r.timings.environment_sec)
    setup_span = clock.span(r.timings.agent_setup_sec)
    steps_out: list[dict[str, Any]] = []
    trial_exc: dict[str, Any] | None = None
    for row in r.steps:
        if not _reached(row):
            continue
        clock.skip(row.timings.setup_sec)
        exc = (
            _exception_info(row.error, r.finished_at)
            if row.error is not None
            else _agent_exit_exception(row, r.finished_at)
        )
        steps_out.append(
            {
                "step_name": row.name,
                "agent_result": (
                    _agent_context(row.tokens, row.cost_usd) if row.agent_exit is not None else None
                ),
                "verifier_result": ({"rewards": dict(row.rewards)} if row.rewards is not None else None),
                "exception_info": exc,
                "agent_execution": clock.span(row.timings.agent_sec),
                "verifier": clock.span(row.timings.verifier_sec),
                "cairn": {
                    "index": row.index,
                    "source": row.source.value,
                    "reward": row.reward,
                    "passed": row.passed,
                    "agent_exit": row.agent_exit.value if row.agent_exit else None,
                    "error": _error_brief(row.error),
                    "verifier_exit_code": row.verifier_exit_code,
                    "reward_file": row.reward_file,
                    "gates": [g.model_dump(mode="json") for g in row.gates],
                    "timings": row.timings.model_dump(mode="json"),
                    "warnings": list(row.warnings),
                    "judge": row.judge.model_dump(mode="json") if row.judge else None,
                },
            }
        )
    # A trial error not carried by a step row (a build failure, a cancelled trial) is the
    # trial's own; in a single-step trial every exception is the trial's (Harbor 0.26 keeps
    # step_results for multi-step trials only).
    step_errors = {row.name for row in r.steps if row.error is not None}
    if r.error is not None and (single or r.error.step not in step_errors):
        trial_exc = _exception_info(r.error, r.finished_at)
    elif r.outcome is Outcome.CANCELLED and r.error is None:
        trial_exc = {
            "exception_type": "CancelledError",
            "exception_message": "trial cancelled",
            "exception_traceback": "cairn outcome=cancelled\n",
            "occurred_at": _iso(r.finished_at),
        }
    one = steps_out[0] if single and steps_out else None
    if one is not None and trial_exc is None:
        trial_exc = one["exception_info"]
    doc: dict[str, Any] = {
        "schema_version": 1,
        "id": _uuid_of(r.trial_id),
        "task_name": r.task.name,
        "trial_name": trial_name,
        "trial_uri": trial_dir.absolute().as_uri(),
        "task_id": task_id,
        "source": task.get("source"),
        "task_checksum": r.task.content_hash,
        "config": {
            "schema_version": 1,
            "task": task,
            "trial_name": trial_name,
            "trials_dir": str(trial_dir.parent.absolute()),
            "timeout_multiplier": timeout_multiplier,
            "agent": _agent_config(r.agent.name, r.model, dict(r.agent.kwargs)),
            "environment": _environment(r.backend),
            "verifier": {"disable": not verify},
            "job_id": job_uuid,
        },
        "agent_info": {
            "name": r.agent.name,
            "version": r.agent.version or "unknown",
            "model_info": _model_info(r.model),
        },
        "agent_result": one["agent_result"] if one is not None else None,
        # only a trial cairn scores has a trial-level reward: an errored (or cancelled)
        # multi-step trial keeps the mean of the steps before its error in result.json
        # (design §5.3), which Harbor's tools would count as a valid reward whenever the
        # error's name is not one Harbor's policy voids (every Cairn<Kind>Error)
        "verifier_result": (
            {"rewards": dict(r.rewards)} if r.rewards is not None and r.outcome in SCORED_OUTCOMES else None
        ),
        "verifier_environment_mode": None,
        "exception_info": trial_exc,
        "started_at": _iso(r.started_at),
        "finished_at": _iso(r.finished_at),
        "environment_setup": env_span,
        "agent_setup": setup_span,
        "agent_execution": one["agent_execution"] if one is not None else None,
        "verifier": one["verifier"] if one is not None else None,
        "step_results": None if single else steps_out,
        "cairn": {
            "schema": EXPORT_SCHEMA,
            "trial_id": r.trial_id,
            "attempt": r.attempt,
            "outcome": r.outcome.value,
            "passed": r.passed,
            "reward": r.reward,
            "reward_all_steps": r.reward_all_steps,
            "strategy": r.strategy,
            "steps_total": r.steps_total,
            "steps_run": r.steps_run,
            "steps_not_run": [row.name for row in r.steps if not _reached(row)],
            "stopped_after": r.stopped_after,
            "stop_reason": r.stop_reason.model_dump(mode="json") if r.stop_reason else None,
            "error": _error_brief(r.error),
            "backend": r.backend,
            "image_id": r.image_id,
            "engine_version": r.engine_version,
            "timings": r.timings.model_dump(mode="json"),
            "timings_reconstructed": True,
            "tokens": r.tokens.model_dump(mode="json"),
            "cost_usd": r.cost_usd,
            "judge": r.judge.model_dump(mode="json") if r.judge else None,
            "warnings": list(r.warnings),
            "start_step": r.start_step,
            "earlier_attempts": earlier_attempts,
            "regrade": r.regrade.model_dump(mode="json") if r.regrade else None,
        },
    }
    if one is not None:
        doc["cairn"]["step"] = one["cairn"]
    return doc


def _eval_key(doc: dict[str, Any]) -> str:
    info = doc["agent_info"]
    model = (info.get("model_info") or {}).get("name")
    dataset = doc.get("source") or "adhoc"
    return f"{info['name']}__{model}__{dataset}" if model else f"{info['name']}__{dataset}"


def harbor_pass_at_k(trials: Sequence[tuple[str, dict[str, float]]]) -> dict[str, float]:
    """pass@k as Harbor 0.26 reports it in ``stats.evals[*].pass_at_k``.

    Harbor's definition (``harbor.utils.pass_at_k``): only when every trial with a valid reward
    has exactly one reward key valued 0 or 1; per task the unbiased estimator
    ``1 - C(n-c, k) / C(n, k)`` (n trials, c of them 1), averaged over tasks; k = 2, 4, 8, …
    and 5, 10, 15, … up to the fewest trials of any task. cairn's own pass@k (from
    ``passed``, k from 1) is kept beside it under ``cairn``.

    Args:
        trials: ``(task name, rewards)`` of the trials with a valid reward.

    Returns:
        ``{str(k): value}``; empty when the rewards are not binary or there are no trials.
    """
    per_task: dict[str, list[int]] = defaultdict(list)
    for task, rewards in trials:
        if len(rewards) != 1:
            return {}
        value = next(iter(rewards.values()))
        if value not in (0, 1):
            return {}
        per_task[task].append(int(value))
    if not per_task:
        return {}
    most = min(len(v) for v in per_task.values())
    ks = {k for k in (2**i for i in range(1, most.bit_length() + 1)) if k <= most}
    ks |= set(range(5, most + 1, 5))
    out: dict[str, float] = {}
    for k in sorted(ks):
        total = 0.0
        for v in per_task.values():
            n, c = len(v), sum(v)
            total += 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)
        out[str(k)] = total / len(per_task)
    return out


def job_stats(
    docs: Sequence[dict[str, Any]], results: Sequence[TrialResult], *, n_running: int, n_retries: int
) -> dict[str, Any]:
    """Harbor 0.26's ``JobStats`` for exported trials (as Harbor counts them).

    A trial counts as completed when it has a result; as errored when it records any
    exception (trial or step); per ``agent__[model__]dataset`` group: trials with a valid
    reward, rewards by value, exception types by trial, the mean reward (``metrics``, Harbor's
    default metric) and pass@k (:func:`harbor_pass_at_k`; cairn's own under ``cairn``).

    Args:
        docs: the exported trial documents.
        results: the cairn results, in the same order.
        n_running: trials still running (``partial`` export of a running job).
        n_retries: infra retries (earlier attempts kept by cairn).

    Returns:
        The ``stats`` object of the job result.json.
    """
    evals: dict[str, dict[str, Any]] = {}
    groups: dict[str, list[TrialResult]] = defaultdict(list)
    valid_rewards: dict[str, list[dict[str, float]]] = defaultdict(list)
    n_errored = n_cancelled = 0
    tokens: dict[str, int | None] = {"in": None, "cache": None, "out": None}
    cost: float | None = None
    for doc, r in zip(docs, results, strict=True):
        key = _eval_key(doc)
        groups[key].append(r)
        ev = evals.setdefault(
            key,
            {
                "n_trials": 0,
                "n_errors": 0,
                "metrics": [],
                "pass_at_k": {},
                "reward_stats": {},
                "exception_stats": {},
            },
        )
        if reward_valid(doc):
            ev["n_trials"] += 1
            rewards = doc["verifier_result"]["rewards"]
            valid_rewards[key].append(rewards)
            for k, v in rewards.items():
                ev["reward_stats"].setdefault(k, {}).setdefault(repr(float(v)), []).append(doc["trial_name"])
        types = sorted(set(_exception_types(doc)))
        for t in types:
            ev["exception_stats"].setdefault(t, []).append(doc["trial_name"])
        if types:
            ev["n_errors"] += 1
            n_errored += 1
            n_cancelled += "CancelledError" in types
        contexts = (
            [doc["agent_result"]]
            if doc["agent_result"] is not None
            else [s["agent_result"] for s in doc["step_results"] or [] if s["agent_result"] is not None]
        )
        for c in contexts:
            for name, src in (
                ("in", "n_input_tokens"),
                ("cache", "n_cache_tokens"),
                ("out", "n_output_tokens"),
            ):
                if c[src] is not None:
                    tokens[name] = (tokens[name] or 0) + c[src]
            if c["cost_usd"] is not None:
                cost = (cost or 0.0) + c["cost_usd"]
    for key, ev in evals.items():
        rewards = valid_rewards[key]
        keys = sorted({k for rw in rewards for k in rw})
        if rewards and len(keys) <= 1:
            ev["metrics"] = [{"mean": sum(next(iter(rw.values()), 0) for rw in rewards) / len(rewards)}]
        elif rewards:
            ev["metrics"] = [{k: sum(rw.get(k, 0) for rw in rewards) / len(rewards) for k in keys}]
        ev["pass_at_k"] = harbor_pass_at_k(
            [
                (d["task_name"], d["verifier_result"]["rewards"])
                for d in docs
                if _eval_key(d) == key and reward_valid(d)
            ]
        )
        ev["cairn"] = {"pass_at_k": summarize_job(groups[key]).pass_at_k}
    return {
        "n_completed_trials": len(docs),
        "n_errored_trials": n_errored,
        "n_running_trials": n_running,
        "n_pending_trials": 0,
        "n_cancelled_trials": n_cancelled,
        "n_retries": n_retries,
        "evals": evals,
        "n_input_tokens": tokens["in"],
        "n_cache_tokens": tokens["cache"],
        "n_output_tokens": tokens["out"],
        "cost_usd": cost,
    }


def job_config_doc(
    meta: JobMeta | None,
    job_name: str,
    out_dir: Path,
    results: Sequence[TrialResult],
    configs: Sequence[TrialConfigFile | None],
) -> dict[str, Any]:
    """Harbor 0.26's job ``config.json`` (``JobConfig``) for a cairn job.

    Args:
        meta: the cairn job.json (``None`` when missing or unreadable).
        job_name: the exported job's name.
        out_dir: the exported job folder.
        results: the exported trials' results.
        configs: their cairn config.json files (same order; ``None`` when unreadable).

    Returns:
        The document (Harbor's defaults fill the fields cairn has no value for).
    """
    c = meta.config if meta is not None else {}
    first = results[0] if results else None
    agent = c.get("agent") or (first.agent.name if first else "oracle")
    model = c.get("model") if meta is not None else (first.model if first else None)
    kwargs = c.get("agent_kwargs") or (dict(first.agent.kwargs) if first else {})
    backend = meta.backend if meta is not None else (first.backend if first else "docker")
    tasks: list[dict[str, Any]] = []
    seen: set[str] = set()
    for r, cfg in zip(results, configs, strict=True):
        task, _ = _task_config(r, cfg)
        ident = dumps_strict(task)
        if ident not in seen:
            seen.add(ident)
            tasks.append(task)
    return {
        "schema_version": 1,
        "job_name": job_name,
        "jobs_dir": str(out_dir.parent.absolute()),
        "n_attempts": int(c.get("attempts") or 1),
        "timeout_multiplier": float(c.get("timeout_multiplier") or 1.0),
        "n_concurrent_trials": int(c.get("n_concurrent") or 1),
        "retry": {"max_retries": int(c.get("max_retries") or 0)},
        "environment": _environment(backend),
        "verifier": {"disable": not c.get("verify", True)},
        "agents": [_agent_config(agent, model, dict(kwargs))],
        "tasks": tasks,
        "cairn": {
            "schema": EXPORT_SCHEMA,
            "config": c,
            "cairn_version": meta.cairn_version if meta is not None else None,
        },
    }


# ------------------------------------------------------------------------------------------
# Files


def _write_json(path: Path, obj: Any) -> None:
    """Strict JSON (no NaN), UTF-8; a lone surrogate from a hand-made file becomes ``?``."""
    path.write_bytes(dumps_strict(obj).encode("utf-8", "replace"))


def _copy_file(src: Path, dst: Path) -> None:
    """Copy one regular file byte for byte without following a symlink at ``src``.

    Raises:
        OSError: ``src`` is not a regular file (a symlink swapped in, a FIFO) or unreadable.
    """
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{src} is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as fin, open(dst, "xb") as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)
    finally:
        os.close(fd)


def portable_name(name: str) -> str:
    """A file name as valid UTF-8: each byte that is not part of a UTF-8 sequence becomes
    ``%XX`` (``b"name-\\xff"`` → ``name-%FF``); a valid name is returned unchanged.

    Harbor's tools serialize file names as JSON text and fail on undecodable ones (its viewer's
    file listing answers 500), so the export renames them; the content is kept byte for byte.
    """
    raw = os.fsencode(name)
    out: list[str] = []
    while raw:
        try:
            out.append(raw.decode("utf-8"))
            break
        except UnicodeDecodeError as exc:
            out.append(raw[: exc.start].decode("utf-8"))
            out.append(f"%{raw[exc.start]:02X}")
            raw = raw[exc.start + 1 :]
    return "".join(out)


def _shown(name: str) -> str:
    """A file name for reports: undecodable bytes as ``\\xNN`` (valid text, nothing lost)."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def copy_tree_safely(
    src: Path, dst: Path, skipped: list[str], rel: str, renamed: list[str] | None = None
) -> None:
    """Copy a folder of agent or verifier output, never leaving it.

    Regular files are copied byte for byte; folders are walked without following symlinks;
    symlinks, FIFOs, sockets and devices are not copied but listed in ``skipped``. A name that
    is not valid UTF-8 is written as :func:`portable_name` gives it (``~N`` appended if that
    name is taken) and listed in ``renamed``.

    Args:
        src: the source folder (a symlink or a non-folder is skipped itself).
        dst: where its contents go (created).
        skipped: receives ``"<rel>/<name>: reason"`` lines (undecodable bytes of a name shown
            as ``\\xNN``).
        rel: ``src``'s path as shown in ``skipped``.
        renamed: receives ``"<rel>/<name> -> <new name>"`` lines (``None``: not kept).
    """
    try:
        st = os.lstat(src)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        skipped.append(f"{rel}: {'symlink' if stat.S_ISLNK(st.st_mode) else 'not a folder'}")
        return
    dst.mkdir(parents=True, exist_ok=True)
    try:
        entries = sorted(os.scandir(src), key=lambda e: e.name)
    except OSError as exc:
        skipped.append(f"{rel}: {exc.strerror or exc}")
        return
    taken = {e.name for e in entries}
    for e in entries:
        name = f"{rel}/{_shown(e.name)}"
        target = e.name
        if (safe := portable_name(e.name)) != e.name:
            target, n = safe, 1
            while target in taken:
                n += 1
                target = f"{safe}~{n}"
            taken.add(target)
        try:
            if e.is_symlink():
                skipped.append(f"{name}: symlink")
                continue
            if e.is_dir(follow_symlinks=False):
                copy_tree_safely(Path(e.path), dst / target, skipped, name, renamed)
            elif e.is_file(follow_symlinks=False):
                _copy_file(Path(e.path), dst / target)
            else:
                skipped.append(f"{name}: not a regular file")
                continue
            if target != e.name and renamed is not None:
                renamed.append(f"{name} -> {target}")
        except OSError as exc:
            skipped.append(f"{name}: {exc.strerror or exc}")


def _copy_one(src: Path, dst: Path, skipped: list[str], rel: str) -> None:
    try:
        st = os.lstat(src)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        skipped.append(f"{rel}: {'symlink' if stat.S_ISLNK(st.st_mode) else 'not a regular file'}")
        return
    try:
        _copy_file(src, dst)
    except OSError as exc:
        skipped.append(f"{rel}: {exc.strerror or exc}")


ORACLE_LOG = "oracle.txt"
"""Where Harbor 0.26's oracle agent writes its solution's output (``agent/oracle.txt``)."""


def _oracle_log(agent_dir: Path) -> None:
    """Harbor's ``agent/oracle.txt`` from cairn's ``solve-stdout.txt`` then ``solve-stderr.txt``
    (bytes as they are), so Harbor's viewer shows the oracle's output."""
    parts = [agent_dir / "solve-stdout.txt", agent_dir / "solve-stderr.txt"]
    present = [p for p in parts if p.is_file() and not p.is_symlink()]
    if not present:
        return
    with open(agent_dir / ORACLE_LOG, "xb") as out:
        for p in present:
            with open(p, "rb") as fin:
                shutil.copyfileobj(fin, out, 1 << 20)


def _harbor_manifest(rows: list[ArtifactEntry], artifacts_dir: Path) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        dest = row.destination or "."
        target = artifacts_dir if dest in ("", ".") else artifacts_dir / dest
        status = {"copied": "ok", "failed": "failed"}.get(row.status, "failed")
        out.append(
            {
                "source": row.source,
                "destination": "artifacts" if dest in ("", ".") else f"artifacts/{dest}",
                "type": "directory" if target.is_dir() and not target.is_symlink() else "file",
                "status": status,
                "service": row.service,
                "exclude": list(row.excluded),
                "bytes": row.bytes,
                "error": row.error,
            }
        )
    return out


def _copy_step(
    sp: StepPaths, dest: Path, skipped: list[str], rel: str, renamed: list[str], oracle: bool
) -> None:
    for folder in (sp.root.parent, sp.root):
        if folder.is_symlink():
            skipped.append(f"{rel}: {folder.name} is a symlink")
            return
    for sub in ("agent", "verifier", "artifacts"):
        copy_tree_safely(sp.root / sub, dest / sub, skipped, f"{rel}/{sub}", renamed)
    if oracle and (dest / "agent").is_dir() and not (dest / "agent" / ORACLE_LOG).exists():
        _oracle_log(dest / "agent")
    for name in ("instruction.md", "network.jsonl"):
        _copy_one(sp.root / name, dest / name, skipped, f"{rel}/{name}")
    manifest = dest / "artifacts" / "manifest.json"
    if manifest.is_file():
        manifest.unlink()
        rows = read_artifacts_manifest(sp.artifacts)
        _write_json(manifest, _harbor_manifest(rows, dest / "artifacts"))


def _check_out_dir(job_dir: Path, out_dir: Path, force: bool) -> bool:
    """Refuse an output folder that would lose something; returns whether one is replaced."""
    job_abs, out_abs = job_dir.resolve(), out_dir.absolute().resolve()
    if out_abs == job_abs or job_abs in out_abs.parents or out_abs in job_abs.parents:
        raise HarborExportError(
            f"{out_dir} overlaps the job folder {job_dir}; choose an output folder outside it"
        )
    if out_dir.is_symlink() and not out_dir.exists():
        raise HarborExportError(
            f"{out_dir} is a dangling symlink (its target "
            f"{os.readlink(out_dir)} does not exist); choose another -o"
        )
    if out_dir.exists() and not out_dir.is_dir():
        raise HarborExportError(
            f"{out_dir} exists and is not a folder"
            + (f" (a symlink to the file {os.readlink(out_dir)})" if out_dir.is_symlink() else "")
        )
    if not out_dir.exists() or not any(out_dir.iterdir()):
        return False
    if not force:
        raise HarborExportError(
            f"{out_dir} is not empty; pass --force to replace an earlier "
            "cairn export there, or choose another -o"
        )
    if not (out_dir / MARKER).is_file():
        raise HarborExportError(
            f"{out_dir} is not empty and is not a cairn Harbor export "
            f"(no {MARKER}); --force replaces only those. Nothing was "
            "changed; choose another -o"
        )
    return True


def export_harbor(
    job_dir: Path, out_dir: Path, *, force: bool = False, partial: bool = False, job_running: bool = False
) -> HarborExport:
    """Write a cairn job folder as a Harbor 0.26 job folder.

    Args:
        job_dir: the cairn job folder (only read).
        out_dir: the Harbor job folder to write; must be missing or empty, or an earlier
            cairn Harbor export with ``force``. Its name is the exported ``job_name``. A
            symlink to such a folder stands for the folder (written there, named by it); a
            symlink to a file or a dangling one is refused.
        force: replace an earlier cairn Harbor export at ``out_dir`` (after the new one is
            complete; any other non-empty folder is refused even so).
        partial: export the finished trials of a running job (its result.json says the
            others are running, and ``finished_at`` is null).
        job_running: whether a process holds the job's lock (the caller checks it).

    Returns:
        What was written (:class:`HarborExport`).

    Raises:
        HarborExportError: not a job folder, the job is running without ``partial``, or the
            output folder is refused; nothing was written.
        OSError: writing failed (the temporary folder is removed; ``out_dir`` untouched).
    """
    job_dir = Path(job_dir)
    out_dir = Path(out_dir)
    paths = JobPaths(job_dir)
    if not paths.job_json.is_file() and not paths.trials_dir.is_dir():
        raise HarborExportError(f"{job_dir} is not a job folder (no job.json, no trials/)")
    if job_running and not partial:
        raise HarborExportError(
            f"job {job_dir.name} is running; export it after it ends, or "
            "pass --partial to export its finished trials now"
        )
    replaced = _check_out_dir(job_dir, out_dir, force)
    if out_dir.is_symlink():  # a link to a folder: the export goes into the folder itself
        out_dir = out_dir.resolve()  # (written beside it and renamed into its place)
    report = HarborExport(out_dir=out_dir, running=job_running, replaced=replaced)
    meta: JobMeta | None = None
    with contextlib.suppress(OSError, ValueError):
        meta = read_job_json(job_dir)

    out_dir.absolute().parent.mkdir(parents=True, exist_ok=True)
    # a plain mkdir (not mkdtemp, whose 0700 would become the export's mode): the folder
    # follows the umask like the trial folders and files inside it
    tmp = out_dir.absolute().parent / f".{out_dir.name}.{uuid.uuid4().hex[:12]}.part"
    tmp.mkdir()
    try:
        _write_export(job_dir, out_dir, tmp, meta, report)
        _move_into_place(tmp, out_dir, replaced)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return report


def _move_into_place(tmp: Path, out_dir: Path, replaced: bool) -> None:
    if replaced:
        old = out_dir.with_name(f".{out_dir.name}.replaced-{uuid.uuid4().hex[:8]}")
        out_dir.rename(old)
        try:
            tmp.rename(out_dir)
        except BaseException:
            old.rename(out_dir)
            raise
        shutil.rmtree(old, ignore_errors=True)
        return
    if out_dir.exists():
        out_dir.rmdir()  # checked empty
    tmp.rename(out_dir)


def _write_export(
    job_dir: Path, out_dir: Path, tmp: Path, meta: JobMeta | None, report: HarborExport
) -> None:
    paths = JobPaths(job_dir)
    job_name = out_dir.name
    job_uuid = _uuid_of(f"{job_dir.name}@{_iso(meta.started_at) if meta else ''}")
    tm = float((meta.config if meta else {}).get("timeout_multiplier") or 1.0)
    docs: list[dict[str, Any]] = []
    results: list[TrialResult] = []
    configs: list[TrialConfigFile | None] = []
    n_retries = 0
    for trial in paths.trial_dirs():
        rel = f"trials/{trial.root.name}"
        if trial.root.is_symlink():
            report.skipped.append(f"{rel}: symlink")
            continue
        if not trial.result_json.exists():
            report.unfinished.append(trial.root.name)
            continue
        try:
            r = read_result(trial.result_json)
        except (OSError, ValueError) as exc:
            report.unreadable.append(f"{trial.result_json}: {type(exc).__name__}: {exc}")
            continue
        cfg: TrialConfigFile | None = None
        with contextlib.suppress(OSError, ValueError):
            cfg = TrialConfigFile.model_validate(read_json(trial.config_json))
        earlier = _retried_attempts(trial, r.trial_id)
        n_retries += earlier
        name = trial.root.name
        dest = tmp / name
        dest.mkdir()
        doc = trial_result_doc(
            r,
            cfg,
            trial_name=name,
            trial_dir=out_dir / name,
            job_uuid=job_uuid,
            timeout_multiplier=tm,
            earlier_attempts=earlier,
        )
        _copy_trial_files(r, trial, dest, report.skipped, rel, report.renamed)
        _write_json(dest / "config.json", doc["config"])
        if (info := doc["exception_info"]) is not None:
            (dest / "exception.txt").write_bytes(
                f"{info['exception_type']}: {info['exception_message']}\n"
                f"{info['exception_traceback']}".encode("utf-8", "replace")
            )
        _write_json(dest / "result.json", doc)
        docs.append(doc)
        results.append(r)
        configs.append(cfg)
        report.trials.append(name)
    _copy_one(paths.job_log, tmp / "job.log", report.skipped, JOB_LOG)
    _write_json(tmp / "config.json", job_config_doc(meta, job_name, out_dir, results, configs))
    n_running = len(report.unfinished) if report.running else 0
    started = (
        meta.started_at if meta else (min(r.started_at for r in results) if results else datetime.now(UTC))
    )
    finished = (
        None
        if report.running
        else (
            meta.finished_at
            if meta and meta.finished_at
            else (max(r.finished_at for r in results) if results else None)
        )
    )
    now = datetime.now(UTC)
    job_doc = {
        "schema_version": 1,
        "id": job_uuid,
        "started_at": _iso(started),
        "updated_at": _iso(finished or now),
        "finished_at": _iso(finished),
        "n_total_trials": len(docs) + n_running,
        "stats": job_stats(docs, results, n_running=n_running, n_retries=n_retries),
        "cairn": {
            "schema": EXPORT_SCHEMA,
            "job_name": job_dir.name,
            "cairn_version": meta.cairn_version if meta else None,
            "backend": meta.backend if meta else None,
            "stopped_by": meta.stopped_by if meta else None,
            "exported_at": _iso(now),
            "partial": report.running,
            "unfinished_trials": list(report.unfinished),
            "unreadable_trials": list(report.unreadable),
            "skipped_files": list(report.skipped),
            "renamed_files": list(report.renamed),
        },
    }
    _write_json(tmp / "result.json", job_doc)
    _write_json(
        tmp / MARKER,
        {
            "schema": EXPORT_SCHEMA,
            "harbor": HARBOR_VERSION,
            "source_job": str(job_dir.absolute()),
            "exported_at": _iso(now),
        },
    )


def _copy_trial_files(
    r: TrialResult, trial: TrialPaths, dest: Path, skipped: list[str], rel: str, renamed: list[str]
) -> None:
    oracle = r.agent.name == "oracle"
    _copy_one(trial.root / TRIAL_LOG, dest / "trial.log", skipped, f"{rel}/{TRIAL_LOG}")
    if _single_step(r):
        sp = trial.step(r.steps[0].index, r.steps[0].name)
        _copy_step(sp, dest, skipped, f"{rel}/steps/{sp.root.name}", renamed, oracle)
        return
    for row in r.steps:
        if not _reached(row):
            continue
        sp = trial.step(row.index, row.name)
        _copy_step(sp, dest / "steps" / row.name, skipped, f"{rel}/steps/{sp.root.name}", renamed, oracle)
