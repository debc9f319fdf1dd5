"""Proxy variables every tool honours (issue 29): behind the egress gateway, Node's built-in
``fetch``, Python's urllib and curl inside a docker sandbox reach an allowed host through the
proxy, and a request to a local spelling (``localhost``, ``127.0.0.1``, ``0.0.0.0``, the
sandbox's own host name; ``[::1]`` but from Node and urllib, docs/network.md says why) never
goes to the gateway; and httpx, the client under the OpenAI SDK and LiteLLM, takes the variables.

Node is the Node.js 22 that cairn's gemini-cli runtime carries (prepared in cairn's cache, from
the npm registry on a fresh machine), mounted read-only; curl comes from Debian in the test
image's build. The allowed host is a container the test starts (tests/helpers/nethosts).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest

from cairn.netpolicy import NetworkMode
from cairn.sandbox.base import SandboxSpec

docker = pytest.importorskip("docker")
from cairn.sandbox.docker.backend import DockerSandbox  # noqa: E402
from net_agents import PROBE, parse_probe  # noqa: E402
from nethosts import host_containers  # noqa: E402

pytestmark = pytest.mark.docker

DOCKERFILE = (
    "FROM python:3.12-slim\n"
    "RUN apt-get update && apt-get install -y --no-install-recommends curl "
    "&& rm -rf /var/lib/apt/lists/*\n"
    "WORKDIR /app\nCOPY probe.py /probe.py\nCOPY fetch.js /fetch.js\n"
)

FETCH_JS = r"""
(async () => {
  for (const target of process.argv.slice(2)) {
    let line;
    try {
      const r = await fetch(target, { signal: AbortSignal.timeout(8000) });
      line = { target, ok: r.ok, text: (await r.text()).trim() };
    } catch (e) {
      line = { target, ok: false, text: String((e && e.cause) || e) };
    }
    console.log(JSON.stringify(line));
  }
})();
"""

CURL = r"""
for u in "$@"; do
  out=$(curl -s -m 8 -w ' code=%{http_code}' "$u" 2>&1); rc=$?
  python3 -c 'import json,sys; a = sys.argv
print(json.dumps({"target": a[1], "ok": a[2] == "0", "text": a[3]}))' "$u" "$rc" "$out"
done
"""

LOCAL_SERVER = r"""
import http.server, sys, threading
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"local"
        self.send_response(200); self.send_header("Content-Length", "5"); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", 8000), H).serve_forever()
"""


@pytest.fixture(scope="module")
def node_runtime() -> Path:
    from cairn.agents.installed import GEMINI_CLI
    from cairn.agents.runtime import prepare_any

    rt = prepare_any(GEMINI_CLI.name, GEMINI_CLI.packaging, GEMINI_CLI.version)
    assert (rt.path / "bin" / "node").exists(), rt.path
    return rt.path


def test_node_fetch_urllib_and_curl_use_the_proxy_and_never_for_local_names(tmp_path, node_runtime):
    env = tmp_path / "env"
    env.mkdir()
    (env / "Dockerfile").write_text(DOCKERFILE)
    (env / "probe.py").write_text(PROBE)
    (env / "fetch.js").write_text(FETCH_JS)
    (tmp_path / "curl.sh").write_text(CURL)
    (tmp_path / "local.py").write_text(LOCAL_SERVER)
    with host_containers("allowed.test") as hosts:
        spec = SandboxSpec(
            env_dir=env,
            job_id="test-proxy-env",
            trial_id=uuid.uuid4().hex[:12],
            network_mode=NetworkMode.ALLOWLIST,
            allowed_hosts=("allowed.test",),
            add_hosts=(("allowed.test", hosts["allowed.test"]),),
            mounts=((node_runtime, "/opt/node-rt"),),
        )

        async def go():
            async with DockerSandbox(spec) as sb:
                await sb.upload(tmp_path / "curl.sh", "/tmp/curl.sh")
                await sb.upload(tmp_path / "local.py", "/tmp/local.py")
                server = asyncio.ensure_future(sb.exec(["python3", "/tmp/local.py"], timeout_sec=120))
                for _ in range(200):
                    if (
                        await sb.exec(
                            [
                                "python3",
                                "-c",
                                "import socket; socket.create_connection(('127.0.0.1', 8000), timeout=1)",
                            ]
                        )
                    ).ok:
                        break
                    await asyncio.sleep(0.05)
                me = (await sb.exec(["hostname"])).stdout.strip()
                env_out = (await sb.exec(["sh", "-c", "echo $NODE_USE_ENV_PROXY $no_proxy"])).stdout
                local = [f"http://{h}:8000/" for h in ("localhost", "127.0.0.1", "[::1]", "0.0.0.0", me)]
                targets = ["http://allowed.test/", *local]
                runs = {
                    "node": await sb.exec(["/opt/node-rt/bin/node", "/fetch.js", *targets], timeout_sec=120),
                    "urllib": await sb.exec(["python3", "/probe.py", *targets], timeout_sec=120),
                    "curl": await sb.exec(["sh", "/tmp/curl.sh", *targets], timeout_sec=120),
                }
                records = await sb.network_records()
                server.cancel()
                return me, env_out, local, runs, records

        me, env_out, local, runs, records = asyncio.run(go())
    assert env_out.split()[0] == "1", env_out
    assert all(h in env_out for h in ("::1", "0.0.0.0", me)), env_out
    for tool, r in runs.items():
        got = parse_probe(r.stdout)
        assert got["http://allowed.test/"]["ok"], (tool, got, r.stderr)
        assert got["http://allowed.test/"]["text"].startswith("host=allowed.test"), (tool, got)
        for url in local:
            if "[::1]" not in url:  # the sandbox has no IPv6 loopback: that one cannot answer
                assert got[url]["ok"] and got[url]["text"].startswith("local"), (tool, url, got)
            if tool == "curl" or "[::1]" not in url:
                assert "403" not in got[url]["text"], (tool, url, got)
    # the gateway saw the allowed host once per tool, and nothing local but [::1] from Node
    # and urllib (NO_PROXY cannot name it: httpx fails on a bracketed entry; docs/network.md)
    assert (
        sorted((x["host"], x["verdict"]) for x in records)
        == [("::1", "denied")] * 2 + [("allowed.test", "allowed")] * 3
    ), json.dumps(records, indent=1)
