"""Harbor users' command lines and job files under ``cairn run`` (issue 19, the CLI and config
part): each Harbor flag cairn takes does what Harbor's does, a Harbor job YAML runs the same
trials, the flags cairn lacks are refused with the reason.

Every test runs ``python3 -m cairn`` in a subprocess on task folders written into tmp_path and
checks what a user would: exit codes, what is printed, the files under ``jobs/``, what the
agent was handed (``job_agents:RecordingAgent``) and what the verifier saw in the sandbox.
Trials run on the local backend (about a second each); the two that must see a container or
count containers run on Docker.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

from cairncli import run_cairn
from taskgen import StepSpec, reward_if, write_task
from testbed import backend_available

TESTS = Path(__file__).resolve().parents[1]
SRC = TESTS.parent / "src"

local = pytest.mark.skipif(not backend_available("local"), reason="local backend not available")


def cairn(*args: str, cwd: Path, timeout: float = 300, **env: str | None) -> subprocess.CompletedProcess:
    """``python3 -m cairn ARGS`` to its end (no traceback allowed)."""
    e = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(TESTS / "helpers")])}
    for k, v in env.items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    p = run_cairn(*args, cwd=cwd, env=e, timeout=timeout)
    assert "Traceback" not in p.stdout + p.stderr, p.stdout + p.stderr
    return p


def trials(job: Path) -> dict[str, dict]:
    """trial folder name → its result.json."""
    return {f.parent.name: json.loads(f.read_text()) for f in sorted(job.glob("trials/*/result.json"))}


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def containers_of(job_dir: Path) -> list:
    """Containers (running or not) labelled with this job folder."""
    import docker

    client = docker.from_env()
    try:
        return client.api.containers(all=True, filters={"label": f"cairn.job_dir={job_dir.absolute()}"})
    finally:
        client.close()


@pytest.fixture
def ds(tmp_path: Path) -> Path:
    """Three single-step tasks the oracle passes (a, b, c)."""
    root = tmp_path / "ds"
    for name in ("a", "b", "c"):
        write_task(root, name, solve=f"echo {name} > /app/out\n", test=reward_if(f"grep -q {name} /app/out"))
    return root


# ---- the Harbor job YAML --------------------------------------------------------------------
HARBOR_JOB = """\
job_name: harbor-job
jobs_dir: jobs
n_attempts: 2
timeout_multiplier: 2.0
orchestrator:
  type: local
  n_concurrent_trials: 3
  retry:
    max_retries: 1
    exclude_exceptions: [AgentTimeoutError]
environment:
  type: docker
  force_build: false
  delete: true
agents:
  - import_path: job_agents:RecordingAgent
    kwargs:
      record: {record}
      style: terse
tasks:
  - path: ds/a
  - path: ds/b
  - path: ds/c
n_concurent_trials: 2
"""


@pytest.mark.local
@local
def test_harbor_job_yaml_runs_the_same_trials_and_reports_unknown_keys(tmp_path, ds):
    record = tmp_path / "record.jsonl"
    cfg = tmp_path / "harbor-job.yaml"
    cfg.write_text(HARBOR_JOB.format(record=record))
    typo_line = HARBOR_JOB.splitlines().index("n_concurent_trials: 2") + 1
    retry_line = HARBOR_JOB.splitlines().index("    exclude_exceptions: [AgentTimeoutError]") + 1

    plan = cairn("run", "-c", str(cfg), "-e", "local", "--dry-run", cwd=tmp_path)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert (
        f"harbor-job.yaml:{typo_line}: warning: n_concurent_trials: ignored: not a key of "
        "Harbor 0.26's JobConfig"
    ) in plan.stderr
    assert (
        f"harbor-job.yaml:{retry_line}: warning: orchestrator.retry.exclude_exceptions: ignored"
    ) in plan.stderr
    planned = sorted(line.split()[3] for line in plan.stdout.splitlines() if line.startswith("  test/"))
    assert len(planned) == 6

    p = cairn("run", "-c", str(cfg), "-e", "local", cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    job = tmp_path / "jobs" / "harbor-job"
    rs = trials(job)
    # Harbor's trials of this file: 3 tasks x 2 attempts; cairn runs exactly those, as planned
    assert sorted(rs) == planned
    assert sorted((r["task"]["name"], r["attempt"]) for r in rs.values()) == [
        (f"test/{t}", a) for t in "abc" for a in (1, 2)
    ]
    assert all(r["outcome"] == "completed" and r["reward"] == 1.0 for r in rs.values())
    runs = [r for r in records(record) if r["phase"] == "run"]
    assert len(runs) == 6 and all(r["kwargs"] == {"style": "terse"} for r in runs)
    meta = json.loads((job / "job.json").read_text())["config"]
    assert (
        meta["attempts"],
        meta["n_concurrent"],
        meta["max_retries"],
        meta["timeout_multiplier"],
        meta["backend"],
    ) == (2, 3, 1, 2.0, "local")


def test_harbor_job_yaml_refuses_what_it_cannot_honour(tmp_path, ds):
    cfg = tmp_path / "two-agents.yaml"
    cfg.write_text("agents:\n  - name: oracle\n  - name: nop\ntasks:\n  - path: ds/a\n")
    p = cairn("run", "-c", str(cfg), "--dry-run", cwd=tmp_path)
    assert p.returncode == 2
    assert "two-agents.yaml:3: agents[1]: cairn runs one agent per job" in p.stderr
    cfg.write_text("environment:\n  type: modal\ntasks:\n  - path: ds/a\n")
    p = cairn("run", "-c", str(cfg), "--dry-run", cwd=tmp_path)
    assert p.returncode == 2
    assert "two-agents.yaml:2: environment.type: environment type 'modal'" in p.stderr


# ---- -c twice, --print-config ---------------------------------------------------------------
@pytest.mark.docker
def test_two_config_files_merge_later_wins_lists_replace(tmp_path, ds):
    (tmp_path / "base.yaml").write_text(
        "paths: [ds/a, ds/b]\nattempts: 2\nagent_kwargs: {x: 1}\ninclude: ['test/*']\n"
    )
    (tmp_path / "over.yaml").write_text(
        "schema_version: 1\ntasks:\n  - path: ds/c\nagents:\n"
        "  - import_path: job_agents:CostlyAgent\n    kwargs: {y: 2}\n"
    )
    p = cairn("run", "-c", "base.yaml", "-c", "over.yaml", "--print-config", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    merged = yaml.safe_load(p.stdout)
    assert merged["paths"] == ["ds/c"]  # the later file's list replaces the earlier one
    assert merged["attempts"] == 2  # kept from the earlier file
    # over.yaml's agents list replaces base.yaml's agent as a whole: its kwargs only
    assert (merged["agent"], merged["agent_kwargs"]) == ("job_agents:CostlyAgent", {"y": 2})
    assert merged["include"] == ["test/*"]
    plan = cairn(
        "run", "-c", "base.yaml", "-c", "over.yaml", "-k", "3", "-e", "docker", "--dry-run", cwd=tmp_path
    )
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "tasks: 1, attempts: 3, trials: 3" in plan.stdout  # flags win over both files
    assert [line.split()[0] for line in plan.stdout.splitlines() if line.startswith("  test/")] == [
        "test/c"
    ] * 3


@pytest.mark.local
@local
def test_a_later_files_agents_entry_replaces_the_agent_and_its_kwargs(tmp_path, ds):
    record = tmp_path / "record.jsonl"
    agent = "  - import_path: job_agents:RecordingAgent\n    kwargs:\n"
    (tmp_path / "a.yaml").write_text(
        f"tasks:\n  - path: ds/a\nagents:\n{agent}      record: {record}\n"
        "      style: terse\n      max_words: 5\n    env: {FROM_A: '1'}\n"
    )
    (tmp_path / "b.yaml").write_text(f"agents:\n{agent}      record: {record}\n      style: verbose\n")
    p = cairn(
        "run",
        "-c",
        "a.yaml",
        "-c",
        "b.yaml",
        "-e",
        "local",
        "--job-name",
        "j",
        "--ak",
        "tone=dry",
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    runs = [r for r in records(record) if r["phase"] == "run"]
    # b.yaml's entry is the whole agent (a.yaml's max_words and env are gone); --ak adds a key
    assert [r["kwargs"] for r in runs] == [{"style": "verbose", "tone": "dry"}]
    meta = json.loads((tmp_path / "jobs" / "j" / "job.json").read_text())["config"]
    assert meta["agent_kwargs"] == {"record": str(record), "style": "verbose", "tone": "dry"}
    assert meta["agent_env"] == {}
    # a cairn-shaped later file's mapping still merges key by key (docs/cli.md)
    (tmp_path / "c.yaml").write_text("agent_kwargs: {style: plain}\n")
    p = cairn("run", "-c", "a.yaml", "-c", "c.yaml", "--print-config", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert yaml.safe_load(p.stdout)["agent_kwargs"] == {
        "record": str(record),
        "style": "plain",
        "max_words": 5,
    }


def test_print_config_yaml_round_trips(tmp_path, ds):
    from cairn.plan import JobConfig

    (tmp_path / "h.yaml").write_text(
        "n_attempts: 2\nagents:\n  - name: oracle\n    kwargs: {depth: 3}\n"
        "environment:\n  override_memory_mb: 512\ntasks:\n  - path: ds/a\n"
    )
    (tmp_path / "extra.md").write_text("Also write a summary.\n")
    first = cairn(
        "run",
        "-c",
        "h.yaml",
        "-p",
        "ds/b",
        "--ve",
        "JUDGE=m",
        "--artifact",
        "/app/x",
        "--extra-instruction-path",
        "extra.md",
        "--extra-instruction",
        "Be brief.",
        "--agent-timeout-multiplier",
        "1.5",
        "-r",
        "0",
        "--print-config",
        cwd=tmp_path,
    )
    assert first.returncode == 0, first.stderr
    data = yaml.safe_load(first.stdout)
    assert data["extra_instructions"] == ["Also write a summary.\n", "Be brief."]
    assert data["paths"] == ["ds/b"] and data["override_memory_mb"] == 512
    (tmp_path / "printed.yaml").write_text(first.stdout)
    again = cairn("run", "-c", "printed.yaml", "--print-config", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout == first.stdout
    assert JobConfig.model_validate(yaml.safe_load(again.stdout)) == JobConfig.model_validate(data)


def test_print_config_comes_before_the_agents_credential_check(tmp_path, ds):
    """Harbor prints the merged config before any check: a config written on a machine
    without the agent's key still prints; a run (here --dry-run) still refuses it."""
    (tmp_path / "a.yaml").write_text(
        "agents:\n  - name: claude-code\n    model_name: "
        "anthropic/claude-sonnet-4-5\ntasks:\n  - path: ds/a\n"
    )
    nokey = {"ANTHROPIC_API_KEY": None, "CLAUDE_CODE_OAUTH_TOKEN": None}
    p = cairn("run", "-c", "a.yaml", "--print-config", cwd=tmp_path, **nokey)
    assert p.returncode == 0, p.stderr
    printed = yaml.safe_load(p.stdout)
    assert (printed["agent"], printed["model"], printed["paths"]) == (
        "claude-code",
        "anthropic/claude-sonnet-4-5",
        ["ds/a"],
    )
    dry = cairn("run", "-c", "a.yaml", "--dry-run", cwd=tmp_path, **nokey)
    assert dry.returncode == 2 and "needs the API key ANTHROPIC_API_KEY" in dry.stderr


def test_print_config_comes_before_the_litellm_check(tmp_path, ds):
    """The llm agent without LiteLLM installed: a real interpreter whose packages are this
    one's but LiteLLM (``-S``, the site-packages entries linked one by one without it)."""
    import site

    packages = tmp_path / "site"
    packages.mkdir()
    for entry in Path(site.getsitepackages()[0]).iterdir():
        if not entry.name.startswith("litellm"):
            (packages / entry.name).symlink_to(entry)
    (tmp_path / "l.yaml").write_text(
        "agents:\n  - name: llm\n    model_name: openai/gpt-4o-mini\ntasks:\n  - path: ds/a\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), str(packages)]),
        "OPENAI_API_KEY": "sk-test",
    }

    def run(flag: str) -> subprocess.CompletedProcess:
        return run_cairn(
            "run", "-c", "l.yaml", flag, cwd=tmp_path, env=env, timeout=120, python_flags=("-S",)
        )

    dry = run("--dry-run")
    assert dry.returncode == 2, dry.stdout + dry.stderr
    assert "the 'llm' agent needs LiteLLM" in dry.stderr  # the interpreter really lacks it
    printed = run("--print-config")
    assert printed.returncode == 0, printed.stderr
    assert yaml.safe_load(printed.stdout)["agent"] == "llm"


def test_harbors_default_config_and_a_wrong_typed_file_from_the_command_line(tmp_path, ds):
    import shutil

    shutil.copy(TESTS / "job" / "fixtures" / "harbor026-default-config.json", tmp_path / "h.json")
    p = cairn("run", "-c", "h.json", "--print-config", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    printed = yaml.safe_load(p.stdout)
    assert (printed["agent"], printed["paths"], printed["backend"]) == ("oracle", ["ds/a"], "docker")
    # one note (Harbor's default exclude_exceptions list); nothing refused
    assert p.stderr.splitlines() == [
        "cairn: h.json:19: warning: retry.exclude_exceptions: ignored: cairn retries by error "
        "category (infrastructure errors only), not by exception type"
    ]
    (tmp_path / "bad.yaml").write_text("tasks: [ds/a]\nagents:\n  - name: oracle\n    kwargs: [1, 2]\n")
    bad = cairn("run", "-c", "bad.yaml", "--print-config", cwd=tmp_path)
    assert bad.returncode == 2
    assert "bad.yaml:4: agents[0].kwargs: expected a mapping, not list" in bad.stderr


# ---- refused and unknown flags --------------------------------------------------------------
@pytest.mark.parametrize(
    "args,reason",
    [
        (["--upload"], "no Harbor Hub"),
        (["--effort", "high"], "reasoning-effort"),
        (["--mounts", "[]"], "mounts nothing from the host"),
        (["--install-only"], "no install-only mode"),
        (["--n-concurrent-agents", "2"], "concurrency per job"),
        (["-t", "org/x"], "no package registry"),
        (["--override-gpus", "1"], "GPUs"),
        (["--no-delete"], "--keep-sandbox"),
    ],
)
def test_harbor_flags_cairn_lacks_are_refused_with_the_reason(tmp_path, ds, args, reason):
    p = cairn("run", "-p", "ds", *args, "--jobs-dir", "jobs", cwd=tmp_path)
    assert p.returncode == 2
    assert f"{args[0]} is a harbor run flag cairn does not take" in p.stderr
    assert reason in p.stderr
    assert not (tmp_path / "jobs").exists()


def test_unknown_flag_is_still_unknown(tmp_path, ds):
    p = cairn("run", "-p", "ds", "--no-such-flag", cwd=tmp_path)
    assert p.returncode == 2 and "No such option: --no-such-flag" in p.stderr


# ---- the run flags, one behaviour each (local backend) --------------------------------------
@pytest.mark.local
@local
def test_extra_instruction_reaches_every_step_and_config_json(tmp_path):
    check = reward_if(
        "grep -q 'EXTRA-FROM-FILE' /app/instruction.txt && grep -q 'EXTRA-INLINE' /app/instruction.txt"
    )
    write_task(
        tmp_path,
        "two",
        steps=[
            StepSpec("first", instruction="Step one.", test=check),
            StepSpec("second", instruction="Step two.", test=check),
        ],
    )
    (tmp_path / "extra.md").write_text("EXTRA-FROM-FILE: cite your sources.\n")
    record = tmp_path / "rec.jsonl"
    p = cairn(
        "run",
        "-p",
        "two",
        "-e",
        "local",
        "-a",
        "job_agents:RecordingAgent",
        "--ak",
        f"record={record}",
        "--extra-instruction-path",
        "extra.md",
        "--extra-instruction",
        "EXTRA-INLINE: be brief.",
        "--job-name",
        "j",
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    ((name, result),) = trials(tmp_path / "jobs" / "j").items()
    assert [s["reward"] for s in result["steps"]] == [1.0, 1.0]  # the verifier saw it in the box
    runs = [r["instruction"] for r in records(record) if r["phase"] == "run"]
    assert runs == [
        "Step one.\n\nEXTRA-FROM-FILE: cite your sources.\n\nEXTRA-INLINE: be brief.",
        "Step two.\n\nEXTRA-FROM-FILE: cite your sources.\n\nEXTRA-INLINE: be brief.",
    ]
    trial = tmp_path / "jobs" / "j" / "trials" / name
    config = json.loads((trial / "config.json").read_text())
    assert config["options"]["extra_instructions"] == [
        "EXTRA-FROM-FILE: cite your sources.\n",
        "EXTRA-INLINE: be brief.",
    ]
    assert (trial / "steps" / "02-second" / "instruction.md").read_text() == runs[1]


@pytest.mark.local
@local
def test_n_tasks_runs_only_the_first_n(tmp_path, ds):
    p = cairn("run", "-p", "ds", "-e", "local", "-l", "2", "--job-name", "j", cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(r["task"]["name"] for r in trials(tmp_path / "jobs" / "j").values()) == ["test/a", "test/b"]


@pytest.mark.local
@local
def test_env_file_values_reach_a_template(tmp_path):
    write_task(
        tmp_path,
        "needs",
        toml_extra='[verifier.env]\nTOKEN = "${CAIRN_T_DOTENV}"\n',
        test=reward_if('[ "$TOKEN" = "from dotenv" ]'),
    )
    p = cairn("run", "-p", "needs", "-e", "local", "--job-name", "none", cwd=tmp_path, CAIRN_T_DOTENV=None)
    assert p.returncode == 2 and "CAIRN_T_DOTENV" in p.stderr  # unset without the file
    (tmp_path / ".env.test").write_text(
        '# keys\nexport CAIRN_T_DOTENV="from dotenv"  # yes\nCAIRN_T_AGENT_KEY=sk-test-123\n'
    )
    record = tmp_path / "rec.jsonl"
    p = cairn(
        "run",
        "-p",
        "needs",
        "-e",
        "local",
        "--env-file",
        ".env.test",
        "--job-name",
        "j",
        "-a",
        "job_agents:RecordingAgent",
        "--ak",
        f"record={record}",
        "--ak",
        "probe=CAIRN_T_AGENT_KEY",
        cwd=tmp_path,
        CAIRN_T_DOTENV="the shell's value loses",
        CAIRN_T_AGENT_KEY=None,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    (result,) = trials(tmp_path / "jobs" / "j").values()
    assert result["reward"] == 1.0  # the template resolved from the file, over the shell
    assert {r["probe"] for r in records(record)} == {"sk-test-123"}  # the agent's key too
    assert "sk-test-123" not in (tmp_path / "jobs" / "j" / "job.json").read_text()
    p = cairn("run", "-p", "needs", "--env-file", "nowhere.env", cwd=tmp_path)
    assert p.returncode == 2 and "--env-file nowhere.env: no such file" in p.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--ve", "=x"], "--ve takes KEY=VALUE, got '=x': the KEY is empty"),
        (["--ae", "=x"], "--ae takes KEY=VALUE, got '=x': the KEY is empty"),
        (["--ak", "=1"], "--ak takes KEY=VALUE, got '=1': the KEY is empty"),
        (["--add-host", "=10.0.0.7"], "--add-host takes KEY=VALUE, got '=10.0.0.7': the KEY is empty"),
        (["--ve", "JUDGE MODEL=x"], "the KEY 'JUDGE MODEL' holds whitespace"),
        (["--ve", "novalue"], "--ve takes KEY=VALUE, got 'novalue'"),
    ],
)
def test_a_malformed_key_value_flag_is_refused_before_anything_starts(tmp_path, ds, args, message):
    p = cairn("run", "-p", "ds", "-e", "local", *args, "--job-name", "j", cwd=tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr
    assert message in p.stderr
    assert not (tmp_path / "jobs").exists()


@pytest.mark.parametrize(
    "text, message",
    [
        ("# keys\nGOOD=1\n\n=sk-123\n", "keys.env:4: not a KEY=VALUE line: '=sk-123'"),
        ("GOOD=1\nthis is prose\n", "keys.env:2: not a KEY=VALUE line: 'this is prose'"),
        ("GOOD=1\nOPENAI_API_KEY\n", "keys.env:2: OPENAI_API_KEY has no =VALUE"),
    ],
)
def test_a_malformed_env_file_line_is_refused_with_its_line(tmp_path, ds, text, message):
    (tmp_path / "keys.env").write_text(text)
    p = cairn("run", "-p", "ds", "-e", "local", "--env-file", "keys.env", "--job-name", "j", cwd=tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"cairn: error: --env-file {message}" in p.stderr
    assert "python-dotenv could not parse" not in p.stderr  # one message, ours
    assert not (tmp_path / "jobs").exists()


def test_a_config_file_with_an_empty_key_is_refused(tmp_path, ds):
    (tmp_path / "job.yaml").write_text("paths: [ds]\nverifier_env: {'': judge}\n")
    p = cairn("run", "-c", "job.yaml", "-e", "local", "--job-name", "j", cwd=tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "verifier_env" in p.stderr and "the KEY is empty" in p.stderr
    assert not (tmp_path / "jobs").exists()


@pytest.mark.local
@local
def test_specific_multipliers_replace_the_global_one(tmp_path):
    write_task(tmp_path, "timed", toml_extra="[agent]\ntimeout_sec = 10\n")
    record = tmp_path / "rec.jsonl"
    p = cairn(
        "run",
        "-p",
        "timed",
        "-e",
        "local",
        "-a",
        "job_agents:RecordingAgent",
        "--ak",
        f"record={record}",
        "--timeout-multiplier",
        "3",
        "--agent-timeout-multiplier",
        "2",
        "--agent-setup-timeout-multiplier",
        "0.5",
        "--job-name",
        "j",
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    by_phase = {r["phase"]: r["timeout_sec"] for r in records(record)}
    assert by_phase == {"setup": 300.0, "run": 20.0}  # 600 x 0.5 and 10 x 2, not x 3
    (name,) = trials(tmp_path / "jobs" / "j")
    config = json.loads((tmp_path / "jobs" / "j" / "trials" / name / "config.json").read_text())
    assert config["options"]["timeout_multipliers"] == {"agent": 2.0, "agent_setup": 0.5}

    write_task(
        tmp_path,
        "slow-test",
        toml_extra="[verifier]\ntimeout_sec = 1\n",
        test="sleep 2.5\necho 1 > /logs/verifier/reward.txt\n",
    )
    short = cairn(
        "run",
        "-p",
        "slow-test",
        "-e",
        "local",
        "--timeout-multiplier",
        "10",
        "--verifier-timeout-multiplier",
        "1",
        "--job-name",
        "short",
        cwd=tmp_path,
    )
    (r,) = trials(tmp_path / "jobs" / "short").values()
    assert short.returncode == 1 and r["error"]["kind"] == "verifier_timeout", r["error"]
    long = cairn(
        "run",
        "-p",
        "slow-test",
        "-e",
        "local",
        "--verifier-timeout-multiplier",
        "5",
        "--job-name",
        "long",
        cwd=tmp_path,
    )
    (r,) = trials(tmp_path / "jobs" / "long").values()
    assert long.returncode == 0 and r["reward"] == 1.0


@pytest.mark.local
@local
def test_artifact_flag_collects_the_path_after_every_step(tmp_path):
    write_task(tmp_path, "art", solve="echo 'the report' > /app/report.txt\n")
    p = cairn(
        "run", "-p", "art", "-e", "local", "--artifact", "/app/report.txt", "--job-name", "j", cwd=tmp_path
    )
    assert p.returncode == 0, p.stdout + p.stderr
    (name,) = trials(tmp_path / "jobs" / "j")
    step = tmp_path / "jobs" / "j" / "trials" / name / "steps" / "01-main"
    assert (step / "artifacts" / "app" / "report.txt").read_text() == "the report\n"
    manifest = json.loads((step / "artifacts" / "manifest.json").read_text())
    assert any(row["source"] == "/app/report.txt" and row["status"] == "copied" for row in manifest)


@pytest.mark.local
@local
def test_artifact_flag_under_logs_or_overlapping_warns_as_the_lint_does(tmp_path):
    import re

    write_task(tmp_path, "linted")  # the same path as a task.toml entry: the lint's reason
    toml = tmp_path / "linted" / "task.toml"
    toml.write_text('artifacts = ["/logs/verifier"]\n' + toml.read_text())
    lint = cairn("tasks", "check", "linted", "-e", "local", cwd=tmp_path)
    (why,) = re.findall(r"is under /logs: (.*); write the output", lint.stdout + lint.stderr)
    assert "emptied before artifacts are collected" in why

    write_task(tmp_path, "own", solve="mkdir -p /app/out && echo r > /app/out/r.txt\n")
    toml = tmp_path / "own" / "task.toml"
    toml.write_text('artifacts = [{source = "/app/out", destination = "res"}]\n' + toml.read_text())
    args = (
        "run",
        "-p",
        "own",
        "-e",
        "local",
        "--artifact",
        "/logs/verifier",
        "--artifact",
        "/res/deeper",
        "--artifact",
        "/app/other",
    )
    expected = [
        f"warning: --artifact /logs/verifier is under /logs: {why}; collect the output "
        "from somewhere else (artifact-log-overlap)",
        "warning: test/own: --artifact /res/deeper overlaps the task's artifact "
        "/app/out: their destinations `res` and `res/deeper` nest",
    ]
    plan = cairn(*args, "--dry-run", cwd=tmp_path)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    p = cairn(*args, "--job-name", "j", cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    for out in (plan.stdout, p.stdout + p.stderr):
        assert all(line in out for line in expected), out
        assert "/app/other" not in out  # a path that overlaps nothing gets no warning
    assert expected[0] in (tmp_path / "jobs" / "j" / "job.log").read_text()


@pytest.mark.local
@local
def test_quiet_prints_no_trial_lines_but_the_summary(tmp_path, ds):
    p = cairn("run", "-p", "ds", "-e", "local", "-q", "--job-name", "j", cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    trial_lines = [
        line for line in p.stdout.splitlines() if line.startswith("[test/") and "] warning:" not in line
    ]
    assert trial_lines == []  # no environment, step or verdict lines; warnings still shown
    assert "trials               3 (completed 3)" in p.stdout and "results: jobs/j" in p.stdout
    loud = cairn("run", "-p", "ds", "-e", "local", "--job-name", "loud", cwd=tmp_path)
    assert "[test/a] PASS" in loud.stdout


@pytest.mark.local
@local
def test_r_is_max_retries(tmp_path):
    write_task(tmp_path, "t")
    marker = tmp_path / "marker"
    p = cairn(
        "run",
        "-p",
        "t",
        "-e",
        "local",
        "-a",
        "job_agents:FlakySetupAgent",
        "--ak",
        f"marker={marker}",
        "-r",
        "0",
        "--job-name",
        "none",
        cwd=tmp_path,
    )
    (r,) = trials(tmp_path / "jobs" / "none").values()
    assert p.returncode == 1 and r["error"]["kind"] == "agent_setup_failed"
    marker.unlink()
    p = cairn(
        "run",
        "-p",
        "t",
        "-e",
        "local",
        "-a",
        "job_agents:FlakySetupAgent",
        "--ak",
        f"marker={marker}",
        "-r",
        "1",
        "--job-name",
        "one",
        cwd=tmp_path,
    )
    (r,) = trials(tmp_path / "jobs" / "one").values()
    assert p.returncode == 0 and r["reward"] == 1.0


@pytest.mark.parametrize(
    "flag",
    [
        "--override-cpus",
        "--timeout-multiplier",
        "--agent-timeout-multiplier",
        "--verifier-timeout-multiplier",
    ],
)
def test_a_non_finite_number_is_refused_before_anything_starts(tmp_path, flag):
    # `inf` passed validation, then crashed the run with an ExceptionGroup and left a trial
    # folder without a result (found by the new-user check of #19)
    write_task(tmp_path, "t")
    for extra in ((), ("--dry-run",)):
        p = cairn("run", "-p", "t", "-e", "local", flag, "inf", *extra, cwd=tmp_path)
        assert p.returncode == 2, p.stdout + p.stderr
        assert "finite number" in p.stderr and "Traceback" not in p.stderr
        assert "ExceptionGroup" not in p.stderr
    assert not (tmp_path / "jobs").exists()


# ---- --override-* reach the container (Docker) ----------------------------------------------
CGROUP_LIMITS = """\
if [ -f /sys/fs/cgroup/memory.max ]; then  # cgroup v2
  m=$(cat /sys/fs/cgroup/memory.max); c=$(cat /sys/fs/cgroup/cpu.max)
else  # cgroup v1
  m=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes)
  c="$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) $(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us)"
fi
echo "memory $m cpu $c"
"""


@pytest.mark.docker
def test_resource_overrides_reach_the_container(tmp_path):
    if not backend_available("docker"):
        pytest.skip("no Docker engine")
    write_task(
        tmp_path,
        "limits",
        test=CGROUP_LIMITS + reward_if('[ "$m" = 314572800 ] && [ "$c" = "50000 100000" ]'),
    )
    toml = tmp_path / "limits" / "task.toml"
    toml.write_text(toml.read_text() + "cpus = 2\nmemory_mb = 2048\n")
    name = f"t-{uuid.uuid4().hex[:8]}"
    p = cairn(
        "run",
        "-p",
        "limits",
        "-e",
        "docker",
        "--override-memory-mb",
        "300",
        "--override-cpus",
        "0.5",
        "--override-storage-mb",
        "2048",
        "--job-name",
        name,
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    ((trial, r),) = trials(tmp_path / "jobs" / name).items()
    assert r["reward"] == 1.0, r  # the verifier read the overridden limits from the cgroup
    # docker cannot limit storage: the override reaches the backend, which says so
    assert any("cannot apply storage_mb = 2048" in w for w in r["warnings"]), r["warnings"]
    config = json.loads((tmp_path / "jobs" / name / "trials" / trial / "config.json").read_text())
    assert config["options"]["resource_overrides"] == {"cpus": 0.5, "memory_mb": 300, "storage_mb": 2048}
    assert containers_of(tmp_path / "jobs" / name) == []


# ---- --dry-run ------------------------------------------------------------------------------
def _registry(tmp_path: Path) -> Path:
    """demo@1.0 of two tasks in a git repository reached by file:// (no network)."""
    from gitserve import commit_all, init_repo

    work = init_repo(tmp_path / "repo")
    write_task(work / "tasks", "hello", solve="echo hi > /app/out\n", test=reward_if("grep -q hi /app/out"))
    write_task(work / "tasks", "bye", solve="echo bye > /app/out\n", test=reward_if("grep -q bye /app/out"))
    commit = commit_all(work, "v1")
    reg = tmp_path / "registry.json"
    reg.write_text(
        json.dumps(
            [
                {
                    "name": "demo",
                    "version": "1.0",
                    "description": "two",
                    "tasks": [
                        {
                            "name": n,
                            "git_url": f"file://{work}",
                            "path": f"tasks/{n}",
                            "git_commit_id": commit,
                        }
                        for n in ("hello", "bye")
                    ],
                }
            ]
        )
    )
    return reg


@pytest.mark.docker
def test_dry_run_on_a_dataset_starts_no_sandbox_and_prints_the_plan(tmp_path):
    if not backend_available("docker"):
        pytest.skip("no Docker engine")
    reg = _registry(tmp_path)
    counter = tmp_path / "agent-ran"
    cache = str(tmp_path / "cache")
    p = cairn(
        "run",
        "-d",
        "demo@1.0",
        "--registry-path",
        str(reg),
        "-e",
        "docker",
        "-k",
        "2",
        "-a",
        "job_agents:CountingAgent",
        "--ak",
        f"counter={counter}",
        "--job-name",
        "dry",
        "--dry-run",
        cwd=tmp_path,
        CAIRN_CACHE_DIR=cache,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    assert "backend: docker (executor local)" in out
    assert "job: jobs/dry (new)" in out
    assert "tasks: 2, attempts: 2, trials: 4 (4 to run, 0 kept, 0 invalid)" in out
    rows = [line.split() for line in out.splitlines() if line.startswith("  test/")]
    assert [(r[0], r[2]) for r in rows] == [
        ("test/hello", "1"),
        ("test/hello", "2"),
        ("test/bye", "1"),
        ("test/bye", "2"),
    ]
    assert all(r[3].startswith(r[0].replace("/", "-") + f"__{r[2]}__") for r in rows)
    assert out.rstrip().endswith("problems: none")
    assert not (tmp_path / "jobs").exists()  # no job folder claimed, locked or written
    assert not counter.exists()  # no agent ran
    assert containers_of(tmp_path / "jobs" / "dry") == []


@pytest.mark.local
@local
def test_dry_run_shows_what_a_resume_keeps_and_exits_1_on_problems(tmp_path):
    reg = _registry(tmp_path)
    cache = str(tmp_path / "cache")
    base = ("run", "-d", "demo@1.0", "--registry-path", str(reg), "-e", "local", "--job-name", "job")
    ran = cairn(*base, cwd=tmp_path, CAIRN_CACHE_DIR=cache)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    folders = sorted(trials(tmp_path / "jobs" / "job"))
    # the same command again is refused by the run (exit 2): the dry run says the same
    again = cairn(*base, cwd=tmp_path, CAIRN_CACHE_DIR=cache)
    p = cairn(*base, "--dry-run", cwd=tmp_path, CAIRN_CACHE_DIR=cache)
    assert (again.returncode, p.returncode) == (2, 2), p.stdout + p.stderr
    refusal = f"cairn: error: job folder {tmp_path / 'jobs' / 'job'} exists; resume it with"
    assert refusal in again.stderr and refusal in p.stderr and p.stdout == ""
    base = (*base, "--resume")  # what a resume would keep and run
    p = cairn(*base, "--dry-run", cwd=tmp_path, CAIRN_CACHE_DIR=cache)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "job: jobs/job (exists: a resume keeps 2, runs 0)" in p.stdout
    rows = [line.split() for line in p.stdout.splitlines() if line.startswith("  test/")]
    assert sorted(r[3] for r in rows) == folders
    assert all(r[4:] == ["keep", "(completed", "1.00)"] for r in rows)
    js = cairn(*base, "--dry-run", "--json", cwd=tmp_path, CAIRN_CACHE_DIR=cache)
    data = json.loads(js.stdout)
    assert (data["backend"], data["existing"], data["problems"]) == ("local", True, [])
    assert sorted(t["folder"] for t in data["trials"]) == folders
    assert {t["action"] for t in data["trials"]} == {"keep"}

    bad = tmp_path / "bad"
    write_task(bad, "needs-key", toml_extra='[verifier.env]\nK = "${CAIRN_T_UNSET_DRY}"\n')
    write_task(bad, "broken")
    (bad / "broken" / "task.toml").write_text("[task\n")
    p = cairn("run", "-p", str(bad), "-e", "local", "--dry-run", cwd=tmp_path, CAIRN_T_UNSET_DRY=None)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "problem: broken: invalid task" in p.stdout
    assert "CAIRN_T_UNSET_DRY" in p.stdout and "problems: 2" in p.stdout
    p = cairn(
        "run",
        "-d",
        "nosuch@1.0",
        "--registry-path",
        str(reg),
        "-e",
        "local",
        "--dry-run",
        cwd=tmp_path,
        CAIRN_CACHE_DIR=cache,
    )
    assert p.returncode == 2 and "nosuch" in p.stderr


@pytest.mark.local
def test_dry_run_reports_what_the_capability_check_refuses(tmp_path):
    """A task the chosen backend cannot sandbox for the agent (claude-code under no-network on
    the local backend: the model host needs the egress gateway) is a problem in the plan, exit
    1, with the words the run's config_error gives; and nothing is written."""
    write_task(tmp_path, "sealed")
    common = ("run", "-p", "sealed", "-a", "claude-code", "-e", "local", "--job-name", "j")
    p = cairn(*common, "--dry-run", cwd=tmp_path, ANTHROPIC_API_KEY="x")
    assert p.returncode == 1, p.stdout + p.stderr
    (line,) = [x for x in p.stdout.splitlines() if x.startswith("problem: ")]
    assert line.startswith(
        "problem: test/sealed: refused before start: backend 'local' cannot "
        "enforce the network policy no-network + model"
    )
    assert "problems: 1" in p.stdout and not (tmp_path / "jobs").exists()
    run = cairn(*common, cwd=tmp_path, ANTHROPIC_API_KEY="x")
    (r,) = trials(tmp_path / "jobs" / "j").values()
    assert run.returncode == 1 and r["error"]["kind"] == "config_error"
    assert line.split("refused before start: ", 1)[1] in r["error"]["message"]


@pytest.mark.local
@local
def test_resume_takes_the_env_file_again(tmp_path):
    write_task(
        tmp_path,
        "needs",
        toml_extra='[verifier.env]\nTOKEN = "${CAIRN_T_DOTENV2}"\n',
        test=reward_if('[ "$TOKEN" = "again" ]'),
    )
    (tmp_path / "keys.env").write_text("CAIRN_T_DOTENV2=again\n")
    marker = tmp_path / "marker"
    first = cairn(
        "run",
        "-p",
        "needs",
        "-e",
        "local",
        "--env-file",
        "keys.env",
        "-r",
        "0",
        "-a",
        "job_agents:FlakySetupAgent",
        "--ak",
        f"marker={marker}",
        "--job-name",
        "j",
        cwd=tmp_path,
        CAIRN_T_DOTENV2=None,
    )
    (r,) = trials(tmp_path / "jobs" / "j").values()
    assert first.returncode == 1 and r["error"]["kind"] == "agent_setup_failed"  # infra: resumable
    assert "again" not in (tmp_path / "jobs" / "j" / "job.json").read_text()
    bare = cairn("resume", "jobs/j", cwd=tmp_path, CAIRN_T_DOTENV2=None)
    assert bare.returncode == 2 and "CAIRN_T_DOTENV2" in bare.stderr
    again = cairn("resume", "jobs/j", "--env-file", "keys.env", cwd=tmp_path, CAIRN_T_DOTENV2=None)
    assert again.returncode == 0, again.stdout + again.stderr
    (r,) = trials(tmp_path / "jobs" / "j").values()
    assert r["reward"] == 1.0


@pytest.mark.local
@local
def test_an_exported_local_job_runs_again_from_its_config_json(tmp_path):
    """cairn export --format harbor writes the local backend as environment.import_path
    cairn:local (Harbor has no type for it); cairn run -c reads it back as -e local, and the
    config.json's own job_name/jobs_dir (the export folder) do not make the run write there."""
    write_task(tmp_path, "t", solve="touch /app/done\n", test=reward_if("test -f /app/done"))
    first = cairn("run", "-p", "t", "-e", "local", "-k", "2", "--job-name", "orig", cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    ex = cairn("export", "jobs/orig", "--format", "harbor", "-o", "exported/orig", cwd=tmp_path)
    assert ex.returncode == 0, ex.stderr
    out = tmp_path / "exported" / "orig"
    assert json.loads((out / "config.json").read_text())["environment"] == {
        "type": None,
        "import_path": "cairn:local",
    }
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}

    plan = cairn("run", "-c", "exported/orig/config.json", "--dry-run", cwd=tmp_path)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "backend: local (executor local)" in plan.stdout
    assert "job: a new folder named at the start time (new)" in plan.stdout
    names = sorted(trials(tmp_path / "jobs" / "orig"))
    assert [
        ln.split()[-2] for ln in plan.stdout.splitlines() if ln.startswith("  test/t")
    ] == names  # the same trials as the exported job: same task, agent, attempts
    assert "job_name: ignored: job_name 'orig' and jobs_dir name the Harbor job folder" in plan.stderr

    again = cairn("run", "-c", "exported/orig/config.json", cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    [new_job] = [d for d in (tmp_path / "jobs").iterdir() if d.name != "orig"]
    assert json.loads((new_job / "job.json").read_text())["backend"] == "local"
    assert sorted(trials(new_job)) == names
    assert [r["reward"] for r in trials(new_job).values()] == [1.0, 1.0]
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


@pytest.mark.local
@local
def test_run_resume_takes_the_stored_config_and_refuses_another(tmp_path):
    write_task(tmp_path, "t")
    marker, record = tmp_path / "marker", tmp_path / "rec.jsonl"
    job_yaml = tmp_path / "job.yaml"

    def write_config(style: str) -> None:
        job_yaml.write_text(
            f"paths: [t]\nagent: job_agents:FlakySetupAgent\njob_name: j\n"
            f"agent_kwargs: {{marker: {marker}, style: {style}}}\n"
        )

    write_config("terse")
    first = cairn("run", "-c", "job.yaml", "-e", "local", "-r", "0", cwd=tmp_path)
    job = tmp_path / "jobs" / "j"
    ((name, r),) = trials(job).items()
    assert first.returncode == 1 and r["error"]["kind"] == "agent_setup_failed"  # resumable
    before = (job / "job.json").read_bytes()

    write_config("verbose")  # the file changed since the job started
    for extra in ((), ("--dry-run",)):
        p = cairn("run", "-c", "job.yaml", "-e", "local", "--resume", *extra, cwd=tmp_path)
        assert p.returncode == 2, p.stdout + p.stderr
        assert (
            "--resume continues jobs/j with the config it was started with (job.json), and "
            "the options given differ from it: agent_kwargs.style: the job's terse, given "
            "verbose. Resume it as it is"
        ) in p.stderr
        assert "`cairn resume jobs/j`" in p.stderr
    assert (job / "job.json").read_bytes() == before  # never rewritten with the new config
    assert list(trials(job)) == [name] and not (job / "trials" / name / "attempts").exists()
    p = cairn("run", "--job-name", "j", "-e", "local", "--resume", "-k", "3", cwd=tmp_path)
    assert p.returncode == 2 and "attempts: the job's 1, given 3" in p.stderr

    # the job's own options (or none at all) resume it, as `cairn resume` does
    p = cairn("run", "--job-name", "j", "-e", "local", "--resume", "--dry-run", cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"  test/t  attempt 1  {name}  run" in p.stdout
    write_config("terse")
    p = cairn("run", "-c", "job.yaml", "-e", "local", "--resume", "-n", "2", cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    ((again, r),) = trials(job).items()
    assert again == name and r["outcome"] == "completed" and r["reward"] == 1.0
    cfg = json.loads((job / "job.json").read_text())["config"]
    assert cfg["agent_kwargs"] == {"marker": str(marker), "style": "terse"}
    assert cfg["n_concurrent"] == 2  # what cairn resume -n may change
    assert not record.exists()


@pytest.mark.local
@local
def test_a_changed_trial_input_is_named_old_and_new(tmp_path):
    write_task(tmp_path, "t")
    first = cairn(
        "run",
        "-p",
        "t",
        "-e",
        "local",
        "--job-name",
        "j",
        "-a",
        "job_agents:CostlyAgent",
        "--ak",
        "style=terse",
        cwd=tmp_path,
    )
    assert first.returncode == 0, first.stdout + first.stderr
    job = tmp_path / "jobs" / "j"
    ((old_name, old),) = trials(job).items()
    (tmp_path / "t" / "instruction.md").write_text("Do the task, changed.\n")
    p = cairn("resume", "jobs/j", cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    ((new_name, new),) = trials(job).items()
    was, now = old["task"]["content_hash"][:12], new["task"]["content_hash"][:12]
    assert was != now
    assert (
        f"[test/t] task changed since the last run (content {was} → {now}); attempt 1 "
        f"re-runs as trial {new_name}, the old folder {old_name} is kept"
    ) in p.stdout + p.stderr
    # through the API a resume may be handed other options: the message names them, old → new
    from cairn.events import JobObserver
    from cairn.job.run import run_job
    from cairn.plan import JobConfig

    class Collect(JobObserver):
        def __init__(self) -> None:
            self.lines: list[str] = []

        def event(self, event) -> None:
            self.lines.append(event.text)

    seen = Collect()
    run_job(
        JobConfig(
            paths=(tmp_path / "t",),
            backend="local",
            jobs_dir=tmp_path / "jobs",
            job_name="j",
            agent="job_agents:CostlyAgent",
            agent_kwargs={"style": "verbose"},
        ),
        job_dir=job,
        resume=True,
        observer=seen,
    )
    ((newer, _),) = trials(job).items()
    assert (
        f"[test/t] the trial's options changed since the last run (the task did not) "
        f'(agent kwargs {{"style": "terse"}} → {{"style": "verbose"}}); attempt 1 re-runs as '
        f"trial {newer}, the old folder {new_name} is kept under its attempts/"
    ) in seen.lines


HARBOR_PLAN = """\
import asyncio, collections, json, sys, uuid
import yaml
from harbor.job_plan import JobPlan
from harbor.models.job.config import JobConfig
config = JobConfig.model_validate(yaml.safe_load(open(sys.argv[1])))
tasks = asyncio.run(JobPlan.resolve_task_configs(config))
trials = JobPlan.build_trial_configs(config, tasks, job_id=uuid.uuid4())
print(json.dumps({"trials": sorted(collections.Counter(t.task.path.name for t in trials).items()),
                  "kwargs": [t.agent.kwargs for t in trials],
                  "import_path": sorted({t.agent.import_path for t in trials}),
                  "multiplier": sorted({t.timeout_multiplier for t in trials})}))
"""


def test_harbor_itself_plans_the_trials_cairn_runs(tmp_path, ds):
    """The same file through Harbor 0.26's own planner (JobPlan.build_trial_configs, in its
    separate environment): the same tasks, attempts, agent and kwargs as cairn's plan."""
    from harbor_env import require_harbor_python

    record = tmp_path / "record.jsonl"
    cfg = tmp_path / "harbor-job.yaml"
    cfg.write_text(HARBOR_JOB.format(record=record))
    p = subprocess.run(
        [str(require_harbor_python()), "-c", HARBOR_PLAN, str(cfg)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    harbor = json.loads(p.stdout.splitlines()[-1])
    plan = cairn("run", "-c", str(cfg), "-e", "local", "--dry-run", "--json", cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    ours = json.loads(plan.stdout)
    counts: dict[str, int] = {}
    for t in ours["trials"]:
        counts[t["task"].removeprefix("test/")] = counts.get(t["task"].removeprefix("test/"), 0) + 1
    assert sorted(counts.items()) == [tuple(x) for x in harbor["trials"]] == [("a", 2), ("b", 2), ("c", 2)]
    assert harbor["import_path"] == ["job_agents:RecordingAgent"]
    assert all(k == {"record": str(record), "style": "terse"} for k in harbor["kwargs"])
    printed = yaml.safe_load(cairn("run", "-c", str(cfg), "--print-config", cwd=tmp_path).stdout)
    assert (printed["agent"], printed["agent_kwargs"], printed["timeout_multiplier"]) == (
        "job_agents:RecordingAgent",
        {"record": str(record), "style": "terse"},
        harbor["multiplier"][0],
    )
