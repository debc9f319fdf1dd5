"""``cairn tasks check`` and ``cairn tasks init`` (design §2).

Thin commands over :mod:`cairn.task.load` and :mod:`cairn.task.init`; both are imported inside
the commands so that ``cairn --help`` does not pay for pydantic.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cairn.cli import tasks_app


@tasks_app.command(
    "check",
    epilog=(
        "Examples:\n\n"
        "  cairn tasks check tasks/two-steps\n\n"
        "  cairn tasks check datasets/mine --strict"
    ),
)
def check(
    paths: Annotated[list[Path], typer.Argument(
        help="Task folders (holding task.toml or task.md) or dataset folders of tasks.",
        show_default=False)],
    strict: Annotated[bool, typer.Option(
        "--strict", help="Treat warnings (unknown keys, :latest images, CRLF …) as errors.")]
    = False,
    env: Annotated[str, typer.Option(
        "-e", "--env", help="Also check what this backend would refuse before a run "
        "(docker, local, auto, or none to skip).")] = "auto",
) -> None:
    """Validate tasks without starting anything.

    Prints one line per finding (`path:line: error|warning: text`) and `PATH: ok` for each task
    without errors. Exits 0 when there is no error, 1 otherwise.
    """
    from cairn.job.preflight import preflight_findings
    from cairn.task.findings import has_errors, promote_warnings
    from cairn.task.load import check_paths

    results = check_paths(paths, strict=strict)
    backend: str | None = None
    if env != "none" and any(r.ok for r in results):
        from cairn.sandbox.auto import resolve_auto

        backend = resolve_auto(env)
    all_ok = True
    for result in results:
        findings = list(result.findings)
        if result.ok:  # what the run would refuse before it starts (the check predicts it)
            extra = preflight_findings(result.path, backend)
            findings += promote_warnings(extra) if strict else extra
        for finding in findings:
            typer.echo(str(finding))
        ok = not has_errors(findings)
        all_ok = all_ok and ok
        if ok:
            typer.echo(f"{result.path}: ok")
    raise typer.Exit(0 if all_ok else 1)


@tasks_app.command(
    "init",
    epilog=(
        "Examples:\n\n"
        "  cairn tasks init hello\n\n"
        "  cairn tasks init datasets/mine/fix-bug --name org/fix-bug\n\n"
        "  cairn tasks init two-steps --steps write,append --dir tasks"
    ),
)
def init(
    target: Annotated[str, typer.Argument(
        help="The task folder to create (`my-task` or `path/to/my-task`); the task is named "
             "after its last part unless --name is given.",
        show_default=False)],
    steps: Annotated[str | None, typer.Option(  # noqa: UP007 (typer needs Optional)
        "--steps", help="Comma-separated step names: writes a multi-step task.")] = None,
    directory: Annotated[Path, typer.Option(
        "--dir", help="Folder a relative target is created in.")] = Path("."),
    name: Annotated[str | None, typer.Option(
        "--name", help="Task name (`name` or `org/name`); default the folder's name.")] = None,
) -> None:
    """Write a runnable task skeleton whose oracle passes and whose nop run scores 0."""
    from cairn.errors import UsageError
    from cairn.task.init import init_task

    step_names = [s for s in (steps or "").split(",") if s.strip()] if steps else []
    root = directory / Path(target)
    try:
        if not root.name or root.name in (".", ".."):
            raise UsageError(f"invalid task folder {target!r}: give the folder to create")
        root = init_task(name or root.name, step_names, root=root)
    except UsageError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    kind = f"{len(step_names)}-step" if step_names else "single-step"
    typer.echo(f"created {kind} task {root}")
    typer.echo(f"  check it:       cairn tasks check --strict {root}")
    typer.echo(f"  run the oracle: cairn run -p {root} -a oracle")
