"""The task-folder checks of design §2 that go beyond key types.

Every check reads the parsed task.toml document defensively (a value of the wrong type has
already been reported by :mod:`cairn.task.schema_check` and is skipped here) and the files of
the task folder, and reports to a :class:`~cairn.task.findings.FindingSink`. Nothing here
raises for a bad task.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
from pathlib import Path
from typing import Any

from cairn._util.inputfiles import MAX_INPUT_BYTES, InputFileError, load_yaml_file, read_input
from cairn._util.text import NotUtf8Error, decode_utf8
from cairn.layout import find_compose_file
from cairn.netpolicy import AllowEntry
from cairn.task.envvars import embedded_template
from cairn.task.findings import ERROR, WARNING, FindingSink, format_key_path
from cairn.task.model import MAIN_SERVICE, STEP_NAME_RE, parse_size_mb

KeyPath = tuple[str | int, ...]


def _table(node: Any, *keys: str | int) -> dict[str, Any]:
    """``node[k1][k2]…`` when every level exists and the end is a table, else ``{}``."""
    for k in keys:
        if isinstance(node, dict) and isinstance(k, str):
            node = node.get(k)
        elif isinstance(node, list) and isinstance(k, int) and 0 <= k < len(node):
            node = node[k]
        else:
            return {}
    return node if isinstance(node, dict) else {}


def declared_steps(doc: dict[str, Any]) -> list[Any]:
    """The ``[[steps]]`` entries as written ([] for a single-step task).

    Args:
        doc: the parsed task.toml.

    Returns:
        The entries (each normally a table) in declared order.
    """
    steps = doc.get("steps")
    return steps if isinstance(steps, list) else []


def declared_verifier_mode(verifier: dict[str, Any]) -> str | None:
    """The verifier mode a raw ``[verifier]`` table asks for, as Harbor 0.26 infers it.

    Args:
        verifier: a ``[verifier]`` or ``[steps.verifier]`` table as written.

    Returns:
        Its ``environment_mode``; else ``"separate"`` when it has an ``environment`` table;
        else ``None`` (the level above decides).
    """
    mode = verifier.get("environment_mode")
    if isinstance(mode, str):
        return mode
    if isinstance(verifier.get("environment"), dict):
        return "separate"
    return None


def check_task_folder(
    root: Path, doc: dict[str, Any], sink: FindingSink, *, instruction_in_header: bool = False
) -> None:
    """Run every folder and semantic check of design §2.

    Args:
        root: the task folder, as the caller named it (findings use it as their prefix).
        doc: the parsed task.toml (or task.md front-matter).
        sink: receives the findings.
        instruction_in_header: the instruction is the body of task.md (no instruction.md
            needed for a single-step task).
    """
    steps = declared_steps(doc)
    check_special_files(root, sink)
    refused = check_links(
        root,
        [
            e["name"]
            for e in steps
            if isinstance(e, dict) and isinstance(e.get("name"), str) and STEP_NAME_RE.match(e["name"])
        ],
        sink,
    )
    valid_names = _check_steps(root, doc, steps, sink) if steps else []
    if "steps" in doc and not isinstance(doc["steps"], list):
        pass  # a type error already reported; whether the task is multi-step is unknown
    elif not steps:
        if not instruction_in_header and _missing(root / "instruction.md"):
            sink.file(root, ERROR, "missing `instruction.md` (required for a single-step task)")
        elif not instruction_in_header and (root / "instruction.md").is_file():
            check_utf8(root / "instruction.md", sink)
        if _missing(root / "tests" / "test.sh") and root / "tests" not in refused:
            sink.file(root, ERROR, "missing `tests/test.sh` (the verifier of a single-step task)")
    elif (root / "instruction.md").is_file():
        sink.file(
            root / "instruction.md",
            WARNING,
            "not used by a multi-step task (each step reads steps/<name>/instruction.md)",
            rule="unused-instruction",
        )
    _check_undeclared_step_dirs(root, steps, sink)
    _check_environment_definition(root, doc, sink)
    _check_artifacts(doc, steps, sink)
    _check_env_tables(doc, steps, sink)
    for path in _environment_tables(doc, steps):
        _check_environment_table(_table(doc, *path), path, sink)
    for path in _phase_tables(doc, steps):
        _check_network_keys(_table(doc, *path), path, sink)
    _check_mcp_servers(root, doc, steps, sink)
    _check_judges(doc, steps, sink)
    _check_harbor_rules(doc, steps, sink)
    _check_compose(root, doc, sink)
    _check_services_exist(root, doc, sink)
    dockerfile = root / "environment" / "Dockerfile"
    if dockerfile.is_file():
        _check_dockerfile(dockerfile, sink)
    _check_scripts(root, valid_names, sink)
    _check_seed(root, steps, valid_names, sink)


def _check_seed(root: Path, steps: list[Any], valid_names: list[str], sink: FindingSink) -> None:
    """The seed trajectory beside the first instruction (:func:`cairn.task.seed.read_seed`,
    the rule the agents load it by): an error naming the file, the line and the field."""
    from cairn.task.seed import SEED_FILE, SeedError, read_seed

    if steps:
        first = steps[0].get("name") if isinstance(steps[0], dict) else None
        if first not in valid_names:
            return  # the first step is refused already; where its seed lives is unknown
        seed = root / "steps" / str(first) / SEED_FILE
    else:
        seed = root / SEED_FILE
    if not seed.is_file():
        return  # none (a FIFO or a refused link is reported as what it is)
    try:
        read_seed(seed)
    except SeedError as exc:
        sink.file(seed, ERROR, f"seed trajectory: {exc.reason}", exc.line)


def check_utf8(path: Path, sink: FindingSink) -> None:
    """Report a text file the agent gets (an instruction.md) that is not valid UTF-8, with the
    byte offset and line of the first bad byte (a byte-order mark and CRLF are fine).

    Args:
        path: the file.
        sink: receives the finding.
    """
    try:
        decode_utf8(read_input(path))
    except NotUtf8Error as exc:
        sink.file(path, ERROR, str(exc), exc.line)
    except InputFileError as exc:
        sink.file(path, ERROR, exc.reason, exc.line)


def _missing(path: Path) -> bool:
    """Nothing at all at ``path`` (not even a FIFO, a folder or a dangling link: those are
    reported as what they are, not as missing)."""
    return not os.path.lexists(path)


_MAX_SCAN_ENTRIES = 200_000
"""How many entries of a task folder :func:`check_special_files` looks at, at most."""


def check_special_files(root: Path, sink: FindingSink) -> None:
    """Report every FIFO, socket or device in a task folder, by name (design §2).

    A task holds regular files, folders and symlinks only: cairn never opens anything else
    (reading a FIFO blocks until some other process writes to it), so a check, a content hash or
    an upload would otherwise hang or leave the file out silently. Links are not followed.

    Args:
        root: the task folder.
        sink: receives one error per special file.
    """
    seen = 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = [d for d in dirnames if d not in (".git", "__pycache__")]
        for name in sorted(filenames):
            seen += 1
            if seen > _MAX_SCAN_ENTRIES:
                return
            path = Path(dirpath) / name
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
                continue
            kind = (
                "a FIFO"
                if stat.S_ISFIFO(mode)
                else "a socket"
                if stat.S_ISSOCK(mode)
                else "a device"
                if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "a special file"
            )
            sink.file(
                path,
                ERROR,
                f"is {kind}, not a regular file: a task holds regular "
                "files, folders and symlinks only (cairn does not open it)",
            )


_UPLOADED_FOLDERS = ("tests", "solution")
"""Folders cairn uploads into the sandbox as they are (also ``steps/<name>/…`` and ``workdir``)."""

_LINKED_ENTRIES = (
    "instruction.md",
    "environment",
    "steps",
    "tests/test.sh",
    "solution/solve.sh",
    "environment/Dockerfile",
    "environment/docker-compose.yaml",
    "environment/docker-compose.yml",
    "environment/compose.yaml",
    "environment/compose.yml",
)
"""Entries cairn reads (or builds from) on the host, through links (task.toml/task.md: on
load)."""


def link_problem(root: Path, path: Path, *, uploaded: bool) -> str | None:
    """Why a symlinked task entry is refused, or ``None`` when ``path`` is fine.

    The rules (docs/task-format.md "Symlinks"): a folder cairn uploads into the sandbox
    (``tests/``, ``solution/``, ``steps/<name>/{tests,solution,workdir}/``) must be a real
    folder, since uploads carry links as links (design §3: the sandbox would get a link to a
    host path, not the files); an entry cairn reads or builds from on the host (``task.toml``,
    ``instruction.md``, ``environment/``, ``tests/test.sh`` …) may be a link to something
    inside the task folder, never one leaving it (the task's content hash covers the link's
    text, not what it points to, and a copy of the task would lose it) and never a dangling
    one.

    Args:
        root: the task folder.
        path: the entry, under ``root``.
        uploaded: the entry is one of the uploaded folders.

    Returns:
        The reason, without the path; ``None`` for a non-link or an allowed one.
    """
    if not path.is_symlink():
        return None
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    if uploaded:
        return (
            f"is a symlink (to {target}): cairn uploads this folder into the sandbox "
            "without following links, so the sandbox would get the link, not the files; "
            "make it a real folder"
        )
    resolved = path.resolve()
    base = root.resolve()
    if not (resolved == base or base in resolved.parents):
        return (
            f"is a symlink to {target}, outside the task folder: a task must hold its "
            "own files (its content hash and copies keep the link, not what it points "
            "to); copy them in"
        )
    if not resolved.exists():
        return f"is a symlink to {target}, which does not exist"
    return None


def check_links(root: Path, step_names: list[str], sink: FindingSink) -> set[Path]:
    """Report the task's symlinked entries that :func:`link_problem` refuses, by name.

    Args:
        root: the task folder.
        step_names: the declared step names (their folders are checked too).
        sink: receives one error per refused link.

    Returns:
        The refused entries (``root / rel``).
    """
    refused: set[Path] = set()
    uploaded = list(_UPLOADED_FOLDERS)
    read = list(_LINKED_ENTRIES)
    for name in step_names:
        uploaded += [f"steps/{name}/{d}" for d in ("tests", "solution", "workdir")]
        read += [
            f"steps/{name}",
            *(f"steps/{name}/{f}" for f in ("instruction.md", "tests/test.sh", "solution/solve.sh")),
        ]
    for rel, up in [(f, True) for f in uploaded] + [(f, False) for f in read]:
        why = link_problem(root, root / rel, uploaded=up)
        if why is not None:
            sink.file(root / rel, ERROR, why)
            refused.add(root / rel)
    for rel in uploaded:
        folder = root / rel
        if folder not in refused and folder.is_dir() and not folder.is_symlink():
            refused |= _check_links_inside(folder, rel, sink)
    return refused


def _check_links_inside(folder: Path, rel: str, sink: FindingSink) -> set[Path]:
    """Links inside an uploaded folder travel as links (design §3): one whose relative target
    leaves the folder points at nothing in the sandbox (an error: the check said ok and the
    verifier then found no test.sh); an absolute one points at the sandbox's own path (a
    warning: fine for ``/usr/bin/python3``, wrong for a host path)."""
    refused: set[Path] = set()
    seen = 0
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        for name in sorted(dirnames + filenames):
            seen += 1
            if seen > _MAX_SCAN_ENTRIES:
                return refused
            path = Path(dirpath) / name
            if not path.is_symlink():
                continue
            try:
                target = os.readlink(path)
            except OSError:
                continue
            inside = posixpath.relpath(path.parent.as_posix(), folder.as_posix())
            if posixpath.isabs(target):
                sink.file(
                    path,
                    WARNING,
                    f"is a symlink to {target}: it is uploaded as a link, "
                    f"so in the sandbox it points at the sandbox's {target}, not at a "
                    "file of the task",
                )
                continue
            landed = posixpath.normpath(posixpath.join(inside, target))
            if landed == ".." or landed.startswith("../"):
                sink.file(
                    path,
                    ERROR,
                    f"is a symlink to {target}, which leaves {rel}/: cairn "
                    "uploads links as links, so in the sandbox it points at nothing; "
                    f"copy the file into {rel}/ (or link to one inside it)",
                )
                refused.add(path)
    return refused


# -- steps ---------------------------------------------------------------------------------


def _check_steps(root: Path, doc: dict[str, Any], steps: list[Any], sink: FindingSink) -> list[str]:
    """Names, folders, instructions and tests of declared steps; returns the usable names."""
    seen: dict[str, int] = {}
    valid: list[str] = []
    task_mode = declared_verifier_mode(_table(doc, "verifier"))
    shared_test = not _missing(root / "tests" / "test.sh")
    for i, entry in enumerate(steps):
        if not isinstance(entry, dict):
            continue
        where = ("steps", i, "name")
        if "name" not in entry:
            sink.key(("steps", i), ERROR, f"[[steps]] entry {i + 1} has no `name`")
            continue
        name = entry["name"]
        if not isinstance(name, str):
            continue
        if name == "":
            sink.key(where, ERROR, f"[[steps]] entry {i + 1} has an empty name")
            continue
        if not STEP_NAME_RE.match(name):
            sink.key(
                where,
                ERROR,
                f"step name {name!r} is not allowed: use letters, digits, "
                "`.`, `_` and `-`, starting with a letter or digit (no `/`, no `..`)",
            )
            continue
        if name in seen:
            sink.key(where, ERROR, f"duplicate step name `{name}` (also [[steps]] entry {seen[name] + 1})")
            continue
        seen[name] = i
        step_dir = root / "steps" / name
        if not step_dir.is_dir():
            sink.key(where, ERROR, f"step `{name}` is declared but `steps/{name}/` does not exist")
            continue
        valid.append(name)
        if not (step_dir / "instruction.md").is_file():
            sink.key(where, ERROR, f"step `{name}`: `steps/{name}/instruction.md` is missing")
        else:
            check_utf8(step_dir / "instruction.md", sink)
        mode = declared_verifier_mode(_table(entry, "verifier")) or task_mode or "shared"
        if mode == "shared" and not shared_test and _missing(step_dir / "tests" / "test.sh"):
            sink.key(
                where,
                ERROR,
                f"step `{name}` has no test: neither `steps/{name}/tests/test.sh` nor `tests/test.sh` exists",
            )
    return valid


def _check_undeclared_step_dirs(root: Path, steps: list[Any], sink: FindingSink) -> None:
    steps_dir = root / "steps"
    if not steps_dir.is_dir():
        return
    declared = {e.get("name") for e in steps if isinstance(e, dict)}
    for child in sorted(steps_dir.iterdir()):
        if child.is_dir() and child.name not in declared:
            sink.file(
                child,
                WARNING,
                f"`steps/{child.name}/` is not declared by any [[steps]] entry in task.toml (it is ignored)",
                rule="undeclared-step-folder",
            )


# -- environment -----------------------------------------------------------------------------


def _check_environment_definition(root: Path, doc: dict[str, Any], sink: FindingSink) -> None:
    image = _table(doc, "environment").get("docker_image")
    env_dir = root / "environment"
    if isinstance(image, str) and image.strip():
        return
    if (env_dir / "Dockerfile").is_file() or find_compose_file(env_dir) is not None:
        return
    sink.key(
        ("environment", "docker_image"),
        ERROR,
        "no environment definition: add `environment/Dockerfile` (or "
        "`environment/docker-compose.yaml`) or set [environment].docker_image",
    )


def _environment_tables(doc: dict[str, Any], steps: list[Any]) -> list[KeyPath]:
    paths: list[KeyPath] = [("environment",), ("verifier", "environment")]
    paths += [("steps", i, "verifier", "environment") for i in range(len(steps))]
    return paths


def _phase_tables(doc: dict[str, Any], steps: list[Any]) -> list[KeyPath]:
    """The per-phase tables that may set ``network_mode`` / ``allowed_hosts`` (Harbor 0.26)."""
    paths: list[KeyPath] = [("agent",), ("verifier",)]
    for i in range(len(steps)):
        paths += [("steps", i, "agent"), ("steps", i, "verifier")]
    return paths


def _check_environment_table(env: dict[str, Any], path: KeyPath, sink: FindingSink) -> None:
    os_name = env.get("os")
    if isinstance(os_name, str) and os_name != "linux":
        sink.key(
            path + ("os",),
            ERROR,
            f'`{format_key_path(path + ("os",))}` is {os_name!r}: only "linux" is supported',
        )
    _check_network_keys(env, path, sink)


def _check_network_keys(table: dict[str, Any], path: KeyPath, sink: FindingSink) -> None:
    """``allowed_hosts`` only with ``network_mode = "allowlist"``; every entry a host name,
    ``*.wildcard``, address or CIDR (:class:`cairn.netpolicy.AllowEntry`), located by line."""
    hosts = table.get("allowed_hosts")
    if not isinstance(hosts, list):
        return
    key = path + ("allowed_hosts",)
    if hosts and table.get("network_mode") != "allowlist":
        sink.key(key, ERROR, f'`{format_key_path(key)}` needs `network_mode = "allowlist"`')
    for i, entry in enumerate(hosts):
        if not isinstance(entry, str):
            continue  # a type error, already reported by the schema check
        try:
            AllowEntry.parse(entry)
        except ValueError as exc:
            sink.key(key + (i,), ERROR, f"`{format_key_path(key)}` entry {i + 1}: {exc}")


def _check_env_tables(doc: dict[str, Any], steps: list[Any], sink: FindingSink) -> None:
    paths: list[KeyPath] = [
        ("environment", "env"),
        ("verifier", "env"),
        ("solution", "env"),
        ("verifier", "environment", "env"),
    ]
    for i in range(len(steps)):
        paths += [("steps", i, "verifier", "env"), ("steps", i, "verifier", "environment", "env")]
    for path in paths:
        for key, value in _table(doc, *path).items():
            if isinstance(value, str) and embedded_template(value):
                sink.key(
                    path + (key,),
                    ERROR,
                    f"`{format_key_path(path + (key,))}` = {value!r}: a template must be "
                    "the whole value (`${VAR}` or `${VAR:-default}`)",
                )


# -- MCP servers and LLM judges (issue 22) ---------------------------------------------------


def _mode(*tables: dict[str, Any]) -> str:
    """A phase's network mode from its tables, most specific first (``public`` by default)."""
    for t in tables:
        mode = t.get("network_mode")
        if isinstance(mode, str):
            return mode
        if isinstance(t.get("allow_internet"), bool):
            return "public" if t["allow_internet"] else "no-network"
    return "public"


def _offline_agent_phases(doc: dict[str, Any], steps: list[Any]) -> list[str]:
    """The agent phases whose network mode is ``no-network``: ``["agent"]`` for a single-step
    task, the names of the steps for a multi-step one (each step's ``[steps.agent]``, else the
    task's ``[agent]``, else ``[environment]``)."""
    env, agent = _table(doc, "environment"), _table(doc, "agent")
    if not steps:
        return ["agent"] if _mode(agent, env) == "no-network" else []
    out: list[str] = []
    for i, entry in enumerate(steps):
        if _mode(_table(doc, "steps", i, "agent"), agent, env) == "no-network":
            name = entry.get("name") if isinstance(entry, dict) else None
            out.append(f"step `{name}`" if isinstance(name, str) else f"step {i + 1}")
    return out


def compose_hosts(root: Path) -> frozenset[str] | None:
    """The names the main container reaches the environment's compose services by: every
    service name and every network alias (``services.X.networks.N.aliases``).

    Under ``no-network`` (and every other mode) a compose project's networks stay, so ``main``
    reaches these names whatever the agent phase's mode (docs/compose-and-separate.md).

    Args:
        root: the task folder.

    Returns:
        The names (lower-case); ``None`` when the task has no readable compose file.
    """
    import yaml

    compose = find_compose_file(root / "environment")
    if compose is None or not compose.is_file():
        return None
    try:
        doc = load_yaml_file(compose)
    except (InputFileError, yaml.YAMLError):
        return None  # reported by _check_compose
    services = doc.get("services") if isinstance(doc, dict) else None
    if not isinstance(services, dict):
        return None
    names = {str(n).lower() for n in services}
    for svc in services.values():
        nets = svc.get("networks") if isinstance(svc, dict) else None
        for net in nets.values() if isinstance(nets, dict) else []:
            aliases = net.get("aliases") if isinstance(net, dict) else None
            if isinstance(aliases, list):
                names |= {a.lower() for a in aliases if isinstance(a, str)}
    return frozenset(names)


def _check_mcp_servers(root: Path, doc: dict[str, Any], steps: list[Any], sink: FindingSink) -> None:
    """Each ``[[environment.mcp_servers]]`` entry readable; under a ``no-network`` agent phase,
    a stdio server that downloads itself (``npx``/``uvx``, also behind ``env``) and a remote
    one whose URL is neither the sandbox's loopback nor a compose service are warned about."""
    from cairn.task.mcp import (
        is_loopback_host,
        parse_mcp_servers,
        remote_host,
        self_download_command,
    )

    entries = _table(doc, "environment").get("mcp_servers")
    if not isinstance(entries, list) or not entries:
        return
    path: KeyPath = ("environment", "mcp_servers")
    try:
        servers = parse_mcp_servers(entries)
    except ValueError as exc:
        sink.key(path, ERROR, f"`environment.mcp_servers`: {exc}")
        return
    offline = _offline_agent_phases(doc, steps)
    if not offline:
        return
    phase = "the agent phase" if offline == ["agent"] else f"the agent phase of {', '.join(offline)}"
    services: frozenset[str] | None = None
    for i, server in enumerate(servers):
        downloader = self_download_command(server)
        if downloader is not None:
            sink.key(
                path + (i,),
                WARNING,
                f"MCP server {server.name!r} runs `{downloader} …`, which downloads "
                f"the server when it starts, but {phase} has no network: install "
                "it in the image instead",
                rule="mcp-download-no-network",
            )
        host = remote_host(server)
        if host is None or is_loopback_host(host):
            continue
        if services is None:
            services = compose_hosts(root) or frozenset()
        if host in services:
            continue
        reach = (
            f"its own loopback and the compose services ({', '.join(sorted(services))})"
            if services
            else "its own loopback"
        )
        sink.key(
            path + (i,),
            WARNING,
            f"MCP server {server.name!r} ({server.transport}) is at `{server.url}`, "
            f"but {phase} has no network (no-network): the agent runs in the sandbox and "
            f"reaches only {reach}, not `{host}`; run the server in the sandbox "
            "(`localhost`) or as a compose service, or let the agent phase reach it "
            f'(`network_mode = "allowlist"` with `{host}` in `allowed_hosts`)',
            rule="mcp-remote-no-network",
        )


def _check_judges(doc: dict[str, Any], steps: list[Any], sink: FindingSink) -> None:
    """A judge credential template under a verifier without network needs the egress
    gateway (docker); warn that the local backend refuses it."""
    from cairn.task.judge import judge_credentials

    env, verifier = _table(doc, "environment"), _table(doc, "verifier")
    tables: list[tuple[KeyPath, str]] = [(("verifier", "env"), _mode(verifier, env))]
    for i in range(len(steps)):
        tables.append(
            (("steps", i, "verifier", "env"), _mode(_table(doc, "steps", i, "verifier"), verifier, env))
        )
    for path, mode in tables:
        t = {k: v for k, v in _table(doc, *path).items() if isinstance(v, str)}
        found = judge_credentials(t)
        if found and mode == "no-network":
            names = ", ".join(p.credential for p in found)
            sink.key(
                path + (found[0].credential,),
                WARNING,
                f"`{format_key_path(path)}` asks for a judge credential ({names}) under a "
                f"{mode} verifier: cairn opens the judge's host for the verifier through "
                "the egress gateway, which only the docker backend has (-e local refuses "
                "this task)",
                rule="judge-no-network",
            )


# -- Harbor 0.26 rules ---------------------------------------------------------------------

_ORG_NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*$")
"""Harbor 0.26's ``[task].name`` pattern (``org/name``)."""

_SERVICE_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")
"""A Docker Compose service name."""


def _verifier_tables(steps: list[Any]) -> list[KeyPath]:
    return [("verifier",)] + [("steps", i, "verifier") for i in range(len(steps))]


def _check_harbor_rules(doc: dict[str, Any], steps: list[Any], sink: FindingSink) -> None:
    """What Harbor 0.26's task models refuse or migrate, checked the same way here."""
    name = _table(doc, "task").get("name")
    if isinstance(name, str) and name and (not _ORG_NAME_RE.match(name) or ".." in name):
        sink.key(
            ("task", "name"),
            WARNING,
            f"`task.name` = {name!r} is not in `org/name` form: cairn accepts it, "
            "Harbor 0.26 refuses to load the task",
            rule="harbor-task-name",
        )
    for path in _verifier_tables(steps):
        verifier = _table(doc, *path)
        if verifier.get("environment_mode") == "shared" and isinstance(verifier.get("environment"), dict):
            where = format_key_path(path)
            sink.key(
                path + ("environment_mode",),
                ERROR,
                f'`{where}.environment_mode = "shared"` conflicts with '
                f"[{where}.environment]: a shared verifier has no environment of its "
                'own; drop the table or set `environment_mode = "separate"`',
            )
        hooks = verifier.get("collect")
        for k, hook in enumerate(hooks if isinstance(hooks, list) else []):
            if isinstance(hook, dict):
                _check_service(hook.get("service"), path + ("collect", k, "service"), sink)
    for path in _environment_tables(doc, steps):
        env = _table(doc, *path)
        for legacy, field in (("memory", "memory_mb"), ("storage", "storage_mb")):
            if legacy not in env:
                continue
            here = path + (legacy,)
            raw = env[legacy]
            if not isinstance(raw, str):
                continue  # a type error, already reported
            mb = parse_size_mb(raw)
            if mb is None:
                sink.key(
                    here,
                    ERROR,
                    f"`{format_key_path(here)}` = {raw!r}: expected a size "
                    f'like "1G" or "512M" (better: `{field}` in MiB)',
                )
            elif isinstance(env.get(field), int) and env[field] != mb:
                sink.key(
                    here,
                    ERROR,
                    f"`{format_key_path(here)}` = {raw!r} ({mb} MiB) conflicts with `{field}` = {env[field]}",
                )
            else:
                sink.key(
                    here,
                    WARNING,
                    f"`{format_key_path(here)}` is deprecated: applied "
                    f"as `{field} = {mb}`; write that instead",
                    rule="deprecated-size-key",
                )
        if isinstance(env.get("tpu"), dict):
            sink.key(
                path + ("tpu",),
                ERROR,
                f"`{format_key_path(path + ('tpu',))}`: cairn "
                "has no backend that attaches TPUs; this task cannot run here",
            )
        gpu_types = env.get("gpu_types")
        if isinstance(gpu_types, list) and gpu_types and not env.get("gpus"):
            sink.key(
                path + ("gpu_types",),
                WARNING,
                f"`{format_key_path(path + ('gpu_types',))}` has no effect without `gpus` > 0",
                rule="gpu-types-without-gpus",
            )
    for base in [("artifacts",)] + [("steps", i, "artifacts") for i in range(len(steps))]:
        entries = _table(doc, *base[:-1]).get(base[-1]) if len(base) > 1 else doc.get(base[0])
        for k, entry in enumerate(entries if isinstance(entries, list) else []):
            if isinstance(entry, dict) and "service" in entry:
                _check_service(entry.get("service"), base + (k, "service"), sink)


def _check_service(value: Any, path: KeyPath, sink: FindingSink) -> None:
    if isinstance(value, str) and not _SERVICE_RE.match(value.strip()):
        sink.key(
            path,
            ERROR,
            f"`{format_key_path(path)}` = {value!r} is not a compose "
            "service name (letters, digits, `_`, `.`, `-`, starting with a letter or "
            "digit)",
        )


def _check_compose(root: Path, doc: dict[str, Any], sink: FindingSink) -> None:
    """A compose file every backend refuses (:mod:`cairn.sandbox.compose_check`), reported
    without a backend."""
    from cairn.sandbox.compose_check import compose_file_problem

    env_dir = root / "environment"
    compose = find_compose_file(env_dir)
    if compose is None or not compose.is_file():
        return  # a FIFO or a refused link: reported by check_special_files / check_links
    image = _table(doc, "environment").get("docker_image")
    supplied = (isinstance(image, str) and bool(image.strip())) or (env_dir / "Dockerfile").is_file()
    problem = compose_file_problem(compose, main_supplied=supplied)
    if problem is not None:
        sink.file(compose, ERROR, problem[0], problem[1])


def _check_services_exist(root: Path, doc: dict[str, Any], sink: FindingSink) -> None:
    """Artifacts and collect hooks that name a service need a compose file that defines it."""
    wanted = uses_services(doc)
    if not wanted:
        return
    compose = find_compose_file(root / "environment")
    if compose is None:
        sink.file(
            root,
            ERROR,
            f"artifacts or [[verifier.collect]] name service(s) "
            f"{', '.join(sorted(wanted))}, but the task has no "
            "environment/docker-compose.yaml",
        )
        return
    import yaml

    try:
        doc = load_yaml_file(compose)
    except (InputFileError, yaml.YAMLError):
        return  # reported by _check_compose
    services = doc.get("services") if isinstance(doc, dict) else None
    if isinstance(services, dict):
        missing = sorted(wanted - set(services))
        if missing:
            sink.file(
                compose,
                ERROR,
                f"no service {', '.join(missing)} (named by artifacts or [[verifier.collect]] in task.toml)",
            )


def uses_services(doc: dict[str, Any]) -> set[str]:
    """The compose services other than ``main`` that artifacts and collect hooks name.

    Args:
        doc: the parsed task.toml.

    Returns:
        The service names (empty when everything targets the main container).
    """
    out: set[str] = set()
    steps = declared_steps(doc)
    lists: list[Any] = [doc.get("artifacts")]
    lists += [_table(doc, "steps", i).get("artifacts") for i in range(len(steps))]
    for path in _verifier_tables(steps):
        lists.append(_table(doc, *path).get("collect"))
    for entries in lists:
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, dict):
                svc = entry.get("service")
                if isinstance(svc, str) and svc.strip() and svc.strip() != MAIN_SERVICE:
                    out.add(svc.strip())
    return out


# -- artifacts -------------------------------------------------------------------------------


def _artifact_parts(entry: Any) -> tuple[str | None, str | None]:
    if isinstance(entry, str):
        return entry, None
    if isinstance(entry, dict):
        src, dst = entry.get("source"), entry.get("destination")
        return (src if isinstance(src, str) else None), (dst if isinstance(dst, str) else None)
    return None, None


def _has_dotdot(p: str) -> bool:
    return ".." in p.replace("\\", "/").split("/")


def _check_artifact_list(entries: Any, base: KeyPath, sink: FindingSink, taken: dict[str, KeyPath]) -> None:
    if not isinstance(entries, list):
        return
    for k, entry in enumerate(entries):
        path = base + (k,)
        src, dst = _artifact_parts(entry)
        if src is None:
            continue
        if not src.startswith("/"):
            sink.key(path, ERROR, f"artifact source {src!r} must be an absolute sandbox path")
        elif _has_dotdot(src):
            sink.key(path, ERROR, f"artifact source {src!r} must not contain `..`")
        if dst is not None and (dst.startswith("/") or _has_dotdot(dst)):
            sink.key(path, ERROR, f"artifact destination {dst!r} must be a relative path without `..`")
        effective = dst if dst is not None else src.lstrip("/")
        norm = posixpath.normpath(effective) if effective else "."
        if norm in taken:
            sink.key(
                path,
                ERROR,
                f"two artifacts have the destination {norm!r} (also `{format_key_path(taken[norm])}`)",
            )
        else:
            taken[norm] = path


def _check_artifacts(doc: dict[str, Any], steps: list[Any], sink: FindingSink) -> None:
    task_level: dict[str, KeyPath] = {}
    _check_artifact_list(doc.get("artifacts"), ("artifacts",), sink, task_level)
    for i, entry in enumerate(steps):
        if isinstance(entry, dict):
            _check_artifact_list(entry.get("artifacts"), ("steps", i, "artifacts"), sink, dict(task_level))


# -- files -----------------------------------------------------------------------------------

UNPINNED_IMAGE = "unpinned-image"
"""The rule id of an image reference without a tag or with ``:latest`` (docs/lint.md)."""

_FROM_RE = re.compile(r"^\s*FROM\s+(?P<rest>.*)$", re.IGNORECASE)


def _too_big_to_lint(path: Path, sink: FindingSink) -> bool:
    """A script or Dockerfile over the parse cap is run or built as it is (a verifier with its
    data inline is legal) but not read for the checks here: a warning says so."""
    try:
        size = path.stat().st_size
    except OSError:
        return False
    if size <= MAX_INPUT_BYTES or not path.is_file():
        return False
    sink.file(
        path,
        WARNING,
        f"is {size / (1 << 20):.1f} MiB, over the {MAX_INPUT_BYTES >> 20} MiB "
        "cairn reads for its checks: not checked (it still runs as it is)",
        rule="too-big-to-check",
    )
    return True


def _check_dockerfile(dockerfile: Path, sink: FindingSink) -> None:
    """``FROM image`` without a tag or with ``:latest`` → warning with the line."""
    if _too_big_to_lint(dockerfile, sink):
        return
    try:
        text = read_input(dockerfile).decode("utf-8", errors="replace")
    except InputFileError as exc:
        sink.file(dockerfile, ERROR, exc.reason, exc.line)
        return
    stages: set[str] = set()
    pending: list[str] = []  # the parts of a continued instruction (joined once: linear time)
    start = 0
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if not pending:
            start = lineno
            if raw.lstrip().startswith("#"):
                continue
        if raw.rstrip().endswith("\\"):
            pending.append(raw.rstrip()[:-1] + " ")
            continue
        line = "".join(pending) + raw
        pending = []
        m = _FROM_RE.match(line)
        if not m:
            continue
        tokens = [t for t in m.group("rest").split() if not t.startswith("--")]
        if not tokens:
            continue
        image = tokens[0]
        if len(tokens) >= 3 and tokens[1].lower() == "as":
            stages.add(tokens[2].lower())
        if image.lower() in stages or image == "scratch" or "$" in image or "@" in image:
            continue
        last = image.rsplit("/", 1)[-1]
        if ":" not in last:
            sink.file(
                dockerfile,
                WARNING,
                f"`FROM {image}` has no tag; pin one "
                "(e.g. `debian:bookworm-slim`) so that builds are reproducible",
                start,
                rule=UNPINNED_IMAGE,
            )
        elif last.endswith(":latest"):
            sink.file(
                dockerfile,
                WARNING,
                f"`FROM {image}` uses `:latest`; pin a version so that builds are reproducible",
                start,
                rule=UNPINNED_IMAGE,
            )


_SET_E_RE = re.compile(r"^\s*set\s+(?P<opts>.*)$")
_TRAP_RE = re.compile(r"^\s*trap\s+.*\b(EXIT|ERR|0)\b")


def set_e_risk(text: str) -> int | None:
    """Whether a test.sh uses ``set -e`` and could exit before writing its reward.

    Heuristic: errexit is on (``set -e``, ``set -euo pipefail``, ``set -o errexit`` or a
    ``-e`` shebang flag) at the first line that touches the reward (``reward.txt``,
    ``reward.json``, ``/logs/verifier``) — or anywhere when no line does — and no
    ``trap … EXIT|ERR`` guards it.

    Args:
        text: the script's text.

    Returns:
        The 1-based line that turned errexit on when the script is at risk, else ``None``.
    """
    errexit_line: int | None = None
    lines = text.splitlines()
    if lines and lines[0].startswith("#!") and re.search(r"\s-[A-Za-z]*e", lines[0]):
        errexit_line = 1
    ever_on: int | None = errexit_line
    for lineno, line in enumerate(lines, start=1):
        stripped = line.strip()
        if stripped.startswith("#"):
            continue
        if _TRAP_RE.match(line):
            return None
        m = _SET_E_RE.match(line)
        if m:
            opts = m.group("opts").split("#", 1)[0].split()
            for k, opt in enumerate(opts):
                if opt.startswith("-") and "e" in opt[1:] and opt[1:2] != "-":
                    errexit_line = lineno
                    ever_on = ever_on or lineno
                elif opt.startswith("+") and "e" in opt[1:]:
                    errexit_line = None
                elif opt == "-o" and k + 1 < len(opts) and opts[k + 1] == "errexit":
                    errexit_line = lineno
                    ever_on = ever_on or lineno
                elif opt == "+o" and k + 1 < len(opts) and opts[k + 1] == "errexit":
                    errexit_line = None
            continue
        if any(w in line for w in ("reward.txt", "reward.json", "/logs/verifier")):
            return errexit_line
    return ever_on


def _check_scripts(root: Path, step_names: list[str], sink: FindingSink) -> None:
    tests = [root / "tests" / "test.sh"] + [root / "steps" / n / "tests" / "test.sh" for n in step_names]
    others = [root / "solution" / "solve.sh"]
    for n in step_names:
        others += [root / "steps" / n / "solution" / "solve.sh", root / "steps" / n / "workdir" / "setup.sh"]
    for script in tests + others:
        if script.is_dir():
            sink.file(script, ERROR, "is a folder: cairn runs this path as a script, it must be a file")
            continue
        if not script.is_file():
            continue  # missing (reported where it is required), a FIFO or a refused link
        if _too_big_to_lint(script, sink):
            continue
        try:
            data = read_input(script)
        except InputFileError as exc:
            sink.file(script, ERROR, exc.reason, exc.line)
            continue
        if b"\r\n" in data:
            sink.file(
                script,
                WARNING,
                "CRLF line endings (cairn normalises them when it runs the script; convert the file to LF)",
                rule="script-crlf",
            )
        if script in tests:
            line = set_e_risk(data.decode("utf-8", errors="replace"))
            if line is not None:
                sink.file(
                    script,
                    WARNING,
                    "uses `set -e` and could exit before writing a "
                    "reward; write the reward in a `trap … EXIT` or guard the commands "
                    "that may fail",
                    line,
                    rule="script-set-e",
                )
