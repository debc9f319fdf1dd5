"""``--executor ray`` on a real Ray cluster started by the test (issue 20): a head and two worker
nodes, separate ``ray start`` processes with their own resources and temp dirs, inside a network
namespace that has only ``lo`` (the cairn driver runs inside it too)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import uuid
from pathlib import Path

import pytest

from cairncli import cairn_argv
from raycluster import ADDRESS, RayCluster, ray_cluster_possible, start_cluster
from taskgen import StepSpec, write_task

pytestmark = [pytest.mark.slow, pytest.mark.local]

pytest.importorskip("ray")

N = 24
MEAN = round((1 + 0.5 + 1) / 3, 6)


def _docker_ok() -> bool:
    from testbed import backend_available

    return backend_available("docker")


@pytest.fixture(scope="module")
def cluster():
    why = ray_cluster_possible()
    if why:
        pytest.skip(why)
    from testbed import local_available

    if not local_available():
        pytest.skip("local backend not available")
    res = {"cairn_trial_slot": 3, "cairn_backend_local": 3}
    if _docker_ok():
        res["cairn_backend_docker"] = 3
    spec = {"cpus": 4, "resources": res, "memory": 1536 * 1024 * 1024}
    c = start_cluster({"w1": spec, "w2": spec})
    try:
        yield c
    finally:
        c.stop()


def _node_names(cluster: RayCluster) -> dict[str, str]:
    """Ray node id → our node name (from the temp dir in its socket paths)."""
    code = (
        f"import ray, json; ray.init(address='{ADDRESS}', logging_level='ERROR'); "
        "print(json.dumps({n['NodeID']: n['ObjectStoreSocketName'] for n in ray.nodes()}))"
    )
    out = cluster.run([sys.executable, "-c", code])
    assert out.returncode == 0, out.stderr
    sockets = json.loads(out.stdout.strip().splitlines()[-1])
    return {nid: Path(sock).relative_to(cluster.root).parts[0] for nid, sock in sockets.items()}


def _three_step(root: Path) -> Path:
    steps = [
        StepSpec("a", solve="sleep 1\n"),
        StepSpec("b", test="echo 0.5 > /logs/verifier/reward.txt\n"),
        StepSpec("c", solve="sleep 1\n"),
    ]
    return write_task(root, "three", steps=steps, network="no-network")


def _cairn(*args: str) -> list[str]:
    return cairn_argv(*args)  # the argv the cluster's node runs (RayCluster.run)


def _results(job: Path) -> dict[str, dict]:
    out = {}
    for p in sorted((job / "trials").glob("*/result.json")):
        data = json.loads(p.read_text())
        out[data["trial_id"]] = data
    return out


def _wait_results(job: Path, n: int, proc, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while len(list((job / "trials").glob("*/result.json"))) < n:
        assert proc.poll() is None, "the driver ended before the test could interrupt it"
        assert time.monotonic() < deadline, f"fewer than {n} trials finished in {timeout} s"
        time.sleep(0.2)


def _ray_run(cluster: RayCluster, task: Path, jobs: Path, name: str, *extra: str) -> list[str]:
    return _cairn(
        "run",
        "-p",
        str(task),
        "-k",
        str(N),
        "-e",
        "local",
        "--executor",
        "ray",
        "--ray-address",
        ADDRESS,
        "-n",
        "6",
        "--jobs-dir",
        str(jobs),
        "--job-name",
        name,
        "--json",
        *extra,
    )


def _no_leftovers(cluster: RayCluster, job: str) -> None:
    out = cluster.run(_cairn("clean", "--executor", "ray", "--ray-address", ADDRESS, "--job", job))
    assert out.returncode == 0, out.stdout + out.stderr
    from cairn.sandbox.local.backend import find_local_sandboxes

    left = [str(f) for f, marker in find_local_sandboxes() if marker.get("job_id") == job]
    assert left == []


def test_ray_job_runs_on_workers_and_scores_as_local(cluster: RayCluster, tmp_path: Path) -> None:
    from cairn.job import run_job
    from cairn.plan import JobConfig
    from cairn.results.schemas import load_schema

    task = _three_step(tmp_path / "tasks")
    jobs = tmp_path / "jobs"
    out = cluster.run(_ray_run(cluster, task, jobs, "ray24"))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    ray_results = _results(jobs / "ray24")
    assert len(ray_results) == N

    names = _node_names(cluster)
    ran_on = {names[r["executor"]["node"]] for r in ray_results.values()}
    assert ran_on <= {"w1", "w2"} and ran_on  # never on the head (it has no trial slot)
    assert all(r["executor"]["name"] == "ray" for r in ray_results.values())

    local = run_job(
        JobConfig(
            paths=(task,), attempts=N, backend="local", n_concurrent=4, jobs_dir=jobs, job_name="local24"
        )
    )
    local_scores = {
        r.trial_id: (r.outcome.value, r.reward, [s.reward for s in r.steps]) for r in local.results
    }
    ray_scores = {
        tid: (r["outcome"], r["reward"], [s["reward"] for s in r["steps"]]) for tid, r in ray_results.items()
    }
    assert ray_scores == local_scores
    assert {round(r["reward"], 6) for r in ray_results.values()} == {MEAN}

    import jsonschema

    job = jobs / "ray24"
    jsonschema.validate(json.loads((job / "job.json").read_text()), load_schema("job"))
    jsonschema.validate(json.loads((job / "summary.json").read_text()), load_schema("summary"))
    for d in (job / "trials").iterdir():
        for f, schema in (("result.json", "result"), ("steps.json", "steps"), ("config.json", "config")):
            jsonschema.validate(json.loads((d / f).read_text()), load_schema(schema))
        assert list((d / "steps").iterdir()), "the worker's step folders came back"
    log = (job / "job.log").read_text()
    assert log.count("step 3/3 c: reward 1.00") == N  # the workers' event lines, live in job.log
    assert json.loads((job / "job.json").read_text())["config"]["executor"] == "ray"


def test_driver_killed_then_resume_completes(cluster: RayCluster, tmp_path: Path) -> None:
    task = _three_step(tmp_path / "tasks")
    jobs = tmp_path / "jobs"
    job = jobs / "dk"
    proc = cluster.popen(_ray_run(cluster, task, jobs, "dk"), log=tmp_path / "driver.log")
    try:
        _wait_results(job, 4, proc)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    before = {p.parent.name: p.read_bytes() for p in (job / "trials").glob("*/result.json")}
    assert 4 <= len(before) < N

    out = cluster.run(_cairn("resume", str(job), "--executor", "ray", "--ray-address", ADDRESS, "--json"))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    results = _results(job)
    assert len(results) == N and len(list((job / "trials").iterdir())) == N
    assert all(r["outcome"] == "completed" and round(r["reward"], 6) == MEAN for r in results.values())
    for name, data in before.items():  # finished before the kill: kept, never re-run
        assert (job / "trials" / name / "result.json").read_bytes() == data
    assert json.loads(out.stdout)["n_trials"] == N
    _no_leftovers(cluster, "dk")


def test_worker_with_another_cairn_version_refuses_before_a_sandbox(
    cluster: RayCluster, tmp_path: Path
) -> None:
    from cairn import __version__

    task = write_task(tmp_path / "tasks", "one")
    jobs = tmp_path / "jobs"
    code = (  # a driver that claims another cairn version than the workers run
        "import cairn.job.executors.ray as r\n"
        "r.__version__ = '0.0.0-other'\n"
        "from cairn.job import run_job\nfrom cairn.plan import JobConfig\n"
        f"run_job(JobConfig(paths=({str(task)!r},), backend='local', executor='ray', "
        f"ray_address={ADDRESS!r}, max_retries=0, jobs_dir={str(jobs)!r}, job_name='vg'))\n"
    )
    out = cluster.run([sys.executable, "-c", code])
    assert out.returncode == 0, out.stderr[-3000:]
    (result,) = _results(jobs / "vg").values()
    assert result["outcome"] == "errored"
    assert result["error"]["kind"] == "start_failed" and result["error"]["category"] == "infra"
    assert f"runs cairn {__version__}, the driver cairn 0.0.0-other" in result["error"]["message"]
    assert [s["source"] for s in result["steps"]] == ["not-run"]  # no sandbox was started
    assert result["timings"].get("environment_sec") is None
    from cairn.sandbox.local.backend import find_local_sandboxes

    assert [f for f, m in find_local_sandboxes() if m.get("job_id") == "vg"] == []


def test_ctrl_c_cancels_remote_trials_and_workers_remove_their_sandboxes(
    cluster: RayCluster, tmp_path: Path
) -> None:
    task = _three_step(tmp_path / "tasks")
    jobs = tmp_path / "jobs"
    job = jobs / "cc"
    proc = cluster.popen(_ray_run(cluster, task, jobs, "cc"), log=tmp_path / "driver.log")
    try:
        _wait_results(job, 2, proc)
        os.kill(proc.pid, signal.SIGINT)
        proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    results = _results(job)
    assert len(results) == N  # every trial recorded: finished, or cancelled
    outcomes = {r["outcome"] for r in results.values()}
    assert outcomes <= {"completed", "cancelled"} and "cancelled" in outcomes
    from cairn.sandbox.local.backend import find_local_sandboxes

    assert [f for f, m in find_local_sandboxes() if m.get("job_id") == "cc"] == []
    assert json.loads((job / "job.json").read_text())["stopped_by"] == "interrupted"


@pytest.mark.docker
def test_docker_two_trials_on_two_nodes_share_the_engine(cluster: RayCluster, tmp_path: Path) -> None:
    if not _docker_ok():
        pytest.skip("no docker engine")
    import docker

    # 1 GiB each and 1.5 GiB per worker node: Ray can place only one trial per node
    task = write_task(
        tmp_path / "tasks",
        "dock",
        toml_extra="",
        test="test -f /etc/os-release && echo 1 > /logs/verifier/reward.txt\n",
    )
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace("[environment]\n", "[environment]\nmemory_mb = 1024\n"))
    jobs = tmp_path / "jobs"
    name = f"dock2-{uuid.uuid4().hex[:8]}"  # this test's own label on the shared engine
    out = cluster.run(
        _cairn(
            "run",
            "-p",
            str(task),
            "-k",
            "2",
            "-e",
            "docker",
            "--executor",
            "ray",
            "--ray-address",
            ADDRESS,
            "-n",
            "2",
            "--jobs-dir",
            str(jobs),
            "--job-name",
            name,
            "--json",
        )
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    results = _results(jobs / name)
    assert len(results) == 2
    assert all(r["passed"] and r["backend"] == "docker" for r in results.values())
    names = _node_names(cluster)
    assert {names[r["executor"]["node"]] for r in results.values()} == {"w1", "w2"}
    client = docker.from_env()
    try:
        left = client.containers.list(all=True, filters={"label": f"cairn.job={name}"})
        assert [c.name for c in left] == []
    finally:
        client.close()


def test_worker_node_killed_mid_run_is_retried_on_the_other(cluster: RayCluster, tmp_path: Path) -> None:
    """Runs last: it leaves the cluster with one worker node."""
    task = _three_step(tmp_path / "tasks")
    jobs = tmp_path / "jobs"
    job = jobs / "kw"
    names = _node_names(cluster)
    proc = cluster.popen(
        _ray_run(cluster, task, jobs, "kw", "--max-retries", "3"), log=tmp_path / "driver.log"
    )
    try:
        _wait_results(job, 3, proc)
        os.kill(cluster.raylet_pid("w1"), signal.SIGKILL)
        assert proc.wait(timeout=600) == 0, (tmp_path / "driver.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    results = _results(job)
    assert len(results) == N and len(list((job / "trials").iterdir())) == N
    assert all(r["outcome"] == "completed" and round(r["reward"], 6) == MEAN for r in results.values())
    lost = []
    for d in (job / "trials").iterdir():
        for a in sorted((d / "attempts").glob("*/result.json")):
            err = json.loads(a.read_text())["error"]
            assert err["kind"] == "sandbox_lost" and err["category"] == "infra"
            lost.append(d.name)
    assert lost, "killing w1 hit no running trial"
    for name in lost:  # each retried trial finished on the surviving node
        final = json.loads((job / "trials" / name / "result.json").read_text())
        assert names[final["executor"]["node"]] == "w2"
    _no_leftovers(cluster, "kw")
