"""A job's trials reuse egress gateways (issue 14; cairn.sandbox.pools): the next trial gets
only its own allowlist, the previous trial's tunnels are cut before it is handed on, records
never cross trials, and nothing is left at the job's end, also after SIGKILL + ``cairn clean``.

Every host reached is a container these tests start (tests/helpers/nethosts).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from cairn.netpolicy import NetworkMode, NetworkPolicy
from cairn.sandbox.base import SandboxSpec
from cairn.sandbox.pools import ResourcePool

docker = pytest.importorskip("docker")
from cairn.sandbox.cleanup import clean, settle_job  # noqa: E402
from cairn.sandbox.docker.backend import DockerSandbox  # noqa: E402
from net_agents import DOCKERFILE, PROBE, parse_probe  # noqa: E402
from nethosts import host_containers  # noqa: E402

pytestmark = pytest.mark.docker

HOLD = textwrap.dedent("""\
    import socket, sys, time
    s = socket.create_connection(("cairn-gateway", 3128), timeout=5)
    s.sendall(b"CONNECT allowed.test:80 HTTP/1.1\\r\\nHost: allowed.test:80\\r\\n\\r\\n")
    print(s.recv(100).split(b"\\r\\n")[0].decode(), flush=True)
    open("/tmp/ready", "w").close()
    time.sleep(600)
    """)

# ESTABLISHED TCP connections of the gateway to port 80 (hex 0050), from its /proc/net/tcp.
UPSTREAM = (
    "python3 -c \"import sys; print(sum(1 for l in open('/proc/net/tcp').readlines()[1:] "
    "if l.split()[2].endswith(':0050') and l.split()[3] == '01'))\""
)


def _job_resources(job: str) -> tuple[list[str], list[str]]:
    api = docker.from_env().api
    flt = {"label": f"cairn.job={job}"}
    return (
        [c["Names"][0] for c in api.containers(all=True, filters=flt)],
        [n["Name"] for n in api.networks(filters=flt)],
    )


_POOLS: dict[Path, ResourcePool] = {}
"""Each test job's resource pool (what the job's run loop owns and lends its trials)."""


def _pool(job_dir: Path) -> ResourcePool:
    return _POOLS.setdefault(job_dir, ResourcePool())


def open_pool(job_dir: Path) -> None:
    _pool(job_dir)


def close_pool(job_dir: Path) -> None:
    _POOLS.pop(job_dir, ResourcePool()).close()


def _spec(env: Path, job: str, job_dir: Path, **kw) -> SandboxSpec:
    return SandboxSpec(
        env_dir=env,
        job_id=job,
        trial_id=uuid.uuid4().hex[:12],
        job_dir=job_dir,
        name="pool",
        pool=_pool(job_dir),
        **kw,
    )


def _env(tmp_path: Path) -> Path:
    env = tmp_path / "env"
    env.mkdir()
    (env / "Dockerfile").write_text(DOCKERFILE)
    (env / "probe.py").write_text(PROBE)
    return env


def _upstreams(gateway_id: str) -> int:
    api = docker.from_env().api
    ex = api.exec_create(gateway_id, ["sh", "-c", UPSTREAM])
    return int(api.exec_start(ex).decode().strip())


@pytest.fixture(scope="module")
def hosts():
    with host_containers("allowed.test", "denied.test") as addrs:
        yield addrs


def test_a_reused_gateway_gives_the_next_trial_only_its_own_allowlist(tmp_path, hosts):
    env = _env(tmp_path)
    job, job_dir = f"pool-{uuid.uuid4().hex[:6]}", tmp_path / "job"
    job_dir.mkdir()
    add = tuple(hosts.items())
    first = _spec(
        env, job, job_dir, network_mode=NetworkMode.ALLOWLIST, allowed_hosts=("allowed.test",), add_hosts=add
    )
    second = _spec(
        env,
        job,
        job_dir,
        network_mode=NetworkMode.NO_NETWORK,
        add_hosts=add,
        network_phases=(NetworkPolicy(NetworkMode.ALLOWLIST, ("denied.test",)),),
    )
    (tmp_path / "hold.py").write_text(HOLD)

    async def go():
        open_pool(job_dir)
        try:
            a = DockerSandbox(first)
            await a.start()
            gw = a._net.gateway_id
            got_a = parse_probe(
                (await a.exec(["python3", "/probe.py", "http://allowed.test/a"], timeout_sec=60)).stdout
            )
            await a.upload(tmp_path / "hold.py", "/tmp/hold.py")
            hold = asyncio.ensure_future(a.exec(["python3", "/tmp/hold.py"], timeout_sec=120))
            for _ in range(200):
                if (await a.exec(["test", "-e", "/tmp/ready"])).ok:
                    break
                await asyncio.sleep(0.05)
            held = _upstreams(gw)
            records_a = await a.network_records()
            await a.stop()
            with contextlib.suppress(Exception):  # the exec ended with its container
                await hold
            after_stop = _upstreams(gw)  # pooled: alive, with the tunnel cut
            b = DockerSandbox(second)
            await b.start()
            try:
                reused = b._net.gateway_id == gw
                env_probe = parse_probe(
                    (
                        await b.exec(
                            ["python3", "/probe.py", "http://allowed.test/", "http://denied.test/"],
                            timeout_sec=60,
                        )
                    ).stdout
                )
                await b.set_network(second.network_phases[0], phase="agent")
                agent_probe = parse_probe(
                    (
                        await b.exec(
                            [
                                "python3",
                                "/probe.py",
                                "http://allowed.test/",
                                "https://allowed.test/",
                                "http://denied.test/d",
                            ],
                            timeout_sec=60,
                        )
                    ).stdout
                )
                records_b = await b.network_records()
            finally:
                await b.stop()
            pooled_left = _job_resources(job)
        finally:
            close_pool(job_dir)
        left = await asyncio.to_thread(settle_job, job_dir, "docker")
        return (
            got_a,
            held,
            records_a,
            after_stop,
            reused,
            env_probe,
            agent_probe,
            records_b,
            pooled_left,
            left,
        )

    (got_a, held, records_a, after_stop, reused, env_probe, agent_probe, records_b, pooled_left, left) = (
        asyncio.run(go())
    )
    assert got_a["http://allowed.test/a"]["text"].startswith("host=allowed.test")
    assert held == 1 and after_stop == 0  # the first trial's tunnel was cut before hand-on
    assert any(r["host"] == "allowed.test" and r["verdict"] == "allowed" for r in records_a)
    assert reused  # the second trial got the first trial's gateway
    # ... and only its own policy: no-network at start, then denied.test only
    assert not env_probe["http://allowed.test/"]["ok"] and not env_probe["http://denied.test/"]["ok"]
    assert "403" in agent_probe["http://allowed.test/"]["text"]
    assert not agent_probe["https://allowed.test/"]["ok"]
    assert agent_probe["http://denied.test/d"]["text"].startswith("host=denied.test path=/d")
    # its record holds its own attempts only (none of the first trial's, none of "idle")
    assert {r["phase"] for r in records_b} == {"environment", "agent"}
    assert not any(r["verdict"] == "allowed" and r["host"] == "allowed.test" for r in records_b)
    assert sorted((r["phase"], r["host"], r["verdict"]) for r in records_b) == [
        ("agent", "allowed.test", "denied"),
        ("agent", "allowed.test", "denied"),
        ("agent", "denied.test", "allowed"),
        ("environment", "allowed.test", "denied"),
        ("environment", "denied.test", "denied"),
    ]
    assert len(pooled_left[0]) == 1 and len(pooled_left[1]) == 1  # the idle gateway + network
    assert left == [] and _job_resources(first.job_id) == ([], [])


def test_concurrent_trials_never_share_a_gateway(tmp_path):
    env = _env(tmp_path)
    job, job_dir = f"pool-{uuid.uuid4().hex[:6]}", tmp_path / "job"
    job_dir.mkdir()

    def spec() -> SandboxSpec:
        return _spec(env, job, job_dir, network_mode=NetworkMode.ALLOWLIST, allowed_hosts=("a.test",))

    async def go():
        open_pool(job_dir)
        try:
            async with DockerSandbox(spec()):
                pass  # leaves one idle gateway in the pool
            a, b = DockerSandbox(spec()), DockerSandbox(spec())
            await asyncio.gather(a.start(), b.start())
            try:
                return {a._net.gateway_id, b._net.gateway_id}, {a._net.internal.name, b._net.internal.name}
            finally:
                await asyncio.gather(a.stop(), b.stop())
        finally:
            close_pool(job_dir)
            await asyncio.to_thread(settle_job, job_dir, "docker")

    gateways, networks = asyncio.run(go())
    assert len(gateways) == 2 and len(networks) == 2
    assert _job_resources(job) == ([], [])


_KILLED_JOB = """
import asyncio, sys, uuid
from pathlib import Path
from cairn.netpolicy import NetworkMode
from cairn.sandbox.base import SandboxSpec
from cairn.sandbox.docker.backend import DockerSandbox
from cairn.sandbox.pools import ResourcePool
env, job, job_dir = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
pool = ResourcePool()
def spec():
    return SandboxSpec(env_dir=env, network_mode=NetworkMode.ALLOWLIST, allowed_hosts=("a.test",),
                       job_id=job, trial_id=uuid.uuid4().hex[:12], job_dir=job_dir, pool=pool)
async def main():
    async with DockerSandbox(spec()):
        pass
    sb = DockerSandbox(spec())  # takes the pooled gateway
    await sb.start()
    print("up", flush=True)
    await asyncio.sleep(600)
asyncio.run(main())
"""


def test_cairn_clean_removes_a_killed_jobs_pooled_gateways(tmp_path):
    env = _env(tmp_path)
    job, job_dir = f"pool-kill-{uuid.uuid4().hex[:6]}", tmp_path / "job"
    job_dir.mkdir()
    penv = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_JOB, str(env), job, str(job_dir)],
        stdout=subprocess.PIPE,
        env=penv,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"up"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    containers, networks = _job_resources(job)
    assert len(containers) == 2 and len(networks) == 1  # sandbox + reused gateway, its network
    report = clean(job=job)
    assert sorted(report.containers) == sorted(c.lstrip("/") for c in containers)
    assert report.networks == networks
    assert _job_resources(job) == ([], [])


def test_a_pooled_gateway_that_died_fails_the_start_as_infra_and_leaves_nothing(tmp_path):
    from cairn.errors import ErrorKind, SandboxError

    env = _env(tmp_path)
    job, job_dir = f"pool-dead-{uuid.uuid4().hex[:6]}", tmp_path / "job"
    job_dir.mkdir()

    def spec() -> SandboxSpec:
        return _spec(env, job, job_dir, network_mode=NetworkMode.ALLOWLIST, allowed_hosts=("a.test",))

    async def go():
        open_pool(job_dir)
        try:
            a = DockerSandbox(spec())
            await a.start()
            gw = a._net.gateway_id
            await a.stop()
            docker.from_env().api.kill(gw)  # the idle gateway's proxy dies
            b = DockerSandbox(spec())
            try:
                with pytest.raises(SandboxError) as err:
                    await b.start()
            finally:
                await b.stop()
            return err.value.kind, _job_resources(job)
        finally:
            close_pool(job_dir)
            await asyncio.to_thread(settle_job, job_dir, "docker")

    kind, left = asyncio.run(go())
    assert kind is ErrorKind.START_FAILED  # infra: the trial is retried on a fresh gateway
    assert left == ([], [])  # the dead gateway and its network went with the failed start


CHECK = r"""
import json, sys
got = {}
for line in open("/tmp/probe.jsonl"):
    item = json.loads(line)
    got[item["target"]] = item["ok"]
want = json.loads(sys.argv[1])
open("/logs/verifier/reward.txt", "w").write("1\n" if got == want else "0\n")
"""


def _probe_task(root: Path, name: str, allowed: str, want: dict[str, bool]) -> Path:
    from taskgen import write_task

    targets = " ".join(want)
    task = write_task(
        root,
        name,
        network="allowlist",
        dockerfile=DOCKERFILE + "COPY check.py /check.py\n",
        files={"environment/probe.py": PROBE, "environment/check.py": CHECK},
        solve=f"python3 /probe.py {targets} > /tmp/probe.jsonl\n",
        test=f"python3 /check.py '{json.dumps(want)}'\n",
        allowed_hosts=(allowed,),
    )
    return task


def test_a_job_hands_gateways_on_and_each_trial_sees_only_its_own_allowlist(tmp_path, hosts):
    """``cairn run`` with one slot: the second task's trial runs after the first's, on the
    gateway the first left (the job's pool); it cannot reach the host only the first task
    allowed, and nothing of the job is left at its end."""
    from cairn.job.run import run_job
    from cairn.plan import JobConfig

    first = _probe_task(tmp_path / "tasks", "first", "allowed.test", {"http://allowed.test/": True})
    second = _probe_task(
        tmp_path / "tasks",
        "second",
        "denied.test",
        {"http://allowed.test/": False, "http://denied.test/": True},
    )
    created: list[str] = []
    real = DockerSandbox.start

    async def spy(self):
        await real(self)
        created.append(self._net.gateway_id)

    job = f"pool-job-{uuid.uuid4().hex[:6]}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(DockerSandbox, "start", spy)
        result = run_job(
            JobConfig(
                paths=(first, second),
                backend="docker",
                agent="oracle",
                n_concurrent=1,
                jobs_dir=tmp_path / "jobs",
                job_name=job,
                add_hosts=dict(hosts),
            )
        )
    rewards = {r.task.name: r.reward for r in result.results}
    assert rewards == {"test/first": 1.0, "test/second": 1.0}, [r.error for r in result.results]
    assert len(created) == 2 and created[0] == created[1]  # one gateway, handed on
    second_trial = next(r for r in result.results if r.task.name == "test/second")
    records = [
        json.loads(x)
        for x in (result.job_dir / "trials" / second_trial.trial_name / "steps" / "01-main" / "network.jsonl")
        .read_text()
        .splitlines()
    ]
    assert {(x["host"], x["verdict"]) for x in records} == {
        ("allowed.test", "denied"),
        ("denied.test", "allowed"),
    }
    assert _job_resources(job) == ([], [])
