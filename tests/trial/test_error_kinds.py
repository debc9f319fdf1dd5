"""Every error kind end to end (issue 28, design §6): ``category_of`` over every kind and its
conditions, and for each kind a real job whose trial's result.json carries the kind, its
category and its retry behaviour (infra errors re-run up to ``max_retries`` with the earlier
attempt kept under ``attempts/``; every other category runs once).

The trials run on the ``local`` backend (fast, real namespaces); the kinds that need an engine
feature (a service, a sandbox the agent breaks) run on Docker.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cairn.errors import Category, ErrorKind, category_of
from cairn.job.run import run_job
from cairn.plan import JobConfig
from fake_openai import FakeOpenAI, error
from taskgen import StepSpec, constant_reward, write_task

# -- 1. the table: every kind, every condition ----------------------------------------------

#: kind -> (category on step 1 before the agent, step 1 after the agent, step 2 before its
#: agent, step 2 after). Written out by hand from design §6, not derived from the code.
TABLE: dict[str, tuple[str, str, str, str]] = {
    "config_error": ("task",) * 4,
    "build_failed": ("task",) * 4,
    "build_timeout": ("infra",) * 4,
    "image_not_found": ("task",) * 4,
    "start_failed": ("infra",) * 4,
    "sandbox_lost": ("infra",) * 4,
    "sandbox_unusable": ("candidate",) * 4,
    "transfer_failed": ("infra", "candidate", "infra", "candidate"),
    "env_healthcheck_failed": ("task",) * 4,
    "agent_setup_failed": ("infra",) * 4,
    "setup_failed": ("task", "task", "candidate", "candidate"),
    "healthcheck_failed": ("task", "task", "candidate", "candidate"),
    "test_missing": ("task",) * 4,
    "verifier_timeout": ("task",) * 4,
    "reward_missing": ("task",) * 4,
    "reward_empty": ("task",) * 4,
    "reward_parse_error": ("task",) * 4,
    "model_auth_failed": ("job",) * 4,
    "model_unavailable": ("infra",) * 4,
    "cancelled": ("job",) * 4,
    "oracle_replay_failed": ("task",) * 4,
    "service_exited": ("task",) * 4,
    "budget_exceeded": ("candidate",) * 4,
    "internal": ("infra",) * 4,
}


def test_the_table_names_every_kind():
    assert set(TABLE) == {k.value for k in ErrorKind}


@pytest.mark.parametrize("kind", sorted(TABLE))
def test_category_of_every_kind_and_condition(kind):
    conditions = [(1, False), (1, True), (2, False), (2, True)]
    got = tuple(category_of(ErrorKind(kind), step_index=s, after_agent=a).value for s, a in conditions)
    assert got == TABLE[kind]


def test_category_of_defaults_to_step_one_before_the_agent():
    """Without conditions a kind is judged on step 1, before any agent ran."""
    assert category_of(ErrorKind.SETUP_FAILED) is Category.TASK
    assert category_of(ErrorKind.HEALTHCHECK_FAILED) is Category.TASK
    assert category_of(ErrorKind.TRANSFER_FAILED) is Category.INFRA
    assert category_of(ErrorKind.TRANSFER_FAILED, step_index=0) is Category.INFRA


def test_category_of_takes_its_conditions_by_name_only():
    with pytest.raises(TypeError, match="positional argument"):
        category_of(ErrorKind.SETUP_FAILED, 2)  # type: ignore[misc]


def test_sandbox_errors_take_kind_and_detail_by_name_only():
    """A kind passed by position could silently land in the wrong slot: they are keyword-only."""
    from cairn.errors import SandboxError, SandboxLostError

    assert SandboxError("m").kind is ErrorKind.SANDBOX_UNUSABLE
    assert SandboxError("m", kind=ErrorKind.TRANSFER_FAILED, detail={"a": 1}).detail == {"a": 1}
    assert SandboxLostError("gone").kind is ErrorKind.SANDBOX_LOST
    with pytest.raises(TypeError, match="positional argument"):
        SandboxError("m", ErrorKind.TRANSFER_FAILED)  # type: ignore[misc]
    with pytest.raises(TypeError, match="positional argument"):
        SandboxLostError("gone", {"a": 1})  # type: ignore[misc]


# -- 2. end to end: a job per kind, result.json read back -----------------------------------

RETRIES = 1


@dataclass
class Case:
    """One kind produced by a real job: the task, how to run it, where the error lands."""

    task: dict[str, Any]
    agent: str = "oracle"
    model: str | None = None
    agent_kwargs: dict[str, Any] = field(default_factory=dict)
    step: int | None = None
    """The step (1-based) whose ``error`` carries the kind when it is a step error (the trial
    goes on or stops); ``None``: the trial's own ``error``."""
    category: str = "task"
    start_step: str | None = None
    fake_model: Any = None
    retry_passes: bool = False
    """An infra error that the retry does not meet again: the trial ends completed and the
    kind is in ``attempts/1/result.json``."""
    job: dict[str, Any] = field(default_factory=dict)
    """Extra :class:`JobConfig` fields."""
    pick: str = "test/"
    """The trial (by task-name prefix and attempt ``name#k``) whose result is checked."""


def _two_steps(
    on: int, workdir: dict[str, str], toml_extra: str = "", solve1: str = "true\n"
) -> dict[str, Any]:
    steps = [StepSpec("one", test=constant_reward(1), solve=solve1), StepSpec("two", test=constant_reward(1))]
    steps[on - 1].workdir = workdir
    steps[on - 1].toml_extra = toml_extra
    return {"steps": steps}


BLOCKED_DOCKERFILE = "FROM debian:bookworm-slim\nWORKDIR /app\nRUN cd / && rm -rf /app && touch /app\n"
BREAK_WORKDIR = "cd / && rm -rf /app && touch /app\n"
HC_FAIL = (
    '[steps.healthcheck]\ncommand = "test -f /nope"\ninterval_sec = 0.1\n'
    "start_interval_sec = 0.1\nretries = 2\n"
)

LOCAL_CASES: dict[str, Case] = {
    "reward_missing": Case({"test": "true\n"}),
    "reward_empty": Case({"test": ": > /logs/verifier/reward.txt\n"}),
    "reward_parse_error": Case({"test": "echo 1abc > /logs/verifier/reward.txt\n"}),
    "verifier_timeout": Case({"test": "sleep 60\n", "toml_extra": "[verifier]\ntimeout_sec = 1\n"}),
    "setup_failed": Case(_two_steps(1, {"setup.sh": "echo boom >&2\nexit 3\n"}), step=1),
    "setup_failed@2": Case(
        _two_steps(2, {"setup.sh": "echo boom >&2\nexit 3\n"}), step=2, category="candidate"
    ),
    "healthcheck_failed": Case(_two_steps(1, {}, HC_FAIL), step=1),
    "healthcheck_failed@2": Case(_two_steps(2, {}, HC_FAIL), step=2, category="candidate"),
    "env_healthcheck_failed": Case({"toml_extra": ""}),  # the healthcheck is added below
    "build_failed": Case({"dockerfile": "FROM debian:bookworm-slim\nRUN echo nope-7 && exit 4\n"}),
    "build_timeout": Case({"dockerfile": "FROM debian:bookworm-slim\nRUN sleep 60\n"}, category="infra"),
    "test_missing": Case(
        {
            "steps": [StepSpec("only", test=None)],
            "toml_extra": '[verifier]\nenvironment_mode = "separate"\n',
            "files": {"tests/Dockerfile": "FROM debian:bookworm-slim\n"},
        }
    ),
    # a step's files cannot be copied in (a folder stands where a file goes): before any
    # agent ran it is a failed transfer (infra, retried); after an agent ran, the agent may
    # have caused it (candidate: the local backend says sandbox_unusable, docker
    # transfer_failed, see DOCKER_CASES)
    "transfer_failed": Case(
        {
            "dockerfile": "FROM debian:bookworm-slim\nWORKDIR /app\nRUN touch sub\n",
            "steps": [StepSpec("only", workdir={"sub/in.txt": "x\n"})],
        },
        category="infra",
    ),
    "transfer_failed@2": Case(
        _two_steps(2, {"sub/in.txt": "x\n"}, solve1="touch /app/sub\n"), step=2, category="candidate"
    ),
    # the agent replaced its working directory by a file: the sandbox cannot run the
    # after-agent exec (cwd) any more, the agent's fault
    "sandbox_unusable": Case(_two_steps(2, {}, solve1=BREAK_WORKDIR), step=1, category="candidate"),
    # the sandbox's working directory cannot be made (the image left a file there)
    "start_failed": Case({"dockerfile": BLOCKED_DOCKERFILE}, category="infra"),
    "agent_setup_failed": Case({}, agent="job_agents:FlakySetupAgent", category="infra", retry_passes=True),
    # a task.toml that does not parse: the job records the task as a config_error trial
    "config_error": Case({}, pick=""),  # task.toml is broken below
    # the job's cost cap is spent by the first trial: the second is cancelled unstarted
    "cancelled": Case(
        {},
        agent="job_agents:CostlyAgent",
        category="job",
        job={"attempts": 2, "max_cost_usd": 0.5},
        pick="test/cancelled#2",
    ),
    "oracle_replay_failed": Case(
        {"steps": [StepSpec("one", test=constant_reward(0)), StepSpec("two", test=constant_reward(1))]},
        start_step="two",
        agent="nop",
    ),
    "model_unavailable": Case(
        {},
        agent="llm",
        model="openai/gpt-4o-mini",
        agent_kwargs={"model_retries": "0"},
        category="infra",
        fake_model=error(500, "upstream down"),
    ),
    "model_auth_failed": Case(
        {},
        agent="llm",
        model="openai/gpt-4o-mini",
        agent_kwargs={"model_retries": "0"},
        category="job",
        fake_model=error(401, "invalid api key"),
    ),
}


def _run(tmp_path: Path, name: str, case: Case, backend: str) -> tuple[dict, Path]:
    """Run ``case`` as a one-trial job; return its result.json and trial folder."""
    task = write_task(tmp_path / "tasks", name.replace("@", "-at-"), **case.task)
    if name == "env_healthcheck_failed":
        (task / "task.toml").write_text(
            (task / "task.toml").read_text()
            + (
                '\n[environment.healthcheck]\ncommand = "test -f /nope"\ninterval_sec = 0.1\n'
                "start_interval_sec = 0.1\nretries = 2\n"
            )
        )
    if name == "config_error":
        (task / "task.toml").write_text('[task\nname = "test/config_error"\n')
    if name == "build_timeout":
        toml = task / "task.toml"
        toml.write_text(toml.read_text().replace("[environment]\n", "[environment]\nbuild_timeout_sec = 1\n"))
    kwargs = dict(case.agent_kwargs)
    if case.agent in ("job_agents:FlakySetupAgent", "job_agents:KilledFromOutsideAgent"):
        kwargs["marker"] = str(tmp_path / "marker")
    server = None
    if case.fake_model is not None:
        server = FakeOpenAI(default=case.fake_model)
        server.__enter__()
        kwargs["api_base"] = server.url
    try:
        cfg = JobConfig(
            paths=(task,),
            backend=backend,
            jobs_dir=tmp_path / "jobs",
            job_name="job",
            agent=case.agent,
            model=case.model,
            agent_kwargs=kwargs,
            max_retries=RETRIES,
            retry_backoff_sec=0,
            n_concurrent=1,
            **({"start_step": case.start_step} if case.start_step else {}),
            **case.job,
        )
        results = run_job(cfg).results
        prefix, _, k = case.pick.partition("#")
        (r,) = [x for x in results if x.task.name.startswith(prefix) and x.attempt == int(k or 1)]
    finally:
        if server is not None:
            server.__exit__(None, None, None)
    trial = tmp_path / "jobs" / "job" / "trials" / r.trial_name
    return json.loads((trial / "result.json").read_text()), trial


def _error_of(result: dict, case: Case) -> dict | None:
    return result["error"] if case.step is None else result["steps"][case.step - 1]["error"]


def _check(result: dict, trial: Path, kind: str, case: Case) -> None:
    if case.retry_passes:
        assert result["outcome"] == "completed" and result["error"] is None
        result = json.loads((trial / "attempts" / "1" / "result.json").read_text())
    err = _error_of(result, case)
    assert err is not None, json.dumps(result)[:3000]
    assert (err["kind"], err["category"]) == (kind, case.category), err
    attempts = sorted(p.name for p in (trial / "attempts").iterdir()) if (trial / "attempts").is_dir() else []
    if case.category == "infra":  # retried on a fresh sandbox; the first attempt kept
        assert attempts == [str(n) for n in range(1, RETRIES + 1)]
        earlier = json.loads((trial / "attempts" / "1" / "result.json").read_text())
        assert (_error_of(earlier, case) or {}).get("kind") == kind
    else:  # task, candidate and job errors are never retried
        assert attempts == []
    if kind == "model_auth_failed":  # the job stops: no new trial starts
        job = json.loads((trial.parents[1] / "job.json").read_text())
        assert job["stopped_by"] == kind
    if kind == "cancelled":
        job = json.loads((trial.parents[1] / "job.json").read_text())
        assert job["stopped_by"] == "max_cost" and result["steps_run"] == 0


@pytest.mark.local
@pytest.mark.parametrize("name", sorted(LOCAL_CASES))
def test_each_kind_lands_in_result_json_with_category_and_retry(tmp_path, name, monkeypatch):
    from testbed import need_backend

    monkeypatch.setenv("OPENAI_API_KEY", "sk-cairn-test")  # the fake model's own answer decides
    need_backend("local")
    case = LOCAL_CASES[name]
    result, trial = _run(tmp_path, name, case, "local")
    _check(result, trial, name.split("@")[0], case)


DOCKER_CASES: dict[str, Case] = {
    "image_not_found": Case({"dockerfile": "FROM cairn-test-no-such-image:never\n"}),
    "service_exited": Case(
        {
            "dockerfile": "FROM debian:bookworm-slim\nWORKDIR /app\n"
            'ENTRYPOINT ["/bin/sh", "-c", "echo no data dir >&2; '
            'exit 3"]\n'
        },
        agent="nop",
    ),
    "transfer_failed@2": LOCAL_CASES["transfer_failed@2"],
    "sandbox_lost": Case({}, agent="job_agents:KilledFromOutsideAgent", category="infra", retry_passes=True),
}


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(DOCKER_CASES))
def test_each_engine_kind_lands_in_result_json_with_category_and_retry(tmp_path, name):
    from testbed import need_backend

    need_backend("docker")
    case = DOCKER_CASES[name]
    result, trial = _run(tmp_path, name, case, "docker")
    _check(result, trial, name.split("@")[0], case)


#: kinds whose end-to-end test lives beside the feature that makes them: kind -> (test file,
#: test name); that test reads the kind and its category back from result.json
ELSEWHERE: dict[str, tuple[str, str]] = {
    "budget_exceeded": (
        "tests/relay/test_relay_llm_run.py",
        "test_a_trial_token_limit_stops_at_the_crossing_call",
    ),
    "internal": (
        "tests/job/test_contain.py",
        "test_an_exception_in_each_stage_is_that_trials_error_and_the_others_score",
    ),
}


def test_every_kind_is_produced_end_to_end_and_both_transfer_categories():
    produced = {name.split("@")[0] for name in (*LOCAL_CASES, *DOCKER_CASES)}
    assert produced | set(ELSEWHERE) == {k.value for k in ErrorKind}
    root = Path(__file__).resolve().parents[2]
    for kind, (path, test) in ELSEWHERE.items():
        text = (root / path).read_text()
        body = text[text.index(f"def {test}(") :]
        body = body[: body.find("\ndef ", 1) if "\ndef " in body[1:] else len(body)]
        assert "result.json" in body and f'"{kind}"' in body and '"category"' in body, test
    transfer = {
        (c.category)
        for n, c in (*LOCAL_CASES.items(), *DOCKER_CASES.items())
        if n.startswith("transfer_failed")
    }
    assert transfer == {"infra", "candidate"}


def test_failures_keep_their_detail_and_findings_by_name():
    from cairn.errors import TaskFormatError, TrialFailure

    assert TrialFailure(ErrorKind.SETUP_FAILED, "m", detail={"exit_code": 3}).detail == {"exit_code": 3}
    assert TrialFailure(ErrorKind.SETUP_FAILED, "m").detail == {}
    with pytest.raises(TypeError, match="positional argument"):
        TrialFailure(ErrorKind.SETUP_FAILED, "m", {"exit_code": 3})  # type: ignore[misc]
    assert TaskFormatError("bad", ["finding"]).findings == ["finding"]
    assert TaskFormatError("bad").findings == []
