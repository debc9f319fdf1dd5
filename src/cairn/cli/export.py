"""``cairn export``: per-step (trajectory, reward) records of a job for training (docs/viewer.md),
or the whole job in Harbor 0.26's job-folder layout (``--format harbor``, docs/export.md)."""

import sys
from pathlib import Path
from typing import Annotated

import typer

from cairn.cli import app

_HELP = """Write one record per executed step of a job (task, trial, attempt, step, instruction,
trajectory messages, rewards, outcome, source); replayed and errored steps are marked.

Examples:

  cairn export jobs/nightly --format jsonl -o steps.jsonl

  cairn export jobs/nightly --format sharegpt --passed-only --steps fix,test

  cairn export jobs/nightly --format parquet -o steps.parquet   (needs pyarrow)

  cairn export jobs/rl --format rollouts -o rollouts.jsonl   (a --rollout job, docs/export.md)

  cairn export jobs/nightly --format harbor -o harbor-jobs/nightly   (Harbor 0.26 job folder)
"""


@app.command("export", help=_HELP)
def export_cmd(
    job_dir: Annotated[
        Path, typer.Argument(help="The job folder (a jobs folder: its latest job, said on stderr).")
    ],  # noqa: E501
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="jsonl, sharegpt, atif, parquet, rollouts (token ids, logprobs, rewards per step), or harbor (a Harbor 0.26 job folder at -o DIR).",  # noqa: E501
        ),
    ] = "jsonl",  # noqa: E501
    out: Annotated[
        Path | None,
        typer.Option(
            "-o",
            "--out",
            help="Where the export is written: the output file (default stdout; required for parquet), or for harbor the job folder to create.",  # noqa: E501
        ),
    ] = None,  # noqa: E501
    passed_only: Annotated[bool, typer.Option("--passed-only", help="Only steps that passed.")] = False,  # noqa: E501
    min_reward: Annotated[
        float | None, typer.Option("--min-reward", help="Only steps with a primary reward >= X.")
    ] = None,  # noqa: E501
    steps: Annotated[
        str | None, typer.Option("--steps", help="Only these step names (comma-separated).")
    ] = None,  # noqa: E501
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="harbor: replace an earlier cairn Harbor export at -o (never any other folder)."
        ),
    ] = False,  # noqa: E501
    partial: Annotated[
        bool,
        typer.Option("--partial", help="harbor: export the finished trials of a job that is still running."),
    ] = False,  # noqa: E501
) -> None:
    """Write a job's per-step records in one format, or the job as a Harbor job folder.

    Raises:
        typer.Exit: code 2 for a usage error: an unknown format, not a job folder,
            ``--min-reward`` not a finite number, ``--steps`` naming no step of the job
            (some unknown ones among known ones only warn).
    """
    from cairn.cli._jobdir import read_job_dir
    from cairn.errors import UsageError
    from cairn.results.export import FORMATS, ExportFilter, export_job

    try:
        job_dir = read_job_dir(job_dir, "export")
    except UsageError as exc:
        print(f"cairn: error: {exc}", file=sys.stderr)
        raise typer.Exit(2) from None
    if fmt == "harbor":
        if passed_only or min_reward is not None or steps:
            print(
                "cairn: error: --format harbor exports whole trials; --passed-only, "
                "--min-reward and --steps apply to the step-record formats only",
                file=sys.stderr,
            )
            raise typer.Exit(2)
        _export_harbor(job_dir, out, force=force, partial=partial)
        return
    if force or partial:
        print("cairn: error: --force and --partial apply to --format harbor only", file=sys.stderr)
        raise typer.Exit(2)
    if fmt not in FORMATS:
        print(f"cairn: error: --format is one of {', '.join((*FORMATS, 'harbor'))}", file=sys.stderr)
        raise typer.Exit(2)
    if not (job_dir / "job.json").is_file() and not (job_dir / "trials").is_dir():
        print(f"cairn: error: {job_dir} is not a job folder", file=sys.stderr)
        raise typer.Exit(2)
    if fmt == "parquet" and out is None:
        print("cairn: error: --format parquet needs -o FILE", file=sys.stderr)
        raise typer.Exit(2)
    try:
        flt = ExportFilter(
            passed_only=passed_only,
            min_reward=min_reward,
            steps=tuple(s.strip() for s in (steps or "").split(",") if s.strip()),
        )
    except ValueError as exc:
        print(f"cairn: error: {exc}", file=sys.stderr)
        raise typer.Exit(2) from None
    if steps is not None and not flt.steps:
        print("cairn: error: --steps names no step (give NAME,...)", file=sys.stderr)
        raise typer.Exit(2)
    _check_steps(job_dir, flt.steps)
    try:
        if fmt == "parquet":
            n = export_job(job_dir, fmt, out, flt)
        elif out is None:
            n = export_job(job_dir, fmt, sys.stdout, flt)
        else:
            tmp = out.with_name(out.name + ".part")
            with open(tmp, "w", encoding="utf-8") as f:
                n = export_job(job_dir, fmt, f, flt)
            tmp.replace(out)
    except ModuleNotFoundError as exc:
        print(
            f"cairn: error: --format parquet needs pyarrow ({exc.name} is not installed): "
            "pip install 'cairn-eval[parquet]'",
            file=sys.stderr,
        )
        raise typer.Exit(2) from None
    print(f"exported {n} step record(s)" + (f" to {out}" if out else ""), file=sys.stderr)


def _check_steps(job_dir: Path, wanted: tuple[str, ...]) -> None:
    """Name ``--steps`` entries the job has no step of: a warning when some exist, exit 2
    (nothing written) when none does. A job with no finished trial is not judged.

    Raises:
        typer.Exit: code 2 when no requested step is a step of the job.
    """
    from cairn.results.export import job_step_names

    if not wanted:
        return
    known = job_step_names(job_dir)
    unknown = [s for s in wanted if s not in known]
    if not known or not unknown:
        return
    have = ", ".join(known)
    if len(unknown) == len(wanted):
        print(
            f"cairn: error: --steps: the job has no step {', '.join(unknown)}; its steps: {have}",
            file=sys.stderr,
        )
        raise typer.Exit(2)
    print(
        f"cairn: warning: --steps: the job has no step {', '.join(unknown)} (its steps: "
        f"{have}); exporting {', '.join(s for s in wanted if s in known)}",
        file=sys.stderr,
    )


def _export_harbor(job_dir: Path, out: Path | None, *, force: bool, partial: bool) -> None:
    from cairn.lock import is_locked
    from cairn.results.harbor import HarborExportError, export_harbor

    if out is None:
        print("cairn: error: --format harbor needs -o DIR (the Harbor job folder to write)", file=sys.stderr)
        raise typer.Exit(2)
    try:
        rep = export_harbor(job_dir, out, force=force, partial=partial, job_running=is_locked(job_dir))
    except HarborExportError as exc:
        print(f"cairn: error: {exc}", file=sys.stderr)
        raise typer.Exit(2) from None
    except OSError as exc:
        print(f"cairn: error: writing {out} failed ({exc}); nothing was left there", file=sys.stderr)
        raise typer.Exit(1) from None
    for line in rep.unreadable:
        print(f"cairn: warning: left out unreadable {line}", file=sys.stderr)
    if rep.unfinished:
        what = "still running" if rep.running else "unfinished (no result.json)"
        print(
            f"cairn: warning: left out {len(rep.unfinished)} {what} trial(s): " + ", ".join(rep.unfinished),
            file=sys.stderr,
        )
    for line in rep.skipped:
        print(f"cairn: warning: not copied {line!r}", file=sys.stderr)
    for line in rep.renamed:
        print(f"cairn: note: file name not UTF-8, renamed {line!r}", file=sys.stderr)
    print(
        f"exported {len(rep.trials)} trial(s) as a Harbor 0.26 job folder to {out}"
        + (" (replaced the earlier export)" if rep.replaced else "")
        + (" (partial: the job is still running)" if rep.running else ""),
        file=sys.stderr,
    )
