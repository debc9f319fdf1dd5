"""Helpers of the viewer tests (their fixtures are in tests/viewer/conftest.py): a real job
folder made by ``cairn run`` (local backend, the
``llm`` agent against tests/helpers/fake_openai.py), a running ``cairn view`` server and a
headless Debian Chromium driven by Selenium.

The example job holds: ``hello`` (single step; its agent writes ``<script>`` tags and a
``javascript:`` link to stdout, and an HTML artifact with script), ``chain`` (three steps, all
pass), ``gated`` (two steps, stopped after the first by ``min_reward``), ``broken`` (its verifier
writes no reward: errored, category task). Each task's instruction carries a ``CMD:`` line that
the scripted model runs with its ``bash`` tool, then it submits.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
SRC = TESTS.parent / "src"
sys.path.insert(0, str(TESTS / "helpers"))

from cairncli import run_cairn, start_cairn  # noqa: E402
from fake_openai import bash_call, submit_call  # noqa: E402
from taskgen import StepSpec, constant_reward, reward_if, write_task  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"

HOSTILE_OUT = (
    "<script>window.__pwned=1</script>"
    '<a id="evil" href="javascript:window.__pwned=2">click me</a>'
    '<img src=x onerror="window.__pwned=6">'
)
HOSTILE_HTML = (
    "<html><body><script>window.__pwned=3</script>"
    '<img src=x onerror="window.__pwned=4"><h1>evil artifact</h1></body></html>'
)


def env(**extra: str) -> dict[str, str]:
    """The environment of cairn subprocesses: this checkout first on PYTHONPATH."""
    e = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), str(TESTS), str(TESTS / "helpers")]),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "OPENAI_API_KEY": "sk-fake-viewer-test",
    }
    e.update(extra)
    return e


def cairn(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``python3 -m cairn ARGS`` to its end."""
    return run_cairn(*args, cwd=cwd, timeout=timeout, env=env())


def local_ready() -> bool:
    """Whether the local backend can run here (it needs root or user namespaces; testbed's
    probe, whose ``backend_missing("local")`` says why not)."""
    from testbed import backend_available

    return backend_available("local")


def model_reply(body: dict):
    """The scripted model: run the instruction's ``CMD:`` line with bash, then submit."""
    msgs = body.get("messages") or []
    if msgs and msgs[-1].get("role") == "tool":
        return submit_call(usage=(40, 5))
    user = next((m for m in reversed(msgs) if m.get("role") == "user"), {})
    content = user.get("content")
    if isinstance(content, list):
        content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    m = re.search(r"CMD: (.*)", content or "")
    return bash_call(m.group(1) if m else "true", usage=(100, 20, 10))


def write_example_tasks(root: Path) -> Path:
    """The four tasks of the example job under ``root/tasks``."""
    tasks = root / "tasks"
    hello_cmd = (
        f"printf '%s\\n' '{HOSTILE_OUT}'; printf '%s' '{HOSTILE_HTML}' > /app/evil.html; "
        "echo hi > /app/out.txt"
    )
    hello = write_task(
        tasks,
        "hello",
        instruction=f"Say hi. <script>window.__pwned=5</script>\nCMD: {hello_cmd}\n",
        test="echo '<script>window.__pwned=7</script> checking'\n" + reward_if("test -f /app/out.txt"),
    )
    toml = hello / "task.toml"
    toml.write_text('artifacts = ["/app/evil.html", "/app/out.txt"]\n' + toml.read_text())
    write_task(
        tasks,
        "chain",
        steps=[
            StepSpec(
                "fetch",
                instruction="CMD: echo 1 > /app/a.txt\n",
                test=reward_if("test -f /app/a.txt"),
                min_reward=1.0,
            ),
            StepSpec(
                "fix",
                instruction="CMD: echo 2 > /app/b.txt\n",
                test=reward_if("test -f /app/b.txt"),
                min_reward=1.0,
            ),
            StepSpec("ship", instruction="CMD: echo 3 > /app/c.txt\n", test=reward_if("test -f /app/c.txt")),
        ],
    )
    write_task(
        tasks,
        "gated",
        steps=[
            StepSpec("first", instruction="CMD: echo half\n", test=constant_reward(0.5), min_reward=1.0),
            StepSpec("second", instruction="CMD: echo never\n"),
        ],
    )
    write_task(tasks, "broken", instruction="CMD: echo working\n", test="echo 'no reward written'\n")
    return tasks


def trial_dir(job: Path, task: str) -> Path:
    """The (first) trial folder of a task of the example job."""
    return next(p for p in sorted((job / "trials").iterdir()) if p.name.startswith(f"test-{task}__"))


@contextlib.contextmanager
def view_server(path: Path, *extra: str) -> Iterator[str]:
    """Run ``cairn view PATH --port 0`` and yield its base URL; stopped (by its pid) after."""
    proc = start_cairn("view", str(path), "--port", "0", *extra, env=env())
    try:
        line = proc.stdout.readline()  # printed once the socket is bound
        m = re.search(r"(http://\S+/)", line)
        assert m, line + (proc.stderr.read() if proc.poll() is not None else "")
        yield m.group(1)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def console_errors(driver) -> list[dict]:
    """Console messages of level SEVERE since the last call (CSP violations included)."""
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def wait_for(pred, timeout: float = 20.0, interval: float = 0.2):
    """Poll ``pred`` until it returns a truthy value (returned) or ``timeout`` seconds pass."""
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s (last: {last!r})")


def report_json(job: Path) -> dict:
    """``cairn report JOB --format json``, parsed."""
    p = cairn("report", str(job), "--format", "json", cwd=job.parent)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)
