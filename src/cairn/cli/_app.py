"""The Typer application of ``cairn``: the root command, the ``tasks`` group, and
:func:`_register`, which imports the command modules (each registers its commands here).

Apart from :mod:`cairn.cli` so that the console script can start the engine ping before Typer
is imported (#13).
"""

from __future__ import annotations

import typer

app = typer.Typer(
    name="cairn",
    help="Run multi-step agent-evaluation tasks (Harbor format) in sandboxes and score them."
         "\n\nExamples:\n\n"
         "  cairn run -p examples/two-steps -a oracle\n\n"
         "  cairn run -d terminal-bench@2.0 -a oracle -l 5\n\n"
         "  cairn tasks check examples/ --strict\n\n"
         "  cairn report jobs/nightly --format markdown",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain (click) help and usage errors: Typer's Rich help formatter imports rich.markdown,
    # markdown-it and pygments (~200 ms), which alone breaks the `cairn --help` < 0.3 s
    # target (design §12; bench/help_time.py). Rich stays in use for progress and tables.
    rich_markup_mode=None,
)
tasks_app = typer.Typer(help="Validate, create and sanity-check tasks.\n\nExamples:\n\n"
                             "  cairn tasks check examples/ --strict\n\n"
                             "  cairn tasks init my-task --steps fetch,fix\n\n"
                             "  cairn tasks sanity examples/dataset", no_args_is_help=True)


def _version(value: bool) -> None:
    if value:
        from cairn import __version__

        print(f"cairn {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print cairn's version and exit.")) -> None:
    """Run multi-step agent-evaluation tasks (Harbor format) in sandboxes and score them."""
app.add_typer(tasks_app, name="tasks")


def _register() -> None:
    # Importing these modules registers their commands on `app` / `tasks_app`.
    import importlib

    for mod in ("tasks", "clean", "run", "snapshots", "datasets", "view", "export", "agents"):
        try:
            importlib.import_module(f"cairn.cli.{mod}")
        except ModuleNotFoundError as exc:  # a command area not built yet
            if exc.name != f"cairn.cli.{mod}":
                raise
