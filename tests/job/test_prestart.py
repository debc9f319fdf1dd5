"""Warm start (``--prestart``, #13): a waiting trial's sandbox is started while a trial of its
task is in its last verifier, and handed to that trial when its slot frees.

What holds: the same outcomes and rewards as without the flag; the pre-started container is
the one the trial runs in (one container per trial, created before the trial began, its execs
after); the trial's timings say it was pre-started; and nothing of the job is left when it ends
normally, with failing trials, or on SIGINT while a pre-started sandbox waits for its trial.
"""

from __future__ import annotations

import json
import signal
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path

import pytest

from faultkit import Proc, assert_clean_leaves_nothing, job_resources, need
from taskgen import StepSpec, reward_if, write_task


class EngineEvents:
    """Container events of one job folder's containers, from the engine's event stream."""

    def __init__(self, job_dir: Path) -> None:
        import docker

        self.client = docker.from_env(timeout=60)
        self.job_dir = str(job_dir.absolute())
        self.events: list[tuple[str, str, str, int]] = []  # (action, container id, trial, ns)
        self._stream = self.client.events(
            decode=True,
            since=time.time() - 1,
            filters={"type": "container", "label": f"cairn.job_dir={self.job_dir}"},
        )
        self._thread = threading.Thread(target=self._listen, daemon=True)
        self._thread.start()

    def _listen(self) -> None:
        try:
            for e in self._stream:
                attrs = e.get("Actor", {}).get("Attributes", {}) or {}
                if attrs.get("cairn.job_dir") != self.job_dir:
                    continue
                action = str(e.get("Action", "")).split(":")[0]
                self.events.append(
                    (action, e["Actor"]["ID"], attrs.get("cairn.trial", ""), int(e["timeNano"]))
                )
        except Exception:  # noqa: BLE001 - the stream closes when the test is done
            return

    def wait_for(self, action: str, count: int, timeout: float = 120) -> None:
        """Block until ``count`` events ``action`` arrived (bounded)."""
        deadline = time.monotonic() + timeout
        while sum(a == action for a, *_ in self.events) < count:
            assert time.monotonic() < deadline, f"fewer than {count} {action} events: {self.events}"
            time.sleep(0.05)

    def close(self) -> None:
        self._stream.close()
        self.client.close()


def _results(job_dir: Path) -> list[dict]:
    out = [json.loads(p.read_text()) for p in (job_dir / "trials").glob("*/result.json")]
    return sorted(out, key=lambda r: r["attempt"])


def _ns(stamp: str) -> int:
    return int(datetime.fromisoformat(stamp).timestamp() * 1e9)


def _task(root: Path, *, last_test: str | None = None, pause: float = 0.0) -> Path:
    """A 2-step task whose verifiers see a fresh sandbox: step 1 counts the lines it appended
    (exactly one, so a reused or shared container fails), step 2 checks its own line."""
    last = last_test or reward_if('test "$(cat /app/log)" = "$(printf \'a\\nb\')"')
    return write_task(
        root,
        "warm",
        steps=[
            StepSpec(
                "a",
                solve="echo a >> /app/log\n",
                test=reward_if('test "$(wc -l < /app/log)" = 1 && test ! -e /app/planted'),
            ),
            StepSpec(
                "b",
                solve="echo b >> /app/log; touch /app/planted\n",
                test=(f"sleep {pause}\n" if pause else "") + last,
            ),
        ],
    )


def _run(
    task: Path, tmp: Path, name: str, *extra: str, k: int = 4, n: int = 2, backend: str = "docker"
) -> Path:
    from cairn.job.run import run_job
    from cairn.plan import JobConfig

    run_job(
        JobConfig(
            paths=(task,),
            backend=backend,
            jobs_dir=tmp / "jobs",
            job_name=name,
            attempts=k,
            n_concurrent=n,
            prestart="--prestart" in extra,
        )
    )
    return (tmp / "jobs" / name).absolute()


@pytest.mark.docker
def test_prestart_same_results_and_the_prestarted_container_is_the_one_used(tmp_path):
    need("docker")
    task = _task(tmp_path / "tasks")
    off = _run(task, tmp_path, "off")
    on_dir = (tmp_path / "jobs" / "on").absolute()
    events = EngineEvents(on_dir)
    try:
        on = _run(task, tmp_path, "on", "--prestart")
        events.wait_for("destroy", 4)
    finally:
        events.close()
    a, b = _results(off), _results(on)
    assert [(r["outcome"], r["reward"], [s["reward"] for s in r["steps"]]) for r in a] == [
        ("completed", 1.0, [1.0, 1.0])
    ] * 4
    assert [(r["outcome"], r["reward"], [s["reward"] for s in r["steps"]]) for r in b] == [
        ("completed", 1.0, [1.0, 1.0])
    ] * 4
    assert all(not r["timings"]["prestarted"] for r in a)
    # -n 2, 4 trials: attempts 1 and 2 start fresh; 3 and 4 get the sandboxes started while
    # 1 and 2 were in their last verifier
    assert [r["timings"]["prestarted"] for r in b] == [False, False, True, True]
    execs_per_trial: list[int] = []
    for r in b:
        t = r["timings"]
        mine = [e for e in events.events if e[2] == r["trial_id"]]
        created = [e for e in mine if e[0] == "create"]
        assert len(created) == 1, f"trial {r['attempt']}: containers {created}"  # none wasted
        cid = created[0][1]
        execs = [e for e in mine if e[0] == "exec_create" and e[1] == cid]
        assert execs, f"trial {r['attempt']} ran nothing in its container"
        before = [e for e in execs if e[3] < _ns(r["started_at"])]
        # a pre-started container ran at most its start's own prepare exec before its trial
        # began, and in all exactly what a fresh trial's container runs
        assert len(before) <= (1 if t["prestarted"] else 0), (r["attempt"], before)
        execs_per_trial.append(len(execs))
        if t["prestarted"]:
            began = _ns(t["prestart_began_at"])
            assert began < _ns(r["started_at"]), "the pre-start began after the trial"
            assert created[0][3] >= began, "the container is older than its pre-start"
            assert t["prestart_sec"] > 0 and t["environment_sec"] is not None
        else:
            assert t["prestart_sec"] is None and t["prestart_began_at"] is None
    assert len(set(execs_per_trial)) == 1 and execs_per_trial[0] >= 6, execs_per_trial
    said = [line for line in (on / "job.log").read_text().splitlines() if "environment:" in line]
    assert sum("(pre-started; its start took" in line for line in said) == 2, said
    assert job_resources(on) == [], "the job returned with sandboxes left"


@pytest.mark.docker
def test_prestart_with_failing_trials_leaves_nothing(tmp_path):
    """Every trial's last verifier fails (reward 0): the trials still hand their spec on,
    the later ones run in pre-started sandboxes, scores are as without the flag, none is left."""
    need("docker")
    task = _task(tmp_path / "tasks", last_test="exit 3\n")
    on = _run(task, tmp_path, "fail", "--prestart", k=3, n=1)
    got = _results(on)
    seen = [(r["outcome"], r["steps"][0]["reward"], (r["error"] or {}).get("kind")) for r in got]
    assert len(set(seen)) == 1, seen  # each trial fails alike, pre-started or not
    outcome, first_reward, kind = seen[0]
    assert (outcome, first_reward) == ("errored", 1.0) and kind not in (None, "cancelled")
    assert [r["timings"]["prestarted"] for r in got] == [False, True, True]
    assert job_resources(on) == []


@pytest.mark.docker
def test_sigint_while_a_prestarted_sandbox_waits_leaves_nothing(tmp_path):
    """SIGINT while trial 1's last verifier runs and trial 2's sandbox is pre-started: the
    process exits 1 after removing both; nothing is left, and `cairn clean` finds nothing."""
    need("docker")
    task = _task(tmp_path / "tasks", pause=30)
    name = f"sig-{uuid.uuid4().hex[:6]}"
    job = (tmp_path / "jobs" / name).absolute()
    events = EngineEvents(job)
    run = Proc(
        "run",
        "-p",
        str(task),
        "-e",
        "docker",
        "-k",
        "3",
        "-n",
        "1",
        "--prestart",
        "--jobs-dir",
        "jobs",
        "--job-name",
        name,
        cwd=tmp_path,
    )
    try:
        events.wait_for("start", 2, timeout=180)  # trial 1's container, then trial 2's
        trials = {e[2] for e in events.events if e[0] == "start"}
        assert len(trials) == 2, events.events
        run.signal(signal.SIGINT)
        rc = run.finish(timeout=120)
    finally:
        run.kill()
        events.close()
    assert rc == 1, run.output
    assert "Traceback" not in run.output
    assert job_resources(job) == [], "the process returned before its sandboxes were gone"
    outcomes = sorted(r["outcome"] for r in _results(job))
    assert outcomes == ["cancelled"] * 3, outcomes
    assert_clean_leaves_nothing(job, tmp_path)


def _steps(results: list[dict]) -> list[tuple]:
    return [(r["outcome"], r["reward"], [st["reward"] for st in r["steps"]]) for r in results]


@pytest.mark.local
def test_prestart_on_the_local_backend_same_results(tmp_path):
    """The pool is backend-agnostic: on the local backend too the later trials run in their
    pre-started sandboxes, with the scores of a run without the flag and nothing left."""
    need("local")
    task = _task(tmp_path / "tasks")
    off = _run(task, tmp_path, "off", k=4, n=2, backend="local")
    on = _run(task, tmp_path, "on", "--prestart", k=4, n=2, backend="local")
    assert _steps(_results(off)) == _steps(_results(on)) == [("completed", 1.0, [1.0, 1.0])] * 4
    assert [r["timings"]["prestarted"] for r in _results(on)] == [False, False, True, True]
    assert job_resources(on) == [] and job_resources(off) == []


@pytest.mark.local
def test_pool_hands_over_an_equal_spec_and_removes_what_no_trial_took(tmp_path):
    """On the local backend: an equal spec is handed over running; a sandbox whose spec
    differs from its trial's is not used and is removed; one still starting when the pool
    closes is cancelled and removed; the bound holds."""
    need("local")
    import asyncio
    import dataclasses

    from cairn.plan import TrialPlan
    from cairn.sandbox import get_backend
    from cairn.sandbox.base import SandboxSpec
    from cairn.task.load import load_task
    from cairn.trial.prestart import PrestartPool

    task = load_task(_task(tmp_path / "tasks"))
    job_dir = (tmp_path / "jobs" / "pool").absolute()
    job_dir.mkdir(parents=True)
    plans = [
        TrialPlan(
            task=task,
            agent_name="oracle",
            agent_kwargs={},
            model=None,
            backend="local",
            attempt=i,
            trial_id=f"trial{i}",
            trial_dir=job_dir / "trials" / f"t{i}",
            job_id="pool",
            job_dir=job_dir,
        )
        for i in (1, 2, 3, 4)
    ]
    cls = get_backend("local")
    spec = SandboxSpec(
        env_dir=task.env_dir,
        job_id="pool",
        trial_id="trial1",
        job_dir=job_dir,
        env_hash=task.env_hash,
        name=task.slug,
    )

    async def scenario() -> None:
        pool = PrestartPool(plans, limit=2)
        pool.begin(plans[0])
        assert pool.offer(plans[0], cls, spec) == "trial2"
        assert pool.offer(plans[0], cls, spec) == "trial3"
        assert pool.offer(plans[0], cls, spec) is None  # the bound: 2 at once
        mine = pool.take(plans[1], dataclasses.replace(spec, trial_id="trial2"))
        assert mine is not None and mine.sandbox.spec.trial_id == "trial2"
        assert await mine.ready() is None
        r = await mine.sandbox.exec("echo ready; ls -A /tests 2>/dev/null | wc -l")
        assert r.stdout.split() == ["ready", "0"]  # started, never used: no /tests yet
        await mine.sandbox.stop()
        # trial 3's spec differs (another memory limit): its pre-started sandbox is removed
        other = dataclasses.replace(spec, trial_id="trial3", memory_mb=256)
        assert pool.take(plans[2], other) is None
        assert pool.offer(plans[2], cls, spec) == "trial4"  # still starting at close
        await pool.close()
        assert pool.offer(plans[3], cls, spec) is None  # closed
        assert (pool.made, pool.taken) == (3, 1)

    asyncio.run(scenario())
    assert job_resources(job_dir) == []
