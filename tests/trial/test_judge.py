"""LLM-judge verifiers (issue 22): a judge credential in ``[verifier.env]`` opens the judge's
host for the verifier only; its spend is kept apart from the agent's."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cairn.agents.base import AgentContext
from cairn.results.model import Tokens
from cairn.sandbox.base import Sandbox
from cairn.task.judge import judge_hosts
from cairncli import run_cairn
from judge_scripts import JUDGE_SERVER, JUDGE_TOML, judge_task
from net_agents import ProbeAgent, parse_probe
from taskgen import write_task
from testbed import run_trial_sync


def _judge_task(root: Path, toml: str = JUDGE_TOML) -> Path:
    return judge_task(root, toml)


def test_judge_hosts_from_credentials_and_companions():
    t = {"OPENAI_API_KEY": "${K}", "OPENAI_BASE_URL": "${U:-https://judge.example:8443/v1}"}
    assert judge_hosts(t, {"OPENAI_BASE_URL": "https://judge.example:8443/v1"}) == ["judge.example"]
    assert judge_hosts({"ANTHROPIC_API_KEY": "${A}"}, {}) == ["api.anthropic.com"]
    assert judge_hosts({"OPENAI_API_KEY": "${K}"}, {"OPENAI_API_BASE": "http://10.0.0.5:4000"}) == [
        "10.0.0.5"
    ]
    # a literal key is not a judge credential request; other names are not recognised
    assert judge_hosts({"OPENAI_API_KEY": "sk-literal"}, {}) == []
    assert judge_hosts({"MY_KEY": "${MY_KEY}"}, {}) == []


def test_embedded_judge_template_is_refused_at_check_time(tmp_path):
    task = _judge_task(
        tmp_path, JUDGE_TOML.replace('"${CAIRN_TEST_JUDGE_KEY}"', '"Bearer ${CAIRN_TEST_JUDGE_KEY}"')
    )
    r = run_cairn("tasks", "check", str(task), env=dict(os.environ))
    assert r.returncode != 0
    assert "OPENAI_API_KEY" in r.stdout + r.stderr and "${" in r.stdout + r.stderr


@pytest.mark.docker
@pytest.mark.slow
def test_missing_judge_credential_exits_2_before_start(tmp_path):
    from testbed import backend_available

    if not backend_available("docker"):
        pytest.skip("no Docker engine")
    task = _judge_task(tmp_path / "tasks")
    env = {k: v for k, v in os.environ.items() if k != "CAIRN_TEST_JUDGE_KEY"}
    r = run_cairn(
        "run",
        "-p",
        str(task),
        "-a",
        "nop",
        "-e",
        "docker",
        "--jobs-dir",
        str(tmp_path / "jobs"),
        "--job-name",
        "j",
        env=env,
        timeout=600,
    )
    assert r.returncode == 2, r.stderr
    assert "CAIRN_TEST_JUDGE_KEY" in r.stderr
    assert not (tmp_path / "jobs" / "j" / "trials").exists()
    # --ve replacing the credential needs no host variable: the trial runs (its judge is not
    # there, so the grader scores 0) and the given key is masked in job.json
    r2 = run_cairn(
        "run",
        "-p",
        str(task),
        "-a",
        "nop",
        "-e",
        "docker",
        "--ve",
        "OPENAI_API_KEY=sk-given-on-cli",
        "--jobs-dir",
        str(tmp_path / "jobs"),
        "--job-name",
        "j2",
        env=env,
        timeout=600,
    )
    assert r2.returncode == 0, r2.stderr
    (trial,) = (tmp_path / "jobs" / "j2" / "trials").iterdir()
    assert json.loads((trial / "result.json").read_text())["reward"] == 0.0
    assert "sk-given-on-cli" not in (tmp_path / "jobs" / "j2" / "job.json").read_text()


class _TokenProbe(ProbeAgent):
    """A probing agent that also reports the tokens of a model it pretends to use."""

    async def run(self, instruction: str, sandbox: Sandbox, context: AgentContext) -> None:
        await super().run(instruction, sandbox, context)
        context.tokens = Tokens(prompt=1000, completion=50)
        context.cost_usd = 1.0


@pytest.mark.docker
@pytest.mark.slow
def test_judge_reached_by_verifier_only_and_spend_kept_apart(tmp_path, monkeypatch):
    from nethosts import host_containers
    from testbed import backend_available

    if not backend_available("docker"):
        pytest.skip("no Docker engine")
    monkeypatch.setenv("CAIRN_TEST_JUDGE_KEY", "sk-judge-test-123")
    task = _judge_task(tmp_path / "tasks")
    with host_containers("judge.test", "other.test", server=JUDGE_SERVER) as addrs:
        agent = _TokenProbe(["http://judge.test/v1/models", "http://other.test/"])
        r = run_trial_sync(
            task,
            agent,
            "docker",
            tmp_path / "jobs",
            add_hosts=tuple(sorted(addrs.items())),
            verifier_env={"JUDGE_MODEL": "judge-large"},
        )
        import docker

        client = docker.from_env()
        judge = [
            c
            for c in client.containers.list(filters={"label": "cairn.test-host"})
            if c.attrs["NetworkSettings"]["Networks"]["bridge"]["IPAddress"] == addrs["judge.test"]
        ][0]
        seen = judge.exec_run(
            [
                "python3",
                "-c",
                "import urllib.request;print(urllib.request.urlopen('http://127.0.0.1/').read().decode())",
            ]
        ).output.decode()
    # the agent reached neither host
    assert not agent.results["http://judge.test/v1/models"]["ok"]
    assert not agent.results["http://other.test/"]["ok"]
    # the verifier reached the judge (with the --ve model) and nothing else
    assert r.error is None and r.reward == 1.0, r
    (trial,) = (tmp_path / "jobs" / "job" / "trials").iterdir()
    grade = json.loads((trial / "steps" / "01-main" / "verifier" / "grade.json").read_text())
    assert grade["judge"] == "PASS" and grade["other"] != "reached"
    assert "seen=judge-large" in seen
    records = [
        json.loads(x) for x in (trial / "steps" / "01-main" / "network.jsonl").read_text().splitlines()
    ]
    verdicts = {(x["phase"], x["host"], x["verdict"]) for x in records}
    assert ("verifier", "judge.test", "allowed") in verdicts
    assert ("verifier", "other.test", "denied") in verdicts
    assert ("agent", "judge.test", "denied") in verdicts
    assert not any(x["verdict"] == "allowed" and x["phase"] != "verifier" for x in records)
    # spend: the judge's apart from the agent's
    step = r.steps[0]
    assert step.tokens == Tokens(prompt=1000, completion=50) and step.cost_usd == 1.0
    assert step.judge is not None and step.judge.tokens == Tokens(prompt=321, completion=12)
    assert step.judge.models == ["judge-large"] and step.judge.cost_usd == 0.25
    assert r.tokens == Tokens(prompt=1000, completion=50) and r.cost_usd == 1.0
    assert r.judge is not None and r.judge.tokens.prompt == 321 and r.judge.calls == 1
    on_disk = json.loads((trial / "result.json").read_text())
    assert on_disk["judge"]["tokens"]["prompt"] == 321 and on_disk["tokens"]["prompt"] == 1000
    # the credential is masked in what cairn wrote
    assert "sk-judge-test-123" not in (trial / "result.json").read_text()
    assert parse_probe((trial / "steps" / "01-main" / "agent" / "probe.jsonl").read_text())


@pytest.mark.docker
@pytest.mark.slow
def test_judge_cost_counts_against_max_cost_usd(tmp_path):
    from cairn.job.run import run_job
    from cairn.plan import JobConfig
    from testbed import backend_available

    if not backend_available("docker"):
        pytest.skip("no Docker engine")
    task = write_task(
        tmp_path / "tasks",
        "costly-judge",
        test='echo \'{"calls": 1, "prompt_tokens": 9, "cost_usd": 1.0}\' '
        "> /logs/verifier/judge_usage.json\n"
        "echo 1 > /logs/verifier/reward.txt\n",
    )
    result = run_job(
        JobConfig(
            paths=(task,),
            backend="docker",
            jobs_dir=tmp_path / "jobs",
            job_name="job",
            agent="nop",
            attempts=4,
            n_concurrent=1,
            max_cost_usd=1.5,
        )
    )
    outcomes = sorted((r.attempt, r.outcome.value) for r in result.results)
    assert outcomes == [(1, "completed"), (2, "completed"), (3, "cancelled"), (4, "cancelled")]
    assert result.stopped_by == "max_cost"
    assert result.summary.cost_usd is None  # the agent spent nothing
    assert result.summary.judge is not None and result.summary.judge.cost_usd == 2.0
    assert result.summary.judge.tokens.prompt == 18


@pytest.mark.local
def test_local_backend_refuses_a_judge_under_no_network(tmp_path, monkeypatch):
    from testbed import backend_available

    if not backend_available("local"):
        pytest.skip("no local backend")
    monkeypatch.setenv("CAIRN_TEST_JUDGE_KEY", "sk-judge-test-123")
    r = run_trial_sync(_judge_task(tmp_path / "tasks"), "nop", "local", tmp_path / "jobs")
    assert r.error is not None and r.error.kind.value == "config_error"
    assert "judge.test" in r.error.message and "-e docker" in r.error.message


@pytest.mark.docker
@pytest.mark.slow
def test_separate_verifier_judge_gets_the_same_opening(tmp_path, monkeypatch):
    """``environment_mode = "separate"``: the verifier's own sandbox gets the judge opening in
    its verifier phase (through its own gateway), reaches nothing else; the agent's sandbox
    never reaches the judge; the verifier sandbox's attempts are in the step's network.jsonl."""
    from nethosts import host_containers
    from testbed import backend_available

    if not backend_available("docker"):
        pytest.skip("no Docker engine")
    monkeypatch.setenv("CAIRN_TEST_JUDGE_KEY", "sk-judge-test-123")
    task = _judge_task(tmp_path / "tasks", '[verifier]\nenvironment_mode = "separate"\n\n' + JUDGE_TOML)
    with host_containers("judge.test", "other.test", server=JUDGE_SERVER) as addrs:
        agent = _TokenProbe(["http://judge.test/v1/models"])
        r = run_trial_sync(task, agent, "docker", tmp_path / "jobs", add_hosts=tuple(sorted(addrs.items())))
    assert not agent.results["http://judge.test/v1/models"]["ok"]
    assert r.error is None and r.reward == 1.0, r
    (trial,) = (tmp_path / "jobs" / "job" / "trials").iterdir()
    step_dir = trial / "steps" / "01-main"
    grade = json.loads((step_dir / "verifier" / "grade.json").read_text())
    assert grade["judge"] == "PASS" and grade["other"] != "reached"
    records = [json.loads(x) for x in (step_dir / "network.jsonl").read_text().splitlines()]
    verdicts = {(x["phase"], x["host"], x["verdict"]) for x in records}
    assert ("verifier", "judge.test", "allowed") in verdicts
    assert ("verifier", "other.test", "denied") in verdicts
    # the agent's sandbox has no network at all (no gateway: nothing of it to record)
    assert not any(x["phase"] == "agent" for x in records)
    assert r.steps[0].network is not None and r.steps[0].network.allowed >= 1
    assert r.steps[0].judge is not None and r.steps[0].judge.tokens.prompt == 321
