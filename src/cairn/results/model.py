"""Persisted result types (design §7): versioned pydantic models, one shape for every trial.

A trial is a list of steps; a single-step task is a list of one step named ``main``.
These are values: :mod:`cairn.results.store` alone writes them to disk.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from cairn.errors import Category, ErrorKind, Phase

RESULT_SCHEMA_VERSION = "1.0"


def _new_list() -> list[Any]:
    """A new empty list: the default factory of the list fields below.

    A Python function rather than the builtin ``list``: pydantic reads each default factory's
    signature while it builds a model, and a builtin's signature is parsed from its text form
    by the tokenizer (~3 ms of start-up for this module's 13 list fields, #13). The fields,
    their JSON schema and their values are the same either way.
    """
    return []


class Outcome(StrEnum):
    """How a trial ended (design §6)."""

    COMPLETED = "completed"
    STOPPED = "stopped"
    ERRORED = "errored"
    CANCELLED = "cancelled"


class StepSource(StrEnum):
    """Where a step's reward came from (design §7)."""

    VERIFIER = "verifier"
    CANDIDATE_ERROR = "candidate_error"
    ERROR = "error"
    NOT_RUN = "not-run"
    ORACLE = "oracle"


class AgentExit(StrEnum):
    """How a step's agent phase ended (design §6)."""

    OK = "ok"
    TIMEOUT = "timeout"
    ERROR = "error"
    MAX_TURNS = "max_turns"


class _Persisted(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class ErrorInfo(_Persisted):
    """``error`` of a trial or a step: ``{kind, category, phase, step, message}`` (+ detail)."""

    kind: ErrorKind
    """The failure kind (closed vocabulary)."""
    category: Category
    """Whose failure: infra, task, candidate, job."""
    phase: Phase | None = None
    """The phase it happened in."""
    step: str | None = None
    """The step name, when it happened inside a step."""
    message: str = ""
    """A human-readable explanation."""
    detail: dict[str, Any] = Field(default_factory=dict)
    """Structured detail: exit_code, stderr_tail, log_tail …"""


class StopReason(_Persisted):
    """Why a trial stopped early (design §5.3)."""

    kind: Literal["min_reward", "step_error"]
    step: str
    key: str | None = None
    """The gated key (``min_reward``)."""
    value: float | None = None
    """The actual value (``None`` when the key was missing, i.e. −∞)."""
    threshold: float | None = None
    error_kind: ErrorKind | None = None
    """The step's error kind (``step_error``)."""


class Gate(_Persisted):
    """One evaluated ``min_reward`` gate of a step (design §5.4 rule 4)."""

    key: str
    """The gated key (``reward`` for a number gate, which gates the primary reward)."""
    value: float | None
    """The actual value; ``None`` when the key was missing (counts as −∞, fails)."""
    threshold: float
    passed: bool
    """``value >= threshold``."""


class Tokens(_Persisted):
    """Token counts."""

    prompt: int = 0
    completion: int = 0
    cached: int | None = 0
    """Cached prompt tokens; ``None`` when the agent does not report them (aider), never a
    made-up 0 (a sum over steps or trials is ``None`` when any part is)."""

    @classmethod
    def total(cls, parts: Iterable[Tokens]) -> Tokens:
        """The sum of ``parts``; ``cached`` is ``None`` when any part's is ``None``."""
        items = list(parts)
        cached = [t.cached for t in items]
        return cls(
            prompt=sum(t.prompt for t in items),
            completion=sum(t.completion for t in items),
            cached=None if any(c is None for c in cached) else sum(c for c in cached if c is not None),
        )


class JudgeUsage(_Persisted):
    """What an LLM-judge verifier spent (its ``judge_usage.json``, docs/task-format.md), kept
    apart from the agent's tokens and cost."""

    tokens: Tokens = Field(default_factory=Tokens)
    cost_usd: float | None = None
    """USD, when the verifier reported it."""
    models: list[str] = Field(default_factory=_new_list)
    """The judge models named, in first-seen order."""
    calls: int = 0
    """Judge calls reported (0 when not given)."""


class PhaseSpan(_Persisted):
    """When one phase ran, wall clock (UTC): what the viewer's timeline draws."""

    phase: str
    """``environment``, ``healthcheck`` or ``agent_setup`` (a trial's); ``setup``,
    ``healthcheck``, ``agent``, ``pre_artifacts``, ``artifacts`` or ``verifier`` (a step's)."""
    started_at: datetime
    finished_at: datetime


class StepTimings(_Persisted):
    """Seconds spent per phase of a step (``None`` when the phase did not run)."""

    setup_sec: float | None = None
    agent_sec: float | None = None
    verifier_sec: float | None = None
    healthcheck_sec: float | None = None
    """The step's healthcheck (``None`` without one)."""
    artifacts_sec: float | None = None
    """``pre_artifacts.sh`` and the artifact collection together."""
    spans: list[PhaseSpan] = Field(default_factory=_new_list)
    """When each phase ran, in order; also kept for a step that failed part-way. A span
    covers the whole phase (``setup``: the workdir copy and ``setup.sh``; ``verifier``: the
    ``/tests`` upload, ``test.sh`` and reading the reward), so it can outlast the matching
    ``*_sec`` figure. Empty in results written before spans existed."""


class StepSnapshot(_Persisted):
    """A step snapshot (``--snapshot-steps``): the sandbox's files at the end of the step's
    agent phase, before artifacts and the verifier (docs/snapshots.md)."""

    backend: str
    """The backend that made it; it restores only there."""
    ref: str
    """Docker image id (``sha256:…``) or local snapshot folder."""
    size_bytes: int | None = None
    """Disk the snapshot adds (docker: the committed layer; local: bytes copied)."""
    seconds: float
    """Time taken to make it."""


class NetworkCounts(_Persisted):
    """What the egress gateway saw in one step (``steps/<nn>-<name>/network.jsonl`` has every
    attempt)."""

    allowed: int = 0
    """Connection attempts let through."""
    denied: int = 0
    """Connection attempts refused by the policy."""
    denied_hosts: list[str] = Field(default_factory=_new_list)
    """The first ten distinct hosts refused, control characters replaced (agent output)."""


NETWORK_RECORD_VERSION = "1.0"
"""The version of :class:`ConnectionRecord`, the shape of one line of ``network.jsonl``
(``network.schema.json``); a change of its fields changes it."""


class ConnectionRecord(_Persisted):
    """One line of a step's ``network.jsonl``: one request through the egress gateway, as
    the gateway's proxy (:mod:`cairn.sandbox.network.proxy`) wrote it when it ended
    (docs/network.md "The record"). Version :data:`NETWORK_RECORD_VERSION`.

    The proxy runs in the gateway with the standard library only, so it writes plain JSON;
    the store validates every record against this model before it appends it, and
    :func:`cairn.results.store.read_network_records` reads the file back through it. Host,
    method and reason are what the sandbox sent (bounded by the proxy): hostile text.
    """

    time: str
    """When the connection was accepted (ISO 8601, UTC)."""
    phase: str
    """The phase of the policy the request was decided under (``agent``, ``verifier``, …)."""
    conn: int
    """The connection's number in the gateway."""
    request: int = 1
    """1 for a connection's first request, 2… for the ones pipelined behind it (not served)."""
    peer: str
    """The client's ``address:port``."""
    method: str | None = None
    """The request method (``CONNECT`` for a tunnel), ``None`` before a head was read."""
    host: str | None = None
    """The target host, canonical when it parsed, else as sent (at most 255 characters)."""
    port: int | None = None
    """The target port."""
    address: str | None = None
    """The address actually connected to; ``None`` when nothing was contacted."""
    verdict: Literal["allowed", "denied"]
    """``allowed``: the policy admitted the host and its address; ``denied``: refused."""
    reason: str | None = None
    """Why it was refused, failed upstream or was cut; ``None`` for a clean request."""
    cut: bool = False
    """Whether a phase switch (or the end of the step) closed it."""
    bytes_out: int = 0
    """Bytes sent client → upstream."""
    bytes_in: int = 0
    """Bytes sent upstream → client."""
    generation: int | None = None
    """The policy generation it was decided under (the host's reader drops it after using
    it to tell a reused gateway's earlier trial apart; absent on disk)."""


class Survivor(_Persisted):
    """A process the agent phase started that was still running when it ended (issue #29).

    Its command line is the agent's output: bounded and with control characters escaped
    before it is recorded (:mod:`cairn.trial.survivors`)."""

    pid: int
    """The pid inside the sandbox."""
    uid: int | None = None
    """Its user id inside the sandbox (``None`` when the backend could not read it)."""
    user: str | None = None
    """The user name of ``uid`` in the sandbox's ``/etc/passwd`` (``None`` when unknown)."""
    cmdline: str = ""
    """The command line, at most 512 characters, control characters as ``\\xNN``."""


class StepResult(_Persisted):
    """One row of ``steps`` in result.json / steps.json — one per *declared* step."""

    index: int
    """1-based position."""
    name: str
    source: StepSource
    reward: float | None = None
    """The primary reward (design §5.2), or ``None``."""
    rewards: dict[str, float] | None = None
    """All reward keys read from the reward file (``None`` with no verifier result)."""
    passed: bool = False
    agent_exit: AgentExit | None = None
    error: ErrorInfo | None = None
    verifier_exit_code: int | None = None
    reward_file: str | None = None
    """``reward.json`` or ``reward.txt``: which file the reward came from."""
    warnings: list[str] = Field(default_factory=_new_list)
    timings: StepTimings = Field(default_factory=StepTimings)
    tokens: Tokens | None = None
    cost_usd: float | None = None
    judge: JudgeUsage | None = None
    """The LLM judge's spend in this step's verifier (not in ``tokens``/``cost_usd``)."""
    gates: list[Gate] = Field(default_factory=_new_list)
    """Evaluated min_reward gates: ``{key, value, threshold, passed}`` each."""
    snapshot: StepSnapshot | None = None
    """The snapshot taken after this step's agent phase (``--snapshot-steps``), or ``None``."""
    network: NetworkCounts | None = None
    """Connection attempts through the egress gateway (``None`` when the sandbox has none)."""
    survivors: list[Survivor] = Field(default_factory=_new_list)
    """Processes the agent phase started that were still running when it ended (at most 50;
    docs/guarantees.md says what they mean for the reward)."""
    survivors_total: int = 0
    """How many there were (``survivors`` lists at most 50)."""
    survivors_killed: str | None = None
    """Why the agent's processes were killed before this step's verifier (``hardened_verify``,
    or ``verifier_wider: …`` when the verifier's openings or secrets go beyond the agent's),
    or ``None`` when they were left running into it."""

    @property
    def has_result(self) -> bool:
        """Whether the step counts in aggregation: a verifier result or a candidate-error 0."""
        return self.source in (StepSource.VERIFIER, StepSource.CANDIDATE_ERROR) and self.rewards is not None


class TaskSource(_Persisted):
    """Where a task's folder came from: a registry dataset, a git repository, or both.

    Absent (``None`` on :class:`TaskRef`) for a task run from a local folder (``-p``).
    """

    registry: str | None = None
    """The registry's URL or file path (``-d``)."""
    dataset: str | None = None
    """The dataset name (``-d NAME@VERSION``)."""
    dataset_version: str | None = None
    """The dataset version that was resolved."""
    git_url: str | None = None
    """The repository the task was fetched from."""
    git_ref: str | None = None
    """The ref that was resolved to ``commit`` at the job's start (``--repo URL@REF``, or
    ``HEAD`` for a registry entry without a pin); ``None`` when the commit was pinned."""
    commit: str | None = None
    """The full commit id the task was fetched at."""
    path: str | None = None
    """The task folder's path inside the repository (or relative to the registry file)."""


class TaskRef(_Persisted):
    """result.json's ``task``: which task ran, by name and content hash, and where from."""

    name: str
    content_hash: str
    source: TaskSource | None = None
    """Provenance of a task fetched by dataset name or from a git repository."""


class AgentRef(_Persisted):
    """``agent`` of result.json: the agent's name, its version (when it reports one) and its
    ``--ak`` kwargs."""

    name: str
    version: str | None = None
    kwargs: dict[str, Any] = Field(default_factory=dict)


class TrialTimings(_Persisted):
    """``timings`` of result.json, in seconds (``null`` for a phase the trial did not reach):
    sandbox start, agent setup, and the whole trial."""

    environment_sec: float | None = None
    agent_setup_sec: float | None = None
    total_sec: float | None = None
    healthcheck_sec: float | None = None
    """The environment's healthcheck (``None`` without one)."""
    spans: list[PhaseSpan] = Field(default_factory=_new_list)
    """When the trial's own phases ran (environment, healthcheck, agent setup)."""
    prestarted: bool = False
    """The sandbox was pre-started (``--prestart``) while an earlier trial of the task was in
    its verifier; ``environment_sec`` is then only the time this trial waited for it."""
    prestart_sec: float | None = None
    """A pre-started sandbox's own start (image, create, start), seconds; it began before this
    trial did, so only the part in ``environment_sec`` counts in ``total_sec``."""
    prestart_began_at: datetime | None = None
    """When a pre-started sandbox's start began (UTC), before the trial's ``started_at``."""


class ExecutorRef(_Persisted):
    """Where a trial ran, for executors other than the in-process one (``--executor ray``)."""

    name: str
    """The executor's name (``ray``)."""
    node: str
    """The node's id within the executor (a Ray node id, hex)."""
    host: str | None = None
    """The node's host name."""


class ForkRef(_Persisted):
    """Where a ``--start-step NAME --from TRIAL_DIR`` trial started from."""

    trial_dir: str
    """The source trial's folder (absolute)."""
    trial_id: str
    step: str
    """The source step whose end-of-agent snapshot the sandbox started from."""
    snapshot: str
    """That snapshot's reference."""


class RegradeStep(_Persisted):
    """One step of a regraded trial: old and new reward side by side."""

    index: int
    name: str
    how: Literal["snapshot", "artifacts", "not_regradable", "not-run", "oracle", "dropped", "unchanged"]
    """``snapshot`` (shared verifier on the step's snapshot), ``artifacts`` (separate verifier
    on the recorded artifacts), ``not_regradable`` (no snapshot: copied unchanged), ``not-run``
    (the step never ran), ``oracle`` (replayed, not scored), ``dropped`` (the new gates stop
    the trial before it: no longer counted), ``unchanged`` (nothing to verify)."""
    old_source: StepSource
    old_reward: float | None = None
    new_source: StepSource
    new_reward: float | None = None


class RegradeInfo(_Persisted):
    """How a trial of a derived (``cairn regrade``) job was rescored."""

    status: Literal["regraded", "regrade_partial", "not_regradable"]
    """``regrade_partial``: the new gates would let the trial go on to a step that never ran
    (no score is invented for it)."""
    unreached_step: str | None = None
    """With ``regrade_partial``: the first step the trial could not reach."""
    old_reward: float | None = None
    old_outcome: Outcome
    steps: list[RegradeStep] = Field(default_factory=_new_list)
    message: str = ""


class TrialResult(_Persisted):
    """result.json (design §7). Written last; its presence marks the trial finished."""

    schema_version: str = RESULT_SCHEMA_VERSION
    trial_id: str
    trial_name: str
    attempt: int = 1
    task: TaskRef
    agent: AgentRef
    model: str | None = None
    backend: str
    outcome: Outcome
    error: ErrorInfo | None = None
    reward: float | None = None
    rewards: dict[str, float] | None = None
    reward_all_steps: float | None = None
    passed: bool = False
    strategy: Literal["mean", "final"] = "mean"
    steps_total: int
    steps_run: int = 0
    stopped_after: str | None = None
    stop_reason: StopReason | None = None
    timings: TrialTimings = Field(default_factory=TrialTimings)
    tokens: Tokens = Field(default_factory=Tokens)
    cost_usd: float | None = None
    spend_source: Literal["relay", "agent"] | None = None
    """Where ``tokens`` and ``cost_usd`` came from: ``relay`` (the job's model relay read the
    provider's own usage of every call), ``agent`` (the agent's own report: ``--no-relay`` or
    an agent not on the relay), ``null`` (no model-driven agent, or a result older than the
    field)."""
    judge: JudgeUsage | None = None
    """The LLM judges' spend over the trial's steps (apart from the agent's)."""
    started_at: datetime
    finished_at: datetime
    image_id: str | None = None
    engine_version: str | None = None
    warnings: list[str] = Field(default_factory=_new_list)
    steps: list[StepResult]
    executor: ExecutorRef | None = None
    """Where the trial ran (absent for the in-process ``local`` executor)."""
    start_step: str | None = None
    """``--start-step``: the first step the agent ran; earlier ones were replayed by the oracle
    (source ``oracle``) or taken from ``forked_from``'s snapshot (source ``not-run``)."""
    forked_from: ForkRef | None = None
    """``--from``: the recorded trial whose snapshot the sandbox started from."""
    regrade: RegradeInfo | None = None
    """In a job made by ``cairn regrade``: old and new rewards."""


class StepsFile(_Persisted):
    """steps.json (design §7): the ``steps`` rows of result.json, rewritten after each step."""

    schema_version: str = RESULT_SCHEMA_VERSION
    steps: list[StepResult]
    """One row per declared step (rows of steps not reached yet have source ``not-run``)."""


class DerivedFrom(_Persisted):
    """Where a derived job (``cairn regrade``) came from; its source folder is never modified."""

    kind: Literal["regrade"]
    job_dir: str
    """The source job folder (absolute)."""
    job_name: str
    tasks: list[str] | Literal["recorded"] = "recorded"
    """The ``-p`` folders the current tasks came from, or ``recorded`` (the trials' own)."""
    at: datetime
    """When the derived job was made."""


class JobStop(StrEnum):
    """Why a job stopped before every trial ran (job.json ``stopped_by``; design §8). The one
    place these values are documented."""

    MODEL_AUTH_FAILED = "model_auth_failed"
    """A trial's model refused the credentials: every further trial would too."""
    MODEL_UNREACHABLE = "model_unreachable"
    """A trial's model host cannot be resolved or refuses connections (after a short bounded
    try): every further trial would meet the same host."""
    MAX_COST = "max_cost"
    """``--max-cost-usd`` was reached (agents' and LLM judges' spend)."""
    INTERRUPTED = "interrupted"
    """Ctrl-C, SIGTERM, or a consumer that stopped reading the results."""
    STORAGE_FULL = "storage_full"
    """The filesystem holding the job folder is full (ENOSPC, EDQUOT)."""


class JobMeta(_Persisted):
    """job.json (design §7): the job's resolved config and versions, rewritten when it stops.

    ``--ae`` values are stored masked (``***``); ``cairn resume`` takes them again.
    """

    schema_version: str = RESULT_SCHEMA_VERSION
    job_name: str
    cairn_version: str
    backend: str
    """The resolved backend (``docker`` / ``local``); a resume refuses another one."""
    engine_version: str | None = None
    config: dict[str, Any]
    """The :class:`~cairn.plan.JobConfig` as JSON (agent env values masked)."""
    stopped_by: JobStop | None = None
    """Why the job stopped early (:class:`JobStop`), or ``None``."""
    started_at: datetime
    finished_at: datetime | None = None
    sources: list[dict[str, Any]] = Field(default_factory=_new_list)
    """Each ``-d`` dataset and ``--repo`` as resolved at the start: registry, name and
    version, and per task its repository, commit, path and content hash
    (:mod:`cairn.datasets.resolve`); a resume reuses these commits."""
    derived_from: DerivedFrom | None = None
    """Set on a job made by ``cairn regrade``."""


class ArtifactEntry(_Persisted):
    """One row of a step's ``artifacts/manifest.json``: an artifact entry and what became of it.

    Attributes:
        source: the path in the sandbox (``/logs/artifacts`` for the agent's own folder).
        destination: where it landed, relative to the step's ``artifacts/`` (``.``: its root).
        status: ``copied``, or ``failed`` (``error`` says why; never fatal to the trial).
        bytes: its size as measured in the sandbox, or ``None`` (not found, not measured).
        error: why it was not collected, or ``None``.
        excluded: paths removed from the host copy by the entry's ``exclude`` globs.
        service: the compose service it came from (``None``: the main container).
        skipped_too_long: member paths of a copied entry that the host cannot hold (a name
            over 255 bytes or a path over PATH_MAX there), skipped; at most 100 (issue 24).
        skipped_too_long_count: how many such paths were skipped in all.
    """

    source: str
    destination: str
    status: Literal["copied", "failed"]
    bytes: int | None = None
    error: str | None = None
    excluded: list[str] = Field(default_factory=_new_list)
    service: str | None = None
    skipped_too_long: list[str] = Field(default_factory=_new_list)
    skipped_too_long_count: int = 0


class TrialStatus(_Persisted):
    """``status.json``: where a running trial is (advisory; the viewer shows it until
    result.json exists).

    Attributes:
        phase: the phase (:class:`cairn.errors.Phase` values).
        step_index: the running step's 1-based index, ``None`` outside steps.
        step: its name.
        at: when the phase began (UTC, ISO 8601 with milliseconds).
    """

    phase: str
    step_index: int | None = None
    step: str | None = None
    at: str | None = None


class ConfigTask(_Persisted):
    """``task`` of config.json: name, content hash, the task folder's path on the host, and
    where a fetched task came from."""

    name: str
    content_hash: str
    path: str
    source: TaskSource | None = None
    """Where a fetched task came from (as on result.json's ``task``)."""


class ConfigAgent(_Persisted):
    """``agent`` of config.json: name, ``--ak`` kwargs and version (when it reports one)."""

    name: str
    kwargs: dict[str, Any] = Field(default_factory=dict)
    version: str | None = None


class ConfigOptions(_Persisted):
    """``options`` of config.json: the run options that change how a trial is scored."""

    timeout_multiplier: float = 1.0
    verify: bool = True
    hardened_verify: bool = False
    snapshot_steps: bool = False
    """``--snapshot-steps``."""
    start_step: str | None = None
    """``--start-step``."""
    fork_from: str | None = None
    """``--from``: the recorded trial folder the sandbox started from."""
    extra_instructions: list[str] = Field(default_factory=_new_list)
    """``--extra-instruction-path`` contents then ``--extra-instruction`` texts, appended to
    every step's instruction (each after a blank line)."""
    timeout_multipliers: dict[str, float] = Field(default_factory=dict)
    """The specific multipliers given (``agent``, ``verifier``, ``agent_setup``, ``build``);
    each replaces ``timeout_multiplier`` for its timeout."""
    resource_overrides: dict[str, float] = Field(default_factory=dict)
    """``--override-cpus`` / ``--override-memory-mb`` / ``--override-storage-mb`` given, as
    ``cpus`` / ``memory_mb`` / ``storage_mb``."""
    extra_artifacts: list[str] = Field(default_factory=_new_list)
    """``--artifact`` paths collected after every step beside the task's own."""


class TrialConfigFile(_Persisted):
    """config.json (design §7): a trial's plan as it was run, written when the trial starts."""

    schema_version: str = RESULT_SCHEMA_VERSION
    task: ConfigTask
    agent: ConfigAgent
    model: str | None = None
    backend: str
    attempt: int
    trial_id: str
    job_id: str
    options: ConfigOptions = Field(default_factory=ConfigOptions)


SUMMARY_SCHEMA_VERSION = "1.0"


class KeyStat(_Persisted):
    """The mean of one reward key over the scored trials that have it."""

    mean: float
    n: int
    """How many scored trials carry the key."""


class StepSummary(_Persisted):
    """One (task, step) line of summary.json, over the task's scored trials."""

    index: int
    """1-based position."""
    name: str
    n_reached: int
    """Scored trials in which the step's procedure began (source not ``not-run``)."""
    n_results: int
    """Scored trials in which the step has a verifier result or a candidate-error 0."""
    n_passed: int
    """Scored trials in which the step passed (design §5.2)."""
    mean_reward: float | None = None
    """Mean primary reward over the step's results that have one; ``None`` without any."""
    n_replayed: int = 0
    """Scored trials in which the oracle replayed the step (``--start-step``): not counted in
    ``n_reached`` nor in any score."""


class TaskSummary(_Persisted):
    """One task of summary.json."""

    name: str
    n_trials: int
    n_scored: int
    """Trials with outcome ``completed`` or ``stopped``."""
    outcomes: dict[Outcome, int]
    n_passed: int
    pass_rate: float | None = None
    """``n_passed`` over the scored trials that have a primary reward."""
    mean_reward: float | None = None
    """Mean primary reward over the scored trials that have one."""
    reward_all_steps_mean: float | None = None
    steps: list[StepSummary] = Field(default_factory=_new_list)


class TimingSummary(_Persisted):
    """Trial wall times, in seconds, over the trials that recorded ``timings.total_sec``."""

    n: int = 0
    total_sec_sum: float = 0.0
    total_sec_mean: float | None = None


class JobSummary(_Persisted):
    """summary.json (design §7), rewritten after each trial.

    Scores (means, pass rate, pass@k) are over *scored* trials (outcome ``completed`` or
    ``stopped``); errored and cancelled trials are counted beside them by kind and never
    folded in as 0, except in :attr:`mean_reward_errors_as_zero` (design §6).
    """

    schema_version: str = SUMMARY_SCHEMA_VERSION
    n_trials: int
    n_scored: int
    n_no_reward: int = 0
    """Scored trials whose primary reward is ``None`` (metrics only): left out of the means."""
    outcomes: dict[Outcome, int]
    """Trials per outcome (every outcome present, 0 when none)."""
    errors: dict[ErrorKind, int] = Field(default_factory=dict)
    """Errored and cancelled trials per error kind."""
    error_categories: dict[Category, int] = Field(default_factory=dict)
    """Errored and cancelled trials per error category."""
    mean_reward: float | None = None
    """Mean primary reward over the scored trials that have one."""
    mean_reward_errors_as_zero: float | None = None
    """The same mean with every errored trial added as 0."""
    rewards: dict[str, KeyStat] = Field(default_factory=dict)
    """Mean of every reward key over the scored trials that carry it."""
    reward_all_steps_mean: float | None = None
    """Mean of ``reward_all_steps`` over the scored trials that have it."""
    n_passed: int = 0
    pass_rate: float | None = None
    """``n_passed`` over the scored trials that have a primary reward."""
    pass_at_k: dict[str, float] = Field(default_factory=dict)
    """Unbiased pass@k for k = 1 … max attempts, averaged over tasks with n ≥ k (design §5.2)."""
    tasks: list[TaskSummary] = Field(default_factory=_new_list)
    tokens: Tokens = Field(default_factory=Tokens)
    cost_usd: float | None = None
    """Sum over the trials that report a cost; ``None`` when none does."""
    judge: JudgeUsage | None = None
    """The LLM judges' spend over all trials (apart from the agents'); ``None`` when none
    reported any."""
    timings: TimingSummary = Field(default_factory=TimingSummary)
