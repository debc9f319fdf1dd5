"""The shipped JSON Schemas (design §7): equal to freshly generated ones, and they validate results."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import jsonschema
import pytest

from cairn.errors import Category, ErrorKind, Phase
from cairn.results.aggregate import evaluate_gates, score_trial
from cairn.results.model import (
    AgentRef,
    ErrorInfo,
    Outcome,
    StepResult,
    StepTimings,
    StopReason,
    TaskRef,
    Tokens,
    TrialResult,
    TrialTimings,
)
from cairn.results.schemas import (
    SCHEMA_MODELS,
    load_schema,
    schema_text,
    stale_schemas,
    validate,
    write_schemas,
)
from cairn.results.schemas.__main__ import main as schemas_main
from cairn.results.store import JobPaths, TrialStore, read_json, write_summary
from cairn.results.summary import summarize_job

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def full_result() -> TrialResult:
    """A stopped two-step trial with every optional field filled."""
    rows = [
        StepResult(
            index=1,
            name="write",
            source="verifier",
            rewards={"reward": 0.25, "x": 1},
            reward=0.25,
            passed=False,
            agent_exit="timeout",
            verifier_exit_code=3,
            reward_file="reward.json",
            warnings=["both files"],
            timings=StepTimings(setup_sec=0.1, agent_sec=2.0, verifier_sec=0.5),
            tokens=Tokens(prompt=10, completion=5, cached=2),
            cost_usd=0.01,
            gates=evaluate_gates(0.5, {"reward": 0.25}),
        ),
        StepResult(index=2, name="append", source="not-run"),
    ]
    stop = StopReason(kind="min_reward", step="write", key="reward", value=0.25, threshold=0.5)
    score = score_trial("mean", rows, stop_reason=stop)
    return TrialResult(
        trial_id="3fa85f64571745",
        trial_name="two__1__3fa85f64",
        attempt=1,
        task=TaskRef(name="two", content_hash="ab" * 32),
        agent=AgentRef(name="oracle", version="1", kwargs={"k": "v", "n": 1}),
        model="m",
        backend="docker",
        outcome=score.outcome,
        error=score.error,
        reward=score.reward,
        rewards=score.rewards,
        reward_all_steps=score.reward_all_steps,
        passed=score.passed,
        strategy="mean",
        steps_total=2,
        steps_run=score.steps_run,
        stopped_after=score.stopped_after,
        stop_reason=score.stop_reason,
        timings=TrialTimings(environment_sec=0.4, agent_setup_sec=0.0, total_sec=3.1),
        tokens=Tokens(prompt=10, completion=5, cached=2),
        cost_usd=0.01,
        started_at=T0,
        finished_at=T0,
        image_id="sha256:abc",
        engine_version="20.10",
        warnings=["w"],
        steps=rows,
    )


def errored_result() -> TrialResult:
    e = ErrorInfo(
        kind=ErrorKind.REWARD_MISSING,
        category=Category.TASK,
        phase=Phase.VERIFIER,
        step="main",
        message="no reward",
        detail={"exit_code": 1, "stdout_tail": "x"},
    )
    return TrialResult(
        trial_id="deadbeef",
        trial_name="t",
        task=TaskRef(name="t", content_hash="h"),
        agent=AgentRef(name="nop"),
        backend="local",
        outcome=Outcome.ERRORED,
        error=e,
        steps_total=1,
        steps_run=1,
        started_at=T0,
        finished_at=T0,
        steps=[
            StepResult(index=1, name="main", source="error", error=e, agent_exit="ok", verifier_exit_code=1)
        ],
    )


def test_committed_schemas_equal_generated_ones() -> None:
    assert stale_schemas() == [], "run: python -m cairn.results.schemas"
    assert schemas_main(["--check"]) == 0
    for name in SCHEMA_MODELS:
        assert load_schema(name) == json.loads(schema_text(name))


def test_schema_cli_usage_and_regeneration(tmp_path: Path) -> None:
    assert schemas_main(["--bogus"]) == 2
    written = write_schemas(tmp_path)
    assert sorted(p.name for p in written) == [
        "check.schema.json",
        "config.schema.json",
        "job.schema.json",
        "network.schema.json",
        "result.schema.json",
        "rollout.schema.json",
        "steps.schema.json",
        "summary.schema.json",
    ]
    assert stale_schemas(tmp_path) == []
    (tmp_path / "steps.schema.json").write_text("{}")
    assert stale_schemas(tmp_path) == ["steps"]


def test_unknown_schema_name() -> None:
    with pytest.raises(KeyError, match="unknown schema 'nope'"):
        load_schema("nope")


def test_schemas_are_valid_draft_2020_12() -> None:
    for name in SCHEMA_MODELS:
        schema = load_schema(name)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        jsonschema.Draft202012Validator.check_schema(schema)


def test_closed_vocabularies_are_in_the_schema() -> None:
    defs = load_schema("result")["$defs"]
    assert set(defs["ErrorKind"]["enum"]) == {k.value for k in ErrorKind}
    assert set(defs["Outcome"]["enum"]) == {"completed", "stopped", "errored", "cancelled"}
    assert set(defs["StepSource"]["enum"]) == {"verifier", "candidate_error", "error", "not-run", "oracle"}
    assert set(defs["Phase"]["enum"]) == {p.value for p in Phase}


def test_files_written_by_the_store_validate(tmp_path: Path) -> None:
    job = JobPaths(tmp_path / "job")
    results = [full_result(), errored_result()]
    for i, r in enumerate(results):
        store = TrialStore(job.trial(r.task.name, 1, f"{i}" * 8)).create()
        store.write_result(r)
        validate("result", read_json(store.paths.result_json))
        validate("steps", read_json(store.paths.steps_json))
    write_summary(job.root, summarize_job(results, {"two": ["write", "append"]}))
    validate("summary", read_json(job.summary_json))


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("outcome",), "won", r"^'won' is not one of \['completed', "),
        (("steps", 0, "source"), "guess", r"^'guess' is not one of \['verifier', "),
        (("steps", 0, "reward"), "1", r"^'1' is not valid under any of the given schemas\n"),
        (("steps", 0, "gates", 0, "passed"), "no", r"^'no' is not of type 'boolean'\n"),
        (("error",), {"kind": "oops", "category": "task"}, r"^\{'kind': 'oops', .* is not valid under any"),
        (("stop_reason", "kind"), "tired", r"^\{'kind': 'tired', .* is not valid under any"),
        (("strategy",), "median", r"^'median' is not one of \['mean', 'final'\]\n"),
        (("surprise",), 1, r"\('surprise' was unexpected\)\n"),
        (("steps", 0, "surprise"), 1, r"\('surprise' was unexpected\)\n"),
    ],
)
def test_invalid_results_are_rejected(path: tuple, value, message: str) -> None:
    doc = json.loads(full_result().model_dump_json())
    target = doc
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    with pytest.raises(jsonschema.ValidationError, match=message):  # the error names the bad value
        validate("result", doc)


def test_missing_required_fields_are_rejected() -> None:
    doc = json.loads(full_result().model_dump_json())
    for key in ("outcome", "steps", "task", "trial_id", "steps_total"):
        broken = {k: v for k, v in doc.items() if k != key}
        with pytest.raises(jsonschema.ValidationError, match=f"'{key}' is a required property"):
            validate("result", broken)
    with pytest.raises(jsonschema.ValidationError, match="is not of type 'object'\n"):
        validate("steps", doc["steps"])  # steps.json is an object with schema_version
