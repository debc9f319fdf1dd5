"""Job config files (``cairn run -c FILE``, repeatable): cairn's own job.yaml, or a Harbor 0.26
job YAML/JSON file, read into the keys of :class:`~cairn.plan.JobConfig` (design §8).

- A **cairn-shaped** file holds JobConfig keys under their API names or their flag spellings
  (``n-concurrent``, ``k``, ``ak``, …); an unknown key is refused.
- A **Harbor-shaped** file (it has a key only Harbor's ``JobConfig`` has — ``agents``,
  ``tasks``, ``n_attempts``, ``orchestrator``, ``environment``, … — or ``datasets`` entries
  that are mappings) is translated: the keys that have a cairn meaning are taken (tasks and
  datasets, the agent with its model, kwargs and env, attempts, concurrency, timeouts and
  their multipliers, retry settings, the environment type and resource overrides, verifier
  env, artifacts, extra instructions); every other key is reported as ignored with its
  ``file:line``; a key whose meaning cairn cannot honour and whose loss would change what the
  job measures (several agents, a simulated user, ``install_only: true``, a cloud environment
  type) is refused — only at a value that asks for it: a key at Harbor's default
  (``install_only: false``, ``user_agent: null``, ``source_jobs: []``) is taken as unset, so a
  Harbor job folder's ``config.json`` reads as it is. A value of the wrong type (Harbor's
  model's types: mappings, ``list[str]``, strings, numbers, bools) is refused with its line.

Every file's keys are then checked against :class:`~cairn.plan.JobConfig` on their own, so a
wrong value is refused as ``FILE:LINE: KEY: why`` before the merge.

Several files merge in order: a later file's value replaces an earlier one's, mappings
(``agent_kwargs``, ``agent_env``, ``verifier_env``, ``add_hosts``) merge key by key, and lists
replace (Harbor appends them; cairn does not). A Harbor ``agents`` list is a list too: a later
file's ``agents`` entry replaces the earlier agent as a whole — its name, model, kwargs, env,
hosts and ``resume_trajectory`` (:data:`AGENT_KEYS`), so kwargs of an earlier file's agent never
reach a later file's agent.

The field names and meanings of Harbor's side are those of Harbor 0.26
``harbor.models.job.config.JobConfig`` and ``harbor.models.trial.config`` (read, not copied).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cairn.errors import UsageError
from cairn.plan import JobConfig
from cairn.task.keylines import KeyLines, KeyPath, yaml_key_lines

FLAG_KEYS = {
    "from": "from_trial",
    "k": "attempts",
    "n": "n_concurrent",
    "a": "agent",
    "m": "model",
    "e": "backend",
    "p": "paths",
    "path": "paths",
    "env": "backend",
    "ak": "agent_kwargs",
    "ae": "agent_env",
    "ve": "verifier_env",
    "i": "include",
    "x": "exclude",
    "no_verify": "verify",
    "d": "datasets",
    "dataset": "datasets",
    "repo": "repos",
    "l": "n_tasks",
    "r": "max_retries",
    "artifact": "artifacts",
    "extra_instruction": "extra_instructions",
    "extra_instruction_path": "extra_instruction_paths",
    "environment_build_timeout_multiplier": "build_timeout_multiplier",
    "n_attempts": "attempts",
}
"""Flag spellings (and Harbor's names of the same option) accepted in a cairn-shaped file."""

LIST_KEYS = (
    "paths",
    "include",
    "exclude",
    "datasets",
    "repos",
    "artifacts",
    "extra_instructions",
    "extra_instruction_paths",
    "agent_hosts",
)
"""Keys whose value is a list (a single string is taken as a list of one)."""

MAP_KEYS = ("agent_kwargs", "agent_env", "verifier_env", "add_hosts")
"""Keys whose value is a mapping: merged key by key across files."""

AGENT_KEYS = ("agent", "model", "agent_kwargs", "agent_env", "agent_hosts", "resume_agent_session")
"""What one entry of a Harbor file's ``agents`` list sets: that file replaces all of them (an
absent field takes its default), as the list replaces an earlier file's list."""

CLI_KEYS = ("quiet",)
"""Keys a file may hold that the command line uses (display), not the job config."""

HARBOR_ONLY_KEYS = frozenset(
    {
        "schema_version",
        "n_attempts",
        "install_only",
        "skip_credential_checks",
        "environment_build_timeout_multiplier",
        "debug",
        "n_concurrent_trials",
        "retry",
        "override_error_policy",
        "environment",
        "verifier",
        "metrics",
        "agents",
        "user_agent",
        "tasks",
        "source_jobs",
        "orchestrator",
        "plugins",
    }
)
"""Top-level keys of Harbor 0.26's ``JobConfig`` (and its legacy ``orchestrator``/``plugins``)
that a cairn job.yaml never has: any of them makes a file Harbor-shaped."""

HARBOR_AGENT_NAMES = {"qwen-coder": "qwen-code"}
"""Harbor agent names cairn spells differently."""

HARBOR_ENV_TYPES = {"docker": "docker"}
"""Harbor ``environment.type`` values cairn runs (and its backend for each)."""

CAIRN_ENV_IMPORT_PATHS = {"cairn:local": "local", "cairn:docker": "docker"}
"""``environment.import_path`` values of cairn's own Harbor export (a backend Harbor has no
``type`` for, :func:`cairn.results.harbor.job_config_doc`), read back as that backend: the
``config.json`` of an exported local job runs again with ``cairn run -c``. Harbor itself cannot
import them (docs/export.md)."""


@dataclass(frozen=True)
class ConfigNote:
    """A key of a config file cairn did not take, with where it is written.

    Attributes:
        path: the file.
        line: the 1-based line of the key, or ``None`` when unknown.
        key: the key path, dotted (``agents[0].n_concurrent``).
        text: why it is ignored.
    """

    path: Path
    line: int | None
    key: str
    text: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else str(self.path)
        return f"{where}: warning: {self.key}: {self.text}"


@dataclass
class ConfigFile:
    """One read config file.

    Attributes:
        path: the file.
        harbor: whether it was Harbor-shaped (and translated).
        data: its options as JobConfig keys (plus :data:`CLI_KEYS`).
        notes: the keys it holds that were ignored.
        replaces: keys whose earlier values this file replaces as a whole, mappings too
            (:data:`AGENT_KEYS` for a Harbor file with ``agents``); see :func:`merge_configs`.
    """

    path: Path
    harbor: bool
    data: dict[str, Any]
    notes: list[ConfigNote] = field(default_factory=list)
    replaces: frozenset[str] = frozenset()


def _dotted(path: KeyPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def is_harbor_shaped(data: Mapping[str, Any]) -> bool:
    """Whether a parsed config file is a Harbor job config (see the module docstring)."""
    if HARBOR_ONLY_KEYS & {str(k) for k in data}:
        return True
    datasets = data.get("datasets")
    return isinstance(datasets, list) and any(isinstance(d, dict) for d in datasets)


def read_config_file(path: Path) -> ConfigFile:
    """Read one ``-c`` file (YAML or JSON), cairn-shaped or Harbor-shaped.

    Args:
        path: the file.

    Returns:
        The :class:`ConfigFile`: JobConfig keys, and the ignored keys with their lines.

    Raises:
        UsageError: the file cannot be read or parsed, is not a mapping, holds an unknown key
            (cairn-shaped), a key cairn refuses (Harbor-shaped), or names an
            ``extra_instruction_paths`` file that cannot be read.
    """
    import yaml

    from cairn._util.inputfiles import InputFileError, load_yaml, read_input_text

    path = Path(path)
    try:
        text = read_input_text(path)
        data = load_yaml(text, path) or {}
    except InputFileError as exc:
        raise UsageError(str(exc) if exc.line is None else f"{path}:{exc.line}: {exc.reason}") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"{path}: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a mapping of options")
    try:
        lines = yaml_key_lines(text)
    except yaml.YAMLError:
        lines = KeyLines({})
    if is_harbor_shaped(data):
        reader = _HarborReader(path, lines)
        out = _with_instruction_files(reader.translate(data), path, lines)
        _check_values(
            out,
            path,
            lines,
            {v[0]: k for k, v in _SAME_KEYS.items()} | {"n_concurrent": "n_concurrent_trials"},
        )
        return ConfigFile(path, True, out, reader.notes, frozenset(reader.replaces))
    out = _with_instruction_files(_cairn_keys(data), path, lines)
    _check_values(out, path, lines, {_cairn_name(str(k)): str(k) for k in data})
    return ConfigFile(path, False, out)


def _check_values(data: Mapping[str, Any], path: Path, lines: KeyLines, spelled: Mapping[str, str]) -> None:
    """Validate one file's JobConfig keys on their own (JobConfig has no cross-field rules),
    so a wrong value is refused with the file and line of its key, not after the merge.

    Args:
        data: the file's keys under cairn's names (plus :data:`CLI_KEYS`).
        path: the file.
        lines: its key lines.
        spelled: cairn's name of a key -> its spelling in the file (for the line).

    Raises:
        UsageError: ``FILE:LINE: KEY: why`` for the first key JobConfig refuses.
    """
    from pydantic import ValidationError

    try:
        JobConfig.model_validate({k: v for k, v in data.items() if k not in CLI_KEYS})
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = err.get("loc") or ()
        name = str(loc[0]) if loc else ""
        key = spelled.get(name, name)
        line = lines.line((key,)) if key else None
        where = f"{path}:{line}" if line else str(path)
        why = str(err.get("msg", exc)).removeprefix("Value error, ")
        if err.get("type") == "extra_forbidden":
            why = "not a key of cairn's job config"
        raise UsageError(f"{where}: {key}: {why}" if key else f"{where}: {why}") from None


def _cairn_keys(data: Mapping[str, Any]) -> dict[str, Any]:
    """A cairn-shaped file's keys under their API names (unknown keys are left for JobConfig
    to refuse)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        raw = str(key).replace("-", "_").lstrip("_")
        k = _cairn_name(str(key))
        if raw == "no_verify":
            value = not value
        if k in LIST_KEYS and isinstance(value, str):
            value = [value]
        out[k] = value
    return out


def _cairn_name(key: str) -> str:
    """A cairn-shaped file's key under its JobConfig name (``n-concurrent`` -> n_concurrent)."""
    raw = key.replace("-", "_").lstrip("_")
    return FLAG_KEYS.get(raw, raw)


def _with_instruction_files(data: dict[str, Any], path: Path, lines: KeyLines) -> dict[str, Any]:
    """``extra_instruction_paths`` read into ``extra_instructions`` (file contents first, as
    Harbor appends them before the inline texts). Paths are taken from the current folder.

    Raises:
        UsageError: a file cannot be read (with the key's line).
    """
    files = data.pop("extra_instruction_paths", None)
    if not files:
        return data
    texts = []
    for i, f in enumerate(files):
        try:
            texts.append(_read_instruction_file(Path(str(f)).expanduser()))
        except OSError as exc:
            line = lines.line(("extra_instruction_paths", i))
            raise UsageError(
                f"{path}:{line or '?'}: extra instruction file {f}: {exc.strerror or exc}"
            ) from None
    data["extra_instructions"] = texts + list(data.get("extra_instructions") or [])
    return data


def read_instruction_files(files: Iterable[Path]) -> list[str]:
    """``--extra-instruction-path`` files read, in order.

    Raises:
        UsageError: a file cannot be read.
    """
    out = []
    for f in files:
        try:
            out.append(_read_instruction_file(Path(f).expanduser()))
        except OSError as exc:
            raise UsageError(f"--extra-instruction-path {f}: {exc.strerror or exc}") from None
    return out


def _read_instruction_file(path: Path) -> str:
    """An extra instruction file's text (regular file, size-capped, UTF-8).

    Raises:
        OSError: refused or unreadable; ``strerror`` says why.
    """
    from cairn._util.inputfiles import InputFileError, read_input_text

    try:
        return read_input_text(path)
    except InputFileError as exc:
        raise OSError(0, exc.reason) from None


def merge_configs(layers: Sequence[Mapping[str, Any] | ConfigFile]) -> dict[str, Any]:
    """Merge config layers in order: later values replace earlier ones, the mappings of
    :data:`MAP_KEYS` merge key by key, lists replace; a :class:`ConfigFile` replaces the keys
    of its ``replaces`` as a whole (a Harbor ``agents`` entry: the earlier agent's kwargs and
    env are dropped, not merged into the new agent's).

    Args:
        layers: read config files or JobConfig-keyed mappings, earliest first (files, then
            the flags).

    Returns:
        The merged mapping.
    """
    out: dict[str, Any] = {}
    for layer in layers:
        data, replaces = (
            (layer.data, layer.replaces) if isinstance(layer, ConfigFile) else (layer, frozenset())
        )
        for k in replaces:
            out.pop(k, None)
        for k, v in data.items():
            if k in MAP_KEYS and isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
                out[k] = {**out[k], **v}
            else:
                out[k] = v
    return out


class _HarborReader:
    """Translates one Harbor-shaped mapping; collects the ignored keys as notes."""

    def __init__(self, path: Path, lines: KeyLines) -> None:
        self.path = path
        self.lines = lines
        self.notes: list[ConfigNote] = []
        self.replaces: set[str] = set()

    def ignore(self, key: KeyPath, why: str) -> None:
        self.notes.append(ConfigNote(self.path, self.lines.line(key), _dotted(key), f"ignored: {why}"))

    def refuse(self, key: KeyPath, why: str) -> UsageError:
        line = self.lines.line(key)
        where = f"{self.path}:{line}" if line else str(self.path)
        return UsageError(f"{where}: {_dotted(key)}: {why}")

    def want(self, key: KeyPath, value: Any, kind: str, *, optional: bool = False) -> Any:
        """``value`` when it is of ``kind`` (a key of :data:`_KINDS`), else the reader's
        usage error with the key's line; ``None`` passes when ``optional`` (Harbor's
        ``X | None`` fields, whose default is ``None``)."""
        if value is None and optional:
            return None
        types, name = _KINDS[kind]
        if isinstance(value, bool) and bool not in types:  # YAML true is not a number
            raise self.refuse(key, f"expected {name}, not {value!r}")
        if not isinstance(value, types):
            shown = type(value).__name__ if isinstance(value, (dict, list)) else repr(value)
            raise self.refuse(key, f"expected {name}, not {shown}")
        return value

    def strings(self, key: KeyPath, value: Any) -> list[str]:
        """A Harbor ``list[str]`` field (``None`` is the empty list)."""
        items = self.want(key, value, "list", optional=True) or []
        return [str(self.want((*key, i), v, "scalar")) for i, v in enumerate(items)]

    def env(self, key: KeyPath, value: Any) -> dict[str, str]:
        """A Harbor ``dict[str, str]`` env field (``None`` is the empty mapping)."""
        items = self.want(key, value, "mapping", optional=True) or {}
        return {str(a): str(self.want((*key, str(a)), b, "scalar")) for a, b in items.items()}

    def translate(self, data: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in data.items():
            k = str(key)
            handler = getattr(self, f"_k_{k}", None)
            if k in _SAME_KEYS:
                name, kind, optional = _SAME_KEYS[k]
                if self.want((k,), value, kind, optional=optional) is not None:
                    out[name] = value
            elif handler is not None:
                handler(value, out)
            elif k in _IGNORED_TOP:
                if value not in (None, [], {}, False):
                    self.ignore((k,), _IGNORED_TOP[k])
            elif k in _REFUSED_TOP:
                if value not in (None, [], {}, False):  # Harbor's defaults mean nothing to do
                    raise self.refuse((k,), _REFUSED_TOP[k])
            elif k in JobConfig.model_fields or k in CLI_KEYS:  # cairn's own key, as is
                out[k] = [value] if k in LIST_KEYS and isinstance(value, str) else value
            else:
                self.ignore((k,), "not a key of Harbor 0.26's JobConfig, nor of cairn's")
        self._own_folder(out)
        return out

    def _own_folder(self, out: dict[str, Any]) -> None:
        """A Harbor job folder's own ``config.json`` (Harbor's, or cairn's export) names that
        folder as ``jobs_dir``/``job_name``: a Harbor job, which a cairn run must not write
        into. Those two keys are left out (noted), so the run is a new cairn job."""
        name, parent = out.get("job_name"), out.get("jobs_dir")
        if not isinstance(name, str) or not isinstance(parent, str):
            return
        with contextlib.suppress(OSError, ValueError):
            if (Path(parent) / name).resolve() == self.path.absolute().parent.resolve():
                del out["job_name"], out["jobs_dir"]
                self.ignore(
                    ("job_name",),
                    f"job_name {name!r} and jobs_dir name the Harbor "
                    "job folder this file is in; cairn runs it as a new job (default "
                    "./jobs; give --job-name/-o)",
                )

    def _k_cairn(self, value: Any, out: dict[str, Any]) -> None:
        if isinstance(value, dict) and str(value.get("schema", "")).startswith("cairn.harbor-export/"):
            self.ignore(
                ("cairn",), "cairn's export record of the job (cairn.config); the run takes the Harbor keys"
            )
        else:
            self.ignore(("cairn",), "not a key of Harbor 0.26's JobConfig, nor of cairn's")

    # ---- top-level keys with a translation ---------------------------------------------
    def _k_schema_version(self, value: Any, out: dict[str, Any]) -> None:
        if value not in (1, "1", None):
            raise self.refuse(
                ("schema_version",),
                f"Harbor job config version {value!r} is not known (cairn reads version 1, Harbor 0.26)",
            )

    def _k_n_concurrent_trials(self, value: Any, out: dict[str, Any]) -> None:
        out["n_concurrent"] = self.want(("n_concurrent_trials",), value, "integer")

    def _k_quiet(self, value: Any, out: dict[str, Any]) -> None:
        out["quiet"] = self.want(("quiet",), value, "bool")

    def _k_orchestrator(self, value: Any, out: dict[str, Any]) -> None:
        if not isinstance(value, dict):
            raise self.refuse(("orchestrator",), "expected a mapping")
        for k, v in value.items():
            key = ("orchestrator", str(k))
            if k == "n_concurrent_trials":
                out.setdefault("n_concurrent", self.want(key, v, "integer"))
            elif k == "quiet":
                out.setdefault("quiet", self.want(key, v, "bool"))
            elif k == "retry":
                self._retry(v, out, key)
            elif k == "type":
                if self.want(key, v, "string", optional=True) not in (None, "local"):
                    raise self.refuse(
                        key,
                        f"orchestrator type {v!r}: cairn orchestrates "
                        "locally (or on Ray with --executor ray)",
                    )
            else:
                self.ignore(key, "no cairn meaning")

    def _k_retry(self, value: Any, out: dict[str, Any]) -> None:
        self._retry(value, out, ("retry",))

    def _retry(self, value: Any, out: dict[str, Any], at: KeyPath) -> None:
        if not isinstance(value, dict):
            raise self.refuse(at, "expected a mapping")
        for k, v in value.items():
            key = (*at, str(k))
            if k == "max_retries":
                out["max_retries"] = self.want(key, v, "integer")
            elif k == "min_wait_sec":
                out["retry_backoff_sec"] = self.want(key, v, "number")
            elif k in ("include_exceptions", "exclude_exceptions"):
                if v is not None:
                    self.ignore(
                        key,
                        "cairn retries by error category (infrastructure errors only), not by exception type",
                    )
            elif k in ("wait_multiplier", "max_wait_sec"):
                if v != _RETRY_DEFAULTS[str(k)]:
                    self.ignore(
                        key,
                        "cairn doubles the retry delay each time, from "
                        "retry_backoff_sec (min_wait_sec), without a cap",
                    )
            else:
                self.ignore(key, "not a Harbor 0.26 retry key")

    def _k_environment(self, value: Any, out: dict[str, Any]) -> None:
        if not isinstance(value, dict):
            raise self.refuse(("environment",), "expected a mapping")
        imported: str | None = None  # Harbor's factory takes import_path over type
        for k, v in value.items():
            key = ("environment", str(k))
            if k == "type":
                if self.want(key, v, "string", optional=True) is None:
                    continue
                if v not in HARBOR_ENV_TYPES:
                    raise self.refuse(
                        key, f"environment type {v!r}: cairn runs sandboxes on docker or local (give -e)"
                    )
                out["backend"] = HARBOR_ENV_TYPES[v]
            elif k == "force_build":
                out["force_build"] = self.want(key, v, "bool")
            elif k in ("override_cpus", "override_memory_mb", "override_storage_mb"):
                kind = "number" if k == "override_cpus" else "integer"
                if self.want(key, v, kind, optional=True) is not None:
                    out[k] = v
            elif k == "import_path":
                if v is None:
                    continue
                if v not in CAIRN_ENV_IMPORT_PATHS:
                    raise self.refuse(
                        key, "a custom environment class: cairn's backends are docker and local"
                    )
                imported = CAIRN_ENV_IMPORT_PATHS[v]
            elif k == "delete":
                if self.want(key, v, "bool") is False:
                    self.ignore(
                        key,
                        "cairn removes every sandbox; --keep-sandbox keeps those of trials that did not pass",
                    )
            elif k in ("override_gpus", "override_tpu"):
                if v is not None:
                    raise self.refuse(key, "cairn does not override a task's GPUs/TPUs")
            elif str(k) in _ENVIRONMENT_DEFAULTS and v == _ENVIRONMENT_DEFAULTS[str(k)]:
                continue  # Harbor's default: nothing lost
            else:
                self.ignore(key, _ENVIRONMENT_IGNORED.get(str(k), "no cairn meaning"))
        if imported is not None:
            out["backend"] = imported

    def _k_verifier(self, value: Any, out: dict[str, Any]) -> None:
        if not isinstance(value, dict):
            raise self.refuse(("verifier",), "expected a mapping")
        for k, v in value.items():
            key = ("verifier", str(k))
            if k == "env":
                out["verifier_env"] = self.env(key, v)
            elif k == "disable":
                out["verify"] = not self.want(key, v, "bool")
            elif k == "import_path" and v is not None:
                raise self.refuse(
                    key, "a custom verifier class: cairn runs the task's tests/test.sh (or its judge)"
                )
            elif k in ("override_timeout_sec", "max_timeout_sec") and v is not None:
                self.ignore(
                    key,
                    "cairn takes verifier timeouts from the task; scale them "
                    "with verifier_timeout_multiplier",
                )
            elif v in (None, [], {}):
                continue
            else:
                self.ignore(key, "no cairn meaning")

    def _k_agents(self, value: Any, out: dict[str, Any]) -> None:
        if not isinstance(value, list) or not value:
            raise self.refuse(("agents",), "expected a list of one agent")
        if len(value) > 1:
            raise self.refuse(
                ("agents", 1),
                "cairn runs one agent per job; split the agents into one config (or -a flag) per job",
            )
        agent = value[0]
        if not isinstance(agent, dict):
            raise self.refuse(("agents", 0), "expected a mapping")
        # the entry is the whole agent: what it does not set is the default, not an earlier
        # file's value (Harbor's AgentConfig defaults; no name and no import_path = oracle)
        self.replaces.update(AGENT_KEYS)
        for k, v in agent.items():
            key = ("agents", 0, str(k))
            if k == "name" and self.want(key, v, "string", optional=True) is not None:
                out["agent"] = HARBOR_AGENT_NAMES.get(v, v)
            elif k == "import_path" and self.want(key, v, "string", optional=True) is not None:
                out["agent"] = v
            elif k == "model_name":
                if self.want(key, v, "string", optional=True) is not None:
                    out["model"] = v
            elif k == "kwargs":
                out["agent_kwargs"] = dict(self.want(key, v, "mapping", optional=True) or {})
            elif k == "env":
                out["agent_env"] = self.env(key, v)
            elif k == "extra_allowed_hosts":
                out["agent_hosts"] = self.strings(key, v)
            elif k == "resume_trajectory":
                out["resume_agent_session"] = self.want(key, v, "bool")
            elif (
                k in ("override_timeout_sec", "override_setup_timeout_sec", "max_timeout_sec")
                and v is not None
            ):
                self.ignore(
                    key,
                    "cairn takes agent timeouts from the task; scale them with "
                    "agent_timeout_multiplier / agent_setup_timeout_multiplier",
                )
            elif k in ("load_trajectory",) and v is not None:
                raise self.refuse(
                    key,
                    "cairn does not load a recorded session into the first "
                    "step (--start-step with --from starts from a snapshot)",
                )
            elif v in (None, [], {}, False):
                continue
            else:
                self.ignore(key, _AGENT_IGNORED.get(str(k), "no cairn meaning"))

    def _k_tasks(self, value: Any, out: dict[str, Any]) -> None:
        if not isinstance(value, list):
            raise self.refuse(("tasks",), "expected a list")
        paths = out.setdefault("paths", [])
        for i, t in enumerate(value):
            key: KeyPath = ("tasks", i)
            if isinstance(t, str):
                t = {"path": t}
            if not isinstance(t, dict):
                raise self.refuse(key, "expected a mapping with path")
            if t.get("git_url") or t.get("name"):
                raise self.refuse(
                    key,
                    "a git or package task: give cairn the repository "
                    "(--repo URL@COMMIT --repo-path PATH) or a local folder",
                )
            if not t.get("path"):
                raise self.refuse(key, "a task needs path")
            paths.append(self.want((*key, "path"), t["path"], "string"))
            for k, v in t.items():
                if k not in ("path", "source") and v not in (None, False):
                    self.ignore((*key, str(k)), "no cairn meaning for a local task")

    def _k_datasets(self, value: Any, out: dict[str, Any]) -> None:
        if not isinstance(value, list):
            raise self.refuse(("datasets",), "expected a list")
        filters: list[tuple[KeyPath, str, Any]] = []
        sources = 0
        for i, d in enumerate(value):
            key: KeyPath = ("datasets", i)
            if isinstance(d, str):  # cairn's own spelling in a Harbor file
                out.setdefault("datasets", []).append(d)
                sources += 1
                continue
            if not isinstance(d, dict):
                raise self.refuse(key, "expected a mapping (path, or name and version)")
            if d.get("repo"):
                raise self.refuse(
                    (*key, "repo"),
                    "a git registry: give cairn a registry "
                    "file (registry_path) or the task repository (--repo)",
                )
            for k in ("path", "name", "registry_url", "registry_path"):
                self.want((*key, k), d.get(k), "string", optional=True)
            for k in ("version", "ref"):
                self.want((*key, k), d.get(k), "scalar", optional=True)
            if d.get("path") is not None:
                out.setdefault("paths", []).append(str(d["path"]))
            elif d.get("name"):
                ref = d.get("version") or d.get("ref")
                out.setdefault("datasets", []).append(f"{d['name']}@{ref}" if ref else str(d["name"]))
            else:
                raise self.refuse(key, "a dataset needs path or name")
            sources += 1
            for k, v in d.items():
                sub = (*key, str(k))
                if k in ("path", "name", "version", "ref"):
                    continue
                if k in ("registry_url", "registry_path"):
                    if v is not None:
                        if out.get(k) not in (None, str(v)):
                            raise self.refuse(sub, "cairn reads every dataset of a job from one registry")
                        out[k] = str(v)
                elif k in ("task_names", "exclude_task_names", "n_tasks"):
                    if k == "n_tasks":
                        self.want(sub, v, "integer", optional=True)
                    elif not isinstance(v, str):
                        v = self.strings(sub, v) or None  # Harbor: list[str] | None
                    if v is not None:
                        filters.append((sub, str(k), v))
                elif v not in (None, False):
                    self.ignore(
                        sub,
                        "cairn caches fetched tasks by content itself"
                        if k in ("overwrite", "download_dir")
                        else "no cairn meaning",
                    )
        for sub, k, v in filters:  # cairn's filters apply to the whole job
            target = {"task_names": "include", "exclude_task_names": "exclude", "n_tasks": "n_tasks"}[k]
            if target == "n_tasks":
                if sources > 1:
                    self.ignore(
                        sub,
                        "cairn's n_tasks limits the whole job, not one dataset "
                        "of several (give n_tasks at the top)",
                    )
                    continue
                out["n_tasks"] = v
            else:
                out.setdefault(target, []).extend([v] if isinstance(v, str) else list(v))
                if sources > 1:
                    self.notes.append(
                        ConfigNote(
                            self.path,
                            self.lines.line(sub),
                            _dotted(sub),
                            f"applied to every task of the job ({target}), not only this dataset's",
                        )
                    )

    def _k_artifacts(self, value: Any, out: dict[str, Any]) -> None:
        items = []
        for i, a in enumerate(self.want(("artifacts",), value, "list", optional=True) or []):
            if isinstance(a, str):
                items.append(a)
            elif isinstance(a, dict) and a.get("source"):
                items.append(self.want(("artifacts", i, "source"), a["source"], "string"))
                for k, v in a.items():
                    if k != "source" and v not in (None, [], "main"):
                        self.ignore(
                            ("artifacts", i, str(k)),
                            "an --artifact path is kept under its own path in the step's artifacts/",
                        )
            else:
                raise self.refuse(("artifacts", i), "expected a path or {source: PATH}")
        out["artifacts"] = items

    def _k_extra_instruction_paths(self, value: Any, out: dict[str, Any]) -> None:
        out["extra_instruction_paths"] = self.strings(("extra_instruction_paths",), value)

    def _k_extra_instructions(self, value: Any, out: dict[str, Any]) -> None:
        out["extra_instructions"] = self.strings(("extra_instructions",), value)


_SAME_KEYS: dict[str, tuple[str, str, bool]] = {
    "job_name": ("job_name", "string", False),
    "jobs_dir": ("jobs_dir", "string", False),
    "n_attempts": ("attempts", "integer", False),
    "timeout_multiplier": ("timeout_multiplier", "number", False),
    "agent_timeout_multiplier": ("agent_timeout_multiplier", "number", True),
    "verifier_timeout_multiplier": ("verifier_timeout_multiplier", "number", True),
    "agent_setup_timeout_multiplier": ("agent_setup_timeout_multiplier", "number", True),
    "environment_build_timeout_multiplier": ("build_timeout_multiplier", "number", True),
}
"""Harbor keys taken as they are: (cairn's name, the kind of value, whether ``None`` — Harbor's
default for the optional multipliers — is allowed and means cairn's default)."""

_KINDS: dict[str, tuple[tuple[type, ...], str]] = {
    "mapping": ((dict,), "a mapping"),
    "list": ((list,), "a list"),
    "string": ((str,), "a string"),
    "scalar": ((str, int, float), "a string"),
    "number": ((int, float), "a number"),
    "integer": ((int,), "an integer"),
    "bool": ((bool,), "true or false"),
}
"""The value kinds :meth:`_HarborReader.want` checks: accepted Python types, name in errors."""

_RETRY_DEFAULTS = {"wait_multiplier": 1.0, "max_wait_sec": 60.0}
"""Harbor 0.26 ``RetryConfig`` defaults of the keys cairn ignores: at these, no note."""

_ENVIRONMENT_DEFAULTS: dict[str, Any] = {
    "stream": False,
    "cpu_enforcement_policy": "auto",
    "memory_enforcement_policy": "auto",
    "mounts": None,
    "extra_docker_compose": [],
    "kwargs": {},
    "extra_allowed_hosts": [],
    "env": {},
    "suppress_override_warnings": False,
}
"""Harbor 0.26 ``EnvironmentConfig`` defaults of the keys cairn ignores: at these, no note."""

_IGNORED_TOP = {
    "debug": "set CAIRN_DEBUG=1 for tracebacks; cairn's logs are always written",
    "skip_credential_checks": "cairn checks an agent's options before the job and its "
    "credentials when the model is first called",
    "override_error_policy": "cairn's error vocabulary decides what is retried (design §6)",
    "metrics": "cairn reports the mean reward, pass rate and pass@k (cairn report)",
    "plugins": "cairn has no job plugins",
}
_REFUSED_TOP = {
    "install_only": "cairn has no install-only mode (cairn agents prepare installs CLI agents "
    "ahead of a run)",
    "user_agent": "cairn has no simulated user",
    "source_jobs": "use `cairn regrade JOB_DIR` to re-grade a job",
}
_ENVIRONMENT_IGNORED = {
    "cpu_enforcement_policy": "cairn applies a task's CPU count as a limit",
    "memory_enforcement_policy": "cairn applies a task's memory as a limit",
    "mounts": "cairn mounts nothing from the host into a task's sandbox",
    "extra_docker_compose": "cairn uses the task's own compose file only",
    "env": "cairn passes the task's [environment.env] only",
    "kwargs": "cairn's backends take no keyword arguments",
    "extra_allowed_hosts": "cairn takes the task's allowlist (and --allow-agent-host for agent phases)",
    "stream": "no cairn meaning",
    "suppress_override_warnings": "no effect in Harbor either",
}
_AGENT_IGNORED = {
    "n_concurrent": "cairn bounds concurrency per job (n_concurrent)",
    "concurrency_group": "cairn bounds concurrency per job (n_concurrent)",
    "skills": "cairn takes a task's skills from the task ([environment].skills_dir)",
    "mcp_servers": "cairn takes MCP servers from the task ([environment].mcp_servers)",
    "base_url": "give the endpoint to the agent through its kwargs or env",
    "model_api_key_name": "cairn agents read their provider's usual key variable",
    "model_api_format": "no cairn meaning",
    "skip_model_parsing": "no cairn meaning",
    "include_logs": "cairn keeps every agent log",
    "exclude_logs": "cairn keeps every agent log",
}


__all__ = [
    "CLI_KEYS",
    "ConfigFile",
    "ConfigNote",
    "is_harbor_shaped",
    "merge_configs",
    "read_config_file",
    "read_instruction_files",
]
