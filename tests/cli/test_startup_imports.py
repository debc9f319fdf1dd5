"""What ``cairn`` imports before it reaches the Docker engine (#13, design §12).

``cairn run`` must reach its first engine call within 0.25 s of process start
(``bench/startup.py`` measures it). Timings are noisy; these tests hold the cause instead:
the modules loaded by then, checked in a fresh interpreter, so a heavy import creeping onto the
path fails here deterministically.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

from taskgen import reward_if, write_task

HEAVY = ("docker", "requests", "urllib3", "litellm", "rich", "yaml", "pydantic", "typer",
         "asyncio", "cairn.results", "cairn.sandbox", "cairn.job", "cairn.trial",
         "cairn.agents", "cairn.task")
"""Modules none of which may be loaded before the first engine call is sent (nor by
``import cairn.cli``): Typer, pydantic and cairn's models load while the ping is on its way."""

SRC = Path(__file__).resolve().parents[2] / "src"


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.update(extra)
    return env


def test_import_cairn_cli_loads_no_heavy_module():
    code = ("import json, sys, cairn.cli\n"
            "print(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True,
                         text=True, encoding="utf-8", check=True, timeout=60)
    loaded = set(json.loads(out.stdout))
    assert "cairn.cli" in loaded
    bad = sorted(m for m in loaded if m in HEAVY or any(m.startswith(h + ".") for h in HEAVY))
    assert bad == [], f"import cairn.cli loads {bad}"


PROBE = textwrap.dedent("""
    import json, os, socket, sys, threading
    target = os.environ["PROBE_SOCKET"]
    real_start, real_connect = threading.Thread.start, socket.socket.connect
    def start(self):  # the ping thread is launched: what is loaded by then, in this thread
        if self.name == "cairn-docker-ping":
            with open(os.environ["PROBE_OUT"], "w", encoding="utf-8") as fh:
                json.dump(sorted(sys.modules), fh)
        return real_start(self)
    def connect(self, addr):
        if addr == target:
            os._exit(0)  # the first engine call: done
        return real_connect(self, addr)
    threading.Thread.start = start
    socket.socket.connect = connect
    sys.argv = ["cairn", *sys.argv[1:]]
    from cairn.cli import main
    main()
    os._exit(3)  # never reached the engine
""")


def test_cairn_run_reaches_the_engine_before_any_heavy_import(tmp_path):
    task = write_task(tmp_path / "tasks", "startup", solve="true\n", test=reward_if("true"))
    sock_path = str(tmp_path / "engine.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # an engine address of ours
    listener.bind(sock_path)
    listener.listen(1)
    try:
        out_file = tmp_path / "modules.json"
        r = subprocess.run(
            [sys.executable, "-c", PROBE, "run", "-p", str(task), "-a", "oracle", "-e", "docker",
             "--jobs-dir", str(tmp_path / "jobs")],
            env=_env(DOCKER_HOST=f"unix://{sock_path}", PROBE_SOCKET=sock_path,
                     PROBE_OUT=str(out_file)),
            capture_output=True, text=True, encoding="utf-8", timeout=60)
    finally:
        listener.close()
    assert r.returncode == 0, f"cairn run never connected to the engine: {r.stderr[-2000:]}"
    assert out_file.exists(), "the first engine call was not the early ping"
    loaded = set(json.loads(out_file.read_text(encoding="utf-8")))
    assert "cairn._util.engine_ping" in loaded
    bad = sorted(m for m in loaded if m in HEAVY or any(m.startswith(h + ".") for h in HEAVY))
    assert bad == [], f"loaded before the first engine call: {bad}"
