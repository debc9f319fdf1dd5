"""Load and validate task folders (design §1, §2).

- :func:`load_task` reads a task folder (``task.toml`` + files, or BenchFlow's single-file
  ``task.md`` with a TOML ``+++`` or YAML ``---`` front-matter header) into a resolved
  :class:`~cairn.task.model.Task`: every step with its files and effective settings.
- :func:`check_task` runs the same validation and returns the findings without raising;
  :func:`check_paths` does it for tasks and dataset folders (``cairn tasks check``).
- :func:`find_tasks` / :func:`load_dataset` tell a task folder from a dataset folder.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cairn._util.inputfiles import InputFileError, load_yaml, read_input
from cairn._util.text import NotUtf8Error, decode_utf8
from cairn.errors import TaskFormatError
from cairn.task.findings import (
    ERROR,
    INVALID_CONFIG,
    INVALID_FILES,
    Finding,
    FindingSink,
    has_errors,
    promote_warnings,
)
from cairn.task.hashing import env_hash, task_content_hash
from cairn.task.keylines import KeyLines, toml_key_lines, yaml_key_lines
from cairn.task.model import (
    DEFAULT_AGENT_TIMEOUT_SEC,
    DEFAULT_VERIFIER_TIMEOUT_SEC,
    PRE_ARTIFACTS_SH,
    SINGLE_STEP_NAME,
    Step,
    StepConfig,
    Task,
    TaskConfig,
)
from cairn.task.schema_check import check_document, validate_config
from cairn.task.validate import check_task_folder, link_problem

TASK_TOML = "task.toml"
TASK_MD = "task.md"

_TOML_POS_RE = re.compile(r"at line (\d+), column (\d+)")


# -- task or dataset -----------------------------------------------------------------------------


def is_task_dir(path: Path) -> bool:
    """Whether ``path`` is a task folder: it holds ``task.toml`` or ``task.md``.

    Args:
        path: any path.

    Returns:
        ``True`` for a task folder.
    """
    path = Path(path)
    # lexists: a task.toml that is a FIFO or a dangling link still makes a task folder (one
    # whose check says what is wrong with that file, not "not a task")
    return any(os.path.lexists(path / n) and not (path / n).is_dir() for n in (TASK_TOML, TASK_MD))


def find_tasks(path: Path) -> list[Path]:
    """The task folders a path names (design §8 ``-p``).

    Args:
        path: a task folder, or a dataset folder (its immediate sub-folders that are tasks).

    Returns:
        ``[path]`` for a task; the dataset's task folders sorted by name; ``[]`` when the path
        is neither (missing, a file, or a folder without tasks).
    """
    path = Path(path)
    if is_task_dir(path):
        return [path]
    return task_dirs(path)


def task_dirs(path: Path) -> list[Path]:
    """The immediate sub-folders of a dataset folder that are tasks.

    Args:
        path: a dataset folder.

    Returns:
        Task folders sorted by name; ``[]`` when ``path`` is not a folder or holds none.
    """
    path = Path(path)
    if not path.is_dir():
        return []
    return sorted((c for c in path.iterdir() if c.is_dir() and is_task_dir(c)), key=lambda c: c.name)


def nested_datasets(path: Path) -> list[tuple[Path, int]]:
    """The sub-folders of a folder that are not tasks but hold tasks: datasets one level
    down, which :func:`find_tasks` does not walk (issue 27: they are named, never skipped in
    silence).

    Args:
        path: a folder given as ``-p`` or to ``cairn tasks check``.

    Returns:
        ``(sub-folder, number of tasks in it)`` sorted by name; ``[]`` for a task folder or a
        path that is not a folder.
    """
    path = Path(path)
    if is_task_dir(path) or not path.is_dir():
        return []
    out = []
    for c in sorted(path.iterdir(), key=lambda c: c.name):
        if c.is_dir() and not is_task_dir(c) and (n := len(task_dirs(c))):
            out.append((c, n))
    return out


def load_dataset(path: Path) -> list[Path]:
    """The task folders of a dataset folder (or the task itself when ``path`` is a task).

    Args:
        path: a dataset or task folder.

    Returns:
        Task folders, sorted by name (not loaded: call :func:`load_task` on each).

    Raises:
        TaskFormatError: the path holds no task.
    """
    tasks = find_tasks(path)
    if not tasks:
        raise TaskFormatError(f"{path}: not a task (no task.toml or task.md) and holds no task folders")
    return tasks


# -- reading -------------------------------------------------------------------------------------


@dataclass
class _Analysis:
    root: Path
    sink: FindingSink
    doc: dict[str, Any] | None = None
    config: TaskConfig | None = None
    body: str | None = None  # the instruction of a task.md
    lines: KeyLines | None = None  # where each key of task.toml (or the front-matter) is


def _parse_toml(
    text: str, source: Path, line_offset: int, sink: FindingSink
) -> tuple[dict[str, Any] | None, KeyLines]:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = _TOML_POS_RE.search(str(exc))
        line = int(m.group(1)) + line_offset if m else None
        sink.file(source, ERROR, f"not valid TOML: {exc}", line)
        return None, KeyLines()
    except RecursionError:
        sink.file(source, ERROR, "not valid TOML: nested too deeply")
        return None, KeyLines()
    try:
        lines = toml_key_lines(text, line_offset=line_offset)
    except RecursionError:
        lines = KeyLines()
    return doc, lines


def _parse_yaml(
    text: str, source: Path, line_offset: int, sink: FindingSink
) -> tuple[dict[str, Any] | None, KeyLines]:
    import yaml

    try:
        doc = load_yaml(text, source)
        lines = yaml_key_lines(text, line_offset=line_offset)
    except InputFileError as exc:
        sink.file(
            source,
            ERROR,
            f"not valid YAML: {exc.reason}",
            exc.line + line_offset if exc.line is not None else None,
        )
        return None, KeyLines()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 + line_offset if mark is not None else None
        sink.file(source, ERROR, f"not valid YAML: {exc}".replace("\n", " "), line)
        return None, KeyLines()
    except (RecursionError, ValueError, TypeError) as exc:
        sink.file(source, ERROR, f"not valid YAML: {exc}")
        return None, KeyLines()
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        sink.file(source, ERROR, "the YAML front-matter must be a mapping of task.toml keys", line_offset + 1)
        return None, KeyLines()
    return doc, lines


def _split_front_matter(text: str) -> tuple[str, str, str] | None:
    """``(kind, header, body)`` of a task.md, kind ``toml`` or ``yaml``; ``None`` without one."""
    lines = text.splitlines(keepends=True)
    if not lines:
        return None
    fence = lines[0].strip()
    kind = {"+++": "toml", "---": "yaml"}.get(fence)
    if kind is None:
        return None
    for j in range(1, len(lines)):
        if lines[j].strip() == fence:
            return kind, "".join(lines[1:j]), "".join(lines[j + 1 :])
    return None


def _read_text(path: Path, sink: FindingSink) -> str | None:
    try:
        return decode_utf8(read_input(path))
    except NotUtf8Error as exc:
        sink.file(path, ERROR, str(exc), exc.line)
    except InputFileError as exc:
        sink.file(path, ERROR, exc.reason, exc.line)
    return None


def _analyse(root: Path) -> _Analysis:
    """Parse and validate a task folder; never raises for a bad task."""
    root = Path(root)
    toml_path, md_path = root / TASK_TOML, root / TASK_MD
    source = toml_path if os.path.lexists(toml_path) or not os.path.lexists(md_path) else md_path
    holder: dict[str, KeyLines] = {"lines": KeyLines()}
    sink = FindingSink(source, lambda p: holder["lines"].line(p))
    out = _Analysis(root=root, sink=sink)
    if not root.is_dir():
        sink.file(root, ERROR, "not a task folder (no such directory)")
        return out
    if not os.path.lexists(source):
        sink.file(root, ERROR, "missing `task.toml` (or a single-file `task.md`)")
        return out
    link = link_problem(root, source, uploaded=False)
    if link is not None:
        sink.file(source, ERROR, link)
        return out
    text = _read_text(source, sink)
    if text is None:
        return out
    if source == toml_path:
        doc, lines = _parse_toml(text, source, 0, sink)
    else:
        split = _split_front_matter(text)
        if split is None:
            sink.file(
                source,
                ERROR,
                "task.md must start with a front-matter header between "
                "`+++` lines (TOML) or `---` lines (YAML)",
                1,
            )
            return out
        kind, header, out.body = split
        parse = _parse_toml if kind == "toml" else _parse_yaml
        doc, lines = parse(header, source, 1, sink)
    if doc is None:
        return out
    holder["lines"] = lines
    out.lines = lines
    out.doc = doc
    check_document(doc, sink)
    check_task_folder(root, doc, sink, instruction_in_header=bool(out.body and out.body.strip()))
    out.config = validate_config(doc, sink)
    return out


# -- public checks ---------------------------------------------------------------------------------


def check_task(path: Path, strict: bool = False, *, lint: bool = True) -> list[Finding]:
    """Validate a task folder without starting anything (design §2), then lint it.

    Args:
        path: the task folder; findings name files under it as given (relative stays relative).
        strict: report warnings as errors (``--strict``).
        lint: also run the lint rules of :func:`cairn.task.lint.lint_task` (docs/lint.md) on a
            task without errors, and drop the warnings the task ignores itself
            (``[metadata.harbor.lint].ignore``).

    Returns:
        Every finding, errors and warnings: validation's in the order found, then the lint's.
        Never raises for a bad task.
    """
    analysis = _analyse(Path(path))
    findings = list(analysis.sink.findings)
    if lint and not has_errors(findings) and analysis.config is not None:
        from cairn.task.lint import lint_task, task_ignores

        task = _build(Path(path).resolve(), analysis.config, analysis.body, (), hashes=False)
        try:
            findings += lint_task(Path(path), task, analysis.lines or KeyLines())
        except Exception as exc:  # noqa: BLE001 (a lint bug must not hide the other tasks' results)
            findings.append(
                Finding(
                    Path(path),
                    None,
                    "warning",
                    f"the lint stopped on this task ({type(exc).__name__}: {exc}); please report it",
                    "lint-internal-error",
                )
            )
        ignored = task_ignores(analysis.doc or {})
        findings = [f for f in findings if f.is_error or f.rule not in ignored]
    return promote_warnings(findings) if strict else findings


@dataclass(frozen=True)
class TaskCheck:
    """The result of checking one task folder.

    Attributes:
        path: the task folder (or the path that held no task).
        findings: its findings.
    """

    path: Path
    findings: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        """Whether the task has no error."""
        return not has_errors(self.findings)


def check_paths(paths: Sequence[Path], strict: bool = False, *, lint: bool = True) -> list[TaskCheck]:
    """Check tasks and dataset folders (``cairn tasks check``).

    Args:
        paths: task folders and/or dataset folders.
        strict: report warnings as errors.
        lint: run the lint rules too (:func:`check_task`).

    Returns:
        One :class:`TaskCheck` per task found, in the order of ``paths`` (dataset tasks
        sorted); a path holding no task yields one failed check with an error finding.
    """
    out: list[TaskCheck] = []
    for p in map(Path, paths):
        tasks = find_tasks(p)
        if not tasks:
            down = nested_datasets(p)
            text = (
                "does not exist"
                if not p.exists()
                else "not a task (no task.toml or task.md) and holds no task folders"
                + (
                    "; it holds datasets one level down, check them: cairn tasks check "
                    + " ".join(str(d) for d, _ in down)
                    if down
                    else ""
                )
            )
            out.append(TaskCheck(p, (Finding(p, None, ERROR, text, INVALID_FILES),)))
        for t in tasks:
            out.append(TaskCheck(t, tuple(check_task(t, strict=strict, lint=lint))))
    return out


# -- loading ---------------------------------------------------------------------------------------


def load_task(path: Path, strict: bool = False) -> Task:
    """Load and validate a task folder into a resolved :class:`Task`.

    Args:
        path: the task folder (task.toml or task.md).
        strict: treat warnings as errors.

    Returns:
        The task: absolute path, name, config, steps in order (one ``main`` step for a
        single-step task) with fallbacks applied, content and environment hashes, and the
        warnings found.

    Raises:
        TaskFormatError: the task has errors; ``.findings`` lists them.
    """
    analysis = _analyse(Path(path))
    findings = analysis.sink.findings
    if strict:
        findings = promote_warnings(findings)
    errors = [f for f in findings if f.is_error]
    if errors or analysis.config is None or analysis.doc is None:
        if not errors:  # defensive: a document that produced no config always has an error
            errors = [Finding(Path(path), None, ERROR, "invalid task", INVALID_CONFIG)]
        lines = "\n".join(str(f) for f in errors)
        raise TaskFormatError(f"invalid task {path}: {len(errors)} error(s)\n{lines}", errors)
    warnings = tuple(f for f in findings if not f.is_error)
    return _build(Path(path).resolve(), analysis.config, analysis.body, warnings)


def _existing(*paths: Path) -> tuple[Path, ...]:
    return tuple(p for p in paths if p.is_dir())


def _first_file(*paths: Path) -> Path | None:
    return next((p for p in paths if p.is_file()), None)


def _read_instruction(path: Path) -> str:
    """An instruction.md as the agent gets it: strict UTF-8 (validation already refused a file
    that is not), byte-order mark dropped, CRLF line ends as LF (as Python's text mode reads
    them, and Harbor with it)."""
    if not path.is_file():
        return ""
    return decode_utf8(read_input(path)).replace("\r\n", "\n")


def _build(
    root: Path, config: TaskConfig, body: str | None, warnings: tuple[Finding, ...], *, hashes: bool = True
) -> Task:
    task_agent, task_verifier = config.agent, config.verifier
    if config.steps:
        steps = tuple(_build_step(root, config, k, sc) for k, sc in enumerate(config.steps, 1))
    else:
        instruction = (
            body.replace("\r\n", "\n")
            if body is not None and body.strip()
            else _read_instruction(root / "instruction.md")
        )
        steps = (
            Step(
                index=1,
                name=SINGLE_STEP_NAME,
                instruction=instruction,
                test_sh=_first_file(root / "tests" / "test.sh"),
                tests_dirs=_existing(root / "tests"),
                solution_dirs=_existing(root / "solution"),
                solve_sh=_first_file(root / "solution" / "solve.sh"),
                agent_timeout_sec=_pick(task_agent.timeout_sec, DEFAULT_AGENT_TIMEOUT_SEC),
                agent_user=task_agent.user,
                verifier_timeout_sec=_pick(task_verifier.timeout_sec, DEFAULT_VERIFIER_TIMEOUT_SEC),
                verifier_user=task_verifier.user,
                verifier_env=dict(task_verifier.env),
                verifier_mode=task_verifier.declared_mode or "shared",
                verifier_environment=task_verifier.environment,
                artifacts=config.artifacts,
                pre_artifacts_sh=_first_file(root / PRE_ARTIFACTS_SH),
                collect=task_verifier.collect,
            ),
        )
    env = config.environment
    return Task(
        path=root,
        name=config.task.name or root.name,
        config=config,
        steps=steps,
        multi_step=bool(config.steps),
        content_hash=task_content_hash(root) if hashes else "",
        env_hash=env_hash(root / "environment", docker_image=env.docker_image, workdir=env.workdir)
        if hashes
        else "",
        warnings=warnings,
    )


def _pick(*values: Any) -> Any:
    """The first value that is not ``None``."""
    return next(v for v in values if v is not None)


def _build_step(root: Path, config: TaskConfig, index: int, sc: StepConfig) -> Step:
    step_dir = root / "steps" / sc.name
    agent, verifier = config.agent, config.verifier
    workdir = step_dir / "workdir"
    return Step(
        index=index,
        name=sc.name,
        instruction=_read_instruction(step_dir / "instruction.md"),
        test_sh=_first_file(step_dir / "tests" / "test.sh", root / "tests" / "test.sh"),
        tests_dirs=_existing(root / "tests", step_dir / "tests"),
        solution_dirs=_existing(root / "solution", step_dir / "solution"),
        solve_sh=_first_file(step_dir / "solution" / "solve.sh", root / "solution" / "solve.sh"),
        workdir_dir=workdir if workdir.is_dir() else None,
        agent_timeout_sec=_pick(sc.agent.timeout_sec, agent.timeout_sec, DEFAULT_AGENT_TIMEOUT_SEC),
        agent_user=sc.agent.user if sc.agent.user is not None else agent.user,
        verifier_timeout_sec=_pick(
            sc.verifier.timeout_sec, verifier.timeout_sec, DEFAULT_VERIFIER_TIMEOUT_SEC
        ),
        verifier_user=sc.verifier.user if sc.verifier.user is not None else verifier.user,
        verifier_env={**verifier.env, **sc.verifier.env},
        # Harbor 0.26 precedence: the step's explicit mode, a step environment table (separate),
        # the task's explicit mode, a task environment table (separate), shared.
        verifier_mode=sc.verifier.declared_mode or verifier.declared_mode or "shared",
        verifier_environment=sc.verifier.environment or verifier.environment,
        min_reward=sc.min_reward,
        artifacts=config.artifacts + sc.artifacts,
        collect=verifier.collect + sc.verifier.collect,
        healthcheck=sc.healthcheck,
        setup_timeout_sec=sc.setup_timeout_sec,
        pre_artifacts_sh=_first_file(step_dir / PRE_ARTIFACTS_SH, root / PRE_ARTIFACTS_SH),
    )
