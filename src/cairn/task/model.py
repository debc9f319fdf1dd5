"""Frozen pydantic models of task.toml (design §1.1) and of a loaded task.

Two layers:

- ``*Config`` classes mirror task.toml keys one to one (what the author wrote, defaults
  applied, env templates kept as templates).
- :class:`Task` and :class:`Step` are the loaded task: every step resolved with its files and
  its effective settings (fallbacks applied). A single-step task is a task with one step named
  ``main`` — one shape for everything downstream (docs/architecture.md, habit 11).

Unknown keys are allowed here (``extra="allow"``) because the loader reports them as findings
with their line (design §2); pydantic alone would drop or reject them without a line.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from cairn._util.names import bounded_part
from cairn.layout import COMPOSE_FILE_NAMES, find_compose_file  # noqa: F401 - re-exported
from cairn.netpolicy import NetworkMode, NetworkPolicy

STEP_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
"""Valid step names (design §1.1)."""

_SLUG_RE = re.compile(r"[^A-Za-z0-9._-]")


def task_slug(task_name: str) -> str:
    """The task name with characters outside ``[A-Za-z0-9._-]`` replaced by ``-`` (design §7).

    Example: ``org/two steps`` → ``org-two-steps``.
    """
    return _SLUG_RE.sub("-", task_name)


_NUMBERED_RE = re.compile(r"^0*(\d+)([-_.])(.+)$")


def step_folder_name(index: int, name: str) -> str:
    """A step's results folder name (design §7): ``<nn>-<name>``, nn the 1-based index on two
    digits — without doubling a number the name already starts with.

    A name that starts with the step's own number (``19-recall`` at index 19, ``1_setup`` at
    index 1) keeps its separator and rest, with the number written on two digits:
    ``19-recall``, ``01_setup`` (not ``19-19-recall``). Any other name is prefixed:
    ``01-main``, ``02-3-three``.

    Args:
        index: 1-based step index.
        name: the step name.

    Returns:
        The folder name, at most :data:`STEP_DIR_MAX_BYTES` bytes.
    """
    m = _NUMBERED_RE.match(name)
    if m and int(m.group(1)) == index:
        folder = f"{index:02d}{m.group(2)}{m.group(3)}"
    else:
        folder = f"{index:02d}-{name}"
    return bounded_part(folder, STEP_DIR_MAX_BYTES, key=name)


STEP_DIR_MAX_BYTES = 100
"""The longest step folder name, bytes; a longer one is shortened readably with a digest of
the step name (:func:`cairn._util.names.bounded_part`, issue #29)."""


DEFAULT_AGENT_TIMEOUT_SEC = 3600.0
"""Agent timeout when neither the task nor the step sets one (Evolve's default; design §1.1)."""

DEFAULT_VERIFIER_TIMEOUT_SEC = 600.0

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([KMG])\s*$", re.IGNORECASE)


def parse_size_mb(text: str) -> int | None:
    """A legacy size string in MiB, as Harbor 0.26 maps ``memory``/``storage``.

    ``"1G"`` → 1024, ``"512M"`` → 512, ``"2048K"`` → 2 (truncated, as Harbor's
    ``EnvironmentConfig._parse_size_to_mb``). Case-insensitive.

    Returns:
        The size in MiB, or ``None`` when the text is not ``<number><K|M|G>``.
    """
    m = _SIZE_RE.match(text)
    if not m:
        return None
    number, unit = float(m.group(1)), m.group(2).upper()
    return int(number * 1024) if unit == "G" else int(number) if unit == "M" else int(number / 1024)


DEFAULT_SETUP_TIMEOUT_SEC = 600.0
DEFAULT_PRE_ARTIFACTS_TIMEOUT_SEC = 300.0
"""Bound on ``pre_artifacts.sh`` (× the timeout multiplier), seconds."""
PRE_ARTIFACTS_SH = "pre_artifacts.sh"
"""Evolve's hook run after each agent phase, before artifact collection (task root or step)."""
DEFAULT_BUILD_TIMEOUT_SEC = 600.0
SINGLE_STEP_NAME = "main"
MAIN_SERVICE = "main"
"""The compose service that runs the agent (artifacts and collect hooks default to it)."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow", populate_by_name=True)


class Healthcheck(_Model):
    """A healthcheck (design §4.3): Docker HEALTHCHECK semantics run by cairn with execs.

    Units are seconds.
    """

    command: str
    interval_sec: float = 5.0
    timeout_sec: float = 30.0
    start_period_sec: float = 0.0
    start_interval_sec: float = 5.0
    retries: int = 3


class Artifact(_Model):
    """One artifact entry (design §4.5): a path string is ``Artifact(source=path)``.

    ``source`` is an absolute sandbox path; ``destination`` is relative to the step's
    ``artifacts/`` folder (default: the source path without its leading ``/``). ``service``
    names the compose service to collect from (``None`` or ``main``: the main container), as
    Harbor 0.26's ``ArtifactConfig.service``.
    """

    source: str
    destination: str | None = None
    exclude: tuple[str, ...] = ()
    service: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        if isinstance(value, str):
            return {"source": value}
        return value

    @property
    def effective_destination(self) -> str:
        """Destination relative to the artifacts folder."""
        return self.destination if self.destination is not None else self.source.lstrip("/")


class Author(_Model):
    """``[task].authors`` entry."""

    name: str | None = None
    email: str | None = None


class TaskInfo(_Model):
    """``[task]``: identity. ``name`` is ``org/name``; defaults to the folder name."""

    name: str | None = None
    version: str | None = None
    description: str | None = None
    authors: tuple[Author, ...] = ()
    keywords: tuple[str, ...] = ()


class AgentConfig(_Model):
    """``[agent]`` or ``[steps.agent]``: timeout in seconds, the user agents run as, and the
    agent phase's network (``network_mode``/``allowed_hosts`` override ``[environment]``'s for
    the agent phase; Harbor 0.26)."""

    timeout_sec: float | None = None
    user: str | int | None = None
    network_mode: NetworkMode | None = None
    allowed_hosts: tuple[str, ...] = ()


class TpuSpec(_Model):
    """``[environment.tpu]`` (Harbor 0.26): a TPU slice. cairn refuses it (no TPU backend)."""

    type: str | None = None
    topology: str | None = None


class EnvironmentConfig(_Model):
    """``[environment]`` (design §1.1). Units: seconds, cores, MiB."""

    build_timeout_sec: float = DEFAULT_BUILD_TIMEOUT_SEC
    docker_image: str | None = None
    workdir: str | None = None
    cpus: int | float | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None
    gpus: int = 0
    gpu_types: tuple[str, ...] | None = None
    tpu: TpuSpec | None = None
    skills_dir: str | None = None
    network_mode: NetworkMode | None = None
    allowed_hosts: tuple[str, ...] = ()
    allow_internet: bool | None = None
    env: dict[str, str] = Field(default_factory=dict)
    healthcheck: Healthcheck | None = None
    os: str = "linux"
    mcp_servers: tuple[dict[str, Any], ...] = ()
    memory: str | None = None
    storage: str | None = None
    """Legacy spellings (``"1G"``, ``"512M"``): applied as ``memory_mb``/``storage_mb`` with a
    deprecation warning by :meth:`_legacy_sizes` (as Harbor 0.26's loader maps them)."""

    @model_validator(mode="before")
    @classmethod
    def _legacy_sizes(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        value = dict(value)
        for legacy, field in (("memory", "memory_mb"), ("storage", "storage_mb")):
            raw = value.get(legacy)
            if isinstance(raw, str) and value.get(field) is None:
                mb = parse_size_mb(raw)
                if mb is not None:
                    value[field] = mb
        return value

    @property
    def effective_network_mode(self) -> NetworkMode:
        """``network_mode`` if given; else legacy ``allow_internet`` (false → no-network); else public."""
        if self.network_mode is not None:
            return self.network_mode
        if self.allow_internet is False:
            return NetworkMode.NO_NETWORK
        return NetworkMode.PUBLIC

    @property
    def network_policy(self) -> NetworkPolicy:
        """The environment's network policy (what the sandbox has outside agent and verifier
        phases, and in those phases when they set nothing)."""
        hosts = self.allowed_hosts if self.effective_network_mode is NetworkMode.ALLOWLIST else ()
        return NetworkPolicy(self.effective_network_mode, tuple(hosts))


def _phase_policy(
    configs: tuple[AgentConfig | VerifierConfig, ...], fallback: NetworkPolicy
) -> NetworkPolicy:
    """The first config (step's, then task's) that sets ``network_mode`` decides; else
    ``fallback``."""
    for cfg in configs:
        if cfg.network_mode is not None:
            hosts = cfg.allowed_hosts if cfg.network_mode is NetworkMode.ALLOWLIST else ()
            return NetworkPolicy(cfg.network_mode, tuple(hosts))
    return fallback


class CollectHook(_Model):
    """One ``[[verifier.collect]]`` entry (Harbor 0.26): a command run in a compose service
    after the agent phase, before artifacts are collected (design §4.5).

    Units: seconds. ``service`` ``main`` is the main container; hooks on other services run
    after the main container's agent phase has ended, before artifact collection.
    """

    command: str
    service: str = MAIN_SERVICE
    timeout_sec: float = 60.0
    user: str | int | None = None


class VerifierConfig(_Model):
    """``[verifier]`` or ``[steps.verifier]``.

    ``environment_mode`` unset with an ``environment`` table means ``separate`` (Harbor 0.26
    ``verifier_mode._resolve_mode``); ``shared`` together with a table is refused at load.
    """

    timeout_sec: float | None = None
    user: str | int | None = None
    env: dict[str, str] = Field(default_factory=dict)
    environment_mode: Literal["shared", "separate"] | None = None
    environment: EnvironmentConfig | None = None
    collect: tuple[CollectHook, ...] = ()
    network_mode: NetworkMode | None = None
    """The verifier phase's network mode (overrides ``[environment]``'s; Harbor 0.26)."""
    allowed_hosts: tuple[str, ...] = ()

    @property
    def declared_mode(self) -> Literal["shared", "separate"] | None:
        """The mode this table asks for: explicit, else ``separate`` when it has an
        ``environment`` table, else ``None`` (inherit)."""
        if self.environment_mode is not None:
            return self.environment_mode
        if self.environment is not None:
            return "separate"
        return None


class SolutionConfig(_Model):
    """``[solution]``: variables for the oracle only."""

    env: dict[str, str] = Field(default_factory=dict)


MinReward = float | dict[str, float]


class StepConfig(_Model):
    """One ``[[steps]]`` entry."""

    name: str
    min_reward: MinReward | None = None
    artifacts: tuple[Artifact, ...] = ()
    healthcheck: Healthcheck | None = None
    setup_timeout_sec: float = DEFAULT_SETUP_TIMEOUT_SEC
    agent: AgentConfig = Field(default_factory=AgentConfig)
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)

    @field_validator("min_reward", mode="before")
    @classmethod
    def _min_reward_numbers(cls, value: Any) -> Any:
        if value is None:
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float, dict)):
            raise ValueError("min_reward must be a number or a table of numbers")
        if isinstance(value, dict):
            for key, v in value.items():
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise ValueError(f"min_reward.{key} must be a number")
            return {k: float(v) for k, v in value.items()}
        return float(value)


class TaskConfig(_Model):
    """A whole task.toml (design §1.1), as written, defaults applied."""

    schema_version: str = Field(default="1.4", alias="schema_version")
    multi_step_reward_strategy: Literal["mean", "final"] = "mean"
    artifacts: tuple[Artifact, ...] = ()
    source: str | None = None
    task: TaskInfo = Field(default_factory=TaskInfo)
    metadata: dict[str, Any] = Field(default_factory=dict)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)
    solution: SolutionConfig = Field(default_factory=SolutionConfig)
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    steps: tuple[StepConfig, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _version_alias(cls, value: Any) -> Any:
        if isinstance(value, dict) and "version" in value and "schema_version" not in value:
            value = dict(value)
            value["schema_version"] = str(value.pop("version"))
        return value


class Step(BaseModel):
    """One step of a loaded task, with its files and effective settings resolved.

    Attributes:
        index: 1-based position in execution order.
        name: the step name (``main`` for a single-step task).
        instruction: the instruction text (canary lines not yet removed).
        test_sh: the test script that verifies this step (the step's own, else the shared one);
            ``None`` only when the task is invalid.
        tests_dirs: folders uploaded to ``/tests`` in order (shared ``tests/``, then
            ``steps/<name>/tests/``), those that exist.
        solution_dirs: folders uploaded to ``/solution`` in order (shared, then step).
        solve_sh: the oracle script (the step's, else the shared one), or ``None``.
        workdir_dir: ``steps/<name>/workdir/`` if it exists.
        agent_timeout_sec: effective agent timeout (step, else task, else 3600).
        agent_user: effective agent user (step, else task, else image default).
        verifier_timeout_sec: effective verifier timeout (step, else task, else 600).
        verifier_user: effective verifier user.
        verifier_env: merged verifier env templates (task ``[verifier].env`` then step's).
        verifier_mode: ``shared`` or ``separate``.
        verifier_environment: the separate verifier's environment, if any.
        min_reward: the gate (number or table), or ``None``.
        artifacts: task-level then step-level artifact entries.
        collect: ``[[verifier.collect]]`` hooks run before this step's artifacts are
            collected: the task's, then the step's (Harbor 0.26 ``_collect_hooks_for``).
        healthcheck: the step healthcheck, or ``None``.
        setup_timeout_sec: bound on ``workdir/setup.sh``.
        pre_artifacts_sh: ``steps/<name>/pre_artifacts.sh``, else the task root's
            ``pre_artifacts.sh`` (Evolve), or ``None``.
    """

    model_config = ConfigDict(frozen=True)

    index: int
    name: str
    instruction: str
    test_sh: Path | None
    tests_dirs: tuple[Path, ...] = ()
    solution_dirs: tuple[Path, ...] = ()
    solve_sh: Path | None = None
    workdir_dir: Path | None = None
    agent_timeout_sec: float = DEFAULT_AGENT_TIMEOUT_SEC
    agent_user: str | int | None = None
    verifier_timeout_sec: float = DEFAULT_VERIFIER_TIMEOUT_SEC
    verifier_user: str | int | None = None
    verifier_env: dict[str, str] = Field(default_factory=dict)
    verifier_mode: Literal["shared", "separate"] = "shared"
    verifier_environment: EnvironmentConfig | None = None
    min_reward: MinReward | None = None
    artifacts: tuple[Artifact, ...] = ()
    collect: tuple[CollectHook, ...] = ()
    healthcheck: Healthcheck | None = None
    setup_timeout_sec: float = DEFAULT_SETUP_TIMEOUT_SEC
    pre_artifacts_sh: Path | None = None

    @property
    def setup_sh(self) -> Path | None:
        """``steps/<name>/workdir/setup.sh`` if present (reserved name, design §1)."""
        if self.workdir_dir is None:
            return None
        p = self.workdir_dir / "setup.sh"
        return p if p.is_file() else None

    @property
    def dir_name(self) -> str:
        """The step's folder name in results (:func:`step_folder_name`, design §7)."""
        return step_folder_name(self.index, self.name)


class Task(BaseModel):
    """A loaded, validated task.

    Attributes:
        path: the task folder (absolute).
        name: ``[task].name``, else the folder name.
        config: the parsed task.toml.
        steps: the steps in execution order (one named ``main`` for a single-step task).
        multi_step: whether task.toml declared ``[[steps]]``.
        content_hash: sha256 hex of the task's files (names and bytes; mtimes ignored).
        env_hash: sha256 hex of ``environment/`` (names, bytes, exec bits) plus the image
            settings that change a build; keys the image cache.
        warnings: findings of severity warning found while loading.
    """

    model_config = ConfigDict(frozen=True)

    path: Path
    name: str
    config: TaskConfig
    steps: tuple[Step, ...]
    multi_step: bool
    content_hash: str
    env_hash: str
    warnings: tuple[Any, ...] = ()

    @property
    def environment(self) -> EnvironmentConfig:
        """The ``[environment]`` table."""
        return self.config.environment

    @property
    def env_dir(self) -> Path | None:
        """``environment/`` if it exists."""
        p = self.path / "environment"
        return p if p.is_dir() else None

    @property
    def seed_trajectory(self) -> Path | None:
        """The task's prior agent context, if it ships one: ``trajectory.json`` (ATIF) beside
        the first step's instruction — the task root for a single-step task,
        ``steps/<first>/`` for a multi-step one (Harbor 0.26 task-level seeding)."""
        first = self.path / "steps" / self.steps[0].name if self.multi_step and self.steps else self.path
        p = first / "trajectory.json"
        return p if p.is_file() else None

    @property
    def dockerfile(self) -> Path | None:
        """``environment/Dockerfile`` if it exists."""
        p = self.path / "environment" / "Dockerfile"
        return p if p.is_file() else None

    @property
    def compose_file(self) -> Path | None:
        """The environment's compose file (:func:`find_compose_file`), if any."""
        return find_compose_file(self.path / "environment")

    def _step_config(self, step: Step) -> StepConfig | None:
        if self.multi_step and 0 < step.index <= len(self.config.steps):
            return self.config.steps[step.index - 1]
        return None

    def agent_network(self, step: Step) -> NetworkPolicy:
        """The agent phase's network policy of ``step``: ``[steps.agent]``, else ``[agent]``,
        else ``[environment]`` (Harbor 0.26 per-phase semantics). Model hosts of an in-sandbox
        agent are added by the trial, not here."""
        sc = self._step_config(step)
        configs = ((sc.agent,) if sc else ()) + (self.config.agent,)
        return _phase_policy(configs, self.environment.network_policy)

    def verifier_network(self, step: Step) -> NetworkPolicy:
        """The verifier phase's network policy of ``step`` (shared verifier mode):
        ``[steps.verifier]``, else ``[verifier]``, else ``[environment]``."""
        sc = self._step_config(step)
        configs = ((sc.verifier,) if sc else ()) + (self.config.verifier,)
        return _phase_policy(configs, self.environment.network_policy)

    @property
    def slug(self) -> str:
        """The task name as a folder-name part (:func:`task_slug`)."""
        return task_slug(self.name)
