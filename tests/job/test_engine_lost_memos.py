"""A trial that lost its engine is retried against the engine that answers now: the job drops
its backend memos (the engine's API version, version, addresses, the images it had) before the
retry, and keeps them across any other infra retry (issues #28 and #29).

The trials are stand-ins (an executor whose runs return the errored result a lost engine
gives); the real engine restart is tests/faults/test_engine_restart.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from cairn.errors import Category, ErrorKind
from cairn.job.discover import cancelled_result
from cairn.job.executors import Executor
from cairn.job.runner import JobRun
from cairn.plan import JobConfig, TrialPlan, trial_id
from cairn.results.model import ErrorInfo, Outcome, TrialResult
from cairn.results.store import trial_dir_name
from cairn.sandbox.caches import SandboxCaches
from cairn.sandbox.docker.client import EngineFacts, engine_facts
from cairn.task.load import load_task
from cairn.trial.context import JobServices
from taskgen import write_task


class _FlakyEngine(Executor):
    """The first run learns an engine fact, then fails with ``first_error``; the next passes."""

    def __init__(self, config: JobConfig, first_error: ErrorKind) -> None:
        super().__init__(config)
        self.first_error = first_error
        self.seen: list[EngineFacts] = []
        self.pooled: object | None = None

    async def run_trial(self, plan: TrialPlan, on_event, services: JobServices | None = None) -> TrialResult:  # noqa: ANN001
        assert services is not None
        facts = engine_facts(services.caches, "unix:///stand-in.sock")
        self.seen.append(facts)
        done = cancelled_result(plan, "stand-in")
        assert services.pool is not None
        if len(self.seen) == 1:
            facts.version = "20.10.24"
            services.pool.give("gateway", "made-by-the-first-engine", limit=16)  # an idle gateway
            err = ErrorInfo(kind=self.first_error, category=Category.INFRA, message="the engine went away")
            return done.model_copy(update={"outcome": Outcome.ERRORED, "error": err})
        self.pooled = services.pool.take("gateway")
        return done.model_copy(update={"outcome": Outcome.COMPLETED, "error": None})


def _run_twice(tmp_path: Path, first_error: ErrorKind) -> tuple[_FlakyEngine, SandboxCaches, TrialResult]:
    task = load_task(write_task(tmp_path / "tasks", "lost"))
    config = JobConfig(paths=(str(tmp_path / "tasks"),), max_retries=1, retry_backoff_sec=0.0)
    job_dir = tmp_path / "jobs" / "job"
    tid = trial_id(task.name, task.content_hash, "oracle", {}, None, "local", 1)
    plan = TrialPlan(
        task=task,
        agent_name="oracle",
        agent_kwargs={},
        model=None,
        backend="local",
        attempt=1,
        trial_id=tid,
        trial_dir=job_dir / "trials" / trial_dir_name(task.name, 1, tid),
        job_id="job",
        job_dir=job_dir,
    )
    executor = _FlakyEngine(config, first_error)
    job = JobRun(config, "local", job_dir, resume=False, retry_errors=False, observer=None, executor=executor)
    services = JobServices.for_job([plan], prestart=False, limit=1, in_process=True)
    result = asyncio.run(job.run_one(plan, services))
    return executor, services.caches, result


def test_the_retry_after_a_lost_engine_learns_the_engine_again(tmp_path: Path) -> None:
    executor, caches, result = _run_twice(tmp_path, ErrorKind.SANDBOX_LOST)
    assert result.outcome is Outcome.COMPLETED
    first, retry = executor.seen
    assert retry is not first
    assert retry.version is None  # the engine that came back is asked again
    assert executor.pooled is None  # and is handed no gateway the lost one made
    assert engine_facts(caches, "unix:///stand-in.sock") is retry


def test_another_infra_retry_keeps_what_the_job_learnt(tmp_path: Path) -> None:
    executor, _, result = _run_twice(tmp_path, ErrorKind.START_FAILED)
    assert result.outcome is Outcome.COMPLETED
    first, retry = executor.seen
    assert retry is first and retry.version == "20.10.24"
    assert executor.pooled == "made-by-the-first-engine"  # the same engine's gateway is reused


def test_engine_lost_forgets_memos_and_keeps_build_locks() -> None:
    caches = SandboxCaches()
    engine_facts(caches, "").version = "20.10.24"

    async def lock_then_forget() -> bool:
        lock = caches.lock("env")
        caches.engine_lost()
        return caches.lock("env") is lock

    assert asyncio.run(lock_then_forget())
    assert engine_facts(caches, "").version is None
