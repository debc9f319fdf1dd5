"""Harbor 0.26 parity at run time (issue #21), on the docker backend: each runnable fixture
under tests/fixtures/harbor026/ scores as on Harbor, the task faults are task errors (not
retried as infra), and "check ok" implies the run does not end in ``config_error``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cairn.errors import Category, ErrorKind
from cairn.events import JobObserver
from cairn.job.preflight import preflight_findings
from cairn.job.run import run_job
from cairn.plan import JobConfig
from cairn.results.model import Outcome
from cairn.task.load import check_task
from testbed import backend_available, run_trial_sync

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "harbor026"

pytestmark = [pytest.mark.docker, pytest.mark.skipif(not backend_available("docker"), reason="no docker")]


@pytest.mark.parametrize(
    "name,rewards",
    [
        ("verifier-env-implies-separate", [1.0]),
        ("multistep-step-env-implies-separate", [1.0, 1.0]),
        ("buildkit-dockerfile", [1.0]),
        ("compose-without-main", [1.0]),
        ("legacy-memory-key", [1.0]),
        ("sidecar-collect-artifact", [1.0]),
    ],
)
def test_fixture_scores_as_on_harbor(tmp_path, name, rewards):
    r = run_trial_sync(FIXTURES / name, "oracle", "docker", tmp_path)
    assert r.error is None, r.error
    assert r.outcome is Outcome.COMPLETED
    assert [s.reward for s in r.steps] == rewards
    assert r.reward == 1.0 and r.passed


def test_sidecar_artifact_manifest_names_its_service(tmp_path):
    r = run_trial_sync(FIXTURES / "sidecar-collect-artifact", "oracle", "docker", tmp_path)
    assert r.passed
    trial_dir = next((tmp_path / "job" / "trials").iterdir())
    art = trial_dir / "steps" / "01-main" / "artifacts"
    manifest = json.loads((art / "manifest.json").read_text())
    assert [(m["source"], m["service"], m["status"]) for m in manifest] == [
        ("/state/count.txt", "counter", "copied")
    ]
    assert (art / "state" / "count.txt").read_text() == "3"


def test_compose_main_from_a_buildkit_dockerfile(tmp_path):
    root = shutil.copytree(FIXTURES / "compose-without-main", tmp_path / "t")
    (root / "environment" / "tool.sh").write_text("#!/bin/sh\necho tool-ok\n")
    (root / "environment" / "Dockerfile").write_text(
        "# syntax=docker/dockerfile:1\nFROM python:3.12-slim\nWORKDIR /app\n"
        "COPY --link --chmod=755 tool.sh /usr/local/bin/tool\n"
    )
    test = root / "tests" / "test.sh"
    test.write_text(
        test.read_text().replace(
            '[ "$(cat /app/word.txt)" = sidecar-word ]',
            '[ "$(cat /app/word.txt)" = sidecar-word ] && [ "$(tool)" = tool-ok ]',
        )
    )
    r = run_trial_sync(root, "oracle", "docker", tmp_path / "jobs")
    assert r.error is None, r.error
    assert r.passed


def test_buildkit_image_is_cached_by_content_hash(tmp_path):
    from cairn.task.load import load_task

    task = load_task(FIXTURES / "buildkit-dockerfile")
    run_trial_sync(FIXTURES / "buildkit-dockerfile", "oracle", "docker", tmp_path / "a")
    import docker

    client = docker.from_env()
    try:
        image = client.images.get(f"cairn-env:{task.env_hash[:16]}")
        assert image.labels.get("cairn.env_hash") == task.env_hash
    finally:
        client.close()
    r = run_trial_sync(FIXTURES / "buildkit-dockerfile", "oracle", "docker", tmp_path / "b")
    assert r.passed and r.image_id == image.id  # the second trial reuses the image


@pytest.mark.parametrize(
    "name,says",
    [
        ("compose-sidecar-missing-command", 'exec: "/opt/missing-server"'),
        ("image-without-shell", "the image has no /bin/sh"),
        ("bad-entrypoint", "the image ENTRYPOINT /opt/missing-entrypoint is not an executable"),
    ],
)
def test_task_fault_at_start_is_a_task_error_not_retried(tmp_path, name, says):
    cfg = JobConfig(
        paths=(FIXTURES / name,),
        agent="oracle",
        backend="docker",
        jobs_dir=tmp_path,
        job_name="j",
        max_retries=2,
        retry_backoff_sec=0,
    )
    (r,) = run_job(cfg).results
    assert r.outcome is Outcome.ERRORED
    assert r.error.kind is ErrorKind.START_FAILED
    assert r.error.category is Category.TASK
    assert says in r.error.message
    trial_dir = next((tmp_path / "j" / "trials").iterdir())
    assert not (trial_dir / "attempts").exists()  # ran once: no infra retry
    assert "_task_fault" not in json.loads((trial_dir / "result.json").read_text())["error"]["detail"]


def test_heredoc_dockerfile_is_refused_at_check_with_the_reason(tmp_path):
    path = FIXTURES / "buildkit-heredoc"
    assert not [f for f in check_task(path) if f.is_error]
    errors = [f.text for f in preflight_findings(path, "docker") if f.is_error]
    assert len(errors) == 1 and "heredocs (`<<EOF`) (line 2)" in errors[0]
    # and the run refuses the same way, before any sandbox starts
    r = run_trial_sync(path, "oracle", "docker", tmp_path)
    assert r.error.kind is ErrorKind.CONFIG_ERROR and "heredocs" in r.error.message


@pytest.mark.slow
def test_check_ok_implies_no_config_error(tmp_path):
    """On every fixture: when the check (validation + preflight) says ok, the run does not end
    in config_error; when it says error, the run ends in config_error. A ``${VAR}`` unset here
    is a check warning and stops the run before it starts (a usage error, exit 2)."""
    from cairn.errors import UsageError

    tasks = sorted(p for p in FIXTURES.iterdir() if (p / "task.toml").is_file())
    predicted: dict[str, bool] = {}
    runnable = []
    for task in tasks:
        findings = check_task(task) + preflight_findings(task, "docker")
        ok = not any(f.is_error for f in findings)
        unset = [f for f in findings if "is not set in this shell" in f.text]
        if unset:
            with pytest.raises(UsageError, match="CAIRN_FIXTURE_SURELY_UNSET_VAR"):
                run_job(
                    JobConfig(
                        paths=(task,), agent="oracle", backend="docker", jobs_dir=tmp_path, job_name=task.name
                    )
                )
            continue
        predicted[task.name] = ok
        runnable.append(task)
    ds = tmp_path / "ds"
    for task in runnable:
        shutil.copytree(task, ds / task.name)
    cfg = JobConfig(
        paths=(ds,),
        agent="oracle",
        backend="docker",
        jobs_dir=tmp_path,
        job_name="all",
        max_retries=0,
        n_concurrent=2,
    )
    results = run_job(cfg).results
    assert len(results) == len(runnable)
    import tomllib

    names = {tomllib.loads((t / "task.toml").read_text())["task"]["name"]: t.name for t in runnable}
    for r in results:
        name = names[r.task.name]
        ended_config_error = r.error is not None and r.error.kind is ErrorKind.CONFIG_ERROR
        assert predicted[name] != ended_config_error, (name, predicted[name], r.error)


def test_storage_notice_once_per_job(tmp_path):
    tasks = tmp_path / "ds"
    for i in (1, 2, 3):
        t = shutil.copytree(FIXTURES / "name-without-org", tasks / f"t{i}")
        (t / "task.toml").write_text(f'[task]\nname = "org/t{i}"\n\n[environment]\nstorage_mb = 2048\n')
    shutil.copytree(FIXTURES / "name-without-org", tasks / "t4")  # asks for no limit
    (tasks / "t4" / "task.toml").write_text('[task]\nname = "org/t4"\n')
    lines: list[str] = []
    cfg = JobConfig(
        paths=(tasks,), agent="oracle", backend="docker", jobs_dir=tmp_path, job_name="j", n_concurrent=2
    )

    class Lines(JobObserver):
        def event(self, event) -> None:
            lines.append(event.text)

    result = run_job(cfg, observer=Lines())
    notices = [ln for ln in lines if "cannot apply storage_mb" in ln]
    assert len(notices) == 1, notices
    warned = {r.task.name: any("storage_mb" in w for w in r.warnings) for r in result.results}
    assert warned == {"org/t1": True, "org/t2": True, "org/t3": True, "org/t4": False}
    assert (
        sum("cannot apply storage_mb" in ln for ln in (tmp_path / "j" / "job.log").read_text().splitlines())
        == 3
    )
