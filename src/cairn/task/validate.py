"""The task-folder checks of SPEC §2 that go beyond key types.

Every check reads the parsed task.toml document defensively (a value of the wrong type has
already been reported by :mod:`cairn.task.schema_check` and is skipped here) and the files of
the task folder, and reports to a :class:`~cairn.task.findings.FindingSink`. Nothing here
raises for a bad task.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from cairn._util.text import NotUtf8Error, decode_utf8
from cairn.task.envvars import embedded_template
from cairn.task.findings import ERROR, WARNING, FindingSink, format_key_path
from cairn.task.model import STEP_NAME_RE

KeyPath = tuple[str | int, ...]

COMPOSE_FILES = ("docker-compose.yaml", "docker-compose.yml")


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


def check_task_folder(root: Path, doc: dict[str, Any], sink: FindingSink, *,
                      instruction_in_header: bool = False) -> None:
    """Run every folder and semantic check of SPEC §2.

    Args:
        root: the task folder, as the caller named it (findings use it as their prefix).
        doc: the parsed task.toml (or task.md front-matter).
        sink: receives the findings.
        instruction_in_header: the instruction is the body of task.md (no instruction.md
            needed for a single-step task).
    """
    steps = declared_steps(doc)
    valid_names = _check_steps(root, doc, steps, sink) if steps else []
    if "steps" in doc and not isinstance(doc["steps"], list):
        pass  # a type error already reported; whether the task is multi-step is unknown
    elif not steps:
        if not instruction_in_header and not (root / "instruction.md").is_file():
            sink.file(root, ERROR, "missing `instruction.md` (required for a single-step task)")
        elif not instruction_in_header:
            check_utf8(root / "instruction.md", sink)
        if not (root / "tests" / "test.sh").is_file():
            sink.file(root, ERROR, "missing `tests/test.sh` (the verifier of a single-step task)")
    elif (root / "instruction.md").is_file():
        sink.file(root / "instruction.md", WARNING,
                  "not used by a multi-step task (each step reads steps/<name>/instruction.md)")
    _check_undeclared_step_dirs(root, steps, sink)
    _check_environment_definition(root, doc, sink)
    _check_artifacts(doc, steps, sink)
    _check_env_tables(doc, steps, sink)
    for path in _environment_tables(doc, steps):
        _check_environment_table(_table(doc, *path), path, sink)
    dockerfile = root / "environment" / "Dockerfile"
    if dockerfile.is_file():
        _check_dockerfile(dockerfile, sink)
    _check_scripts(root, valid_names, sink)


def check_utf8(path: Path, sink: FindingSink) -> None:
    """Report a text file the agent gets (an instruction.md) that is not valid UTF-8, with the
    byte offset and line of the first bad byte (a byte-order mark and CRLF are fine).

    Args:
        path: the file.
        sink: receives the finding.
    """
    try:
        decode_utf8(path.read_bytes())
    except NotUtf8Error as exc:
        sink.file(path, ERROR, str(exc), exc.line)
    except OSError as exc:
        sink.file(path, ERROR, f"cannot read: {exc.strerror or exc}")


# -- steps ---------------------------------------------------------------------------------

def _check_steps(root: Path, doc: dict[str, Any], steps: list[Any], sink: FindingSink) -> list[str]:
    """Names, folders, instructions and tests of declared steps; returns the usable names."""
    seen: dict[str, int] = {}
    valid: list[str] = []
    task_mode = _table(doc, "verifier").get("environment_mode")
    shared_test = (root / "tests" / "test.sh").is_file()
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
            sink.key(where, ERROR, f"step name {name!r} is not allowed: use letters, digits, "
                     "`.`, `_` and `-`, starting with a letter or digit (no `/`, no `..`)")
            continue
        if name in seen:
            sink.key(where, ERROR, f"duplicate step name `{name}` "
                     f"(also [[steps]] entry {seen[name] + 1})")
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
        mode = _table(entry, "verifier").get("environment_mode") or task_mode or "shared"
        if mode == "shared" and not shared_test and not (step_dir / "tests" / "test.sh").is_file():
            sink.key(where, ERROR, f"step `{name}` has no test: neither "
                     f"`steps/{name}/tests/test.sh` nor `tests/test.sh` exists")
    return valid


def _check_undeclared_step_dirs(root: Path, steps: list[Any], sink: FindingSink) -> None:
    steps_dir = root / "steps"
    if not steps_dir.is_dir():
        return
    declared = {e.get("name") for e in steps if isinstance(e, dict)}
    for child in sorted(steps_dir.iterdir()):
        if child.is_dir() and child.name not in declared:
            sink.file(child, WARNING, f"`steps/{child.name}/` is not declared by any "
                      "[[steps]] entry in task.toml (it is ignored)")


# -- environment -----------------------------------------------------------------------------

def _check_environment_definition(root: Path, doc: dict[str, Any], sink: FindingSink) -> None:
    image = _table(doc, "environment").get("docker_image")
    env_dir = root / "environment"
    if isinstance(image, str) and image.strip():
        return
    if (env_dir / "Dockerfile").is_file() or any((env_dir / n).is_file() for n in COMPOSE_FILES):
        return
    sink.key(("environment", "docker_image"), ERROR,
             "no environment definition: add `environment/Dockerfile` (or "
             "`environment/docker-compose.yaml`) or set [environment].docker_image")


def _environment_tables(doc: dict[str, Any], steps: list[Any]) -> list[KeyPath]:
    paths: list[KeyPath] = [("environment",), ("verifier", "environment")]
    paths += [("steps", i, "verifier", "environment") for i in range(len(steps))]
    return paths


def _check_environment_table(env: dict[str, Any], path: KeyPath, sink: FindingSink) -> None:
    os_name = env.get("os")
    if isinstance(os_name, str) and os_name != "linux":
        sink.key(path + ("os",), ERROR, f"`{format_key_path(path + ('os',))}` is {os_name!r}: "
                 "only \"linux\" is supported")
    hosts = env.get("allowed_hosts")
    if isinstance(hosts, list) and hosts and env.get("network_mode") != "allowlist":
        sink.key(path + ("allowed_hosts",), ERROR,
                 f"`{format_key_path(path + ('allowed_hosts',))}` needs "
                 "`network_mode = \"allowlist\"`")


def _check_env_tables(doc: dict[str, Any], steps: list[Any], sink: FindingSink) -> None:
    paths: list[KeyPath] = [("environment", "env"), ("verifier", "env"), ("solution", "env"),
                            ("verifier", "environment", "env")]
    for i in range(len(steps)):
        paths += [("steps", i, "verifier", "env"), ("steps", i, "verifier", "environment", "env")]
    for path in paths:
        for key, value in _table(doc, *path).items():
            if isinstance(value, str) and embedded_template(value):
                sink.key(path + (key,), ERROR,
                         f"`{format_key_path(path + (key,))}` = {value!r}: a template must be "
                         "the whole value (`${VAR}` or `${VAR:-default}`)")


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


def _check_artifact_list(entries: Any, base: KeyPath, sink: FindingSink,
                         taken: dict[str, KeyPath]) -> None:
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
            sink.key(path, ERROR, f"artifact destination {dst!r} must be a relative path "
                     "without `..`")
        effective = dst if dst is not None else src.lstrip("/")
        norm = posixpath.normpath(effective) if effective else "."
        if norm in taken:
            sink.key(path, ERROR, f"two artifacts have the destination {norm!r} "
                     f"(also `{format_key_path(taken[norm])}`)")
        else:
            taken[norm] = path


def _check_artifacts(doc: dict[str, Any], steps: list[Any], sink: FindingSink) -> None:
    task_level: dict[str, KeyPath] = {}
    _check_artifact_list(doc.get("artifacts"), ("artifacts",), sink, task_level)
    for i, entry in enumerate(steps):
        if isinstance(entry, dict):
            _check_artifact_list(entry.get("artifacts"), ("steps", i, "artifacts"), sink,
                                 dict(task_level))


# -- files -----------------------------------------------------------------------------------

_FROM_RE = re.compile(r"^\s*FROM\s+(?P<rest>.*)$", re.IGNORECASE)


def _check_dockerfile(dockerfile: Path, sink: FindingSink) -> None:
    """``FROM image`` without a tag or with ``:latest`` → warning with the line."""
    text = dockerfile.read_text(encoding="utf-8", errors="replace")
    stages: set[str] = set()
    pending = ""
    start = 0
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if not pending:
            start = lineno
            if raw.lstrip().startswith("#"):
                continue
        line = pending + raw
        if line.rstrip().endswith("\\"):
            pending = line.rstrip()[:-1] + " "
            continue
        pending = ""
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
            sink.file(dockerfile, WARNING, f"`FROM {image}` has no tag; pin one "
                      "(e.g. `debian:bookworm-slim`) so that builds are reproducible", start)
        elif last.endswith(":latest"):
            sink.file(dockerfile, WARNING, f"`FROM {image}` uses `:latest`; pin a version "
                      "so that builds are reproducible", start)


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
    tests = [root / "tests" / "test.sh"] + [root / "steps" / n / "tests" / "test.sh"
                                            for n in step_names]
    others = [root / "solution" / "solve.sh"]
    for n in step_names:
        others += [root / "steps" / n / "solution" / "solve.sh",
                   root / "steps" / n / "workdir" / "setup.sh"]
    for script in tests + others:
        if not script.is_file():
            continue
        data = script.read_bytes()
        if b"\r\n" in data:
            sink.file(script, WARNING, "CRLF line endings (cairn normalises them when it runs "
                      "the script; convert the file to LF)")
        if script in tests:
            line = set_e_risk(data.decode("utf-8", errors="replace"))
            if line is not None:
                sink.file(script, WARNING, "uses `set -e` and could exit before writing a "
                          "reward; write the reward in a `trap … EXIT` or guard the commands "
                          "that may fail", line)
