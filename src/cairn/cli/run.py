"""``cairn run``, ``cairn resume``, ``cairn report`` and ``cairn tasks sanity`` (design §8, §9).

Thin: parse options, build a :class:`~cairn.plan.JobConfig`, call the job API, print, exit.
Exit codes: 0 every trial completed or stopped; 1 some trial errored or cancelled; 2 usage or
job-level errors before anything ran.
"""

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from cairn.cli import app, tasks_app
from cairn.cli._options import RayAddress, err, override_option, scale_option

_EXAMPLES_RUN = """
Examples:

  cairn run -p examples/two-steps -a oracle

  cairn run -p examples/dataset -a nop -n 8 -k 3 --job-name nightly

  cairn run -p tasks/ -i 'org/*' -a llm -m openai/gpt-4o --ak temperature=0

  cairn run -d terminal-bench@2.0 -a oracle -l 5

  cairn run -d demo@1.0 --registry-path registry.json -p extra-task/ -a oracle

  cairn run --repo https://example.org/tasks.git@v1 --repo-path tasks -a oracle

  cairn run -c job.yaml -n 2

  cairn run -c harbor-job.yaml -c override.yaml --env-file .env --dry-run

  cairn run -p tasks/ -a codex -m openai/gpt-5 --override-memory-mb 4096 -r 1 -q

  cairn run -p examples/incident --start-step repair -a nop

  cairn run -p examples/incident --snapshot-steps --job-name base

  cairn run -p examples/incident --start-step repair --from jobs/base/trials/<trial> -a llm -m ...

(job.yaml holds the same options: paths, agent, attempts, n_concurrent, ...; or it is a
Harbor job config, whose keys without a cairn meaning are reported with their line; relative
paths are taken from the current directory; later files override earlier ones; flags win.
Every harbor run flag and what cairn does with it: docs/cli.md.)
"""

HARBOR_REFUSED: dict[str, str] = {
    "--diff": "cairn has no job diff preview; `cairn run --dry-run --resume` against an "
    "existing --job-name shows what a resume would keep and run",
    "--n-concurrent-agents": "cairn bounds concurrency per job only (-n)",
    "--retry-include": "cairn retries by error category (infrastructure errors), not by exception type",
    "--retry-exclude": "cairn retries by error category (infrastructure errors), not by exception type",
    "--install-only": "cairn has no install-only mode; `cairn agents prepare` installs CLI "
    "agents ahead of a run",
    "--effort": "cairn has no reasoning-effort option; pass it in the agent's kwargs (--ak)",
    "--load-trajectory": "cairn does not load a recorded session into the first step "
    "(--start-step with --from starts from a step snapshot)",
    "--mcp-config": "cairn takes MCP servers from the task ([environment].mcp_servers)",
    "--skill": "cairn takes skills from the task ([environment].skills_dir)",
    "--skills": "cairn takes skills from the task ([environment].skills_dir)",
    "--skip-credential-checks": "cairn checks an agent's options before the job and its "
    "credentials when the model is first called",
    "--base-url": "give the endpoint to the agent through --ak/--ae",
    "--api-key-name": "cairn agents read their provider's usual key variable (use --ae)",
    "--api-format": "cairn agents speak their provider's own API format",
    "--user-agent": "cairn has no simulated user",
    "--user-model": "cairn has no simulated user",
    "--uk": "cairn has no simulated user",
    "--user-agent-kwarg": "cairn has no simulated user",
    "--user-persona-path": "cairn has no simulated user",
    "--user-prompt-template-path": "cairn has no simulated user",
    "--bridge": "cairn has no simulated user",
    "--bridge-prompt-path": "cairn has no simulated user",
    "--bk": "cairn has no simulated user",
    "--bridge-kwarg": "cairn has no simulated user",
    "--allow-environment-host": "cairn takes the environment's allowlist from the task; "
    "--allow-agent-host opens a host for agent phases",
    "--delete": "cairn always removes sandboxes (--keep-sandbox keeps failed ones)",
    "--no-delete": "cairn always removes sandboxes; --keep-sandbox keeps those of trials that did not pass",
    "--stream": "cairn has no trajectory streaming or remote editor",
    "--no-stream": "cairn has no trajectory streaming or remote editor",
    "--cpus": "cairn applies a task's CPU count as a limit (no enforcement policies)",
    "--memory": "cairn applies a task's memory as a limit (no enforcement policies)",
    "--override-gpus": "cairn does not override a task's GPUs",
    "--mounts": "cairn mounts nothing from the host into a task's sandbox",
    "--mounts-json": "cairn mounts nothing from the host into a task's sandbox",
    "--extra-docker-compose": "cairn uses the task's own compose file only",
    "--ek": "cairn's backends take no keyword arguments",
    "--environment-kwarg": "cairn's backends take no keyword arguments",
    "--allow-verifier-host": "cairn takes the verifier's allowlist from the task ([verifier].allowed_hosts)",
    "--verifier": "cairn runs the task's own verifier (tests/test.sh or its judge)",
    "--verifier-kwarg": "cairn runs the task's own verifier (tests/test.sh or its judge)",
    "-t": "cairn has no package registry of single tasks; give -p, -d or --repo",
    "--task": "cairn has no package registry of single tasks; give -p, -d or --repo",
    "--plugin": "cairn has no job plugins",
    "--pk": "cairn has no job plugins",
    "--plugin-kwarg": "cairn has no job plugins",
    **{
        f: "cairn has no Harbor Hub"
        for f in (
            "--upload",
            "--launch",
            "--use-static-ip",
            "--credential-mode",
            "--one-off-secret",
            "--stored-secret",
            "--no-secrets",
            "--registry-secret",
            "--public",
            "--private",
            "--share",
            "--org",
        )
    },
    "--server": "cairn has no rollout server (--executor ray runs trials on a Ray cluster)",
    "--watch": "cairn has no rollout server",
}
"""``harbor run`` flags (0.26) whose meaning cairn does not have: refused, with the reason
(docs/cli.md has the whole table)."""


def _kv(values: list[str] | None, flag: str) -> dict[str, str]:
    """``KEY=VALUE`` flags (``--ak``, ``--ae``, ``--ve``, ``--add-host``) as a mapping.

    Raises:
        typer.BadParameter: a value without ``=``, or a KEY that is empty or holds
            whitespace, ``=`` or NUL (:func:`cairn.plan.key_problem`).
    """
    from cairn.plan import key_problem

    out: dict[str, str] = {}
    for v in values or []:
        if "=" not in v:
            raise typer.BadParameter(f"{flag} takes KEY=VALUE, got {v!r}")
        k, _, val = v.partition("=")
        if (why := key_problem(k)) is not None:
            raise typer.BadParameter(f"{flag} takes KEY=VALUE, got {v!r}: {why}")
        out[k] = val
    return out


def _refuse_extra(args: list[str], known: list[str] | None = None) -> None:
    """Arguments Typer did not take: a Harbor flag cairn refuses (with why), else unknown
    (with "did you mean" the closest of ``known``, the command's options).

    Raises:
        typer.BadParameter: always, when ``args`` is not empty.
    """
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag in HARBOR_REFUSED:
            raise typer.BadParameter(
                f"{flag} is a harbor run flag cairn does not take: "
                f"{HARBOR_REFUSED[flag]} (docs/cli.md lists every "
                "harbor run flag)"
            )
    first = args[0]
    if first.startswith("-"):
        import difflib

        close = difflib.get_close_matches(first.split("=", 1)[0], known or [], n=1, cutoff=0.6)
        raise typer.BadParameter(
            f"No such option: {first}" + (f" (did you mean {close[0]}?)" if close else "")
        )
    raise typer.BadParameter(f"unexpected argument {first!r}")


def _load_env_file(path: Path) -> None:
    """``--env-file``: a dotenv file loaded into this process's environment, over what is set
    (as Harbor loads it), so ``${VAR}`` templates and agents' keys see its values.

    Raises:
        typer.BadParameter: the file does not exist or cannot be read, or a line is not
            ``KEY=VALUE`` (an empty or malformed KEY, no ``=``, unparsable quoting), with its
            line number; nothing is loaded then.
    """
    import io

    from dotenv import dotenv_values
    from dotenv.parser import parse_stream

    from cairn._util.inputfiles import InputFileError, read_input_text
    from cairn.plan import key_problem

    if not os.path.lexists(path):
        raise typer.BadParameter(f"--env-file {path}: no such file")
    try:  # a regular file of at most 1 MiB (a FIFO would block the read forever)
        text = read_input_text(path)
    except InputFileError as exc:
        raise typer.BadParameter(f"--env-file {exc}") from None
    for b in parse_stream(io.StringIO(text)):  # a malformed line is refused, not skipped
        raw = b.original.string
        body = raw.lstrip()  # python-dotenv counts blank lines before a statement into it
        at = f"--env-file {path}:{b.original.line + raw[: len(raw) - len(body)].count(chr(10))}"
        shown = body.rstrip("\r\n")
        if b.error:
            raise typer.BadParameter(f"{at}: not a KEY=VALUE line: {shown!r}")
        if b.key is None:  # a comment or blank line
            continue
        if (why := key_problem(b.key)) is not None:
            raise typer.BadParameter(f"{at}: {why}: {shown!r}")
        if b.value is None:
            raise typer.BadParameter(f"{at}: {b.key} has no =VALUE: {shown!r}")
    values = dotenv_values(stream=io.StringIO(text))  # ${VAR} expanded as python-dotenv does
    for key, value in values.items():
        if value is not None:
            os.environ[key] = value


def _print_config(cfg: Any) -> None:
    """``--print-config``: the merged config as YAML on stdout (``cairn run -c`` reads it back
    to the same config)."""
    import yaml

    data = cfg.model_dump(mode="json")
    print(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), end="", flush=True)


@app.command(
    "run",
    help="Run agents on tasks and score them." + _EXAMPLES_RUN,
    context_settings={
        "ignore_unknown_options": True,
        "allow_extra_args": True,
        "help_option_names": ["-h", "--help"],
    },
)
def run_cmd(
    ctx: typer.Context,
    path: Annotated[
        list[Path] | None, typer.Option("-p", "--path", help="Task or dataset folder (repeatable).")
    ] = None,  # noqa: E501
    dataset: Annotated[
        list[str] | None,
        typer.Option(
            "-d",
            "--dataset",
            help="Registry dataset NAME@VERSION, or NAME for the highest version (repeatable; mixes with -p).",  # noqa: E501
        ),
    ] = None,  # noqa: E501
    registry_url: Annotated[
        str | None,
        typer.Option("--registry-url", help="Registry of -d datasets (default Harbor's public registry)."),
    ] = None,  # noqa: E501
    registry_path: Annotated[
        Path | None,
        typer.Option(
            "--registry-path", help="A registry.json file (or its folder) instead of --registry-url."
        ),
    ] = None,  # noqa: E501
    repo: Annotated[
        list[str] | None,
        typer.Option("--repo", help="Git repository of tasks, GIT_URL or GIT_URL@REF (repeatable)."),
    ] = None,  # noqa: E501
    repo_path: Annotated[
        str | None,
        typer.Option("--repo-path", help="Folder inside each --repo that is a task or holds task folders."),
    ] = None,  # noqa: E501
    n_tasks: Annotated[
        int | None,
        typer.Option("-l", "--n-tasks", help="Run only the first N tasks (after -i/-x, in input order)."),
    ] = None,  # noqa: E501
    agent: Annotated[
        str | None,
        typer.Option(
            "-a",
            "--agent",
            help="oracle, nop, llm, claude-code, codex, opencode, gemini-cli, qwen-code, or package.module:Class (default oracle).",  # noqa: E501
        ),
    ] = None,  # noqa: E501
    model: Annotated[
        list[str] | None,
        typer.Option("-m", "--model", help="provider/model for model-driven agents (one per job)."),
    ] = None,  # noqa: E501
    ak: Annotated[
        list[str] | None, typer.Option("--ak", "--agent-kwarg", help="Agent kwarg key=value (repeatable).")
    ] = None,  # noqa: E501
    ae: Annotated[
        list[str] | None,
        typer.Option("--ae", "--agent-env", help="Env var KEY=VALUE for the agent (repeatable)."),
    ] = None,  # noqa: E501
    ve: Annotated[
        list[str] | None,
        typer.Option(
            "--ve",
            "--verifier-env",
            help="Env var KEY=VALUE for the verifier, over the task's [verifier.env] (repeatable; e.g. a judge model).",  # noqa: E501
        ),
    ] = None,  # noqa: E501
    env_file: Annotated[
        Path | None,
        typer.Option(
            "--env-file",
            help="A .env file loaded into the environment first (its values win), for ${VAR} templates and agents' keys.",  # noqa: E501
        ),
    ] = None,  # noqa: E501
    env: Annotated[
        str | None, typer.Option("-e", "--env", help="Sandbox backend: auto, docker, local (default auto).")
    ] = None,  # noqa: E501
    include: Annotated[
        list[str] | None,
        typer.Option("-i", "--include", "--include-task-name", help="Task-name glob to keep (repeatable)."),
    ] = None,  # noqa: E501
    exclude: Annotated[
        list[str] | None,
        typer.Option("-x", "--exclude", "--exclude-task-name", help="Task-name glob to drop (repeatable)."),
    ] = None,  # noqa: E501
    attempts: Annotated[
        int | None, typer.Option("-k", "--attempts", "--n-attempts", help="Attempts per task (default 1).")
    ] = None,  # noqa: E501
    n_concurrent: Annotated[
        int | None, typer.Option("-n", "--n-concurrent", help="Concurrent trials (default 4).")
    ] = None,  # noqa: E501
    config: Annotated[
        list[Path] | None,
        typer.Option(
            "-c",
            "--config",
            help="job.yaml (cairn's or a Harbor job config) with the same options; repeatable, later files override earlier ones (lists replace); flags win.",  # noqa: E501
        ),
    ] = None,  # noqa: E501
    job_name: Annotated[str | None, typer.Option("--job-name", help="Default: the start time.")] = None,  # noqa: E501
    jobs_dir: Annotated[
        Path | None,
        typer.Option(
            "-o",
            "--jobs-dir",
            help="Where the job's results are written: the folder holding job folders (default ./jobs; as harbor run -o).",  # noqa: E501
        ),
    ] = None,  # noqa: E501
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Resume the job named by --job-name with its stored config (as cairn resume); other options must match the job's.",  # noqa: E501
        ),
    ] = False,  # noqa: E501
    max_retries: Annotated[
        int | None, typer.Option("-r", "--max-retries", help="Re-runs of infra errors (default 2).")
    ] = None,  # noqa: E501
    timeout_multiplier: Annotated[
        float | None, typer.Option("--timeout-multiplier", help="Scale every timeout.")
    ] = None,  # noqa: E501
    agent_timeout_multiplier: Annotated[
        float | None, scale_option("--agent-timeout-multiplier", what="agent-phase timeouts")
    ] = None,
    verifier_timeout_multiplier: Annotated[
        float | None, scale_option("--verifier-timeout-multiplier", what="verifier timeouts")
    ] = None,
    agent_setup_timeout_multiplier: Annotated[
        float | None, scale_option("--agent-setup-timeout-multiplier", what="the agent's setup timeout")
    ] = None,
    build_timeout_multiplier: Annotated[
        float | None,
        scale_option(
            "--build-timeout-multiplier",
            "--environment-build-timeout-multiplier",
            what="image-build timeouts",
        ),
    ] = None,
    override_cpus: Annotated[float | None, override_option("--override-cpus", what="CPUs")] = None,
    override_memory_mb: Annotated[
        int | None, override_option("--override-memory-mb", what="Memory (MiB)")
    ] = None,
    override_storage_mb: Annotated[
        int | None, override_option("--override-storage-mb", what="Storage (MiB)")
    ] = None,
    artifact: Annotated[
        list[str] | None,
        typer.Option(
            "--artifact", help="Sandbox path collected as an artifact after every step (repeatable)."
        ),
    ] = None,  # noqa: E501
    extra_instruction: Annotated[
        list[str] | None,
        typer.Option(
            "--extra-instruction",
            help="Text appended to every step's instruction (repeatable; after the --extra-instruction-path files).",  # noqa: E501
        ),
    ] = None,  # noqa: E501
    extra_instruction_path: Annotated[
        list[Path] | None,
        typer.Option(
            "--extra-instruction-path",
            help="File whose text is appended to every step's instruction (repeatable).",
        ),
    ] = None,  # noqa: E501
    no_verify: Annotated[
        bool, typer.Option("--no-verify", "--disable-verification", help="Run agents only (no reward).")
    ] = False,  # noqa: E501
    enable_verification: Annotated[
        bool,
        typer.Option(
            "--enable-verification", help="Verify (the default; over a config file's verify: false)."
        ),
    ] = False,  # noqa: E501
    force_build: Annotated[
        bool | None,
        typer.Option(
            "--force-build/--no-force-build",
            help="Rebuild images (--no-force-build: over a config file's force_build: true).",
            show_default=False,
        ),
    ] = None,  # noqa: E501
    keep_sandbox: Annotated[
        bool, typer.Option("--keep-sandbox", help="Keep a failed trial's sandbox.")
    ] = False,  # noqa: E501
    prestart: Annotated[
        bool,
        typer.Option(
            "--prestart",
            help="Warm start: while a trial verifies, start the sandbox of the task's next waiting trial.",
        ),
    ] = False,  # noqa: E501
    hardened_verify: Annotated[
        bool,
        typer.Option(
            "--hardened-verify", help="Kill agent processes and planted hooks before each verifier."
        ),
    ] = False,  # noqa: E501
    resume_agent_session: Annotated[
        bool,
        typer.Option(
            "--resume-agent-session",
            "--resume-trajectory",
            help="Carry the agent's conversation into the next step (agents that support it).",
        ),
    ] = False,  # noqa: E501
    max_cost_usd: Annotated[
        float | None, typer.Option("--max-cost-usd", help="Stop starting trials past this spend.")
    ] = None,  # noqa: E501
    # issue 30: the job's model relay (docs/relay.md)
    no_relay: Annotated[
        bool,
        typer.Option(
            "--no-relay", help="Agents call their model directly; spend is then the agent's own report."
        ),
    ] = False,  # noqa: E501
    rollout: Annotated[
        bool,
        typer.Option(
            "--rollout",
            help="Record token ids and logprobs of every model call (OpenAI-compatible servers; cairn export --format rollouts).",  # noqa: E501
        ),
    ] = False,  # noqa: E501
    record_model_bodies: Annotated[
        bool,
        typer.Option(
            "--record-model-bodies", help="Record model request and response bodies (secrets masked)."
        ),
    ] = False,  # noqa: E501
    max_trial_cost_usd: Annotated[
        float | None,
        typer.Option("--max-trial-cost-usd", help="Stop a trial's model calls past this spend (USD)."),
    ] = None,  # noqa: E501
    max_trial_tokens: Annotated[
        int | None,
        typer.Option("--max-trial-tokens", help="Stop a trial's model calls past this many tokens."),
    ] = None,  # noqa: E501
    executor: Annotated[
        str | None,
        typer.Option(
            "--executor",
            help="Where trials run: local (this process) or ray (a Ray cluster's worker nodes; pip install 'cairn-eval[ray]').",  # noqa: E501
        ),
    ] = None,  # noqa: E501
    ray_address: RayAddress = None,
    ray_trial_cpus: Annotated[
        float | None,
        typer.Option(
            "--ray-trial-cpus",
            help="CPUs Ray reserves per trial under --executor ray (default 1, whatever the task's [environment] cpus).",  # noqa: E501
        ),
    ] = None,  # noqa: E501
    snapshot_steps: Annotated[
        bool,
        typer.Option(
            "--snapshot-steps",
            help="Snapshot the sandbox's files after every step's agent phase (for cairn regrade, --from, cairn shell).",  # noqa: E501
        ),
    ] = False,  # noqa: E501
    start_step: Annotated[
        str | None,
        typer.Option(
            "--start-step",
            help="Start the agent at step NAME; earlier steps are replayed by the oracle and verified (not scored).",  # noqa: E501
        ),
    ] = None,  # noqa: E501
    from_trial: Annotated[
        Path | None,
        typer.Option(
            "--from",
            help="With --start-step: start from this recorded trial's snapshot of the step before NAME instead of the oracle replay.",  # noqa: E501
        ),
    ] = None,  # noqa: E501
    allow_agent_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-agent-host",
            help="Host an in-sandbox agent may reach in its agent phases (its model API), also under no-network (repeatable).",  # noqa: E501
        ),
    ] = None,  # noqa: E501
    add_host: Annotated[
        list[str] | None,
        typer.Option("--add-host", help="NAME=ADDRESS the egress gateway resolves itself (repeatable)."),
    ] = None,  # noqa: E501
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="Task validation warnings are errors (as cairn tasks check --strict): such a task ends config_error, no sandbox.",  # noqa: E501
        ),
    ] = False,  # noqa: E501
    quiet: Annotated[
        bool,
        typer.Option(
            "-q",
            "--quiet",
            "--silent",
            help="No per-trial lines or live bar; job notices, warnings and the summary only.",
        ),
    ] = False,  # noqa: E501
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Check and plan only: resolve datasets and templates, print the tasks, attempts, trial ids, backend and what a resume would keep; build and start nothing (exit 0 ok, 1 problems found, 2 bad input).",  # noqa: E501
        ),
    ] = False,  # noqa: E501
    print_config: Annotated[
        bool,
        typer.Option("--print-config", help="Print the merged config (files and flags) as YAML and exit."),
    ] = False,  # noqa: E501
    debug: Annotated[
        bool, typer.Option("--debug", help="Tracebacks for unexpected errors (as CAIRN_DEBUG=1).")
    ] = False,  # noqa: E501
    yes: Annotated[
        bool, typer.Option("-y", "--yes", help="Accepted for Harbor command lines; cairn never prompts.")
    ] = False,  # noqa: E501
    json_out: Annotated[
        bool, typer.Option("--json", help="Summary as JSON on stdout; all else on stderr.")
    ] = False,  # noqa: E501
) -> None:
    """``cairn run``: a :class:`~cairn.plan.JobConfig` from the ``-c`` files (cairn's job.yaml
    or Harbor's job config, merged in order) with the flags laid over it, then the job (or,
    with ``--resume``, the named job resumed; with ``--dry-run`` only its plan; with
    ``--print-config`` only the merged config).

    Typer shows the ``help=`` text of the command, not this docstring.

    Raises:
        typer.Exit: code 2 on a usage error (no ``-p``, an unreadable config, a bad ``--ak``/
            ``--ae``, unknown agent options, ``--resume`` without ``--job-name``, a Harbor flag
            cairn does not take); with ``--dry-run`` 0 or 1 (problems found); otherwise the
            job's exit code (design §9: 0 when every trial completed or stopped, else 1).
    """
    if env != "local" and executor != "ray" and not dry_run and not print_config:
        # the engine check overlaps the work below
        from cairn.sandbox.auto import start_ping

        start_ping()
    from cairn.errors import CairnError
    from cairn.job.configfile import merge_configs, read_config_file, read_instruction_files
    from cairn.plan import JobConfig

    if debug:
        os.environ["CAIRN_DEBUG"] = "1"
    try:
        if ctx.args:
            _refuse_extra(
                list(ctx.args), [o for p in ctx.command.params for o in (*p.opts, *p.secondary_opts)]
            )
        if dry_run and print_config:
            raise typer.BadParameter("give --dry-run or --print-config, not both")
        if env_file is not None:
            _load_env_file(env_file)
        layers: list[Any] = []  # ConfigFile, then the flags' mapping
        for cfg_path in config or []:
            cf = read_config_file(cfg_path)
            for note in cf.notes:
                print(f"cairn: {note}", file=sys.stderr, flush=True)
            layers.append(cf)
        if model and len(model) > 1:
            raise typer.BadParameter(
                f"cairn runs one model per job (-m given {len(model)} times); run one job per model"
            )
        if no_verify and enable_verification:
            raise typer.BadParameter("give --no-verify or --enable-verification, not both")
        if registry_path is not None and registry_path.is_dir():
            registry_path = registry_path / "registry.json"  # Harbor takes the folder too
        extra_texts = [*read_instruction_files(extra_instruction_path or []), *(extra_instruction or [])]
        flags = {
            "paths": [str(p) for p in path or []] or None,
            "agent": agent,
            "model": model[0] if model else None,
            "agent_kwargs": _kv(ak, "--ak") or None,
            "agent_env": _kv(ae, "--ae") or None,
            "verifier_env": _kv(ve, "--ve") or None,
            "backend": env,
            "include": include,
            "exclude": exclude,
            "attempts": attempts,
            "n_concurrent": n_concurrent,
            "job_name": job_name,
            "jobs_dir": str(jobs_dir) if jobs_dir else None,
            "max_retries": max_retries,
            "timeout_multiplier": timeout_multiplier,
            "agent_timeout_multiplier": agent_timeout_multiplier,
            "verifier_timeout_multiplier": verifier_timeout_multiplier,
            "agent_setup_timeout_multiplier": agent_setup_timeout_multiplier,
            "build_timeout_multiplier": build_timeout_multiplier,
            "override_cpus": override_cpus,
            "override_memory_mb": override_memory_mb,
            "override_storage_mb": override_storage_mb,
            "artifacts": artifact or None,
            "extra_instructions": extra_texts or None,
            "verify": False if no_verify else (True if enable_verification else None),
            "force_build": force_build,
            "keep_sandbox": keep_sandbox or None,
            "prestart": prestart or None,
            "hardened_verify": hardened_verify or None,
            "resume_agent_session": resume_agent_session or None,
            "max_cost_usd": max_cost_usd,
            "relay": False if no_relay else None,
            "rollout": rollout or None,
            "record_model_bodies": record_model_bodies or None,
            "max_trial_cost_usd": max_trial_cost_usd,
            "max_trial_tokens": max_trial_tokens,
            "datasets": dataset or None,
            "registry_url": registry_url,
            "registry_path": str(registry_path.absolute()) if registry_path else None,
            "repos": [_abs_repo(r) for r in repo] if repo else None,
            "repo_path": repo_path,
            "n_tasks": n_tasks,
            "executor": executor,
            "ray_address": ray_address,
            "ray_trial_cpus": ray_trial_cpus,
            "snapshot_steps": snapshot_steps or None,
            "start_step": start_step,
            "from_trial": str(from_trial) if from_trial else None,
            "strict": strict or None,
            "agent_hosts": allow_agent_host or None,
            "add_hosts": _kv(add_host, "--add-host") or None,
        }
        layers.append({k: v for k, v in flags.items() if v is not None})
        data = merge_configs(layers)
        quiet = bool(data.pop("quiet", False)) or quiet
        if resume:  # the job's stored config, as `cairn resume` takes it (design §8)
            cfg = _resume_config(data)
        else:
            if not (data.get("paths") or data.get("datasets") or data.get("repos")):
                raise typer.BadParameter(
                    "give at least one task or dataset folder (-p), "
                    "registry dataset (-d) or git repository (--repo)"
                )
            if data.get("registry_url") and data.get("registry_path"):
                raise typer.BadParameter("give --registry-url or --registry-path, not both")
            cfg = JobConfig.model_validate(data)
        if repo and dataset:  # Harbor's --repo means the registry of -d; cairn's does not
            print(
                "cairn: warning: --repo is a git repository of tasks run beside -d (not, as "
                "in harbor run, the repository holding the registry of -d; give that as "
                "--registry-path or --registry-url)",
                file=sys.stderr,
                flush=True,
            )
        if not print_config:  # the merged config prints before any agent/credential check,
            # as `harbor run --print-config` does (a config for another machine's keys)
            from cairn.agents.registry import get_agent_class, validate_agent_options

            if (
                cfg.model
                and "agent" not in data
                and getattr(get_agent_class(cfg.agent), "needs_model", False) is False
            ):
                raise typer.BadParameter(  # the default agent is not model-driven (issue 27)
                    f"-m {cfg.model} needs a model-driven agent, and without -a the agent is "
                    f"{cfg.agent}: add -a llm (cairn's own; needs the llm extra) or an "
                    "installed CLI agent (-a claude-code, codex, …; cairn agents list)"
                )

            validate_agent_options(
                cfg.agent,
                cfg.model,
                dict(cfg.agent_kwargs),
                dict(cfg.agent_env),
                resume=bool(cfg.resume_agent_session),
            )
    except (typer.BadParameter, CairnError, ValueError) as exc:
        err(_one_line(exc))
        raise typer.Exit(2) from None
    if print_config:
        _print_config(cfg)
        raise typer.Exit(0)
    job_dir = Path(cfg.jobs_dir) / cfg.job_name if resume and cfg.job_name else None
    if dry_run:
        raise typer.Exit(_dry_run(cfg, job_dir=job_dir, resume=resume, json_out=json_out))
    raise typer.Exit(_run(cfg, job_dir=job_dir, resume=resume, json_out=json_out, quiet=quiet))


def _resume_config(data: dict[str, Any]) -> Any:
    """``cairn run --resume``: the named job's stored config (``cairn resume``'s), with the
    given options checked against it (:func:`cairn.job.folder.resume_with_options`).

    Raises:
        typer.BadParameter: no job name given.
        UsageError: not a job folder, or the given options differ from the job's.
    """
    from cairn.job.folder import resume_with_options

    if not data.get("job_name"):
        raise typer.BadParameter("--resume needs --job-name (or job_name in a -c file)")
    job_dir = Path(data.get("jobs_dir") or "jobs") / str(data["job_name"])
    cfg = resume_with_options(
        job_dir, data, emit=lambda ev: print(f"cairn: warning: {ev.text}", file=sys.stderr, flush=True)
    )
    return cfg.model_copy(update={"job_name": job_dir.name, "jobs_dir": job_dir.parent})


def _dry_run(cfg: Any, *, job_dir: Path | None, resume: bool, json_out: bool) -> int:
    """``--dry-run``: print the plan (JSON with ``--json``); 0 ok, 1 problems, 2 bad input
    (the run would refuse it: also an existing job without ``--resume``, as the run does)."""
    import dataclasses
    import json

    from cairn.errors import CairnError
    from cairn.job.dryrun import dry_run

    try:
        plan = dry_run(cfg, job_dir=job_dir, resume=resume)
    except CairnError as exc:
        err(str(exc))
        return 2
    if json_out:
        data = dataclasses.asdict(plan)
        data["job_dir"] = str(plan.job_dir) if plan.job_dir else None
        print(json.dumps(data, indent=2))
    else:
        for line in plan.lines(cfg.attempts):
            print(line)
    return plan.exit_code


def _abs_repo(spec: str) -> str:
    """``--repo`` naming a local folder: made absolute, so the job resumes from any folder."""
    from cairn.datasets.git import normalize_url, split_repo_spec

    url, ref = split_repo_spec(spec)
    return normalize_url(url) + (f"@{ref}" if ref else "")


def _one_line(exc: BaseException) -> str:
    """A usage error as one readable paragraph (pydantic's errors folded)."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        return "; ".join(
            f"{'.'.join(str(x) for x in e['loc']) or 'config'}: {e['msg']}" for e in exc.errors()
        )
    return str(exc)


def _run(
    cfg,
    *,
    job_dir: Path | None,
    resume: bool,
    retry_errors: bool = False,
    json_out: bool = False,
    quiet: bool = False,
) -> int:
    """Run (or resume) a job with progress display and Ctrl-C semantics of design §8.

    The first Ctrl-C (or SIGTERM) stops starting trials and cancels the running ones cleanly;
    a second Ctrl-C exits at once (left-overs are removed by the next run or `cairn clean`).
    """
    import asyncio
    import signal

    from cairn.cli import end_startup
    from cairn.cli.progress import Progress
    from cairn.errors import JobStorageFullError, UsageError
    from cairn.job.run import arun_job, claim_job_dir, read_job

    if job_dir is None and cfg.job_name is None:  # a default name is claimed exclusively
        try:
            job_dir = claim_job_dir(Path(cfg.jobs_dir))
        except UsageError as exc:  # the jobs folder refused (check_jobs_dir), named in it
            err(str(exc))
            return 2
        except OSError as exc:
            err(f"cannot create a job folder in {cfg.jobs_dir}: {exc}")
            return 2
        cfg = cfg.model_copy(update={"job_name": job_dir.name})
    target = job_dir or Path(cfg.jobs_dir) / cfg.job_name
    progress = Progress(json_mode=json_out, resume=resume, quiet=quiet)
    interrupts = 0

    async def main():
        loop = asyncio.get_running_loop()
        me = asyncio.current_task()

        def on_signal() -> None:
            nonlocal interrupts
            interrupts += 1
            if interrupts > 1:
                progress.close()
                err(
                    "interrupted twice: exiting now; left-over sandboxes are removed by the "
                    "next run of this job or by `cairn clean`"
                )
                os._exit(1)
            progress.notice("interrupted: cancelling running trials (Ctrl-C again to exit at once)")
            me.cancel()

        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, on_signal)
            except (NotImplementedError, RuntimeError, ValueError):
                pass
        end_startup()  # the collector paused by cairn.cli.main runs again for the job
        return await arun_job(
            cfg, job_dir=job_dir, resume=resume, retry_errors=retry_errors, observer=progress
        )

    try:
        result = asyncio.run(main())
    except UsageError as exc:
        progress.close()
        err(str(exc))
        return 2
    except JobStorageFullError as exc:  # one clear line, not a traceback or an exception group
        progress.close()
        err(str(exc))
        return 1
    except (KeyboardInterrupt, asyncio.CancelledError):
        progress.close()
        err(
            f"interrupted: running trials cancelled and their sandboxes removed; resume with "
            f"`cairn resume {target}`"
        )
        if (target / "job.json").is_file():
            progress.finish(read_job(target))
        return 1
    except Exception as exc:  # noqa: BLE001 - one readable line, not a traceback
        progress.close()
        from cairn.errors import cause_line  # never a bare ExceptionGroup (issue #29)

        err(cause_line(exc, limit=2000))
        if os.environ.get("CAIRN_DEBUG"):
            raise
        return 1
    progress.close()
    progress.finish(result)
    return result.exit_code


@app.command(
    "resume",
    help="Resume a job: run its unfinished, cancelled and infra-errored trials "
    "(genuine scores are never re-run)."
    "\n\nExamples:\n\n  cairn resume jobs/2026-11-29__12-00-00\n\n"
    "  cairn resume jobs/nightly --retry-errors -n 8",
)
def resume_cmd(
    job_dir: Annotated[
        Path,
        typer.Argument(
            help="The job folder (a jobs folder holding one job is taken; of several, they are named)."
        ),
    ],  # noqa: E501
    retry_errors: Annotated[bool, typer.Option("--retry-errors", help="Also re-run task errors.")] = False,  # noqa: E501
    n_concurrent: Annotated[
        int | None, typer.Option("-n", "--n-concurrent", help="Concurrent trials (default: the job's).")
    ] = None,  # noqa: E501
    ae: Annotated[
        list[str] | None, typer.Option("--ae", help="Agent env KEY=VALUE again (job.json keeps them masked).")
    ] = None,  # noqa: E501
    env_file: Annotated[
        Path | None,
        typer.Option(
            "--env-file",
            help="A .env file loaded into the environment first, as for cairn run (job.json never holds its values).",  # noqa: E501
        ),
    ] = None,  # noqa: E501
    max_cost_usd: Annotated[
        float | None, typer.Option("--max-cost-usd", help="New spending limit for the whole job.")
    ] = None,  # noqa: E501
    executor: Annotated[
        str | None, typer.Option("--executor", help="Where trials run: local or ray (default: the job's).")
    ] = None,  # noqa: E501
    ray_address: RayAddress = None,
    json_out: Annotated[bool, typer.Option("--json", help="Summary as JSON on stdout.")] = False,
) -> None:
    """``cairn resume JOB_DIR``: re-run a job's unfinished, cancelled and infra-errored trials
    with its recorded config (``-n``, ``--max-cost-usd`` and ``--ae`` may be given again).

    Raises:
        typer.Exit: code 2 when the folder has no ``job.json``, a masked ``--ae`` value is not
            given again, or an option is malformed; otherwise the job's exit code (design §9).
    """
    from cairn.cli._jobdir import act_job_dir
    from cairn.errors import CairnError
    from cairn.job import resume_config

    try:
        job_dir = act_job_dir(job_dir, "resume")
        if env_file is not None:
            _load_env_file(env_file)
        overrides = {
            k: v
            for k, v in (
                ("n_concurrent", n_concurrent),
                ("max_cost_usd", max_cost_usd),
                ("executor", executor),
                ("ray_address", ray_address),
            )
            if v is not None
        }
        cfg = resume_config(
            job_dir,
            agent_env=_kv(ae, "--ae"),
            overrides=overrides,
            emit=lambda ev: print(f"cairn: warning: {ev.text}", file=sys.stderr, flush=True),
        )
    except (typer.BadParameter, CairnError) as exc:
        err(str(exc))
        raise typer.Exit(2) from None
    raise typer.Exit(_run(cfg, job_dir=job_dir, resume=True, retry_errors=retry_errors, json_out=json_out))


@app.command(
    "report",
    help="Print a job's summary from disk (works on job folders copied from "
    "another machine).\n\nExamples:\n\n"
    "  cairn report jobs/nightly\n\n  cairn report jobs/nightly --format markdown",
)
def report_cmd(
    job_dir: Annotated[
        Path, typer.Argument(help="The job folder (a jobs folder: its latest job, said on stderr).")
    ],  # noqa: E501
    fmt: Annotated[
        str,
        typer.Option(
            "--format", help="text, markdown, json or html (a static site, see cairn view --bundle)."
        ),
    ] = "text",  # noqa: E501
    out: Annotated[
        Path | None,
        typer.Option(
            "-o",
            "--out",
            help="Where the report is written: for html the site's folder (default <job>-html); text, markdown and json print on stdout.",  # noqa: E501
        ),
    ] = None,  # noqa: E501
) -> None:
    """``cairn report JOB_DIR``: print the job's summary as read from its files (``text``,
    ``markdown`` or ``json``) on stdout.

    Raises:
        typer.Exit: code 2 for an unknown ``--format`` or a folder with neither ``job.json`` nor
            ``trials/``.
    """
    from cairn.job.run import read_job
    from cairn.results.report import render

    if fmt not in ("text", "markdown", "json", "html"):
        err("--format is text, markdown, json or html")
        raise typer.Exit(2)
    from cairn.cli._jobdir import read_job_dir
    from cairn.errors import UsageError

    try:
        job_dir = read_job_dir(job_dir, "report")
    except UsageError as exc:
        err(str(exc))
        raise typer.Exit(2) from None
    if fmt == "html":  # the viewer's static bundle (cairn/viewer/bundle.py)
        try:
            from cairn.viewer.bundle import write_bundle

            print(f"wrote {write_bundle(job_dir, out or Path(f'{job_dir.resolve().name}-html'))}")
        except ModuleNotFoundError as exc:
            err(
                f"--format html needs jinja2 ({exc.name} is not installed): "
                "reinstall cairn (its base install brings it)"
            )
            raise typer.Exit(2) from None
        except ValueError as exc:
            err(str(exc))
            raise typer.Exit(2) from None
        return
    job = read_job(job_dir)
    if fmt != "json":
        for line in _running_lines(job_dir, job):
            print(line)
    print(render(job, fmt))


def _running_lines(job_dir: Path, job: Any) -> list[str]:
    """``cairn report`` on a job that is running (its lock is held): what is finished and
    what is running, so "trials 0" does not read as an empty job (issue 27).

    Returns:
        One line ``running: …``, then the unfinished trial folders (at most 10); empty when
        no process holds the job.
    """
    from cairn.lock import is_locked

    if not is_locked(job_dir):
        return []
    trials = job_dir / "trials"
    names = sorted(p.name for p in trials.iterdir() if p.is_dir()) if trials.is_dir() else []
    done = {r.trial_name for r in job.results}
    running = [n for n in names if n not in done]
    out = [
        f"running: a cairn process holds this job; {len(done)} trial(s) finished, "
        f"{len(running)} started and not finished (trials not started yet have no folder; "
        "the figures below are over the finished ones)"
    ]
    out += [f"  running {n}" for n in running[:10]]
    if len(running) > 10:
        out.append(f"  … and {len(running) - 10} more")
    return out


@tasks_app.command(
    "sanity",
    help="Run every task with the oracle (each step must pass) and with "
    "nop (the trial must not pass); report the tasks that fail either. Exit 0 when "
    "every task is sane, 1 otherwise.\n\n"
    "Example:\n\n  cairn tasks sanity examples/dataset -e docker",
)
def sanity_cmd(
    paths: Annotated[list[Path], typer.Argument(help="Task or dataset folders.")],
    env: Annotated[str, typer.Option("-e", "--env", help="Sandbox backend.")] = "auto",
    n_concurrent: Annotated[int, typer.Option("-n", "--n-concurrent", help="Concurrent trials per job.")] = 4,  # noqa: E501
    jobs_dir: Annotated[
        Path,
        typer.Option(
            "-o",
            "--jobs-dir",
            help="Where the two jobs' results are written (default ./jobs, as cairn run -o).",
        ),
    ] = Path("jobs"),  # noqa: E501
    strict: Annotated[
        bool, typer.Option("--strict", help="Task validation warnings are errors (such a task fails sanity).")
    ] = False,  # noqa: E501
) -> None:
    """``cairn tasks sanity PATHS``: run every task with ``oracle`` and with ``nop`` (two jobs
    under ``--jobs-dir``) and print the tasks that fail either check.

    Raises:
        typer.Exit: code 0 when every task is sane, 1 otherwise, 2 when no task matched.
    """
    from cairn.cli.progress import LinePrinter
    from cairn.errors import UsageError
    from cairn.job.sanity import run_sanity

    try:
        report = run_sanity(
            paths,
            backend=env,
            n_concurrent=n_concurrent,
            jobs_dir=jobs_dir,
            observer=LinePrinter(sys.stderr),
            strict=strict,
        )
    except UsageError as exc:
        err(str(exc))
        raise typer.Exit(2) from None
    for line in report.lines():
        print(line)
    print("results: " + ", ".join(str(d) for d in report.job_dirs), file=sys.stderr)
    raise typer.Exit(0 if report.ok else 1)
