"""The ``cairn`` command: a thin Typer layer over the library API (design §9).

Each sub-module registers the commands of one area on :data:`app`; commands parse options and
call one library function. Heavy modules (docker, litellm, rich.live) are imported inside
commands so ``cairn --help`` stays fast. The Typer application lives in :mod:`cairn.cli._app`
(``cairn.cli.app``, ``cairn.cli.tasks_app`` still name it): importing this package imports no
third-party module, so :func:`main` can start ``cairn run``'s engine ping first.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    """``app``, ``tasks_app``, ``_register`` and ``app_for``, from :mod:`cairn.cli._app` on first use."""
    if name in ("app", "tasks_app", "_register", "app_for"):
        from cairn.cli import _app

        return getattr(_app, name)
    raise AttributeError(f"module 'cairn.cli' has no attribute {name!r}")


def _early_engine_check(argv: list[str]) -> None:
    """``cairn run`` on docker or auto: start the engine ping now (a daemon thread), so its
    round trip overlaps option parsing and imports (:func:`cairn._util.engine_ping.start_early`)."""
    if argv[:1] != ["run"] or "--dry-run" in argv or "--print-config" in argv:
        return
    for i, a in enumerate(argv):
        value = a.split("=", 1)[1] if "=" in a else (argv[i + 1] if i + 1 < len(argv) else "")
        if (a.split("=", 1)[0] in ("-e", "--env") and value == "local") or (
            a.split("=", 1)[0] == "--executor" and value == "ray"
        ):
            return
    from cairn._util.engine_ping import start_early

    start_early()


_PAUSE_GC_FOR = ("run", "resume")
"""Commands whose start-up runs with the cyclic garbage collector paused (:func:`main`)."""

_gc_paused = False


def end_startup() -> None:
    """The end of a command's start-up: what :func:`main` paused, resume (once).

    The objects built so far (modules, classes, pydantic models, the parsed command line) live
    as long as the process, so they are moved out of the collector's generations
    (:func:`gc.freeze`) before it is enabled again: later collections do not walk them. Called
    by ``cairn run`` / ``resume`` just before the job starts, and by :func:`main` when the
    command returns without getting there.
    """
    global _gc_paused
    if _gc_paused:
        import gc

        _gc_paused = False
        gc.freeze()
        gc.enable()


def main() -> None:
    """Console-script entry point.

    ``cairn run`` and ``cairn resume`` start with the cyclic garbage collector paused: the
    imports and pydantic model building of start-up create tens of thousands of objects, and
    the collections they trigger cost ~15% of the start-up's CPU time (#13; a run's start-up
    leaves under a thousand unreachable objects behind). :func:`end_startup` enables it again
    before the first trial.

    Every command runs with pydantic's plugin discovery off (``PYDANTIC_DISABLE_PLUGINS``,
    unless the caller set it, even to an empty value that keeps plugins on): at the first
    model it otherwise imports ``importlib.metadata`` and reads the entry points of every
    installed distribution (#31: 20-60 ms of CPU per process here), for plugins that cairn's
    own models do not use.
    """
    import gc
    import os
    import sys

    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

    global _gc_paused
    argv = sys.argv[1:]
    _early_engine_check(argv)
    if argv[:1] and argv[0] in _PAUSE_GC_FOR and gc.isenabled():
        gc.disable()
        _gc_paused = True
    try:
        from cairn.cli._app import run_app

        code = run_app(argv)
    finally:
        end_startup()
    sys.exit(code)
