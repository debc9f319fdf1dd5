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

import pytest

from taskgen import reward_if, write_task
from testbed import local_available

HEAVY = (
    "docker",
    "requests",
    "urllib3",
    "litellm",
    "rich",
    "yaml",
    "pydantic",
    "typer",
    "asyncio",
    "cairn.results",
    "cairn.sandbox",
    "cairn.job",
    "cairn.trial",
    "cairn.agents",
    "cairn.task",
)
"""Modules none of which may be loaded before the first engine call is sent (nor by
``import cairn.cli``): Typer, pydantic and cairn's models load while the ping is on its way."""

SRC = Path(__file__).resolve().parents[2] / "src"


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.update(extra)
    return env


def test_import_cairn_cli_loads_no_heavy_module():
    code = "import json, sys, cairn.cli\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=_env(),
        capture_output=True,
        text=True,
        encoding="utf-8",
        check=True,
        timeout=60,
    )
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
            [
                sys.executable,
                "-c",
                PROBE,
                "run",
                "-p",
                str(task),
                "-a",
                "oracle",
                "-e",
                "docker",
                "--jobs-dir",
                str(tmp_path / "jobs"),
            ],
            env=_env(DOCKER_HOST=f"unix://{sock_path}", PROBE_SOCKET=sock_path, PROBE_OUT=str(out_file)),
            capture_output=True,
            text=True,
            encoding="utf-8",
            timeout=60,
        )
    finally:
        listener.close()
    assert r.returncode == 0, f"cairn run never connected to the engine: {r.stderr[-2000:]}"
    assert out_file.exists(), "the first engine call was not the early ping"
    loaded = set(json.loads(out_file.read_text(encoding="utf-8")))
    assert "cairn._util.engine_ping" in loaded
    bad = sorted(m for m in loaded if m in HEAVY or any(m.startswith(h + ".") for h in HEAVY))
    assert bad == [], f"loaded before the first engine call: {bad}"


NOT_ON_LOCAL_RUN = (
    # third-party modules a local oracle trial does not use
    "docker",
    "requests",
    "urllib3",
    "litellm",
    "rich",
    "yaml",
    "jinja2",
    "httpx",
    "starlette",
    "uvicorn",
    "ray",
    "mcp",
    "pyarrow",
    "dotenv",
    # standard-library modules only some tasks need (an ADD of an archive)
    "tarfile",
    # command modules of other commands (cli/_app.py app_for) and areas the run does not reach
    "cairn.cli.tasks",
    "cairn.cli.clean",
    "cairn.cli.snapshots",
    "cairn.cli.datasets",
    "cairn.cli.view",
    "cairn.cli.export",
    "cairn.cli.agents",
    "cairn.sandbox.docker",
    "cairn.viewer",
    "cairn.datasets",
    "cairn.agents.llm",
    "cairn.agents.installed",
    "cairn.job.executors.ray",
    "cairn.results.export",
    "cairn.results.harbor",
)
"""Modules none of which ``cairn run -a oracle -e local`` of a trivial task may load (#13: the
whole process of that trial is the target, so each costs every run)."""

LOCAL_PROBE = textwrap.dedent("""
    import atexit, gc, json, os, sys
    seen = {"gc_at_start": gc.isenabled()}
    def dump():
        seen.update(modules=sorted(sys.modules), gc_at_exit=gc.isenabled(),
                    frozen=gc.get_freeze_count())
        json.dump(seen, open(os.environ["PROBE_OUT"], "w", encoding="utf-8"))
    atexit.register(dump)
    import cairn.job.run as job_run
    real = job_run.arun_job
    def arun_job(*a, **k):  # the job starts: is the collector running again?
        seen["gc_at_job"] = gc.isenabled()
        return real(*a, **k)
    job_run.arun_job = arun_job
    sys.argv = ["cairn", *sys.argv[1:]]
    from cairn.cli import main
    main()
""")


@pytest.mark.local
@pytest.mark.skipif(not local_available(), reason="no local sandbox support")
def test_cairn_run_local_loads_only_what_the_trial_uses(tmp_path):
    task = write_task(
        tmp_path / "tasks", "startup", solve="touch /tmp/done\n", test=reward_if("test -f /tmp/done")
    )
    out_file = tmp_path / "modules.json"
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            LOCAL_PROBE,
            "run",
            "-p",
            str(task),
            "-a",
            "oracle",
            "-e",
            "local",
            "--jobs-dir",
            str(tmp_path / "jobs"),
            "--job-name",
            "j",
        ],
        env=_env(PROBE_OUT=str(out_file)),
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (result,) = (tmp_path / "jobs" / "j" / "trials").glob("*/result.json")
    assert json.loads(result.read_text(encoding="utf-8"))["reward"] == 1.0
    seen = json.loads(out_file.read_text(encoding="utf-8"))
    # start-up ran with the collector paused (cli.main); the job and the exit with it running
    assert seen["gc_at_start"] and seen["gc_at_job"] and seen["gc_at_exit"]
    assert seen["frozen"] > 10_000  # start-up's objects were moved out of its generations
    loaded = set(seen["modules"])
    assert {"cairn.cli.run", "cairn.sandbox.local", "cairn.trial.run"} <= loaded
    bad = sorted(
        m for m in loaded if m in NOT_ON_LOCAL_RUN or any(m.startswith(h + ".") for h in NOT_ON_LOCAL_RUN)
    )
    assert bad == [], f"cairn run -e local loaded {bad}"


def test_each_command_is_built_from_its_own_modules_only():
    """``app_for([name])`` imports only ``COMMAND_MODULES[name]``: every top-level command and
    group of the full application is in that table, with the modules its callbacks live in,
    and the application it returns holds exactly that command."""
    import typer.main

    from cairn.cli._app import COMMAND_MODULES, _register, app, app_for

    _register()
    full = typer.main.get_command(app)
    assert isinstance(full, typer.main.TyperGroup)
    assert sorted(full.commands) == sorted(COMMAND_MODULES)

    def callback_modules(cmd) -> set[str]:
        if hasattr(cmd, "commands"):
            return set().union(*(callback_modules(c) for c in cmd.commands.values()))
        return {
            cmd.callback.__wrapped__.__module__
            if hasattr(cmd.callback, "__wrapped__")
            else cmd.callback.__module__
        }

    for name, cmd in full.commands.items():
        mods = {m.removeprefix("cairn.cli.") for m in callback_modules(cmd)}
        assert mods <= set(COMMAND_MODULES[name]), (name, mods)
        one = typer.main.get_command(app_for([name]))
        assert isinstance(one, typer.main.TyperGroup)
        assert list(one.commands) == [name]
        assert [p.name for p in one.commands[name].params] == [p.name for p in cmd.params]
    assert app_for([]) is app and app_for(["--help"]) is app and app_for(["runn"]) is app


@pytest.mark.parametrize(
    "argv", [["run", "--no-such-flag"], ["run", "-p", "/nonexistent/task", "--dry-run"], ["--version"]]
)
def test_main_leaves_the_garbage_collector_running(argv):
    """Whatever the command does (a usage error, a refused input, no job at all), the collector
    ``cairn.cli.main`` paused for start-up runs again when it returns."""
    code = textwrap.dedent(f"""
        import gc, sys
        sys.argv = ["cairn", *{argv!r}]
        from cairn.cli import main
        try:
            main()
        except SystemExit as exc:
            print("exit", exc.code)
        print("gc", gc.isenabled())
    """)
    r = subprocess.run(
        [sys.executable, "-c", code], env=_env(), capture_output=True, text=True, encoding="utf-8", timeout=60
    )
    assert r.stdout.splitlines()[-1] == "gc True", r.stdout + r.stderr
    assert r.stdout.splitlines()[-2] != "exit 0" or argv == ["--version"]
