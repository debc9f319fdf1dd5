"""``pre_artifacts.sh`` (issue 22, Evolve): runs after each step's agent phase, before artifact
collection; its output lands in the step's artifacts; a failing one is recorded, not fatal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cairn.task.load import load_task
from taskgen import StepSpec, write_task
from testbed import run_trial_sync

GIT_DOCKERFILE = (
    "FROM debian:bookworm-slim\n"
    "RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends git >/dev/null "
    "&& rm -rf /var/lib/apt/lists/*\n"
    "WORKDIR /app\n"
    "RUN git init -q . && printf 'one\\n' > notes.txt && git add notes.txt && "
    "git -c user.email=t@t -c user.name=t commit -qm base\n"
)

DIFF_HOOK = "#!/bin/bash\nset -e\ncd /app\ngit diff > /logs/artifacts/model.patch\n"


def _trial_dir(jobs: Path) -> Path:
    (d,) = list((jobs / "job" / "trials").iterdir())
    return d


def test_step_copy_wins_over_the_task_root(tmp_path):
    task = write_task(
        tmp_path,
        "t",
        steps=[StepSpec("a"), StepSpec("b")],
        files={"pre_artifacts.sh": "echo root\n", "steps/b/pre_artifacts.sh": "echo step\n"},
    )
    a, b = load_task(task).steps
    assert a.pre_artifacts_sh == task / "pre_artifacts.sh"
    assert b.pre_artifacts_sh == task / "steps" / "b" / "pre_artifacts.sh"
    single = write_task(tmp_path, "s")
    assert load_task(single).steps[0].pre_artifacts_sh is None


@pytest.mark.docker
@pytest.mark.slow
def test_git_diff_patch_lands_in_artifacts_and_a_failure_does_not_stop_collection(tmp_path):
    from testbed import backend_available

    if not backend_available("docker"):
        pytest.skip("no Docker engine")
    task = write_task(
        tmp_path / "tasks",
        "patch",
        dockerfile=GIT_DOCKERFILE,
        steps=[
            StepSpec("edit", solve="printf 'one\\ntwo\\n' > /app/notes.txt\n"),
            StepSpec(
                "break",
                solve="printf 'three\\n' >> /app/notes.txt\n",
                toml_extra='artifacts = ["/app/notes.txt"]',
            ),
        ],
        files={
            "pre_artifacts.sh": DIFF_HOOK,
            "steps/break/pre_artifacts.sh": "#!/bin/bash\necho half > /logs/artifacts/partial.txt\n"
            "echo 'no patch today' >&2\nexit 4\n",
        },
    )
    r = run_trial_sync(task, "oracle", "docker", tmp_path / "jobs")
    assert r.error is None and [s.reward for s in r.steps] == [1.0, 1.0]
    d = _trial_dir(tmp_path / "jobs")
    edit = d / "steps" / "01-edit"
    patch = (edit / "artifacts" / "model.patch").read_text()
    assert "+two" in patch and "a/notes.txt" in patch
    assert not any("pre_artifacts" in w for w in r.steps[0].warnings)
    assert "exit_code: 0" in (edit / "agent" / "pre-artifacts.txt").read_text()

    brk = d / "steps" / "02-break"
    (warning,) = [w for w in r.steps[1].warnings if "pre_artifacts.sh" in w]
    assert "exited 4" in warning and "no patch today" in warning
    # collection still ran: the declared artifact and what the hook wrote before failing
    assert (brk / "artifacts" / "app" / "notes.txt").read_text() == "one\ntwo\nthree\n"
    assert (brk / "artifacts" / "partial.txt").read_text() == "half\n"
    # the step's own hook won: the root's git diff did not run again, and step 1's patch is
    # not shown as this step's (each step starts with an empty /logs/artifacts, as in Harbor)
    assert not (brk / "artifacts" / "model.patch").exists()
    manifest = json.loads((brk / "artifacts" / "manifest.json").read_text())
    assert all(row["status"] == "copied" for row in manifest)


def test_each_steps_logs_artifacts_are_its_own(tmp_path, backend):
    """Three steps whose agents each write /logs/artifacts/sN.txt (step 2 writes nothing): a
    step's artifacts hold only what was written during it, as Harbor's multi-step trial moves
    the folder's contents into the step's output after every step; the files the agent keeps
    elsewhere persist as usual."""
    steps = [
        StepSpec("one", solve="echo 1 > /logs/artifacts/s1.txt; echo keep > /tmp/kept\n"),
        StepSpec("two", solve="true\n"),
        StepSpec(
            "three",
            solve="mkdir -p /logs/artifacts/d; echo 3 > /logs/artifacts/d/s3.txt\n",
            test='[ "$(cat /tmp/kept)" = keep ] && echo 1 > /logs/verifier/reward.txt '
            "|| echo 0 > /logs/verifier/reward.txt\n",
        ),
    ]
    task = write_task(tmp_path / "tasks", "arts", steps=steps)
    r = run_trial_sync(task, "oracle", backend, tmp_path / "jobs")
    assert r.error is None and [s.reward for s in r.steps] == [1.0, 1.0, 1.0]
    d = _trial_dir(tmp_path / "jobs") / "steps"

    def files(step: str) -> list[str]:
        root = d / step / "artifacts"
        return (
            sorted(
                str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name != "manifest.json"
            )
            if root.exists()
            else []
        )

    assert files("01-one") == ["s1.txt"]
    assert files("02-two") == []
    assert files("03-three") == ["d/s3.txt"]
