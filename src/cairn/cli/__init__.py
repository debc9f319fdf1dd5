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
        if (a.split("=", 1)[0] in ("-e", "--env") and value == "local") or \
                (a.split("=", 1)[0] == "--executor" and value == "ray"):
            return
    from cairn._util.engine_ping import start_early

    start_early()


def main() -> None:
    """Console-script entry point."""
    import sys

    _early_engine_check(sys.argv[1:])
    from cairn.cli._app import app_for

    app_for(sys.argv[1:])()
