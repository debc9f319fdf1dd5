"""``cairn clean`` (design §3, §9): a thin command over :func:`cairn.sandbox.cleanup.clean`."""

import json
from typing import Annotated

import typer

from cairn.cli import app


@app.command(
    "clean",
    epilog=(
        "Examples:\n\n"
        "  cairn clean\n\n"
        "  cairn clean --images\n\n"
        "  cairn clean --snapshots\n\n"
        "  cairn clean --job 2025-01-31__12-00-00"
    ),
)
def clean_command(
    images: Annotated[
        bool,
        typer.Option(
            "--images", help="Also remove cairn's environment images (cairn-env:*) no container uses."
        ),
    ] = False,
    job: Annotated[
        str | None,
        typer.Option(  # noqa: UP007 (typer needs Optional)
            "--job", help="Only the resources of this job (its id or its folder name).", show_default=False
        ),
    ] = None,
    snapshots: Annotated[
        bool,
        typer.Option(
            "--snapshots",
            help="Also remove the step snapshots (--snapshot-steps) of jobs that are "
            "not running; snapshots whose job folder is gone are always removed.",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    executor: Annotated[
        str,
        typer.Option("--executor", help="local (this machine) or ray (also every node of the Ray cluster)."),
    ] = "local",
    ray_address: Annotated[
        str | None,
        typer.Option(  # noqa: UP007 (typer needs Optional)
            "--ray-address", help="Ray cluster address (default RAY_ADDRESS).", show_default=False
        ),
    ] = None,
) -> None:
    """Remove left-over sandboxes: containers, networks and volumes of jobs that are not running.

    A resource is left over when its job's lock is free and the process that created it is gone
    (e.g. a run killed with SIGKILL, or a --keep-sandbox container after its job ended). Running
    jobs' resources and anything without cairn labels are never touched. Exits 1 when a removal
    failed.
    """
    from cairn.errors import UsageError
    from cairn.job.executors import get_executor
    from cairn.plan import JobConfig

    try:
        ex = get_executor(JobConfig(executor=executor, ray_address=ray_address))
        ex.open()
    except UsageError as exc:
        typer.echo(f"cairn: error: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        report = ex.clean(job=job, images=images, snapshots=snapshots)
    finally:
        ex.close()
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "containers": report.containers,
                    "networks": report.networks,
                    "volumes": report.volumes,
                    "images": report.images,
                    "folders": report.folders,
                    "snapshots": report.snapshots,
                    "kept": report.kept,
                    "errors": report.errors,
                    "engine_reachable": report.engine_reachable,
                },
                indent=2,
            )
        )
    else:
        if not report.engine_reachable:
            typer.echo("docker: engine not reachable; nothing to clean there", err=True)
        for kind, names in (
            ("container", report.containers),
            ("network", report.networks),
            ("volume", report.volumes),
            ("image", report.images),
            ("folder", report.folders),
            ("snapshot", report.snapshots),
        ):
            for name in names:
                typer.echo(f"removed {kind} {name}")
        for line in report.kept:
            typer.echo(f"kept {line}")
        for line in report.errors:
            typer.echo(f"cairn: error: {line}", err=True)
        typer.echo(f"{report.removed} removed, {len(report.kept)} kept")
    raise typer.Exit(1 if report.errors else 0)
