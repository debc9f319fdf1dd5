"""``cairn tasks init`` skeletons: valid under --strict, oracle passes, nop scores 0."""

from __future__ import annotations

import io
import tarfile
import uuid
from pathlib import Path

import pytest

from cairn.errors import UsageError
from cairn.task.init import init_task
from cairn.task.load import check_task, load_task


def test_single_step_skeleton_passes_strict_check(tmp_path):
    root = init_task("hello", [], tmp_path)
    assert root == tmp_path / "hello"
    assert check_task(root, strict=True) == []
    task = load_task(root, strict=True)
    assert not task.multi_step and [s.name for s in task.steps] == ["main"]
    assert task.environment.effective_network_mode == "no-network"
    assert (root / "environment/Dockerfile").read_text().startswith("FROM debian:bookworm-slim\n")
    assert "WORKDIR /app" in (root / "environment/Dockerfile").read_text()
    assert "set -e" not in (root / "tests/test.sh").read_text().replace("`set -e`", "")


def test_multi_step_skeleton_passes_strict_check(tmp_path):
    root = init_task("org/three", ["a", "b", "c"], tmp_path)
    assert root == tmp_path / "three"
    assert check_task(root, strict=True) == []
    task = load_task(root)
    assert task.name == "org/three" and task.multi_step
    assert [s.name for s in task.steps] == ["a", "b", "c"]
    assert all(s.test_sh == root / "steps" / s.name / "tests/test.sh" for s in task.steps)
    assert all(s.solve_sh is not None and s.min_reward == 1.0 for s in task.steps)


@pytest.mark.parametrize(
    "name, steps",
    [
        ("bad name", []),
        ("../x", []),
        ("ok", ["a", "a"]),
        ("ok", ["a/b"]),
        ("ok", [".."]),
    ],
)
def test_invalid_names_are_usage_errors(tmp_path, name, steps):
    with pytest.raises(UsageError, match=r"invalid (task|step) name|duplicate step name"):
        init_task(name, steps, tmp_path)


def test_refuses_a_non_empty_target(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "keep.txt").write_text("mine")
    with pytest.raises(UsageError, match="already exists and is not empty"):
        init_task("t", [], tmp_path)
    assert (tmp_path / "t" / "keep.txt").read_text() == "mine"


# -- the skeleton really runs: oracle → 1 per step, nop → 0 (plain Docker, no trial engine) ----------


def _tar_of(folder: Path, arcname: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(folder, arcname=arcname)
    return buf.getvalue()


class _Box:
    """A container from the task's environment/ (built with the classic builder)."""

    def __init__(self, client, task_dir: Path, tag: str) -> None:
        self.client = client
        self.image, _ = client.images.build(
            path=str(task_dir / "environment"), tag=tag, labels={"cairn.test": "task-init"}, rm=True
        )
        self.container = client.containers.run(
            tag, ["sleep", "infinity"], detach=True, network_disabled=True, labels={"cairn.test": "task-init"}
        )

    def sh(self, cmd: str) -> tuple[int, str]:
        code, out = self.container.exec_run(["bash", "-c", cmd])
        return code, out.decode()

    def put(self, folder: Path, dest: str) -> None:
        assert self.container.put_archive("/", _tar_of(folder, dest.lstrip("/")))

    def reward(self, test_dirs) -> str:
        self.sh("rm -rf /logs/verifier /tests && mkdir -p /logs/verifier")
        for d in test_dirs:
            self.put(d, "/tests")
        self.sh("cd /tests && bash test.sh")
        return self.sh("cat /logs/verifier/reward.txt")[1].strip()

    def close(self) -> None:
        self.container.remove(force=True)
        self.client.images.remove(self.image.id, force=True)


@pytest.fixture
def docker_client():
    from testbed import need_backend

    need_backend("docker")
    import docker

    return docker.from_env(timeout=10)


@pytest.mark.docker
@pytest.mark.parametrize("steps", [[], ["write", "append", "check"]])
def test_skeleton_oracle_passes_and_nop_scores_zero(tmp_path, docker_client, steps):
    task = load_task(init_task("skel", steps, tmp_path))
    tag = f"cairn-test-init:{uuid.uuid4().hex[:12]}"
    oracle = _Box(docker_client, task.path, tag)
    try:
        for step in task.steps:
            oracle.sh("rm -rf /solution")
            for d in step.solution_dirs:
                oracle.put(d, "/solution")
            code, out = oracle.sh(f"cd /app && bash {('/solution/' + step.solve_sh.name)}")
            assert code == 0, out
            assert oracle.reward(step.tests_dirs) == "1", step.name
    finally:
        oracle.close()
    nop = _Box(docker_client, task.path, tag)
    try:
        assert nop.reward(task.steps[0].tests_dirs) == "0"
    finally:
        nop.close()


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("steps", [[], ["write", "append"]])
def test_skeleton_through_the_trial_engine(tmp_path, docker_client, steps):
    from testbed import run_trial_sync  # the root tests/conftest.py helper

    root = init_task("skel", steps, tmp_path / "tasks")
    oracle = run_trial_sync(root, "oracle", "docker", tmp_path / "jobs-oracle")
    assert oracle.outcome == "completed" and oracle.reward == 1.0 and oracle.passed
    assert [s.reward for s in oracle.steps] == [1.0] * max(1, len(steps))
    nop = run_trial_sync(root, "nop", "docker", tmp_path / "jobs-nop")
    assert nop.steps[0].reward == 0.0 and not nop.passed
