"""The ``cairn`` command: a thin Typer layer over the library API (design §9).

Each sub-module registers the commands of one area on :data:`app`; commands parse options and
call one library function. Heavy modules (docker, litellm, rich.live) are imported inside
commands so ``cairn --help`` stays fast.
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


def _early_engine_check(argv: list[str]) -> None:
    """``cairn run`` on docker or auto: start the engine ping now (a daemon thread), so its
    round trip overlaps option parsing and imports (:func:`cairn.sandbox.auto.start_ping`)."""
    if argv[:1] != ["run"]:
        return
    for i, a in enumerate(argv):
        value = a.split("=", 1)[1] if "=" in a else (argv[i + 1] if i + 1 < len(argv) else "")
        if (a.split("=", 1)[0] in ("-e", "--env") and value == "local") or \
                (a.split("=", 1)[0] == "--executor" and value == "ray"):
            return
    from cairn.sandbox.auto import start_ping

    start_ping()


def main() -> None:
    """Console-script entry point."""
    import sys

    _early_engine_check(sys.argv[1:])
    _register()
    app()
