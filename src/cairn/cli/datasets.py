"""``cairn datasets download | list`` and ``cairn cache clean`` (datasets by name, the task
cache). Thin: parse options, call :mod:`cairn.datasets`, print, exit (2 on a bad source)."""

import sys
from pathlib import Path
from typing import Annotated

import typer

from cairn.cli import app

datasets_app = typer.Typer(
    help="Registry datasets: list them, fetch them ahead of a run."
    "\n\nExamples:\n\n  cairn datasets list\n\n"
    "  cairn datasets download terminal-bench@2.0 -o tb2/",
    no_args_is_help=True,
)
cache_app = typer.Typer(
    help="The task cache ($CAIRN_CACHE_DIR, default ~/.cache/cairn/tasks)."
    "\n\nExample:\n\n  cairn cache clean --jobs-dir jobs",
    no_args_is_help=True,
)
app.add_typer(datasets_app, name="datasets")
app.add_typer(cache_app, name="cache")

_REGISTRY_URL_HELP = "Registry URL (default Harbor's public registry)."
_REGISTRY_PATH_HELP = "A registry.json file instead of a URL."


def _err(msg: str) -> None:
    print(f"cairn: error: {msg}", file=sys.stderr, flush=True)


def _printable(text: str) -> str:
    """Registry text on one line, without control characters (a registry is remote input)."""
    return "".join(c if c.isprintable() else " " for c in " ".join(text.split()))


def _note(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@datasets_app.command(
    "list",
    help="Print the registry's datasets: name@version, task count, "
    "description.\n\nExamples:\n\n  cairn datasets list\n\n"
    "  cairn datasets list --registry-path registry.json",
)
def list_cmd(
    registry_url: Annotated[str | None, typer.Option("--registry-url", help=_REGISTRY_URL_HELP)] = None,  # noqa: E501
    registry_path: Annotated[Path | None, typer.Option("--registry-path", help=_REGISTRY_PATH_HELP)] = None,  # noqa: E501
) -> None:
    """``cairn datasets list``."""
    from cairn.datasets.registry import load_registry
    from cairn.errors import CairnError

    try:
        registry = load_registry(url=registry_url, path=registry_path)
    except CairnError as exc:
        _err(str(exc))
        raise typer.Exit(2) from None
    for w in registry.warnings:
        _note(f"warning: {w}")
    rows = [
        (_printable(d.spec), str(len(d.tasks)), _printable(d.description)[:100]) for d in registry.datasets
    ]
    width = max((len(r[0]) for r in rows), default=0)
    for spec, n, desc in rows:
        print(f"{spec.ljust(width)}  {n.rjust(5)} tasks  {desc}".rstrip())
    _note(f"{len(rows)} dataset(s) in {registry.source}")


@datasets_app.command(
    "download",
    help="Fetch a dataset's tasks into the task cache (so runs "
    "need no network), and optionally export them as plain task folders."
    "\n\nExamples:\n\n  cairn datasets download demo@1.0\n\n"
    "  cairn datasets download terminal-bench@2.0 -o tb2/",
)
def download_cmd(
    datasets: Annotated[list[str], typer.Argument(help="NAME@VERSION (or NAME for the highest version).")],  # noqa: E501
    out: Annotated[
        Path | None, typer.Option("-o", "--output", help="Also copy the task folders here (writable).")
    ] = None,  # noqa: E501
    registry_url: Annotated[str | None, typer.Option("--registry-url", help=_REGISTRY_URL_HELP)] = None,  # noqa: E501
    registry_path: Annotated[Path | None, typer.Option("--registry-path", help=_REGISTRY_PATH_HELP)] = None,  # noqa: E501
) -> None:
    """``cairn datasets download``."""
    from cairn.datasets.resolve import export_tasks, resolve_sources
    from cairn.errors import CairnError

    try:
        res = resolve_sources(
            datasets=datasets, registry_url=registry_url, registry_path=registry_path, notify=_note
        )
        for n in res.notes:
            _note(n)
        written = export_tasks(res.tasks, out) if out is not None else []
    except (CairnError, OSError) as exc:
        _err(str(exc))
        raise typer.Exit(2) from None
    for t in res.tasks:
        s = t.source
        where = f"{s.git_url} {s.path or '.'} @ {s.commit}" if s.git_url else str(t.path)
        print(f"{s.dataset}@{s.dataset_version}  {t.path.name}  {where}  -> {t.path}")
    if out is not None:
        _note(f"exported {len(written)} task folder(s) to {out}")


@cache_app.command(
    "clean",
    help="Remove cached tasks that no job needs: a task is kept while "
    "a job under one of the --jobs-dir folders (default ./jobs) refers to it "
    "(its job.json or a trial's result.json). --all empties the cache."
    "\n\nExamples:\n\n  cairn cache clean\n\n"
    "  cairn cache clean --jobs-dir jobs --jobs-dir /data/old-jobs --dry-run",
)
def cache_clean_cmd(
    jobs_dir: Annotated[
        list[Path] | None,
        typer.Option(
            "--jobs-dir", help="Jobs folder whose jobs keep their tasks (repeatable; default ./jobs)."
        ),
    ] = None,  # noqa: E501
    everything: Annotated[
        bool, typer.Option("--all", help="Remove everything, registry copies included.")
    ] = False,  # noqa: E501
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only print what would go.")] = False,  # noqa: E501
) -> None:
    """``cairn cache clean``."""
    from cairn.datasets.cache import TaskCache
    from cairn.datasets.clean import clean_cache

    cache = TaskCache()
    report = clean_cache(cache, list(jobs_dir or [Path("jobs")]), everything=everything, dry_run=dry_run)
    verb = "would remove" if dry_run else "removed"
    for p in report.removed:
        print(f"{verb} {p}")
    _note(
        f"{cache.root}: {verb} {len(report.removed)} task folder(s) "
        f"({report.bytes_freed / 1e6:.1f} MB), kept {len(report.kept)} that jobs need"
    )
