"""Step snapshots end to end on docker and local (issue 17; docs/snapshots.md):
``--start-step`` (oracle replay), ``--snapshot-steps`` + ``cairn regrade`` (no agent runs,
original folder byte-identical, regrade_partial), ``--from`` forks, ``cairn shell`` and
``cairn clean`` of snapshots.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from cairn.errors import UsageError
from cairn.job.regrade import regrade_job
from cairn.job.run import read_job, run_job
from cairn.plan import JobConfig
from cairn.results.model import StepSource
from cairn.results.report import render
from cairn.sandbox.cleanup import clean
from cairncli import run_cairn
from taskgen import StepSpec, reward_if, write_task

ROOT = Path(__file__).resolve().parents[2]
INCIDENT = ROOT / "examples" / "incident"
HELPERS = ROOT / "tests" / "helpers"

pytestmark = pytest.mark.slow


def cfg(tmp_path: Path, backend: str, *paths: Path, name: str = "job", **kw) -> JobConfig:
    # unique job names: `cairn clean --job NAME` in these tests must not reach other jobs
    return JobConfig(
        paths=tuple(paths),
        backend=backend,
        jobs_dir=tmp_path / "jobs",
        job_name=f"{name}-{tmp_path.name[-12:]}",
        **kw,
    )


def tree_digest(root: Path) -> str:
    """sha256 over every path, file byte, symlink target and mode under ``root``."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for n in sorted(dirnames + filenames):
            p = Path(dirpath, n)
            st = p.lstat()
            h.update(f"{p.relative_to(root)}\0{st.st_mode}\0".encode())
            if p.is_symlink():
                h.update(os.readlink(p).encode())
            elif p.is_file():
                h.update(p.read_bytes())
    return h.hexdigest()


def _only(job):
    assert len(job.results) == 1
    return job.results[0]


def _drop_snapshots(job_dir: Path) -> None:
    """``cairn clean --snapshots --job NAME``: every snapshot the job recorded is removed."""
    refs = {s.snapshot.ref for r in read_job(job_dir).results for s in r.steps if s.snapshot}
    report = clean(job=job_dir.name, snapshots=True)
    assert not report.errors, report.errors
    assert refs <= set(report.snapshots)


# ---- --start-step on the five-step incident example -------------------------------------------
def test_start_step_replays_earlier_steps_with_the_oracle(tmp_path, backend):
    nop = _only(run_job(cfg(tmp_path, backend, INCIDENT, name="nop", agent="nop", start_step="repair")))
    assert [s.source for s in nop.steps] == [
        StepSource.ORACLE,
        StepSource.ORACLE,
        StepSource.VERIFIER,
        StepSource.NOT_RUN,
        StepSource.NOT_RUN,
    ]
    assert [s.passed for s in nop.steps[:2]] == [True, True]
    assert nop.outcome.value == "stopped" and nop.stopped_after == "repair"
    assert nop.reward == 0.0 and nop.reward_all_steps == 0.0
    assert (nop.steps_total, nop.steps_run, nop.start_step) == (3, 1, "repair")

    job_o = run_job(cfg(tmp_path, backend, INCIDENT, name="oracle", agent="oracle", start_step="repair"))
    orc = _only(job_o)
    assert orc.outcome.value == "completed" and orc.passed
    assert (orc.reward, orc.reward_all_steps, orc.steps_total, orc.steps_run) == (1.0, 1.0, 3, 3)
    summary = read_job(job_o.job_dir).summary
    funnel = {s.name: (s.n_reached, s.n_replayed) for s in summary.tasks[0].steps}
    assert funnel == {
        "evidence": (0, 1),
        "diagnose": (0, 1),
        "repair": (1, 0),
        "validate": (1, 0),
        "postmortem": (1, 0),
    }
    text = render(read_job(job_o.job_dir))
    assert "replayed by oracle (not scored) 1" in text


def test_replay_that_does_not_pass_errors_the_trial_as_a_task_error(tmp_path, backend):
    task = write_task(
        tmp_path,
        "badoracle",
        steps=[
            StepSpec("a", solve="echo wrong > /app/a\n", test=reward_if("grep -q right /app/a")),
            StepSpec("b"),
        ],
    )
    r = _only(run_job(cfg(tmp_path, backend, task, start_step="b")))
    assert r.outcome.value == "errored"
    assert (r.error.kind.value, r.error.category.value, r.error.step) == ("oracle_replay_failed", "task", "a")
    assert r.steps[1].source is StepSource.NOT_RUN and r.steps_run == 0


# ---- --snapshot-steps + cairn regrade ------------------------------------------------------------
STEP1_SOLVE = "echo one > /app/one.txt; echo s > /app/scratch.txt; rm /app/scratch.txt\n"
# A destructive verifier: it reads the agent's file, then deletes it. Its answer on regrade must
# be the same: the snapshot is the end-of-agent state, not the end-of-verifier state.
STEP1_TEST = reward_if("test -f /app/one.txt && ! test -e /app/scratch.txt") + "rm -f /app/one.txt\n"
STEP2_SOLVE = "echo two > /app/two.txt\n"
BROKEN = reward_if("test -f /app/TWO.txt")
FIXED = reward_if("grep -q two /app/two.txt")


def _fix(task: Path, step: str) -> None:
    (task / "steps" / step / "tests" / "test.sh").write_text("#!/bin/bash\n" + FIXED)


def test_regrade_rescores_a_fixed_verifier_from_the_snapshot_without_agents(tmp_path, backend):
    task = write_task(
        tmp_path / "tasks",
        "fixme",
        steps=[
            StepSpec("one", solve=STEP1_SOLVE, test=STEP1_TEST, min_reward=1.0),
            StepSpec("two", solve=STEP2_SOLVE, test=BROKEN),
        ],
    )
    counter = tmp_path / "agent-runs.txt"
    job = run_job(
        cfg(
            tmp_path,
            backend,
            task,
            agent="job_agents:CountingAgent",
            agent_kwargs={"counter": str(counter)},
            snapshot_steps=True,
        )
    )
    old = _only(job)
    assert counter.read_text().split() == ["one", "two"]
    assert [s.reward for s in old.steps] == [1.0, 0.0] and old.reward == 0.5
    assert all(s.snapshot is not None and s.snapshot.backend == backend for s in old.steps)
    assert all(s.snapshot.seconds >= 0 for s in old.steps)
    src = job.job_dir
    before = tree_digest(src)
    try:
        _fix(task, "two")
        result = regrade_job(src, paths=[task], job_name="fixed")
        new = _only(read_job(result.job_dir))
        assert counter.read_text().split() == ["one", "two"]  # no agent ran
        assert tree_digest(src) == before  # the original job folder is byte-identical
        assert [s.reward for s in new.steps] == [1.0, 1.0]  # step 1: same answer as the run
        assert new.reward == 1.0 and new.passed and new.outcome.value == "completed"
        assert new.regrade.status == "regraded" and new.regrade.old_reward == 0.5
        assert [(s.how, s.old_reward, s.new_reward) for s in new.regrade.steps] == [
            ("snapshot", 1.0, 1.0),
            ("snapshot", 0.0, 1.0),
        ]
        import json

        meta = json.loads((result.job_dir / "job.json").read_text())
        assert meta["derived_from"]["job_dir"] == str(src)
        text = render(read_job(result.job_dir))
        assert "regrade (old → new)" in text and "0.50        1.00" in text
        # without -p: the task folder the trial recorded (now fixed as well)
        recorded = _only(read_job(regrade_job(src, job_name="recorded").job_dir))
        assert [s.reward for s in recorded.steps] == [1.0, 1.0]
        assert tree_digest(src) == before
    finally:
        _drop_snapshots(src)


def test_regrade_partial_when_a_new_gate_lets_the_trial_go_on(tmp_path, backend):
    task = write_task(
        tmp_path / "tasks",
        "gated",
        steps=[
            StepSpec("one", solve=STEP1_SOLVE, test=STEP1_TEST, min_reward=1.0),
            StepSpec("two", solve=STEP2_SOLVE, test=BROKEN, min_reward=1.0),
            StepSpec("three", solve="echo 3 > /app/three.txt\n", test=reward_if("test -f /app/three.txt")),
        ],
    )
    job = run_job(cfg(tmp_path, backend, task, snapshot_steps=True))
    old = _only(job)
    assert old.outcome.value == "stopped" and old.stopped_after == "two"
    try:
        _fix(task, "two")
        new = _only(read_job(regrade_job(job.job_dir, paths=[task], job_name="p").job_dir))
        assert new.regrade.status == "regrade_partial"
        assert new.regrade.unreached_step == "three"
        assert [s.reward for s in new.steps] == [1.0, 1.0, None]
        assert new.steps[2].source is StepSource.NOT_RUN  # never an invented score
        assert not new.passed
        assert "could not reach three" in render(read_job(job.job_dir.parent / "p"))
    finally:
        _drop_snapshots(job.job_dir)


def test_regrade_without_snapshots_copies_shared_steps_unchanged(tmp_path):
    task = write_task(
        tmp_path / "tasks",
        "nosnap",
        steps=[
            StepSpec("one", solve=STEP1_SOLVE, test=STEP1_TEST),
            StepSpec("two", solve=STEP2_SOLVE, test=BROKEN),
        ],
    )
    job = run_job(cfg(tmp_path, "local", task))
    _fix(task, "two")
    new = _only(read_job(regrade_job(job.job_dir, paths=[task], job_name="n").job_dir))
    assert new.regrade.status == "not_regradable"
    assert [s.how for s in new.regrade.steps] == ["not_regradable", "not_regradable"]
    assert new.reward == 0.5 and "--snapshot-steps" in new.regrade.message


# ---- --from forks -----------------------------------------------------------------------------
def test_fork_starts_from_the_recorded_snapshot_and_sees_its_files(tmp_path, backend):
    task = write_task(
        tmp_path / "tasks",
        "forkme",
        steps=[
            StepSpec("one", solve="echo from-A-1 > /app/a.txt\n", test=reward_if("test -f /app/a.txt")),
            StepSpec("two", solve="echo from-A-2 > /app/b.txt\n", test=reward_if("test -f /app/b.txt")),
            StepSpec(
                "three",
                solve="cat /app/a.txt /app/b.txt > /app/c.txt\n",
                test=reward_if("grep -q from-A-1 /app/c.txt && grep -q from-A-2 /app/c.txt"),
            ),
        ],
    )
    a_job = run_job(cfg(tmp_path, backend, task, name="a", snapshot_steps=True))
    a = _only(a_job)
    a_dir = a_job.job_dir / "trials" / a.trial_name
    try:
        b = _only(run_job(cfg(tmp_path, backend, task, name="b", start_step="three", from_trial=a_dir)))
        assert b.passed and b.reward == 1.0
        assert b.forked_from.trial_id == a.trial_id and b.forked_from.step == "two"
        assert [s.source for s in b.steps] == [StepSource.NOT_RUN, StepSource.NOT_RUN, StepSource.VERIFIER]
        assert (b.steps_total, b.steps_run) == (1, 1)
        # a changed task is refused before anything starts
        (task / "steps" / "three" / "instruction.md").write_text("Changed.")
        with pytest.raises(UsageError, match="same task content"):
            run_job(cfg(tmp_path, backend, task, name="c", start_step="three", from_trial=a_dir))
    finally:
        _drop_snapshots(a_job.job_dir)


# ---- cairn shell and cairn clean -------------------------------------------------------------------
def test_shell_opens_the_step_snapshot_and_clean_removes_orphans(tmp_path, backend):
    task = write_task(
        tmp_path / "tasks",
        "shellme",
        steps=[
            StepSpec("one", solve=STEP1_SOLVE, test=STEP1_TEST),
            StepSpec("two", solve=STEP2_SOLVE, test=FIXED),
        ],
    )
    job = run_job(cfg(tmp_path, backend, task, snapshot_steps=True))
    r = _only(job)
    trial = job.job_dir / "trials" / r.trial_name
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{HELPERS}"}
    shell = ["shell", str(trial), "--step", "one"]
    # an interactive shell fed from a pipe: the verifier deleted one.txt, the snapshot has it
    p = run_cairn(
        *shell,
        input="cat /app/one.txt; ls /tests; test -e /app/two.txt || echo no-two; exit 7\n",
        env=env,
        timeout=120,
    )
    assert p.returncode == 7, p.stderr
    assert p.stdout.split() == ["one", "test.sh", "no-two"]
    assert "Leave with `exit`" in p.stderr and "sandbox removed" in p.stderr
    p = run_cairn(*shell, "--command", "cat /app/one.txt", env=env, timeout=120)
    assert (p.returncode, p.stdout) == (0, "one\n"), p.stderr
    refs = [s.snapshot.ref for s in r.steps]
    import shutil

    shutil.rmtree(job.job_dir)  # its job folder is gone: plain `cairn clean` finds them
    report = clean(job=job.job_dir.name)
    assert set(refs) <= set(report.snapshots)


def test_regrade_separate_step_from_artifacts_without_snapshots(tmp_path, backend):
    task = write_task(
        tmp_path / "tasks",
        "sep",
        steps=[
            StepSpec("build", solve="echo A > /app/a.txt\n", test=reward_if("test -f /app/a.txt")),
            StepSpec(
                "report",
                solve="echo A+B > /app/report.txt\n",
                test=reward_if("grep -q 'A-B' /app/report.txt"),  # broken: wrong separator
                toml_extra='artifacts = ["/app/report.txt"]\n'
                '[steps.verifier]\nenvironment_mode = "separate"\n',
            ),
        ],
        files={"tests/Dockerfile": "FROM debian:bookworm-slim\nWORKDIR /app\n"},
    )
    job = run_job(cfg(tmp_path, backend, task))
    assert [s.reward for s in _only(job).steps] == [1.0, 0.0]
    before = tree_digest(job.job_dir)
    (task / "steps" / "report" / "tests" / "test.sh").write_text(
        "#!/bin/bash\n" + reward_if("grep -q 'A+B' /app/report.txt")
    )
    new = _only(read_job(regrade_job(job.job_dir, paths=[task], job_name="s").job_dir))
    assert [(s.how, s.new_reward) for s in new.regrade.steps] == [("not_regradable", 1.0), ("artifacts", 1.0)]
    assert new.regrade.status == "regraded" and new.reward == 1.0
    assert "build" in new.regrade.message
    assert tree_digest(job.job_dir) == before


def test_regrade_whose_new_gate_fails_drops_the_later_steps(tmp_path):
    task = write_task(
        tmp_path / "tasks",
        "newgate",
        steps=[
            StepSpec("one", solve=STEP1_SOLVE, test=STEP1_TEST),
            StepSpec("two", solve=STEP2_SOLVE, test=FIXED),
        ],
    )
    job = run_job(cfg(tmp_path, "local", task, snapshot_steps=True))
    assert _only(job).reward == 1.0
    try:
        toml = task / "task.toml"  # step one gains a gate its (now stricter) verifier fails
        toml.write_text(toml.read_text().replace('name = "one"', 'name = "one"\nmin_reward = 1.0'))
        (task / "steps" / "one" / "tests" / "test.sh").write_text(
            "#!/bin/bash\n" + reward_if("grep -q ONE /app/one.txt")
        )
        new = _only(read_job(regrade_job(job.job_dir, paths=[task], job_name="g").job_dir))
        assert new.outcome.value == "stopped" and new.stopped_after == "one"
        assert [(s.how, s.new_reward) for s in new.regrade.steps] == [("snapshot", 0.0), ("dropped", None)]
        assert new.steps[1].source is StepSource.NOT_RUN and new.reward == 0.0
    finally:
        _drop_snapshots(job.job_dir)
