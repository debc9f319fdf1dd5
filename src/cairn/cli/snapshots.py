"""``cairn regrade`` and ``cairn shell`` (docs/snapshots.md): thin commands over
:func:`cairn.job.regrade.regrade_job` and :func:`cairn.trial.shell.open_shell`."""

import sys
from pathlib import Path
from typing import Annotated

import typer

from cairn.cli import app
from cairn.cli._options import err


@app.command(
    "regrade",
    help=(
        "Re-run the verifiers of a finished job into a new derived job (the original is never "
        "modified): shared-mode steps on their snapshots (--snapshot-steps), separate-mode steps "
        "on their recorded artifacts; no agent runs. Rewards are re-read and trials re-aggregated "
        "with the current min_reward gates and strategy.\n\nExamples:\n\n"
        "  cairn regrade jobs/nightly\n\n"
        "  cairn regrade jobs/nightly -p tasks/ --job-name nightly-fixed"
    ),
)
def regrade_cmd(
    job_dir: Annotated[
        Path,
        typer.Argument(
            help="The finished job folder (a jobs folder holding one job is taken; of several, they are named)."  # noqa: E501
        ),
    ],  # noqa: E501
    path: Annotated[
        list[Path] | None,
        typer.Option(
            "-p",
            "--path",
            help="Current task or dataset folder (repeatable); default: the task folders the trials recorded.",  # noqa: E501
        ),
    ] = None,  # noqa: E501
    job_name: Annotated[
        str | None,
        typer.Option(
            "--job-name",
            help="Name of the derived job (default <name>__regrade-<time>), created next to the original.",
        ),
    ] = None,  # noqa: E501
    n_concurrent: Annotated[int, typer.Option("-n", "--n-concurrent", help="Trials regraded at once.")] = 4,  # noqa: E501
    max_cost_usd: Annotated[
        float | None,
        typer.Option(
            "--max-cost-usd",
            help="Stop regrading further trials once the LLM judges' spend (judge_usage.json) reaches this many USD; the rest are copied unchanged.",  # noqa: E501
        ),
    ] = None,  # noqa: E501
    fmt: Annotated[str, typer.Option("--format", help="Report format: text, markdown or json.")] = "text",  # noqa: E501
) -> None:
    """``cairn regrade``: verifiers only, into a derived job (:func:`cairn.job.regrade.regrade_job`)."""
    from cairn.errors import UsageError
    from cairn.job.regrade import regrade_job
    from cairn.job.run import read_job
    from cairn.results.report import render

    if fmt not in ("text", "markdown", "json"):
        err("--format is text, markdown or json")
        raise typer.Exit(2)
    from cairn.cli._jobdir import act_job_dir

    try:
        if max_cost_usd is not None and not max_cost_usd > 0:  # options first, as before
            raise UsageError("--max-cost-usd must be a positive number of USD")
        job_dir = act_job_dir(job_dir, "regrade")
        result = regrade_job(
            job_dir,
            paths=path,
            job_name=job_name,
            n_concurrent=n_concurrent,
            max_cost_usd=max_cost_usd,
            on_event=lambda line: print(line, file=sys.stderr, flush=True),
        )
    except UsageError as exc:
        err(str(exc))
        raise typer.Exit(2) from None
    print(render(read_job(result.job_dir), fmt))
    print(f"derived job: {result.job_dir} (from {result.source_dir})", file=sys.stderr)
    for line in result.lines():  # regraded or not, why, and what a full regrade needs
        print(line, file=sys.stderr)
    if result.exit_code and not result.infra_failed:  # an infra failure is said above
        err("nothing in the job could be regraded (see above)")
    raise typer.Exit(result.exit_code)


@app.command(
    "shell",
    help=(
        "Open a shell in a fresh sandbox made from a step's snapshot (--snapshot-steps), with that "
        "step's tests in /tests and solution in /solution (read-only); the sandbox is removed "
        "when the shell ends.\n\nExamples:\n\n"
        "  cairn shell jobs/nightly/trials/cairn-incident__1__1808ed1c --step repair\n\n"
        "  cairn shell TRIAL_DIR --command 'cat /app/incident/diagnosis.json'"
    ),
)
def shell_cmd(
    trial_dir: Annotated[Path, typer.Argument(help="A recorded trial folder, or a job folder of one trial.")],  # noqa: E501
    step: Annotated[
        str | None, typer.Option("--step", help="The step (default: the last one with a snapshot).")
    ] = None,  # noqa: E501
    command: Annotated[
        str | None, typer.Option("--command", "-c", help="Run this command instead of an interactive shell.")
    ] = None,  # noqa: E501
) -> None:
    """``cairn shell``: a shell in a fresh sandbox made from a step's snapshot."""
    import asyncio

    from cairn.cli._jobdir import trial_dir_of
    from cairn.errors import UnsupportedError, UsageError
    from cairn.trial.shell import open_shell

    try:
        trial_dir = trial_dir_of(trial_dir, "shell")
        code = asyncio.run(open_shell(trial_dir, step=step, command=command))
    except (UsageError, UnsupportedError) as exc:
        err(str(exc))
        raise typer.Exit(2) from None
    raise typer.Exit(code)
