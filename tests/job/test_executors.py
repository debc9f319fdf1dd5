"""The executor seam (issue 20): registry, the missing Ray extra, and a received trial folder
stored as a local trial would be."""

from __future__ import annotations

import io
import json
import sys
import tarfile
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cairn.errors import UsageError
from cairn.job.executors import EXECUTOR_NAMES, Executor, get_executor
from cairn.plan import JobConfig
from cairn.results.model import (
    AgentRef,
    ExecutorRef,
    Outcome,
    StepResult,
    StepSource,
    TaskRef,
    TrialResult,
)
from cairn.results.store import TrialPaths, install_trial, move_attempt_aside, read_result


def test_registry_knows_local_and_ray_and_refuses_others() -> None:
    assert EXECUTOR_NAMES == ("local", "ray")
    ex = get_executor(JobConfig())
    assert type(ex) is Executor and ex.name == "local"
    with pytest.raises(UsageError, match="unknown executor 'slurm'; use local or ray"):
        get_executor(JobConfig(executor="slurm"))


def test_missing_ray_extra_is_a_usage_error_naming_the_install(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    ex = get_executor(JobConfig(executor="ray"))
    with pytest.raises(UsageError, match=r"pip install 'cairn-eval\[ray\]'"):
        ex.open()


def test_ray_refuses_step_snapshots_that_would_stay_on_a_node(tmp_path) -> None:
    ex = get_executor(JobConfig(executor="ray", snapshot_steps=True))
    with pytest.raises(UsageError, match="--from or --snapshot-steps"):
        ex.open()


def test_cli_run_with_missing_ray_exits_2(monkeypatch, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    import cairn.cli.run  # noqa: F401 - registers `cairn run`
    from cairn.cli import app
    from taskgen import write_task

    monkeypatch.setitem(sys.modules, "ray", None)
    task = write_task(tmp_path, "t")
    out = CliRunner().invoke(
        app, ["run", "-p", str(task), "--executor", "ray", "--jobs-dir", str(tmp_path / "jobs")]
    )
    assert out.exit_code == 2
    assert "pip install 'cairn-eval[ray]'" in out.output
    assert not (tmp_path / "jobs").exists()


def _result(name: str, reward: float) -> TrialResult:
    now = datetime.now(UTC)
    return TrialResult(
        trial_id="a" * 64,
        trial_name=name,
        task=TaskRef(name="t", content_hash="h" * 64),
        agent=AgentRef(name="oracle"),
        backend="local",
        outcome=Outcome.COMPLETED,
        reward=reward,
        steps_total=1,
        steps_run=1,
        started_at=now,
        finished_at=now,
        steps=[StepResult(index=1, name="main", source=StepSource.VERIFIER, reward=reward)],
        executor=ExecutorRef(name="ray", node="n" * 56, host="w1"),
    )


def _tar(files: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, data in files.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
        for name, target in (links or {}).items():
            ti = tarfile.TarInfo(name)
            ti.type = tarfile.SYMTYPE
            ti.linkname = target
            tf.addfile(ti)
    return buf.getvalue()


def test_install_trial_keeps_attempts_writes_result_last_and_refuses_escapes(tmp_path) -> None:
    tp = TrialPaths(tmp_path / "trials" / "t__1__aaaaaaaa")
    # an earlier, infra-errored run of this trial, moved aside as the run loop does
    tp.root.mkdir(parents=True)
    tp.result_json.write_text(_result(tp.root.name, 0.0).model_dump_json())
    move_attempt_aside(tp)
    archive = _tar(
        {
            "trial.log": b"worker log\n",
            "steps/1_main/verifier/reward.txt": b"1\n",
            "result.json": b'{"forged": true}',
            "../escape.txt": b"x",
        },
        links={"steps/evil": "/etc"},
    )
    refused = install_trial(tp, archive, _result(tp.root.name, 1.0))
    assert any("escape" in r for r in refused)
    assert not (tmp_path / "trials" / "escape.txt").exists()
    assert (tp.root / "trial.log").read_text() == "worker log\n"
    assert (tp.root / "steps" / "1_main" / "verifier" / "reward.txt").read_text() == "1\n"
    got = read_result(tp.result_json)  # the driver's result, not the archive's
    assert got.reward == 1.0 and got.executor is not None and got.executor.host == "w1"
    assert json.loads((tp.attempt(1) / "result.json").read_text())["reward"] == 0.0
    assert [p.name for p in tp.root.parent.iterdir()] == [tp.root.name]  # no temp dirs left


def test_install_trial_rejects_a_corrupt_archive_and_leaves_no_result(tmp_path) -> None:
    tp = TrialPaths(tmp_path / "trials" / "t__1__bbbbbbbb")
    with pytest.raises(tarfile.TarError, match="invalid header"):
        install_trial(tp, b"not a tar archive at all" * 40, _result(tp.root.name, 1.0))
    assert not tp.result_json.exists()
    assert [p.name for p in tp.root.parent.iterdir() if p.name.startswith(".incoming")] == []


def test_partial_install_of_a_dead_driver_is_removed_and_never_a_trial(tmp_path) -> None:
    from cairn.results.store import INCOMING_PREFIX, JobPaths, remove_partial_installs

    paths = JobPaths(tmp_path / "job")
    left = paths.trials_dir / f"{INCOMING_PREFIX}t__1__cccccccc-x1"
    (left / "t" / "steps").mkdir(parents=True)
    (paths.trials_dir / "t__2__dddddddd").mkdir()
    assert [t.root.name for t in paths.trial_dirs()] == ["t__2__dddddddd"]
    assert remove_partial_installs(paths) == [left]
    assert sorted(p.name for p in paths.trials_dir.iterdir()) == ["t__2__dddddddd"]
