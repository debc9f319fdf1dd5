"""A task's seed trajectory (``trajectory.json`` beside the first instruction, docs/agents.md
"Seed trajectories") is checked by ``cairn tasks check`` with the rule the run loads it by
(:func:`cairn.task.seed.read_seed`): the file, its line and the field are named."""

from __future__ import annotations

import json
import os

import pytest

from cairn.errors import TaskFormatError
from cairn.task.load import check_task, load_task
from cairn.task.seed import MAX_SEED_BYTES, SeedError, read_seed
from taskgen import StepSpec, write_task

GOOD = {
    "schema_version": "ATIF-v1.7",
    "session_id": "s",
    "agent": {"name": "x", "version": "1"},
    "steps": [
        {"step_id": 1, "source": "system", "message": "You are helpful."},
        {"step_id": 2, "source": "user", "message": "Look at /app."},
        {
            "step_id": 3,
            "source": "agent",
            "message": "Listing it.",
            "tool_calls": [
                {"tool_call_id": "c1", "function_name": "bash", "arguments": {"command": "ls /app"}}
            ],
            "observation": {"results": [{"source_call_id": "c1", "content": "a.txt"}]},
        },
    ],
}


def _errors(task):
    return [
        (f.path.relative_to(task).as_posix(), f.line, f.text, f.rule) for f in check_task(task) if f.is_error
    ]


def test_a_good_seed_passes_and_loads(tmp_path):
    task = write_task(tmp_path, "good")
    (task / "trajectory.json").write_text(json.dumps(GOOD, indent=2))
    assert _errors(task) == []
    assert load_task(task).seed_trajectory == task / "trajectory.json"
    assert [s["source"] for s in read_seed(task / "trajectory.json")] == ["system", "user", "agent"]


def test_a_malformed_step_is_an_error_with_its_line_and_field(tmp_path):
    task = write_task(tmp_path, "bad")
    doc = json.loads(json.dumps(GOOD))
    doc["steps"][2]["tool_calls"][0]["arguments"] = "ls /app"  # a string, not an object
    (task / "trajectory.json").write_text(json.dumps(doc, indent=2))
    text = (task / "trajectory.json").read_text().splitlines()
    call_line = text.index('          "tool_call_id": "c1",')  # 0-based: the `{` line before
    assert _errors(task) == [
        (
            "trajectory.json",
            call_line,
            "seed trajectory: step 3 (`steps[2]`): tool_calls need tool_call_id, function_name and "
            "arguments (an object): `steps[2].tool_calls[0].arguments` is not an object",
            "invalid-task-files",
        )
    ]
    with pytest.raises(TaskFormatError, match=r"trajectory.json:\d+: error: seed trajectory"):
        load_task(task)  # so every run refuses the task, whatever the agent


@pytest.mark.parametrize(
    ("content", "line", "text"),
    [
        ('{"schema_version": "ATIF-v1.7",\n "steps": [\n', 3, "not JSON: Expecting value (column 1)"),
        (b"\xff\xfe{}", None, "not JSON: not UTF-8 (invalid start byte at byte 0)"),
        (
            '[{"source": "user"}]',
            None,
            'not an ATIF document (no `schema_version` "ATIF-v…" in a top-level object)',
        ),
        (
            '{"schema_version": "1.0", "steps": [{"source": "user"}]}',
            1,
            'not an ATIF document (no `schema_version` "ATIF-v…" in a top-level object)',
        ),
        ('{"schema_version": "ATIF-v1.7", "steps": {}}', 1, "no steps (`steps` must be a non-empty list)"),
        (
            '{"schema_version": "ATIF-v1.7", "steps": [\n  {"source": "user"},\n  "hello"]}',
            1,
            "step 2 (`steps[1]`) is not an object",
        ),
        (
            '{"schema_version": "ATIF-v1.7", "steps": [\n  {"source": "user"},\n'
            '  {"source": "tool", "message": "x"}]}',
            3,
            "step 2 (`steps[1]`) has no source system/user/agent (`source` is 'tool')",
        ),
        (
            '{"schema_version": "ATIF-v1.7", "steps": [{"source": "user", "message": 3}]}',
            1,
            "step 1 (`steps[0]`): `message` is not a string",
        ),
        (
            '{"schema_version": "ATIF-v1.7", "steps": [\n {"source": "agent",\n'
            '  "observation": {"results": [\n   {"content": 1}]}}]}',
            4,
            "step 1 (`steps[0]`): observation.results must be objects with text content "
            "(`steps[0].observation.results[0]`)",
        ),
    ],
)
def test_each_refusal_names_the_problem(tmp_path, content, line, text):
    task = write_task(tmp_path, "t")
    seed = task / "trajectory.json"
    if isinstance(content, bytes):
        seed.write_bytes(content)
    else:
        seed.write_text(content)
    assert _errors(task) == [("trajectory.json", line, f"seed trajectory: {text}", "invalid-task-files")]
    with pytest.raises(SeedError) as exc:
        read_seed(seed)
    assert (exc.value.reason, exc.value.line) == (text, line)
    where = f"{seed}:{line}" if line is not None else f"{seed}"
    assert str(exc.value) == f"task trajectory {where}: {text}"


def test_a_multi_step_seed_lives_in_the_first_step(tmp_path):
    task = write_task(tmp_path, "m", steps=[StepSpec("first"), StepSpec("second")])
    (task / "steps" / "first" / "trajectory.json").write_text('{"schema_version": "ATIF-v1"}')
    assert _errors(task) == [
        (
            "steps/first/trajectory.json",
            1,
            "seed trajectory: no steps (`steps` must be a non-empty list)",
            "invalid-task-files",
        )
    ]


def test_a_large_bad_seed_names_the_field_without_a_line(tmp_path):
    """Over 1 MiB the seed is still read (up to 64 MiB), but not located line by line."""
    task = write_task(tmp_path, "big")
    doc = {
        "schema_version": "ATIF-v1.7",
        "steps": [{"source": "user", "message": "x" * 100} for _ in range(12_000)]
        + [{"source": "agent", "tool_calls": [{"tool_call_id": 1, "function_name": "f"}]}],
    }
    (task / "trajectory.json").write_text(json.dumps(doc, indent=1))
    assert (task / "trajectory.json").stat().st_size > 1 << 20
    assert _errors(task) == [
        (
            "trajectory.json",
            None,
            "seed trajectory: step 12001 (`steps[12000]`): tool_calls need tool_call_id, "
            "function_name and arguments (an object): `steps[12000].tool_calls[0].tool_call_id` is "
            "missing or not a string",
            "invalid-task-files",
        )
    ]


def test_a_seed_over_the_cap_is_refused_by_size(tmp_path):
    task = write_task(tmp_path, "huge")
    with (task / "trajectory.json").open("w") as fh:  # sparse: refused before a byte is read
        fh.truncate(MAX_SEED_BYTES + (1 << 20))
    ((path, line, text, _),) = _errors(task)
    assert (path, line) == ("trajectory.json", None)
    assert text == ("seed trajectory: is 65.0 MiB, over cairn's limit of 64.0 MiB for a task or job file")


def test_a_fifo_seed_is_reported_as_a_fifo_only(tmp_path):
    task = write_task(tmp_path, "fifo")
    os.mkfifo(task / "trajectory.json")
    ((path, _, text, _),) = _errors(task)
    assert path == "trajectory.json" and text.startswith("is a FIFO, not a regular file")
