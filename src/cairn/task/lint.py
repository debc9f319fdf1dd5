"""Task lint: the authoring mistakes ``cairn tasks check`` warns about (docs/lint.md, issue 19).

Every finding of the task check carries a stable rule id (:data:`RULES`); this module holds
the catalogue, the ``--select``/``--ignore`` selection (:class:`RuleSelection`) and the lint
rules that read more than task.toml (:func:`lint_task`): the environment's compose file and
Dockerfiles, the verifier's scripts and Python files, the artifact list and the agent user.
The rule ids follow Harbor 0.26's ``harbor task lint`` names where a rule means the same
(``compose-privileged``, ``unpinned-python-dependency`` …), so a Harbor user's ``--ignore``
lists carry over.

The rules are static: nothing is built or started, and no variable of the host is read: a
compose file is interpolated with the variables cairn itself gives it
(:data:`COMPOSE_VARIABLES`) and the task's literal ``[environment.env]`` values.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from cairn._util.inputfiles import InputFileError, load_yaml, read_input
from cairn.errors import UsageError
from cairn.layout import (
    AGENT_LOGS_DIR,
    ARTIFACTS_DIR,
    LOGS_DIR,
    VERIFIER_LOGS_DIR,
    find_compose_file,
)
from cairn.task.findings import ERROR, INVALID_CONFIG, INVALID_FILES, WARNING, Finding, Severity
from cairn.task.keylines import KeyLines, KeyPath, yaml_key_lines
from cairn.task.model import Artifact, Step, Task
from cairn.task.scan import (
    Command,
    command_python_requirements,
    dockerfile_instructions,
    fetch_of,
    requirement_pinned,
    script_metadata,
    shell_commands,
)


@dataclass(frozen=True)
class Rule:
    """One rule of the task check.

    Attributes:
        id: the stable id (lower-case words joined by ``-``).
        severity: ``"warning"`` (selectable with ``--select``/``--ignore``, an error under
            ``--strict``) or ``"error"`` (always reported: the run refuses the task).
        summary: one line saying what the rule finds.
    """

    id: str
    severity: Severity
    summary: str


RULES: dict[str, Rule] = {
    r.id: r
    for r in (
        # errors: never deselected (a run refuses the task)
        Rule(INVALID_CONFIG, ERROR, "a task.toml key or value the run refuses"),
        Rule(INVALID_FILES, ERROR, "a missing, unreadable or misplaced task file or folder"),
        Rule("backend-unsupported", ERROR, "something the chosen backend cannot run (-e)"),
        # validation warnings (also in a run's warnings)
        Rule("unknown-config-field", WARNING, "a task.toml key cairn does not know"),
        Rule("undeclared-step-folder", WARNING, "a steps/<name>/ folder no [[steps]] entry declares"),
        Rule("unused-instruction", WARNING, "a root instruction.md in a multi-step task"),
        Rule(
            "unpinned-image",
            WARNING,
            "an image without a tag or with :latest (Dockerfile FROM, compose image:, docker_image)",
        ),
        Rule("script-crlf", WARNING, "test.sh, solve.sh or setup.sh with CRLF line endings"),
        Rule(
            "too-big-to-check",
            WARNING,
            "a script or Dockerfile over the 1 MiB cairn reads for its checks (it still runs)",
        ),
        Rule("script-set-e", WARNING, "a test.sh using set -e that may exit before its reward"),
        Rule("mcp-download-no-network", WARNING, "an npx/uvx MCP server under a no-network agent"),
        Rule(
            "mcp-remote-no-network",
            WARNING,
            "an sse/streamable-http MCP server outside the sandbox under a no-network agent",
        ),
        Rule("judge-no-network", WARNING, "a judge credential under a no-network verifier"),
        Rule("harbor-task-name", WARNING, "a [task].name that Harbor 0.26 refuses"),
        Rule("deprecated-size-key", WARNING, "legacy memory/storage instead of memory_mb/storage_mb"),
        Rule("gpu-types-without-gpus", WARNING, "gpu_types without gpus > 0"),
        # preflight warnings (what the run says before it starts)
        Rule("template-unset", WARNING, "a ${VAR} template whose variable is unset in this shell"),
        Rule("unsupported-key", WARNING, "a Harbor 0.26 key cairn reads but does not apply"),
        Rule("backend-limit", WARNING, "a setting the chosen backend cannot apply"),
        Rule("backend-unavailable", WARNING, "the backend could not be asked"),
        # lint rules (tasks check only)
        Rule(
            "compose-privileged",
            WARNING,
            "a compose service with privileged: true (or host "
            "namespaces, devices, unconfined security options)",
        ),
        Rule("compose-additional-capabilities", WARNING, "a compose service with cap_add"),
        Rule("compose-external-bind-mount", WARNING, "a bind mount of a host path outside the task folder"),
        Rule("compose-writable-bind-mount", WARNING, "a writable bind mount of the task's own files"),
        Rule("compose-symlink-bind-mount", WARNING, "a bind source that goes through a symlink"),
        Rule("compose-external-volume", WARNING, "a compose volume declared external: true"),
        Rule(
            "agent-image-test-leak",
            WARNING,
            "the task's tests or solution copied or mounted into the agent's image or sandbox",
        ),
        Rule(
            "verifier-install-no-network",
            WARNING,
            "a verifier that downloads or installs at run time although its phase has no network",
        ),
        Rule(
            "overlapping-artifacts",
            WARNING,
            "artifacts whose destinations nest (one entry's files land inside another's)",
        ),
        Rule("artifact-log-overlap", WARNING, "an artifact source under /logs or containing it (/)"),
        Rule("agent-user-root", WARNING, "a root agent user where the task declares a non-root one"),
        Rule("lint-internal-error", WARNING, "the lint itself failed on a task (a cairn bug)"),
        Rule(
            "unpinned-python-dependency",
            WARNING,
            "a verifier's Python dependency without an exact version (PEP 723 block, pip/uv/uvx command)",
        ),
    )
}
"""The rule catalogue, id → :class:`Rule` (docs/lint.md documents each)."""


# -- selection -------------------------------------------------------------------------------


def _split(values: Iterable[str] | None) -> list[str]:
    return [v.strip() for raw in values or () for v in raw.split(",") if v.strip()]


def _matches(selector: str, rule_id: str) -> bool:
    if selector.upper() == "ALL":
        return True
    s = selector.lower()
    return rule_id == s or rule_id.startswith(s if s.endswith("-") else s + "-")


@dataclass(frozen=True)
class RuleSelection:
    """Which warning rules are reported (``--select``/``--ignore``).

    A selector is a rule id, a prefix of whole words (``compose`` matches every
    ``compose-…`` rule) or ``ALL``. Errors are always reported.

    Attributes:
        select: selectors of the rules to keep (empty: every warning rule).
        ignore: selectors of the rules to drop (applied after ``select``).
    """

    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()

    @classmethod
    def parse(cls, select: Iterable[str] | None, ignore: Iterable[str] | None) -> RuleSelection:
        """Read the option values (repeatable, comma-separated).

        Args:
            select: ``--select`` values.
            ignore: ``--ignore`` values.

        Returns:
            The selection.

        Raises:
            UsageError: a selector that matches no warning rule (errors cannot be
                selected or ignored), naming the known rules.
        """
        sel, ign = tuple(_split(select)), tuple(_split(ignore))
        warnings = [r.id for r in RULES.values() if r.severity == WARNING]
        for s in sel + ign:
            if not any(_matches(s, r) for r in warnings):
                hint = (
                    " (an error rule: errors are always reported)"
                    if any(_matches(s, r) for r in RULES)
                    else ""
                )
                raise UsageError(
                    f"unknown rule {s!r}{hint}; known warning rules: {', '.join(sorted(warnings))}"
                )
        return cls(sel, ign)

    def keeps(self, finding: Finding) -> bool:
        """Whether ``finding`` is reported: every error; a warning whose rule is selected and
        not ignored."""
        if finding.is_error:
            return True
        if self.select and not any(_matches(s, finding.rule) for s in self.select):
            return False
        return not any(_matches(s, finding.rule) for s in self.ignore)

    def apply(self, findings: Iterable[Finding]) -> list[Finding]:
        """The findings this selection keeps, in order."""
        return [f for f in findings if self.keeps(f)]


def task_ignores(doc: dict[str, Any]) -> tuple[str, ...]:
    """The warning rules a task itself ignores: ``[metadata.harbor.lint].ignore`` (Harbor
    0.26's per-task lint configuration; cairn honours its ``ignore`` list, for the rule ids
    both share, and skips ids it does not know).

    Args:
        doc: the parsed task.toml (or front-matter).

    Returns:
        The rule ids (exact ids only, as Harbor takes them).
    """
    node: Any = doc
    for key in ("metadata", "harbor", "lint", "ignore"):
        node = node.get(key) if isinstance(node, dict) else None
    values = node
    if not isinstance(values, list):
        return ()
    return tuple(v for v in values if isinstance(v, str) and v in RULES and RULES[v].severity == WARNING)


# -- the lint --------------------------------------------------------------------------------

_ROOT_USERS = frozenset({"root", "0"})
_DEPENDENCY_MANIFESTS = re.compile(
    r"^(requirements.*\.txt|constraints.*\.txt|pyproject\.toml|uv\.lock|poetry\.lock|"
    r"package(-lock)?\.json|yarn\.lock|pnpm-lock\.yaml|Pipfile(\.lock)?|setup\.cfg|"
    r"\.gitignore|\.dockerignore|__init__\.py|conftest\.py)$"
)
_MAX_WALK = 5000
_MAX_HASH_BYTES = 8 << 20


class _Lint:
    """One task's lint: the state the rules share (paths, key lines, findings)."""

    def __init__(self, root: Path, task: Task, lines: KeyLines, source: Path) -> None:
        self.root = root
        self.task = task
        self.base = task.path
        self.lines = lines
        self.source = source
        self.findings: list[Finding] = []
        self.protected = self._protected_dirs()
        self._secrets: _Secrets | None = None
        self.builds: set[tuple[Path, Path]] = set()  # (Dockerfile, context) of compose builds

    # -- reporting -------------------------------------------------------------------------
    def shown(self, path: Path) -> Path:
        """``path`` (absolute, under the task) as the caller named the task."""
        try:
            return self.root / path.relative_to(self.base)
        except ValueError:
            return path

    def rel(self, path: Path) -> str:
        try:
            return path.relative_to(self.base).as_posix() or "."
        except ValueError:
            return str(path)

    def key(self, path: KeyPath, rule: str, text: str) -> None:
        self.findings.append(Finding(self.source, self.lines.line(path), WARNING, text, rule))

    def file(self, path: Path, line: int | None, rule: str, text: str) -> None:
        self.findings.append(Finding(self.shown(path), line, WARNING, text, rule))

    # -- shared facts ----------------------------------------------------------------------
    def _protected_dirs(self) -> list[Path]:
        dirs = [self.base / "tests", self.base / "solution"]
        for step in self.task.steps:
            if self.task.multi_step:
                dirs += [
                    self.base / "steps" / step.name / "tests",
                    self.base / "steps" / step.name / "solution",
                ]
        return [d for d in dirs if d.is_dir()]

    def secrets(self) -> _Secrets:
        """The files of the task's tests/ and solution/ folders, by content."""
        if self._secrets is None:
            self._secrets = _Secrets(self.protected)
        return self._secrets

    def protected_under(self, path: Path) -> list[Path]:
        """The protected folders that ``path`` is, lies in, or contains."""
        return [d for d in self.protected if path == d or _inside(path, d) or _inside(d, path)]


def _inside(path: Path, parent: Path) -> bool:
    return path != parent and parent in path.parents


def _norm(path: Path) -> Path:
    return Path(os.path.normpath(path))


def _walk_files(root: Path) -> list[Path]:
    """Regular files (no symlinks) under ``root``, at most :data:`_MAX_WALK`."""
    if root.is_symlink():
        return []
    if root.is_file():
        return [root]
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != ".git")
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if not p.is_symlink() and p.is_file():
                out.append(p)
            if len(out) >= _MAX_WALK:
                return out
    return out


def _file_hash(path: Path) -> str | None:
    try:
        size = path.stat().st_size
        if size == 0 or size > _MAX_HASH_BYTES:
            return None
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _read(path: Path) -> str | None:
    """A file's text (``None``: unreadable, not a regular file, or over the size cap; the
    validation reports those for the files it knows)."""
    try:
        return read_input(path).decode("utf-8", errors="replace")
    except InputFileError:
        return None


def _is_root_user(user: Any) -> bool:
    if isinstance(user, int):
        return user == 0
    return isinstance(user, str) and user.strip().split(":", 1)[0] in _ROOT_USERS


# -- images ----------------------------------------------------------------------------------


def image_pin_problem(image: str) -> str | None:
    """Why an image reference is not pinned, or ``None``.

    Args:
        image: ``name``, ``name:tag``, ``registry:5000/name:tag``, ``name@sha256:…``.

    Returns:
        ``"has no tag"``, ``"uses :latest"`` or ``None`` (tagged, a digest, ``scratch``, or a
        variable that only the run resolves).
    """
    image = image.strip()
    if not image or image == "scratch" or "$" in image or "@" in image:
        return None
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return "has no tag"
    if last.endswith(":latest"):
        return "uses `:latest`"
    return None


# -- compose ---------------------------------------------------------------------------------

_VAR_RE = re.compile(
    r"\$(?:\$|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?P<op>:?[-?+])?"
    r"(?P<arg>[^}]*)\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))"
)


def interpolate(value: str, variables: dict[str, str]) -> tuple[str, list[str]]:
    """Compose-style ``${VAR}``, ``${VAR:-default}``, ``${VAR-default}``, ``$VAR``, ``$$``.

    Args:
        value: the text.
        variables: the known variables.

    Returns:
        ``(text, unknown)``: the interpolated text and the variables that were neither known
        nor defaulted (left as written).
    """
    unknown: list[str] = []

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group("braced") or m.group("bare")
        op, arg = m.group("op"), m.group("arg") or ""
        have = name in variables and (variables[name] != "" or not (op or "").startswith(":"))
        if op in (":-", "-"):
            return variables[name] if have else arg
        if op in (":+", "+"):
            return arg if have else ""
        if have:
            return variables[name]
        unknown.append(name)
        return m.group(0)

    return _VAR_RE.sub(sub, value), unknown


COMPOSE_VARIABLES: dict[str, str] = {
    "MAIN_IMAGE_NAME": "cairn-env:main",
    "CONTEXT_DIR": "{env_dir}",
    "CPUS": "1",
    "MEMORY": "1024M",
    "TEST_DIR": "/tests",
    "HOST_AGENT_LOGS_PATH": "cairn_logs_agent",
    "HOST_VERIFIER_LOGS_PATH": "cairn_logs_verifier",
    "HOST_ARTIFACTS_PATH": "cairn_logs_artifacts",
    "ENV_AGENT_LOGS_PATH": "/logs/agent",
    "ENV_VERIFIER_LOGS_PATH": "/logs/verifier",
    "ENV_ARTIFACTS_PATH": "/logs/artifacts",
    "T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME": "cairn-env:main",
    "T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME": "cairn-main",
    "T_BENCH_TASK_DOCKER_NAME_PREFIX": "cairn",
    "T_BENCH_TEST_DIR": "/tests",
    "T_BENCH_CONTAINER_LOGS_PATH": "/logs",
    "T_BENCH_CONTAINER_AGENT_LOGS_PATH": "/logs/agent",
    "T_BENCH_TASK_LOGS_PATH": "cairn_logs",
    "T_BENCH_TASK_AGENT_LOGS_PATH": "cairn_logs_agent",
}
"""The variables a run gives a compose file (the names of
:func:`cairn.sandbox.docker.compose_files.harbor_variables`, a test keeps them equal), with
values of the same kind: the ``HOST_*`` log "paths" are project volumes, not host folders;
``{env_dir}`` is replaced by the environment folder. ``PREBUILT_IMAGE_NAME`` is added when the
task has a ``docker_image``."""


def _compose_variables(task: Task, env_dir: Path) -> dict[str, str]:
    """The variables a run gives the compose file: cairn's (Harbor's names), then the task's
    literal ``[environment.env]`` values."""
    out = {k: v.replace("{env_dir}", str(env_dir)) for k, v in COMPOSE_VARIABLES.items()}
    if task.environment.docker_image:
        out["PREBUILT_IMAGE_NAME"] = task.environment.docker_image
    for k, v in task.environment.env.items():
        if "${" not in v:
            out[k] = v
    return out


@dataclass
class _ComposeFile:
    path: Path
    doc: dict[str, Any]
    lines: KeyLines
    variables: dict[str, str]
    agent: bool  # the agent's environment (else a separate verifier's)


def _load_compose(path: Path, variables: dict[str, str], agent: bool) -> _ComposeFile | None:
    import yaml

    text = _read(path)
    if text is None:
        return None
    try:
        doc = load_yaml(text, path)
        lines = yaml_key_lines(text)
    except (yaml.YAMLError, RecursionError, ValueError, TypeError):  # InputFileError is one
        return None  # the backend check reports a compose file it cannot read
    if not isinstance(doc, dict):
        return None
    return _ComposeFile(path, doc, lines, variables, agent)


def _short_volume(spec: str) -> dict[str, Any]:
    """A short-syntax volume (``SRC:DST[:MODE]``, ``DST``) as long syntax."""
    parts = spec.split(":")
    if len(parts) >= 2 and len(parts[0]) == 1 and parts[0].isalpha() and parts[1][:1] in "\\/":
        parts = [parts[0] + ":" + parts[1], *parts[2:]]  # a Windows drive letter
    if len(parts) == 1:
        return {"type": "volume", "target": parts[0]}
    src, dst = parts[0], parts[1]
    mode = parts[2] if len(parts) > 2 else ""
    kind = "bind" if src.startswith((".", "/", "~", "$")) or "/" in src else "volume"
    return {"type": kind, "source": src, "target": dst, "read_only": "ro" in mode.split(",")}


def _check_compose(lint: _Lint, cf: _ComposeFile) -> None:
    services = cf.doc.get("services")
    volumes_top = cf.doc.get("volumes") if isinstance(cf.doc.get("volumes"), dict) else {}
    where = lint.shown(cf.path)
    for name, vol in (volumes_top or {}).items():
        if isinstance(vol, dict) and vol.get("external") not in (None, False):
            lint.findings.append(
                Finding(
                    where,
                    cf.lines.line(("volumes", name, "external")),
                    WARNING,
                    f"volume `{name}` is external: it lives outside the trial's compose project, "
                    "so every trial (and the host) shares its contents; use a volume of the "
                    "project (drop `external`)",
                    "compose-external-volume",
                )
            )
    if not isinstance(services, dict):
        return
    built: set[str] = set()
    for svc in services.values():
        if isinstance(svc, dict) and svc.get("build") and isinstance(svc.get("image"), str):
            built.add(svc["image"])
    for name, svc in services.items():
        if not isinstance(svc, dict):
            continue
        base: KeyPath = ("services", name)
        _check_privileges(lint, cf, name, svc, base)
        image = svc.get("image")
        if isinstance(image, str) and not svc.get("build") and image not in built:
            value, unknown = interpolate(image, cf.variables)
            problem = None if unknown else image_pin_problem(value)
            if problem:
                lint.findings.append(
                    Finding(
                        where,
                        cf.lines.line(base + ("image",)),
                        WARNING,
                        f"service `{name}`: image `{value}` {problem}; pin a version so that runs "
                        "are reproducible (nothing is pulled: the image must exist locally)",
                        "unpinned-image",
                    )
                )
        vols = svc.get("volumes")
        for k, entry in enumerate(vols if isinstance(vols, list) else []):
            _check_volume(lint, cf, name, entry, base + ("volumes", k), volumes_top or {})
        if cf.agent:
            _check_compose_build(lint, cf, name, svc, base)


_TRUE_WORDS = frozenset({"true", "yes", "on", "y", "1"})


def _compose_true(value: Any, variables: dict[str, str]) -> bool:
    """A compose boolean as ``docker compose config`` reads it: ``true``, or a string (quoted,
    or a ``${VAR:-true}`` template, interpolated first) spelling true in any case."""
    if value is True:
        return True
    return isinstance(value, str) and interpolate(value, variables)[0].strip().lower() in _TRUE_WORDS


def _check_privileges(lint: _Lint, cf: _ComposeFile, name: str, svc: dict[str, Any], base: KeyPath) -> None:
    where = lint.shown(cf.path)

    def emit(key: KeyPath, text: str, rule: str = "compose-privileged") -> None:
        lint.findings.append(
            Finding(where, cf.lines.line(base + key), WARNING, f"service `{name}`: {text}", rule)
        )

    def text(value: Any) -> str:  # a value as compose sees it: strings interpolated
        return interpolate(value, cf.variables)[0] if isinstance(value, str) else str(value)

    if _compose_true(svc.get("privileged"), cf.variables):
        emit(
            ("privileged",),
            "`privileged: true` gives the container every capability and the host's devices; remove it",
        )
    hooks: list[tuple[str, int, Any]] = []
    for h in ("post_start", "pre_stop"):
        entries = svc.get(h)
        hooks += [(h, k, e) for k, e in enumerate(entries if isinstance(entries, list) else [])]
    for hook, k, entry in hooks:
        if isinstance(entry, dict) and _compose_true(entry.get("privileged"), cf.variables):
            emit((hook, k, "privileged"), f"`{hook}` hook {k + 1} runs privileged; remove it")
    for key in ("pid", "ipc", "userns_mode", "uts", "cgroup"):
        if text(svc.get(key)).strip() == "host":
            emit((key,), f"`{key}: host` shares the host's namespace with the container")
    if text(svc.get("network_mode")).strip() == "host":
        emit(
            ("network_mode",),
            "`network_mode: host` puts the container on the host's network (no isolation, no network policy)",
        )
    devices = svc.get("devices")
    if isinstance(devices, list) and devices:
        emit(
            ("devices",),
            f"`devices` maps host devices into the container ({', '.join(text(d) for d in devices[:3])})",
        )
    opts = svc.get("security_opt")
    for k, opt in enumerate(opts if isinstance(opts, list) else []):
        shown = text(opt)
        flat = shown.replace("=", ":")
        if flat in (
            "seccomp:unconfined",
            "apparmor:unconfined",
            "label:disable",
            "systempaths:unconfined",
        ) or flat.startswith("no-new-privileges:false"):
            emit(("security_opt", k), f"`security_opt: {shown}` turns off a confinement")
    caps = svc.get("cap_add")
    if isinstance(caps, list) and caps:
        emit(
            ("cap_add",),
            f"`cap_add` adds {', '.join(text(c) for c in caps)}; review whether the task needs them",
            "compose-additional-capabilities",
        )


def _check_volume(
    lint: _Lint, cf: _ComposeFile, service: str, entry: Any, key: KeyPath, volumes_top: dict[str, Any]
) -> None:
    mount = _short_volume(interpolate(entry, cf.variables)[0]) if isinstance(entry, str) else entry
    if not isinstance(mount, dict):
        return
    kind = mount.get("type", "volume")
    source = mount.get("source")
    read_only = bool(mount.get("read_only"))
    where = lint.shown(cf.path)
    line = cf.lines.line(key)
    label = f"service `{service}`: volume {key[-1] + 1 if isinstance(key[-1], int) else ''}".strip()
    if kind == "volume" and isinstance(source, str):
        top = volumes_top.get(source)
        if isinstance(top, dict):
            if top.get("external") not in (None, False):
                lint.findings.append(
                    Finding(
                        where,
                        line,
                        WARNING,
                        f"{label} mounts external volume `{source}`: every "
                        "trial (and the host) shares its contents",
                        "compose-external-volume",
                    )
                )
            raw_opts = top.get("driver_opts")
            opts: dict[str, Any] = raw_opts if isinstance(raw_opts, dict) else {}
            flags = str(opts.get("o", "")).split(",")
            if ({"bind", "rbind"} & set(flags)) and isinstance(opts.get("device"), str):
                kind, source = "bind", opts["device"]
                read_only = read_only or "ro" in flags
    if kind != "bind" or not isinstance(source, str):
        return
    value, unknown = interpolate(source, cf.variables)
    target = mount.get("target", "")
    if unknown:
        lint.findings.append(
            Finding(
                where,
                line,
                WARNING,
                f"{label} binds `{source}`, a host path set by "
                f"${{{unknown[0]}}} on the host running the trial; mount a path inside the task "
                "folder or use a volume",
                "compose-external-bind-mount",
            )
        )
        return
    project = cf.path.parent
    host = Path(os.path.expanduser(value)) if value.startswith("~") else None
    path = host if host is not None else _norm(project / value)
    if value == "/var/run/docker.sock" or value.endswith("/docker.sock"):
        lint.findings.append(
            Finding(
                where,
                line,
                WARNING,
                f"{label} binds the Docker socket `{value}`: the container "
                "controls the host's Docker engine (every other trial, the host's files)",
                "compose-external-bind-mount",
            )
        )
        return
    if host is not None or not (path == lint.base or _inside(path, lint.base)):
        lint.findings.append(
            Finding(
                where,
                line,
                WARNING,
                f"{label} binds host path `{value}` (outside the task folder) "
                f"at `{target}`{'' if read_only else ', writable'}: the trial depends on and can "
                "change the host's files; copy the files into the image or use a volume",
                "compose-external-bind-mount",
            )
        )
        return
    link = _symlink_on(path, lint.base)
    if link is not None:
        lint.findings.append(
            Finding(
                where,
                line,
                WARNING,
                f"{label} binds `{value}`, which goes through the symlink "
                f"`{lint.rel(link)}` (→ `{os.readlink(link)}`): what is mounted depends on where "
                "the link points on the host running the trial",
                "compose-symlink-bind-mount",
            )
        )
        try:
            real = path.resolve()
        except (OSError, RuntimeError):
            real = path
        if not (real == lint.base.resolve() or lint.base.resolve() in real.parents):
            lint.findings.append(
                Finding(
                    where,
                    line,
                    WARNING,
                    f"{label} binds `{value}`, which resolves to `{real}` outside the task folder",
                    "compose-external-bind-mount",
                )
            )
    leaked = lint.protected_under(path)
    if leaked and cf.agent:
        lint.findings.append(
            Finding(
                where,
                line,
                WARNING,
                f"{label} mounts `{value}` into service `{service}`, exposing "
                f"{_names(lint, leaked)} to the agent; the verifier gets /tests itself",
                "agent-image-test-leak",
            )
        )
    if not read_only:
        lint.findings.append(
            Finding(
                where,
                line,
                WARNING,
                f"{label} binds the task's own `{lint.rel(path)}` writable at "
                f"`{target}`: the agent can change the task's files on the host (and the next trial "
                "sees the change); add `:ro` or copy the files into the image",
                "compose-writable-bind-mount",
            )
        )


def _symlink_on(path: Path, base: Path) -> Path | None:
    """The first symlink among ``path``'s components below ``base``, or ``None``."""
    try:
        parts = path.relative_to(base).parts
    except ValueError:
        return None
    current = base
    for part in parts:
        current = current / part
        if current.is_symlink():
            return current
        if not current.exists():
            return None
    return None


def _names(lint: _Lint, dirs: Sequence[Path]) -> str:
    return ", ".join(f"`{lint.rel(d)}/`" for d in dirs)


def _build_of(
    svc: dict[str, Any], project: Path, variables: dict[str, str]
) -> tuple[Path, Path, KeyPath] | None:
    build = svc.get("build")
    key: KeyPath
    if isinstance(build, str):
        ctx, dockerfile, key = build, "Dockerfile", ("build",)
    elif isinstance(build, dict):
        ctx = build.get("context", ".")
        dockerfile = build.get("dockerfile", "Dockerfile")
        key = ("build", "context") if "context" in build else ("build",)
        if not isinstance(ctx, str) or not isinstance(dockerfile, str):
            return None
    else:
        return None
    ctx_value, unknown = interpolate(ctx, variables)
    df_value, unknown_df = interpolate(dockerfile, variables)
    if unknown or unknown_df or "://" in ctx_value:
        return None
    context = _norm(project / ctx_value)
    return context, _norm(context / df_value), key


def _check_compose_build(
    lint: _Lint, cf: _ComposeFile, name: str, svc: dict[str, Any], base: KeyPath
) -> None:
    found = _build_of(svc, cf.path.parent, cf.variables)
    if found is None:
        return
    context, dockerfile, key = found
    leaked = [
        d for d in lint.protected if (d == context or _inside(d, context)) and not _left_out(context, d)
    ]
    if leaked:
        lint.findings.append(
            Finding(
                lint.shown(cf.path),
                cf.lines.line(base + key),
                WARNING,
                f"service `{name}`: the build context `{lint.rel(context)}` holds "
                f"{_names(lint, leaked)}, so the image can copy them (`COPY . …`); build from "
                "environment/ (Harbor's and cairn's context) or exclude them in .dockerignore",
                "agent-image-test-leak",
            )
        )
    lint.builds.add((dockerfile, context))


# -- Dockerfiles -----------------------------------------------------------------------------


def _dockerignore(context: Path) -> list[tuple[bool, str]]:
    text = _read(context / ".dockerignore")
    out: list[tuple[bool, str]] = []
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = posixpath.normpath(line.lstrip("!").strip().lstrip("/")).rstrip("/")
        out.append((negate, pattern))
    return out


def _left_out(context: Path, path: Path) -> bool:
    """Whether ``.dockerignore`` of ``context`` leaves all of ``path`` out of the build
    context: the folder and every file in it, since a later ``!pattern`` re-includes files of
    an ignored folder (``tests/`` then ``!tests/test.sh``), as Docker reads the file."""
    rules = _dockerignore(context)  # read once for the folder and all its files
    if not _dockerignored(context, path, rules):
        return False
    return all(_dockerignored(context, f, rules) for f in _walk_files(path))


def _dockerignored(context: Path, path: Path, rules: list[tuple[bool, str]] | None = None) -> bool:
    """Whether ``.dockerignore`` of ``context`` leaves ``path`` out of the build context
    (``rules``: the file already read by :func:`_dockerignore`)."""
    try:
        rel = path.relative_to(context).as_posix()
    except ValueError:
        return False
    if rules is None:
        rules = _dockerignore(context)
    parts = rel.split("/")
    prefixes = ["/".join(parts[:k]) for k in range(1, len(parts) + 1)]
    ignored = False
    for negate, pattern in rules:
        pat = pattern.replace("**/", "*/") if pattern.startswith("**/") else pattern
        hit = any(
            fnmatchcase(p, pat)
            or fnmatchcase(p, pattern)
            or (pattern.startswith("**/") and fnmatchcase(p.rsplit("/", 1)[-1], pattern[3:]))
            for p in prefixes
        )
        if hit:
            ignored = not negate
    return ignored


def _check_dockerfile(
    lint: _Lint, dockerfile: Path, context: Path, *, agent: bool, from_rule: bool
) -> str | None:
    """COPY/ADD leaks (agent images) and FROM pins (``from_rule``); returns the final stage's
    ``USER`` when it sets one."""
    text = _read(dockerfile)
    if text is None:
        return None
    stages: set[str] = set()
    user: str | None = None
    for inst in dockerfile_instructions(text):
        if inst.keyword == "FROM" and inst.args:
            user = None
            image = inst.args[0]
            if from_rule and image.lower() not in stages:
                problem = image_pin_problem(image)
                if problem:
                    lint.file(
                        dockerfile,
                        inst.line,
                        "unpinned-image",
                        f"`FROM {image}` {problem}; pin a version so that builds are reproducible",
                    )
            if len(inst.args) >= 3 and inst.args[1].lower() == "as":
                stages.add(inst.args[2].lower())
        elif inst.keyword == "USER" and inst.args:
            user = inst.args[0]
        elif inst.keyword in ("COPY", "ADD") and agent and inst.flag("from") is None:
            _check_copy(lint, dockerfile, context, inst.keyword, inst.args, inst.line)
    return user


def _check_copy(
    lint: _Lint, dockerfile: Path, context: Path, keyword: str, args: tuple[str, ...], line: int
) -> None:
    sources = [a for a in args[:-1] if not a.startswith("<<")]
    for src in sources:
        if "://" in src or src.startswith("git@") or "$" in src:
            continue
        matches = _expand(context, src)
        leaked: list[Path] = []
        copies: list[tuple[Path, Path]] = []
        for path in matches:
            hit = [d for d in lint.protected_under(path) if not _left_out(context, d)]
            if hit:
                leaked += [d for d in hit if d not in leaked]
                continue
            for f in _walk_files(path):
                if _dockerignored(context, f):
                    continue
                twin = lint.secrets().twin(f)
                if twin is not None:
                    copies.append((f, twin))
        if leaked:
            lint.file(
                dockerfile,
                line,
                "agent-image-test-leak",
                f"`{keyword} {src}` copies {_names(lint, leaked)} into the agent's "
                "image: the agent can read the tests or the solution; cairn uploads "
                "them itself (the verifier's /tests, the oracle's /solution)",
            )
        elif copies:
            f, twin = copies[0]
            more = f" and {len(copies) - 1} more" if len(copies) > 1 else ""
            lint.file(
                dockerfile,
                line,
                "agent-image-test-leak",
                f"`{keyword} {src}` copies `{lint.rel(f)}`, the same file as "
                f"`{lint.rel(twin)}`{more}, into the agent's image: the agent can read "
                "it; keep verifier and solution files out of environment/",
            )


def _expand(context: Path, src: str) -> list[Path]:
    """What a COPY source names in the build context (globs expanded), normalised.

    Docker cleans a source against the context's root as if it were ``/`` (BuildKit's
    ``filepath.Join("/", src)``): ``..`` cannot climb out, so ``COPY ../tests …`` in
    ``environment/Dockerfile`` copies ``environment/tests``, never the task's ``tests/``.
    """
    rel = posixpath.normpath("/" + src).lstrip("/") or "."
    if any(c in rel for c in "*?["):
        try:
            return sorted(_norm(p) for p in context.glob(rel))[:_MAX_WALK]
        except (ValueError, NotImplementedError, OSError):
            return []
    return [_norm(context / rel)]


_MIN_SECRET_CHARS = 40


def _significant(path: Path) -> bool:
    """Whether a file says enough to be recognised as a copy (not ``true`` or ``exit 0``)."""
    try:
        with path.open("rb") as fh:  # a regular file (from _walk)
            text = fh.read(4096).decode("utf-8", errors="replace")
    except OSError:
        return False
    if text.startswith("#!"):
        text = text.split("\n", 1)[1] if "\n" in text else ""
    return len("".join(text.split())) >= _MIN_SECRET_CHARS


class _Secrets:
    """The files of some test and solution folders, found again by content: size first, then
    sha256 (so only files of a matching size are ever read). Dependency manifests,
    ``__init__.py``/``conftest.py``, Dockerfiles and files with fewer than
    :data:`_MIN_SECRET_CHARS` characters besides blanks and a shebang (``true``, ``exit 0``)
    are left out: sharing those with the image is no leak.

    Args:
        dirs: the folders (missing ones are skipped).
    """

    def __init__(self, dirs: Iterable[Path]) -> None:
        self.by_size: dict[int, dict[str, Path]] = {}
        for d in dirs:
            if not d.is_dir():
                continue
            for f in _walk_files(d):
                if _DEPENDENCY_MANIFESTS.match(f.name) or f.name == "Dockerfile":
                    continue
                digest = _file_hash(f)
                if digest is not None and _significant(f):
                    self.by_size.setdefault(f.stat().st_size, {}).setdefault(digest, f)

    def twin(self, path: Path) -> Path | None:
        """The secret file with the same bytes as ``path``, or ``None``."""
        try:
            size = path.stat().st_size
        except OSError:
            return None
        same = self.by_size.get(size)
        if not same:
            return None
        digest = _file_hash(path)
        return same.get(digest) if digest else None


def _check_workdirs(lint: _Lint) -> None:
    """A step's ``workdir/`` (copied into the sandbox before its agent runs) holding a copy of
    a test or solution file of the shared folders, its own step or a later one (an earlier
    step's solution is a fair starting point)."""
    task = lint.task
    if not task.multi_step:
        return
    names = [s.name for s in task.steps]
    for k, step in enumerate(task.steps):
        if step.workdir_dir is None:
            continue
        dirs = [lint.base / "tests", lint.base / "solution"]
        for later in names[k:]:
            dirs += [lint.base / "steps" / later / "tests", lint.base / "steps" / later / "solution"]
        secrets = _Secrets(dirs)
        for f in _walk_files(step.workdir_dir):
            twin = secrets.twin(f)
            if twin is not None:
                lint.file(
                    f,
                    None,
                    "agent-image-test-leak",
                    f"`{lint.rel(f)}` is the same file as `{lint.rel(twin)}`, and the "
                    f"workdir is copied into the sandbox before step `{step.name}`'s "
                    "agent runs: the agent can read it",
                )


# -- the verifier's scripts ----------------------------------------------------------------


def _verifier_offline(task: Task, step: Step) -> bool:
    if step.verifier_mode == "separate":
        env = step.verifier_environment or task.environment
        return env.effective_network_mode.value == "no-network"
    return task.verifier_network(step).mode.value == "no-network"


def _script_env(commands: list[Command]) -> dict[str, str]:
    env: dict[str, str] = {}
    for c in commands:
        if c.argv[0] == "export":
            for a in c.argv[1:]:
                name, eq, value = a.partition("=")
                if eq:
                    env[name] = value
    return env


def _python_files(dirs: Iterable[Path]) -> list[Path]:
    out: list[Path] = []
    for d in dirs:
        out += [f for f in _walk_files(d) if f.suffix == ".py"]
    return out


def _check_verifier(lint: _Lint) -> None:
    task = lint.task
    metadata_seen: set[Path] = set()
    scripts_seen: set[tuple[Path, bool]] = set()
    for step in task.steps:
        deps: dict[str, list[str]] = {}
        for py in _python_files(step.tests_dirs):
            text = _read(py)
            meta = script_metadata(text) if text and "# /// script" in text else None
            if meta is None:
                continue
            deps[py.name] = [d for d, _ in meta.dependencies]
            if py in metadata_seen:
                continue
            metadata_seen.add(py)
            for req, line in meta.dependencies:
                if requirement_pinned(req) is False:
                    lint.file(
                        py,
                        line,
                        "unpinned-python-dependency",
                        f"inline script dependency `{req}` has no exact version; pin it "
                        "(`==X.Y.Z`) so the verifier does not change under the task",
                    )
        if step.test_sh is None:
            continue
        offline = _verifier_offline(task, step)
        scripts = [step.test_sh] + _called_scripts(step)
        for script in scripts:
            if (script, offline) in scripts_seen:
                continue
            scripts_seen.add((script, offline))
            _check_script(lint, script, step, offline, deps)


def _called_scripts(step: Step) -> list[Path]:
    """Other ``.sh`` files of the step's tests that its test.sh names."""
    text = _read(step.test_sh) if step.test_sh else None
    if not text:
        return []
    out: list[Path] = []
    for d in step.tests_dirs:
        for f in _walk_files(d):
            if f.suffix == ".sh" and f != step.test_sh and f.name in text and f not in out:
                out.append(f)
    return out


def _check_script(lint: _Lint, script: Path, step: Step, offline: bool, deps: dict[str, list[str]]) -> None:
    text = _read(script)
    if text is None:
        return
    commands = shell_commands(text.replace("\r\n", "\n"))
    env = _script_env(commands)
    reported: set[tuple[int, str]] = set()
    where = f"step `{step.name}`: " if lint.task.multi_step else ""
    for cmd in commands:
        if offline:
            what = fetch_of(cmd, env, deps)
            if what and (cmd.line, "fetch") not in reported:
                reported.add((cmd.line, "fetch"))
                lint.file(
                    script,
                    cmd.line,
                    "verifier-install-no-network",
                    f"{where}the verifier runs `{what}` but its phase has no network "
                    "(no-network): it fails at run time; install it in the image (or give "
                    'the verifier `network_mode = "allowlist"` with the hosts it needs)',
                )
        loose = [r for r in command_python_requirements(cmd) if requirement_pinned(r) is False]
        if loose and (cmd.line, "pin") not in reported:
            reported.add((cmd.line, "pin"))
            lint.file(
                script,
                cmd.line,
                "unpinned-python-dependency",
                f"`{cmd.program}` installs {', '.join(f'`{r}`' for r in loose)} without an "
                "exact version; pin (`==X.Y.Z`) so the verifier does not change under the "
                "task",
            )


# -- artifacts -------------------------------------------------------------------------------


@dataclass(frozen=True)
class LogOverlap:
    """How an artifact source of the main container meets ``/logs`` (rule
    ``artifact-log-overlap``; :func:`artifact_log_overlap`).

    Attributes:
        relation: what the source is, said truly: ``"is under /logs"``, ``"is /logs itself"``,
            ``"contains /logs"`` or ``"is the whole filesystem, which contains /logs"``.
        why: why that is a mistake (one clause, no path of the entry).
        contains: the source holds ``/logs`` (an ancestor of it, ``/`` included): collecting
            it copies cairn's folders along with whatever else the entry meant.
    """

    relation: str
    why: str
    contains: bool = False

    def fix(self, *, artifact: str) -> str:
        """The advice that fits: where the output should be collected from instead.

        Args:
            artifact: how the caller calls the entry's output (``"write the output"`` for a
                task.toml entry, ``"collect the output"`` for ``--artifact``).
        """
        if self.contains:
            return "collect the folders the output is in instead"
        return f"{artifact} somewhere else"


def artifact_log_overlap(source: str) -> LogOverlap | None:
    """Why an artifact of the main container at ``source`` is a mistake because it lies under
    ``/logs``, is it, or contains it (rule ``artifact-log-overlap``), or ``None`` when it
    does none of these.

    Used by the task lint for task.toml entries and by a run for ``--artifact`` paths.

    Args:
        source: an absolute sandbox path.

    Returns:
        The :class:`LogOverlap`, or ``None``.
    """
    src = posixpath.normpath("/" + source.lstrip("/"))
    if src == ARTIFACTS_DIR or src.startswith(ARTIFACTS_DIR + "/"):
        return LogOverlap(
            f"is under {LOGS_DIR}",
            f"`{ARTIFACTS_DIR}` is collected after every step anyway (the entry copies it twice)",
        )
    if src == AGENT_LOGS_DIR or src.startswith(AGENT_LOGS_DIR + "/"):
        return LogOverlap(
            f"is under {LOGS_DIR}",
            f"`{AGENT_LOGS_DIR}` is moved to the step's "
            "agent/ folder before artifacts are collected (the entry finds "
            "nothing; the logs are kept anyway)",
        )
    if src == VERIFIER_LOGS_DIR or src.startswith(VERIFIER_LOGS_DIR + "/"):
        return LogOverlap(
            f"is under {LOGS_DIR}",
            f"`{VERIFIER_LOGS_DIR}` is emptied before "
            "artifacts are collected (what the agent left there is kept as "
            "planted-verifier-logs), and a separate verifier gets the artifacts "
            "at their paths, over its own logs",
        )
    folders = f"{LOGS_DIR} holds cairn's agent, verifier and artifact folders"
    if src == LOGS_DIR or src.startswith(LOGS_DIR + "/"):
        return LogOverlap(f"is {LOGS_DIR} itself" if src == LOGS_DIR else f"is under {LOGS_DIR}", folders)
    if src == "/" or LOGS_DIR.startswith(src + "/"):
        relation = (
            f"is the whole filesystem, which contains {LOGS_DIR}" if src == "/" else f"contains {LOGS_DIR}"
        )
        return LogOverlap(
            relation,
            f"{LOGS_DIR} holds cairn's own folders, which it collects "
            f"its own way (`{ARTIFACTS_DIR}` after every step, `{AGENT_LOGS_DIR}` "
            "moved to the step's agent/ folder and "
            f"`{VERIFIER_LOGS_DIR}` emptied before artifacts are collected): the "
            f"entry copies `{ARTIFACTS_DIR}` a second time, and a separate "
            "verifier gets the files over its own logs",
            contains=True,
        )
    return None


def _check_artifacts(lint: _Lint) -> None:
    cfg = lint.task.config
    lists: list[list[tuple[KeyPath, Artifact]]] = []
    task_level: list[tuple[KeyPath, Artifact]] = [(("artifacts", k), a) for k, a in enumerate(cfg.artifacts)]
    lists.append(task_level)
    for i, sc in enumerate(cfg.steps):
        own: list[tuple[KeyPath, Artifact]] = [
            (("steps", i, "artifacts", k), a) for k, a in enumerate(sc.artifacts)
        ]
        if own:
            lists.append(task_level + own)
    seen_logs: set[KeyPath] = set()
    seen_pairs: set[tuple[KeyPath, KeyPath]] = set()
    for entries in lists:
        for path, art in entries:
            if (art.service or "main") != "main" or path in seen_logs:
                continue
            overlap = artifact_log_overlap(art.source)
            if overlap is not None:
                seen_logs.add(path)
                fix = overlap.fix(artifact="write the output")
                if not overlap.contains:
                    fix += f" (or to {ARTIFACTS_DIR} without an entry)"
                lint.key(
                    path,
                    "artifact-log-overlap",
                    f"artifact `{art.source}` {overlap.relation}: {overlap.why}; {fix}",
                )
        for j, (path_b, b) in enumerate(entries):
            for path_a, a in entries[:j]:
                if (path_a, path_b) in seen_pairs or (a.service or "main") != (b.service or "main"):
                    continue
                why = artifact_overlap(a, b)
                if why:
                    seen_pairs.add((path_a, path_b))
                    lint.key(
                        path_b,
                        "overlapping-artifacts",
                        f"artifact `{b.source}` overlaps `{a.source}` (`{_key_text(path_a)}`): {why}",
                    )


def _key_text(path: KeyPath) -> str:
    from cairn.task.findings import format_key_path

    return format_key_path(path)


def artifact_overlap(a: Artifact, b: Artifact) -> str | None:
    """Why two entries' outputs collide (rule ``overlapping-artifacts``; Harbor 0.26's rule:
    destinations nested, unless one entry only repeats part of the other at the same place),
    or ``None``. Equal destinations are not reported here (validation refuses them in a task;
    a run adds an ``--artifact`` path a step already collects only once)."""
    da = posixpath.normpath(a.effective_destination or ".")
    db = posixpath.normpath(b.effective_destination or ".")
    if da == db or not _nested(da, db):
        return None  # the same destination twice is an error of validation
    if _covers(a, b) or _covers(b, a):
        return None
    return (
        f"their destinations `{da}` and `{db}` nest, so one entry's files land inside "
        "the other's (the later copy wins)"
    )


def _covers(outer: Artifact, inner: Artifact) -> bool:
    """``inner`` is a part of ``outer``'s source stored where ``outer`` stores it anyway."""
    so, si = posixpath.normpath(outer.source), posixpath.normpath(inner.source)
    if not (si == so or si.startswith(so.rstrip("/") + "/")) or outer.exclude:
        return False
    do = posixpath.normpath(outer.effective_destination or ".")
    di = posixpath.normpath(inner.effective_destination or ".")
    return di == posixpath.normpath(posixpath.join(do, posixpath.relpath(si, so)))


def _nested(a: str, b: str) -> bool:
    a, b = a.rstrip("/") or "/", b.rstrip("/") or "/"
    return a == b or b.startswith(a + "/") or a.startswith(b + "/") or "." in (a, b)


# -- agent user ------------------------------------------------------------------------------


def _check_agent_user(lint: _Lint, image_says: str | None) -> None:
    """A root agent user set in task.toml where the task says non-root: the task's own
    ``[agent].user`` (for a step's override) or the image (the Dockerfile's final ``USER``,
    compose ``main``'s ``user:``)."""
    cfg = lint.task.config
    task_user = cfg.agent.user
    task_says = (
        f"`agent.user` is {task_user!r}" if task_user is not None and not _is_root_user(task_user) else None
    )
    entries: list[tuple[KeyPath, Any, str | None]] = []
    for i, sc in enumerate(cfg.steps):
        if sc.agent.user is not None:
            entries.append((("steps", i, "agent", "user"), sc.agent.user, task_says or image_says))
    if task_user is not None:
        entries.append((("agent", "user"), task_user, image_says))
    for path, user, says in entries:
        if says is None or not _is_root_user(user):
            continue
        lint.key(
            path,
            "agent-user-root",
            f"`{_key_text(path)}` = {user!r} runs the agent as root although {says}: "
            "the agent can read and change everything in the sandbox; drop the override "
            "or use the non-root user",
        )


# -- entry point -----------------------------------------------------------------------------


def lint_task(root: Path, task: Task, lines: KeyLines) -> list[Finding]:
    """Run every lint rule on a loaded task.

    Args:
        root: the task folder as the caller named it (findings are named under it).
        task: the loaded task (:func:`cairn.task.load.load_task`).
        lines: the key lines of task.toml (or task.md's front-matter).

    Returns:
        Warnings sorted by file and line (the rules' order within a line); each with its
        file, line and rule id.
    """
    source_name = "task.toml" if (task.path / "task.toml").is_file() else "task.md"
    lint = _Lint(Path(root), task, lines, Path(root) / source_name)
    env_dir = task.path / "environment"
    image_says: str | None = None
    compose = find_compose_file(env_dir)
    if compose is not None:
        cf = _load_compose(compose, _compose_variables(task, env_dir), agent=True)
        if cf is not None:
            _check_compose(lint, cf)
            services = cf.doc.get("services")
            main = services.get("main") if isinstance(services, dict) else None
            user = main.get("user") if isinstance(main, dict) else None
            if isinstance(user, (str, int)) and not _is_root_user(user) and "$" not in str(user):
                image_says = f"`{lint.rel(compose)}` gives service main `user: {user}`"
    env_dockerfile = env_dir / "Dockerfile"
    if env_dockerfile.is_file():
        # FROM pins of environment/Dockerfile are a validation warning already (same rule id)
        user = _check_dockerfile(lint, env_dockerfile, env_dir, agent=True, from_rule=False)
        lint.builds.discard((_norm(env_dockerfile), _norm(env_dir)))
        if image_says is None and user is not None and not _is_root_user(user) and "$" not in user:
            image_says = f"`{lint.rel(env_dockerfile)}` ends with `USER {user}`"
    for dockerfile, context in sorted(lint.builds):
        if dockerfile.is_file():
            _check_dockerfile(
                lint, dockerfile, context, agent=True, from_rule=dockerfile != _norm(env_dockerfile)
            )
    _check_verifier_environments(lint)
    if task.environment.docker_image:
        problem = image_pin_problem(task.environment.docker_image)
        if problem:
            lint.key(
                ("environment", "docker_image"),
                "unpinned-image",
                f"`environment.docker_image` `{task.environment.docker_image}` {problem}; "
                "pin a version so that runs are reproducible",
            )
    _check_workdirs(lint)
    _check_verifier(lint)
    _check_artifacts(lint)
    _check_agent_user(lint, image_says)
    return sorted(lint.findings, key=lambda f: (str(f.path), f.line or 0))


def _check_verifier_environments(lint: _Lint) -> None:
    """Separate verifiers: their compose files (privileges, mounts, images), Dockerfile FROM
    pins and ``docker_image`` pins."""
    task = lint.task
    dirs = [task.path / "tests"] + [
        task.path / "steps" / s.name / "tests" for s in task.steps if task.multi_step
    ]
    for d in dirs:
        compose = find_compose_file(d)
        if compose is not None:
            cf = _load_compose(compose, _compose_variables(task, d), agent=False)
            if cf is not None:
                _check_compose(lint, cf)
        if (d / "Dockerfile").is_file():
            _check_dockerfile(lint, d / "Dockerfile", d, agent=False, from_rule=True)
    tables: list[tuple[KeyPath, Any]] = [(("verifier", "environment"), task.config.verifier.environment)]
    tables += [
        (("steps", i, "verifier", "environment"), sc.verifier.environment)
        for i, sc in enumerate(task.config.steps)
    ]
    for path, env in tables:
        if env is not None and env.docker_image:
            problem = image_pin_problem(env.docker_image)
            if problem:
                lint.key(
                    path + ("docker_image",),
                    "unpinned-image",
                    f"`{_key_text(path + ('docker_image',))}` `{env.docker_image}` "
                    f"{problem}; pin a version so that runs are reproducible",
                )


__all__ = [
    "RULES",
    "LogOverlap",
    "Rule",
    "RuleSelection",
    "artifact_log_overlap",
    "artifact_overlap",
    "image_pin_problem",
    "interpolate",
    "lint_task",
]
