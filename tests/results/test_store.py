"""Results on disk (design §7): names, folders, atomic strict JSON, masking, attempts, reading back."""

from __future__ import annotations

import json
import stat
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cairn.errors import Category, ErrorKind, Phase
from cairn.results.model import (
    AgentRef,
    ErrorInfo,
    JobSummary,
    Outcome,
    StepResult,
    TaskRef,
    TrialResult,
)
from cairn.results.store import (
    JobPaths,
    Masker,
    TrialPaths,
    TrialStore,
    iter_trial_results,
    move_attempt_aside,
    read_json,
    read_result,
    read_steps,
    read_summary,
    step_dir_name,
    task_slug,
    trial_dir_name,
    write_job_json,
    write_json_atomic,
    write_summary,
)
from cairn.results.summary import summarize_job

TRIAL_ID = "3FA85F64-5717-4562-b3fc-2c963f66afa6"
T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def result(task: str = "two-steps", message: str = "", trial_id: str = TRIAL_ID) -> TrialResult:
    steps = [
        StepResult(
            index=1,
            name="write",
            source="verifier",
            rewards={"reward": 1.0},
            reward=1.0,
            passed=True,
            agent_exit="ok",
            verifier_exit_code=0,
            reward_file="reward.txt",
        ),
        StepResult(
            index=2,
            name="append",
            source="error",
            agent_exit="ok",
            error=ErrorInfo(
                kind=ErrorKind.REWARD_MISSING,
                category=Category.TASK,
                phase=Phase.VERIFIER,
                step="append",
                message=message,
            ),
        ),
    ]
    return TrialResult(
        trial_id=trial_id,
        trial_name="x",
        task=TaskRef(name=task, content_hash="abc"),
        agent=AgentRef(name="oracle"),
        backend="docker",
        outcome=Outcome.ERRORED,
        error=steps[1].error,
        steps_total=2,
        steps_run=2,
        started_at=T0,
        finished_at=T0,
        steps=steps,
    )


# ------------------------------------------------------------------------------ strict JSON


def test_write_json_atomic_models_nested_and_mode(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    write_json_atomic(
        path, {"steps": [StepResult(index=1, name="a", source="not-run")], "p": tmp_path, "t": (1, 2)}
    )
    data = json.loads(path.read_text())
    assert data["steps"][0]["source"] == "not-run" and data["t"] == [1, 2]
    assert data["p"] == str(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert path.read_text().endswith("\n")
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]  # no temp file left


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_write_json_atomic_refuses_non_finite_and_keeps_old_content(tmp_path: Path, bad) -> None:
    path = tmp_path / "x.json"
    write_json_atomic(path, {"reward": 1.0})
    with pytest.raises(ValueError, match=f"{bad}$"):
        write_json_atomic(path, {"reward": bad})
    assert read_json(path) == {"reward": 1.0}
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]


def test_write_json_atomic_refuses_unserializable(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="type object"):
        write_json_atomic(tmp_path / "x.json", {"a": object()})
    assert list(tmp_path.iterdir()) == []


def test_models_refuse_nan_before_anything_is_written() -> None:
    with pytest.raises(ValueError, match="rewards.reward"):
        StepResult(index=1, name="a", source="verifier", rewards={"reward": float("nan")})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": NaN}', "^NaN is not valid JSON$"),
        ('{"a": Infinity}', "^Infinity is not valid JSON$"),
        ("[-Infinity]", "^-Infinity is not valid JSON$"),
        ("[1e400]", "^number 1e400 overflows a float$"),
        ("{", r"line 1 column 2 \(char 1\)$"),
        ("", r"line 1 column 1 \(char 0\)$"),
    ],
)
def test_read_json_is_strict(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "x.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        read_json(path)


def test_readers_never_see_a_partial_file(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    big = {"values": list(range(20_000))}
    write_json_atomic(path, big)
    stop = threading.Event()
    errors: list[Exception] = []

    def writer() -> None:
        i = 0
        while not stop.is_set():
            write_json_atomic(path, {**big, "i": i})
            i += 1

    t = threading.Thread(target=writer)
    t.start()
    try:
        for _ in range(200):
            try:
                assert read_json(path)["values"][-1] == 19_999
            except Exception as exc:  # noqa: BLE001 - collected and asserted below
                errors.append(exc)
    finally:
        stop.set()
        t.join()
    assert errors == []


# ------------------------------------------------------------------------------ names, paths


@pytest.mark.parametrize(
    ("name", "slug"),
    [
        ("two-steps", "two-steps"),
        ("org/two steps", "org-two-steps"),
        ("a.b_c-9", "a.b_c-9"),
        ("ünï", "-n-"),
        ("a:b@c", "a-b-c"),
    ],
)
def test_task_slug(name: str, slug: str) -> None:
    assert task_slug(name) == slug


def test_trial_dir_name() -> None:
    assert trial_dir_name("two-steps", 1, TRIAL_ID) == "two-steps__1__3fa85f64"
    assert trial_dir_name("org/two steps", 12, "deadbeefcafe") == "org-two-steps__12__deadbeef"
    with pytest.raises(ValueError, match="attempt is 1-based, got 0"):
        trial_dir_name("t", 0, TRIAL_ID)
    with pytest.raises(ValueError, match="fewer than 8 hex digits"):
        trial_dir_name("t", 1, "abc-123")


def test_step_dir_name() -> None:
    assert step_dir_name(1, "main") == "01-main"
    assert step_dir_name(10, "zeta") == "10-zeta"
    assert step_dir_name(100, "x") == "100-x"


def test_step_dir_name_does_not_double_the_steps_own_number() -> None:
    assert step_dir_name(19, "19-recall") == "19-recall"
    assert step_dir_name(1, "1_setup") == "01_setup"
    assert step_dir_name(2, "02.check") == "02.check"
    assert step_dir_name(1, "3-three") == "01-3-three"  # another number: prefixed
    assert step_dir_name(5, "5") == "05-5"  # a bare number has no name part to keep


def test_old_doubled_step_folders_are_still_found(tmp_path: Path) -> None:
    trial = JobPaths(tmp_path / "job").trial("org/t", 1, TRIAL_ID)
    old = trial.steps_dir / "19-19-recall"
    (old / "verifier").mkdir(parents=True)
    assert trial.step(19, "19-recall").root == old  # a job folder written before the fold
    assert trial.step(20, "20-next").root == trial.steps_dir / "20-next"


def test_layout_names(tmp_path: Path) -> None:
    job = JobPaths(tmp_path / "jobs" / "2026-01-01__12-00-00")
    assert [p.name for p in (job.job_json, job.summary_json, job.job_log, job.lock)] == [
        "job.json",
        "summary.json",
        "job.log",
        "lock",
    ]
    trial = job.trial("org/two", 2, TRIAL_ID)
    assert trial.root == job.root / "trials" / "org-two__2__3fa85f64"
    assert [p.name for p in (trial.config_json, trial.result_json, trial.steps_json, trial.trial_log)] == [
        "config.json",
        "result.json",
        "steps.json",
        "trial.log",
    ]
    step = trial.step(1, "write")
    assert step.root == trial.root / "steps" / "01-write"
    assert (step.agent.name, step.verifier.name, step.artifacts.name) == ("agent", "verifier", "artifacts")
    assert trial.attempt(3) == trial.root / "attempts" / "3"
    assert job.trial_dirs() == []


# ------------------------------------------------------------------------------ TrialStore


@pytest.mark.writes_invalid_results  # a partial config.json, written through the dict path
def test_trial_store_writes_every_file(tmp_path: Path) -> None:
    job = JobPaths(tmp_path / "job")
    store = TrialStore(job.trial("two-steps", 1, TRIAL_ID)).create()
    sp = store.step_dirs(1, "write")
    assert sp.agent.is_dir() and sp.verifier.is_dir() and sp.artifacts.is_dir()

    store.write_config({"task": {"name": "two-steps"}, "backend": "docker"})
    assert read_json(store.paths.config_json) == {
        "schema_version": "1.0",
        "task": {"name": "two-steps"},
        "backend": "docker",
    }
    rows = [
        StepResult(index=1, name="write", source="not-run"),
        StepResult(index=2, name="append", source="not-run"),
    ]
    store.write_steps(rows)
    assert read_steps(store.paths.steps_json).steps == rows
    assert not store.paths.finished

    r = result()
    store.write_result(r)
    assert store.paths.finished
    assert read_result(store.paths.result_json) == r
    assert read_steps(store.paths.steps_json).steps == r.steps  # steps.json agrees
    raw = read_json(store.paths.result_json)
    assert raw["schema_version"] == "1.0" and raw["steps"][1]["source"] == "error"


def test_trial_store_masks_text_logs_and_json(tmp_path: Path) -> None:
    secret = "sk-live-1234567890"
    store = TrialStore(TrialPaths(tmp_path / "t"), Masker([secret])).create()
    sp = store.step_dirs(1, "main")
    store.append_log(f"resolved env TOKEN={secret}")
    store.append_log("second line\n")
    out = store.write_text("steps/01-main/verifier/test-stdout.txt", f"echo {secret}\n")
    store.write_text(sp.verifier / "test-stderr.txt", f"err {secret}".encode())
    store.write_result(result(message=f"stderr tail: {secret}"))
    (sp.agent / "trajectory.json").write_text(json.dumps({"msg": secret}))
    (sp.artifacts / "dump.txt").write_text(secret)

    warnings = store.mask_files()

    assert store.paths.trial_log.read_text() == "resolved env TOKEN=***\nsecond line\n"
    assert out.read_text() == "echo ***\n"
    assert (sp.verifier / "test-stderr.txt").read_text() == "err ***"
    assert read_result(store.paths.result_json).steps[1].error.message == "stderr tail: ***"
    assert json.loads((sp.agent / "trajectory.json").read_text()) == {"msg": "***"}
    assert (sp.artifacts / "dump.txt").read_text() == secret  # artifacts as they are
    assert warnings == [
        "artifact steps/01-main/artifacts/dump.txt contains a secret value (kept as collected)"
    ]
    leaked = [
        p
        for p in tmp_path.rglob("*")
        if p.is_file() and "artifacts" not in p.parts and secret in p.read_text(errors="replace")
    ]
    assert leaked == []


def test_trial_store_refuses_paths_outside_the_trial(tmp_path: Path) -> None:
    store = TrialStore(TrialPaths(tmp_path / "t")).create()
    with pytest.raises(ValueError, match="is outside the trial folder"):
        store.write_text("../escape.txt", "x")
    with pytest.raises(ValueError, match="is outside the trial folder"):
        store.write_text(tmp_path / "elsewhere.txt", "x")
    assert not (tmp_path / "escape.txt").exists()


def test_mask_files_leaves_earlier_attempts_alone(tmp_path: Path) -> None:
    store = TrialStore(TrialPaths(tmp_path / "t"), Masker(["abcdef"])).create()
    (store.paths.attempt(1)).mkdir(parents=True)
    kept = store.paths.attempt(1) / "trial.log"
    kept.write_text("abcdef")
    assert store.mask_files() == []
    assert kept.read_text() == "abcdef"


# ------------------------------------------------------------------------------ attempts


def test_move_attempt_aside_never_deletes(tmp_path: Path) -> None:
    store = TrialStore(TrialPaths(tmp_path / "t")).create()
    assert move_attempt_aside(TrialPaths(tmp_path / "missing")) is None
    store.step_dirs(1, "main")
    store.append_log("attempt 1")
    store.write_result(result())
    first = move_attempt_aside(store.paths)
    assert first == store.paths.attempt(1)
    assert sorted(p.name for p in store.paths.root.iterdir()) == ["attempts"]
    assert (first / "trial.log").read_text() == "attempt 1\n"
    assert (first / "result.json").is_file() and (first / "steps" / "01-main").is_dir()
    assert move_attempt_aside(store.paths) is None  # nothing left to move

    store.create().append_log("attempt 2")
    second = move_attempt_aside(store.paths)
    assert second == store.paths.attempt(2)
    assert (second / "trial.log").read_text() == "attempt 2\n"
    assert (first / "trial.log").read_text() == "attempt 1\n"


# ------------------------------------------------------------------------------ job folder


@pytest.mark.writes_invalid_results
def test_job_files_and_iter_trial_results(tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    write_job_json(job_dir, {"agent": "oracle", "env": {"TOKEN": "${TOKEN}"}})
    assert read_json(JobPaths(job_dir).job_json)["schema_version"] == "1.0"

    job = JobPaths(job_dir)
    good = TrialStore(job.trial("a", 1, "11111111")).create()
    good.write_result(result("a", trial_id="11111111"))
    unfinished = TrialStore(job.trial("b", 1, "22222222")).create()
    unfinished.write_steps([])
    broken = TrialStore(job.trial("c", 1, "33333333")).create()
    broken.paths.result_json.write_text('{"outcome": NaN}')
    invalid = TrialStore(job.trial("d", 1, "44444444")).create()
    write_json_atomic(invalid.paths.result_json, {"schema_version": "1.0", "outcome": "won"})
    earlier = TrialStore(job.trial("e", 1, "55555555")).create()
    earlier.write_result(result("e", trial_id="55555555"))
    move_attempt_aside(earlier.paths)

    found = list(iter_trial_results(job_dir))
    assert [f.path.parent.name for f in found] == ["a__1__11111111", "c__1__33333333", "d__1__44444444"]
    assert found[0].result is not None and found[0].error is None
    assert found[1].result is None and "NaN" in found[1].error
    assert found[2].result is None and "ValidationError" in found[2].error
    assert list(iter_trial_results(tmp_path / "nothing")) == []


def test_write_and_read_summary(tmp_path: Path) -> None:
    summary = summarize_job([result()], {"two-steps": ["write", "append"]})
    write_summary(tmp_path / "job", summary)
    assert read_summary(tmp_path / "job") == summary
    assert isinstance(summary, JobSummary)
    raw = read_json(JobPaths(tmp_path / "job").summary_json)
    assert raw["outcomes"] == {"completed": 0, "stopped": 0, "errored": 1, "cancelled": 0}
    assert raw["errors"] == {"reward_missing": 1}
