"""The engine round trips of a trial, counted from the Docker engine's own event stream (#13).

A trivial trial's execs and archive transfers are what the harness costs on every trial of a
job; this test fails when a change pushes them past the budget (design §12).
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from taskgen import StepSpec, reward_if, write_task
from testbed import run_trial_sync

pytestmark = pytest.mark.docker

START_EXECS = 1
"""The start's one prepare exec (fresh /logs, workdir, shell, clock check)."""
FIRST_STEP_BUDGET = 5
"""Oracle upload + solve, the after-agent exec, the tests upload, and one exec that runs
test.sh, brings /logs/verifier back on its stdout and, before a later step, removes /tests and
the verifier's files (cairn.sandbox.docker.fold)."""
LATER_STEP_BUDGET = 5
"""The same: the clean-up between steps (/tests and the verifier's files gone before the next
agent runs) is in the verifier's exec."""


def _count_engine_calls(run) -> tuple[list[str], object]:
    """Run ``run()`` while recording the container events of its sandbox; returns the calls
    (``exec: <cmd>`` / ``put-archive`` / ``get-archive``) and ``run()``'s value."""
    import docker

    client = docker.from_env()
    events: list[dict] = []
    stream = client.events(decode=True, since=time.time() - 1, filters={"type": "container"})
    done = threading.Event()
    marker = run.marker

    def listen() -> None:
        for e in stream:
            if marker in (e.get("Actor", {}).get("Attributes", {}).get("name") or ""):
                events.append(e)
                if e.get("Action") == "destroy":
                    done.set()
                    return

    th = threading.Thread(target=listen, daemon=True)
    th.start()
    value = run()
    assert done.wait(30), "the sandbox's destroy event never came"
    stream.close()
    client.close()
    calls = []
    for e in events:
        action = e.get("Action", "")
        if action.startswith("exec_create: "):
            calls.append("exec: " + action[len("exec_create: ") :][:120])
        elif action == "extract-to-dir":
            calls.append("put-archive")
        elif action == "archive-path":
            calls.append("get-archive")
    return calls, value


class _Run:
    def __init__(self, task, jobs):
        self.task, self.jobs = task, jobs
        self.marker = task.name.replace("_", "-")

    def __call__(self):
        return run_trial_sync(self.task, "oracle", "docker", self.jobs)


def test_trivial_trial_stays_within_the_engine_call_budget(tmp_path):
    name = f"calls-{uuid.uuid4().hex[:8]}"
    task = write_task(
        tmp_path / "tasks", name, solve="touch /app/done\n", test=reward_if("test -f /app/done")
    )
    calls, result = _count_engine_calls(_Run(task, tmp_path / "jobs"))
    assert result.reward == 1.0
    assert len(calls) <= START_EXECS + FIRST_STEP_BUDGET, "\n".join(calls)
    assert calls.count("put-archive") == 2 and calls.count("get-archive") == 0, calls


def test_two_step_trial_stays_within_the_engine_call_budget(tmp_path):
    name = f"calls2-{uuid.uuid4().hex[:8]}"
    task = write_task(
        tmp_path / "tasks",
        name,
        steps=[
            StepSpec("one", solve="echo 1 > /app/a\n", test=reward_if("test -f /app/a"), min_reward=1.0),
            StepSpec("two", solve="echo 2 > /app/b\n", test=reward_if("test -f /app/b")),
        ],
    )
    calls, result = _count_engine_calls(_Run(task, tmp_path / "jobs"))
    assert [s.reward for s in result.steps] == [1.0, 1.0]
    assert len(calls) <= START_EXECS + FIRST_STEP_BUDGET + LATER_STEP_BUDGET, "\n".join(calls)
