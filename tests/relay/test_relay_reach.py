"""The job's model relay reached from inside real sandboxes (issue 30): docker, compose and
local, under every network mode. A scripted client inside the sandbox (python3 urllib, so the
sandbox's ``HTTP_PROXY`` applies as it does for every CLI) calls the relay at the URL the trial
gave its agent with the trial's token and gets the scripted server's answer; a token of an
ended trial, no token and a made-up one are refused; under ``no-network`` and ``allowlist``
the scripted server itself (listening where the host reaches it) is not reachable, and on
docker ``network.jsonl`` shows the relay's ``ADDRESS:PORT`` as the only opening. After the
trial its token is refused from the host too."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from cairn.agents.base import Agent, AgentContext
from cairn.relay.server import Upstream
from cairn.relay.service import RelayAccess, RelayService, RelayWanted
from cairn.sandbox.base import Sandbox
from cairn.trial.context import JobServices
from taskgen import write_task
from testbed import backend_available, local_available
from wire_models import Say, WireModels

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("aiohttp") is None, reason="needs the relay extra"),
]

KEY = "sk-upstream-reach-0123456789abcdef"

CLIENT = r"""
import json, sys, urllib.request, urllib.error
url, token, stale = sys.argv[1], sys.argv[2], sys.argv[3]
others = sys.argv[4:]
def call(tok, base=url):
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    req = urllib.request.Request(base + "/v1/chat/completions", data=body, method="POST",
                                 headers={"content-type": "application/json"})
    if tok:
        req.add_header("Authorization", "Bearer " + tok)
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return {"status": r.status, "body": r.read().decode()}
    except urllib.error.HTTPError as e:
        return {"status": e.code, "body": e.read().decode()[:300]}
    except Exception as e:
        return {"status": None, "body": f"{type(e).__name__}: {e}"[:300]}
out = {"good": call(token), "stale": call(stale), "none": call(""), "bogus": call("cairn-made-up")}
out["others"] = {o: call(token, o) for o in others}
print(json.dumps(out))
"""

DOCKERFILE = "FROM python:3.12-slim\nWORKDIR /app\n"


class RelayClientAgent(Agent):
    """An in-sandbox agent on the relay: runs :data:`CLIENT` inside the sandbox."""

    name = "relay-client"

    def __init__(self, upstream: Upstream, stale: str, others: list[str]) -> None:
        super().__init__(None)
        self.upstream, self.stale, self.others = upstream, stale, others
        self.url: str | None = None
        self.lease: Any = None
        self.out: dict[str, Any] = {}

    def model_hosts(self, agent_env: Mapping[str, str]) -> list[str]:
        return ["api.openai.com"]  # what a CLI would declare; on the relay it is not opened

    def relay_wanted(self) -> RelayWanted:
        return RelayWanted(provider="openai", upstream=self.upstream, in_sandbox=True)

    def use_relay(self, url: str, lease: Any) -> None:
        self.url, self.lease = url, lease

    async def run(self, instruction: str, sandbox: Sandbox, context: AgentContext) -> None:
        assert self.url is not None
        r = await sandbox.exec(
            ["python3", "-c", CLIENT, self.url, self.lease.token, self.stale, *self.others], timeout_sec=120
        )
        assert r.exit_code == 0, r.stderr
        self.out = json.loads(r.stdout.strip().splitlines()[-1])


class _Plain(Agent):
    """An earlier trial's agent: it only takes a token, which dies with its trial."""

    name = "earlier"

    def __init__(self, upstream: Upstream) -> None:
        super().__init__(None)
        self.upstream = upstream

    def relay_wanted(self) -> RelayWanted:
        return RelayWanted(provider="openai", upstream=self.upstream, in_sandbox=True)

    def use_relay(self, url: str, lease: Any) -> None:
        pass

    async def run(self, instruction: str, sandbox: Sandbox, context: AgentContext) -> None:
        raise AssertionError("never run: only its token is used")


def _plan(task: Path, backend: str, jobs: Path):
    from cairn.plan import RunOptions, TrialPlan, trial_id
    from cairn.results.store import trial_dir_name
    from cairn.task.load import load_task

    t = load_task(task)
    tid = trial_id(t.name, t.content_hash, "relay-client", {}, None, backend, 1)
    return TrialPlan(
        task=t,
        agent_name="relay-client",
        agent_kwargs={},
        model=None,
        backend=backend,
        attempt=1,
        trial_id=tid,
        trial_dir=jobs / "job" / "trials" / trial_dir_name(t.name, 1, tid),
        job_id="test-reach-" + tid[:8],
        job_dir=jobs / "job",
        options=RunOptions(),
    )


async def _trial(task: Path, backend: str, jobs: Path, server: WireModels, others: list[str]):
    from cairn.trial.run import run_trial

    service = RelayService(None)
    services = JobServices(relay=service, resources=(service,))
    await services.open()
    try:
        up = Upstream(server.base_url, KEY)
        from cairn.sandbox import get_backend

        cls = get_backend(backend)
        earlier = await service.attach(_Plain(up), "earlier-trial", backend, cls.host_address)
        assert isinstance(earlier, RelayAccess)
        await service.detach(earlier)  # that trial ended: its token is dead
        agent = RelayClientAgent(up, earlier.lease.token, others)
        result = await run_trial(_plan(task, backend, jobs), services, agent=agent)
        # after the trial its own token is refused, from the host too
        import httpx

        assert service.relay is not None
        async with httpx.AsyncClient(base_url=service.relay.url, timeout=10) as c:
            late = await c.post(
                "/v1/chat/completions",
                headers={"Authorization": f"Bearer {agent.lease.token}"},
                json={"model": "m", "messages": [{"role": "user", "content": "late"}]},
            )
        return result, agent, late.status_code
    finally:
        await services.aclose()


def _check(result, agent: RelayClientAgent, late: int, server: WireModels, *, reach_others: bool) -> None:
    assert result.error is None, result.error
    assert result.spend_source == "relay"
    out = agent.out
    assert out["good"]["status"] == 200, out
    assert json.loads(out["good"]["body"])["choices"][0]["message"]["content"] == "from the scripted server"
    for k in ("stale", "none", "bogus"):
        assert out[k]["status"] == 401, (k, out[k])
    assert late == 401
    relayed = [r for r in server.requests if r.headers.get("authorization") == f"Bearer {KEY}"]
    assert len(relayed) == 1  # only the good call went upstream, with the host's key
    assert KEY not in json.dumps(out)
    for target, got in out["others"].items():
        if reach_others:
            assert got["status"] is not None, (target, got)
        else:
            assert got["status"] in (None, 403), (target, got)  # no route, or the gateway's 403


def _network_lines(result_dir: Path) -> list[dict]:
    lines = []
    for f in sorted(result_dir.glob("steps/*/network.jsonl")):
        lines += [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
    return lines


def _trial_dir(jobs: Path) -> Path:
    (d,) = list((jobs / "job" / "trials").iterdir())
    return d


def _docker_bridge() -> str:
    from cairn.sandbox.docker.backend import DockerSandbox

    addr = DockerSandbox.host_address()
    assert addr is not None
    return addr


def _task(tmp_path: Path, mode: str, compose: bool = False) -> Path:
    files: dict[str, str] = {}
    if compose:
        files["environment/docker-compose.yaml"] = (
            "services:\n  main: {}\n  side:\n    image: debian:bookworm-slim\n"
            '    command: ["sleep", "infinity"]\n'
        )
    task = write_task(tmp_path / "tasks", f"reach-{mode}", network=mode, dockerfile=DOCKERFILE, files=files)
    if mode == "allowlist":
        toml = task / "task.toml"
        toml.write_text(
            toml.read_text().replace(
                'network_mode = "allowlist"\n', 'network_mode = "allowlist"\nallowed_hosts = ["pypi.org"]\n'
            )
        )
    return task


@pytest.mark.docker
@pytest.mark.parametrize("compose", [False, True], ids=["docker", "compose"])
@pytest.mark.parametrize("mode", ["public", "allowlist", "no-network"])
def test_docker_sandbox_reaches_the_relay_and_only_it(tmp_path, mode, compose):
    if not backend_available("docker"):
        pytest.skip("no docker engine")
    bridge = _docker_bridge()
    with WireModels([Say("from the scripted server")], host=bridge) as server:
        # the scripted server listens where the relay reaches it: on the engine host's
        # bridge address, which a sandbox reaches directly under public only
        others = [server.base_url]
        result, agent, late = asyncio.run(
            asyncio.wait_for(
                _trial(_task(tmp_path, mode, compose), "docker", tmp_path / "jobs", server, others), 600
            )
        )
        assert agent.url is not None and agent.url.startswith(f"http://{bridge}:")
        _check(result, agent, late, server, reach_others=mode == "public")
    lines = _network_lines(_trial_dir(tmp_path / "jobs"))
    port = int(agent.url.rsplit(":", 1)[1])
    if mode == "public":
        assert lines == []  # no gateway: nothing to filter
        return
    allowed = [x for x in lines if x["verdict"] == "allowed"]
    assert allowed, lines
    assert {(x["host"], x["port"], x["address"]) for x in allowed} == {(bridge, port, bridge)}
    assert all(x["phase"] == "agent" for x in allowed)
    server_port = int(server.base_url.rsplit(":", 1)[1])
    assert any(x["verdict"] == "denied" and x["port"] == server_port for x in lines), lines


@pytest.mark.local
@pytest.mark.parametrize("mode", ["public", "no-network"])
def test_local_sandbox_reaches_the_relay_and_only_it(tmp_path, mode):
    if not local_available():
        pytest.skip("no local sandbox support")
    with WireModels([Say("from the scripted server")]) as server:
        others = [server.base_url]  # on the host's loopback: reached only from the host network
        result, agent, late = asyncio.run(
            asyncio.wait_for(_trial(_task(tmp_path, mode), "local", tmp_path / "jobs", server, others), 600)
        )
        assert agent.url is not None and agent.url.startswith("http://127.0.0.1:")
        _check(result, agent, late, server, reach_others=mode == "public")
