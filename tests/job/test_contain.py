"""A trial's failure stays that trial's (issue #29): an exception escaping any stage of a trial
(the store, the sandbox, the agent, the verifier, the executor) is that trial's ``internal``
infra error with its traceback in trial.log, and the job's other trials still score.

The faults are injected into the real stages (the real functions, wrapped to raise for one
task only) on the local backend; the job runs through the public API.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from cairn.errors import cause_line
from cairn.job.run import run_job
from cairn.plan import JobConfig
from taskgen import reward_if, write_task

pytestmark = [pytest.mark.local, pytest.mark.slow]

STAGES = ("aside", "store", "sandbox", "agent", "verifier", "executor")


@pytest.fixture(autouse=True)
def _local():
    from testbed import backend_available

    if not backend_available("local"):
        pytest.skip("no local backend")


def _inject(monkeypatch) -> None:
    """Wrap one real function per stage so that it raises for the task of that stage's name."""
    import cairn.job.runner as runner
    import cairn.trial.step as step
    from cairn.job.executors import Executor
    from cairn.results.store import TrialStore
    from cairn.sandbox.local.backend import LocalSandbox

    def named(name: str, slug_or_name: str) -> bool:
        return slug_or_name.endswith(name)

    real_aside = runner.move_attempt_aside

    def aside(tp):
        if "test-aside__" in tp.root.name:
            raise OSError(errno.EIO, "injected: the store cannot move an attempt aside")
        return real_aside(tp)

    monkeypatch.setattr(runner, "move_attempt_aside", aside)

    real_steps = TrialStore.write_steps

    def write_steps(self, steps):
        if "test-store__" in self.paths.root.name:
            raise OSError(errno.EIO, "injected: steps.json cannot be written")
        return real_steps(self, steps)

    monkeypatch.setattr(TrialStore, "write_steps", write_steps)

    real_start = LocalSandbox.start

    async def start(self):
        if named("sandbox", self.spec.name):
            raise RuntimeError("injected: the backend broke in an unexpected way")
        return await real_start(self)

    monkeypatch.setattr(LocalSandbox, "start", start)

    import cairn.trial.run as trial_run

    real_make = trial_run.make_agent

    def make_agent(plan):
        if named("agent", plan.task.name):
            raise LookupError("injected: the agent raised an unexpected type")
        return real_make(plan)

    monkeypatch.setattr(trial_run, "make_agent", make_agent)

    real_verifier = step.run_verifier

    async def run_verifier(sandbox, st, **kw):
        if named("verifier", sandbox.spec.name):
            raise ZeroDivisionError("injected: the verifier's reader divided by zero")
        return await real_verifier(sandbox, st, **kw)

    monkeypatch.setattr(step, "run_verifier", run_verifier)

    real_run = Executor.run_trial

    async def run_trial(self, plan, on_event, services=None):
        if named("executor", plan.task.name):
            raise ExceptionGroup(
                "unhandled errors in a TaskGroup", [ConnectionError("injected: the executor lost its worker")]
            )
        return await real_run(self, plan, on_event, services)

    monkeypatch.setattr(Executor, "run_trial", run_trial)


def test_an_exception_in_each_stage_is_that_trials_error_and_the_others_score(tmp_path, monkeypatch):
    ds = tmp_path / "ds"
    for name in (*STAGES, "ok1", "ok2"):
        write_task(ds, name, solve="touch /app/done\n", test=reward_if("test -f /app/done"))
    _inject(monkeypatch)
    result = run_job(
        JobConfig(
            paths=(ds,),
            backend="local",
            jobs_dir=tmp_path / "jobs",
            job_name="job",
            n_concurrent=3,
            retry_backoff_sec=0.1,
        )
    )
    by = {r.task.name: r for r in result.results}
    assert set(by) == {f"test/{n}" for n in (*STAGES, "ok1", "ok2")}
    for ok in ("test/ok1", "test/ok2"):
        assert by[ok].outcome.value == "completed" and by[ok].reward == 1.0, by[ok].error
    injected = {
        "aside": "cannot move an attempt aside",
        "store": "steps.json cannot",
        "sandbox": "unexpected way",
        "agent": "unexpected type",
        "verifier": "divided by zero",
        "executor": "lost its worker",
    }
    for stage, text in injected.items():
        r = by[f"test/{stage}"]
        assert r.outcome.value == "errored", (stage, r)
        assert r.error.kind.value == "internal" and r.error.category.value == "infra", stage
        assert text in r.error.message and "ExceptionGroup" not in r.error.message, stage
        trial_dir = tmp_path / "jobs" / "job" / "trials" / r.trial_name
        on_disk = json.loads((trial_dir / "result.json").read_text())
        assert on_disk["error"]["kind"] == "internal", stage
        assert on_disk["error"]["category"] == "infra", stage
        log = (trial_dir / "trial.log").read_text()
        assert "Traceback" in log and text in log, stage
    assert result.exit_code == 1
    assert result.summary.errors == {"internal": len(STAGES)}


def test_cause_line_names_the_leaf_of_an_exception_group():
    group = ExceptionGroup(
        "unhandled errors in a TaskGroup",
        [ExceptionGroup("inner", [OSError(errno.ENAMETOOLONG, "File name too long")]), ValueError("second")],
    )
    line = cause_line(group)
    assert line == "OSError: [Errno 36] File name too long (+1 more)"
    assert cause_line(RuntimeError("a\nb   c")) == "RuntimeError: a b c"
    assert cause_line(KeyError()) == "KeyError"
    assert len(cause_line(ValueError("x" * 1000), limit=50)) == 50


def _acceptance_dataset(root: Path) -> dict[str, str]:
    """Three tasks: a 250-character name, an artifact deeper than a host path can be, a plain
    one. Returns task name → expected folder prefix."""
    long_name = "l" * 245  # "test/" + 245 = a 250-character task name
    write_task(root, long_name, solve="touch /app/done\n", test=reward_if("test -f /app/done"))
    deep = (
        "d=$(printf 'd%.0s' $(seq 1 200)); mkdir -p /app/deep && cd /app/deep && "
        'for i in $(seq 1 24); do mkdir "$d" && cd "$d"; done && echo leaf > leaf.txt && '
        "echo shallow > /app/deep/shallow.txt && touch /app/done\n"
    )
    write_task(
        root,
        "deep",
        solve=deep,
        test=reward_if("test -f /app/done"),
        toml_extra='[[artifacts]]\nsource = "/app/deep"\n',
    )
    write_task(root, "plain", solve="touch /app/done\n", test=reward_if("test -f /app/done"))
    return {f"test/{long_name}": long_name, "test/deep": "deep", "test/plain": "plain"}


def test_long_names_and_deep_artifacts_fit_the_host(tmp_path, backend):
    from faultkit import cairn as run_cli

    names = _acceptance_dataset(tmp_path / "ds")
    res = run_cli(
        "run",
        "-p",
        str(tmp_path / "ds"),
        "-a",
        "oracle",
        "-e",
        backend,
        "--jobs-dir",
        "jobs",
        "--job-name",
        "acc",
        "-n",
        "3",
        cwd=tmp_path,
    )
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "ExceptionGroup" not in out and "Traceback" not in out
    trials = tmp_path / "jobs" / "acc" / "trials"
    results = {}
    for d in trials.iterdir():
        assert len(d.name.encode()) <= 255 and len(str(d)) < 1024, d.name
        results[json.loads((d / "result.json").read_text())["task"]["name"]] = (
            d,
            json.loads((d / "result.json").read_text()),
        )
    assert set(results) == set(names)
    for _name, (_d, r) in results.items():
        assert r["outcome"] == "completed" and r["reward"] == 1.0, r
    deep_dir, deep = results["test/deep"]
    manifest = json.loads((deep_dir / "steps" / "01-main" / "artifacts" / "manifest.json").read_text())
    (row,) = [m for m in manifest if m["source"] == "/app/deep"]
    assert row["status"] == "copied", row
    copied = deep_dir / "steps" / "01-main" / "artifacts" / "app" / "deep"
    assert (copied / "shallow.txt").read_text() == "shallow\n"  # the rest of the entry is there
    # what the host cannot hold (a path over PATH_MAX) is skipped and listed, never fatal
    assert row["skipped_too_long_count"] >= 1, row
    assert all(p.count("/") >= 15 for p in row["skipped_too_long"])  # the deep part only
    assert any("too long for the host" in w for w in deep["steps"][0]["warnings"])
    longest = max(len(os.fsencode(os.path.join(dp, f))) for dp, _, fs in os.walk(deep_dir) for f in fs)
    assert longest < 4096
