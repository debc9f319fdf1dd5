"""Trial plans: what one trial runs, with a deterministic id (design §8). Pure, no I/O.

A trial id is a hash of (task name, task content hash, agent name and kwargs, model, backend,
attempt), so the same job config over the same tasks always yields the same ids — which is what
makes ``cairn resume`` match finished trials and notice a changed task (its content hash moves).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from cairn.netpolicy import AllowEntry, parse_address
from cairn.task.model import Artifact, Task

if TYPE_CHECKING:  # a value from the results room, carried through (the plan never reads it)
    from cairn.results.model import TaskSource


@dataclass(frozen=True)
class Timeouts:
    """The factors on a trial's timeouts, one value for every phase, resolved once.

    A specific multiplier replaces the default one for its timeout, never multiplies it
    (Harbor 0.26 ``Trial._resolve_timeout_sec``): ``Timeouts.resolve(2.0, agent=3.0)`` scales
    agent phases by 3 and every other timeout by 2.

    Attributes:
        default: the factor on every timeout without its own (``--timeout-multiplier``):
            ``setup.sh``, healthchecks, artifact hooks, ``pre_artifacts.sh``.
        agent: the factor on agent-phase timeouts.
        verifier: the factor on verifier timeouts (shared and separate).
        agent_setup: the factor on the agent's ``setup()`` bound.
        build: the factor on image-build timeouts (the task's and a separate verifier's).
    """

    default: float = 1.0
    agent: float = 1.0
    verifier: float = 1.0
    agent_setup: float = 1.0
    build: float = 1.0

    @classmethod
    def resolve(
        cls,
        default: float = 1.0,
        *,
        agent: float | None = None,
        verifier: float | None = None,
        agent_setup: float | None = None,
        build: float | None = None,
    ) -> Timeouts:
        """The timeouts of a job: each unset (``None``) factor falls back to ``default``.

        Args:
            default: ``--timeout-multiplier``.
            agent: ``--agent-timeout-multiplier`` or ``None``.
            verifier: ``--verifier-timeout-multiplier`` or ``None``.
            agent_setup: ``--agent-setup-timeout-multiplier`` or ``None``.
            build: ``--build-timeout-multiplier`` or ``None``.
        """
        return cls(
            default=default,
            agent=agent or default,
            verifier=verifier or default,
            agent_setup=agent_setup or default,
            build=build or default,
        )

    @classmethod
    def recorded(cls, config: Mapping[str, object]) -> Timeouts:
        """The timeouts a job ran with, from its job.json ``config`` (a dump of
        :class:`JobConfig`; absent keys, as in older job folders, are unset).

        Args:
            config: job.json's ``config`` mapping.
        """

        def factor(key: str) -> float | None:
            value = config.get(key)
            return float(value) if isinstance(value, int | float) and value else None

        return cls.resolve(
            factor("timeout_multiplier") or 1.0,
            agent=factor("agent_timeout_multiplier"),
            verifier=factor("verifier_timeout_multiplier"),
            agent_setup=factor("agent_setup_timeout_multiplier"),
            build=factor("build_timeout_multiplier"),
        )


@dataclass(frozen=True)
class RunOptions:
    """Options that shape how trials run (CLI flags of design §8).

    Attributes:
        timeout_multiplier: scales every timeout (agent, verifier, setup, build, healthcheck).
        verify: ``False`` for ``--no-verify`` (agents only, no reward, no gates).
        keep_sandbox: leave the sandbox of a failed trial running (``--keep-sandbox``).
        force_build: rebuild images even when cached (``--force-build``).
        hardened_verify: kill every agent-started process and remove planted Python start-up
            hooks before each verifier (``--hardened-verify``, design §4.4).
        resume_agent_session: carry the agent's conversation into the next step.
        agent_env: environment variables for the agent's commands (``--ae``).
        agent_setup_timeout_sec: bound on the agent's ``setup()``, seconds.
        snapshot_steps: snapshot the sandbox after every step's agent phase
            (``--snapshot-steps``, docs/snapshots.md).
        start_step: the first step the agent runs (``--start-step``); the earlier ones are
            replayed by the oracle, or taken from ``fork_from``.
        fork_from: a recorded trial folder whose snapshot of the step before ``start_step``
            the sandbox starts from (``--from``).
        agent_hosts: hosts an in-sandbox agent may reach in its agent phases, on top of the
            task's policy and the agent's own model hosts (``--allow-agent-host``).
        add_hosts: ``(name, address)`` pairs the egress gateway resolves itself
            (``--add-host``).
        verifier_env: ``--ve`` variables, laid over every step's verifier env (Harbor's
            flag); a task template they replace needs no host variable.
        agent_timeout_multiplier: scales the agent phase's timeout instead of
            ``timeout_multiplier`` (``--agent-timeout-multiplier``); ``None`` uses it.
        verifier_timeout_multiplier: the same for verifier timeouts.
        agent_setup_timeout_multiplier: the same for the agent's ``setup()`` bound.
        build_timeout_multiplier: the same for image builds (Harbor's
            ``--environment-build-timeout-multiplier``).
        extra_instructions: the job's extra instruction texts (already appended to the
            plan's task; recorded in config.json).
        resource_overrides: ``(cpus|memory_mb|storage_mb, value)`` the job laid over the
            task's ``[environment]`` (already applied; recorded in config.json).
        extra_artifacts: ``--artifact`` paths (already added to the steps; recorded).

    The multipliers are resolved once, by :attr:`timeouts`.
    """

    timeout_multiplier: float = 1.0
    verify: bool = True
    keep_sandbox: bool = False
    force_build: bool = False
    hardened_verify: bool = False
    resume_agent_session: bool = False
    agent_env: dict[str, str] = field(default_factory=dict)
    agent_setup_timeout_sec: float = 600.0
    snapshot_steps: bool = False
    start_step: str | None = None
    fork_from: Path | None = None
    agent_hosts: tuple[str, ...] = ()
    add_hosts: tuple[tuple[str, str], ...] = ()
    verifier_env: dict[str, str] = field(default_factory=dict)
    agent_timeout_multiplier: float | None = None
    verifier_timeout_multiplier: float | None = None
    agent_setup_timeout_multiplier: float | None = None
    build_timeout_multiplier: float | None = None
    extra_instructions: tuple[str, ...] = ()
    resource_overrides: tuple[tuple[str, float], ...] = ()
    extra_artifacts: tuple[str, ...] = ()

    @property
    def timeouts(self) -> Timeouts:
        """The job's timeout multipliers, each resolved once (:class:`Timeouts`)."""
        return Timeouts.resolve(
            self.timeout_multiplier,
            agent=self.agent_timeout_multiplier,
            verifier=self.verifier_timeout_multiplier,
            agent_setup=self.agent_setup_timeout_multiplier,
            build=self.build_timeout_multiplier,
        )

    @property
    def given_multipliers(self) -> dict[str, float]:
        """config.json's ``timeout_multipliers``: the specific multipliers the job gave
        (``agent``, ``verifier``, ``agent_setup``, ``build``), without the unset ones."""
        given = {
            "agent": self.agent_timeout_multiplier,
            "verifier": self.verifier_timeout_multiplier,
            "agent_setup": self.agent_setup_timeout_multiplier,
            "build": self.build_timeout_multiplier,
        }
        return {k: v for k, v in given.items() if v is not None}


@dataclass(frozen=True)
class TrialPlan:
    """One trial: one task × one agent × one attempt, ready to run.

    Attributes:
        task: the loaded task.
        agent_name: registry name or ``package.module:Class``.
        agent_kwargs: ``--ak`` values.
        model: ``-m`` value or ``None``.
        backend: the resolved sandbox backend (``docker``, ``local``), never ``auto``.
        attempt: 1-based attempt number (``-k``).
        trial_id: deterministic id (:func:`trial_id`).
        trial_dir: the trial's folder under the job (created by the store).
        job_id: the owning job's id (sandbox label ``cairn.job``).
        job_dir: the owning job's folder (its lock decides whether resources are left over).
        options: run options shared by the job.
        source: where the task's folder came from (dataset, repository, commit), or ``None``
            for a local folder.
    """

    task: Task
    agent_name: str
    agent_kwargs: dict[str, Any]
    model: str | None
    backend: str
    attempt: int
    trial_id: str
    trial_dir: Path
    job_id: str
    job_dir: Path
    options: RunOptions = field(default_factory=RunOptions)
    source: TaskSource | None = None

    @property
    def trial_name(self) -> str:
        """The trial folder's name (the job planner chose it by the store's rule,
        :func:`cairn.results.store.trial_dir_name`)."""
        return Path(self.trial_dir).name


def trial_id(
    task_name: str,
    content_hash: str,
    agent_name: str,
    agent_kwargs: dict[str, Any],
    model: str | None,
    backend: str,
    attempt: int,
    *,
    start_step: str | None = None,
    fork_from: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> str:
    """Deterministic trial id: sha256 hex (64 chars) of the canonical JSON of its inputs.

    ``start_step``, ``fork_from`` (``--start-step``, ``--from``: another experiment) and
    ``overrides`` (what the job changes in the task it runs: extra instructions, resource
    overrides; :meth:`JobConfig.task_overrides`) enter the hash only when set, so ids of
    ordinary trials do not move.

    Example: the same arguments always give the same id; a changed ``content_hash`` gives
    another.
    """
    inputs: dict[str, Any] = {
        "task": task_name,
        "content_hash": content_hash,
        "agent": agent_name,
        "kwargs": agent_kwargs,
        "model": model,
        "backend": backend,
        "attempt": attempt,
    }
    if start_step is not None:
        inputs["start_step"] = start_step
    if fork_from is not None:
        inputs["fork_from"] = fork_from
    if overrides:
        inputs["overrides"] = overrides
    payload = json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


def key_problem(key: str) -> str | None:
    """Why ``key`` cannot be the KEY of a ``KEY=VALUE`` option (an agent kwarg, an agent or
    verifier environment variable, an ``--add-host`` name), or ``None`` when it can.

    A KEY must be non-empty and hold no whitespace, ``=`` or NUL: ``--ve =x`` or a dotenv
    line ``=x`` names no variable, and a variable name with ``=`` cannot be set at all.

    Args:
        key: the text before the first ``=``.
    """
    if not key:
        return "the KEY is empty"
    if any(c.isspace() for c in key):
        return f"the KEY {key!r} holds whitespace"
    if "=" in key or "\0" in key:
        return f"the KEY {key!r} holds {'=' if '=' in key else 'NUL'}"
    return None


JOB_NAME_MAX_BYTES = 255
"""The longest job name, in UTF-8 bytes (one folder name on Linux, macOS and Windows)."""


def check_job_name(name: str) -> str:
    """Refuse a job name that is not one safe folder name under the jobs folder.

    A job name becomes ``<jobs_dir>/<name>``, so it must be exactly one path component that
    stays inside ``jobs_dir``. Legal: any printable text (letters of any script, digits,
    spaces, ``_ - . : % # @ + = ,`` …), so Harbor's names (``2026-11-29__12-00-00``,
    ``nightly:v2``) keep working. Refused: empty, ``.``/``..``, a ``/`` or ``\\``, NUL or
    any other control character, a leading ``-`` (read as an option by ``cairn view``,
    ``rm``, …), a leading ``.`` (a hidden folder), leading or trailing whitespace, more than
    :data:`JOB_NAME_MAX_BYTES` bytes.

    Args:
        name: the job name (``--job-name``, ``job_name:`` in a config file).

    Returns:
        ``name`` unchanged.

    Raises:
        ValueError: the name is refused; the message names it and says why.
    """

    def bad(why: str) -> ValueError:
        shown = name if len(name) <= 80 else name[:80] + "…"
        return ValueError(
            f"job name {shown!r}: {why}; a job name is one folder name under "
            "the jobs folder (letters, digits, spaces and _ - . : % # and the "
            "like)"
        )

    if not name:
        raise ValueError("job name is empty; give a folder name (or leave it out for the start time)")
    if name in (".", ".."):
        raise bad("not a folder name")
    if "/" in name or "\\" in name:
        raise bad("holds a path separator (/ or \\)")
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or c in "\u2028\u2029" for c in name):
        raise bad("holds a control character")
    if name.startswith("-"):
        raise bad("starts with '-'")
    if name.startswith("."):
        raise bad("starts with '.' (a hidden folder)")
    if name != name.strip():
        raise bad("starts or ends with whitespace")
    if len(name.encode("utf-8", "surrogatepass")) > JOB_NAME_MAX_BYTES:
        raise bad(f"longer than {JOB_NAME_MAX_BYTES} bytes")
    return name


class JobConfig(BaseModel):
    """A job's resolved configuration (design §8); what ``-c job.yaml`` holds, flags win.

    Recorded in job.json (templates, never secret values). Units: seconds, counts.
    """

    # allow_inf_nan=False: `inf` is refused here, never a crash mid-run
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    paths: tuple[Path, ...] = ()
    """Task folders or dataset folders (``-p``)."""
    datasets: tuple[str, ...] = ()
    """Registry datasets, ``NAME@VERSION`` or ``NAME`` for the highest version (``-d``)."""
    registry_url: str | None = None
    """The registry to resolve ``datasets`` in (``--registry-url``); default Harbor's public
    registry (:data:`cairn.datasets.registry.DEFAULT_REGISTRY_URL`)."""
    registry_path: Path | None = None
    """A registry.json file instead of a URL (``--registry-path``)."""
    repos: tuple[str, ...] = ()
    """Git repositories of tasks, ``GIT_URL`` or ``GIT_URL@REF`` (``--repo``)."""
    repo_path: str | None = None
    """The folder inside every ``repos`` entry that is a task or holds task folders
    (``--repo-path``); default the repository's top."""
    n_tasks: int | None = Field(default=None, ge=1)
    """Run only the first N tasks after ``include``/``exclude``, in input order (``-l``):
    ``-p`` folders first, then datasets in registry order, then repositories."""
    include: tuple[str, ...] = ()
    """Task-name globs to keep (``-i``); empty keeps all."""
    exclude: tuple[str, ...] = ()
    """Task-name globs to drop (``-x``)."""
    attempts: int = Field(default=1, ge=1)
    """Attempts per task (``-k``)."""
    n_concurrent: int = Field(default=4, ge=1)
    """Trials running at once (``-n``)."""
    agent: str = "oracle"
    model: str | None = None
    agent_kwargs: dict[str, Any] = Field(default_factory=dict)
    agent_env: dict[str, str] = Field(default_factory=dict)
    backend: str = "auto"
    """``auto``, ``docker`` or ``local`` (``-e``)."""
    job_name: str | None = None
    """Default: the start time, ``YYYY-MM-DD__HH-MM-SS``."""
    jobs_dir: Path = Path("jobs")
    max_retries: int = Field(default=2, ge=0)
    """Automatic re-runs of an infra-errored trial (so at most ``max_retries + 1`` runs)."""
    retry_backoff_sec: float = Field(default=2.0, ge=0)
    """First retry delay, doubled on each further retry."""
    timeout_multiplier: float = Field(default=1.0, gt=0)
    verify: bool = True
    force_build: bool = False
    keep_sandbox: bool = False
    prestart: bool = False
    """Warm start (``--prestart``): while a trial of a task is in its last verifier, the
    sandbox of the task's next waiting trial is created and started, so it is ready when a
    slot frees (at most ``n_concurrent`` such sandboxes at once; in-process executor only)."""
    hardened_verify: bool = False
    resume_agent_session: bool = False
    max_cost_usd: float | None = None
    """Stop starting new trials once the job has spent this much (USD)."""
    # ---- the job's model relay (issue 30; docs/relay.md) -----------------------------------
    relay: bool = True
    """Model-driven agents call their model through the job's relay (``--no-relay``: direct,
    spend as the agent itself reports it; result.json's ``spend_source`` says which)."""
    rollout: bool = False
    """The relay asks OpenAI-compatible servers for token ids and logprobs and records them
    (``--rollout``; ``cairn export --format rollouts``)."""
    record_model_bodies: bool = False
    """The relay records request and response bodies, secrets masked
    (``--record-model-bodies``)."""
    max_trial_cost_usd: float | None = Field(default=None, ge=0)
    """The relay closes a trial's model past this spend, USD (``--max-trial-cost-usd``)."""
    max_trial_tokens: int | None = Field(default=None, ge=1)
    """The relay closes a trial's model past this many tokens, input + output
    (``--max-trial-tokens``)."""
    executor: str = "local"
    """Where trials run (``--executor``): ``local`` (in this process) or ``ray`` (a Ray
    cluster's worker nodes, docs/scale-out.md)."""
    ray_address: str | None = None
    """``--ray-address`` of the ``ray`` executor; default ``RAY_ADDRESS``, else a fresh local
    Ray."""
    ray_trial_cpus: float | None = Field(default=None, gt=0)
    """CPUs Ray reserves for each trial under ``--executor ray`` (``--ray-trial-cpus``);
    ``None``: 1 per trial (the task's ``[environment] cpus`` does not change it)."""
    snapshot_steps: bool = False
    """Snapshot the sandbox after every step's agent phase (``--snapshot-steps``)."""
    start_step: str | None = None
    """The first step the agent runs (``--start-step``); earlier steps are replayed by the
    oracle (source ``oracle``, never scored), or taken from ``from_trial``."""
    from_trial: Path | None = None
    """A recorded trial folder (``--from``): start from its snapshot of the step before
    ``start_step`` instead of replaying."""
    agent_hosts: tuple[str, ...] = ()
    """Hosts an in-sandbox agent may reach during its agent phases (``--allow-agent-host``)."""
    add_hosts: dict[str, str] = Field(default_factory=dict)
    """Host name → address the egress gateway resolves itself (``--add-host NAME=ADDR``)."""
    verifier_env: dict[str, str] = Field(default_factory=dict)
    """``--ve KEY=VALUE``: laid over every step's verifier env (e.g. a judge model)."""
    extra_instructions: tuple[str, ...] = ()
    """Texts appended to every step's instruction, each after a blank line
    (``--extra-instruction-path`` file contents first, then ``--extra-instruction``; Harbor
    0.26 ``Task._append_extra_instructions``; trailing newlines of each part dropped).
    Recorded in each trial's config.json."""
    artifacts: tuple[str, ...] = ()
    """Extra absolute sandbox paths collected as artifacts after every step (``--artifact``),
    beside the task's own."""
    override_cpus: float | None = Field(default=None, gt=0)
    """Replaces the task's ``[environment].cpus`` (``--override-cpus``)."""
    override_memory_mb: int | None = Field(default=None, ge=1)
    """Replaces the task's ``[environment].memory_mb`` (``--override-memory-mb``), MiB."""
    override_storage_mb: int | None = Field(default=None, ge=1)
    """Replaces the task's ``[environment].storage_mb`` (``--override-storage-mb``), MiB."""
    agent_timeout_multiplier: float | None = Field(default=None, gt=0)
    """Scales agent-phase timeouts instead of ``timeout_multiplier``."""
    verifier_timeout_multiplier: float | None = Field(default=None, gt=0)
    """Scales verifier timeouts instead of ``timeout_multiplier``."""
    agent_setup_timeout_multiplier: float | None = Field(default=None, gt=0)
    """Scales the agent's ``setup()`` bound instead of ``timeout_multiplier``."""
    build_timeout_multiplier: float | None = Field(default=None, gt=0)
    """Scales image-build timeouts instead of ``timeout_multiplier`` (Harbor's
    ``environment_build_timeout_multiplier``)."""
    strict: bool = False
    """Task validation warnings are errors (``--strict``, as ``cairn tasks check --strict``):
    a task with one ends ``config_error`` without a sandbox."""

    @model_validator(mode="after")
    def _relay_options(self) -> JobConfig:
        if not self.relay:
            given = [
                flag
                for flag, on in (
                    ("--rollout", self.rollout),
                    ("--record-model-bodies", self.record_model_bodies),
                    ("--max-trial-cost-usd", self.max_trial_cost_usd is not None),
                    ("--max-trial-tokens", self.max_trial_tokens is not None),
                )
                if on
            ]
            if given:
                raise ValueError(
                    f"{', '.join(given)} {'needs' if len(given) == 1 else 'need'} "
                    "the model relay; drop --no-relay"
                )
        return self

    @field_validator("job_name")
    @classmethod
    def _job_name(cls, value: str | None) -> str | None:
        return None if value is None else check_job_name(value)

    @field_validator("artifacts")
    @classmethod
    def _artifacts(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for path in value:
            if not str(path).startswith("/"):
                raise ValueError(f"artifact {path!r}: give an absolute path inside the sandbox")
        return value

    @field_validator("agent_hosts")
    @classmethod
    def _agent_hosts(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for host in value:
            AllowEntry.parse(host)  # ValueError names the entry
        return value

    @field_validator("agent_kwargs", "agent_env", "verifier_env")
    @classmethod
    def _keys(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        for key in value:
            if (why := key_problem(str(key))) is not None:
                raise ValueError(f"{info.field_name}: {why}")
        return value

    @field_validator("add_hosts")
    @classmethod
    def _add_hosts(cls, value: dict[str, str]) -> dict[str, str]:
        for name, addr in value.items():
            if (why := key_problem(str(name))) is not None:
                raise ValueError(f"add_hosts: {why}")
            if parse_address(addr) is None:
                raise ValueError(f"add_hosts {name}={addr!r}: the address must be an IP address")
        return value

    def run_options(self) -> RunOptions:
        """The per-trial :class:`RunOptions` of this job."""
        return RunOptions(
            timeout_multiplier=self.timeout_multiplier,
            verify=self.verify,
            keep_sandbox=self.keep_sandbox,
            force_build=self.force_build,
            hardened_verify=self.hardened_verify,
            resume_agent_session=self.resume_agent_session,
            agent_env=dict(self.agent_env),
            snapshot_steps=self.snapshot_steps,
            start_step=self.start_step,
            fork_from=Path(self.from_trial).absolute() if self.from_trial else None,
            agent_hosts=tuple(self.agent_hosts),
            add_hosts=tuple(sorted(self.add_hosts.items())),
            verifier_env=dict(self.verifier_env),
            agent_timeout_multiplier=self.agent_timeout_multiplier,
            verifier_timeout_multiplier=self.verifier_timeout_multiplier,
            agent_setup_timeout_multiplier=self.agent_setup_timeout_multiplier,
            build_timeout_multiplier=self.build_timeout_multiplier,
            extra_instructions=tuple(self.extra_instructions),
            resource_overrides=tuple(
                (k.removeprefix("override_"), v)
                for k, v in self.task_overrides().items()
                if k.startswith("override_")
            ),
            extra_artifacts=tuple(self.artifacts),
        )

    def task_overrides(self) -> dict[str, Any]:
        """What this job changes in every task it runs (part of the trial id when not empty):
        ``extra_instructions`` and the ``override_*`` resources that are set."""
        out: dict[str, Any] = {}
        if self.extra_instructions:
            out["extra_instructions"] = list(self.extra_instructions)
        for key in ("override_cpus", "override_memory_mb", "override_storage_mb"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out

    def effective_task(self, task: Task) -> Task:
        """The task as this job runs it: extra instructions appended to every step, the
        ``override_*`` resources in ``[environment]``, the ``artifacts`` paths added to every
        step's artifacts (a path the step already collects is not added twice).

        Pure: returns a new :class:`~cairn.task.model.Task`; its content hash stays the
        folder's (the trial id carries :meth:`task_overrides` instead).
        """
        if not (
            self.extra_instructions
            or self.artifacts
            or self.override_cpus is not None
            or self.override_memory_mb is not None
            or self.override_storage_mb is not None
        ):
            return task
        env_update = {
            k: v
            for k, v in (
                ("cpus", self.override_cpus),
                ("memory_mb", self.override_memory_mb),
                ("storage_mb", self.override_storage_mb),
            )
            if v is not None
        }
        config = task.config
        if env_update:
            config = config.model_copy(
                update={"environment": config.environment.model_copy(update=env_update)}
            )
        steps = []
        for step in task.steps:
            update: dict[str, Any] = {}
            if self.extra_instructions:
                update["instruction"] = "\n\n".join(
                    part.rstrip("\n") for part in (step.instruction, *self.extra_instructions)
                )
            have = {a.source for a in step.artifacts}
            extra = tuple(Artifact(source=p) for p in self.artifacts if p not in have)
            if extra:
                update["artifacts"] = (*step.artifacts, *extra)
            steps.append(step.model_copy(update=update) if update else step)
        return task.model_copy(update={"config": config, "steps": tuple(steps)})
