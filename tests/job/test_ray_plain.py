"""``--executor ray`` on a cluster started the ordinary way (issue 29): ``ray start --head`` and
``ray start --address=…``, no custom resources, no CPU counts, in a network namespace that has
only ``lo`` (tests/helpers/raycluster.py). Trials are placed by CPUs; each node's backends are
found by probing it; a node whose ``DOCKER_HOST`` answers nothing never gets a docker trial.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from cairncli import cairn_argv
from raycluster import ADDRESS, RayCluster, ray_cluster_possible, start_plain_cluster
from taskgen import write_task

pytestmark = [pytest.mark.slow, pytest.mark.local]

pytest.importorskip("ray")

NO_DOCKER = {"DOCKER_HOST": "unix:///nonexistent/cairn-test/docker.sock"}
"""A node's environment that makes it a node without Docker."""


def _docker_ok() -> bool:
    from testbed import backend_available

    return backend_available("docker")


def _possible() -> None:
    why = ray_cluster_possible()
    if why:
        pytest.skip(why)
    from testbed import local_available

    if not local_available():
        pytest.skip("local backend not available")


@pytest.fixture(scope="module")
def cluster():
    """Three plain nodes; ``nodock`` has no Docker engine."""
    _possible()
    c = start_plain_cluster({"head": {}, "w1": {}, "nodock": NO_DOCKER})
    try:
        yield c
    finally:
        c.stop()


def _cairn(*args: str) -> list[str]:
    return cairn_argv(*args)  # the argv the cluster's node runs (RayCluster.run)


def _results(job: Path) -> dict[str, dict]:
    out = {}
    for p in sorted((job / "trials").glob("*/result.json")):
        data = json.loads(p.read_text())
        out[data["trial_id"]] = data
    return out


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


def _run(task: Path, jobs: Path, name: str, k: int, backend: str, *extra: str) -> list[str]:
    return _cairn(
        "run",
        "-p",
        str(task),
        "-k",
        str(k),
        "-e",
        backend,
        "--executor",
        "ray",
        "--ray-address",
        ADDRESS,
        "-n",
        str(k),
        "--jobs-dir",
        str(jobs),
        "--job-name",
        name,
        "--json",
        *extra,
    )


def _running_sandboxes(job: str) -> int:
    from cairn.sandbox.local.backend import find_local_sandboxes

    return sum(1 for _f, marker in find_local_sandboxes() if marker.get("job_id") == job)


def _no_leftovers(cluster: RayCluster, job: str) -> None:
    out = cluster.run(_cairn("clean", "--executor", "ray", "--ray-address", ADDRESS, "--job", job))
    assert out.returncode == 0, out.stdout + out.stderr
    assert _running_sandboxes(job) == 0


def test_plain_cluster_runs_six_trials_spread_over_nodes(cluster: RayCluster, tmp_path: Path) -> None:
    task = write_task(tmp_path / "tasks", "plain", solve="sleep 3\n")
    jobs = tmp_path / "jobs"
    out = cluster.run(_run(task, jobs, "plain6", 6, "local"))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    results = _results(jobs / "plain6")
    assert len(results) == 6
    assert all(r["outcome"] == "completed" and r["reward"] == 1.0 for r in results.values())
    names = _node_names(cluster)
    ran_on = {names[r["executor"]["node"]] for r in results.values()}
    assert len(ran_on) >= 2, ran_on  # 1 CPU per trial, 2 CPUs per node: spread
    _no_leftovers(cluster, "plain6")


def test_a_task_asking_more_cpus_than_a_node_has_is_placed_by_one_cpu_by_default(
    cluster: RayCluster, tmp_path: Path
) -> None:
    """Issue 29: one CPU per trial by default, whatever the task's ``[environment] cpus``
    (here 4, more than any 2-CPU node holds); ``--ray-trial-cpus 4`` still asks for 4, which
    no node has: a clear error naming the flag."""
    task = write_task(tmp_path / "tasks", "wide")
    toml = task / "task.toml"
    toml.write_text(toml.read_text() + "cpus = 4\n")  # [environment] is the last table
    jobs = tmp_path / "jobs"
    out = cluster.run(_run(task, jobs, "wide1", 2, "local"))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    results = _results(jobs / "wide1")
    assert len(results) == 2 and all(r["reward"] == 1.0 for r in results.values()), results
    out = cluster.run(_run(task, jobs, "wide4", 1, "local", "--ray-trial-cpus", "4"))
    assert out.returncode != 0
    said = out.stdout + out.stderr + "".join(json.dumps(r) for r in _results(jobs / "wide4").values())
    assert "the trial asks Ray for 4 CPUs and no node that runs backend local has more than 2" in said, said[
        -3000:
    ]
    _no_leftovers(cluster, "wide1")


@pytest.mark.docker
def test_node_without_docker_never_gets_a_docker_trial(cluster: RayCluster, tmp_path: Path) -> None:
    if not _docker_ok():
        pytest.skip("no docker engine")
    task = write_task(
        tmp_path / "tasks", "dock", test="test -f /etc/os-release && echo 1 > /logs/verifier/reward.txt\n"
    )
    jobs = tmp_path / "jobs"
    # six at once, four CPUs on the nodes with Docker: Ray would use nodock's two if it could
    out = cluster.run(_run(task, jobs, "dock6", 6, "docker"))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    results = _results(jobs / "dock6")
    assert len(results) == 6
    assert all(r["passed"] and r["backend"] == "docker" for r in results.values())
    names = _node_names(cluster)
    assert {names[r["executor"]["node"]] for r in results.values()} <= {"head", "w1"}
    assert "cannot run backend" not in (jobs / "dock6" / "job.log").read_text()  # probed first


@pytest.mark.docker
def test_a_node_not_probed_is_found_without_docker_by_its_first_trial(
    cluster: RayCluster, tmp_path: Path
) -> None:
    """As a node that joins after the probes: the driver skips them, Ray places trials on
    nodock too, and each there is placed again elsewhere without spending an attempt."""
    if not _docker_ok():
        pytest.skip("no docker engine")
    task = write_task(
        tmp_path / "tasks", "late", test="test -f /etc/os-release && echo 1 > /logs/verifier/reward.txt\n"
    )
    jobs = tmp_path / "jobs"
    code = (
        "import cairn.job.executors.ray as r\n"
        "r.probe_nodes = lambda *a, **k: None  # no node answers the probe\n"
        "from cairn.job import run_job\nfrom cairn.plan import JobConfig\n"
        f"job = run_job(JobConfig(paths=({str(task)!r},), attempts=6, n_concurrent=6, "
        f"backend='docker', executor='ray', ray_address={ADDRESS!r}, max_retries=0, "
        f"jobs_dir={str(jobs)!r}, job_name='late6'))\n"
        "print(len(job.results))\n"
    )
    out = cluster.run([sys.executable, "-c", code])
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    results = _results(jobs / "late6")
    assert len(results) == 6 and all(r["passed"] for r in results.values())
    names = _node_names(cluster)
    assert {names[r["executor"]["node"]] for r in results.values()} <= {"head", "w1"}
    assert not list((jobs / "late6" / "trials").glob("*/attempts/*"))  # no attempt spent
    log = (jobs / "late6" / "job.log").read_text()
    # six trials on six CPUs: Ray put some on nodock before it was known to lack Docker
    assert "cannot run backend docker (-e docker: no Docker engine answers" in log, log[-3000:]


def test_worker_killed_mid_job_its_trials_retried_on_the_others(cluster: RayCluster, tmp_path: Path) -> None:
    """Runs last: it leaves the cluster without ``w1``."""
    task = write_task(tmp_path / "tasks", "long", solve="sleep 12\n")
    jobs = tmp_path / "jobs"
    names = _node_names(cluster)
    proc = cluster.popen(
        _run(task, jobs, "kill6", 6, "local", "--max-retries", "3"), log=tmp_path / "driver.log"
    )
    try:
        deadline = time.monotonic() + 300
        while _running_sandboxes("kill6") < 6:  # 6 CPUs, 6 trials: two on each node
            assert proc.poll() is None, (tmp_path / "driver.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the six trials never ran at once"
            time.sleep(0.2)
        os.kill(cluster.raylet_pid("w1"), signal.SIGKILL)
        assert proc.wait(timeout=600) == 0, (tmp_path / "driver.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    results = _results(jobs / "kill6")
    assert len(results) == 6
    assert all(r["outcome"] == "completed" and r["reward"] == 1.0 for r in results.values())
    lost = []
    for d in (jobs / "kill6" / "trials").iterdir():
        for a in sorted((d / "attempts").glob("*/result.json")):
            err = json.loads(a.read_text())["error"]
            assert err["kind"] == "sandbox_lost" and err["category"] == "infra"
            lost.append(d.name)
    assert lost, "killing w1 hit no running trial"
    for name in lost:  # each retried trial finished on a surviving node
        final = json.loads((jobs / "kill6" / "trials" / name / "result.json").read_text())
        assert names[final["executor"]["node"]] in {"head", "nodock"}
    _no_leftovers(cluster, "kill6")


def test_no_node_with_the_backend_is_a_clear_error_before_any_trial(tmp_path: Path) -> None:
    _possible()
    if not _docker_ok():
        pytest.skip("no docker engine: the driver's own check would refuse first")
    lone = start_plain_cluster({"head": NO_DOCKER})
    try:
        task = write_task(tmp_path / "tasks", "one")
        jobs = tmp_path / "jobs"
        out = lone.run(_run(task, jobs, "nodock", 2, "docker"))
    finally:
        lone.stop()
    assert out.returncode == 2, out.stdout[-3000:] + out.stderr[-3000:]
    assert "-e docker: no node of the Ray cluster can run it" in out.stderr
    assert "no Docker engine answers" in out.stderr  # the node's own reason
    assert not (jobs / "nodock").exists() or not list((jobs / "nodock" / "trials").glob("*"))
