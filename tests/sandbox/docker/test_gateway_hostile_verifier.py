"""The egress gateway against a hostile agent when the verifier runs in its own sandbox with a
wider network than the agent's (issue 34 L4, separate verifier; design §4.6).

The task's agent phase is on an allowlist of ``allowed.test``; its separate verifier's
environment opens ``vonly.test`` (and carries a verifier-only env value). The agent leaves
behind, in its own sandbox, what a hostile agent would:

- a background process that, while the verifier runs, tries ``vonly.test`` through its own
  proxy (GET and CONNECT), directly by address, and through the *verifier's* gateway at every
  address that gateway has (the test tells it those addresses: the worst case of an agent that
  guessed them), and scans every process's environment for the verifier-only value;
- a connection to its gateway opened in the agent phase with a half-written request for
  ``vonly.test``, completed only once the verifier runs;
- a ``sitecustomize.py`` planted for the verifier's ``python3`` to run, which would fetch
  ``vonly.test`` with a marked path.

Every target is a container this test starts (tests/helpers/nethosts) running :data:`LOGGER`,
which prints one line per request head it gets, with the peer. The verifier itself fetches
``/verifier`` from ``vonly.test``; nothing else may reach it.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from cairn.agents.base import Agent

docker = pytest.importorskip("docker")
from nethosts import host_containers  # noqa: E402
from taskgen import write_task  # noqa: E402
from testbed import backend_available, run_trial_sync  # noqa: E402

pytestmark = pytest.mark.docker

SECRET = "verifier-only-value-7319"

LOGGER = r"""
import socket, sys, threading
name = sys.argv[1]
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", 80)); srv.listen(64)
def serve(c, peer):
    try:
        c.settimeout(5)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = c.recv(65536)
            if not chunk:
                break
            data += chunk
        head = data.split(b"\r\n")[0]
        print(f"req {peer[0]} {head!r}", flush=True)
        body = f"host={name}".encode()
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    except OSError:
        print(f"tcp {peer[0]}", flush=True)
    c.close()
print("serving", flush=True)
while True:
    c, peer = srv.accept()
    threading.Thread(target=serve, args=(c, peer), daemon=True).start()
"""

# The agent's left-over process. Phase 1 (agent phase): open the half-written request, say
# ready. Phase 2 (once /tmp/targets appears, i.e. the verifier runs): every attempt, then
# /tmp/survivor.json and /tmp/survivor-done.
SURVIVOR = r"""
import json, os, socket, sys, time, urllib.parse, urllib.request
proxy = os.environ.get("HTTP_PROXY") or os.environ.get("http_proxy") or ""
parts = urllib.parse.urlsplit(proxy)
gw = (parts.hostname or "cairn-gateway", parts.port or 3128)
half = socket.create_connection(gw, timeout=30)
half.sendall(b"GET http://vonly.test/s-half HTTP/1.1\r\nHost: vonly.test")
open("/tmp/survivor-ready", "w").close()
while not os.path.exists("/tmp/targets"):
    time.sleep(0.05)
targets = json.load(open("/tmp/targets"))
vonly = targets["vonly"]
out = {}
def first_line(sock):
    data = b""
    try:
        sock.settimeout(5)
        while b"\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    except OSError as exc:
        return f"error {type(exc).__name__}"
    return data.split(b"\r\n")[0].decode(errors="replace") or "closed"
def raw(name, addr, request):
    try:
        s = socket.create_connection(addr, timeout=3)
        s.sendall(request)
        out[name] = first_line(s)
        s.close()
    except OSError as exc:
        out[name] = f"error {type(exc).__name__}"
try:
    half.sendall(b"\r\n\r\n")
    out["half"] = first_line(half)
except OSError as exc:
    out["half"] = f"error {type(exc).__name__}"
try:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy}))
    out["proxy"] = opener.open("http://vonly.test/s-proxy", timeout=5).read().decode()
except Exception as exc:
    out["proxy"] = f"error {type(exc).__name__} {exc}"
raw("connect", gw, b"CONNECT vonly.test:80 HTTP/1.1\r\n\r\n")
raw("by-address", gw, f"GET http://{vonly}/s-addr HTTP/1.1\r\n\r\n".encode())
raw("direct", (vonly, 80), b"GET /s-direct HTTP/1.1\r\nHost: vonly.test\r\n\r\n")
for ip in targets["verifier_gateway"]:
    raw(f"vgw {ip}", (ip, 3128), b"GET http://vonly.test/s-vgw HTTP/1.1\r\nHost: vonly.test\r\n\r\n")
found = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            if b"VSECRET=" in open(f"/proc/{pid}/environ", "rb").read():
                found.append(pid)
        except OSError:
            pass
out["secret"] = found
json.dump(out, open("/tmp/survivor.json.part", "w"))
os.rename("/tmp/survivor.json.part", "/tmp/survivor.json")
"""

PLANTED = """\
import urllib.request
try:
    urllib.request.urlopen("http://vonly.test/planted-sitecustomize", timeout=3).read()
except Exception:
    pass
"""

VERIFY = """\
python3 - <<'EOF' > /logs/verifier/reach.txt 2>&1
import os, urllib.request
print(urllib.request.urlopen("http://vonly.test/verifier", timeout=10).read().decode())
print("secret", os.environ.get("VSECRET"))
EOF
touch /tmp/verifier-started
for i in $(seq 1800); do [ -e /tmp/release ] && break; sleep 0.05; done
ok=0
grep -q host=vonly.test /logs/verifier/reach.txt && [ -e /tmp/release ] \\
  && [ "$(cat /app/out.txt)" = result-42 ] && ok=1
echo $ok > /logs/verifier/reward.txt
"""


def _exec(container, cmd: list[str]) -> tuple[int, str]:
    r = container.exec_run(cmd)
    return r.exit_code, r.output.decode(errors="replace")


def _wait_file(container, path: str, deadline: float) -> bool:
    while time.monotonic() < deadline:
        if _exec(container, ["test", "-e", path])[0] == 0:
            return True
        time.sleep(0.1)
    return False


class _Referee(threading.Thread):
    """Watches the trial's containers from the host: once the separate verifier's sandbox runs
    ``test.sh``, tells the agent's left-over process the verifier gateway's addresses, waits for
    its attempts to finish, keeps what it found, then lets the verifier end."""

    def __init__(self, trial_id: str, agent_cid: str, known: set[str], vonly: str) -> None:
        super().__init__(daemon=True)
        self.vonly = vonly
        self.trial_id, self.agent_cid, self.known = trial_id, agent_cid, known
        self.found: dict = {}
        self.verifier_gateway: list[str] = []
        self.verifier_main: list[str] = []
        self.error: str | None = None

    def run(self) -> None:
        try:
            self._run()
        except (
            AssertionError,
            OSError,
            ValueError,
            docker.errors.DockerException,
        ) as exc:  # the test reports it
            self.error = f"{type(exc).__name__}: {exc}"

    def _run(self) -> None:
        client = docker.from_env()
        deadline = time.monotonic() + 300
        main = gateway = None
        while time.monotonic() < deadline and (main is None or gateway is None):
            flt = {"label": [f"cairn.trial={self.trial_id}"]}
            for c in client.containers.list(filters=flt):
                if c.id in self.known:
                    continue
                if c.labels.get("cairn.role") == "gateway":
                    gateway = c
                elif main is None:
                    main = c
            time.sleep(0.1)
        assert main is not None and gateway is not None, "no separate verifier sandbox appeared"
        assert _wait_file(main, "/tmp/verifier-started", deadline), "the verifier never started"
        gateway.reload()
        main.reload()
        self.verifier_gateway = [
            n["IPAddress"] for n in gateway.attrs["NetworkSettings"]["Networks"].values()
        ]
        self.verifier_main = [n["IPAddress"] for n in main.attrs["NetworkSettings"]["Networks"].values()]
        agent = client.containers.get(self.agent_cid)
        targets = json.dumps({"verifier_gateway": self.verifier_gateway, "vonly": self.vonly})
        assert _exec(agent, ["sh", "-c", f"echo '{targets}' > /tmp/targets"])[0] == 0
        assert _wait_file(agent, "/tmp/survivor.json", deadline), "the survivor never finished"
        self.found = json.loads(_exec(agent, ["cat", "/tmp/survivor.json"])[1])
        assert _exec(main, ["touch", "/tmp/release"])[0] == 0


class _Hostile(Agent):
    """Leaves a process with a half-written request behind, plants a ``sitecustomize.py``,
    writes the artifact, and starts the referee."""

    name = "hostile-separate"

    def __init__(self, vonly: str) -> None:
        super().__init__(None)
        self.vonly = vonly
        self.referee: _Referee | None = None

    async def run(self, instruction, sandbox, context) -> None:
        import asyncio

        site = "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])')"
        plant = await sandbox.exec(["sh", "-c", f"cat > {site}/sitecustomize.py <<'PY'\n{PLANTED}PY\n"])
        assert plant.ok, plant.stderr
        assert (await sandbox.exec(["sh", "-c", f"cat > /tmp/surv.py <<'PY'\n{SURVIVOR}PY\n"])).ok
        r = await sandbox.exec(
            [
                "sh",
                "-c",
                "setsid nohup python3 /tmp/surv.py > /tmp/surv.log 2>&1 < /dev/null &",
            ]
        )
        assert r.ok, r.stderr
        for _ in range(400):
            if (await sandbox.exec(["test", "-e", "/tmp/survivor-ready"])).ok:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError((await sandbox.exec(["cat", "/tmp/surv.log"])).stdout)
        assert (await sandbox.exec(["sh", "-c", "mkdir -p /app && echo result-42 > /app/out.txt"])).ok
        cid = sandbox.info["container_id"]
        client = docker.from_env()
        trial_id = client.containers.get(cid).labels["cairn.trial"]
        known = {c.id for c in client.containers.list(filters={"label": [f"cairn.trial={trial_id}"]})}
        self.referee = _Referee(trial_id, cid, known, self.vonly)
        self.referee.start()


def _requests(hosts, name: str) -> list[str]:
    out = docker.from_env().api.logs(hosts.ids[name]).decode()
    return [x for x in out.splitlines() if x.startswith(("req ", "tcp "))]


def _run(tmp_path):
    """Run the task once with the hostile agent; what the test reads afterwards."""
    if not backend_available("docker"):
        pytest.skip("no Docker engine")
    with host_containers("allowed.test", "vonly.test", server=LOGGER) as hosts:
        vonly = hosts["vonly.test"]
        task = write_task(
            tmp_path / "tasks",
            "sepwide",
            network="allowlist",
            allowed_hosts=("allowed.test",),
            root_keys='artifacts = ["/app/out.txt"]',
            dockerfile="FROM python:3.12-slim\nWORKDIR /app\n",
            test=VERIFY,
            toml_extra='[verifier]\nenvironment_mode = "separate"\n'
            '[verifier.environment]\ndocker_image = "python:3.12-slim"\n'
            'network_mode = "allowlist"\nallowed_hosts = ["vonly.test"]\n'
            f'[verifier.environment.env]\nVSECRET = "{SECRET}"\n',
        )
        agent = _Hostile(vonly)
        result = run_trial_sync(task, agent, "docker", tmp_path / "jobs", add_hosts=tuple(hosts.items()))
        assert agent.referee is not None, result.steps[0]
        agent.referee.join(timeout=60)
        seen = _requests(hosts, "vonly.test")

    return result, agent.referee, seen, vonly


def test_nothing_the_agent_left_reaches_what_only_the_separate_verifier_may(tmp_path):
    result, ref, seen, vonly = _run(tmp_path)
    assert ref.error is None, ref.error
    assert result.error is None, result.error
    step = result.steps[0]
    trial = tmp_path / "jobs" / "job" / "trials" / result.trial_name
    reach = (trial / "steps" / "01-main" / "verifier" / "reach.txt").read_text()
    # the verifier itself reached its host and has its secret: the openings were real
    assert "host=vonly.test" in reach and f"secret {SECRET}" in reach, reach
    assert result.reward == 1.0, step
    found = ref.found
    # the left-over process got nothing from vonly.test by any way it tried
    assert set(found) >= {"half", "proxy", "connect", "by-address", "direct"}, found
    assert not any("host=vonly" in str(v) or " 200 " in f"{v} " for v in found.values()), found
    assert len([k for k in found if k.startswith("vgw ")]) == len(ref.verifier_gateway) >= 2, found
    assert found["secret"] == [], found
    # seen from the target: only the verifier's own request (through its gateway) arrived
    assert seen and all(
        line.endswith("b'GET http://vonly.test/verifier HTTP/1.1'") or "/verifier " in line for line in seen
    ), seen
    assert len(seen) == 1 and seen[0].split()[1] in ref.verifier_gateway, (seen, ref.verifier_gateway)
    # the record: every vonly.test request from the agent's sandbox denied, the verifier's
    # allowed in phase verifier with the address it went to
    lines = (trial / "steps" / "01-main" / "network.jsonl").read_text().splitlines()
    records = [json.loads(x) for x in lines]
    allowed = [r for r in records if r["verdict"] == "allowed"]
    assert len(allowed) == 1, records
    (ok,) = allowed
    assert (ok["host"], ok["address"]) == ("vonly.test", vonly), ok
    assert ok["peer"].rsplit(":", 1)[0] in ref.verifier_main, (ok, ref.verifier_main)
    from_agent = [r for r in records if r["peer"] and r["peer"].rsplit(":", 1)[0] not in ref.verifier_main]
    assert len(from_agent) >= 4 and all(
        r["verdict"] == "denied" and r["address"] is None for r in from_agent
    ), from_agent
    # separate mode shares no processes with the verifier, so the survivor was listed, not killed
    assert any("surv.py" in s.cmdline for s in step.survivors) and step.survivors_killed is None
    assert SECRET not in json.dumps(records)


def test_the_separate_verifiers_request_is_recorded_in_phase_verifier(tmp_path):
    result, ref, seen, vonly = _run(tmp_path)
    assert result.error is None, result.error
    trial = tmp_path / "jobs" / "job" / "trials" / result.trial_name
    lines = (trial / "steps" / "01-main" / "network.jsonl").read_text().splitlines()
    (ok,) = [r for r in map(json.loads, lines) if r["verdict"] == "allowed"]
    assert (ok["phase"], ok["host"], ok["address"]) == ("verifier", "vonly.test", vonly), ok
