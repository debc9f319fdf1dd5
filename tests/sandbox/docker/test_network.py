"""Network policy on the docker backend (issue 14): allowlists through the per-trial egress
gateway, per-phase modes, model hosts of in-sandbox agents, public-mode isolation, the record
of every connection, and nothing left behind.

Every host reached is a container these tests start on this machine (tests/helpers/nethosts);
the gateway resolves their names through the host map the test passes (``add_hosts``).
"""

from __future__ import annotations

import asyncio
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

docker = pytest.importorskip("docker")
from cairn.sandbox.docker.backend import DockerSandbox  # noqa: E402
from net_agents import DOCKERFILE, PROBE, ProbeAgent, parse_probe  # noqa: E402
from nethosts import host_containers  # noqa: E402
from taskgen import write_task  # noqa: E402
from testbed import run_trial_sync  # noqa: E402

pytestmark = pytest.mark.docker


def _labelled(trial_id: str) -> tuple[list[str], list[str]]:
    """Names of the containers and networks that still carry ``cairn.trial=trial_id``."""
    api = docker.from_env().api
    flt = {"label": f"cairn.trial={trial_id}"}
    return (
        [c["Names"][0] for c in api.containers(all=True, filters=flt)],
        [n["Name"] for n in api.networks(filters=flt)],
    )


def _spec(tmp_path: Path, **kw) -> SandboxSpec:
    env = tmp_path / f"env-{uuid.uuid4().hex[:6]}"
    env.mkdir()
    (env / "Dockerfile").write_text(DOCKERFILE)
    (env / "probe.py").write_text(PROBE)
    kw.setdefault("job_id", "test-network")
    kw.setdefault("trial_id", uuid.uuid4().hex[:12])
    return SandboxSpec(env_dir=env, **kw)


async def _probe(sb, *targets: str) -> dict[str, dict]:
    r = await sb.exec(["python3", "/probe.py", *targets], timeout_sec=120)
    assert r.exit_code == 0, r.stderr
    return parse_probe(r.stdout)


@pytest.fixture(scope="module")
def hosts():
    with host_containers("allowed.test", "denied.test") as addrs:
        yield addrs


def test_allowlist_trial_agent_reaches_only_allowed_and_verifier_nothing(tmp_path, hosts):
    denied_ip = hosts["denied.test"]
    targets = [
        "http://allowed.test/a",
        "https://allowed.test/b",
        "http://denied.test/",
        "https://denied.test/",
        f"http://{denied_ip}/",
        f"https://{denied_ip}/",
        f"sock:{denied_ip}:80",
        f"sock:{hosts['allowed.test']}:80",
    ]
    verifier = textwrap.dedent("""\
        python3 /probe.py http://allowed.test/ https://allowed.test/ http://denied.test/ \\
            > /logs/verifier/probe.jsonl
        if grep -q '"ok": true' /logs/verifier/probe.jsonl; then echo 0; else echo 1; fi \\
            > /logs/verifier/reward.txt
        """)
    task = write_task(
        tmp_path,
        "allow",
        network="allowlist",
        dockerfile=DOCKERFILE,
        files={"environment/probe.py": PROBE},
        test=verifier,
        toml_extra='[verifier]\nnetwork_mode = "no-network"\n',
        allowed_hosts=("allowed.test",),
    )
    agent = ProbeAgent(targets)
    result = run_trial_sync(task, agent, "docker", tmp_path / "jobs", add_hosts=tuple(hosts.items()))
    assert result.error is None, result.error
    got = agent.results
    assert got["http://allowed.test/a"]["text"].startswith("host=allowed.test path=/a")
    assert got["https://allowed.test/b"]["text"].startswith("host=allowed.test path=/b")
    for t in targets[2:]:
        assert not got[t]["ok"], (t, got[t])
    assert "403" in got["http://denied.test/"]["text"]
    assert "403" in got[f"http://{denied_ip}/"]["text"]
    # the verifier, under [verifier] network_mode = "no-network", reached neither host
    assert result.reward == 1.0
    trial_dir = next((tmp_path / "jobs" / "job" / "trials").iterdir())
    step = trial_dir / "steps" / "01-main"
    vprobe = parse_probe((step / "verifier" / "probe.jsonl").read_text())
    assert vprobe and not any(v["ok"] for v in vprobe.values())
    records = [json.loads(line) for line in (step / "network.jsonl").read_text().splitlines()]
    agent_recs = {(r["method"], r["host"], r["port"]): r for r in records if r["phase"] == "agent"}
    assert agent_recs[("GET", "allowed.test", 80)]["verdict"] == "allowed"
    assert agent_recs[("GET", "allowed.test", 80)]["bytes_in"] > 0
    assert agent_recs[("CONNECT", "allowed.test", 443)]["verdict"] == "allowed"
    assert agent_recs[("GET", "denied.test", 80)]["verdict"] == "denied"
    assert agent_recs[("CONNECT", "denied.test", 443)]["verdict"] == "denied"
    assert agent_recs[("GET", denied_ip, 80)]["verdict"] == "denied"
    ver = [r for r in records if r["phase"] == "verifier"]
    assert {(r["host"], r["verdict"]) for r in ver} == {("allowed.test", "denied"), ("denied.test", "denied")}
    row = result.steps[0]
    assert row.network is not None and row.network.denied == 4 + 3
    assert row.network.allowed == 2
    assert "denied.test" in row.network.denied_hosts
    assert _labelled(result.trial_id) == ([], [])


def test_wildcard_and_cidr_entries(tmp_path, hosts):
    allowed_ip, other_ip = hosts["allowed.test"], hosts["denied.test"]
    spec = _spec(
        tmp_path,
        network_mode=NetworkMode.ALLOWLIST,
        allowed_hosts=("*.allowed.test", f"{allowed_ip}/32"),
        add_hosts=(
            ("a.allowed.test", allowed_ip),
            ("allowed.test", allowed_ip),
            ("allowed.test.evil", other_ip),
        ),
    )

    async def go():
        async with DockerSandbox(spec) as sb:
            return await _probe(
                sb,
                "http://a.allowed.test/",
                "http://allowed.test/",
                "http://allowed.test.evil/",
                f"http://{allowed_ip}/",
                f"http://{other_ip}/",
            )

    got = asyncio.run(go())
    assert got["http://a.allowed.test/"]["ok"]
    assert not got["http://allowed.test/"]["ok"]
    assert not got["http://allowed.test.evil/"]["ok"]
    assert got[f"http://{allowed_ip}/"]["ok"]
    assert not got[f"http://{other_ip}/"]["ok"]
    assert _labelled(spec.trial_id) == ([], [])


def test_no_network_with_in_sandbox_agent_reaches_its_model_only(tmp_path, hosts):
    verifier = textwrap.dedent("""\
        python3 /probe.py http://model.test/ http://denied.test/ > /logs/verifier/probe.jsonl
        if grep -q '"ok": true' /logs/verifier/probe.jsonl; then echo 0; else echo 1; fi \\
            > /logs/verifier/reward.txt
        """)
    task = write_task(
        tmp_path,
        "sealed",
        network="no-network",
        dockerfile=DOCKERFILE,
        files={"environment/probe.py": PROBE},
        test=verifier,
    )
    agent = ProbeAgent(
        [
            "http://model.test/v1/chat",
            "https://model.test/v1",
            "http://denied.test/",
            f"sock:{hosts['denied.test']}:80",
        ],
        hosts=["model.test"],
    )
    result = run_trial_sync(
        task,
        agent,
        "docker",
        tmp_path / "jobs",
        add_hosts=(("model.test", hosts["allowed.test"]), ("denied.test", hosts["denied.test"])),
    )
    assert result.error is None, result.error
    got = agent.results
    assert got["http://model.test/v1/chat"]["text"].startswith("host=allowed.test path=/v1/chat")
    assert got["https://model.test/v1"]["ok"]
    assert not got["http://denied.test/"]["ok"]
    assert not got[f"sock:{hosts['denied.test']}:80"]["ok"]
    assert result.reward == 1.0  # the verifier reached neither the model nor anything else
    assert result.steps[0].network.denied == 1 + 2
    assert _labelled(result.trial_id) == ([], [])


def test_public_trials_cannot_reach_each_other(tmp_path):
    a = _spec(tmp_path, network_mode=NetworkMode.PUBLIC)
    b = _spec(tmp_path, network_mode=NetworkMode.PUBLIC)

    async def go():
        async with DockerSandbox(a) as sa, DockerSandbox(b) as sb:
            assert sa.network_layout == "bridge" and sb.network_layout == "bridge"
            await sb.exec("nohup python3 -m http.server 8000 >/dev/null 2>&1 &")
            ip_b = (await sb.exec("hostname -I")).stdout.split()[0]
            ip_a = (await sa.exec("hostname -I")).stdout.split()[0]
            for _ in range(100):  # the listener is up (seen from inside b)
                if (await _probe(sb, "sock:127.0.0.1:8000"))["sock:127.0.0.1:8000"]["ok"]:
                    break
            from_a = await _probe(sa, f"sock:{ip_b}:8000")
            self_b = await _probe(sb, f"sock:{ip_b}:8000")
            return ip_a, ip_b, from_a, self_b, _labelled(a.trial_id)

    ip_a, ip_b, from_a, self_b, during = asyncio.run(go())
    assert ip_a != ip_b
    assert self_b[f"sock:{ip_b}:8000"]["ok"]
    assert not from_a[f"sock:{ip_b}:8000"]["ok"]
    assert len(during[1]) == 1  # its own bridge network, labelled with the trial
    assert _labelled(a.trial_id) == ([], []) and _labelled(b.trial_id) == ([], [])


def test_phase_switch_closes_open_tunnels(tmp_path, hosts):
    """A connection opened in the agent phase dies at the switch: no inherited opening."""
    spec = _spec(
        tmp_path,
        network_mode=NetworkMode.NO_NETWORK,
        network_phases=(NetworkPolicy(NetworkMode.NO_NETWORK, (), ("allowed.test",)),),
        add_hosts=(("allowed.test", hosts["allowed.test"]),),
    )
    hold = textwrap.dedent("""\
        import socket, sys, time
        s = socket.create_connection(("cairn-gateway", 3128), timeout=5)
        s.sendall(b"CONNECT allowed.test:80 HTTP/1.1\\r\\nHost: allowed.test:80\\r\\n\\r\\n")
        print(s.recv(100).split(b"\\r\\n")[0].decode(), flush=True)
        open("/tmp/ready", "w").close()
        s.settimeout(60)
        print("closed" if s.recv(100) == b"" else "data", flush=True)
        """)

    async def go():
        async with DockerSandbox(spec) as sb:
            assert sb.network_layout == "gateway"
            await sb.set_network(spec.network_phases[0], phase="agent")
            (tmp_path / "hold.py").write_text(hold)
            await sb.upload(tmp_path / "hold.py", "/tmp/hold.py")
            run = asyncio.ensure_future(sb.exec(["python3", "/tmp/hold.py"], timeout_sec=60))
            for _ in range(200):
                if (await sb.exec(["test", "-e", "/tmp/ready"])).ok:
                    break
                await asyncio.sleep(0.05)
            await sb.set_network(NetworkPolicy(NetworkMode.NO_NETWORK), phase="verifier")
            r = await run
            after = await _probe(sb, "http://allowed.test/")
            return r, after, await sb.network_records()

    r, after, records = asyncio.run(go())
    assert r.stdout.split() == ["HTTP/1.1", "200", "Connection", "established", "closed"]
    assert not after["http://allowed.test/"]["ok"]
    phases = [(x["phase"], x["verdict"]) for x in records]
    assert ("agent", "allowed") in phases and ("verifier", "denied") in phases


def test_no_gateway_for_plain_no_network(tmp_path):
    spec = _spec(tmp_path, network_mode=NetworkMode.NO_NETWORK)

    async def go():
        async with DockerSandbox(spec) as sb:
            return sb.network_layout, _labelled(spec.trial_id)

    layout, (containers, networks) = asyncio.run(go())
    assert layout == "none"
    assert len(containers) == 1 and networks == []


_KILLED_RUN = """
import asyncio, sys
from pathlib import Path
from cairn.netpolicy import NetworkMode
from cairn.sandbox.base import SandboxSpec
from cairn.sandbox.docker.backend import DockerSandbox
env = Path(sys.argv[1])
spec = SandboxSpec(env_dir=env, network_mode=NetworkMode.ALLOWLIST, allowed_hosts=("a.test",),
                   job_id=sys.argv[2], trial_id=sys.argv[3], job_dir=Path(sys.argv[4]))
async def main():
    sb = DockerSandbox(spec)
    await sb.start()
    print("up", flush=True)
    await asyncio.sleep(600)
asyncio.run(main())
"""


def test_cairn_clean_removes_a_killed_trials_gateway_and_networks(tmp_path):
    from cairn.sandbox.cleanup import clean

    spec = _spec(tmp_path)
    job_dir = tmp_path / "job-x"
    job_dir.mkdir()
    job = f"net-clean-{uuid.uuid4().hex[:6]}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_RUN, str(spec.env_dir), job, spec.trial_id, str(job_dir)],
        stdout=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"up"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    containers, networks = _labelled(spec.trial_id)
    assert len(containers) == 2 and len(networks) == 1  # sandbox + gateway, internal network
    report = clean(job=job)
    assert sorted(report.containers) == sorted(c.lstrip("/") for c in containers)
    assert report.networks == networks
    assert _labelled(spec.trial_id) == ([], [])


def test_cancelled_start_leaves_nothing(tmp_path):
    spec = _spec(tmp_path, network_mode=NetworkMode.ALLOWLIST, allowed_hosts=("a.test",))

    async def go():
        sb = DockerSandbox(spec)
        task = asyncio.ensure_future(sb.__aenter__())
        for _ in range(600):  # inside start: its first network exists, start not done
            nets = (await asyncio.to_thread(_labelled, spec.trial_id))[1]
            if nets or task.done():
                break
            await asyncio.sleep(0.02)
        assert not task.done(), "start finished before the cancel could land inside it"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert _labelled(spec.trial_id) == ([], [])


COMPOSE = """\
services:
  main:
    build: .
  web:
    image: python:3.12-slim
    command: ["python3", "-m", "http.server", "8080"]
    healthcheck:
      test: ["CMD", "python3", "-c", "import socket; socket.create_connection(('127.0.0.1', 8080))"]
      interval: 1s
      retries: 30
"""


def test_compose_allowlist_services_reach_each_other_main_only_allowed(tmp_path, hosts):
    task = write_task(
        tmp_path,
        "composed",
        network="allowlist",
        dockerfile=DOCKERFILE,
        files={"environment/probe.py": PROBE, "environment/docker-compose.yaml": COMPOSE},
        allowed_hosts=("allowed.test",),
    )
    agent = ProbeAgent(
        [
            "http://web:8080/",
            "http://allowed.test/",
            "https://allowed.test/",
            "http://denied.test/",
            f"sock:{hosts['denied.test']}:80",
        ]
    )
    result = run_trial_sync(task, agent, "docker", tmp_path / "jobs", add_hosts=tuple(hosts.items()))
    assert result.error is None, result.error
    got = agent.results
    assert got["http://web:8080/"]["ok"], got["http://web:8080/"]  # NO_PROXY: straight there
    assert got["http://allowed.test/"]["text"].startswith("host=allowed.test")
    assert got["https://allowed.test/"]["ok"]
    assert not got["http://denied.test/"]["ok"]
    assert not got[f"sock:{hosts['denied.test']}:80"]["ok"]
    assert result.steps[0].network.denied == 1
    assert _labelled(result.trial_id) == ([], [])


def test_the_proxy_serves_only_the_sandbox_network(tmp_path):
    """Another container on the gateway's egress network (the default bridge) cannot use
    the trial's proxy; the sandbox can."""
    spec = _spec(tmp_path, network_mode=NetworkMode.ALLOWLIST, allowed_hosts=("x.test",))
    client = docker.from_env()

    async def go():
        async with DockerSandbox(spec) as sb:
            info = client.api.inspect_container(sb._net.gateway_id)["NetworkSettings"]
            egress_ip = info["Networks"]["bridge"]["IPAddress"]
            outside = client.containers.run(
                "python:3.12-slim",
                ["python3", "-c", PROBE, f"sock:{egress_ip}:3128"],
                remove=True,
                network="bridge",
                labels={"cairn.test-host": "1"},
            )
            inside = await _probe(sb, "sock:cairn-gateway:3128")
            return parse_probe(outside.decode()), inside

    outside, inside = asyncio.run(go())
    assert not next(iter(outside.values()))["ok"]
    assert inside["sock:cairn-gateway:3128"]["ok"]
