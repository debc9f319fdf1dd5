"""An in-sandbox test agent for network-policy tests, and the probe it runs.

:data:`PROBE` is a Python script (copied into the test image as ``/probe.py``) that tries each
target and prints one JSON line per target: ``{"target", "ok", "text"}``. Targets are URLs
(fetched with urllib, so ``HTTP_PROXY``/``HTTPS_PROXY`` apply; HTTPS certificates are not
checked, like ``curl -k``) or ``sock:HOST:PORT`` (a direct TCP connect, no proxy).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from cairn.agents.base import Agent, AgentContext
from cairn.sandbox.base import Sandbox

PROBE = r"""
import json, socket, ssl, sys, urllib.request
ctx = ssl._create_unverified_context()
for target in sys.argv[1:]:
    try:
        if target.startswith("sock:"):
            host, port = target[5:].rsplit(":", 1)
            socket.create_connection((host, int(port)), timeout=2).close()
            text = "connected"
        else:
            text = urllib.request.urlopen(target, context=ctx, timeout=8).read().decode().strip()
        ok = True
    except Exception as exc:
        ok, text = False, f"{type(exc).__name__}: {exc}"
    print(json.dumps({"target": target, "ok": ok, "text": text}), flush=True)
"""

DOCKERFILE = "FROM python:3.12-slim\nWORKDIR /app\nCOPY probe.py /probe.py\n"


def parse_probe(stdout: str) -> dict[str, dict]:
    """target → its probe line."""
    out = {}
    for line in stdout.splitlines():
        if line.startswith("{"):
            item = json.loads(line)
            out[item["target"]] = item
    return out


class ProbeAgent(Agent):
    """Runs :data:`PROBE` inside the sandbox on ``targets``; declares ``hosts`` as its model
    hosts (what an installed CLI agent's model endpoint is). Results land in
    ``<step>/agent/probe.jsonl`` and in :attr:`results`.
    """

    name = "probe"

    def __init__(self, targets: list[str], hosts: list[str] | None = None) -> None:
        super().__init__(None)
        self.targets = list(targets)
        self.hosts = list(hosts or [])
        self.results: dict[str, dict] = {}

    def model_hosts(self, agent_env: Mapping[str, str]) -> list[str]:
        return list(self.hosts)

    async def run(self, instruction: str, sandbox: Sandbox, context: AgentContext) -> None:
        r = await sandbox.exec(["python3", "/probe.py", *self.targets], timeout_sec=120)
        context.logs_dir.mkdir(parents=True, exist_ok=True)
        (context.logs_dir / "probe.jsonl").write_text(r.stdout)
        self.results = parse_probe(r.stdout)
