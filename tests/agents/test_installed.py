"""Installed CLI agents: the declarative mechanism end to end against a FAKE CLI in a real sandbox.

The test image carries a fake ``npm`` (installs local ``.tgz`` packages and links their bins,
refuses registry downloads like a no-network sandbox would). The "Claude Code package" is a
``.tgz`` built here on the host, as ``npm pack`` would, holding a fake ``claude`` that records
its arguments and environment, writes a file in the working dir and prints stream-json usage.
"""

from __future__ import annotations

import asyncio
import io
import json
import tarfile
import textwrap
from pathlib import Path

import pytest

from agent_helpers import BACKEND, needs_sandbox, step_context, task_sandbox
from cairn.agents.installed import (
    CLAUDE_CODE,
    ClaudeCodeAgent,
    CodexAgent,
    OpenCodeAgent,
    parse_claude_stream_json,
    parse_codex_json,
)
from cairn.errors import ErrorKind, TrialFailure
from cairn.plan import RunOptions, TrialPlan, trial_id
from cairn.results.model import AgentExit, Tokens
from cairn.task.load import load_task
from cairn.trial.run import run_trial
from taskgen import DOCKERFILE, StepSpec, write_task

SECRET = "sk-ant-test-secret-value"
TRICKY = ("Write \"quotes\", 'single', $HOME, `uname`, $(id -u), a \\ backslash,\n"
          "a second line; and ünïcode ✓.")

FAKE_NPM = textwrap.dedent('''\
    #!/usr/bin/env python3
    """Fake npm: installs local .tgz packages (bin links); registry specs fail (no network)."""
    import json, os, sys, tarfile
    args = sys.argv[1:]
    with open("/tmp/fake-npm.log", "a") as log:
        log.write(" ".join(args) + "\\n")
    if args[:1] != ["install"] or "-g" not in args:
        sys.exit("fake npm: only 'install -g' is supported")
    targets = [a for a in args[1:] if not a.startswith("-")]
    for t in targets:
        if not os.path.isfile(t):
            sys.exit(f"npm ERR! network: cannot fetch {t} (no network)")
        with tarfile.open(t) as tf:
            meta = json.load(tf.extractfile("package/package.json"))
            dest = "/usr/local/lib/node_modules/" + meta["name"]
            os.makedirs(dest, exist_ok=True)
            for m in tf.getmembers():
                if m.name.startswith("package/") and m.name != "package/":
                    m.name = m.name[len("package/"):]
                    tf.extract(m, dest)
        for cmd, rel in (meta.get("bin") or {}).items():
            os.chmod(os.path.join(dest, rel), 0o755)
            link = "/usr/local/bin/" + cmd
            if os.path.lexists(link):
                os.remove(link)
            os.symlink(os.path.join(dest, rel), link)
    print(f"added {len(targets)} packages")
    ''')

FAKE_CLAUDE = textwrap.dedent('''\
    #!/usr/bin/env python3
    """Fake Claude Code: records what it was given, acts in the working dir, prints usage."""
    import json, os, sys, time
    argv = sys.argv[1:]
    prompt = argv[argv.index("-p") + 1]
    model = argv[argv.index("--model") + 1] if "--model" in argv else None
    with open("claude-did-this.txt", "w") as f:
        f.write(prompt)
    projects = os.path.expanduser("~/.claude/projects/app")
    os.makedirs(projects, exist_ok=True)
    with open(os.path.join(projects, "session.jsonl"), "a") as f:
        f.write(json.dumps({"prompt": prompt}) + "\\n")
    print(json.dumps({"type": "system", "subtype": "init", "model": model}), flush=True)
    print("working on it", file=sys.stderr, flush=True)
    if "SLOW" in prompt:
        time.sleep(300)
    print(json.dumps({"type": "result", "subtype": "success", "total_cost_usd": 0.0123,
                      "usage": {"input_tokens": 100, "cache_creation_input_tokens": 5,
                                "cache_read_input_tokens": 20, "output_tokens": 30},
                      "key_set": bool(os.environ.get("ANTHROPIC_API_KEY")),
                      "is_sandbox": os.environ.get("IS_SANDBOX"),
                      "flags": [a for a in argv if a.startswith("--")]}))
    sys.exit(3 if "FAIL" in prompt else 0)
    ''')

IMAGE = DOCKERFILE + "COPY npm /usr/local/bin/npm\nRUN chmod 0755 /usr/local/bin/npm\n"


def _claude_package(path: Path) -> Path:
    """Write a .tgz shaped like ``npm pack @anthropic-ai/claude-code`` output."""
    files = {"package/package.json": json.dumps({"name": CLAUDE_CODE.package,
                                                 "version": CLAUDE_CODE.version,
                                                 "bin": {"claude": "cli.py"}}),
             "package/cli.py": FAKE_CLAUDE}
    with tarfile.open(path, "w:gz") as tf:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tf.addfile(info, io.BytesIO(data))
    return path


def _task(tmp_path: Path, dockerfile: str = IMAGE):
    return load_task(write_task(tmp_path / "tasks", "installed", dockerfile=dockerfile,
                                files={"environment/npm": FAKE_NPM}, steps=[
        StepSpec("first", instruction=TRICKY),
        StepSpec("second", instruction="Please FAIL now."),
        StepSpec("third", instruction="Be SLOW."),
    ]))


@pytest.fixture
def api_key(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)


# ---- end to end in a real sandbox --------------------------------------------------------
@needs_sandbox
@pytest.mark.docker
def test_offline_install_run_with_instruction_and_logs(tmp_path, api_key):
    task = _task(tmp_path)
    agent = ClaudeCodeAgent("anthropic/claude-sonnet-4-5",
                            package_file=str(_claude_package(tmp_path / "claude-code.tgz")))

    async def main():
        async with task_sandbox(task) as sandbox:
            await agent.setup(sandbox, step_context(task, 1, tmp_path / "setup"))
            npm_log = (await sandbox.exec("cat /tmp/fake-npm.log")).stdout
            ctx1 = step_context(task, 1, tmp_path)
            await agent.run(TRICKY, sandbox, ctx1)
            written = (await sandbox.exec("cat /app/claude-did-this.txt")).stdout
            ctx2 = step_context(task, 2, tmp_path)
            await agent.run(task.steps[1].instruction, sandbox, ctx2)
            return npm_log, ctx1, written, ctx2

    npm_log, ctx1, written, ctx2 = asyncio.run(main())
    # install step: the host-prepared package was uploaded and installed offline
    assert "install -g" in npm_log and "--offline" in npm_log
    assert "/tmp/cairn-agent/pkg/claude-code.tgz" in npm_log
    # run: the instruction arrived intact as one argument, in the working dir
    assert written == TRICKY
    assert ctx1.exit is None
    logs = ctx1.logs_dir
    assert (logs / "instruction.md").read_text() == TRICKY
    assert "working on it" in (logs / "stderr.txt").read_text()
    result = json.loads((logs / "stdout.txt").read_text().splitlines()[-1])
    init = json.loads((logs / "stdout.txt").read_text().splitlines()[0])
    assert init["model"] == "claude-sonnet-4-5"  # provider prefix stripped
    assert result["key_set"] is True and result["is_sandbox"] == "1"
    assert {"--dangerously-skip-permissions", "--output-format", "--model"} <= set(result["flags"])
    # the CLI's own session logs were collected; the key never appears in the command
    assert (logs / "projects" / "app" / "session.jsonl").is_file()
    command = (logs / "command.txt").read_text()
    assert "claude --verbose" in command and SECRET not in command
    # usage from the stream-json result event
    assert ctx1.tokens == Tokens(prompt=125, completion=30, cached=20)
    assert ctx1.cost_usd == pytest.approx(0.0123)
    # a non-zero exit is an agent error, recorded without raising
    assert ctx2.exit is AgentExit.ERROR and ctx2.metadata["exit_code"] == 3
    assert (ctx2.logs_dir / "stdout.txt").is_file()


@needs_sandbox
@pytest.mark.docker
def test_logs_are_collected_when_the_step_times_out(tmp_path, api_key):
    task = _task(tmp_path)
    agent = ClaudeCodeAgent(package_file=str(_claude_package(tmp_path / "claude-code.tgz")))

    async def main():
        async with task_sandbox(task) as sandbox:
            await agent.setup(sandbox, step_context(task, 1, tmp_path / "setup"))
            ctx = step_context(task, 3, tmp_path)
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(4):
                    await agent.run(task.steps[2].instruction, sandbox, ctx)
            return ctx

    ctx = asyncio.run(main())
    stdout = (ctx.logs_dir / "stdout.txt").read_text()
    assert '"subtype": "init"' in stdout and (ctx.logs_dir / "instruction.md").is_file()


@needs_sandbox
@pytest.mark.docker
def test_online_install_failure_is_agent_setup_failed(tmp_path, api_key):
    task = _task(tmp_path)

    async def main():
        async with task_sandbox(task) as sandbox:
            with pytest.raises(TrialFailure) as info:
                await ClaudeCodeAgent().setup(sandbox, step_context(task, 1, tmp_path))
            return info.value

    exc = asyncio.run(main())
    assert exc.kind is ErrorKind.AGENT_SETUP_FAILED
    assert "cannot fetch @anthropic-ai/claude-code@2.1.332" in str(exc)
    assert exc.detail["exit_code"] == 1


@needs_sandbox
@pytest.mark.docker
def test_offline_install_without_npm_says_so(tmp_path, api_key):
    task = _task(tmp_path, dockerfile=DOCKERFILE)
    agent = ClaudeCodeAgent(package_file=str(_claude_package(tmp_path / "claude-code.tgz")))

    async def main():
        async with task_sandbox(task) as sandbox:
            if (await sandbox.exec("command -v npm")).ok:
                pytest.skip("the base image has npm")
            with pytest.raises(TrialFailure) as info:
                await agent.setup(sandbox, step_context(task, 1, tmp_path))
            return info.value

    exc = asyncio.run(main())
    assert exc.kind is ErrorKind.AGENT_SETUP_FAILED
    assert "npm is not installed in the image" in str(exc)


@needs_sandbox
@pytest.mark.docker
def test_installed_agent_through_the_trial_engine(tmp_path, api_key):
    """-a claude-code --ak package_file=…: setup once, run per step, verifier sees its work."""
    path = write_task(tmp_path / "tasks", "engine", dockerfile=IMAGE, files={
        "environment/npm": FAKE_NPM, "tests/expected.txt": TRICKY,
        "tests/test.sh": "#!/bin/bash\nif cmp -s /tests/expected.txt /app/claude-did-this.txt; "
                         "then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"},
        instruction=TRICKY, test="", solve=None)
    task = load_task(path)
    kwargs = {"package_file": str(_claude_package(tmp_path / "claude-code.tgz"))}
    tid = trial_id(task.name, task.content_hash, "claude-code", kwargs, None, BACKEND, 1)
    trial_dir = tmp_path / "job" / "trials" / f"{task.slug}__1__{tid[:8]}"
    plan = TrialPlan(task=task, agent_name="claude-code", agent_kwargs=kwargs, model=None,
                     backend=BACKEND, attempt=1, trial_id=tid, trial_dir=trial_dir,
                     job_id="test-" + tid[:8], job_dir=tmp_path / "job", options=RunOptions())
    asyncio.run(run_trial(plan))
    data = json.loads((trial_dir / "result.json").read_text())
    assert data["outcome"] == "completed" and data["reward"] == 1.0
    assert data["agent"]["name"] == "claude-code" and data["agent"]["version"] == "2.1.332"
    assert data["steps"][0]["tokens"] == {"prompt": 125, "completion": 30, "cached": 20}
    assert data["cost_usd"] == pytest.approx(0.0123)
    agent_dir = trial_dir / "steps" / "01-main" / "agent"
    assert {"stdout.txt", "stderr.txt", "instruction.md", "command.txt"} <= \
        {p.name for p in agent_dir.iterdir()}


# ---- units -------------------------------------------------------------------------------
def test_commands_quote_model_and_instruction_file():
    claude = ClaudeCodeAgent("anthropic/claude-sonnet-4-5")
    cmd = claude._command("/tmp/cairn-agent/logs/01-main/instruction.md")
    assert cmd == ("claude --verbose --output-format stream-json --dangerously-skip-permissions "
                   "--model claude-sonnet-4-5 -p \"$(cat /tmp/cairn-agent/logs/01-main/"
                   "instruction.md)\"")
    assert "--model" not in ClaudeCodeAgent()._command("/f")
    odd = CodexAgent("openai/gpt-5; rm -rf /")._command("/f")
    assert "--model 'gpt-5; rm -rf /'" in odd
    opencode = OpenCodeAgent("anthropic/claude-sonnet-4-5")._command("/f")
    assert opencode == 'opencode run --model anthropic/claude-sonnet-4-5 "$(cat /f)"'


def test_claude_usage_parser():
    out = "\n".join([json.dumps({"type": "system"}), "not json",
                     json.dumps({"type": "result", "total_cost_usd": 0.5,
                                 "usage": {"input_tokens": 10, "output_tokens": 3,
                                           "cache_read_input_tokens": 7}})])
    assert parse_claude_stream_json(out) == (Tokens(prompt=17, completion=3, cached=7), 0.5)
    assert parse_claude_stream_json("garbage") == (None, None)


def test_codex_usage_parser_sums_turns():
    events = [{"type": "turn.completed", "usage": {"input_tokens": 100, "cached_input_tokens": 40,
                                                   "output_tokens": 9}},
              {"type": "item.completed"},
              {"type": "turn.completed", "usage": {"input_tokens": 50, "output_tokens": 1}}]
    out = "\n".join(json.dumps(e) for e in events)
    assert parse_codex_json(out) == (Tokens(prompt=150, completion=10, cached=40), None)
    assert parse_codex_json("") == (None, None)


def test_env_passes_keys_and_ae_values(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("UNRELATED_SECRET", "nope")

    class Ctx:
        env = {"EXTRA": "1"}

    env = ClaudeCodeAgent()._env(Ctx())  # type: ignore[arg-type]
    assert env == {"IS_SANDBOX": "1", "DISABLE_AUTOUPDATER": "1", "ANTHROPIC_API_KEY": SECRET,
                   "ANTHROPIC_BASE_URL": "http://127.0.0.1:9", "EXTRA": "1"}
