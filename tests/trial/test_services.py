"""Start-up services (issue 22): an image ENTRYPOINT that dies before the agent starts fails the
trial as the task's ``service_exited``; a keep-alive entrypoint starts nothing extra."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from cairn.job.run import run_job
from cairn.plan import JobConfig
from cairn.sandbox.base import NetworkMode, SandboxSpec
from cairn.sandbox.docker.exec_stream import is_keep_alive
from taskgen import write_task

BASE = "debian:bookworm-slim"


def test_keep_alive_entrypoints_are_recognised():
    assert is_keep_alive(["sleep", "infinity"])
    assert is_keep_alive(["/usr/bin/tail", "-f", "/dev/null"])
    assert is_keep_alive(["/bin/sh", "-c", "exec sleep infinity"])
    assert not is_keep_alive(["/entry.sh", "sleep", "infinity"])
    assert not is_keep_alive(["sleep", "5"])
    assert not is_keep_alive([])


def _docker():
    from testbed import backend_available

    if not backend_available("docker"):
        pytest.skip("no Docker engine")


@pytest.mark.docker
@pytest.mark.slow
def test_service_exiting_3_errors_the_trial_not_retried(tmp_path):
    _docker()
    df = (
        f"FROM {BASE}\nWORKDIR /app\n"
        'ENTRYPOINT ["/bin/sh", "-c", "echo db: cannot open data dir >&2; exit 3"]\n'
    )
    task = write_task(tmp_path / "tasks", "svc", dockerfile=df)
    result = run_job(
        JobConfig(
            paths=(task,),
            backend="docker",
            jobs_dir=tmp_path / "jobs",
            job_name="job",
            agent="nop",
            max_retries=2,
            retry_backoff_sec=0.1,
        )
    )
    (r,) = result.results
    assert r.outcome.value == "errored"
    assert r.error.kind.value == "service_exited" and r.error.category.value == "task"
    assert r.error.phase.value == "environment"
    assert r.error.detail["exit_code"] == 3
    assert "db: cannot open data dir" in r.error.detail["log_tail"]
    trial = result.job_dir / "trials" / r.trial_name
    assert not (trial / "attempts").exists()  # task errors are not retried
    on_disk = json.loads((trial / "result.json").read_text())
    assert on_disk["error"]["kind"] == "service_exited"
    assert on_disk["steps_run"] == 0 and on_disk["error"]["detail"]["exit_code"] == 3


@pytest.mark.docker
@pytest.mark.slow
def test_service_that_keeps_running_or_exits_0_is_fine(tmp_path):
    _docker()
    runs = (
        'ENTRYPOINT ["/bin/sh", "-c", "echo up > /tmp/up; exec sleep 1000"]\n',
        'ENTRYPOINT ["/bin/sh", "-c", "echo init done"]\n',
    )
    for i, ep in enumerate(runs):
        task = write_task(
            tmp_path / f"tasks{i}",
            "svc",
            dockerfile=f"FROM {BASE}\n{ep}",
            test="echo 1 > /logs/verifier/reward.txt\n",
        )
        result = run_job(
            JobConfig(
                paths=(task,), backend="docker", jobs_dir=tmp_path / f"jobs{i}", job_name="job", agent="nop"
            )
        )
        (r,) = result.results
        assert r.error is None and r.reward == 1.0, r.error


@pytest.mark.docker
def test_keep_alive_entrypoint_starts_nothing(tmp_path):
    _docker()
    from cairn.sandbox.docker.backend import DockerSandbox

    env = tmp_path / "env"
    env.mkdir()
    (env / "Dockerfile").write_text(f'FROM {BASE}\nENTRYPOINT ["sleep", "infinity"]\n')

    async def main():
        spec = SandboxSpec(
            env_dir=env,
            network_mode=NetworkMode.NO_NETWORK,
            job_id="svc",
            trial_id=f"svc-{time.time_ns()}",
            name="svc",
        )
        async with DockerSandbox(spec) as sb:
            procs = await sb.processes()
            return [p.cmdline for p in procs], await sb.service_exit()

    cmdlines, ended = asyncio.run(main())
    assert not any(c.startswith("sleep infinity") for c in cmdlines), cmdlines
    assert ended is None


@pytest.mark.docker
@pytest.mark.slow
def test_service_dying_during_the_agent_phase_is_the_tasks_error_not_a_score(tmp_path):
    """The service is up when the agent starts and dies (exit 5) while the agent works: the
    trial is errored ``service_exited`` with the step, exit code and log tail; the verifier,
    which would have passed, never scores it."""
    _docker()
    from cairn.sandbox.docker.exec_stream import SERVICE_EXIT_FILE

    service = (
        "echo db: ready; while [ ! -e /tmp/agent-started ]; do sleep 0.05; done; "
        "echo db: data file corrupted >&2; exit 5"
    )
    df = f'FROM {BASE}\nWORKDIR /app\nENTRYPOINT ["/bin/sh", "-c", "{service}"]\n'
    # the oracle's solve.sh: starts working, then waits (bounded) until the service is gone
    solve = (
        f"touch /tmp/agent-started\nfor i in $(seq 200); do [ -e {SERVICE_EXIT_FILE} ] "
        "&& break; sleep 0.05; done\necho done > /app/out.txt\n"
    )
    task = write_task(
        tmp_path / "tasks", "svc-mid", dockerfile=df, solve=solve, test="echo 1 > /logs/verifier/reward.txt\n"
    )
    result = run_job(
        JobConfig(
            paths=(task,),
            backend="docker",
            jobs_dir=tmp_path / "jobs",
            job_name="job",
            agent="oracle",
            max_retries=2,
            retry_backoff_sec=0.1,
        )
    )
    (r,) = result.results
    assert r.outcome.value == "errored" and r.reward is None
    assert r.error.kind.value == "service_exited" and r.error.category.value == "task"
    assert r.error.step == "main" and "during step 'main'" in r.error.message
    assert r.error.detail["exit_code"] == 5
    assert "db: data file corrupted" in r.error.detail["log_tail"]
    (step,) = r.steps
    assert step.source.value == "error" and step.reward is None  # not scored as the agent's
    trial = result.job_dir / "trials" / r.trial_name
    assert not (trial / "attempts").exists()  # a task error: not retried
    assert not (trial / "steps" / "01-main" / "verifier" / "reward.txt").exists()
    assert result.exit_code == 1


@pytest.mark.docker
@pytest.mark.slow
def test_compose_sidecar_dying_during_the_agent_phase_errors_the_trial(tmp_path):
    """A compose project's ``db`` service is up when the agent starts; the agent's first
    connection makes it crash (exit 4). The trial is errored ``service_exited`` naming the
    service, with its exit code and log tail, and is not scored or retried."""
    _docker()
    server = (
        "import socket,sys; s=socket.socket(); "
        "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('', 9000)); "
        "s.listen(); print('db: ready', flush=True); s.accept(); "
        "print('db: crashed on the first query', file=sys.stderr, flush=True); sys.exit(4)"
    )
    compose = (
        "services:\n  main:\n    build: .\n"
        f'  db:\n    image: {BASE}\n    command: [python3, -c, "{server}"]\n'
    )
    # the oracle: one connection (retried until db listens), then wait (bounded) until the
    # engine has taken db's name off the network, i.e. its container has ended
    solve = (
        "python3 - <<'PY'\nimport socket, time\n"
        "for _ in range(200):\n    try:\n"
        "        socket.create_connection(('db', 9000), timeout=2).close(); break\n"
        "    except OSError:\n        time.sleep(0.05)\n"
        "for _ in range(200):\n    try:\n        socket.getaddrinfo('db', 9000)\n"
        "    except OSError:\n        break\n    time.sleep(0.05)\nPY\n"
        "echo done > /app/out.txt\n"
    )
    task = write_task(
        tmp_path / "tasks",
        "sidecar",
        solve=solve,
        test="echo 1 > /logs/verifier/reward.txt\n",
        files={"environment/docker-compose.yaml": compose},
    )
    result = run_job(
        JobConfig(
            paths=(task,),
            backend="docker",
            jobs_dir=tmp_path / "jobs",
            job_name="job",
            agent="oracle",
            max_retries=2,
            retry_backoff_sec=0.1,
        )
    )
    (r,) = result.results
    assert r.outcome.value == "errored" and r.reward is None, r.error
    assert r.error.kind.value == "service_exited" and r.error.category.value == "task"
    assert r.error.message.startswith("compose service 'db' exited 4 during step 'main'")
    assert r.error.detail["service"] == "db" and r.error.detail["exit_code"] == 4
    assert "db: crashed on the first query" in r.error.detail["log_tail"]
    trial = result.job_dir / "trials" / r.trial_name
    assert not (trial / "attempts").exists()
    assert not (trial / "steps" / "01-main" / "verifier" / "reward.txt").exists()
