"""Real job folders with the model relay's ``model_calls.jsonl``, made by ``cairn run`` (the
``llm`` agent on the local backend against tests/helpers/fake_openai.py), for the viewer's calls
pane and ``cairn report``'s sums.

:func:`calls_jobs` runs three jobs of ``examples/two-steps`` side by side, once per test session:

- ``relay``: ``--record-model-bodies``, two trials one after the other (``-n 1``). Trial 1's
  first call gets a 500 (the agent retries: the relay records ``retry_of: 1``); its second
  step's command echoes ``<script>`` into the tool output, so the next request body holds it.
  Trial 2 runs on the default answer. Every answer carries usage; the model is priced.
- ``hostile``: the model is named ``openai/<script>window.__pwned=9</script>``: every record's
  ``model`` is markup (and unpriced: ``cost_usd`` null), with bodies recorded.
- ``direct``: ``--no-relay``: no ``model_calls.jsonl``; result.json's spend is the agent's own
  report (``spend_source: agent``).
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from cairncli import run_cairn
from fake_openai import FakeOpenAI, Reply, bash_call, error, submit_call

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "two-steps"
SRC = Path(__file__).resolve().parents[2] / "src"
KEY = "sk-calls-job-host-key-0123456789"
HOSTILE_MODEL = "<script>window.__pwned=9</script>"
ECHOED = "<script>window.__pwned=8</script>"


@dataclass
class CallsJobs:
    """The three job folders and what their scripted server billed.

    Attributes:
        relay: the relay job's folder.
        hostile: the hostile-model job's folder.
        direct: the ``--no-relay`` job's folder.
        billed: per job name, the usage of every 200 answer the server sent, in order
            (``(prompt, completion, cached)``).
        requests: per job name, how many requests the server got.
        logs: per job name, the run's stdout + stderr.
    """

    relay: Path
    hostile: Path
    direct: Path
    billed: dict[str, list[tuple[int, int, int | None]]] = field(default_factory=dict)
    requests: dict[str, int] = field(default_factory=dict)
    logs: dict[str, str] = field(default_factory=dict)


def _usage(r: Reply) -> tuple[int, int, int | None]:
    u = r.body["usage"]
    cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens")
    return u["prompt_tokens"], u["completion_tokens"], cached


def _scripts() -> dict[str, tuple[list[Reply], Reply]]:
    relay = [
        error(500, "scripted outage"),
        bash_call("echo 1 > /app/a.txt", usage=(120, 30, 20)),
        submit_call(usage=(160, 10)),
        bash_call(f"echo '{ECHOED}'; echo 2 > /app/b.txt", usage=(200, 25, 50)),
        submit_call(usage=(260, 6)),
        # trial 2
        bash_call("echo 1 > /app/a.txt", usage=(100, 20)),
        submit_call(usage=(110, 5)),
        bash_call("echo 2 > /app/b.txt", usage=(120, 20)),
        submit_call(usage=(130, 5)),
    ]
    hostile = [
        bash_call("echo 1 > /app/a.txt", usage=(50, 10)),
        submit_call(usage=(60, 5)),
        bash_call(f"echo '{ECHOED}'; echo 2 > /app/b.txt", usage=(70, 10)),
        submit_call(usage=(80, 5)),
    ]
    direct = [
        bash_call("echo 1 > /app/a.txt", usage=(90, 10, 30)),
        submit_call(usage=(95, 5, 30)),
        bash_call("echo 2 > /app/b.txt", usage=(100, 10, 30)),
        submit_call(usage=(105, 5, 30)),
    ]
    fallback = submit_call(usage=(1, 1))
    return {"relay": (relay, fallback), "hostile": (hostile, fallback), "direct": (direct, fallback)}


def _run(root: Path, name: str, server: FakeOpenAI, model: str, *flags: str) -> str:
    env = {
        **os.environ,
        "PYTHONPATH": str(SRC),
        "OPENAI_API_KEY": KEY,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    args = [
        "run",
        "-p",
        str(EXAMPLE),
        "-a",
        "llm",
        "-m",
        model,
        "--ak",
        f"api_base={server.url}",
        "--ak",
        "retry_base_delay_sec=0.01",
        "-e",
        "local",
        "-o",
        str(root),
        "--job-name",
        name,
        "-r",
        "0",
        "-n",
        "1",
        *flags,
    ]
    p = run_cairn(*args, env=env, timeout=600)
    return p.stdout + p.stderr


_CACHE: dict[str, CallsJobs] = {}


def calls_jobs(root: Path) -> CallsJobs:
    """Run the three jobs under ``root`` (once per process; later calls return the first
    result).

    Args:
        root: an empty folder.

    Returns:
        The :class:`CallsJobs`.
    """
    if "jobs" in _CACHE:
        return _CACHE["jobs"]
    scripts = _scripts()
    billed = {k: [_usage(r) for r in s if r.status == 200] for k, (s, _) in scripts.items()}
    runs = {
        "relay": ("openai/gpt-4o-mini", "--record-model-bodies", "-k", "2"),
        "hostile": (f"openai/{HOSTILE_MODEL}", "--record-model-bodies"),
        "direct": ("openai/gpt-4o-mini", "--no-relay"),
    }
    logs: dict[str, str] = {}
    requests: dict[str, int] = {}

    def one(name: str) -> None:
        script, fallback = scripts[name]
        with FakeOpenAI(script, default=fallback) as server:
            logs[name] = _run(root, name, server, *runs[name])
            requests[name] = len(server.requests)

    threads = [threading.Thread(target=one, args=(n,)) for n in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out = CallsJobs(root / "relay", root / "hostile", root / "direct", billed, requests, logs)
    for name in runs:
        trials = root / name / "trials"
        results = sorted(trials.glob("*/result.json")) if trials.is_dir() else []
        assert results, f"job {name} made no trial:\n{logs.get(name, '')}"
        for r in results:
            data = json.loads(r.read_text())
            assert data["outcome"] == "completed", (name, data.get("error"), logs[name])
    _CACHE["jobs"] = out
    return out


def trials_of(job: Path) -> list[Path]:
    """A job's trial folders in the order they started."""
    return sorted(
        (job / "trials").iterdir(), key=lambda t: json.loads((t / "result.json").read_text())["started_at"]
    )
