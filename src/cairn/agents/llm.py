"""The built-in model-driven agent, ``-a llm -m provider/model`` (design §10, issue 7).

The agent talks to any model LiteLLM supports. Each cairn step is one conversation (a fresh
one unless ``--resume-agent-session``): a system prompt, the step's instruction, then turns in
which the model calls two tools through native function calling:

- ``bash`` ``{"command": str, "timeout_sec": int?}`` runs the command in the sandbox (as the
  step's agent user, with ``--ae`` variables, in the working dir) with a timeout and a bounded
  output; failures, timeouts and truncation are reported to the model as observations.
- ``submit`` ``{}`` ends the step.

The run ends on ``submit``, after ``max_turns`` model calls (``agent_exit`` ``max_turns``), or
when the engine cancels it at the step's timeout. ``trajectory.json`` (ATIF) is rewritten after
every turn and once more when the run ends for any reason, so a cancelled run keeps what it did.

Model errors: rate limits, 5xx answers, connection failures and timeouts are retried with
exponential backoff (counted in ``context.metadata["model_retries"]``); once retries are used up
the step raises :class:`~cairn.errors.ModelError` ``model_unavailable``; authentication failures
(401/403) raise ``model_auth_failed`` at once. A model that refuses a too-long conversation
(context window exceeded) ends the step with ``agent_exit`` ``error``.

LiteLLM is imported lazily (``pip install 'cairn-eval[llm]'``) with its local cost map only.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import uuid
import warnings
from dataclasses import dataclass, fields
from typing import Any

from cairn import __version__
from cairn.agents.base import Agent, AgentContext, refuse_unknown_options, take_relay_spend
from cairn.agents.trajectory import (
    Trajectory,
    load_seed,
    seed_to_chat,
    step_metrics,
    tool_call,
)
from cairn.errors import ErrorKind, ModelError, SandboxError, UsageError
from cairn.results.model import AgentExit, Tokens
from cairn.sandbox.base import ExecResult, Sandbox

SYSTEM_PROMPT = """\
You are an autonomous agent solving a task inside a Linux sandbox. You act only through tools:
- `bash` runs one shell command (bash -c) in the working directory {workdir} and returns its \
exit code, stdout and stderr. Commands run non-interactively; each call is a new shell, so \
`cd` and variables do not carry over (files and background processes do). Long outputs are \
truncated. A command that runs past its timeout is killed; pass `timeout_sec` for long commands.
- `submit` ends your work on the current task. Call it once the task is complete.
Work step by step: inspect, act, verify your result, then call `submit`."""

NUDGE = (
    "You did not call a tool. Continue working with the `bash` tool, and call `submit` "
    "when the task is complete."
)

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command in the sandbox and return its exit code and output.",
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The command, run with bash -c."},
                    "timeout_sec": {
                        "type": "integer",
                        "description": "Seconds before the command is killed.",
                    },
                },
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "submit",
            "description": "Finish: call this when the task is complete.",
            "parameters": {"type": "object", "properties": {}},
        },
    },
]


@dataclass(frozen=True)
class LlmOptions:
    """The ``--ak`` options of the ``llm`` agent (values arrive as strings and are converted).

    Attributes:
        api_base: base URL of an OpenAI-compatible (or other provider) endpoint.
        temperature: sampling temperature; the provider default when unset.
        max_turns: model calls per step before the step ends with ``max_turns``.
        max_output_bytes: tail of each output stream (stdout, stderr) shown to the model, bytes.
        command_timeout_sec: default timeout of one ``bash`` call, seconds (the model may ask
            for another with ``timeout_sec``; capped by the step's agent timeout).
        max_tokens: cap on output tokens per model call; the provider default when unset.
        model_retries: retries of one model call on transient errors before
            ``model_unavailable``.
        retry_base_delay_sec: first backoff delay, doubled per retry, seconds.
        retry_max_delay_sec: cap on one backoff delay, seconds.
        request_timeout_sec: bound on one model HTTP call, seconds.
        relay: ``on`` (default): model calls go through the job's model relay, which holds
            the provider key and reads exact usage (docs/relay.md); ``off``: direct calls,
            spend as LiteLLM reports it.
        max_trial_cost_usd: the relay closes the trial's model past this spend, USD.
        max_trial_tokens: the relay closes the trial's model past this many tokens (input +
            output).
        record_model_bodies: ``on``: the relay records request and response bodies.
        rollout: ``on``: the relay asks an OpenAI-compatible server for token ids and
            logprobs and records them.
        connect_timeout_sec: bound on connecting to the model host (DNS and TCP/TLS
            connect) within one call, seconds; a silent host costs this, not
            ``request_timeout_sec`` (issue 27).
        unreachable_retries: retries of a call whose host cannot be resolved or refuses the
            connection (then ``model_unavailable`` with ``detail["unreachable"]``, which ends
            the job: every trial would meet the same host).
    """

    api_base: str | None = None
    temperature: float | None = None
    max_turns: int = 50
    max_output_bytes: int = 16_384
    command_timeout_sec: float = 180.0
    max_tokens: int | None = None
    model_retries: int = 6
    retry_base_delay_sec: float = 2.0
    retry_max_delay_sec: float = 60.0
    request_timeout_sec: float = 600.0
    relay: str = "on"
    max_trial_cost_usd: float | None = None
    max_trial_tokens: int | None = None
    record_model_bodies: str = "off"
    rollout: str = "off"
    connect_timeout_sec: float = 10.0
    unreachable_retries: int = 2

    @classmethod
    def parse(cls, kwargs: dict[str, Any]) -> LlmOptions:
        """Convert ``--ak`` strings into options.

        Args:
            kwargs: option name → value (strings from the CLI, or already typed values).

        Returns:
            The options.

        Raises:
            UsageError: an unknown option, or a value of the wrong type or range.
        """
        known = {f.name: f for f in fields(cls)}
        refuse_unknown_options("llm", kwargs, sorted(known))
        values: dict[str, Any] = {}
        for key, raw in kwargs.items():
            kind = str(known[key].type)
            try:
                if raw is None or kind.startswith("str"):
                    value = raw
                elif isinstance(raw, bool):  # YAML true is not the number 1
                    raise ValueError(raw)
                elif "int" in kind:
                    if isinstance(raw, float) and not raw.is_integer():
                        raise ValueError(raw)
                    value = int(raw)
                else:
                    value = float(raw)
            except (TypeError, ValueError):
                what = "a whole number" if "int" in kind else "a number"
                raise UsageError(f"agent 'llm' option {key}={raw!r} is not {what}") from None
            if isinstance(value, float) and not math.isfinite(value):
                raise UsageError(f"agent 'llm' option {key}={raw!r} must be a finite number")
            if isinstance(value, (int, float)) and value < 0:
                raise UsageError(f"agent 'llm' option {key}={raw!r} must not be negative")
            values[key] = value
        opts = cls(**values)
        for flag in ("relay", "record_model_bodies", "rollout"):
            if getattr(opts, flag) not in ("on", "off"):
                raise UsageError(f"agent 'llm' option {flag}={getattr(opts, flag)!r} must be 'on' or 'off'")
        if opts.max_turns < 1 or opts.max_output_bytes < 256 or opts.command_timeout_sec <= 0:
            raise UsageError(
                "agent 'llm': max_turns must be >= 1, max_output_bytes >= 256 and command_timeout_sec > 0"
            )
        return opts


class _ContextWindowExceeded(Exception):
    """The model refused the conversation as too long: the step ends with agent_exit error."""


def _import_litellm() -> Any:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    # pydantic complains about LiteLLM's own TypedDicts on first use; not the user's concern
    warnings.filterwarnings("ignore", message=r".*`ReadOnly` qualifier", category=UserWarning)
    try:
        import litellm
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise UsageError("the 'llm' agent needs LiteLLM: pip install 'cairn-eval[llm]'") from exc
    litellm.suppress_debug_info = True
    return litellm


def _classify(exc: Exception, litellm: Any) -> str:
    """``auth`` | ``transient`` | ``context`` | ``fatal`` for a failed model call."""
    if isinstance(exc, getattr(litellm, "ContextWindowExceededError", ())):
        return "context"
    if isinstance(exc, (litellm.AuthenticationError, litellm.PermissionDeniedError)):
        return "auth"
    text = str(exc)
    if "Missing credentials" in text or "api_key client option must be set" in text:
        return "auth"  # LiteLLM reports a missing key as an InternalServerError
    transient = tuple(
        getattr(litellm, n)
        for n in (
            "RateLimitError",
            "InternalServerError",
            "ServiceUnavailableError",
            "APIConnectionError",
            "Timeout",
            "BadGatewayError",
        )
        if hasattr(litellm, n)
    )
    if isinstance(exc, transient):
        return "transient"
    status = getattr(exc, "status_code", None)
    if status in (401, 403):
        return "auth"
    if (
        status == 429
        or (isinstance(status, int) and status >= 500)
        or isinstance(exc, (ConnectionError, TimeoutError))
    ):
        return "transient"
    return "fatal"


_UNREACHABLE_TEXT = (
    "name or service not known",
    "nodename nor servname",
    "name resolution",
    "connection refused",
    "no route to host",
    "network is unreachable",
    "getaddrinfo failed",
    "temporary failure in name resolution",
)


def unreachable_cause(exc: BaseException) -> str | None:
    """Why a failed model call never reached the model host: it cannot be resolved, refuses
    the connection or has no route (walking the exception's causes), else ``None``.

    Args:
        exc: what the model client raised.

    Returns:
        A short cause (``"connection refused"``, ``"name resolution failed"`` …) or ``None``
        for a host that answered (a 5xx, a rate limit) or timed out.
    """
    import socket

    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, socket.gaierror):
            return "name resolution failed"
        if isinstance(cur, ConnectionRefusedError):
            return "connection refused"
        text = str(cur).lower()
        for t in _UNREACHABLE_TEXT:
            if t in text:
                return "name resolution failed" if "name" in t or "getaddrinfo" in t else t
        cur = cur.__cause__ or cur.__context__
    return None


def _cause(exc: BaseException) -> str:
    """One short line naming a failed call's error (type and first line, bounded)."""
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first}"[:200]


def _retry_after_sec(exc: Exception) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    try:
        value = headers.get("retry-after") if headers is not None else None
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def format_exec_result(result: ExecResult, timeout_sec: float, max_output_bytes: int) -> str:
    """Render one ``bash`` call's result as the observation the model reads.

    Args:
        result: the sandbox exec result.
        timeout_sec: the timeout the command ran with, seconds.
        max_output_bytes: the per-stream tail size, bytes.

    Returns:
        ``exit_code: N`` (or a timeout notice), then ``stdout:`` and ``stderr:`` sections; a
        section whose front was dropped starts with an ``[output truncated …]`` marker.
    """
    lines: list[str] = []
    if result.timed_out:
        lines.append(
            f"[command timed out after {timeout_sec:g} s and was killed (pass a larger "
            "timeout_sec for long commands); output so far below]"
        )
    else:
        lines.append(f"exit_code: {result.exit_code}")
    for label, text, truncated in (
        ("stdout", result.stdout, result.stdout_truncated),
        ("stderr", result.stderr, result.stderr_truncated),
    ):
        data = text.encode("utf-8", "replace")
        if len(data) > max_output_bytes:
            text = data[-max_output_bytes:].decode("utf-8", "replace")
            truncated = True
        if not text and not truncated:
            continue
        lines.append(f"{label}:")
        if truncated:
            lines.append(f"[output truncated: only the last {max_output_bytes} bytes of {label} are shown]")
        lines.append(text.rstrip("\n"))
    return "\n".join(lines)


class _StepUsage:
    """Running token and cost sums of one cairn step."""

    def __init__(self) -> None:
        self.prompt = self.completion = self.cached = 0
        self.cost: float | None = 0.0

    def add(self, prompt: int, completion: int, cached: int, cost: float | None) -> None:
        self.prompt += prompt
        self.completion += completion
        self.cached += cached
        self.cost = None if cost is None or self.cost is None else self.cost + cost

    def publish(self, context: AgentContext) -> None:
        context.tokens = Tokens(prompt=self.prompt, completion=self.completion, cached=self.cached)
        context.cost_usd = self.cost


class LlmAgent(Agent):
    """A tool-using agent for any LiteLLM model (``-a llm -m provider/model``).

    Args:
        model: the LiteLLM model id, e.g. ``openai/gpt-4o-mini``, ``anthropic/claude-...``.
        **kwargs: ``--ak`` options, see :class:`LlmOptions`.

    Raises:
        UsageError: an unknown or malformed option.
    """

    name = "llm"
    supports_resume = True
    supports_seed = True
    version = __version__
    needs_model = True
    mcp_transports = frozenset({"stdio"})
    """A task's stdio MCP servers become tools (:mod:`cairn.agents.mcp_client`)."""

    def __init__(self, model: str | None = None, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        self.options = LlmOptions.parse(kwargs)
        self._messages: list[dict[str, Any]] = []
        self._session_steps: list[dict[str, Any]] = []
        self._session_id: str | None = None
        self._last_step_name: str | None = None
        self._mcp: Any = None  # McpTools of the running step, when the task declares servers
        self._relay_url: str | None = None  # SEAM (issue 25): set by use_relay
        self._lease: Any = None  # the trial's cairn.relay.ledger.TrialLease

    @classmethod
    def validate_options(cls, model: str | None, kwargs: dict[str, Any], env: dict[str, str]) -> None:
        """Check ``--ak`` options before anything starts.

        Raises:
            UsageError: an unknown or malformed option; LiteLLM not installed; the provider's
                API key missing from the environment (unless ``api_base`` is given).
        """
        opts = LlmOptions.parse(kwargs)
        import importlib.util

        if importlib.util.find_spec("litellm") is None:
            raise UsageError("the 'llm' agent needs LiteLLM: pip install 'cairn-eval[llm]'")
        if model and not opts.api_base:
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            import litellm

            try:
                check = litellm.validate_environment(model=model)
            except Exception:  # noqa: BLE001 - an unknown provider is the model call's to report
                return
            missing = check.get("missing_keys") or []
            if not check.get("keys_in_environment", True) and missing:
                raise UsageError(
                    f"model {model!r} needs {', '.join(missing)} in the "
                    "environment (or --ak api_base=... for a local server)"
                )

    # ---- SEAM (issue 25): the job's model relay (cairn.relay.seam) ----------------------
    def relay_wanted(self) -> Any:
        """What this agent asks of the job's model relay, or ``None`` for direct calls.

        ``None`` with ``--ak relay=off``, without aiohttp, or for a provider prefix whose wire
        the relay does not speak (only ``openai/``, ``anthropic/`` and ``gemini/``). The
        upstream is ``--ak api_base`` (else the provider's public API) with the provider key
        from this process's environment.

        Returns:
            A :class:`cairn.relay.seam.RelayWanted`, or ``None``.
        """
        import importlib.util

        opts = self.options
        provider = (self.model or "").split("/", 1)[0]
        if (
            opts.relay != "on"
            or provider not in _PROVIDER_UPSTREAM
            or importlib.util.find_spec("aiohttp") is None
        ):
            return None
        from cairn.relay.ledger import Limits
        from cairn.relay.seam import RelayWanted
        from cairn.relay.server import Upstream

        default_url, key_vars = _PROVIDER_UPSTREAM[provider]
        key = next((os.environ[v] for v in key_vars if os.environ.get(v)), None)
        return RelayWanted(
            provider=provider,
            upstream=Upstream(opts.api_base or default_url, key),
            limits=Limits(trial_cost_usd=opts.max_trial_cost_usd, trial_tokens=opts.max_trial_tokens),
            record_bodies=opts.record_model_bodies == "on",
            rollout=opts.rollout == "on",
        )

    def use_relay(self, url: str, lease: Any) -> None:
        """Send this trial's model calls to the relay at ``url`` with the lease's token.

        Args:
            url: the relay's ``http://host:port``.
            lease: the trial's :class:`cairn.relay.ledger.TrialLease`.
        """
        self._relay_url, self._lease = url, lease

    def _relay_step_done(self, context: AgentContext) -> None:
        """End the step at the relay; its exact usage and cost become the step's spend."""
        if self._lease is None:
            return
        calls = self._lease.end_step()
        take_relay_spend(context, calls)

    # ---- the step loop -------------------------------------------------------------------
    async def run(self, instruction: str, sandbox: Sandbox, context: AgentContext) -> None:
        """Drive the model through one step; see the module docstring.

        Raises:
            ModelError: ``model_auth_failed`` or ``model_unavailable``.
            SandboxError: the sandbox itself failed (not a failing command).
        """
        opts = self.options
        resume = context.resume_session and bool(self._messages)
        if not resume:
            self._session_id = str(uuid.uuid4())
            self._messages = []
            self._session_steps = []
        traj = Trajectory(
            session_id=self._session_id or "",
            agent_name=self.name,
            agent_version=str(self.version),
            model_name=self.model,
            agent_extra={"max_turns": opts.max_turns, "temperature": opts.temperature},
            extra={"cairn_step": context.step.name, "resumed": resume or None},
        )
        seed = _seed_of(context)
        if resume:
            traj.add_history(self._session_steps, cairn_step=self._last_step_name)
        else:
            if seed is None or seed[0].get("source") != "system":
                system = SYSTEM_PROMPT.format(workdir=sandbox.workdir)
                self._messages.append({"role": "system", "content": system})
                traj.add_step("system", system)
            if seed is not None:  # the task's prior context opens the first step's session
                self._messages.extend(seed_to_chat(seed))
                traj.add_seed(seed)
                traj.extra = {**(traj.extra or {}), "seeded_from": "trajectory.json"}
        self._messages.append({"role": "user", "content": instruction})
        traj.add_step("user", instruction)

        usage = _StepUsage()
        usage.publish(context)
        if self._lease is not None:  # SEAM (issue 25): this step's calls, on the relay's record
            self._lease.begin_step(context.step.name, context.logs_dir / "model_calls.jsonl")
        path = context.logs_dir / "trajectory.json"
        pending: list[tuple[dict[str, Any], str]] = []  # (agent step, call id) not yet answered
        try:
            self._mcp = await self._open_mcp(sandbox, context)
            for _turn in range(opts.max_turns):
                try:
                    response, retries = await self._complete(context)
                except _ContextWindowExceeded as exc:
                    context.exit = AgentExit.ERROR
                    context.metadata["stop"] = f"context window exceeded: {exc}"
                    return
                step = self._record_turn(response, retries, traj, usage, pending)
                usage.publish(context)
                traj.write(path)
                if await self._run_tools(step, traj, pending, sandbox, context):
                    return
                traj.write(path)
            context.exit = AgentExit.MAX_TURNS
        finally:
            for step, call_id in pending:  # cancelled mid-turn: keep the conversation valid
                note = "[not run: the step ended before this call completed]"
                self._messages.append({"role": "tool", "tool_call_id": call_id, "content": note})
                traj.add_result(step, call_id, note)
            pending.clear()
            if self._mcp is not None:
                await self._mcp.aclose()
                self._mcp = None
            usage.publish(context)
            self._relay_step_done(context)
            self._session_steps = list(traj.steps)
            self._last_step_name = context.step.name
            traj.write(path)

    def _record_turn(
        self,
        response: Any,
        retries: int,
        traj: Trajectory,
        usage: _StepUsage,
        pending: list[tuple[dict[str, Any], str]],
    ) -> dict[str, Any]:
        """Append the model's turn to the conversation and the trajectory; return its step."""
        message = response.choices[0].message
        content = message.content if isinstance(message.content, str) else ""
        calls: list[dict[str, Any]] = []
        for i, call in enumerate(message.tool_calls or []):
            call_id = call.id or f"call_{uuid.uuid4().hex[:12]}_{i}"
            calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {
                        "name": call.function.name or "",
                        "arguments": call.function.arguments or "{}",
                    },
                }
            )
        assistant: dict[str, Any] = {"role": "assistant", "content": content or None}
        if calls:
            assistant["tool_calls"] = calls
        self._messages.append(assistant)

        raw_usage = getattr(response, "usage", None)
        prompt = int(getattr(raw_usage, "prompt_tokens", 0) or 0)
        completion = int(getattr(raw_usage, "completion_tokens", 0) or 0)
        details = getattr(raw_usage, "prompt_tokens_details", None)
        cached = int(getattr(details, "cached_tokens", 0) or 0) if details is not None else 0
        cost = self._cost(response)
        usage.add(prompt, completion, cached, cost)

        atif_calls = [
            tool_call(c["id"], c["function"]["name"], _parse_arguments(c["function"]["arguments"])[0])
            for c in calls
        ]
        step = traj.add_step(
            "agent",
            content,
            tool_calls=atif_calls,
            model_name=getattr(response, "model", None),
            reasoning_content=getattr(message, "reasoning_content", None) or None,
            metrics=step_metrics(prompt, completion, cached, cost),
            extra={"model_retries": retries} if retries else None,
        )
        pending.extend((step, c["id"]) for c in calls)
        return step

    async def _run_tools(
        self,
        step: dict[str, Any],
        traj: Trajectory,
        pending: list[tuple[dict[str, Any], str]],
        sandbox: Sandbox,
        context: AgentContext,
    ) -> bool:
        """Answer every tool call of the last turn in order; True when ``submit`` was called.

        A turn without tool calls gets a reminder (a user message, ``extra.cairn_nudge``).
        """
        calls = list(step.get("tool_calls") or [])
        if not calls:
            self._messages.append({"role": "user", "content": NUDGE})
            traj.add_step("user", NUDGE, extra={"cairn_nudge": True})
            return False
        raw = {c["id"]: c["function"]["arguments"] for c in self._messages[-1]["tool_calls"]}
        submitted = False
        for call in calls:
            call_id, name = call["tool_call_id"], call["function_name"]
            args, parse_error = _parse_arguments(raw.get(call_id, "{}"))
            if submitted:
                content = "[not run: submit was called earlier in this turn]"
            elif parse_error:
                content = f"error: the arguments are not a valid JSON object: {parse_error}"
            elif name == "submit":
                submitted, content = True, "Submitted. Your work on this task is over."
            elif name == "bash":
                content = await self._bash(args, sandbox, context)
            elif self._mcp is not None and self._mcp.handles(name):
                content = await self._mcp.call(name, args, timeout_sec=self.options.command_timeout_sec)
            else:
                content = f"error: unknown tool {name!r}; the tools are `bash` and `submit`"
            self._messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
            Trajectory.add_result(step, call_id, content)
            pending[:] = [p for p in pending if p[1] != call_id]
        return submitted

    async def _open_mcp(self, sandbox: Sandbox, context: AgentContext) -> Any:
        """Start the task's stdio MCP servers inside the sandbox for this step (``None`` when
        it declares none, or under ``--ak ignore_mcp=true``); start failures go to
        ``metadata["mcp_errors"]``."""
        entries = getattr(getattr(context.task, "environment", None), "mcp_servers", ()) or ()
        if not entries or getattr(self, "ignore_mcp", False):
            return None
        from cairn.agents.mcp import parse_mcp_servers
        from cairn.agents.mcp_client import McpTools

        tools = await McpTools.open(
            parse_mcp_servers(list(entries)),
            sandbox.shell_argv(user=context.user, tty=False),
            log_dir=context.logs_dir,
        )
        if tools.errors:
            context.metadata["mcp_errors"] = tools.errors
            context.logs_dir.mkdir(parents=True, exist_ok=True)
            (context.logs_dir / "mcp-errors.txt").write_text("\n".join(tools.errors) + "\n", encoding="utf-8")
        return tools

    async def _bash(self, args: dict[str, Any], sandbox: Sandbox, context: AgentContext) -> str:
        """Run one ``bash`` call; every failure but a broken sandbox becomes the observation."""
        opts = self.options
        command = args.get("command")
        if not isinstance(command, str) or not command.strip():
            return "error: `bash` needs a non-empty string argument `command`"
        timeout = opts.command_timeout_sec
        asked = args.get("timeout_sec")
        if asked is not None:
            try:
                timeout = max(1.0, float(asked))
            except (TypeError, ValueError):
                return f"error: timeout_sec must be a number of seconds, got {asked!r}"
        timeout = min(timeout, max(1.0, context.timeout_sec))
        try:
            result = await sandbox.exec(
                command,
                user=context.user,
                env=dict(context.env) or None,
                timeout_sec=timeout,
                max_output_bytes=opts.max_output_bytes,
            )
        except SandboxError:
            raise
        except (ValueError, OSError) as exc:
            return f"error: the command could not be run: {exc}"
        return format_exec_result(result, timeout, opts.max_output_bytes)

    # ---- model calls ---------------------------------------------------------------------
    async def _complete(self, context: AgentContext) -> tuple[Any, int]:
        """One model call with retries; returns ``(response, retries used)``.

        Raises:
            ModelError: authentication failure, or transient failures beyond the retries, or
                any other refusal of the request.
            _ContextWindowExceeded: the conversation is too long for the model.
        """
        litellm = _import_litellm()
        opts = self.options
        extra: dict[str, Any] = {}
        if self._relay_url is not None:  # SEAM (issue 25): the relay holds the provider key
            provider = (self.model or "").split("/", 1)[0]
            extra["api_base"] = self._relay_url + ("/v1" if provider == "openai" else "")
            extra["api_key"] = self._lease.token
        elif opts.api_base:
            extra["api_base"] = opts.api_base
        if opts.temperature is not None:
            extra["temperature"] = opts.temperature
        if opts.max_tokens is not None:
            extra["max_tokens"] = opts.max_tokens
        import httpx  # litellm's own dependency

        timeout = httpx.Timeout(opts.request_timeout_sec, connect=opts.connect_timeout_sec)
        retries = 0
        while True:
            try:
                response = await litellm.acompletion(
                    model=self.model,
                    messages=self._messages,
                    tools=TOOLS + (self._mcp.specs if self._mcp is not None else []),
                    num_retries=0,
                    max_retries=0,
                    timeout=timeout,
                    **extra,
                )
                return response, retries
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - classified below, re-raised typed
                stop = self._lease.blocked() if self._lease is not None else None
                if stop is not None:  # the relay closed this trial's model (docs/relay.md)
                    raise ModelError(
                        ErrorKind.BUDGET_EXCEEDED,
                        stop.message(),
                        detail={"model": self.model, **stop.as_dict()},
                    ) from exc
                kind = _classify(exc, litellm)
                detail = {
                    "model": self.model,
                    "error": f"{type(exc).__name__}: {exc}"[:2000],
                    "retries": retries,
                }
                if kind == "auth":
                    raise ModelError(
                        ErrorKind.MODEL_AUTH_FAILED,
                        f"model {self.model!r}: authentication failed: {exc}",
                        detail=detail,
                    ) from exc
                if kind == "context":
                    raise _ContextWindowExceeded(str(exc)) from exc
                if kind == "fatal":
                    raise ModelError(
                        ErrorKind.MODEL_UNAVAILABLE,
                        f"model {self.model!r} refused the request: {exc}",
                        detail=detail,
                    ) from exc
                unreachable = unreachable_cause(exc)
                limit = opts.unreachable_retries if unreachable else opts.model_retries
                if retries >= limit:
                    if unreachable:
                        where = opts.api_base or "the provider's API"
                        raise ModelError(
                            ErrorKind.MODEL_UNAVAILABLE,
                            f"model {self.model!r}: host unreachable "
                            f"({unreachable}) at {where} after {retries} "
                            f"retries; check --ak api_base, the network and "
                            f"--allow-agent-host",
                            detail={**detail, "unreachable": unreachable},
                        ) from exc
                    raise ModelError(
                        ErrorKind.MODEL_UNAVAILABLE,
                        f"model {self.model!r} unavailable after {retries} retries: {exc}",
                        detail=detail,
                    ) from exc
                retries += 1
                context.model_retries += 1
                context.metadata["model_retries"] = context.model_retries
                delay = min(opts.retry_base_delay_sec * 2 ** (retries - 1), opts.retry_max_delay_sec)
                delay *= 1 + random.random() * 0.25
                hinted = _retry_after_sec(exc)
                if hinted is not None:
                    delay = max(delay, min(hinted, opts.retry_max_delay_sec))
                if unreachable:  # a short bounded try: the host is not there
                    delay = min(delay, 2.0)
                context.notify(
                    f"step {context.step.index}/{len(context.task.steps)} "
                    f"{context.step.name}: model call "
                    f"failed ({unreachable or _cause(exc)}); retry {retries} of "
                    f"{limit} in {delay:.1f} s"
                )
                await asyncio.sleep(delay)

    def _cost(self, response: Any) -> float | None:
        """The call's cost from LiteLLM's local cost map; ``None`` for an unknown model."""
        litellm = _import_litellm()
        try:
            cost = litellm.completion_cost(completion_response=response, model=self.model)
        except Exception:  # noqa: BLE001 - unknown model or pricing: cost unknown
            return None
        return float(cost) if cost is not None else None


_PROVIDER_UPSTREAM: dict[str, tuple[str, tuple[str, ...]]] = {
    "openai": ("https://api.openai.com/v1", ("OPENAI_API_KEY",)),
    "anthropic": ("https://api.anthropic.com", ("ANTHROPIC_API_KEY",)),
    "gemini": ("https://generativelanguage.googleapis.com", ("GEMINI_API_KEY", "GOOGLE_API_KEY")),
}
"""LiteLLM provider prefix → (public API base, key variables) for the relay's upstream."""


def _seed_of(context: AgentContext) -> list[dict[str, Any]] | None:
    """The task's seed steps when this is its first step and it ships one, else ``None``."""
    task = context.task
    step = context.step
    path = getattr(task, "seed_trajectory", None) if task is not None else None
    if path is None or step is None or step.index != 1:
        return None
    return load_seed(path)


def _parse_arguments(raw: str) -> tuple[dict[str, Any], str | None]:
    """Parse a tool call's JSON arguments.

    Returns:
        ``(object, None)``, or ``({"raw_arguments": raw}, error text)`` when not a JSON object.
    """
    try:
        value = json.loads(raw or "{}")
    except json.JSONDecodeError as exc:
        return {"raw_arguments": raw}, str(exc)
    if not isinstance(value, dict):
        return {"raw_arguments": raw}, "not a JSON object"
    return value, None
