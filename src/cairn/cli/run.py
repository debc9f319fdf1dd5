"""``cairn run``, ``cairn resume``, ``cairn report`` and ``cairn tasks sanity`` (SPEC §8, §9).

Thin: parse options, build a :class:`~cairn.plan.JobConfig`, call the job API, print, exit.
Exit codes: 0 every trial completed or stopped; 1 some trial errored or cancelled; 2 usage or
job-level errors before anything ran.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from cairn.cli import app, tasks_app

_EXAMPLES_RUN = """
Examples:

  cairn run -p examples/two-steps -a oracle

  cairn run -p examples/dataset -a nop -n 8 -k 3 --job-name nightly

  cairn run -p tasks/ -i 'org/*' -a llm -m openai/gpt-4o --ak temperature=0

  cairn run -c job.yaml -n 2

(job.yaml holds the same options: paths, agent, attempts, n_concurrent, ...; relative paths
are taken from the current directory; flags win.)
"""

_FLAG_KEYS = {"k": "attempts", "n": "n_concurrent", "a": "agent", "m": "model", "e": "backend",
              "p": "paths", "path": "paths", "env": "backend", "ak": "agent_kwargs",
              "ae": "agent_env", "i": "include", "x": "exclude", "no_verify": "verify"}


def _kv(values: list[str] | None, flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in values or []:
        if "=" not in v:
            raise typer.BadParameter(f"{flag} takes KEY=VALUE, got {v!r}")
        k, _, val = v.partition("=")
        out[k] = val
    return out


def _err(msg: str) -> None:
    print(f"cairn: error: {msg}", file=sys.stderr, flush=True)


def _read_config_file(path: Path) -> dict[str, Any]:
    """A ``-c job.yaml``: a mapping of JobConfig keys (flag spellings accepted too)."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise typer.BadParameter(f"{path}: {exc}") from None
    if not isinstance(data, dict):
        raise typer.BadParameter(f"{path}: expected a mapping of options")
    out: dict[str, Any] = {}
    for key, value in data.items():
        k = str(key).replace("-", "_").lstrip("_")
        k = _FLAG_KEYS.get(k, k)
        if str(key).replace("-", "_").lstrip("_") == "no_verify":
            value = not value
        if k in ("paths", "include", "exclude") and isinstance(value, str):
            value = [value]
        out[k] = value
    return out


@app.command("run", help="Run agents on tasks and score them." + _EXAMPLES_RUN)
def run_cmd(
    path: Annotated[Optional[list[Path]], typer.Option("-p", "--path", help="Task or dataset folder (repeatable).")] = None,  # noqa: E501
    agent: Annotated[Optional[str], typer.Option("-a", "--agent", help="oracle, nop, llm, claude-code, codex, opencode, or package.module:Class (default oracle).")] = None,  # noqa: E501
    model: Annotated[Optional[str], typer.Option("-m", "--model", help="provider/model for model-driven agents.")] = None,  # noqa: E501
    ak: Annotated[Optional[list[str]], typer.Option("--ak", help="Agent kwarg key=value (repeatable).")] = None,  # noqa: E501
    ae: Annotated[Optional[list[str]], typer.Option("--ae", help="Env var KEY=VALUE for the agent (repeatable).")] = None,  # noqa: E501
    env: Annotated[Optional[str], typer.Option("-e", "--env", help="Sandbox backend: auto, docker, local (default auto).")] = None,  # noqa: E501
    include: Annotated[Optional[list[str]], typer.Option("-i", "--include", help="Task-name glob to keep (repeatable).")] = None,  # noqa: E501
    exclude: Annotated[Optional[list[str]], typer.Option("-x", "--exclude", help="Task-name glob to drop (repeatable).")] = None,  # noqa: E501
    attempts: Annotated[Optional[int], typer.Option("-k", "--attempts", help="Attempts per task (default 1).")] = None,  # noqa: E501
    n_concurrent: Annotated[Optional[int], typer.Option("-n", "--n-concurrent", help="Concurrent trials (default 4).")] = None,  # noqa: E501
    config: Annotated[Optional[Path], typer.Option("-c", "--config", help="job.yaml with the same options (flags win).")] = None,  # noqa: E501
    job_name: Annotated[Optional[str], typer.Option("--job-name", help="Default: the start time.")] = None,  # noqa: E501
    jobs_dir: Annotated[Optional[Path], typer.Option("--jobs-dir", help="Default ./jobs.")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Resume the job named by --job-name.")] = False,  # noqa: E501
    max_retries: Annotated[Optional[int], typer.Option("--max-retries", help="Re-runs of infra errors (default 2).")] = None,  # noqa: E501
    timeout_multiplier: Annotated[Optional[float], typer.Option("--timeout-multiplier", help="Scale every timeout.")] = None,  # noqa: E501
    no_verify: Annotated[bool, typer.Option("--no-verify", help="Run agents only (no reward).")] = False,  # noqa: E501
    force_build: Annotated[bool, typer.Option("--force-build", help="Rebuild images.")] = False,
    keep_sandbox: Annotated[bool, typer.Option("--keep-sandbox", help="Keep a failed trial's sandbox.")] = False,  # noqa: E501
    hardened_verify: Annotated[bool, typer.Option("--hardened-verify", help="Kill agent processes and planted hooks before each verifier.")] = False,  # noqa: E501
    resume_agent_session: Annotated[bool, typer.Option("--resume-agent-session", help="Carry the agent's conversation into the next step (agents that support it).")] = False,  # noqa: E501
    max_cost_usd: Annotated[Optional[float], typer.Option("--max-cost-usd", help="Stop starting trials past this spend.")] = None,  # noqa: E501
    json_out: Annotated[bool, typer.Option("--json", help="Summary as JSON on stdout; all else on stderr.")] = False,  # noqa: E501
) -> None:
    from cairn.errors import CairnError
    from cairn.plan import JobConfig

    try:
        data: dict[str, Any] = _read_config_file(config) if config is not None else {}
        flags = {
            "paths": [str(p) for p in path or []] or None, "agent": agent, "model": model,
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
        from cairn.agents.registry import validate_agent_options

        validate_agent_options(cfg.agent, cfg.model, dict(cfg.agent_kwargs), dict(cfg.agent_env))
        if resume and not cfg.job_name:
            raise typer.BadParameter("--resume needs --job-name")
    except (typer.BadParameter, CairnError, ValueError) as exc:
        _err(_one_line(exc))
        raise typer.Exit(2) from None
    job_dir = Path(cfg.jobs_dir) / cfg.job_name if resume else None
    raise typer.Exit(_run(cfg, job_dir=job_dir, resume=resume, json_out=json_out))


def _one_line(exc: BaseException) -> str:
    """A usage error as one readable paragraph (pydantic's errors folded)."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        return "; ".join(f"{'.'.join(str(x) for x in e['loc']) or 'config'}: {e['msg']}"
                         for e in exc.errors())
    return str(exc)


def _run(cfg, *, job_dir: Path | None, resume: bool, retry_errors: bool = False,
         json_out: bool = False) -> int:
    """Run (or resume) a job with progress display and Ctrl-C semantics of SPEC §8.

    The first Ctrl-C (or SIGTERM) stops starting trials and cancels the running ones cleanly;
    a second Ctrl-C exits at once (left-overs are removed by the next run or `cairn clean`).
    """
    import asyncio
    import signal

    from cairn.errors import JobStorageFullError, UsageError
    from cairn.job.run import arun_job, claim_job_dir, read_job
    from cairn.cli.progress import Progress

    if job_dir is None and cfg.job_name is None:  # a default name is claimed exclusively
        try:
            job_dir = claim_job_dir(Path(cfg.jobs_dir))
        except (OSError, UsageError) as exc:
            _err(f"cannot create a job folder in {cfg.jobs_dir}: {exc}")
            return 2
        cfg = cfg.model_copy(update={"job_name": job_dir.name})
    target = job_dir or Path(cfg.jobs_dir) / cfg.job_name
    progress = Progress(json_mode=json_out, resume=resume)
    interrupts = 0

    async def main():
        loop = asyncio.get_running_loop()
        me = asyncio.current_task()

        def on_signal() -> None:
            nonlocal interrupts
            interrupts += 1
            if interrupts > 1:
                progress.close()
                _err("interrupted twice: exiting now; left-over sandboxes are removed by the "
                     "next run of this job or by `cairn clean`")
                os._exit(1)
            progress.event("interrupted: cancelling running trials (Ctrl-C again to exit "
                           "at once)")
            me.cancel()

        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, on_signal)
            except (NotImplementedError, RuntimeError, ValueError):
                pass
        return await arun_job(cfg, job_dir=job_dir, resume=resume, retry_errors=retry_errors,
                              on_event=progress.event, on_start=progress.start,
                              on_result=progress.result, on_trial_start=progress.trial_started,
                              on_trial_end=progress.trial_finished)

    try:
        result = asyncio.run(main())
    except UsageError as exc:
        progress.close()
        _err(str(exc))
        return 2
    except JobStorageFullError as exc:  # one clear line, not a traceback or an exception group
        progress.close()
        _err(str(exc))
        return 1
    except (KeyboardInterrupt, asyncio.CancelledError):
        progress.close()
        _err(f"interrupted: running trials cancelled and their sandboxes removed; resume with "
             f"`cairn resume {target}`")
        if (target / "job.json").is_file():
            progress.finish(read_job(target))
        return 1
    except Exception as exc:  # noqa: BLE001 - one readable line, not a traceback
        progress.close()
        _err(f"{type(exc).__name__}: {exc}")
        if os.environ.get("CAIRN_DEBUG"):
            raise
        return 1
    progress.close()
    progress.finish(result)
    return result.exit_code


@app.command("resume", help="Resume a job: run its unfinished, cancelled and infra-errored trials "
             "(genuine scores are never re-run)."
             "\n\nExamples:\n\n  cairn resume jobs/2026-11-29__12-00-00\n\n"
             "  cairn resume jobs/nightly --retry-errors -n 8")
def resume_cmd(
    job_dir: Annotated[Path, typer.Argument(help="The job folder.")],
    retry_errors: Annotated[bool, typer.Option("--retry-errors", help="Also re-run task errors.")] = False,  # noqa: E501
    n_concurrent: Annotated[Optional[int], typer.Option("-n", "--n-concurrent", help="Concurrent trials (default: the job's).")] = None,  # noqa: E501
    ae: Annotated[Optional[list[str]], typer.Option("--ae", help="Agent env KEY=VALUE again (job.json keeps them masked).")] = None,  # noqa: E501
    max_cost_usd: Annotated[Optional[float], typer.Option("--max-cost-usd", help="New spending limit for the whole job.")] = None,  # noqa: E501
    json_out: Annotated[bool, typer.Option("--json", help="Summary as JSON on stdout.")] = False,
) -> None:
    from cairn.errors import CairnError
    from cairn.job.run import resume_config

    try:
        overrides = {k: v for k, v in (("n_concurrent", n_concurrent),
                                       ("max_cost_usd", max_cost_usd)) if v is not None}
        cfg = resume_config(job_dir, agent_env=_kv(ae, "--ae"), overrides=overrides,
                            on_event=lambda line: print(f"cairn: warning: {line}",
                                                        file=sys.stderr, flush=True))
    except (typer.BadParameter, CairnError) as exc:
        _err(str(exc))
        raise typer.Exit(2) from None
    raise typer.Exit(_run(cfg, job_dir=job_dir, resume=True, retry_errors=retry_errors,
                          json_out=json_out))


@app.command("report", help="Print a job's summary from disk (works on job folders copied from "
             "another machine).\n\nExamples:\n\n"
             "  cairn report jobs/nightly\n\n  cairn report jobs/nightly --format markdown")
def report_cmd(
    job_dir: Annotated[Path, typer.Argument(help="The job folder.")],
    fmt: Annotated[str, typer.Option("--format", help="text, markdown or json.")] = "text",
) -> None:
    from cairn.job.run import read_job
    from cairn.results.report import render

    if fmt not in ("text", "markdown", "json"):
        _err("--format is text, markdown or json")
        raise typer.Exit(2)
    if not (job_dir / "job.json").is_file() and not (job_dir / "trials").is_dir():
        _err(f"{job_dir} is not a job folder")
        raise typer.Exit(2)
    print(render(read_job(job_dir), fmt))


@tasks_app.command("sanity", help="Run every task with the oracle (each step must pass) and with "
                   "nop (the trial must not pass); report the tasks that fail either. Exit 0 when "
                   "every task is sane, 1 otherwise.\n\n"
                   "Example:\n\n  cairn tasks sanity examples/dataset -e docker")
def sanity_cmd(
    paths: Annotated[list[Path], typer.Argument(help="Task or dataset folders.")],
    env: Annotated[str, typer.Option("-e", "--env", help="Sandbox backend.")] = "auto",
    n_concurrent: Annotated[int, typer.Option("-n", "--n-concurrent", help="Concurrent trials per job.")] = 4,  # noqa: E501
    jobs_dir: Annotated[Path, typer.Option("--jobs-dir", help="Where the two jobs are kept.")] = Path("jobs"),  # noqa: E501
) -> None:
    from cairn.errors import UsageError
    from cairn.job.sanity import run_sanity

    try:
        report = run_sanity(paths, backend=env, n_concurrent=n_concurrent, jobs_dir=jobs_dir,
                            on_event=lambda line: print(line, file=sys.stderr, flush=True))
    except UsageError as exc:
        _err(str(exc))
        raise typer.Exit(2) from None
    for line in report.lines():
        print(line)
    print("results: " + ", ".join(str(d) for d in report.job_dirs), file=sys.stderr)
    raise typer.Exit(0 if report.ok else 1)
