"""``cairn tasks check`` and ``cairn tasks init`` (design §2).

Thin commands over :mod:`cairn.task.load` and :mod:`cairn.task.init`; both are imported inside
the commands so that ``cairn --help`` does not pay for pydantic.
"""

from pathlib import Path
from typing import Annotated

import typer

from cairn.cli import tasks_app


@tasks_app.command(
    "check",
    epilog=(
        "Examples:\n\n"
        "  cairn tasks check tasks/two-steps\n\n"
        "  cairn tasks check datasets/mine --strict\n\n"
        "  cairn tasks check datasets/mine --ignore compose-writable-bind-mount --json\n\n"
        "  cairn tasks check tasks/x --select compose,agent-image-test-leak"
    ),
)
def check(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="Task folders (holding task.toml or task.md) or dataset folders of tasks.",
            show_default=False,
        ),
    ],
    strict: Annotated[
        bool,
        typer.Option(
            "--strict", help="Treat warnings (unknown keys, :latest images, lint findings …) as errors."
        ),
    ] = False,
    env: Annotated[
        str,
        typer.Option(
            "-e",
            "--env",
            help="Also check what this backend would refuse before a run "
            "(docker, local, auto, or none to skip: the task files are still checked, also for a "
            "compose file no backend runs; what `docker compose config` finds needs docker).",
        ),
    ] = "auto",
    select: Annotated[
        list[str] | None,
        typer.Option(  # noqa: UP007 (typer needs Optional)
            "--select",
            help="Report only these warning rules: ids, word prefixes (`compose`) "
            "or ALL; repeatable, comma-separated. Errors are always reported.",
            show_default=False,
        ),
    ] = None,
    ignore: Annotated[
        list[str] | None,
        typer.Option(  # noqa: UP007 (typer needs Optional)
            "--ignore",
            help="Do not report these warning rules (ids or word prefixes); repeatable, comma-separated.",
            show_default=False,
        ),
    ] = None,
    extend_select: Annotated[
        list[str] | None,
        typer.Option(  # noqa: UP007
            "--extend-select",
            help="Add rules to --select (Harbor's option; without --select every rule is reported already).",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON document (check.schema.json) instead of lines.")
    ] = False,
) -> None:
    """Validate and lint tasks without starting anything.

    Prints one line per finding (`path:line: error|warning: text [rule-id]`) and `PATH: ok`
    for each task without errors. Exits 0 when there is no error, 1 otherwise, 2 on bad usage
    (an unknown rule in --select/--ignore).
    """
    from cairn.errors import UsageError
    from cairn.job.preflight import preflight_findings
    from cairn.task.findings import has_errors, promote_warnings
    from cairn.task.lint import RuleSelection
    from cairn.task.load import check_paths

    try:
        chosen = [*select, *(extend_select or [])] if select else None
        selection = RuleSelection.parse(chosen, ignore)
        if extend_select and not select:  # adds nothing, but an unknown rule is still refused
            RuleSelection.parse(extend_select, None)
    except UsageError as exc:
        typer.echo(f"cairn: error: {exc}", err=True)
        raise typer.Exit(2) from None
    results = check_paths(paths)
    backend: str | None = None
    if env != "none" and any(r.ok for r in results):
        from cairn.sandbox.auto import resolve_auto

        backend = resolve_auto(env)
    checked = []
    for result in results:
        findings = list(result.findings)
        if result.ok:  # what the run would refuse before it starts (the check predicts it)
            findings += preflight_findings(result.path, backend)
        findings = selection.apply(findings)
        if strict:
            findings = promote_warnings(findings)
        checked.append((result.path, findings))
    all_ok = not any(has_errors(f) for _, f in checked)
    if as_json:
        from cairn.task.report import check_report

        typer.echo(check_report(checked, strict=strict).model_dump_json(indent=2))
    else:
        from cairn.job.discover import nested_notes

        for path, findings in checked:
            for finding in findings:
                typer.echo(finding.format())
            if not has_errors(findings):
                n = len(findings)
                typer.echo(f"{path}: ok" + (f" ({n} warning(s))" if n else ""))
        for line in nested_notes(paths, "cairn tasks check"):  # named, never skipped silently
            typer.echo(line)
    raise typer.Exit(0 if all_ok else 1)


@tasks_app.command("rules")
def rules(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List the rule ids of `cairn tasks check` with their severity (docs/lint.md)."""
    import json

    from cairn.task.lint import RULES

    if as_json:
        typer.echo(
            json.dumps(
                [{"rule": r.id, "severity": r.severity, "summary": r.summary} for r in RULES.values()],
                indent=2,
            )
        )
        return
    width = max(len(r) for r in RULES)
    for r in RULES.values():
        typer.echo(f"{r.id.ljust(width)}  {r.severity:<7}  {r.summary}")


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
    target: Annotated[
        str,
        typer.Argument(
            help="The task folder to create (`my-task` or `path/to/my-task`); the task is named "
            "after its last part unless --name is given.",
            show_default=False,
        ),
    ],
    steps: Annotated[
        str | None,
        typer.Option(  # noqa: UP007 (typer needs Optional)
            "--steps", help="Comma-separated step names: writes a multi-step task."
        ),
    ] = None,
    directory: Annotated[Path, typer.Option("--dir", help="Folder a relative target is created in.")] = Path(
        "."
    ),
    name: Annotated[
        str | None,
        typer.Option("--name", help="Task name (`name` or `org/name`); default the folder's name."),
    ] = None,
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
        typer.echo(f"cairn: error: {exc}", err=True)
        raise typer.Exit(2) from None
    kind = f"{len(step_names)}-step" if step_names else "single-step"
    typer.echo(f"created {kind} task {root}")
    typer.echo(f"  check it:       cairn tasks check --strict {root}")
    typer.echo(f"  run the oracle: cairn run -p {root} -a oracle")
