"""The egress gateway against a hostile agent, on the docker backend (issue 34): each way out
found on main (L1, L2, L3, L5) and the record's holes, tried from inside a real sandbox.

Every target is a container these tests start (tests/helpers/nethosts) running
:data:`LOGGER`, which prints one line for every TCP connection and UDP datagram it gets; a
test reads that output to see whether anything arrived. Nothing else is ever addressed.
"""

from __future__ import annotations

import asyncio
import ipaddress
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from cairn.netpolicy import NetworkMode, NetworkPolicy
from cairn.sandbox.base import SandboxSpec

docker = pytest.importorskip("docker")
from cairn.sandbox.docker.backend import DockerSandbox  # noqa: E402
from net_agents import DOCKERFILE, PROBE  # noqa: E402
from nethosts import host_containers  # noqa: E402

pytestmark = pytest.mark.docker

LOGGER = r"""
import socket, sys, threading
name = sys.argv[1]
def tcp():
    srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", 80)); srv.listen(64)
    while True:
        c, peer = srv.accept()
        print(f"tcp {peer[0]}", flush=True)
        def serve(c=c):
            try:
                c.settimeout(5)
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = c.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                body = f"host={name}".encode()
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
                while c.recv(65536):  # a tunnel: take what comes until it ends
                    pass
            except OSError:
                pass
            c.close()
        threading.Thread(target=serve, daemon=True).start()
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", 9999))
    while True:
        data, peer = s.recvfrom(65536)
        print(f"udp {peer[0]} {data[:40]!r}", flush=True)
threading.Thread(target=udp, daemon=True).start()
threading.Thread(target=tcp, daemon=True).start()
print("serving", flush=True)
threading.Event().wait()
"""


@pytest.fixture(scope="module")
def hosts():
    with host_containers("allowed.test", "denied.test", server=LOGGER) as addrs:
        yield addrs


def _seen(hosts, name: str) -> list[str]:
    """What the target ``name`` got so far (one line per connection or datagram)."""
    api = docker.from_env().api
    out = api.logs(hosts.ids[name]).decode()
    return [x for x in out.splitlines() if x.startswith(("tcp ", "udp "))]


def _spec(tmp_path: Path, **kw) -> SandboxSpec:
    env = tmp_path / f"env-{uuid.uuid4().hex[:6]}"
    env.mkdir()
    (env / "Dockerfile").write_text(DOCKERFILE)
    (env / "probe.py").write_text(PROBE)
    kw.setdefault("job_id", "test-gateway-hostile")
    kw.setdefault("trial_id", uuid.uuid4().hex[:12])
    return SandboxSpec(env_dir=env, **kw)


async def _script(sb, tmp_path: Path, text: str, *args: str, timeout_sec: float = 60):
    path = tmp_path / f"s-{uuid.uuid4().hex[:6]}.py"
    path.write_text(textwrap.dedent(text))
    await sb.upload(path, f"/tmp/{path.name}")
    return await sb.exec(["python3", f"/tmp/{path.name}", *args], timeout_sec=timeout_sec)


RAW = """
import socket, sys
out = []
for req in sys.argv[1:]:
    s = socket.create_connection(("cairn-gateway", 3128), timeout=10)
    s.sendall(req.encode("latin-1").decode("unicode_escape").encode("latin-1"))
    data = b""
    try:
        while chunk := s.recv(4096):
            data += chunk
    except OSError:
        pass
    print(repr(data.split(b"\\r\\n")[0]), flush=True)
"""


def test_l1_nul_under_a_wildcard_reaches_no_denied_container(tmp_path, hosts):
    """L1: ``<denied address>\\x00.wild.test`` passed ``*.wild.test`` on main and the C
    resolver, stopping at the NUL, connected to the denied container."""
    denied = hosts["denied.test"]
    spec = _spec(tmp_path, network_mode=NetworkMode.ALLOWLIST, allowed_hosts=("*.wild.test",))
    before = len(_seen(hosts, "denied.test"))

    async def go():
        async with DockerSandbox(spec) as sb:
            r = await _script(
                sb,
                tmp_path,
                RAW,
                f"GET http://{denied}\\x00.wild.test/ HTTP/1.1\\r\\n\\r\\n",
                f"CONNECT {denied}\\x00.wild.test:80 HTTP/1.1\\r\\n\\r\\n",
                f"GET http://{denied}%00.wild.test/ HTTP/1.1\\r\\n\\r\\n",
            )
            return r, await sb.network_records()

    r, records = asyncio.run(go())
    assert r.exit_code == 0, r.stderr
    assert all("400" in line for line in r.stdout.splitlines()), r.stdout
    assert _seen(hosts, "denied.test")[before:] == []
    assert len(records) == 3 and all(x["verdict"] == "denied" and x["address"] is None for x in records), (
        records
    )


FRAMES = """
import os, socket, struct, sys, time
target, port = sys.argv[1], 9999
gw = socket.gethostbyname("cairn-gateway")
socket.create_connection((gw, 3128), timeout=5).close()  # fills the ARP cache
mac = None
for row in open("/proc/net/arp").read().splitlines()[1:]:
    cols = row.split()
    if cols[0] == gw:
        mac = bytes.fromhex(cols[3].replace(":", ""))
me = bytes.fromhex(open("/sys/class/net/eth0/address").read().strip().replace(":", ""))
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.connect((gw, 1))
src = socket.inet_aton(u.getsockname()[0])
def csum(b):
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    s = (s >> 16) + (s & 0xFFFF); s += s >> 16
    return ~s & 0xFFFF
def ip_udp(payload):
    udp = struct.pack("!HHHH", 40000, port, 8 + len(payload), 0) + payload
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0, src,
                      socket.inet_aton(target))
    hdr = hdr[:10] + struct.pack("!H", csum(hdr)) + hdr[12:]
    return hdr + udp
raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
raw.bind(("eth0", 0))
for _ in range(3):
    raw.send(mac + me + b"\\x08\\x00" + ip_udp(b"cairn-l2-plain"))
    raw.send(mac + me + b"\\x81\\x00\\x00\\x00\\x08\\x00" + ip_udp(b"cairn-l2-vlan0"))
    time.sleep(0.1)  # pacing of the attacker's three bursts (not synchronisation)
print("sent", mac.hex(), flush=True)
"""


def test_l2_tagged_and_crafted_frames_go_nowhere(tmp_path, hosts):
    """L2: the gateway inherited ``ip_forward=1``, so a VLAN-0-tagged frame sent to its MAC
    was routed on to any IPv4 address, even on a no-network task that opens only a model
    host. The sandbox keeps ``NET_RAW`` (tasks rely on it); the gateway must route nothing."""
    policy = NetworkPolicy(NetworkMode.NO_NETWORK, (), ("model.test",))
    spec = _spec(
        tmp_path,
        network_mode=NetworkMode.NO_NETWORK,
        network_phases=(policy,),
        add_hosts=(("model.test", hosts["allowed.test"]),),
    )
    before = len(_seen(hosts, "denied.test"))

    async def go():
        async with DockerSandbox(spec) as sb:
            await sb.set_network(policy, phase="agent")
            r = await _script(sb, tmp_path, FRAMES, hosts["denied.test"])
            # a window for an absence: a frame the gateway routed on would reach denied.test
            # within it; nothing positive to wait for (the assertion is that nothing arrives)
            time.sleep(1.0)
            gw = docker.from_env().api.inspect_container(sb._net.gateway_id)["HostConfig"]
            return r, gw

    r, gw = asyncio.run(go())
    assert r.exit_code == 0 and r.stdout.startswith("sent"), r.stdout + r.stderr
    assert _seen(hosts, "denied.test")[before:] == []
    assert gw["CapDrop"] == ["ALL"] and gw["Sysctls"]["net.ipv4.ip_forward"] == "0"


HALF = """
import os, socket, time
s = socket.create_connection(("cairn-gateway", 3128), timeout=30)
s.sendall(b"GET http://allowed.test/ HTTP/1.1\\r\\nHost: allowed.test")
open("/tmp/ready", "w").close()
while not os.path.exists("/tmp/go"):
    time.sleep(0.02)
try:
    s.sendall(b"\\r\\n\\r\\n")
    print(repr(s.recv(4096).split(b"\\r\\n")[0]), flush=True)
except OSError as exc:
    print("closed", type(exc).__name__, flush=True)
"""


def test_l3_a_head_begun_in_the_agent_phase_reaches_nothing_after_the_switch(tmp_path, hosts):
    """L3: the policy was read when a connection was accepted, so a head finished after the
    switch to a no-network verifier was connected upstream under the agent's allowlist."""
    agent = NetworkPolicy(NetworkMode.ALLOWLIST, ("allowed.test",))
    verifier = NetworkPolicy(NetworkMode.NO_NETWORK)
    spec = _spec(
        tmp_path,
        network_mode=NetworkMode.NO_NETWORK,
        network_phases=(agent,),
        add_hosts=(("allowed.test", hosts["allowed.test"]),),
    )
    before = len(_seen(hosts, "allowed.test"))

    async def go():
        async with DockerSandbox(spec) as sb:
            await sb.set_network(agent, phase="agent")
            run = asyncio.ensure_future(_script(sb, tmp_path, HALF))
            for _ in range(400):
                if (await sb.exec(["test", "-e", "/tmp/ready"])).ok:
                    break
                await asyncio.sleep(0.05)
            await sb.set_network(verifier, phase="verifier")
            await sb.exec(["touch", "/tmp/go"])
            r = await run
            return r, await sb.network_records()

    r, records = asyncio.run(go())
    assert "200" not in r.stdout, r.stdout
    assert _seen(hosts, "allowed.test")[before:] == []
    (rec,) = records
    assert rec["cut"] is True and rec["address"] is None and rec["verdict"] == "denied", rec


ATTACK = """\
import ctypes, fcntl, socket, struct, sys
subnet, mask, via, proxy = sys.argv[1:5]
# SIOCADDRT: route the internal subnet through the gateway's bridge leg (struct rtentry)
def sa(ip):
    return struct.pack("HH4s8x", socket.AF_INET, 0, socket.inet_aton(ip))
rt = struct.pack("L16s16s16sHhxxxxLPh6xPLLH6x", 0, sa(subnet), sa(via), sa(mask),
                 0x0003, 0, 0, 0, 0, 0, 0, 0, 0)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
fcntl.ioctl(s.fileno(), 0x890B, rt)
try:
    c = socket.create_connection((proxy, 3128), timeout=5)
    c.sendall(b"GET http://allowed.test/ HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n")
    c.settimeout(5)
    print("answer", repr(c.recv(4096)), flush=True)
except OSError as exc:
    print("refused", type(exc).__name__, flush=True)
"""


def _attack_from_bridge(gateway_id: str, network: str) -> str:
    """Run :data:`ATTACK` in a container on the default bridge that routes ``network``'s
    subnet through the gateway's bridge address; what it printed."""
    client = docker.from_env()
    nets = client.api.inspect_container(gateway_id)["NetworkSettings"]["Networks"]
    via = nets["bridge"]["IPAddress"]
    internal = nets[network]
    subnet = ipaddress.ip_network(f"{internal['IPAddress']}/{internal['IPPrefixLen']}", strict=False)
    return client.containers.run(
        "python:3.12-slim",
        [
            "python3",
            "-c",
            ATTACK,
            str(subnet.network_address),
            str(subnet.netmask),
            via,
            internal["IPAddress"],
        ],
        remove=True,
        network="bridge",
        cap_add=["NET_ADMIN"],
        labels={"cairn.test-host": "1"},
    ).decode()


def test_l5_the_proxy_does_not_answer_from_its_egress_side(tmp_path, hosts):
    """L5: a container on the engine's default bridge, with a route to the trial's internal
    subnet through the gateway's bridge address, used the proxy, and its request was
    recorded as the agent's. Now it is refused (and recorded as a foreign peer)."""
    spec = _spec(
        tmp_path,
        network_mode=NetworkMode.ALLOWLIST,
        allowed_hosts=("allowed.test",),
        add_hosts=(("allowed.test", hosts["allowed.test"]),),
    )
    before = len(_seen(hosts, "allowed.test"))

    async def go():
        async with DockerSandbox(spec) as sb:
            out = _attack_from_bridge(sb._net.gateway_id, sb._net.internal.name)
            return out, await sb.network_records()

    out, records = asyncio.run(go())
    assert out.startswith(("refused", "answer b''")), out
    assert _seen(hosts, "allowed.test")[before:] == []
    assert all(x["verdict"] == "denied" for x in records), records
    assert all("not on the trial's networks" in (x["reason"] or "") for x in records), records


HOLD = """
import os, socket, time
s = socket.create_connection(("cairn-gateway", 3128), timeout=10)
s.sendall(b"CONNECT allowed.test:80 HTTP/1.1\\r\\n\\r\\n")
assert s.recv(100).startswith(b"HTTP/1.1 200")
s.sendall(b"GET / HTTP/1.1\\r\\n\\r\\n" + b"x" * 5000)
open("/tmp/ready", "w").close()
s.settimeout(60)
try:
    while s.recv(4096):
        pass
except OSError:
    pass
"""


def test_a_connection_still_open_at_the_end_is_recorded_with_its_bytes(tmp_path, hosts):
    """A tunnel still open when the last phase ends (5 KB sent through it) is in the
    record the trial reads last, with its peer, the address it went to and its bytes; and
    nothing reaches out after that read, before the gateway is removed."""
    verifier = NetworkPolicy(NetworkMode.ALLOWLIST, ("allowed.test",))
    spec = _spec(
        tmp_path,
        network_mode=NetworkMode.NO_NETWORK,
        network_phases=(verifier,),
        add_hosts=(("allowed.test", hosts["allowed.test"]),),
    )
    before = len(_seen(hosts, "allowed.test"))

    async def go():
        async with DockerSandbox(spec) as sb:
            await sb.set_network(verifier, phase="verifier")
            run = asyncio.ensure_future(_script(sb, tmp_path, HOLD))
            for _ in range(400):
                if (await sb.exec(["test", "-e", "/tmp/ready"])).ok:
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)
            records = await sb.network_records()
            late = await _script(sb, tmp_path, RAW, "GET http://allowed.test/ HTTP/1.1\\r\\n\\r\\n")
            await run
            return records, late, await sb.network_records()

    records, late, after = asyncio.run(go())
    (rec,) = records
    assert rec["cut"] is True and rec["phase"] == "verifier" and rec["verdict"] == "allowed"
    assert rec["bytes_out"] >= 5000 and rec["address"] == hosts["allowed.test"], rec
    assert rec["peer"].rsplit(":", 1)[0] not in ("", hosts["allowed.test"])
    assert "403" in late.stdout  # sealed: the late request is refused
    assert [(x["phase"], x["verdict"]) for x in after] == [("closed", "denied")]
    assert len(_seen(hosts, "allowed.test")[before:]) == 1  # the tunnel only


DIRECT = """
import json, os, socket, sys
target = sys.argv[1]
out = {}
for name, fn in (
    ("tcp", lambda: socket.create_connection((target, 80), timeout=2).close()),
    ("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", (target, 9999))),
    ("icmp", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP).sendto(
        b"\\x08\\x00\\xf7\\xff\\x00\\x00\\x00\\x00", (target, 0))),
):
    try:
        fn()
        out[name] = "sent"
    except OSError as exc:
        out[name] = type(exc).__name__
out["docker.sock"] = os.path.exists("/var/run/docker.sock")
print(json.dumps(out))
"""


def test_regression_blocked_attempts_from_a_sandbox(tmp_path, hosts):
    """The tricks main already blocked stay blocked, seen from the target's side: raw
    addresses, IPv4-mapped IPv6, userinfo, a suffix trick and an encoded dot through the proxy;
    direct TCP, UDP and ICMP; no Docker socket. Nothing reaches the denied container."""
    denied = hosts["denied.test"]
    spec = _spec(
        tmp_path,
        network_mode=NetworkMode.ALLOWLIST,
        allowed_hosts=("allowed.test", "*.wild.test"),
        add_hosts=(("allowed.test", hosts["allowed.test"]),),
    )
    before = len(_seen(hosts, "denied.test"))
    mapped = f"::ffff:{denied}"
    proxied = [
        f"GET http://{denied}/ HTTP/1.1\\r\\n\\r\\n",
        f"CONNECT {denied}:80 HTTP/1.1\\r\\n\\r\\n",
        f"GET http://[{mapped}]/ HTTP/1.1\\r\\n\\r\\n",
        f"GET http://allowed.test@{denied}/ HTTP/1.1\\r\\n\\r\\n",
        "GET http://allowed.test.evil.test/ HTTP/1.1\\r\\n\\r\\n",
        "GET http://allowed%2etest/ HTTP/1.1\\r\\n\\r\\n",
        f"GET http://{int.from_bytes(bytes(map(int, denied.split('.'))), 'big')}/ HTTP/1.1\\r\\n\\r\\n",
    ]

    async def go():
        async with DockerSandbox(spec) as sb:
            r1 = await _script(sb, tmp_path, RAW, *proxied)
            r2 = await _script(sb, tmp_path, DIRECT, denied)
            time.sleep(0.5)  # a window for an absence (a leaked packet would land in it)
            return r1, r2, await sb.network_records()

    r1, r2, records = asyncio.run(go())
    assert r1.exit_code == 0, r1.stderr
    assert all(("400" in x or "403" in x or "502" in x) for x in r1.stdout.splitlines()), r1.stdout
    assert '"docker.sock": false' in r2.stdout, r2.stdout
    assert _seen(hosts, "denied.test")[before:] == []
    assert len(records) == len(proxied)
    assert all(x["verdict"] == "denied" and x["address"] is None for x in records), records


def test_a_trial_records_the_verifiers_tunnel_still_open_at_its_end(tmp_path, hosts):
    """On main a tunnel the verifier left open (5 KB through it) was in neither
    network.jsonl nor result.json: records are written when a connection ends, and the
    gateway was removed first. Now the trial's last record pass cuts and records it."""
    from net_agents import ProbeAgent
    from taskgen import write_task
    from testbed import run_trial_sync

    verifier = (
        textwrap.dedent("""\
        cat > /tmp/hold.py <<'PY'
        """)
        + HOLD
        + textwrap.dedent("""\
        PY
        setsid python3 /tmp/hold.py > /dev/null 2>&1 < /dev/null &
        for i in $(seq 200); do [ -e /tmp/ready ] && break; sleep 0.05; done
        echo 1 > /logs/verifier/reward.txt
        """)
    )
    task = write_task(
        tmp_path,
        "open-tunnel",
        network="no-network",
        dockerfile=DOCKERFILE,
        files={"environment/probe.py": PROBE},
        test=verifier,
        toml_extra='[verifier]\nnetwork_mode = "allowlist"\nallowed_hosts = ["allowed.test"]\n',
    )
    result = run_trial_sync(
        task,
        ProbeAgent([]),
        "docker",
        tmp_path / "jobs",
        add_hosts=(("allowed.test", hosts["allowed.test"]),),
    )
    assert result.error is None, result.error
    trial_dir = next((tmp_path / "jobs" / "job" / "trials").iterdir())
    lines = (trial_dir / "steps" / "01-main" / "network.jsonl").read_text().splitlines()
    import json

    records = [json.loads(x) for x in lines]
    (tunnel,) = [r for r in records if r["method"] == "CONNECT"]
    assert (tunnel["phase"], tunnel["verdict"], tunnel["cut"]) == ("verifier", "allowed", True)
    assert tunnel["bytes_out"] >= 5000 and tunnel["address"] == hosts["allowed.test"], tunnel
    assert result.steps[0].network is not None and result.steps[0].network.allowed == 1


COMPOSE = """\
services:
  main:
    build: .
"""


def test_compose_gateway_holds_l1_l2_l5(tmp_path, hosts):
    """A compose project behind the gateway (its own networks made internal, the gateway
    joined to them): the NUL under a wildcard, tagged frames from ``main`` and a bridge
    container routing to the project's network all reach nothing."""
    from cairn.agents.base import Agent
    from taskgen import write_task
    from testbed import run_trial_sync

    denied = hosts["denied.test"]
    seen_before = len(_seen(hosts, "denied.test")), len(_seen(hosts, "allowed.test"))

    class Hostile(Agent):
        name = "hostile"

        def __init__(self) -> None:
            super().__init__(None)
            self.out: dict[str, str] = {}

        async def run(self, instruction, sandbox, context) -> None:
            r = await _script(
                sandbox, tmp_path, RAW, f"GET http://{denied}\\x00.wild.test/ HTTP/1.1\\r\\n\\r\\n"
            )
            self.out["raw"] = r.stdout + r.stderr
            r = await _script(sandbox, tmp_path, FRAMES, denied)
            self.out["frames"] = r.stdout + r.stderr
            gw = sandbox._net.gateway_id
            nets = docker.from_env().api.inspect_container(gw)["NetworkSettings"]["Networks"]
            project = next(n for n in nets if n != "bridge")
            self.out["attack"] = await asyncio.to_thread(_attack_from_bridge, gw, project)
            self.out["caps"] = str(docker.from_env().api.inspect_container(gw)["HostConfig"]["CapDrop"])

    task = write_task(
        tmp_path,
        "composed",
        network="allowlist",
        dockerfile=DOCKERFILE,
        files={"environment/probe.py": PROBE, "environment/docker-compose.yaml": COMPOSE},
        allowed_hosts=("allowed.test", "*.wild.test"),
    )
    agent = Hostile()
    result = run_trial_sync(
        task, agent, "docker", tmp_path / "jobs", add_hosts=(("allowed.test", hosts["allowed.test"]),)
    )
    assert result.error is None, result.error
    assert "400" in agent.out["raw"], agent.out
    assert agent.out["frames"].startswith("sent"), agent.out
    assert agent.out["attack"].startswith(("refused", "answer b''")), agent.out
    assert agent.out["caps"] == "['ALL']"
    time.sleep(0.5)  # a window for an absence: nothing positive to wait for
    assert _seen(hosts, "denied.test")[seen_before[0] :] == []
    assert _seen(hosts, "allowed.test")[seen_before[1] :] == []
