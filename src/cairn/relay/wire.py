"""The four wire dialects at the relay: routes, streaming, usage taps, error shapes, rewrites.

Pure functions and small stateful parsers; no sockets (the server in
:mod:`cairn.relay.server` feeds them bytes).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from cairn.relay.usage import (
    Usage,
    anthropic_usage,
    chat_usage,
    gemini_usage,
    responses_usage,
    usage_of_body,
)

ANTHROPIC, CHAT, RESPONSES, GEMINI = "anthropic", "chat", "responses", "gemini"
"""The dialect families (what the usage and error shapes depend on)."""

PROVIDER_OF = {ANTHROPIC: "anthropic", CHAT: "openai", RESPONSES: "openai", GEMINI: "gemini"}
"""Family → the provider whose upstream and auth header it uses."""


@dataclass(frozen=True)
class Route:
    """What one request path is.

    Attributes:
        family: the dialect family.
        path: the canonical upstream path (``/v1/...`` or ``/v1beta/...``), no query.
        kind: ``generate`` (billed), ``count`` (count tokens, not billed) or ``list``.
        model: the model named in the path (Gemini), else ``None``.
    """

    family: str
    path: str
    kind: str
    model: str | None = None


def route_of(method: str, path: str) -> Route | None:
    """Classify a request; ``None`` for every path the relay does not serve.

    Only model routes are served, so a sandbox cannot use the relay's key for other provider
    endpoints (files, fine-tuning, key management).

    Args:
        method: the HTTP method.
        path: the request path without query; ``/models/...`` (LiteLLM's Gemini calls with a
            custom base) is read as ``/v1beta/models/...``.

    Returns:
        The route, or ``None``.
    """
    path = "/" + path.strip("/")
    if path.startswith("/models/") or path == "/models":
        path = "/v1beta" + path
    if method == "POST":
        if path == "/v1/messages":
            return Route(ANTHROPIC, path, "generate")
        if path == "/v1/messages/count_tokens":
            return Route(ANTHROPIC, path, "count")
        if path == "/v1/chat/completions":
            return Route(CHAT, path, "generate")
        if path == "/v1/responses":
            return Route(RESPONSES, path, "generate")
        if path.startswith(("/v1beta/models/", "/v1/models/")) and ":" in path:
            model, _, verb = path.split("/models/", 1)[1].partition(":")
            if verb in ("generateContent", "streamGenerateContent"):
                return Route(GEMINI, path, "generate", model)
            if verb == "countTokens":
                return Route(GEMINI, path, "count", model)
        return None
    if method == "GET" and path in ("/v1/models", "/v1beta/models"):
        return Route(GEMINI if path.startswith("/v1beta") else CHAT, path, "list")
    return None


def wants_stream(route: Route, body: Any, query: dict[str, str]) -> bool:
    """Whether the client asked for a streamed answer (body ``stream`` or Gemini's URL)."""
    if route.family == GEMINI:
        return route.path.endswith(":streamGenerateContent")
    return isinstance(body, dict) and body.get("stream") is True


# ---- SSE ---------------------------------------------------------------------------------
@dataclass
class SseEvent:
    """One Server-Sent Event as it came (``raw``: its bytes, terminator included)."""

    raw: bytes
    event: str | None
    data: str


class SseSplitter:
    """Cuts a byte stream into whole SSE events, keeping each event's bytes unchanged."""

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """Add bytes; return the events completed by them, in order."""
        self._buf += chunk
        out: list[SseEvent] = []
        while True:
            cut = _event_end(self._buf)
            if cut < 0:
                return out
            raw, self._buf = self._buf[:cut], self._buf[cut:]
            out.append(parse_event(raw))

    def rest(self) -> bytes:
        """Bytes after the last whole event (an unterminated tail at stream end)."""
        tail, self._buf = self._buf, b""
        return tail


def _event_end(buf: bytes) -> int:
    best = -1
    for sep in (b"\n\n", b"\r\n\r\n", b"\r\r"):
        i = buf.find(sep)
        if i >= 0 and (best < 0 or i + len(sep) < best):
            best = i + len(sep)
    return best


def parse_event(raw: bytes) -> SseEvent:
    """Read the ``event:`` and ``data:`` fields of one event's bytes."""
    event: str | None = None
    data: list[str] = []
    for line in raw.decode("utf-8", "replace").splitlines():
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    return SseEvent(raw, event, "\n".join(data))


# ---- rollouts ------------------------------------------------------------------------------
@dataclass
class RolloutTap:
    """Prompt/completion token ids and logprobs of one chat call (vLLM/SGLang extensions).

    vLLM (``return_token_ids``, vllm-project/vllm#22587) and SGLang (sgl-project/sglang#30917)
    put ``prompt_token_ids`` on the response (first chunk when streamed) and ``token_ids`` on
    each choice (per-chunk deltas when streamed); logprobs are OpenAI's
    ``choices[].logprobs.content[].logprob``. SGLang's older ``meta_info.output_token_logprobs``
    ([logprob, token_id, text] triples) is read when ``token_ids`` is absent.
    """

    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    finish_reason: str | None = None

    def take(self, obj: dict[str, Any], *, delta: bool) -> None:
        """Read one response body (``delta=False``) or one streamed chunk (``delta=True``)."""
        ids = obj.get("prompt_token_ids")
        if isinstance(ids, list) and self.prompt_token_ids is None:
            self.prompt_token_ids = [int(i) for i in ids]
        choices = obj.get("choices")
        if not isinstance(choices, list):
            return
        for choice in choices:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
            tok = choice.get("token_ids")
            meta = choice.get("meta_info") or obj.get("meta_info")
            if isinstance(tok, list):
                self.completion_token_ids = (self.completion_token_ids or []) + [int(i) for i in tok]
            elif isinstance(meta, dict) and isinstance(meta.get("output_token_logprobs"), list):
                triples = [t for t in meta["output_token_logprobs"] if isinstance(t, list)]
                self.completion_token_ids = (self.completion_token_ids or []) + [int(t[1]) for t in triples]
                self.logprobs = (self.logprobs or []) + [float(t[0]) for t in triples]
                continue
            content = (choice.get("logprobs") or {}).get("content")
            if isinstance(content, list):
                self.logprobs = (self.logprobs or []) + [
                    float(c.get("logprob", 0.0)) for c in content if isinstance(c, dict)
                ]
        del delta  # the same fields read either way; kept for the call sites' clarity

    def as_dict(self, sent: dict[str, Any]) -> dict[str, Any]:
        """The rollout record of this call (``sent``: the sampling parameters sent)."""
        return {
            "prompt_token_ids": self.prompt_token_ids,
            "completion_token_ids": self.completion_token_ids,
            "logprobs": self.logprobs,
            "finish_reason": self.finish_reason,
            "complete": self.prompt_token_ids is not None
            and self.completion_token_ids is not None
            and self.logprobs is not None,
            "sampling_params": sent,
        }


SAMPLING_KEYS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "max_tokens",
    "max_completion_tokens",
    "seed",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "n",
    "logprobs",
    "top_logprobs",
    "repetition_penalty",
)


@dataclass(frozen=True)
class Rewrite:
    """What the relay changed in a request, so the answer can be put back as the client expects.

    Attributes:
        body: the JSON body to send upstream (``None``: send the client's bytes unchanged).
        injected_usage: ``stream_options.include_usage`` was added (drop the usage chunk).
        strip_rollout: token ids were asked for the relay alone (strip them from the answer).
        strip_logprobs: logprobs were asked for the relay alone.
    """

    body: dict[str, Any] | None = None
    injected_usage: bool = False
    strip_rollout: bool = False
    strip_logprobs: bool = False


def rewrite_request(route: Route, body: Any, *, stream: bool, rollout: bool) -> Rewrite:
    """Add what the relay needs to a chat request (usage in streams; token ids for rollouts).

    Args:
        route: the route.
        body: the parsed client body.
        stream: whether the client asked for a stream.
        rollout: whether to ask for token ids and logprobs.

    Returns:
        The rewrite (``body`` ``None`` when nothing changed).
    """
    if route.family != CHAT or route.kind != "generate" or not isinstance(body, dict):
        return Rewrite()
    new = dict(body)
    injected = strip_ids = strip_lp = False
    if stream:
        opts = new.get("stream_options")
        if not (isinstance(opts, dict) and opts.get("include_usage") is True):
            new["stream_options"] = {**(opts if isinstance(opts, dict) else {}), "include_usage": True}
            injected = True
    if rollout:
        if new.get("return_token_ids") is not True:
            new["return_token_ids"] = True
            strip_ids = True
        if new.get("logprobs") is not True:
            new["logprobs"] = True
            strip_lp = True
    if not (injected or strip_ids or strip_lp):
        return Rewrite()
    return Rewrite(new, injected, strip_ids, strip_lp)


def strip_added(obj: dict[str, Any], rw: Rewrite) -> dict[str, Any]:
    """Remove from a chat body or chunk the fields only the relay asked for."""
    out = dict(obj)
    if rw.strip_rollout:
        out.pop("prompt_token_ids", None)
    choices = out.get("choices")
    if isinstance(choices, list) and (rw.strip_rollout or rw.strip_logprobs):
        fixed = []
        for choice in choices:
            if isinstance(choice, dict):
                choice = dict(choice)
                if rw.strip_rollout:
                    choice.pop("token_ids", None)
                if rw.strip_logprobs:
                    choice["logprobs"] = None
            fixed.append(choice)
        out["choices"] = fixed
    return out


# ---- stream taps ---------------------------------------------------------------------------
@dataclass
class StreamTap:
    """Reads usage (and rollout ids) from a copy of one SSE stream, event by event.

    Attributes:
        family: the dialect family.
        rewrite: what the relay changed in the request.
        usage: the usage read so far.
        complete: the dialect's terminal event was seen (``[DONE]``, ``message_stop``,
            ``response.completed``; Gemini: a candidate's ``finishReason``).
        error: an error the provider sent inside the stream (``event: error``,
            ``response.failed``), as text.
        rollout: the token ids and logprobs, when asked for.
    """

    family: str
    rewrite: Rewrite = field(default_factory=Rewrite)
    usage: Usage = field(default_factory=Usage)
    complete: bool = False
    error: str | None = None
    rollout: RolloutTap | None = None
    saw_output: bool = False
    """A real output count was read (Anthropic's ``message_start`` holds only a placeholder)."""

    def feed(self, ev: SseEvent) -> bytes | None:
        """Read one event; return the bytes to forward (``None``: drop the event)."""
        if not ev.data or ev.data.startswith(":"):
            return ev.raw
        if ev.data.strip() == "[DONE]":
            self.complete = True
            return ev.raw
        try:
            obj = json.loads(ev.data)
        except ValueError:
            return ev.raw
        if not isinstance(obj, dict):
            return ev.raw
        if self.family == CHAT:
            return self._chat(ev, obj)
        if self.family == ANTHROPIC:
            kind = obj.get("type")
            if kind == "message_start":
                self.usage = self.usage.merged(anthropic_usage((obj.get("message") or {}).get("usage")))
            elif kind == "message_delta":
                self.saw_output = True
                delta = anthropic_usage(obj.get("usage"))
                if delta.input_tokens is None or not delta.input_tokens:
                    delta = Usage(
                        output_tokens=delta.output_tokens, cache_read_tokens=None, cache_write_tokens=None
                    )
                self.usage = self.usage.merged(delta)
            elif kind == "message_stop":
                self.complete = True
            elif kind == "error":
                self.error = json.dumps(obj.get("error"))
        elif self.family == RESPONSES:
            kind = obj.get("type")
            got = obj.get("response")
            resp: dict[str, Any] = got if isinstance(got, dict) else {}
            if kind in ("response.completed", "response.incomplete", "response.failed"):
                self.usage = self.usage.merged(responses_usage(resp.get("usage")))
                self.saw_output = True
                self.complete = kind == "response.completed"
                if kind == "response.failed":
                    self.error = json.dumps(resp.get("error"))
            elif kind == "error":
                self.error = json.dumps(obj)
        elif self.family == GEMINI:
            self.usage = self.usage.merged(gemini_usage(obj.get("usageMetadata")))
            self.saw_output = self.saw_output or "usageMetadata" in obj
            cands = obj.get("candidates")
            if isinstance(cands, list) and any(isinstance(c, dict) and c.get("finishReason") for c in cands):
                self.complete = True  # Gemini's last content chunk carries finishReason
            if "error" in obj:
                self.error = json.dumps(obj["error"])
        return ev.raw

    def _chat(self, ev: SseEvent, obj: dict[str, Any]) -> bytes | None:
        if self.rollout is not None:
            self.rollout.take(obj, delta=True)
        if "error" in obj:
            self.error = json.dumps(obj["error"])
        usage = obj.get("usage")
        choices = obj.get("choices")
        if isinstance(usage, dict):
            self.saw_output = True
            self.usage = self.usage.merged(chat_usage(usage))
            if self.rewrite.injected_usage and choices == []:
                return None  # the chunk exists only because the relay asked for it
        if self.rewrite.strip_rollout or self.rewrite.strip_logprobs:
            cleaned = strip_added(obj, self.rewrite)
            if cleaned != obj:
                head = f"event: {ev.event}\n" if ev.event else ""
                return f"{head}data: {json.dumps(cleaned, separators=(',', ':'))}\n\n".encode()
        return ev.raw


def body_tap(family: str, body: Any, rewrite: Rewrite, rollout: RolloutTap | None) -> tuple[Usage, Any]:
    """Read a whole response body: its usage, and the body the client gets.

    Returns:
        ``(usage, client_body)``; ``client_body`` is ``body`` itself unless fields the relay
        alone asked for were removed.
    """
    usage = usage_of_body(family, body)
    if family == CHAT and isinstance(body, dict):
        if rollout is not None:
            rollout.take(body, delta=False)
        if rewrite.strip_rollout or rewrite.strip_logprobs:
            return usage, strip_added(body, rewrite)
    return usage, body


# ---- errors in each provider's own shape -----------------------------------------------------
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
}
_GOOGLE_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
}


def error_body(family: str, status: int, message: str, code: str) -> dict[str, Any]:
    """An error body as the provider of ``family`` shapes it.

    Sources: Anthropic ``{"type": "error", "error": {"type", "message"}}``
    (platform.claude.com/docs/en/api/errors); OpenAI ``{"error": {"message", "type",
    "param", "code"}}``; Google ``{"error": {"code", "message", "status"}}`` (AIP-193).

    Args:
        family: the dialect family.
        status: the HTTP status it is sent with.
        message: the human-readable message.
        code: the machine code (OpenAI ``code``/``type``; e.g. ``insufficient_quota``).

    Returns:
        The JSON body.
    """
    if family == ANTHROPIC:
        return {
            "type": "error",
            "error": {"type": _ANTHROPIC_TYPES.get(status, "api_error"), "message": message},
        }
    if family == GEMINI:
        return {
            "error": {
                "code": status,
                "message": message,
                "status": _GOOGLE_STATUS.get(status, "FAILED_PRECONDITION"),
            }
        }
    return {"error": {"message": message, "type": code, "param": None, "code": code}}


# ---- provider-side tools -----------------------------------------------------------------
_ANTHROPIC_SERVER_TOOLS = ("web_search_", "web_fetch_", "code_execution_")
_OPENAI_SERVER_TOOLS = frozenset(
    {"web_search", "web_search_preview", "code_interpreter", "file_search", "image_generation", "mcp"}
)
_GEMINI_SERVER_TOOLS = frozenset(
    {
        "googleSearch",
        "google_search",
        "googleSearchRetrieval",
        "google_search_retrieval",
        "codeExecution",
        "code_execution",
        "urlContext",
        "url_context",
    }
)


def strip_provider_tools(route: Route, body: Any) -> tuple[Any, list[str]]:
    """Remove the tools the provider runs itself (web search and fetch, code execution, remote
    MCP): they reach the internet from the provider's side, past the sandbox's network policy
    (Inspect AI's bridge withholds them by default for the same reason).

    Client-executed tools (function tools, Anthropic's ``bash``/``text_editor``) are kept.

    Args:
        route: the route.
        body: the parsed request body.

    Returns:
        ``(body, removed)``: the body without them (the same object when nothing was removed)
        and the removed tools' names, in order.
    """
    if route.kind != "generate" or not isinstance(body, dict):
        return body, []
    removed: list[str] = []
    new = dict(body)
    tools = body.get("tools")
    if isinstance(tools, list):
        kept = []
        for tool in tools:
            name = _server_tool(route.family, tool)
            if name is None:
                kept.append(tool)
            else:
                removed.append(name)
        if removed:
            if kept:
                new["tools"] = kept
            else:
                new.pop("tools", None)
                new.pop("tool_choice", None)
                new.pop("toolConfig", None)
    for field_name in ("mcp_servers", "web_search_options"):  # Anthropic MCP connector, chat
        if field_name in new:
            removed.append(field_name)
            new.pop(field_name)
    return (new, removed) if removed else (body, [])


def _server_tool(family: str, tool: Any) -> str | None:
    if not isinstance(tool, dict):
        return None
    kind = str(tool.get("type") or "")
    if family == ANTHROPIC and kind.startswith(_ANTHROPIC_SERVER_TOOLS):
        return kind
    if family in (RESPONSES, CHAT) and (
        kind in _OPENAI_SERVER_TOOLS or kind.startswith("web_search_preview")
    ):
        return kind
    if family == GEMINI:
        hit = [k for k in tool if k in _GEMINI_SERVER_TOOLS]
        if hit and not tool.get("functionDeclarations") and not tool.get("function_declarations"):
            return hit[0]
    return None
