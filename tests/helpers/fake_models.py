"""A scripted model server speaking the three wire protocols the agent CLIs use, with streaming.

- ``POST /v1/messages`` — Anthropic Messages, Server-Sent Events (Claude Code);
- ``POST /v1/responses`` — OpenAI Responses API, Server-Sent Events (Codex);
- ``POST /v1/chat/completions`` — OpenAI Chat Completions, streamed chunks when the request
  asks for ``stream`` (opencode through ``@ai-sdk/openai-compatible``), one JSON body otherwise;
- ``POST /v1beta/models/MODEL:streamGenerateContent?alt=sse`` (and ``:generateContent``,
  ``:countTokens``) — the Gemini API (Gemini CLI).

The four protocols share one script: a list of protocol-neutral :class:`Turn` values
(assistant text, tool calls and
the usage to report); each entry may also be a callable ``(request) -> Turn`` that looks at the
request (to find the CLI's tool names). Requests for which ``consumes(request)`` is false (the
title request opencode sends before the real one, Claude Code's side queries) get
``side_turn`` and leave the script alone. Every request is logged in :attr:`FakeModels.requests`
(path, headers, JSON body) — tests check what the CLI sent.

Usage::

    with FakeModels([Turn(calls=[("Bash", {"command": "echo 1 > a.txt"})], usage=(100, 20)),
                     Turn(text="done", usage=(120, 5))], host="172.17.0.1") as server:
        ...  # ANTHROPIC_BASE_URL=server.base_url
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from threadserve import BackgroundServer

_ids = itertools.count(1)


@dataclass(frozen=True)
class Turn:
    """One scripted model answer.

    Attributes:
        text: the assistant text ("" for none).
        calls: ``(tool_name, arguments)`` tool calls, in order.
        usage: ``(prompt_tokens, completion_tokens, cached_tokens)``; prompt tokens include the
            cached ones (Anthropic's ``input_tokens`` is sent as prompt - cached).
        delay_sec: wait before answering (a slow model, for timeouts).
    """

    text: str = ""
    calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    usage: tuple[int, int, int] = (10, 5, 0)
    delay_sec: float = 0.0


@dataclass
class Request:
    """One logged request.

    Attributes:
        path: the request path (query string included).
        headers: the request headers (lower-case names).
        body: the parsed JSON body.
        side: True when it was answered with the side turn (did not consume the script).
    """

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    side: bool = False


def _sse(event: str | None, data: dict[str, Any] | str) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


# ---- Anthropic Messages ------------------------------------------------------------------
def anthropic_events(turn: Turn, model: str) -> list[bytes]:
    """The SSE events of one Anthropic Messages streaming answer for ``turn``."""
    prompt, completion, cached = turn.usage
    msg_id = f"msg_{next(_ids)}"
    out = [
        _sse(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": msg_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {
                        "input_tokens": prompt - cached,
                        "cache_read_input_tokens": cached,
                        "cache_creation_input_tokens": 0,
                        "output_tokens": 1,
                    },
                },
            },
        )
    ]
    index = 0
    if turn.text:
        out.append(
            _sse(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "text", "text": ""},
                },
            )
        )
        out.append(
            _sse(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "text_delta", "text": turn.text},
                },
            )
        )
        out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    for name, args in turn.calls:
        out.append(
            _sse(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {
                        "type": "tool_use",
                        "id": f"toolu_{next(_ids):04d}",
                        "name": name,
                        "input": {},
                    },
                },
            )
        )
        out.append(
            _sse(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": json.dumps(args)},
                },
            )
        )
        out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    out.append(
        _sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use" if turn.calls else "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": completion},
            },
        )
    )
    out.append(_sse("message_stop", {"type": "message_stop"}))
    return out


# ---- OpenAI Responses ----------------------------------------------------------------------
def responses_events(turn: Turn, model: str) -> list[bytes]:
    """The SSE events of one OpenAI Responses API streaming answer for ``turn``."""
    prompt, completion, cached = turn.usage
    resp_id = f"resp_{next(_ids)}"
    base = {"id": resp_id, "object": "response", "created_at": int(time.time()), "model": model}
    out = [
        _sse(
            "response.created",
            {"type": "response.created", "response": {**base, "status": "in_progress", "output": []}},
        )
    ]
    items: list[dict[str, Any]] = []
    if turn.text:
        item_id = f"msg_{next(_ids)}"
        item = {
            "type": "message",
            "id": item_id,
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": turn.text, "annotations": []}],
        }
        n = len(items)
        out.append(
            _sse(
                "response.output_item.added",
                {
                    "type": "response.output_item.added",
                    "output_index": n,
                    "item": {**item, "status": "in_progress", "content": []},
                },
            )
        )
        out.append(
            _sse(
                "response.output_text.delta",
                {
                    "type": "response.output_text.delta",
                    "item_id": item_id,
                    "output_index": n,
                    "content_index": 0,
                    "delta": turn.text,
                },
            )
        )
        out.append(
            _sse(
                "response.output_item.done",
                {"type": "response.output_item.done", "output_index": n, "item": item},
            )
        )
        items.append(item)
    for name, args in turn.calls:
        n = len(items)
        item = {
            "type": "function_call",
            "id": f"fc_{next(_ids)}",
            "call_id": f"call_{next(_ids):04d}",
            "name": name,
            "arguments": json.dumps(args),
            "status": "completed",
        }
        out.append(
            _sse(
                "response.output_item.added",
                {"type": "response.output_item.added", "output_index": n, "item": item},
            )
        )
        out.append(
            _sse(
                "response.output_item.done",
                {"type": "response.output_item.done", "output_index": n, "item": item},
            )
        )
        items.append(item)
    usage = {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }
    out.append(
        _sse(
            "response.completed",
            {
                "type": "response.completed",
                "response": {**base, "status": "completed", "output": items, "usage": usage},
            },
        )
    )
    return out


# ---- OpenAI Chat Completions -----------------------------------------------------------------
def chat_chunks(turn: Turn, model: str) -> list[bytes]:
    """The streamed chunks (``data:`` lines, then ``[DONE]``) of one chat completion."""
    prompt, completion, cached = turn.usage
    cid = f"chatcmpl-{next(_ids)}"
    base = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model}
    out = [
        _sse(
            None,
            {
                **base,
                "choices": [
                    {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
                ],
            },
        )
    ]
    if turn.text:
        out.append(
            _sse(
                None,
                {**base, "choices": [{"index": 0, "delta": {"content": turn.text}, "finish_reason": None}]},
            )
        )
    for i, (name, args) in enumerate(turn.calls):
        out.append(
            _sse(
                None,
                {
                    **base,
                    "choices": [
                        {
                            "index": 0,
                            "delta": {
                                "tool_calls": [
                                    {
                                        "index": i,
                                        "id": f"call_{next(_ids):04d}",
                                        "type": "function",
                                        "function": {"name": name, "arguments": json.dumps(args)},
                                    }
                                ]
                            },
                            "finish_reason": None,
                        }
                    ],
                },
            )
        )
    out.append(
        _sse(
            None,
            {
                **base,
                "choices": [
                    {"index": 0, "delta": {}, "finish_reason": "tool_calls" if turn.calls else "stop"}
                ],
            },
        )
    )
    out.append(
        _sse(
            None,
            {
                **base,
                "choices": [],
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                    "prompt_tokens_details": {"cached_tokens": cached},
                },
            },
        )
    )
    out.append(_sse(None, "[DONE]"))
    return out


def chat_body(turn: Turn, model: str) -> dict[str, Any]:
    """A non-streamed chat completion body for ``turn``."""
    prompt, completion, cached = turn.usage
    message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
    if turn.calls:
        message["tool_calls"] = [
            {
                "id": f"call_{next(_ids):04d}",
                "type": "function",
                "function": {"name": n, "arguments": json.dumps(a)},
            }
            for n, a in turn.calls
        ]
    return {
        "id": f"chatcmpl-{next(_ids)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if turn.calls else "stop"}
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
        },
    }


# ---- Gemini API -------------------------------------------------------------------------------
def gemini_body(turn: Turn, model: str) -> dict[str, Any]:
    """One ``GenerateContentResponse`` for ``turn`` (also each streamed chunk's shape)."""
    prompt, completion, cached = turn.usage
    parts: list[dict[str, Any]] = []
    if turn.text:
        parts.append({"text": turn.text})
    for name, args in turn.calls:
        parts.append({"functionCall": {"name": name, "args": args}})
    usage: dict[str, Any] = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": completion,
        "totalTokenCount": prompt + completion,
    }
    if cached:
        usage["cachedContentTokenCount"] = cached
    return {
        "candidates": [
            {
                "content": {"role": "model", "parts": parts or [{"text": ""}]},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": usage,
        "modelVersion": model,
        "responseId": f"gem-{next(_ids)}",
    }


def gemini_events(turn: Turn, model: str) -> list[bytes]:
    """The SSE chunks of one ``streamGenerateContent?alt=sse`` answer (one chunk)."""
    return [_sse(None, gemini_body(turn, model))]


ScriptEntry = Turn | Callable[[dict[str, Any]], Turn]


class FakeModels(BackgroundServer):
    """A threaded HTTP server replaying a script over the three protocols.

    Args:
        script: the answers, in request order (requests that consume the script).
        host: the address to bind (``127.0.0.1``, or the docker bridge gateway so a container
            reaches it).
        consumes: ``(request_body, path) -> bool``; False answers ``side_turn`` instead.
        side_turn: the answer to side requests.
        done_turn: the answer once the script is used up (``None``: HTTP 400).

    Attributes:
        requests: every :class:`Request`, in arrival order.
    """

    def __init__(
        self,
        script: Iterable[ScriptEntry] = (),
        *,
        host: str = "127.0.0.1",
        consumes: Callable[[dict[str, Any], str], bool] | None = None,
        side_turn: Turn = Turn(text="Scripted title", usage=(0, 0, 0)),
        done_turn: Turn | None = None,
    ) -> None:
        self._script = list(script)
        self._consumes = consumes or (lambda body, path: True)
        self._side = side_turn
        self._done = done_turn
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self.requests: list[Request] = []
        self.host = host
        super().__init__(host, self._handler_class(), "fake-models")

    @property
    def port(self) -> int:
        """The bound port."""
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT`` (no ``/v1``)."""
        return f"http://{self.host}:{self.port}"

    @property
    def script_left(self) -> int:
        """Script entries not yet used."""
        with self._lock:
            return len(self._script)

    def main_requests(self) -> list[Request]:
        """The requests that consumed the script (not side requests)."""
        return [r for r in self.requests if not r.side]

    def _next(self, req: Request) -> Turn | None:
        with self._lock:
            self.requests.append(req)
            if not self._consumes(req.body, req.path):
                req.side = True
                return self._side
            if not self._script:
                return self._done
            entry = self._script.pop(0)
        return entry(req.body) if callable(entry) else entry

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def _json(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, chunks: list[bytes]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                for chunk in chunks:
                    self.wfile.write(chunk)
                    self.wfile.flush()
                self.close_connection = True

            def do_GET(self) -> None:  # noqa: N802 - http.server naming
                with fake._lock:
                    fake.requests.append(
                        Request(self.path, {k.lower(): v for k, v in self.headers.items()}, {}, True)
                    )
                if self.path.rstrip("/").endswith("/models"):
                    self._json(200, {"object": "list", "data": [], "models": []})
                else:
                    self._json(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:  # noqa: N802 - http.server naming
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b"{}"
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"_raw": raw.decode("utf-8", "replace")}
                path = self.path.split("?", 1)[0].rstrip("/")
                req = Request(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                if path.endswith(":countTokens"):
                    with fake._lock:
                        fake.requests.append(Request(self.path, {}, body, True))
                    self._json(200, {"totalTokens": 1})
                    return
                gemini = path.endswith((":streamGenerateContent", ":generateContent"))
                if not gemini and not path.endswith(("/messages", "/responses", "/chat/completions")):
                    with fake._lock:
                        fake.requests.append(req)
                    self._json(404, {"error": {"message": f"no route {self.path}"}})
                    return
                turn = fake._next(req)
                if turn is None:
                    self._json(
                        400,
                        {
                            "error": {
                                "type": "invalid_request_error",
                                "message": "fake server: script exhausted",
                            }
                        },
                    )
                    return
                if turn.delay_sec and fake._closing.wait(turn.delay_sec):
                    return  # the server is stopping: drop the slow answer
                model = str(body.get("model") or "fake-model")
                if gemini:
                    model = path.rsplit("/", 1)[-1].split(":", 1)[0]
                    if path.endswith(":streamGenerateContent"):
                        self._stream(gemini_events(turn, model))
                    else:
                        self._json(200, gemini_body(turn, model))
                elif path.endswith("/messages"):
                    self._stream(anthropic_events(turn, model))
                elif path.endswith("/responses"):
                    self._stream(responses_events(turn, model))
                elif body.get("stream"):
                    self._stream(chat_chunks(turn, model))
                else:
                    self._json(200, chat_body(turn, model))

        return Handler

    def stop(self) -> None:
        """Stop serving and close the socket (slow answers still waiting are dropped)."""
        self._closing.set()
        super().stop()
