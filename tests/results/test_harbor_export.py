"""``cairn export --format harbor``: a real cairn job (oracle agent, local backend) written as a
Harbor 0.26 job folder.

Checked two ways: against tests/fixtures/harbor026_fields.json (Harbor 0.26's field names,
JSON types and required fields, written down from its models; runs everywhere), and, where
Harbor 0.26 is set up (``$CAIRN_HARBOR``, tests/helpers/harbor_env.py), by loading every
exported file with Harbor's own models in a subprocess (tests/helpers/harbor_validate.py) and
recomputing its JobStats.

The job: ``chain`` (three steps; the second's agent writes invalid UTF-8, NUL bytes, a file
with an undecodable name and symlinks to /etc/passwd and /), ``gated`` (stopped by
min_reward after step one), ``broken`` (single step, no reward file: errored) and ``hello``
(single step, passes), two attempts each.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cairn.errors import Category, ErrorKind, Phase
from cairn.results.harbor import (
    MARKER,
    copy_tree_safely,
    harbor_exception_type,
    harbor_pass_at_k,
    job_stats,
    portable_name,
    reward_valid,
    trial_result_doc,
)
from cairn.results.model import (
    AgentExit,
    AgentRef,
    ErrorInfo,
    Outcome,
    StepResult,
    StepSource,
    StepTimings,
    StopReason,
    TaskRef,
    Tokens,
    TrialResult,
    TrialTimings,
)
from cairncli import run_cairn
from harbor_env import require_harbor, require_harbor_python
from taskgen import StepSpec, reward_if, write_task
from testbed import local_available

FIELDS = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "harbor026_fields.json").read_text())
VALIDATE = Path(__file__).resolve().parents[1] / "helpers" / "harbor_validate.py"
SRC = Path(__file__).resolve().parents[2] / "src"

# ------------------------------------------------------------------------------------------
# The field description of Harbor 0.26 (tests/fixtures/harbor026_fields.json)

_ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?$")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _split_alts(spec: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in spec:
        if ch == "|" and depth == 0:
            out.append(cur)
            cur = ""
            continue
        depth += ch == "<"
        depth -= ch == ">"
        cur += ch
    return [*out, cur]


def _matches(value, spec: str, where: str, problems: list[str]) -> bool:
    if spec == "any":
        return True
    if spec == "null":
        return value is None
    if spec == "string":
        return isinstance(value, str)
    if spec == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if spec == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if spec == "boolean":
        return isinstance(value, bool)
    if spec == "object":
        return isinstance(value, dict)
    if spec == "datetime":
        return isinstance(value, str) and bool(_ISO.match(value))
    if spec == "uuid":
        return isinstance(value, str) and bool(_UUID.match(value))
    if spec.startswith("array<"):
        inner = _split_alts(spec[6:-1])
        return isinstance(value, list) and all(
            any(_matches(v, s, f"{where}[{i}]", problems) for s in inner) for i, v in enumerate(value)
        )
    if spec.startswith("map<"):
        inner = _split_alts(spec[4:-1])
        return isinstance(value, dict) and all(
            any(_matches(v, s, f"{where}.{k}", problems) for s in inner) for k, v in value.items()
        )
    if spec in FIELDS["models"]:
        if not isinstance(value, dict):
            return False
        sub: list[str] = []
        check_model(value, spec, where, sub)
        return not sub
    raise AssertionError(f"unknown type {spec!r} in the field description")


def check_model(doc: dict, model: str, where: str, problems: list[str]) -> None:
    """Append to ``problems`` every way ``doc`` breaks Harbor 0.26's ``model``: a required
    field missing, a value of a type the field does not take, or an undeclared key other
    than ``cairn`` (the export's namespaced extension; Harbor's models ignore extra keys)."""
    desc = FIELDS["models"][model]
    for name, f in desc["fields"].items():
        if name not in doc:
            if f["required"]:
                problems.append(f"{where}: required {model}.{name} missing")
            continue
        if not any(_matches(doc[name], s, f"{where}.{name}", problems) for s in f["type"]):
            problems.append(f"{where}.{name}: {doc[name]!r:.80} is not {f['type']}")
    for name in doc:
        if name not in desc["fields"] and name != "cairn":
            problems.append(f"{where}: {name!r} is not a field of {model}")
    assert desc["extra"] == "ignore"


def assert_model(doc: dict, model: str, where: str = "") -> None:
    problems: list[str] = []
    check_model(doc, model, where or model, problems)
    assert problems == []


def test_field_description_has_the_models_the_export_writes():
    models = FIELDS["models"]
    assert FIELDS["harbor_version"] == "0.26.0"
    assert {k for k, f in models["TrialResult"]["fields"].items() if f["required"]} == {
        "task_name",
        "trial_name",
        "trial_uri",
        "task_id",
        "task_checksum",
        "config",
        "agent_info",
    }
    assert set(models["StepResult"]["fields"]) == {
        "step_name",
        "agent_result",
        "verifier_result",
        "exception_info",
        "agent_execution",
        "verifier",
    }
    assert models["VerifierResult"]["fields"]["rewards"]["type"] == ["map<integer|number>", "null"]
    assert all(m["extra"] == "ignore" for m in models.values())


# ------------------------------------------------------------------------------------------
# Fast: values built in memory

T0 = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
T1 = datetime(2026, 12, 1, 10, 0, 30, tzinfo=UTC)


def _row(i, name, source=StepSource.VERIFIER, reward=1.0, **kw) -> StepResult:
    return StepResult(
        index=i,
        name=name,
        source=source,
        reward=reward,
        rewards={"reward": reward} if reward is not None else None,
        passed=bool(reward),
        agent_exit=kw.pop("agent_exit", AgentExit.OK),
        timings=StepTimings(agent_sec=2.0, verifier_sec=1.0),
        **kw,
    )


def _result(steps, **kw) -> TrialResult:
    base = dict(
        trial_id="ab" * 32,
        trial_name="t__1__abababab",
        task=TaskRef(name="org/t", content_hash="c" * 64),
        agent=AgentRef(name="llm", version=None),
        model="openai/gpt-4o",
        backend="docker",
        outcome=Outcome.COMPLETED,
        steps_total=len(steps),
        steps_run=len(steps),
        started_at=T0,
        finished_at=T1,
        timings=TrialTimings(environment_sec=5.0, agent_setup_sec=1.0, total_sec=30.0),
        steps=steps,
    )
    base.update(kw)
    return TrialResult(**base)


def _doc(r: TrialResult) -> dict:
    return trial_result_doc(
        r,
        None,
        trial_name=r.trial_name,
        trial_dir=Path("/x/j") / r.trial_name,
        job_uuid="6f1e4a3c-0000-4000-8000-000000000000",
        timeout_multiplier=1.0,
    )


def test_stopped_multistep_trial_maps_to_harbor_fields():
    rows = [
        _row(1, "a", reward=0.5, tokens=Tokens(prompt=100, completion=7, cached=40), cost_usd=0.25),
        _row(2, "b", StepSource.NOT_RUN, None, agent_exit=None),
    ]
    r = _result(
        rows,
        outcome=Outcome.STOPPED,
        reward=0.5,
        rewards={"reward": 0.5},
        reward_all_steps=0.25,
        steps_run=1,
        stopped_after="a",
        stop_reason=StopReason(kind="min_reward", step="a", key="reward", value=0.5, threshold=1.0),
    )
    doc = _doc(r)
    assert_model(doc, "TrialResult")
    assert doc["id"] == "abababab-abab-abab-abab-abababababab"
    assert [s["step_name"] for s in doc["step_results"]] == ["a"]  # b never ran
    step = doc["step_results"][0]
    assert step["agent_result"]["n_input_tokens"] == 100
    assert step["agent_result"]["n_cache_tokens"] == 40
    assert step["agent_result"]["n_output_tokens"] == 7
    assert step["agent_result"]["cost_usd"] == 0.25
    # durations are exact, laid end to end after environment (5 s) and agent setup (1 s)
    assert step["agent_execution"] == {
        "started_at": "2026-12-01T10:00:06Z",
        "finished_at": "2026-12-01T10:00:08Z",
    }
    assert step["verifier"]["finished_at"] == "2026-12-01T10:00:09Z"
    assert doc["agent_result"] is None and doc["agent_execution"] is None
    assert doc["verifier_result"] == {"rewards": {"reward": 0.5}}
    assert doc["agent_info"] == {
        "name": "llm",
        "version": "unknown",
        "model_info": {"name": "gpt-4o", "provider": "openai"},
    }
    c = doc["cairn"]
    assert (c["outcome"], c["reward_all_steps"], c["steps_not_run"]) == ("stopped", 0.25, ["b"])
    assert c["stop_reason"]["kind"] == "min_reward" and c["stop_reason"]["threshold"] == 1.0


def test_step_error_and_agent_timeout_become_harbor_exceptions():
    err = ErrorInfo(
        kind=ErrorKind.VERIFIER_TIMEOUT,
        category=Category.TASK,
        phase=Phase.VERIFIER,
        step="b",
        message="verifier ran past 60 s",
    )
    rows = [
        _row(1, "a", reward=1.0, agent_exit=AgentExit.TIMEOUT),
        _row(2, "b", StepSource.ERROR, None, error=err),
    ]
    doc = _doc(_result(rows, outcome=Outcome.ERRORED, error=err))
    assert_model(doc, "TrialResult")
    a, b = doc["step_results"]
    assert a["exception_info"]["exception_type"] == "AgentTimeoutError"
    assert a["verifier_result"] == {"rewards": {"reward": 1.0}}
    assert b["exception_info"]["exception_type"] == "VerifierTimeoutError"
    assert b["exception_info"]["exception_message"] == "verifier ran past 60 s"
    assert b["exception_info"]["occurred_at"] == "2026-12-01T10:00:30Z"
    assert "category=task" in b["exception_info"]["exception_traceback"]
    assert doc["exception_info"] is None  # Harbor keeps a multi-step failure on its step
    assert doc["cairn"]["error"]["category"] == "task"


def test_single_step_trial_has_no_step_results():
    err = ErrorInfo(
        kind=ErrorKind.SANDBOX_LOST,
        category=Category.INFRA,
        phase=Phase.AGENT,
        step="main",
        message="engine gone",
    )
    doc = _doc(
        _result([_row(1, "main", StepSource.ERROR, None, error=err)], outcome=Outcome.ERRORED, error=err)
    )
    assert_model(doc, "TrialResult")
    assert doc["step_results"] is None
    assert doc["exception_info"]["exception_type"] == "CairnSandboxLostError"
    assert doc["agent_execution"]["started_at"] == "2026-12-01T10:00:06Z"
    assert doc["cairn"]["step"]["source"] == "error"


def _errored_at_step_2() -> TrialResult:
    """Step 1 scored 1.0, then the engine went away in step 2 (an error name Harbor 0.26's
    policy does not know, so it would keep a trial-level reward valid)."""
    err = ErrorInfo(
        kind=ErrorKind.SANDBOX_LOST,
        category=Category.INFRA,
        phase=Phase.AGENT,
        step="b",
        message="engine gone",
    )
    rows = [_row(1, "a", reward=1.0), _row(2, "b", StepSource.ERROR, None, error=err)]
    # cairn's result.json keeps the mean of the steps that produced a result (design §5.3)
    return _result(
        rows, outcome=Outcome.ERRORED, error=err, reward=1.0, rewards={"reward": 1.0}, reward_all_steps=0.5
    )


def test_errored_multistep_trial_exports_no_valid_reward():
    r = _errored_at_step_2()
    doc = _doc(r)
    assert_model(doc, "TrialResult")
    assert doc["verifier_result"] is None  # not scored by cairn, so not by Harbor either
    a, b = doc["step_results"]
    assert a["verifier_result"] == {"rewards": {"reward": 1.0}}  # step 1's own score stays
    assert b["verifier_result"] is None
    assert b["exception_info"]["exception_type"] == "CairnSandboxLostError"
    assert (doc["cairn"]["outcome"], doc["cairn"]["reward"], doc["cairn"]["passed"]) == (
        "errored",
        1.0,
        False,
    )
    assert reward_valid(doc) is False
    ok = _doc(
        _result([_row(1, "a", reward=1.0), _row(2, "b", reward=0.0)], reward=0.5, rewards={"reward": 0.5})
    )
    stats = job_stats(
        [doc, ok],
        [r, ok_r := _result([_row(1, "a"), _row(2, "b", reward=0.0)], reward=0.5, rewards={"reward": 0.5})],
        n_running=0,
        n_retries=0,
    )
    assert ok_r.outcome is Outcome.COMPLETED and reward_valid(ok) is True
    ev = stats["evals"]["llm__gpt-4o__adhoc"]
    # Harbor's mean over valid rewards: the completed trial's 0.5 alone, not (1.0 + 0.5) / 2
    assert (ev["n_trials"], ev["n_errors"], ev["metrics"]) == (1, 1, [{"mean": 0.5}])


def test_harbor_itself_finds_no_valid_reward_on_an_errored_trial(tmp_path):
    harbor_py = require_harbor_python()
    (tmp_path / "result.json").write_text(json.dumps(_doc(_errored_at_step_2())))
    code = (
        "import sys, json; from harbor.models.trial.result import TrialResult; "
        "t = TrialResult.model_validate_json(open(sys.argv[1]).read()); "
        "print(json.dumps([t.reward_valid, t.verifier_result, "
        "[s.verifier_result.rewards if s.verifier_result else None "
        "for s in t.step_results]]))"
    )
    p = subprocess.run(
        [str(harbor_py), "-c", code, str(tmp_path / "result.json")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PATH": os.environ.get("PATH", ""), "HARBOR_TELEMETRY": "0", "HOME": str(tmp_path)},
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout.strip().splitlines()[-1]) == [False, None, [{"reward": 1.0}, None]]


def test_portable_name():
    assert portable_name("ok-ünïcode") == "ok-ünïcode"
    assert portable_name(os.fsdecode(b"a\xffb\xc3")) == "a%FFb%C3"
    assert portable_name(os.fsdecode(b"\xc3\xa9\xe9")) == "é%E9"


def test_exception_names():
    assert harbor_exception_type(ErrorKind.REWARD_MISSING) == "RewardFileNotFoundError"
    assert harbor_exception_type(ErrorKind.BUILD_FAILED) == "SandboxBuildFailedError"
    assert harbor_exception_type(ErrorKind.CANCELLED) == "CancelledError"
    assert harbor_exception_type(ErrorKind.ORACLE_REPLAY_FAILED) == "CairnOracleReplayFailedError"


def test_pass_at_k_as_harbor_counts_it():
    # task x: 1 of 4 passed; task y: 4 of 4. pass@2 for x = 1 - C(3,2)/C(4,2) = 0.5
    trials = [("x", {"reward": v}) for v in (1, 0, 0, 0)] + [("y", {"reward": 1})] * 4
    assert harbor_pass_at_k(trials) == {"2": 0.75, "4": 1.0}
    assert harbor_pass_at_k([("x", {"reward": 0.5})] * 2) == {}  # not binary
    assert harbor_pass_at_k([("x", {"a": 1, "b": 0})] * 2) == {}  # two keys


def test_copy_never_follows_links_and_keeps_bytes(tmp_path):
    src = tmp_path / "agent"
    (src / "sub").mkdir(parents=True)
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    (src / "bytes.bin").write_bytes(b"\xff\xfe\x00 \xc3\x28 bad utf-8")
    odd = os.fsdecode(b"name-\xff")
    (src / odd).write_bytes(b"x")
    (src / "link").symlink_to(secret)
    (src / "dirlink").symlink_to(tmp_path)
    (src / "sub" / "ok.txt").write_text("fine")
    (src / "name-%FF").write_bytes(b"taken")
    os.mkfifo(src / "fifo")
    skipped: list[str] = []
    renamed: list[str] = []
    copy_tree_safely(src, tmp_path / "out", skipped, "agent", renamed)
    out = tmp_path / "out"
    assert (out / "bytes.bin").read_bytes() == b"\xff\xfe\x00 \xc3\x28 bad utf-8"
    assert (out / "name-%FF").read_bytes() == b"taken"
    assert (out / "name-%FF~2").read_bytes() == b"x"  # the undecodable name, renamed
    assert renamed == ["agent/name-\\xff -> name-%FF~2"]
    assert (out / "sub" / "ok.txt").read_text() == "fine"
    assert sorted(os.listdir(out)) == ["bytes.bin", "name-%FF", "name-%FF~2", "sub"]
    assert skipped == ["agent/dirlink: symlink", "agent/fifo: not a regular file", "agent/link: symlink"]
    skipped.clear()
    copy_tree_safely(src / "dirlink", tmp_path / "out2", skipped, "agent/dirlink")
    assert skipped == ["agent/dirlink: symlink"] and not (tmp_path / "out2").exists()


# ------------------------------------------------------------------------------------------
# A real job


HOSTILE = (
    r"printf 'bad \xff\xfe utf8\n'; printf 'raw \xc3\x28 \x00 nul' > /logs/agent/bytes.bin"
    "\nln -s /etc/passwd /logs/agent/passwd-link; ln -s / /logs/agent/root-link\n"
    r"""printf 'x' > "/logs/agent/$(printf 'name-\xff')"; echo more >> /app/a.txt"""
    "\n"
)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(SRC), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def _cairn(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return run_cairn(*args, env=_env(), timeout=timeout)


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    if not local_available():
        pytest.skip("the local backend cannot run here")
    root = tmp_path_factory.mktemp("harbor-export")
    tasks = root / "tasks"
    write_task(
        tasks,
        "chain",
        steps=[
            StepSpec("write", solve="echo hi > /app/a.txt\n", test=reward_if("test -f /app/a.txt")),
            StepSpec("append", solve=HOSTILE, test=reward_if("grep -q more /app/a.txt")),
            StepSpec("last", test="echo 0 > /logs/verifier/reward.txt\n"),
        ],
    )
    write_task(
        tasks,
        "gated",
        steps=[
            StepSpec("first", test="echo 0.5 > /logs/verifier/reward.txt\n", min_reward=1.0),
            StepSpec("second"),
        ],
    )
    write_task(tasks, "broken", test="echo no reward written\n")
    write_task(tasks, "hello", solve="echo hello\n")
    p = _cairn(
        "run",
        "-p",
        str(tasks),
        "-a",
        "oracle",
        "-e",
        "local",
        "-k",
        "2",
        "--jobs-dir",
        str(root / "jobs"),
        "--job-name",
        "j",
    )
    assert p.returncode in (0, 1), p.stdout + p.stderr
    return root / "jobs" / "j"


@pytest.fixture(scope="module")
def exported(job) -> tuple[Path, str]:
    out = job.parent.parent / "harbor" / "j"
    p = _cairn("export", str(job), "--format", "harbor", "-o", str(out))
    assert p.returncode == 0, p.stderr
    return out, p.stderr


def _trial(out: Path, task: str, attempt: int = 1) -> Path:
    [d] = out.glob(f"test-{task}__{attempt}__*")
    return d


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.mark.local
def test_every_file_has_harbor_026_fields(exported):
    out, _ = exported
    assert_model(_load(out / "result.json"), "JobResult")
    assert_model(_load(out / "config.json"), "JobConfig")
    trials = sorted(p for p in out.iterdir() if p.is_dir())
    assert len(trials) == 8
    for d in trials:
        assert_model(_load(d / "result.json"), "TrialResult", d.name)
        assert_model(_load(d / "config.json"), "TrialConfig", d.name)
        for m in d.rglob("artifacts/manifest.json"):
            for row in _load(m):
                assert_model(row, "ArtifactManifestEntry", str(m))


@pytest.mark.local
def test_multistep_and_multi_attempt_layout(exported):
    out, _ = exported
    job = _load(out / "result.json")
    assert job["n_total_trials"] == 8 and job["finished_at"] is not None
    assert job["stats"]["n_completed_trials"] == 8 and job["stats"]["n_errored_trials"] == 2
    ev = job["stats"]["evals"]["oracle__adhoc"]
    assert ev["n_trials"] == 6 and ev["n_errors"] == 2
    assert ev["metrics"] == [{"mean": pytest.approx((2 / 3 * 2 + 0.5 * 2 + 1.0 * 2) / 6)}]
    assert sorted(ev["reward_stats"]["reward"]) == ["0.5", "0.6666666666666666", "1.0"]
    for attempt in (1, 2):
        chain = _trial(out, "chain", attempt)
        doc = _load(chain / "result.json")
        assert doc["cairn"]["attempt"] == attempt
        assert [(s["step_name"], s["verifier_result"]) for s in doc["step_results"]] == [
            ("write", {"rewards": {"reward": 1.0}}),
            ("append", {"rewards": {"reward": 1.0}}),
            ("last", {"rewards": {"reward": 0.0}}),
        ]
        assert doc["verifier_result"]["rewards"]["reward"] == pytest.approx(2 / 3)
        for step in ("write", "append", "last"):
            assert (chain / "steps" / step / "verifier" / "reward.txt").is_file()
            assert (chain / "steps" / step / "verifier" / "test-stdout.txt").is_file()
            assert (chain / "steps" / step / "agent" / "solve-stdout.txt").is_file()
        assert not (chain / "agent").exists()
        assert (chain / "trial.log").is_file()
    assert _trial(out, "chain", 1).name != _trial(out, "chain", 2).name
    gated = _load(_trial(out, "gated") / "result.json")
    assert [s["step_name"] for s in gated["step_results"]] == ["first"]
    assert gated["cairn"]["outcome"] == "stopped"
    assert gated["cairn"]["stop_reason"]["kind"] == "min_reward"
    assert gated["cairn"]["steps_not_run"] == ["second"]
    hello = _trial(out, "hello")
    doc = _load(hello / "result.json")
    assert doc["step_results"] is None and doc["verifier_result"] == {"rewards": {"reward": 1.0}}
    assert (hello / "verifier" / "reward.txt").read_text().strip() == "1"
    assert (hello / "agent" / "solve-stdout.txt").read_text() == "hello\n"
    assert (hello / "agent" / "oracle.txt").read_text() == "hello\n"  # Harbor's oracle log
    cfg = _load(out / "config.json")
    assert cfg["n_attempts"] == 2 and cfg["agents"][0]["name"] == "oracle"
    assert len(cfg["tasks"]) == 4
    assert (out / MARKER).is_file() and (out / "job.log").is_file()


@pytest.mark.local
def test_failed_trial_has_exception_info(exported):
    out, _ = exported
    broken = _trial(out, "broken")
    doc = _load(broken / "result.json")
    exc = doc["exception_info"]
    assert exc["exception_type"] == "RewardFileNotFoundError"
    assert "reward" in exc["exception_message"]
    assert "kind=reward_missing category=task" in exc["exception_traceback"]
    assert doc["verifier_result"] is None
    assert doc["cairn"]["error"]["kind"] == "reward_missing"
    assert (broken / "exception.txt").read_text().startswith("RewardFileNotFoundError: ")
    ev = _load(out / "result.json")["stats"]["evals"]["oracle__adhoc"]
    assert sorted(ev["exception_stats"]["RewardFileNotFoundError"]) == sorted(
        [_trial(out, "broken", 1).name, _trial(out, "broken", 2).name]
    )


@pytest.mark.local
def test_hostile_agent_output_copied_byte_for_byte_and_links_left(job, exported):
    out, stderr = exported
    [src] = (job / "trials").glob("test-chain__1__*")
    agent_src = src / "steps" / "02-append" / "agent"
    agent = _trial(out, "chain") / "steps" / "append" / "agent"
    assert (agent / "bytes.bin").read_bytes() == b"raw \xc3\x28 \x00 nul"
    assert (agent / "bytes.bin").read_bytes() == (agent_src / "bytes.bin").read_bytes()
    # cairn stored the agent's stdout with U+FFFD for the bad bytes; the export keeps it as is
    assert (
        (agent / "solve-stdout.txt").read_bytes()
        == (agent_src / "solve-stdout.txt").read_bytes()
        == "bad \ufffd\ufffd utf8\n".encode()
    )
    assert (agent_src / os.fsdecode(b"name-\xff")).read_bytes() == b"x"
    assert (agent / "name-%FF").read_bytes() == b"x"  # renamed: Harbor's tools need UTF-8
    assert not (agent / os.fsdecode(b"name-\xff")).exists()
    assert (agent_src / "passwd-link").is_symlink()  # the agent did make them
    assert not (agent / "passwd-link").exists() and not (agent / "passwd-link").is_symlink()
    assert not (agent / "root-link").exists() and not (agent / "root-link").is_symlink()
    for dirpath, dirnames, filenames in os.walk(out):
        for n in dirnames + filenames:
            assert not os.path.islink(os.path.join(dirpath, n))
    assert f"{src.name}/steps/02-append/agent/passwd-link: symlink" in stderr
    job_doc = _load(out / "result.json")["cairn"]
    assert len(job_doc["skipped_files"]) == 4
    assert all(s.endswith(": symlink") for s in job_doc["skipped_files"])
    assert len(job_doc["renamed_files"]) == 2
    assert all(s.endswith("/steps/02-append/agent/name-\\xff -> name-%FF") for s in job_doc["renamed_files"])


@pytest.mark.local
def test_output_folder_rules_lose_nothing(job, exported, tmp_path):
    out, _ = exported
    p = _cairn("export", str(job), "--format", "harbor", "-o", str(out))
    assert p.returncode == 2 and "--force" in p.stderr
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    p = _cairn("export", str(job), "--format", "harbor", "-o", str(mine), "--force")
    assert p.returncode == 2 and "not a cairn Harbor export" in p.stderr
    assert os.listdir(mine) == ["notes.txt"] and (mine / "notes.txt").read_text() == "keep me"
    p = _cairn("export", str(job), "--format", "harbor", "-o", str(job / "inside"))
    assert p.returncode == 2 and "overlaps" in p.stderr and not (job / "inside").exists()
    p = _cairn("export", str(job), "--format", "harbor")
    assert p.returncode == 2 and "-o DIR" in p.stderr
    again = tmp_path / "again"
    shutil.copytree(out, again)
    (again / "stale.txt").write_text("from the earlier export")
    p = _cairn("export", str(job), "--format", "harbor", "-o", str(again), "--force")
    assert p.returncode == 0, p.stderr
    assert "replaced the earlier export" in p.stderr and not (again / "stale.txt").exists()
    assert len([d for d in again.iterdir() if d.is_dir()]) == 8
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@pytest.mark.local
def test_output_folder_through_a_symlink_is_that_folder(job, exported, tmp_path):
    """-o LINK to an empty folder writes the export into the folder (the link stays a link,
    the job is named by the folder); a link to a file, or a dangling one, is refused."""
    out, _ = exported
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to("real")
    p = _cairn("export", str(job), "--format", "harbor", "-o", str(tmp_path / "link"))
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "link").is_symlink() and os.readlink(tmp_path / "link") == "real"
    assert sorted(p.name for p in real.iterdir()) == sorted(p.name for p in out.iterdir())
    assert _load(real / "config.json")["job_name"] == "real"
    assert _load(real / "config.json")["jobs_dir"] == str(tmp_path)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    # the link again: an earlier export there, replaced with --force (through the link)
    p = _cairn("export", str(job), "--format", "harbor", "-o", str(tmp_path / "link"), "--force")
    assert p.returncode == 0 and "replaced the earlier export" in p.stderr, p.stderr
    assert (tmp_path / "link").is_symlink() and (real / "config.json").is_file()
    (tmp_path / "file").write_text("keep me")
    (tmp_path / "to-file").symlink_to("file")
    (tmp_path / "dangling").symlink_to("nowhere")
    for name, message in (
        ("to-file", "exists and is not a folder (a symlink to the file file)"),
        ("dangling", "is a dangling symlink (its target nowhere does not exist); choose another -o"),
    ):
        p = _cairn("export", str(job), "--format", "harbor", "-o", str(tmp_path / name))
        assert p.returncode == 2, p.stderr
        assert p.stderr.strip() == f"cairn: error: {tmp_path / name} {message}"
    assert (tmp_path / "file").read_text() == "keep me" and not (tmp_path / "nowhere").exists()


@pytest.mark.local
def test_running_job_refused_or_exported_partially(job, tmp_path):
    from cairn.lock import JobLock

    copy = tmp_path / "jobs" / "j"
    shutil.copytree(job, copy, symlinks=True)
    [unfinished] = (copy / "trials").glob("test-hello__2__*")
    (unfinished / "result.json").unlink()
    lock = JobLock(copy)
    lock.acquire()
    try:
        p = _cairn("export", str(copy), "--format", "harbor", "-o", str(tmp_path / "h"))
        assert p.returncode == 2 and "is running" in p.stderr and "--partial" in p.stderr
        assert not (tmp_path / "h").exists()
        p = _cairn("export", str(copy), "--format", "harbor", "-o", str(tmp_path / "h"), "--partial")
    finally:
        lock.release()
    assert p.returncode == 0, p.stderr
    assert f"left out 1 still running trial(s): {unfinished.name}" in p.stderr
    doc = _load(tmp_path / "h" / "result.json")
    assert doc["finished_at"] is None and doc["n_total_trials"] == 8
    assert doc["stats"]["n_running_trials"] == 1 and doc["stats"]["n_completed_trials"] == 7
    assert doc["cairn"]["unfinished_trials"] == [unfinished.name]
    assert not (tmp_path / "h" / unfinished.name).exists()


@pytest.mark.local
def test_harbor_026_models_load_the_export(exported):
    out, _ = exported
    p = subprocess.run(
        [str(require_harbor_python()), str(VALIDATE), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={
            "PATH": os.environ.get("PATH", ""),
            "HARBOR_TELEMETRY": "0",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "HOME": str(out.parent),
        },
    )
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["harbor_version"].startswith("0.26")
    n_manifests = sum(1 for _ in out.rglob("artifacts/manifest.json"))
    assert len(got["checked"]) == 2 + 8 * 2 + n_manifests
    ours = _load(out / "result.json")["stats"]
    theirs = got["stats_recomputed"]
    for key in (
        "n_completed_trials",
        "n_errored_trials",
        "n_cancelled_trials",
        "n_retries",
        "n_input_tokens",
        "n_output_tokens",
        "cost_usd",
    ):
        assert theirs[key] == ours[key], key
    for name, ev in theirs["evals"].items():
        for key in ("n_trials", "n_errors", "reward_stats", "exception_stats", "pass_at_k"):
            assert ev[key] == ours["evals"][name][key], (name, key)
    by_name = {t["trial_name"]: t for t in got["trials"]}
    assert {n: t["reward_valid"] for n, t in by_name.items() if "broken" in n} == {
        n: False for n in by_name if "broken" in n
    }
    chain = by_name[_trial(out, "chain").name]
    assert [s["step_name"] for s in chain["step_results"]] == ["write", "append", "last"]
    assert chain["reward_valid"] is True


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.local
def test_harbor_viewer_reads_the_export(exported, tmp_path):
    """Harbor's own job browser (``harbor view``, on loopback) lists the exported job, its
    trials with their rewards and errors, and a trial's files."""
    import time
    import urllib.request

    harbor = require_harbor()
    out, _ = exported
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    shutil.copytree(out, jobs / out.name)
    port = _free_port()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HARBOR_TELEMETRY": "0",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "HOME": str(tmp_path),
    }
    log = tmp_path / "view.log"
    proc = subprocess.Popen(
        [str(harbor), "view", str(jobs), "--jobs", "--port", str(port), "--no-build"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(logf := log.open("wb")),
    )

    def get(path: str):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return json.loads(r.read())

    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                get("/api/health")
                break
            except OSError:
                assert proc.poll() is None, log.read_text(errors="replace")[-2000:]
                assert time.monotonic() < deadline, "harbor view did not answer in 90 s"
                time.sleep(0.5)
        [job] = get("/api/jobs")["items"]
        assert (job["name"], job["n_total_trials"], job["n_errored_trials"]) == ("j", 8, 2)
        assert job["agents"] == ["oracle"]
        trials = {t["name"]: t for t in get("/api/jobs/j/trials")["items"]}
        assert len(trials) == 8
        broken = trials[_trial(out, "broken").name]
        assert (broken["reward"], broken["error_type"]) == (None, "RewardFileNotFoundError")
        assert trials[_trial(out, "chain").name]["reward"] == pytest.approx(2 / 3)
        chain = _trial(out, "chain").name
        files = get(f"/api/jobs/j/trials/{chain}/files?step=append")
        assert "name-%FF" in json.dumps(files)
        hello = _trial(out, "hello").name
        assert get(f"/api/jobs/j/trials/{hello}/agent-logs")["oracle"] == "hello\n"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        logf.close()


@pytest.mark.local
def test_infra_retries_counted_as_harbor_retries(job, tmp_path):
    copy = tmp_path / "jobs" / "j"
    shutil.copytree(job, copy, symlinks=True)
    [trial] = (copy / "trials").glob("test-hello__1__*")
    (trial / "attempts" / "1").mkdir(parents=True)
    (trial / "attempts" / "1" / "trial.log").write_text("sandbox lost\n")
    p = _cairn("export", str(copy), "--format", "harbor", "-o", str(tmp_path / "h"))
    assert p.returncode == 0, p.stderr
    assert _load(tmp_path / "h" / "result.json")["stats"]["n_retries"] == 1
    assert _load(_trial(tmp_path / "h", "hello") / "result.json")["cairn"]["earlier_attempts"] == 1
    assert not (_trial(tmp_path / "h", "hello") / "attempts").exists()


@pytest.mark.local
def test_superseded_trials_are_not_counted_as_retries(job, tmp_path):
    """A resume after the task changed moves the old trial folder (another trial id) under the
    new trial's attempts/ (design §8): that is not a retry. An attempt of this trial id is."""
    copy = tmp_path / "jobs" / "j"
    shutil.copytree(job, copy, symlinks=True)
    [trial] = (copy / "trials").glob("test-hello__1__*")
    own = _load(trial / "result.json")
    for n, tid in ((1, "0" * 64), (2, own["trial_id"])):
        (trial / "attempts" / str(n)).mkdir(parents=True)
        (trial / "attempts" / str(n) / "result.json").write_text(json.dumps({**own, "trial_id": tid}))
    p = _cairn("export", str(copy), "--format", "harbor", "-o", str(tmp_path / "h"))
    assert p.returncode == 0, p.stderr
    assert _load(tmp_path / "h" / "result.json")["stats"]["n_retries"] == 1
    assert _load(_trial(tmp_path / "h", "hello") / "result.json")["cairn"]["earlier_attempts"] == 1


@pytest.mark.local
def test_export_folders_and_files_follow_the_umask(exported, tmp_path, job):
    out, _ = exported
    mask = os.umask(0)
    os.umask(mask)
    dirs = [out, *(d for d in out.rglob("*") if d.is_dir() and not d.is_symlink())]
    files = [f for f in out.rglob("*") if f.is_file() and not f.is_symlink()]
    assert len(dirs) > 10 and len(files) > 10
    assert {oct(stat.S_IMODE(d.stat().st_mode)) for d in dirs} == {oct(0o777 & ~mask)}
    assert {oct(stat.S_IMODE(f.stat().st_mode)) for f in files} == {oct(0o666 & ~mask)}
    # a group-writable umask gives a group-writable export (the mode is the umask's, not fixed)
    shared = tmp_path / "shared"
    p = run_cairn("export", str(job), "--format", "harbor", "-o", str(shared), env=_env(), umask=0o002)
    assert p.returncode == 0, p.stderr
    assert oct(stat.S_IMODE(shared.stat().st_mode)) == oct(0o775)
    assert oct(stat.S_IMODE((shared / "result.json").stat().st_mode)) == oct(0o664)
    assert not list(tmp_path.glob(".shared.*"))  # the temporary folder was renamed into place


@pytest.mark.local
def test_errored_multistep_job_exports_the_error_not_a_reward(tmp_path):
    if not local_available():
        pytest.skip("the local backend cannot run here")
    write_task(
        tmp_path / "tasks",
        "two",
        steps=[StepSpec("one"), StepSpec("two", test="echo the verifier forgot the reward\n")],
    )
    p = _cairn(
        "run",
        "-p",
        str(tmp_path / "tasks"),
        "-e",
        "local",
        "-r",
        "0",
        "--jobs-dir",
        str(tmp_path / "jobs"),
        "--job-name",
        "e",
    )
    assert p.returncode == 1, p.stdout + p.stderr
    assert "ERRORED at step 2/2 two: reward_missing" in p.stdout + p.stderr
    [res] = (tmp_path / "jobs" / "e" / "trials").glob("*/result.json")
    r = _load(res)
    # cairn's own record: errored, not passed; reward is the mean of the steps with a result
    assert (r["outcome"], r["passed"], r["reward"], r["reward_all_steps"]) == ("errored", False, 1.0, 0.5)
    summary = _load(tmp_path / "jobs" / "e" / "summary.json")
    assert (summary["n_scored"], summary["mean_reward"], summary["mean_reward_errors_as_zero"]) == (
        0,
        None,
        0.0,
    )
    p = _cairn("export", str(tmp_path / "jobs" / "e"), "--format", "harbor", "-o", str(tmp_path / "h"))
    assert p.returncode == 0, p.stderr
    doc = _load(_trial(tmp_path / "h", "two") / "result.json")
    assert doc["verifier_result"] is None
    assert [
        (s["step_name"], s["verifier_result"], (s["exception_info"] or {}).get("exception_type"))
        for s in doc["step_results"]
    ] == [("one", {"rewards": {"reward": 1.0}}, None), ("two", None, "RewardFileNotFoundError")]
    assert (doc["cairn"]["outcome"], doc["cairn"]["error"]["kind"]) == ("errored", "reward_missing")
    ev = _load(tmp_path / "h" / "result.json")["stats"]["evals"]["oracle__adhoc"]
    assert (ev["n_trials"], ev["n_errors"], ev["metrics"]) == (0, 1, [])
