"""The separate verifier (issue 8, design §4.6): a fresh sandbox seeing only declared artifacts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cairn.agents.base import Agent
from taskgen import StepSpec, reward_if, write_task
from testbed import run_trial_sync, validate_result_files

pytestmark = pytest.mark.slow

VERIFIER_DOCKERFILE = "FROM debian:bookworm-slim\nRUN echo verifier-image > /verifier-marker\n"

SEPARATE_TEST = """\
seen=0; planted=0; fresh=0
[ "$(cat /app/out.txt 2>/dev/null)" = "result-42" ] && seen=1
[ -e /app/planted.txt ] && planted=1
[ -e /verifier-marker ] && [ ! -e /agent-marker ] && fresh=1
printf '{"reward": %s, "planted_seen": %s, "fresh_sandbox": %s}' \\
  "$((seen && fresh && !planted))" "$planted" "$fresh" > /logs/verifier/reward.json
"""


def _trial_dir(jobs: Path) -> Path:
    (d,) = list((jobs / "job" / "trials").iterdir())
    return d


def _owned(backend: str, trial_id: str) -> list[str]:
    """Containers still labelled with the trial id (docker; the local backend has its own
    cleanup checks in its conformance suite)."""
    if backend != "docker":
        return []
    import docker

    client = docker.from_env()
    try:
        flt = {"label": [f"cairn.trial={trial_id}"]}
        return [c.name for c in client.containers.list(all=True, filters=flt)]
    finally:
        client.close()


def _root_keys(task: Path, text: str) -> Path:
    """Put root-level keys at the top of task.toml (write_task's extra TOML lands in [task])."""
    toml = task / "task.toml"
    toml.write_text(text + toml.read_text())
    return task


def _separate_task(root: Path, solve: str) -> Path:
    task = write_task(
        root,
        "separate",
        solve=solve,
        test=SEPARATE_TEST,
        dockerfile="FROM debian:bookworm-slim\nRUN echo agent > /agent-marker\nWORKDIR /app\n",
        toml_extra='[verifier]\nenvironment_mode = "separate"\n',
        files={"tests/Dockerfile": VERIFIER_DOCKERFILE},
    )
    return _root_keys(task, 'artifacts = ["/app/out.txt"]\n')


def test_artifact_seen_planted_file_not(tmp_path, backend):
    task = _separate_task(
        tmp_path / "tasks", "echo result-42 > /app/out.txt\necho sneaky > /app/planted.txt\n"
    )
    r = run_trial_sync(task, "oracle", backend, tmp_path / "jobs")
    assert r.error is None, r.error
    assert r.reward == 1.0 and r.passed
    assert r.steps[0].rewards == {"reward": 1.0, "planted_seen": 0.0, "fresh_sandbox": 1.0}
    d = _trial_dir(tmp_path / "jobs")
    validate_result_files(d)
    assert (d / "steps/01-main/artifacts/app/out.txt").read_text().strip() == "result-42"
    assert (d / "steps/01-main/verifier/test-stdout.txt").exists()
    assert _owned(backend, r.trial_id) == []


def test_without_the_artifact_the_separate_verifier_scores_0(tmp_path, backend):
    task = _separate_task(tmp_path / "tasks", "true\n")
    r = run_trial_sync(task, "nop", backend, tmp_path / "jobs")
    assert r.error is None, r.error
    assert r.reward == 0.0 and r.steps[0].rewards["fresh_sandbox"] == 1.0
    assert _owned(backend, r.trial_id) == []


def test_verifier_environment_docker_image_and_artifact_dir_with_exclude(tmp_path, backend):
    """[verifier.environment].docker_image, a directory artifact with an exclude, /logs/artifacts."""
    test = reward_if(
        '[ "$(cat /data/out/keep.txt)" = keep ] && [ ! -e /data/out/skip.log ] '
        '&& [ "$(cat /logs/artifacts/note.txt)" = noted ] && [ "$VMODE" = sep ] '
        "&& [ ! -e /agent-marker ]"
    )
    task = write_task(
        tmp_path / "tasks",
        "sepdir",
        test=test,
        solve="mkdir -p /data/out && echo keep > /data/out/keep.txt && echo x > /data/out/skip.log"
        " && echo noted > /logs/artifacts/note.txt\n",
        dockerfile="FROM debian:bookworm-slim\nRUN echo agent > /agent-marker\n",
        toml_extra='[verifier]\nenvironment_mode = "separate"\n'
        '[verifier.environment]\ndocker_image = "debian:bookworm-slim"\n'
        'network_mode = "no-network"\n[verifier.environment.env]\nVMODE = "sep"\n',
    )
    _root_keys(task, 'artifacts = [{source = "/data/out", exclude = ["*.log"]}]\n')
    r = run_trial_sync(task, "oracle", backend, tmp_path / "jobs")
    assert r.error is None, r.error
    assert r.reward == 1.0


class _Identity(Agent):
    """Runs a per-step command and records the container the agent phase ran in."""

    name = "identity"

    def __init__(self, commands: dict[str, str]) -> None:
        super().__init__()
        self.commands = commands
        self.containers: list[str | None] = []

    async def run(self, instruction, sandbox, context):
        self.containers.append((id(sandbox), sandbox.info.get("container_id")))
        r = await sandbox.exec(self.commands[context.step.name])
        assert r.ok, r.stderr


def test_two_steps_shared_then_separate_same_agent_sandbox(tmp_path, backend):
    task = write_task(
        tmp_path / "tasks",
        "mixed",
        strategy="mean",
        steps=[
            StepSpec(
                "build", test=reward_if('[ "$(cat /app/a.txt)" = A ] && [ -e /agent-marker ]'), min_reward=1.0
            ),
            StepSpec(
                "report",
                test=reward_if(
                    '[ "$(cat /app/report.txt)" = "A+B" ] && [ ! -e /app/a.txt ] '
                    "&& [ ! -e /agent-marker ] && [ -e /verifier-marker ]"
                ),
                toml_extra='artifacts = ["/app/report.txt"]\n'
                '[steps.verifier]\nenvironment_mode = "separate"\n',
            ),
        ],
        dockerfile="FROM debian:bookworm-slim\nRUN echo agent > /agent-marker\nWORKDIR /app\n",
        files={"tests/Dockerfile": VERIFIER_DOCKERFILE},
    )
    agent = _Identity(
        {"build": "echo A > /app/a.txt", "report": 'echo "$(cat /app/a.txt)+B" > /app/report.txt'}
    )
    r = run_trial_sync(task, agent, backend, tmp_path / "jobs")
    assert r.error is None, r.error
    assert [s.reward for s in r.steps] == [1.0, 1.0] and r.passed
    assert len(agent.containers) == 2 and agent.containers[0] == agent.containers[1]
    if backend == "docker":
        assert agent.containers[0][1] is not None  # one container for both agent phases
    d = _trial_dir(tmp_path / "jobs")
    validate_result_files(d)
    manifest = json.loads((d / "steps/02-report/artifacts/manifest.json").read_text())
    assert [m["source"] for m in manifest] == ["/app/report.txt"]
    assert _owned(backend, r.trial_id) == []


def test_separate_mode_without_verifier_image_uses_fresh_copy_of_environment(tmp_path, backend):
    """design §4.6 "else a copy of [environment]": no tests/Dockerfile and no verifier image →
    a fresh sandbox of the task's own environment, which sees the artifact and nothing else."""
    task = write_task(
        tmp_path / "tasks",
        "copyenv",
        solve="echo result-42 > /app/out.txt\necho x > /app/planted.txt\n",
        test=reward_if('[ "$(cat /app/out.txt)" = result-42 ] && [ ! -e /app/planted.txt ]'),
        toml_extra='[verifier]\nenvironment_mode = "separate"\n',
    )
    _root_keys(task, 'artifacts = ["/app/out.txt"]\n')
    r = run_trial_sync(task, "oracle", backend, tmp_path / "jobs")
    assert r.outcome.value == "completed" and r.reward == 1.0
    assert any("fresh copy of the task's environment" in w for w in r.steps[0].warnings)
    assert _owned(backend, r.trial_id) == []


def test_verifier_image_owns_its_test_sh(tmp_path, backend):
    """A step without test.sh in separate mode runs the verifier image's own /tests/test.sh."""
    image_test = "#!/bin/bash\n" + reward_if('[ "$(cat /app/out.txt)" = result-42 ]')
    task = write_task(
        tmp_path / "tasks",
        "imgtests",
        steps=[StepSpec("only", test=None, toml_extra='artifacts = ["/app/out.txt"]\n')],
        toml_extra='[verifier]\nenvironment_mode = "separate"\n',
        files={
            "tests/Dockerfile": "FROM debian:bookworm-slim\nCOPY image-test.sh /tests/test.sh\n",
            "tests/image-test.sh": image_test,
        },
    )
    agent = _Identity({"only": "mkdir -p /app && echo result-42 > /app/out.txt"})
    r = run_trial_sync(task, agent, backend, tmp_path / "jobs")
    assert r.error is None, r.error
    assert r.reward == 1.0


def test_a_failing_verifier_image_build_is_build_failed_not_the_agents_fault(tmp_path, backend):
    task = write_task(
        tmp_path / "tasks",
        "badverifier",
        toml_extra='[verifier]\nenvironment_mode = "separate"\n',
        files={"tests/Dockerfile": "FROM debian:bookworm-slim\nRUN echo verifier-boom-9 && exit 4\n"},
    )
    r = run_trial_sync(task, "nop", backend, tmp_path / "jobs")
    assert r.outcome.value == "errored"
    assert r.error.kind.value == "build_failed" and r.error.category.value == "task"
    assert r.error.phase.value == "verifier" and r.steps[0].source.value == "error"
    assert "verifier-boom-9" in r.error.detail["log_tail"]
    assert _owned(backend, r.trial_id) == []


def test_a_compose_verifier_environment_from_tests(tmp_path):
    """tests/docker-compose.yaml: the separate verifier itself is a compose project."""
    import docker as docker_sdk

    from testbed import backend_available

    if not backend_available("docker"):
        pytest.skip("docker not available")
    compose = (
        "services:\n  main:\n    image: debian:bookworm-slim\n    volumes: [ref:/ref]\n"
        "    depends_on:\n      ref:\n        condition: service_completed_successfully\n"
        "  ref:\n    image: debian:bookworm-slim\n    volumes: [ref:/ref]\n"
        "    command: [sh, -c, 'echo result-42 > /ref/expected']\nvolumes:\n  ref: {}\n"
    )
    test = reward_if('[ "$(cat /app/out.txt)" = "$(cat /ref/expected)" ] && [ ! -e /agent-marker ]')
    task = write_task(
        tmp_path / "tasks",
        "composeverifier",
        test=test,
        solve="echo result-42 > /app/out.txt\n",
        dockerfile="FROM debian:bookworm-slim\nRUN echo a > /agent-marker\nWORKDIR /app\n",
        toml_extra='[verifier]\nenvironment_mode = "separate"\n',
        files={"tests/docker-compose.yaml": compose},
    )
    _root_keys(task, 'artifacts = ["/app/out.txt"]\n')
    r = run_trial_sync(task, "oracle", "docker", tmp_path / "jobs")
    assert r.error is None, r.error
    assert r.reward == 1.0
    client = docker_sdk.from_env()
    try:
        flt = {"label": [f"cairn.trial={r.trial_id}"]}
        assert client.containers.list(all=True, filters=flt) == []
        assert client.volumes.list(filters=flt) == []
    finally:
        client.close()


def test_a_non_root_verifier_reads_artifacts_the_agent_wrote_under_umask_077(tmp_path, backend):
    """Issue #12: ``[verifier] user = "checker"`` in separate mode; the agent (root) wrote its
    artifacts with mode 0600/0700. The restored copies belong to the verifier's user, so an
    honest run scores 1; the host copies keep the agent's modes."""
    test = reward_if(
        '[ "$(id -un)" = checker ] && [ "$(cat /app/out.txt)" = result-42 ] '
        '&& [ "$(cat /app/res/deep.txt)" = deep ]'
    )
    task = write_task(
        tmp_path / "tasks",
        "checker",
        test=test,
        solve="umask 077; mkdir -p /app/res; echo result-42 > /app/out.txt; echo deep > /app/res/deep.txt\n",
        toml_extra='[verifier]\nenvironment_mode = "separate"\nuser = "checker"\n',
        files={"tests/Dockerfile": "FROM debian:bookworm-slim\nRUN useradd -m checker\n"},
    )
    _root_keys(task, 'artifacts = ["/app/out.txt", "/app/res"]\n')
    r = run_trial_sync(task, "oracle", backend, tmp_path / "jobs")
    assert r.error is None, r.error
    assert r.reward == 1.0, (
        _trial_dir(tmp_path / "jobs") / "steps/01-main/verifier/test-stderr.txt"
    ).read_text()
    arts = _trial_dir(tmp_path / "jobs") / "steps/01-main/artifacts/app"
    assert (arts / "out.txt").stat().st_mode & 0o777 == 0o600
    assert (arts / "res" / "deep.txt").read_text().strip() == "deep"
    assert _owned(backend, r.trial_id) == []
