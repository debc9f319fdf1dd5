"""Installed CLI agents (``claude-code``, ``codex``, ``opencode``): a small declarative mechanism.

An :class:`InstalledAgentSpec` says how to install a CLI inside the sandbox (a pinned npm
package), how to run it with the step's instruction, which API keys it needs and which logs to
keep. :class:`InstalledAgent` interprets a spec:

- ``setup`` (once per trial, as root): make sure ``npm`` exists (installed with the image's
  package manager when the sandbox has network), then ``npm install -g <package>@<version>`` —
  or, for no-network tasks, the package file(s) the host prepared with ``npm pack``
  (``--ak package_file=/host/path.tgz`` or a folder of ``.tgz`` files), uploaded and installed
  with ``npm install -g --offline``. Then checks that the CLI's binary is on ``PATH``.
- ``run`` (each step, as the step's agent user, in the working dir): writes the instruction to
  a file in the sandbox and passes it as one argument (``"$(cat file)"``, so no quoting
  problem whatever it contains), keeps stdout and stderr in files, then copies those and the
  CLI's own session logs into the step's agent folder — also when the step times out.
  API keys reach the CLI as environment variables, never on its command line.

A missing API key is a :class:`~cairn.errors.UsageError` raised by :meth:`validate_options`
(through :func:`cairn.agents.registry.validate_agent_options`) before any sandbox starts.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cairn.agents.base import Agent, AgentContext
from cairn.agents.mcp import install_mcp_config
from cairn.errors import ErrorKind, TrialFailure, UsageError
from cairn.results.model import AgentExit, Tokens
from cairn.sandbox.base import Sandbox

AGENT_DIR = "/tmp/cairn-agent"
"""Sandbox folder for uploaded packages, instructions and per-step logs."""

LOG_COLLECT_TIMEOUT_SEC = 60.0

NODE_PREREQ = (
    'command -v npm >/dev/null 2>&1 || { '
    'if [ "$CAIRN_OFFLINE" = 1 ]; then echo "npm is not installed in the image and the install '
    'is offline (package_file): use an image with Node.js and npm" >&2; exit 127; fi; '
    'if command -v apt-get >/dev/null 2>&1; then apt-get update -qq && '
    'DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null; '
    'elif command -v apk >/dev/null 2>&1; then apk add --no-cache nodejs npm >/dev/null; '
    'else echo "npm is not installed and no known package manager can install it" >&2; '
    'exit 127; fi; }')
"""Shell run as root before installing: make ``npm`` available or fail with a clear message."""

PROVIDER_KEYS: dict[str, str] = {
    "anthropic": "ANTHROPIC_API_KEY",
    "openai": "OPENAI_API_KEY",
    "google": "GEMINI_API_KEY",
    "gemini": "GEMINI_API_KEY",
    "openrouter": "OPENROUTER_API_KEY",
    "groq": "GROQ_API_KEY",
    "deepseek": "DEEPSEEK_API_KEY",
    "mistral": "MISTRAL_API_KEY",
    "xai": "XAI_API_KEY",
}
"""Model provider prefix → the API key variable an agent with ``provider_keys`` needs."""

UsageParser = Callable[[str], tuple[Tokens | None, float | None]]


@dataclass(frozen=True)
class InstalledAgentSpec:
    """How to install and run one CLI agent.

    Attributes:
        name: the agent name (``-a`` value).
        package: the npm package.
        version: the pinned version (``--ak version=…`` overrides it).
        binary: the command the package puts on ``PATH``.
        run: shell template of the run command; ``{instruction}`` becomes a quoted
            ``"$(cat <instruction file>)"`` and ``{model_args}`` the rendered
            :attr:`model_args` (empty without ``-m``).
        model_args: template for the model flag; ``{model}`` is the shell-quoted model.
        strip_provider: pass ``claude-x`` for ``-m anthropic/claude-x``.
        needs_model: ``True`` requires ``-m``, ``False`` refuses it, ``None`` accepts both.
        required_env: groups of variable names; each group needs one of its names set (in
            ``--ae`` or the host environment).
        provider_keys: also require the key of the model's provider (:data:`PROVIDER_KEYS`).
        passthrough_env: host variables forwarded when set (base URLs, model defaults).
        env: fixed variables set for the CLI.
        collect: extra sandbox paths (shell words; ``$HOME`` expands) copied into the step's
            logs after the run.
        prerequisite: shell run as root before the install (makes ``npm`` available).
        install: shell template of the install; ``{target}`` is the quoted package spec or
            uploaded file paths, ``{offline}`` is ``--offline`` for host-prepared files.
        usage_parser: reads the CLI's stdout and returns ``(tokens, cost_usd)``.
        model_hosts: the hosts of the CLI's default model API (opened through the egress
            gateway in agent phases); a base URL (``--ak base_url=…`` or the spec's
            ``*_BASE_URL`` variable in ``--ae``/the host environment) replaces them.
        base_url_env: the variable that points the CLI at another API endpoint.
    """

    name: str
    package: str
    version: str
    binary: str
    run: str
    model_args: str = "--model {model}"
    strip_provider: bool = True
    needs_model: bool | None = None
    required_env: tuple[tuple[str, ...], ...] = ()
    provider_keys: bool = False
    passthrough_env: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    collect: tuple[str, ...] = ()
    prerequisite: str = NODE_PREREQ
    install: str = "npm install -g --no-audit --no-fund {offline} {target}"
    usage_parser: UsageParser | None = None
    model_hosts: tuple[str, ...] = ()
    base_url_env: str | None = None


PROVIDER_HOSTS: dict[str, str] = {
    "anthropic": "api.anthropic.com",
    "openai": "api.openai.com",
    "google": "generativelanguage.googleapis.com",
    "gemini": "generativelanguage.googleapis.com",
    "openrouter": "openrouter.ai",
    "groq": "api.groq.com",
    "deepseek": "api.deepseek.com",
    "mistral": "api.mistral.ai",
    "xai": "api.x.ai",
}
"""Model provider prefix → its API host (what an agent with ``provider_keys`` must reach)."""


def parse_claude_stream_json(stdout: str) -> tuple[Tokens | None, float | None]:
    """Tokens and cost from Claude Code's ``--output-format stream-json`` final ``result`` event.

    Prompt tokens include cache reads and cache writes; cached tokens are the cache reads.
    """
    for line in reversed(stdout.splitlines()):
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict) or event.get("type") != "result":
            continue
        usage = event.get("usage") or {}
        cache_read = int(usage.get("cache_read_input_tokens") or 0)
        prompt = int(usage.get("input_tokens") or 0) + cache_read + \
            int(usage.get("cache_creation_input_tokens") or 0)
        tokens = Tokens(prompt=prompt, completion=int(usage.get("output_tokens") or 0),
                        cached=cache_read)
        cost = event.get("total_cost_usd", event.get("cost_usd"))
        return tokens, float(cost) if isinstance(cost, (int, float)) else None
    return None, None


def parse_codex_json(stdout: str) -> tuple[Tokens | None, float | None]:
    """Tokens from ``codex exec --json``: the sum of ``turn.completed`` usage events (no cost)."""
    prompt = completion = cached = 0
    found = False
    for line in stdout.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("type") == "turn.completed":
            usage = event.get("usage") or {}
            prompt += int(usage.get("input_tokens") or 0)
            cached += int(usage.get("cached_input_tokens") or 0)
            completion += int(usage.get("output_tokens") or 0)
            found = True
    return (Tokens(prompt=prompt, completion=completion, cached=cached) if found else None), None


CLAUDE_CODE = InstalledAgentSpec(
    name="claude-code", package="@anthropic-ai/claude-code", version="2.1.332", binary="claude",
    run="claude --verbose --output-format stream-json --dangerously-skip-permissions "
        "{model_args} -p {instruction}",
    required_env=(("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN"),),
    passthrough_env=("ANTHROPIC_BASE_URL", "ANTHROPIC_MODEL"),
    env={"IS_SANDBOX": "1", "DISABLE_AUTOUPDATER": "1"},
    collect=("$HOME/.claude/projects",),
    usage_parser=parse_claude_stream_json,
    model_hosts=("api.anthropic.com",), base_url_env="ANTHROPIC_BASE_URL",
)

CODEX = InstalledAgentSpec(
    name="codex", package="@openai/codex", version="0.171.0", binary="codex",
    run="codex exec --dangerously-bypass-approvals-and-sandbox --skip-git-repo-check --json "
        "{model_args} -- {instruction}",
    required_env=(("OPENAI_API_KEY",),),
    passthrough_env=("OPENAI_BASE_URL",),
    collect=("$HOME/.codex/sessions",),
    usage_parser=parse_codex_json,
    model_hosts=("api.openai.com",), base_url_env="OPENAI_BASE_URL",
)

OPENCODE = InstalledAgentSpec(
    name="opencode", package="opencode-ai", version="1.18.33", binary="opencode",
    run="opencode run {model_args} {instruction}",
    strip_provider=False, needs_model=True, provider_keys=True,
    collect=("$HOME/.local/share/opencode/log",),
)

_OPTIONS = ("version", "package_file", "install_timeout_sec", "base_url")


class InstalledAgent(Agent):
    """An agent that installs a CLI in the sandbox and runs it once per step.

    Subclasses set :attr:`spec`. ``--ak`` options: ``version`` (npm version to install instead
    of the pinned one), ``package_file`` (host ``.tgz`` from ``npm pack``, or a folder of them,
    installed offline), ``install_timeout_sec`` (default 600).

    Args:
        model: the ``-m`` value (``provider/model``), or ``None``.
        **kwargs: the ``--ak`` options above.

    Raises:
        UsageError: an unknown or malformed option.
    """

    spec: InstalledAgentSpec

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        spec = cls.__dict__.get("spec")
        if spec is not None:
            cls.name = spec.name
            cls.version = spec.version
            cls.needs_model = spec.needs_model

    def __init__(self, model: str | None = None, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        _check_kwargs(self.spec, kwargs)
        self.version = str(kwargs.get("version") or self.spec.version)
        self.package_file = Path(kwargs["package_file"]) if kwargs.get("package_file") else None
        self.install_timeout_sec = float(kwargs.get("install_timeout_sec") or 600.0)

    # ---- checks before anything starts -------------------------------------------------
    @classmethod
    def required_keys(cls, model: str | None) -> list[tuple[str, ...]]:
        """The API-key groups this agent needs for ``model`` (one name per group must be set)."""
        groups = list(cls.spec.required_env)
        if cls.spec.provider_keys and model and "/" in model:
            key = PROVIDER_KEYS.get(model.split("/", 1)[0].lower())
            if key:
                groups.append((key,))
        return groups

    @classmethod
    def validate_options(cls, model: str | None, kwargs: dict[str, Any],
                         env: Mapping[str, str]) -> None:
        """Check options and API keys before any sandbox starts.

        Args:
            model: the ``-m`` value.
            kwargs: ``--ak`` options.
            env: the variables the agent will see (``--ae`` over the host environment).

        Raises:
            UsageError: unknown option, missing package file, model without a provider for an
                agent that needs one, or a missing API key.
        """
        _check_kwargs(cls.spec, kwargs)
        if cls.spec.provider_keys and model and "/" not in model:
            raise UsageError(f"agent {cls.spec.name!r} needs -m provider/model "
                             f"(e.g. anthropic/claude-sonnet-4-5), got {model!r}")
        for group in cls.required_keys(model):
            if not any(env.get(name) for name in group):
                raise UsageError(f"agent {cls.spec.name!r} needs the API key "
                                 f"{' or '.join(group)}: set it in the environment or pass "
                                 f"--ae {group[0]}=...")

    # ---- network ---------------------------------------------------------------------
    def model_hosts(self, agent_env: Mapping[str, str]) -> list[str]:
        """The model API host the CLI talks to from inside the sandbox: the host of
        ``--ak base_url``, else of the spec's base-URL variable (``--ae`` over the host
        environment), else the spec's default hosts, else the ``-m`` provider's API host.

        Returns:
            Host names (the trial opens them for agent phases only).
        """
        from cairn.netpolicy import host_of_url

        url = self.kwargs.get("base_url")
        if not url and self.spec.base_url_env:
            url = agent_env.get(self.spec.base_url_env) or os.environ.get(self.spec.base_url_env)
        if url:
            host = host_of_url(str(url))
            return [host] if host else []
        if self.spec.model_hosts:
            return list(self.spec.model_hosts)
        if self.model and "/" in self.model:
            host = PROVIDER_HOSTS.get(self.model.split("/", 1)[0].lower())
            return [host] if host else []
        return []

    # ---- setup and run ---------------------------------------------------------------
    async def setup(self, sandbox: Sandbox, context: AgentContext) -> None:
        """Install the CLI (online from npm, or offline from ``package_file``).

        Raises:
            TrialFailure: ``agent_setup_failed`` with the install output's tail in ``detail``.
        """
        offline = self.package_file is not None
        target = shlex.quote(f"{self.spec.package}@{self.version}")
        if self.package_file is not None:
            target = await self._upload_packages(sandbox, self.package_file)
        prereq = await sandbox.exec(self.spec.prerequisite, user="root",
                                    env={"CAIRN_OFFLINE": "1" if offline else "0"},
                                    timeout_sec=self.install_timeout_sec)
        _require_ok(prereq, f"{self.spec.name}: preparing the install (npm)")
        install = self.spec.install.format(offline="--offline" if offline else "", target=target)
        result = await sandbox.exec(install, user="root", timeout_sec=self.install_timeout_sec)
        _require_ok(result, f"{self.spec.name}: {install}")
        check = await sandbox.exec(f"command -v {shlex.quote(self.spec.binary)}",
                                   user=context.user, timeout_sec=60)
        _require_ok(check, f"{self.spec.name}: {self.spec.binary!r} is not on PATH after install")

    async def _upload_packages(self, sandbox: Sandbox, path: Path) -> str:
        files = sorted(path.glob("*.tgz")) if path.is_dir() else [path]
        if not files:
            raise TrialFailure(ErrorKind.AGENT_SETUP_FAILED,
                               f"{self.spec.name}: no .tgz package in {path}")
        await sandbox.exec(["mkdir", "-p", f"{AGENT_DIR}/pkg"], user="root")
        targets = []
        for f in files:
            dest = f"{AGENT_DIR}/pkg/{f.name}"
            await sandbox.upload(f, dest)
            targets.append(shlex.quote(dest))
        return " ".join(targets)

    def _command(self, instruction_file: str) -> str:
        model_args = ""
        if self.model:
            model = self.model.split("/", 1)[1] if self.spec.strip_provider and \
                "/" in self.model else self.model
            model_args = self.spec.model_args.format(model=shlex.quote(model))
        instruction = f'"$(cat {shlex.quote(instruction_file)})"'
        return self.spec.run.format(instruction=instruction, model_args=model_args)

    def _env(self, context: AgentContext) -> dict[str, str]:
        env = dict(self.spec.env)
        names = {n for group in self.required_keys(self.model) for n in group}
        names.update(self.spec.passthrough_env)
        for name in sorted(names):
            if os.environ.get(name):
                env[name] = os.environ[name]
        env.update(context.env)
        if self.kwargs.get("base_url") and self.spec.base_url_env:
            env[self.spec.base_url_env] = str(self.kwargs["base_url"])
        return env

    async def run(self, instruction: str, sandbox: Sandbox, context: AgentContext) -> None:
        """Run the CLI once with the step's instruction; keep its logs in ``context.logs_dir``.

        A non-zero exit sets ``context.exit`` to ``error`` (``metadata["exit_code"]``).
        Tokens and cost come from the spec's usage parser when it finds them.

        Raises:
            SandboxError: the sandbox failed.
        """
        log_dir = f"{AGENT_DIR}/logs/{context.step.dir_name}"
        await sandbox.exec(["mkdir", "-p", log_dir], user="root")
        await sandbox.exec(["chmod", "0777", AGENT_DIR, f"{AGENT_DIR}/logs", log_dir], user="root")
        with tempfile.TemporaryDirectory() as tmp:
            host_file = Path(tmp) / "instruction.md"
            host_file.write_text(instruction, encoding="utf-8")
            host_file.chmod(0o644)
            await sandbox.upload(host_file, f"{log_dir}/instruction.md")
        command = self._command(f"{log_dir}/instruction.md")
        # MCP servers of the task in the CLI's own configuration (cairn.agents.mcp, #22)
        command, mcp_env = await install_mcp_config(
            self.spec.name, context.task, sandbox, command, user=context.user,
            ignore=bool(getattr(self, "ignore_mcp", False)))
        collect = "; ".join(f"cp -a {p} {shlex.quote(log_dir)}/ 2>/dev/null" for p in
                            self.spec.collect)
        qdir = shlex.quote(log_dir)
        script = (f"printf '%s\\n' {shlex.quote(command)} > {qdir}/command.txt; "
                  f"{command} > {qdir}/stdout.txt 2> {qdir}/stderr.txt; rc=$?; "
                  f"{collect + '; ' if collect else ''}exit $rc")
        try:
            result = await sandbox.exec(script, user=context.user,
                                        env={**self._env(context), **mcp_env},
                                        timeout_sec=context.timeout_sec + 30,
                                        max_output_bytes=64 * 1024)
            if result.timed_out:
                context.exit = AgentExit.TIMEOUT
            elif result.exit_code != 0:
                context.exit = AgentExit.ERROR
                context.metadata["exit_code"] = result.exit_code
        finally:
            await self._collect(sandbox, log_dir, context)

    async def _collect(self, sandbox: Sandbox, log_dir: str, context: AgentContext) -> None:
        """Copy the step's sandbox logs to ``context.logs_dir`` and read usage (best effort)."""
        context.logs_dir.mkdir(parents=True, exist_ok=True)
        try:
            await asyncio.wait_for(sandbox.download(log_dir, context.logs_dir),
                                   LOG_COLLECT_TIMEOUT_SEC)
        except Exception as exc:  # noqa: BLE001 - logs are best effort, never fatal
            context.metadata["log_collection_error"] = f"{type(exc).__name__}: {exc}"
            return
        stdout = context.logs_dir / "stdout.txt"
        if self.spec.usage_parser is not None and stdout.is_file():
            tokens, cost = self.spec.usage_parser(stdout.read_text("utf-8", "replace"))
            if tokens is not None:
                context.tokens = tokens
                context.cost_usd = cost


def _check_kwargs(spec: InstalledAgentSpec, kwargs: Mapping[str, Any]) -> None:
    unknown = sorted(set(kwargs) - set(_OPTIONS))
    if unknown:
        raise UsageError(f"agent {spec.name!r} has no option {unknown[0]!r} (--ak); known: "
                         f"{', '.join(_OPTIONS)}")
    pf = kwargs.get("package_file")
    if pf and not Path(pf).exists():
        raise UsageError(f"agent {spec.name!r}: package_file {pf!r} does not exist")
    if kwargs.get("install_timeout_sec") is not None:
        try:
            if float(kwargs["install_timeout_sec"]) <= 0:
                raise ValueError
        except (TypeError, ValueError):
            raise UsageError(f"agent {spec.name!r}: install_timeout_sec must be a positive "
                             "number of seconds") from None


def _require_ok(result: Any, what: str) -> None:
    if result.ok:
        return
    reason = "timed out" if result.timed_out else f"exit code {result.exit_code}"
    tail = (result.stderr or result.stdout or "")[-2000:]
    raise TrialFailure(ErrorKind.AGENT_SETUP_FAILED, f"{what} failed ({reason}): {tail.strip()}",
                       detail={"exit_code": result.exit_code, "stderr_tail": tail})


class ClaudeCodeAgent(InstalledAgent):
    """Claude Code (``@anthropic-ai/claude-code``); needs ``ANTHROPIC_API_KEY``."""

    spec = CLAUDE_CODE


class CodexAgent(InstalledAgent):
    """OpenAI Codex CLI (``@openai/codex``); needs ``OPENAI_API_KEY``."""

    spec = CODEX


class OpenCodeAgent(InstalledAgent):
    """opencode (``opencode-ai``); needs ``-m provider/model`` and that provider's API key."""

    spec = OPENCODE
