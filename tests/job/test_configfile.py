"""Job config files (``cairn run -c``): Harbor 0.26 job files translated key by key, the keys
ignored reported with their lines, the ones cairn cannot honour refused, several files merged
(issue 19). No sandbox: these read files and build configs only."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from cairn.errors import UsageError
from cairn.job.configfile import (
    AGENT_KEYS,
    is_harbor_shaped,
    merge_configs,
    read_config_file,
)
from cairn.plan import JobConfig
from taskgen import write_task


def write(tmp_path: Path, text: str, name: str = "job.yaml") -> Path:
    f = tmp_path / name
    f.write_text(text)
    return f


def test_a_harbor_file_translates_to_the_same_job(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative paths are taken from the current folder
    (tmp_path / "extra.md").write_text("Cite the file you changed.\n")
    f = write(
        tmp_path,
        """\
jobs_dir: out
n_attempts: 3
n_concurrent_trials: 2
environment_build_timeout_multiplier: 4
agent_timeout_multiplier: 1.5
retry:
  max_retries: 5
  min_wait_sec: 0.5
environment:
  type: docker
  force_build: true
  override_cpus: 1.5
  override_memory_mb: 4096
  override_storage_mb: 8192
verifier:
  env: {JUDGE_MODEL: openai/gpt-4o-mini}
  disable: false
agents:
  - name: qwen-coder
    model_name: openai/qwen3
    kwargs: {temperature: 0}
    env: {HTTP_PROXY: "http://127.0.0.1:3128"}
    extra_allowed_hosts: [api.example.org]
    resume_trajectory: true
datasets:
  - name: terminal-bench
    version: "2.0"
    registry_path: registry.json
    task_names: ["fix-*"]
    exclude_task_names: [fix-slow]
    n_tasks: 4
artifacts:
  - /app/out.txt
  - source: /app/logs
    destination: logs
extra_instruction_paths: [extra.md]
extra_instructions: [Be brief.]
""",
    )
    cf = read_config_file(f)
    assert cf.harbor
    cfg = JobConfig.model_validate(cf.data)
    assert (cfg.jobs_dir, cfg.attempts, cfg.n_concurrent) == (Path("out"), 3, 2)
    assert (cfg.build_timeout_multiplier, cfg.agent_timeout_multiplier) == (4.0, 1.5)
    assert (cfg.max_retries, cfg.retry_backoff_sec) == (5, 0.5)
    assert (cfg.backend, cfg.force_build) == ("docker", True)
    assert (cfg.override_cpus, cfg.override_memory_mb, cfg.override_storage_mb) == (1.5, 4096, 8192)
    assert cfg.verifier_env == {"JUDGE_MODEL": "openai/gpt-4o-mini"} and cfg.verify
    assert (cfg.agent, cfg.model, cfg.agent_kwargs) == ("qwen-code", "openai/qwen3", {"temperature": 0})
    assert cfg.agent_env == {"HTTP_PROXY": "http://127.0.0.1:3128"}
    assert cfg.agent_hosts == ("api.example.org",) and cfg.resume_agent_session
    assert cfg.datasets == ("terminal-bench@2.0",) and cfg.registry_path == Path("registry.json")
    assert (cfg.include, cfg.exclude, cfg.n_tasks) == (("fix-*",), ("fix-slow",), 4)
    assert cfg.artifacts == ("/app/out.txt", "/app/logs")
    assert cfg.extra_instructions == ("Cite the file you changed.\n", "Be brief.")
    assert [(n.line, n.key) for n in cf.notes] == [(35, "artifacts[1].destination")]


def test_ignored_keys_are_reported_with_their_line_and_reason(tmp_path):
    f = write(
        tmp_path,
        """\
debug: true
metrics:
  - type: mean
orchestrator:
  type: local
  n_concurrent_trials: 8
  retry:
    include_exceptions: [RuntimeError]
agents:
  - name: oracle
    n_concurrent: 2
    include_logs: ["*.txt"]
environment:
  mounts: []
  cpu_enforcement_policy: limit
tasks:
  - path: t
n_concurent_trials: 3
""",
    )
    cf = read_config_file(f)
    got = {n.key: (n.line, n.text) for n in cf.notes}
    assert set(got) == {
        "debug",
        "metrics",
        "orchestrator.retry.include_exceptions",
        "agents[0].n_concurrent",
        "agents[0].include_logs",
        "environment.mounts",
        "environment.cpu_enforcement_policy",
        "n_concurent_trials",
    }
    assert got["n_concurent_trials"] == (18, "ignored: not a key of Harbor 0.26's JobConfig, nor of cairn's")
    assert got["agents[0].n_concurrent"][0] == 11
    assert "error category" in got["orchestrator.retry.include_exceptions"][1]
    assert str(cf.notes[0]) == (
        f"{f}:1: warning: debug: ignored: set CAIRN_DEBUG=1 for tracebacks; cairn's logs are always written"
    )
    assert cf.data["n_concurrent"] == 8 and cf.data["paths"] == ["t"]


@pytest.mark.parametrize(
    "text,line,message",
    [
        ("agents:\n  - name: oracle\n  - name: nop\n", 3, "one agent per job"),
        ("install_only: true\n", 1, "no install-only mode"),
        ("user_agent: {name: x}\n", 1, "no simulated user"),
        ("environment:\n  type: daytona\n", 2, "environment type 'daytona'"),
        ("tasks:\n  - name: org/task\n", 2, "a git or package task"),
        ("datasets:\n  - repo: org/registry\n    name: x\n", 2, "a git registry"),
        ("environment:\n  override_gpus: 1\n", 2, "GPUs"),
        ("schema_version: 2\n", 1, "version 2"),
        ("source_jobs: [jobs/old]\n", 1, "cairn regrade"),
        ("environment:\n  import_path: my.env:Env\n", 2, "a custom environment class"),
    ],
)
def test_keys_cairn_cannot_honour_are_refused_with_their_line(tmp_path, text, line, message):
    f = write(tmp_path, text + "n_attempts: 1\n")
    with pytest.raises(UsageError) as err:
        read_config_file(f)
    assert str(err.value).startswith(f"{f}:{line}: ")
    assert message in str(err.value)


def test_a_cairn_file_keeps_its_keys_and_refuses_unknown_ones(tmp_path):
    f = write(tmp_path, "p: [a, b]\nk: 2\nak: {x: 1}\nno-verify: true\nartifact: /app/x\nr: 0\nquiet: true\n")
    cf = read_config_file(f)
    assert not cf.harbor and cf.notes == []
    assert cf.data == {
        "paths": ["a", "b"],
        "attempts": 2,
        "agent_kwargs": {"x": 1},
        "verify": False,
        "artifacts": ["/app/x"],
        "max_retries": 0,
        "quiet": True,
    }
    bad = write(tmp_path, "p: [a]\npathz: [a]\n", "bad.yaml")
    with pytest.raises(UsageError) as err:
        read_config_file(bad)
    assert str(err.value) == f"{bad}:2: pathz: not a key of cairn's job config"
    # a wrong value is refused with its file and line (not after the merge, without them)
    for text, line, message in [
        ("paths: [a]\ntimeout_multiplier: null\n", 2, "timeout_multiplier: Input should be a valid number"),
        ("p: a\nk: [2]\n", 2, "k: Input should be a valid integer"),
        ("paths: [a]\nartifact: app/x\n", 2, "artifact: artifact 'app/x': give an absolute path"),
    ]:
        f = write(tmp_path, text, "wrong.yaml")
        with pytest.raises(UsageError) as err:
            read_config_file(f)
        assert str(err.value).startswith(f"{f}:{line}: {message}")


def test_shape_detection():
    assert is_harbor_shaped({"agents": [{"name": "oracle"}]})
    assert is_harbor_shaped({"datasets": [{"name": "x", "version": "1"}]})
    assert not is_harbor_shaped({"datasets": ["x@1"], "attempts": 2, "job_name": "j"})
    assert not is_harbor_shaped({"timeout_multiplier": 2, "artifacts": ["/a"]})  # shared keys


def test_a_json_harbor_file_reads_the_same(tmp_path):
    f = write(tmp_path, '{"n_attempts": 2, "tasks": [{"path": "t"}],\n "bogus": 1}', "j.json")
    cf = read_config_file(f)
    assert cf.data == {"attempts": 2, "paths": ["t"]}
    assert [(n.line, n.key) for n in cf.notes] == [(2, "bogus")]


def test_merge_later_wins_mappings_merge_lists_replace():
    merged = merge_configs(
        [
            {"paths": ["a", "b"], "agent_kwargs": {"x": 1, "y": 1}, "attempts": 2},
            {"paths": ["c"], "agent_kwargs": {"y": 2}, "verifier_env": {"K": "v"}},
            {"attempts": 5},
        ]
    )
    assert merged == {
        "paths": ["c"],
        "agent_kwargs": {"x": 1, "y": 2},
        "attempts": 5,
        "verifier_env": {"K": "v"},
    }


def test_a_harbor_agents_entry_replaces_the_earlier_agent_as_a_whole(tmp_path):
    a = read_config_file(
        write(
            tmp_path,
            "agents:\n  - name: codex\n    model_name: openai/x\n"
            "    kwargs: {reasoning: high, temperature: 0}\n"
            "    env: {A: '1'}\n    resume_trajectory: true\n"
            "tasks: [t]\n",
            "a.yaml",
        )
    )
    b = read_config_file(
        write(tmp_path, "agents:\n  - name: claude-code\n    kwargs: {temperature: 1}\n", "b.yaml")
    )
    assert b.replaces == frozenset(AGENT_KEYS)
    merged = merge_configs([a, b, {"agent_env": {"B": "2"}}])
    cfg = JobConfig.model_validate(merged)
    assert (cfg.agent, cfg.model, cfg.agent_kwargs, cfg.agent_env, cfg.resume_agent_session) == (
        "claude-code",
        None,
        {"temperature": 1},
        {"B": "2"},
        False,
    )
    assert cfg.paths == (Path("t"),)  # what the later file does not say is kept
    none = read_config_file(write(tmp_path, "n_attempts: 2\n", "c.yaml"))  # no agents: kept
    assert JobConfig.model_validate(merge_configs([a, none])).agent_kwargs == {
        "reasoning": "high",
        "temperature": 0,
    }


def test_unreadable_inputs_are_usage_errors(tmp_path):
    with pytest.raises(UsageError, match="No such file"):
        read_config_file(tmp_path / "missing.yaml")
    with pytest.raises(UsageError, match="expected a mapping"):
        read_config_file(write(tmp_path, "- a\n- b\n"))
    with pytest.raises(UsageError, match=r"job.yaml:2: extra instruction file nowhere.md"):
        read_config_file(write(tmp_path, "extra_instruction_paths:\n  - nowhere.md\n"))


HARBOR_DEFAULTS = Path(__file__).parent / "fixtures" / "harbor026-default-config.json"


def test_harbors_default_config_plans_the_same_trials_as_the_minimal_file(tmp_path, monkeypatch):
    """Every Harbor job folder's config.json holds every key at its default (install_only:
    false, user_agent: null, source_jobs: [], environment.import_path: null, …): none of
    them is refused, and the job is the one the file's tasks alone give."""
    from cairn.job.discover import discover_tasks
    from cairn.job.planner import FolderState, plan_trials
    from cairn.results.store import trial_dir_name

    monkeypatch.chdir(tmp_path)
    write_task(tmp_path / "ds", "a")
    full = read_config_file(HARBOR_DEFAULTS)
    minimal = read_config_file(write(tmp_path, "tasks:\n  - path: ds/a\n"))
    # the one note left: Harbor's default exclude_exceptions list, which cairn does not read
    assert [(n.line, n.key) for n in full.notes] == [(19, "retry.exclude_exceptions")]
    assert full.data.pop("quiet") is False
    got, want = JobConfig.model_validate(full.data), JobConfig.model_validate(minimal.data)
    # what differs is Harbor's defaults, translated: docker, 4 at a time, no retries
    assert (got.backend, got.n_concurrent, got.max_retries, got.retry_backoff_sec, got.job_name) == (
        "docker",
        4,
        0,
        1.0,
        "harbor-defaults",
    )
    assert (
        got.model_copy(
            update={
                "backend": want.backend,
                "n_concurrent": want.n_concurrent,
                "job_name": None,
                "max_retries": want.max_retries,
                "retry_backoff_sec": want.retry_backoff_sec,
            }
        )
        == want
    )

    def plan(cfg: JobConfig) -> list[tuple[str, int, str, str]]:
        return [
            (d.entry.name, d.attempt, d.trial_id, d.action.value)
            for d in plan_trials(
                cfg, discover_tasks(cfg), backend="docker", folder=FolderState(), folder_name=trial_dir_name
            )
        ]

    assert plan(got) == plan(want) and [p[:2] for p in plan(got)] == [("test/a", 1)]


def test_the_default_config_fixture_is_what_harbor_writes():
    from harbor_env import require_harbor_python

    code = (
        "from harbor.models.job.config import JobConfig\n"
        "from harbor.models.trial.config import TaskConfig\n"
        "print(JobConfig(job_name='harbor-defaults', "
        "tasks=[TaskConfig(path='ds/a')]).model_dump_json())"
    )
    out = subprocess.run(
        [str(require_harbor_python()), "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    assert json.loads(out) == json.loads(HARBOR_DEFAULTS.read_text())


@pytest.mark.parametrize(
    "text,line,message",
    [
        (
            "agents:\n  - name: oracle\n    kwargs: [1, 2]\n",
            3,
            "agents[0].kwargs: expected a mapping, not list",
        ),
        ("agents:\n  - name: oracle\n    env: [1]\n", 3, "agents[0].env: expected a mapping, not list"),
        ("agents:\n  - name: oracle\n    env: {A: [1]}\n", 3, "agents[0].env.A: expected a string"),
        ("verifier:\n  env: [1]\n", 2, "verifier.env: expected a mapping, not list"),
        ("environment:\n  type: [docker]\n", 2, "environment.type: expected a string, not list"),
        (
            "agents:\n  - name: oracle\n    extra_allowed_hosts: api.openai.com\n",
            3,
            "agents[0].extra_allowed_hosts: expected a list, not 'api.openai.com'",
        ),
        ("agents:\n  - name: [oracle]\n", 2, "agents[0].name: expected a string"),
        ("agents:\n  - name: oracle\n    resume_trajectory: 'yes'\n", 3, "expected true or false"),
        ("timeout_multiplier: null\n", 1, "timeout_multiplier: expected a number, not None"),
        ("agent_timeout_multiplier: fast\n", 1, "expected a number, not 'fast'"),
        ("n_attempts: true\n", 1, "n_attempts: expected an integer, not True"),
        ("n_concurrent_trials: [4]\n", 1, "expected an integer"),
        ("retry:\n  max_retries: '3'\n", 2, "retry.max_retries: expected an integer"),
        ("environment:\n  override_memory_mb: {mb: 1}\n", 2, "expected an integer"),
        ("environment:\n  force_build: 1\n", 2, "expected true or false"),
        ("verifier:\n  disable: 'no'\n", 2, "verifier.disable: expected true or false"),
        ("tasks:\n  - path: [a]\n", 2, "tasks[0].path: expected a string"),
        ("datasets:\n  - name: {x: 1}\n", 2, "datasets[0].name: expected a string"),
        ("datasets:\n  - name: x\n    task_names: {a: 1}\n", 3, "expected a list"),
        ("datasets:\n  - name: x\n    n_tasks: many\n", 3, "expected an integer"),
        ("artifacts: /app/out\n", 1, "artifacts: expected a list"),
        ("artifacts:\n  - source: [a]\n", 2, "artifacts[0].source: expected a string"),
        ("extra_instructions: Be brief.\n", 1, "extra_instructions: expected a list"),
        ("extra_instructions:\n  - [a]\n", 2, "extra_instructions[0]: expected a string"),
        ("jobs_dir: [a]\n", 1, "jobs_dir: expected a string"),
        ("orchestrator:\n  quiet: 2\n", 2, "expected true or false"),
    ],
)
def test_a_wrong_typed_value_is_refused_with_its_line(tmp_path, text, line, message):
    f = write(tmp_path, text + "n_attempts: 1\n" if "n_attempts" not in text else text)
    with pytest.raises(UsageError) as err:
        read_config_file(f)
    assert str(err.value).startswith(f"{f}:{line}: ")
    assert message in str(err.value)


def test_harbor_defaults_and_nulls_of_optional_keys_are_taken_as_unset(tmp_path):
    cf = read_config_file(
        write(
            tmp_path,
            """\
install_only: false
user_agent: null
source_jobs: []
agent_timeout_multiplier: null
environment:
  type: null
  import_path: null
  override_cpus: null
  stream: false
  cpu_enforcement_policy: auto
agents:
  - name: oracle
    kwargs: null
    env: null
    extra_allowed_hosts: null
tasks:
  - path: t
""",
        )
    )
    assert cf.notes == []
    assert cf.data == {
        "agent": "oracle",
        "agent_kwargs": {},
        "agent_env": {},
        "agent_hosts": [],
        "paths": ["t"],
    }
    hosts = read_config_file(
        write(tmp_path, "agents:\n  - extra_allowed_hosts: [api.openai.com, 10.0.0.1]\n", "h.yaml")
    )
    assert hosts.data["agent_hosts"] == ["api.openai.com", "10.0.0.1"]


@pytest.mark.parametrize(
    "env,backend",
    [
        ("{type: null, import_path: 'cairn:local'}", "local"),  # what the export writes for local
        ("{type: docker, import_path: 'cairn:local'}", "local"),  # Harbor takes import_path first
        ("{import_path: 'cairn:local', type: docker}", "local"),  # in either order
        ("{type: docker}", "docker"),
    ],
)
def test_the_environment_of_cairns_own_export_reads_back_as_its_backend(tmp_path, env, backend):
    f = write(tmp_path, f"tasks: [{{path: t}}]\nenvironment: {env}\n")
    cf = read_config_file(f)
    assert cf.data["backend"] == backend and cf.notes == []
    # any other environment class is still refused, with its line
    f = write(tmp_path, "tasks: [{path: t}]\nenvironment:\n  import_path: 'cairn:kubernetes'\n")
    with pytest.raises(
        UsageError,
        match=r"job.yaml:3: environment.import_path: a custom "
        "environment class",
    ):
        read_config_file(f)


def test_a_job_folders_own_config_json_runs_as_a_new_job(tmp_path, monkeypatch):
    """A Harbor job folder's config.json names that folder (jobs_dir/job_name): a cairn run of
    it must not write into it, so the two keys are left out, with a note."""
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "exports" / "nightly"
    folder.mkdir(parents=True)
    doc = {
        "job_name": "nightly",
        "jobs_dir": str(tmp_path / "exports"),
        "n_attempts": 2,
        "tasks": [{"path": "t"}],
        "environment": {"type": None, "import_path": "cairn:local"},
        "cairn": {"schema": "cairn.harbor-export/1", "config": {"paths": ["t"]}},
    }
    f = write(folder, json.dumps(doc, indent=2), "config.json")
    cf = read_config_file(f)
    assert "job_name" not in cf.data and "jobs_dir" not in cf.data
    assert cf.data["attempts"] == 2 and cf.data["backend"] == "local"
    assert sorted((n.key, n.line) for n in cf.notes) == [("cairn", 14), ("job_name", 2)]
    assert "name the Harbor job folder this file is in" in str(
        next(n for n in cf.notes if n.key == "job_name")
    )
    # relative jobs_dir (from the current folder) names it just the same
    f = write(folder, json.dumps({**doc, "jobs_dir": "exports"}), "config.json")
    assert "job_name" not in read_config_file(f).data
    # the same file elsewhere names another folder: kept
    f = write(tmp_path, json.dumps(doc), "elsewhere.json")
    assert read_config_file(f).data["job_name"] == "nightly"
