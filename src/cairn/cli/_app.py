"""The Typer application of ``cairn``: the root command, the ``tasks`` group, and
:func:`_register`, which imports the command modules (each registers its commands here).

Apart from :mod:`cairn.cli` so that the console script can start the engine ping before Typer
is imported (#13).
"""

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


COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "run": ("run",), "resume": ("run",), "report": ("run",),
    "tasks": ("tasks", "run"),  # `tasks sanity` lives in cli/run.py
    "clean": ("clean",),
    "regrade": ("snapshots",), "shell": ("snapshots",),
    "datasets": ("datasets",), "cache": ("datasets",),
    "export": ("export",), "view": ("view",), "agents": ("agents",),
}
"""The top-level command (or group) name → the ``cairn.cli`` modules that register it. Held
against the registered commands by ``tests/cli/test_startup_imports.py``."""

_MODULES = ("tasks", "clean", "run", "snapshots", "datasets", "view", "export", "agents")


def _register(modules: tuple[str, ...] = _MODULES) -> None:
    """Import the command modules (each registers its commands on `app` / `tasks_app`).

    Args:
        modules: names under ``cairn.cli``; default all of them.
    """
    import importlib

    for mod in modules:
        try:
            importlib.import_module(f"cairn.cli.{mod}")
        except ModuleNotFoundError as exc:  # a command area not built yet
            if exc.name != f"cairn.cli.{mod}":
                raise


def _command_name(info: typer.models.CommandInfo) -> str:
    """The name Typer gives a registered command (its explicit name, else from the callback)."""
    if info.name:
        return info.name
    from typer.main import get_command_name

    assert info.callback is not None
    return get_command_name(info.callback.__name__)


def app_for(argv: list[str]) -> typer.Typer:
    """The application to run for ``argv`` (the arguments after ``cairn``), built lazily.

    When ``argv`` starts with a known top-level command, only the modules of that command are
    imported and the returned application (a shallow copy of :data:`app`) holds that one
    command or group, so Typer builds one click command instead of all of them (each costs a
    signature inspection and its options' type hints; #13). Anything else — no arguments,
    ``--help``, ``--version``, an unknown command — gets the whole application, so help
    listings and "No such command" suggestions are unchanged. :data:`app` itself is never
    modified.

    Args:
        argv: the command line after the program name.

    Returns:
        A Typer application to call.
    """
    name = argv[0] if argv else ""
    modules = COMMAND_MODULES.get(name)
    if modules is None:
        _register()
        return app
    _register(modules)
    import copy

    one = copy.copy(app)
    one.registered_commands = [c for c in app.registered_commands if _command_name(c) == name]
    one.registered_groups = [g for g in app.registered_groups if g.name == name]
    if not one.registered_commands and not one.registered_groups:  # COMMAND_MODULES is stale
        _register()
        return app
    return one
