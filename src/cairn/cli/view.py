"""``cairn view`` (the web viewer and its static bundle) — docs/viewer.md."""

import errno
import sys
from pathlib import Path
from typing import Annotated

import typer

from cairn.cli import app

_HELP = """Browse job results in a local web viewer (live while a job runs), or write them as a
static site.

Examples:

  cairn view jobs/

  cairn view jobs/nightly --port 8400

  cairn view jobs/nightly --bundle site/   (then open site/index.html)
"""


def _missing_extra(exc: ModuleNotFoundError) -> None:
    print(
        f"cairn: error: the viewer's dependencies come with cairn ({exc.name} is not "
        "installed here): reinstall cairn (pip install cairn-eval, or pip install . in a "
        "clone)",
        file=sys.stderr,
        flush=True,
    )
    raise typer.Exit(2)


@app.command("view", help=_HELP)
def view_cmd(
    path: Annotated[Path, typer.Argument(help="A jobs folder or one job folder.")] = Path("jobs"),
    host: Annotated[
        str, typer.Option("--host", help="Address to bind (default loopback only).")
    ] = "127.0.0.1",  # noqa: E501
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="TCP port, 0-65535 (0: any free port).")
    ] = 8321,  # noqa: E501
    bundle: Annotated[
        Path | None, typer.Option("--bundle", help="Write a static site to this folder instead of serving.")
    ] = None,  # noqa: E501
) -> None:
    """Serve the viewer over PATH, or write its static bundle.

    Raises:
        typer.Exit: code 2 when PATH is not a folder, ``--port`` is outside 0-65535, or the
            address cannot be bound (in use, not an address of this machine).
    """
    if not path.is_dir():
        print(f"cairn: error: {path} is not a folder", file=sys.stderr)
        raise typer.Exit(2)
    if bundle is not None:
        try:
            from cairn.viewer.bundle import write_bundle

            index = write_bundle(path, bundle)
        except ModuleNotFoundError as exc:
            _missing_extra(exc)
        except ValueError as exc:
            print(f"cairn: error: {exc}", file=sys.stderr)
            raise typer.Exit(2) from None
        print(f"wrote {index}")
        return
    try:
        from cairn.viewer import serve

        serve(
            path,
            host=host,
            port=port,
            on_ready=lambda url: print(f"cairn view: serving {path} at {url}  (Ctrl-C stops)", flush=True),
        )
    except ModuleNotFoundError as exc:
        _missing_extra(exc)
    except (OSError, ValueError, OverflowError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        hint = (
            " (choose another --port, or 0 for any free one)"
            if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE
            else ""
        )
        print(f"cairn: error: cannot listen on {host}:{port}: {why}{hint}", file=sys.stderr)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        pass
