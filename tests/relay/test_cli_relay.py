"""Every installed CLI agent through the job's model relay (issue 30), end to end with
``cairn run`` on the local backend (public network: the sandbox shares the host's network, so
the relay's loopback address reaches it), on examples/two-steps, each CLI driven by the
scripted model server speaking its own wire protocol (tests/helpers/fake_models.py).

For every CLI:

- the trial's tokens equal the scripted server's bill exactly, side calls (opencode's title,
  Claude Code's side queries) included, and ``spend_source`` says ``relay``;
- a command the scripted model has the CLI run inside the sandbox looks for the provider key
  set in cairn's environment in its own environment, every ``/proc/*/environ`` and
  ``/proc/*/cmdline`` and the filesystem, and writes what it found to an artifact, which is
  empty; the same scan finds the trial token in some process's environment (so it did read
  them). aider, which runs no suggested shell command under ``--yes-always``, writes each
  step's file in its whole-file edit format and runs the scan as its test command
  (:data:`AIDER_SCAN`);
- the trial passes.

Kept to one trial per CLI (20-60 s each on 2 cores); the runtimes are prepared on demand into
cairn's cache, as the other real-CLI tests do.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from cli_scripts import (
    JOB_NAME,
    USAGE,
    BilledModels,
    consumes,
    consumes_any,
    public_two_steps,
    run_cli_job,
    two_step_script,
)
from fake_models import FakeModels, Request, Turn
from testbed import local_available

pytestmark = [
    pytest.mark.local,
    pytest.mark.slow,
    pytest.mark.skipif(not local_available(), reason="no local sandbox support"),
    pytest.mark.skipif(importlib.util.find_spec("aiohttp") is None, reason="needs the relay extra"),
]

AGENTS = {
    "claude-code": ("anthropic/claude-sonnet-4-5", "ANTHROPIC_API_KEY"),
    "codex": ("openai/scripted-model", "OPENAI_API_KEY"),
    "opencode": ("openai/scripted-model", "OPENAI_API_KEY"),
    "gemini-cli": ("google/gemini-2.5-flash", "GEMINI_API_KEY"),
    "qwen-code": ("openai/scripted-model", "OPENAI_API_KEY"),
    "aider": ("openai/scripted-model", "OPENAI_API_KEY"),
    "mini-swe-agent": ("openai/scripted-model", "OPENAI_API_KEY"),
}
SECRET = "sk-cairn-relay-host-only-7f3a9c2e51d04b68"
SIDE = Turn(text="Scripted title", usage=(50, 7, 5))
"""Side calls are billed too: the relay must count them."""

SCAN = r"""#!/bin/bash
# $1: the secret, base64 (never on a command line or in a file as itself); $2: the report
S=$(printf %s "$1" | base64 -d); out=$2; shift 2
{
  [[ "$(env)" == *"$S"* ]] && echo "env: this shell"
  for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do
    [[ "$(tr '\0' '\n' < "$f" 2>/dev/null)" == *"$S"* ]] && echo "proc: $f"
  done
  # the writable places whole; the system trees (the host's, on the local backend) as far
  # as they changed since the sandbox started (/etc/hostname is written at its start)
  find "${ROOT:-/}" \( -path /proc -o -path /sys -o -path /dev -o -path /usr -o -path /opt \
      -o -path /var \) -prune -o -type f -print0 2>/dev/null | xargs -0r grep -lsF -e "$S" -- \
      | sed 's/^/file: /'
  if [ -z "$ROOT" ]; then
    find /usr /opt /var -newer /etc/hostname -type f -print0 2>/dev/null \
      | xargs -0r grep -lsF -e "$S" -- | sed 's/^/file: /'
  fi
} > "$out.part" 2>/dev/null
for f in /proc/[0-9]*/environ; do
  tr '\0' '\n' < "$f" 2>/dev/null | grep -qE '^[A-Za-z_]+=cairn-[A-Za-z0-9_-]{40,}$' && echo "$f"
done > "$out.token" 2>/dev/null
mv "$out.part" "$out"  # last: a report exists only when the whole scan ran
exit 0
"""
"""The leak scan: what it finds goes to ``$2``; the processes holding a trial token to
``$2.token`` (the positive control: the scan reads every process's environment)."""


def scan_command(report: str) -> str:
    """The shell command (no secret in it) that writes the scan script and runs it."""
    script = base64.b64encode(SCAN.encode()).decode()
    secret = base64.b64encode(SECRET.encode()).decode()
    return f"echo {script} | base64 -d > /tmp/scan.sh && bash /tmp/scan.sh {secret} {report}"


AIDER_SCAN = "s=write; [ -e /app/b.txt ] && s=append; " + scan_command("/logs/artifacts/leaks-$s.txt")
"""aider runs no shell command its model suggests under ``--yes-always`` (its
``confirm_ask(..., explicit_yes_required=True)`` answers no), so its scan is its test command
(``--ae AIDER_TEST_CMD``, ``AIDER_AUTO_TEST=true``): aider runs it as its own child, with its
environment, right after it applied the step's edit; the step is the one whose file exists."""

STEPS = {"write": ("a.txt", "1"), "append": ("b.txt", "2")}


def _command(step: str) -> str:
    name, line = STEPS[step]
    return f"printf '{line}\\n' > /app/{name} && " + scan_command(f"/logs/artifacts/leaks-{step}.txt")


def _call(agent: str, command: str) -> tuple[str, dict[str, Any]]:
    if agent == "claude-code":
        return ("Bash", {"command": command, "description": "write the file"})
    if agent == "codex":
        # long enough a yield that the scan ends before Codex moves on (and exits)
        return ("exec_command", {"cmd": command, "yield_time_ms": 300000})
    if agent in ("gemini-cli", "qwen-code"):
        return ("run_shell_command", {"command": command, "description": "write the file"})
    return ("bash", {"command": command, "description": "write the file"})


def script(agent: str) -> list[Turn]:
    """Two turns per step; aider: one per step, the step's file in its whole-file edit format
    (it has no shell tool; its scan runs as its test command, :data:`AIDER_SCAN`)."""
    if agent == "aider":
        return two_step_script("aider")
    out = []
    for step in ("write", "append"):
        first, second = USAGE[step]
        call = _call(agent, _command(step))
        out.append(Turn(text=f"Running the {step} command.", calls=(call,), usage=first))
        if agent == "mini-swe-agent":
            submit = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
            out.append(Turn(text="Submitting.", calls=(("bash", {"command": submit}),), usage=second))
        else:
            out.append(Turn(text=f"The {step} step is done.", usage=second))
    return out


def _cairn_run(
    task: Path, agent: str, server: FakeModels, jobs: Path
) -> tuple[subprocess.CompletedProcess, Path]:
    model, key = AGENTS[agent]
    extra = ["--max-retries", "0"]
    if agent == "aider":
        extra += ["--ae", f"AIDER_TEST_CMD={AIDER_SCAN}", "--ae", "AIDER_AUTO_TEST=true"]
    proc = run_cli_job(
        task,
        agent,
        model=model,
        base_url=server.base_url,
        jobs=jobs,
        env={key: SECRET, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        backend="local",
        relay=True,
        extra=extra,
    )
    trials = list((jobs / JOB_NAME / "trials").iterdir())
    assert len(trials) == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, trials[0]


def _auth(req: Request) -> str:
    h = req.headers
    return h.get("x-api-key") or h.get("x-goog-api-key") or h.get("authorization", "").removeprefix("Bearer ")


@pytest.mark.parametrize("agent", list(AGENTS))
def test_cli_through_the_relay_bills_exactly_and_never_sees_the_key(tmp_path, agent):
    task = public_two_steps(tmp_path / "two-steps")
    picks = consumes_any if agent in ("aider", "mini-swe-agent") else consumes
    with BilledModels(script(agent), consumes=picks, side_turn=SIDE, done_turn=Turn(text="Done.")) as srv:
        proc, trial = _cairn_run(task, agent, srv, tmp_path / "jobs")
        requests = [r for r in srv.requests if r.body and not r.path.endswith(":countTokens")]
    result = json.loads((trial / "result.json").read_text())
    why = proc.stderr[-3000:]
    assert result["outcome"] == "completed", (result.get("error"), why)
    assert [s["reward"] for s in result["steps"]] == [1.0, 1.0], (result["steps"], why)
    # (a) the trial's tokens are the server's bill, side calls included, from the relay
    assert result["spend_source"] == "relay"
    assert result["tokens"] == srv.billed(), (srv.bill, result["tokens"])
    calls = [
        json.loads(line)
        for step in sorted((trial / "steps").iterdir())
        for line in (step / "agent" / "model_calls.jsonl").read_text().splitlines()
    ]
    billed = [c for c in calls if c["kind"] == "generate" and c["status"] == 200]
    assert len(billed) == len(srv.bill)
    # the relay, not the CLI, held the key: every call upstream carried it
    assert requests and all(_auth(r) == SECRET for r in requests), [_auth(r)[:12] for r in requests]
    # (b) the scan inside the sandbox found the key nowhere; it did read the processes
    for n, step in enumerate(("write", "append"), 1):
        arts = next((trial / "steps").glob(f"0{n}-*")) / "artifacts"
        report = arts / f"leaks-{step}.txt"
        assert report.is_file(), sorted(p.name for p in arts.rglob("*")) if arts.is_dir() else why
        assert report.read_text() == "", report.read_text()
        assert (arts / f"leaks-{step}.txt.token").read_text().strip(), "the scan saw no trial token"
    for f in trial.rglob("*"):
        if f.is_file():
            assert SECRET.encode() not in f.read_bytes(), f


def test_the_scan_finds_a_planted_key(tmp_path):
    """The leak scan reports a key in a file and in a process's environment (so an empty
    report above means none was there)."""
    root = tmp_path / "root"
    (root / "deep").mkdir(parents=True)
    (root / "deep" / "config.json").write_text(json.dumps({"key": SECRET}))
    (root / "clean.txt").write_text("nothing here")
    holder = subprocess.Popen(["sleep", "30"], env={"PATH": os.environ["PATH"], "SOME_KEY": SECRET})
    try:
        secret = base64.b64encode(SECRET.encode()).decode()
        script = tmp_path / "scan.sh"
        script.write_text(SCAN)
        out = tmp_path / "report.txt"
        subprocess.run(
            ["bash", str(script), secret, str(out)],
            env={"PATH": os.environ["PATH"], "ROOT": str(root)},
            check=True,
            timeout=120,
        )
    finally:
        holder.kill()
        holder.wait()
    lines = out.read_text().splitlines()
    assert f"file: {root / 'deep' / 'config.json'}" in lines
    assert f"proc: /proc/{holder.pid}/environ" in lines
    assert not any("clean.txt" in ln for ln in lines)
    assert SECRET not in scan_command("/x")
