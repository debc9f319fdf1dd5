"""``cairn run``, ``cairn resume``, ``cairn report`` and ``cairn tasks sanity`` (SPEC §8, §9).

Thin: parse options, build a :class:`~cairn.plan.JobConfig`, call the job API, print, exit.
Exit codes: 0 every trial completed or stopped; 1 some trial errored or cancelled; 2 usage or
job-level errors before anything ran.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from cairn.cli import app, tasks_app

_EXAMPLES_RUN = """
Examples:

  cairn run -p examples/two-steps -a oracle

  cairn run -p examples/dataset -a nop -n 8 -k 3 --job-name nightly

  cairn run -p tasks/ -i 'org/*' -a llm -m openai/gpt-4o --ak temperature=0
"""


def _kv(values: list[str] | None, flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in values or []:
        if "=" not in v:
            raise typer.BadParameter(f"{flag} takes KEY=VALUE, got {v!r}")
        k, _, val = v.partition("=")
        out[k] = val
    return out


def _err(msg: str) -> None:
    print(f"cairn: error: {msg}", file=sys.stderr)


@app.command("run", help="Run agents on tasks and score them." + _EXAMPLES_RUN)
def run_cmd(
    path: Annotated[list[Path], typer.Option("-p", "--path", help="Task or dataset folder (repeatable).")] = [],  # noqa: B006,E501
    agent: Annotated[Optional[str], typer.Option("-a", "--agent", help="oracle, nop, llm, claude-code, codex, opencode, or package.module:Class.")] = None,  # noqa: E501
    model: Annotated[Optional[str], typer.Option("-m", "--model", help="provider/model for model-driven agents.")] = None,  # noqa: E501
    ak: Annotated[Optional[list[str]], typer.Option("--ak", help="Agent kwarg key=value (repeatable).")] = None,  # noqa: E501
    ae: Annotated[Optional[list[str]], typer.Option("--ae", help="Env var KEY=VALUE for the agent (repeatable).")] = None,  # noqa: E501
    env: Annotated[Optional[str], typer.Option("-e", "--env", help="Sandbox backend: auto, docker, local.")] = None,  # noqa: E501
    include: Annotated[Optional[list[str]], typer.Option("-i", "--include", help="Task-name glob to keep.")] = None,  # noqa: E501
    exclude: Annotated[Optional[list[str]], typer.Option("-x", "--exclude", help="Task-name glob to drop.")] = None,  # noqa: E501
    attempts: Annotated[Optional[int], typer.Option("-k", "--attempts", help="Attempts per task.")] = None,  # noqa: E501
    n_concurrent: Annotated[Optional[int], typer.Option("-n", "--n-concurrent", help="Concurrent trials (default 4).")] = None,  # noqa: E501
    config: Annotated[Optional[Path], typer.Option("-c", "--config", help="job.yaml with the same options (flags win).")] = None,  # noqa: E501
    job_name: Annotated[Optional[str], typer.Option("--job-name")] = None,
    jobs_dir: Annotated[Optional[Path], typer.Option("--jobs-dir", help="Default ./jobs.")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Resume the job named by --job-name.")] = False,  # noqa: E501
    max_retries: Annotated[Optional[int], typer.Option("--max-retries", help="Re-runs of infra errors (default 2).")] = None,  # noqa: E501
    timeout_multiplier: Annotated[Optional[float], typer.Option("--timeout-multiplier")] = None,
    no_verify: Annotated[bool, typer.Option("--no-verify", help="Run agents only.")] = False,
    force_build: Annotated[bool, typer.Option("--force-build")] = False,
    keep_sandbox: Annotated[bool, typer.Option("--keep-sandbox", help="Keep a failed trial's sandbox.")] = False,  # noqa: E501
    hardened_verify: Annotated[bool, typer.Option("--hardened-verify")] = False,
    resume_agent_session: Annotated[bool, typer.Option("--resume-agent-session")] = False,
    max_cost_usd: Annotated[Optional[float], typer.Option("--max-cost-usd")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Summary as JSON on stdout.")] = False,
) -> None:
    from cairn.errors import CairnError
    from cairn.plan import JobConfig

    try:
        data: dict = {}
        if config is not None:
            import yaml

            data = yaml.safe_load(config.read_text()) or {}
            if not isinstance(data, dict):
                raise typer.BadParameter(f"{config}: expected a mapping of options")
        flags = {
            "paths": [str(p) for p in path] or None, "agent": agent, "model": model,
            "agent_kwargs": _kv(ak, "--ak") or None, "agent_env": _kv(ae, "--ae") or None,
            "backend": env, "include": include, "exclude": exclude, "attempts": attempts,
            "n_concurrent": n_concurrent, "job_name": job_name,
            "jobs_dir": str(jobs_dir) if jobs_dir else None, "max_retries": max_retries,
            "timeout_multiplier": timeout_multiplier, "verify": False if no_verify else None,
            "force_build": force_build or None, "keep_sandbox": keep_sandbox or None,
            "hardened_verify": hardened_verify or None,
            "resume_agent_session": resume_agent_session or None, "max_cost_usd": max_cost_usd,
        }
        data.update({k: v for k, v in flags.items() if v is not None})
        if not data.get("paths"):
            raise typer.BadParameter("give at least one task or dataset folder with -p")
        cfg = JobConfig.model_validate(data)
        _validate_agent(cfg)
    except (typer.BadParameter, CairnError, ValueError) as exc:
        _err(str(exc))
        raise typer.Exit(2) from None
    if resume and not cfg.job_name:
        _err("--resume needs --job-name")
        raise typer.Exit(2)
    job_dir = Path(cfg.jobs_dir) / cfg.job_name if resume else None
    raise typer.Exit(_run(cfg, job_dir=job_dir, resume=resume, json_out=json_out))


def _validate_agent(cfg) -> None:
    """Usage checks before anything runs (SPEC §9 exit 2): agent name, model, env templates."""
    from cairn.agents.registry import validate_agent_options

    validate_agent_options(cfg.agent, cfg.model, dict(cfg.agent_kwargs), dict(cfg.agent_env))


def _run(cfg, *, job_dir: Path | None, resume: bool, retry_errors: bool = False,
         json_out: bool = False) -> int:
    import asyncio

    from cairn.errors import UsageError
    from cairn.job import arun_job, default_job_name
    from cairn.progress import Progress

    if job_dir is None and cfg.job_name is None:
        cfg = cfg.model_copy(update={"job_name": default_job_name()})
    progress = Progress(json_mode=json_out)
    try:
        result = asyncio.run(arun_job(cfg, job_dir=job_dir, resume=resume,
                                      retry_errors=retry_errors, on_event=progress.event,
                                      on_start=progress.start, on_result=progress.result))
    except UsageError as exc:
        progress.close()
        _err(str(exc))
        return 2
    except KeyboardInterrupt:
        progress.close()
        _err("interrupted; trials marked cancelled, sandboxes removed. Resume with "
             "`cairn resume JOB_DIR`.")
        return 1
    progress.close()
    progress.finish(result)
    return result.exit_code


@app.command("resume", help="Resume a job: run its unfinished, cancelled and infra-errored trials."
             "\n\nExamples:\n\n  cairn resume jobs/2026-11-29__12-00-00\n\n"
             "  cairn resume jobs/nightly --retry-errors")
def resume_cmd(
    job_dir: Annotated[Path, typer.Argument(help="The job folder.")],
    retry_errors: Annotated[bool, typer.Option("--retry-errors", help="Also re-run task errors.")] = False,  # noqa: E501
    json_out: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    from cairn.plan import JobConfig
    from cairn.store import read_json

    meta = job_dir / "job.json"
    if not meta.is_file():
        _err(f"{job_dir} is not a job folder (no job.json)")
        raise typer.Exit(2)
    data = read_json(meta)
    cfg = JobConfig.model_validate({**data["config"], "backend": data.get("backend", "auto")})
    raise typer.Exit(_run(cfg, job_dir=job_dir, resume=True, retry_errors=retry_errors,
                          json_out=json_out))


@app.command("report", help="Print a job's summary from disk.\n\nExamples:\n\n"
             "  cairn report jobs/nightly\n\n  cairn report jobs/nightly --format markdown")
def report_cmd(
    job_dir: Annotated[Path, typer.Argument(help="The job folder.")],
    fmt: Annotated[str, typer.Option("--format", help="text, markdown or json.")] = "text",
) -> None:
    from cairn.job import read_job
    from cairn.report import render

    if fmt not in ("text", "markdown", "json"):
        _err("--format is text, markdown or json")
        raise typer.Exit(2)
    if not (job_dir / "job.json").is_file() and not (job_dir / "trials").is_dir():
        _err(f"{job_dir} is not a job folder")
        raise typer.Exit(2)
    print(render(read_job(job_dir), fmt))


@tasks_app.command("sanity", help="Run every task with the oracle (each step must pass) and with "
                   "nop (the trial must not pass); report the tasks that fail either.\n\n"
                   "Example:\n\n  cairn tasks sanity examples/dataset")
def sanity_cmd(
    paths: Annotated[list[Path], typer.Argument(help="Task or dataset folders.")],
    env: Annotated[str, typer.Option("-e", "--env")] = "auto",
    n_concurrent: Annotated[int, typer.Option("-n", "--n-concurrent")] = 4,
    jobs_dir: Annotated[Path, typer.Option("--jobs-dir")] = Path("jobs"),
) -> None:
    from cairn.errors import UsageError
    from cairn.sanity import run_sanity

    try:
        report = run_sanity(paths, backend=env, n_concurrent=n_concurrent, jobs_dir=jobs_dir,
                            on_event=lambda line: print(line, file=sys.stderr))
    except UsageError as exc:
        _err(str(exc))
        raise typer.Exit(2) from None
    for line in report.lines():
        print(line)
    raise typer.Exit(0 if report.ok else 1)
