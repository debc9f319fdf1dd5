"""Typer options and helpers the job commands share (``cairn run``, ``cairn resume``,
``cairn regrade``, ``cairn shell``): one definition of each, so a flag's name, help and default
cannot drift between the commands that take it."""

import sys
from typing import Annotated, Any

import typer

from cairn.cli._app import ERROR_PREFIX


def err(msg: str) -> None:
    """Print ``msg`` on stderr as one ``cairn: error:`` line (:data:`ERROR_PREFIX`)."""
    print(f"{ERROR_PREFIX}{msg}", file=sys.stderr, flush=True)


def scale_option(*flags: str, what: str) -> Any:
    """A per-phase timeout multiplier: ``Scale <what> (instead of --timeout-multiplier).``

    Args:
        flags: the option's names (the first is the canonical one).
        what: which timeouts it scales (``"verifier timeouts"``).
    """
    return typer.Option(*flags, help=f"Scale {what} (instead of --timeout-multiplier).")


def override_option(flag: str, *, what: str) -> Any:
    """A sandbox resource set for every task: ``<what> for every task's sandbox, instead of
    the task's.``

    Args:
        flag: the option's name (``--override-cpus``).
        what: the resource and its unit (``"Memory (MiB)"``).
    """
    return typer.Option(flag, help=f"{what} for every task's sandbox, instead of the task's.")


RayAddress = Annotated[
    str | None,
    typer.Option(
        "--ray-address",
        help="Ray cluster address for --executor ray (default RAY_ADDRESS, else a fresh local Ray).",
    ),
]
"""``--ray-address`` (``cairn run``, ``cairn resume``); default ``None``."""

__all__ = ["RayAddress", "err", "override_option", "scale_option"]
