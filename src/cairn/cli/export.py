"""``cairn export``: per-step (trajectory, reward) records of a job for training (docs/viewer.md)."""

from __future__ import annotations

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
"""


@app.command("export", help=_HELP)
def export_cmd(
    job_dir: Annotated[Path, typer.Argument(help="The job folder.")],
    fmt: Annotated[str, typer.Option("--format", help="jsonl, sharegpt, atif or parquet.")] = "jsonl",  # noqa: E501
    out: Annotated[Path | None, typer.Option("-o", "--out", help="Output file (default stdout; required for parquet).")] = None,  # noqa: E501
    passed_only: Annotated[bool, typer.Option("--passed-only", help="Only steps that passed.")] = False,  # noqa: E501
    min_reward: Annotated[float | None, typer.Option("--min-reward", help="Only steps with a primary reward >= X.")] = None,  # noqa: E501
    steps: Annotated[str | None, typer.Option("--steps", help="Only these step names (comma-separated).")] = None,  # noqa: E501
) -> None:
    """Write a job's per-step records in one format."""
    from cairn.results.export import FORMATS, ExportFilter, export_job

    if fmt not in FORMATS:
        print(f"cairn: error: --format is one of {', '.join(FORMATS)}", file=sys.stderr)
        raise typer.Exit(2)
    if not (job_dir / "job.json").is_file() and not (job_dir / "trials").is_dir():
        print(f"cairn: error: {job_dir} is not a job folder", file=sys.stderr)
        raise typer.Exit(2)
    if fmt == "parquet" and out is None:
        print("cairn: error: --format parquet needs -o FILE", file=sys.stderr)
        raise typer.Exit(2)
    flt = ExportFilter(passed_only=passed_only, min_reward=min_reward,
                       steps=tuple(s.strip() for s in (steps or "").split(",") if s.strip()))
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
        print(f"cairn: error: --format parquet needs pyarrow ({exc.name} is not installed): "
              "pip install 'cairn-eval[parquet]'", file=sys.stderr)
        raise typer.Exit(2) from None
    print(f"exported {n} step record(s)" + (f" to {out}" if out else ""), file=sys.stderr)
