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
    # `-h` as well as `--help`, on every command (sub-commands inherit the root's names)
    context_settings={"help_option_names": ["-h", "--help"]},
)
tasks_app = typer.Typer(
    help="Validate, create and sanity-check tasks.\n\nExamples:\n\n"
    "  cairn tasks check examples/ --strict\n\n"
    "  cairn tasks init my-task --steps fetch,fix\n\n"
    "  cairn tasks sanity examples/dataset",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)

ERROR_PREFIX = "cairn: error: "
"""The one prefix of every error line cairn prints (usage errors included; issue 27)."""


def _version(value: bool) -> None:
    if value:
        from cairn import __version__

        print(f"cairn {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print cairn's version and exit."
    ),
) -> None:
    """Run multi-step agent-evaluation tasks (Harbor format) in sandboxes and score them."""


app.add_typer(tasks_app, name="tasks")


COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "run": ("run",),
    "resume": ("run",),
    "report": ("run",),
    "tasks": ("tasks", "run"),  # `tasks sanity` lives in cli/run.py
    "clean": ("clean",),
    "regrade": ("snapshots",),
    "shell": ("snapshots",),
    "datasets": ("datasets",),
    "cache": ("datasets",),
    "export": ("export",),
    "view": ("view",),
    "agents": ("agents",),
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


def _click_exceptions():  # noqa: ANN202 - a module
    """The click exception module Typer raises from: its vendored copy (typer >= 0.24), else
    click's."""
    try:
        from typer._click import exceptions
    except ImportError:  # an older typer over click itself
        from click import exceptions
    return exceptions


def _did_you_mean(exc: Exception) -> str:
    """A usage error's message, with "did you mean" for a mistyped option (the closest of the
    command's options, by :func:`difflib.get_close_matches`)."""
    import difflib

    cx = _click_exceptions()
    msg = exc.format_message() if isinstance(exc, cx.ClickException) else str(exc)
    if isinstance(exc, cx.NoSuchOption):
        ctx = exc.ctx
        names = [
            o
            for p in (ctx.command.params if ctx else [])
            for o in (*p.opts, *p.secondary_opts)
            if o.startswith("-")
        ]
        names = names or list(exc.possibilities or [])
        close = difflib.get_close_matches(exc.option_name, names, n=1, cutoff=0.6)
        msg = f"No such option: {exc.option_name}"
        if close:
            msg += f" (did you mean {close[0]}?)"
    return msg


def run_app(argv: list[str]) -> int:
    """Run ``cairn ARGV`` and return its exit code, printing usage errors the cairn way:
    the usage line, then one ``cairn: error: …`` line (with "did you mean" for a mistyped
    option or command), then where help is. Every other error line of cairn has the same
    prefix (:data:`ERROR_PREFIX`).

    Args:
        argv: the command line after the program name.

    Returns:
        The exit code: the command's, 2 for a usage error, 130 for Ctrl-C at a prompt.
    """
    import sys

    cx = _click_exceptions()
    command = typer.main.get_command(app_for(argv))
    try:
        rv = command.main(args=argv, prog_name="cairn", standalone_mode=False)
    except cx.UsageError as exc:
        no_args = getattr(cx, "NoArgsIsHelpError", None)
        if (no_args is not None and isinstance(exc, no_args)) or (  # `cairn`, `cairn tasks`
            exc.ctx is not None and exc.message == exc.ctx.get_help()
        ):
            print(exc.message, file=sys.stderr)
            return 2
        ctx = exc.ctx
        if ctx is not None:
            print(ctx.get_usage(), file=sys.stderr)
        print(ERROR_PREFIX + _did_you_mean(exc), file=sys.stderr)
        if ctx is not None:
            print(f"Try '{ctx.command_path} --help' for help.", file=sys.stderr)
        return 2
    except cx.ClickException as exc:  # e.g. a file argument that cannot be opened
        print(ERROR_PREFIX + exc.format_message(), file=sys.stderr)
        return exc.exit_code
    except typer.Abort:
        print(ERROR_PREFIX + "aborted", file=sys.stderr)
        return 1
    return rv if isinstance(rv, int) else 0
