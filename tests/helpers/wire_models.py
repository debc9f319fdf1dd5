"""A scripted model server for the relay's tests: the four wire protocols, with a bill.

Unlike :mod:`fake_models` (made to drive the real CLIs), this server keeps its own **bill**
(what each generation call cost in tokens, in the server's terms) so a test can compare the
relay's accounting to it, and it behaves as the real providers do where the relay cares:

- Chat Completions streams carry the usage chunk only when the request sets
  ``stream_options.include_usage`` (OpenAI API reference), and reject ``stream_options``
  on non-streamed requests (as vLLM does);
- ``return_token_ids`` / ``logprobs`` on chat requests add vLLM's ``prompt_token_ids``,
  ``choices[].token_ids`` and ``choices[].logprobs.content`` (streamed: prompt ids in the first
  chunk, per-chunk deltas);
- Anthropic ``input_tokens`` excludes cache reads and writes; ``message_delta`` usage is
  cumulative; Gemini thought tokens are reported apart from candidates;
- a turn can be an HTTP error, and a stream can pause after its first event until the test
  releases it (:attr:`WireModels.gate`), to show the relay forwards before the upstream ends.

Every request is kept in :attr:`WireModels.requests` (path, lower-case headers, body).
"""

from __future__ import annotations

import gzip
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from threadserve import BackgroundServer


@dataclass(frozen=True)
class Bill:
    """What one call costs, in tokens (input includes cache reads and writes)."""

    input: int = 10
    output: int = 5
    cache_read: int = 0
    cache_write: int = 0
    reasoning: int = 0


@dataclass(frozen=True)
class Say:
    """One scripted answer: text and its bill, or an HTTP error."""

    text: str = "ok"
    bill: Bill = field(default_factory=Bill)
    error_status: int | None = None
    gated: bool = False
    """Stream the first event, then wait for :attr:`WireModels.gate` before the rest."""
    gzip: bool = False
    """Send a whole (non-streamed) JSON answer gzip-encoded."""
    fail_mid_stream: bool = False
    """End the stream with the dialect's in-stream error instead of its normal end."""


def _sse(event: str | None, data: Any) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data)
    return ((f"event: {event}\n" if event else "") + f"data: {payload}\n\n").encode()


PROMPT_IDS = [101, 102, 103]


def _ids(text: str) -> list[int]:
    return [1000 + (ord(c) % 200) for c in text]


def anthropic(say: Say, model: str) -> list[bytes]:
    b = say.bill
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "usage": {
                "input_tokens": b.input - b.cache_read - b.cache_write,
                "cache_read_input_tokens": b.cache_read,
                "cache_creation_input_tokens": b.cache_write,
                "output_tokens": 1,
            },
        },
    }
    return [
        _sse("message_start", start),
        _sse("ping", {"type": "ping"}),
        _sse(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ),
        _sse(
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": say.text}},
        ),
        _sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": max(1, b.output // 2)},
            },
        ),
        _sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": b.output},
            },
        ),
        _sse("message_stop", {"type": "message_stop"}),
    ]


def anthropic_body(say: Say, model: str) -> dict[str, Any]:
    b = say.bill
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": say.text}],
        "stop_reason": "end_turn",
        "usage": {
            "input_tokens": b.input - b.cache_read - b.cache_write,
            "cache_read_input_tokens": b.cache_read,
            "cache_creation_input_tokens": b.cache_write,
            "output_tokens": b.output,
        },
    }


def _responses_usage(b: Bill) -> dict[str, Any]:
    return {
        "input_tokens": b.input,
        "input_tokens_details": {"cached_tokens": b.cache_read},
        "output_tokens": b.output,
        "output_tokens_details": {"reasoning_tokens": b.reasoning},
        "total_tokens": b.input + b.output,
    }


def responses(say: Say, model: str) -> list[bytes]:
    base = {"id": "resp_1", "object": "response", "model": model}
    item = {
        "type": "message",
        "id": "m1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": say.text, "annotations": []}],
    }
    return [
        _sse("response.created", {"type": "response.created", "response": {**base, "status": "in_progress"}}),
        _sse(
            "response.output_text.delta",
            {
                "type": "response.output_text.delta",
                "item_id": "m1",
                "output_index": 0,
                "content_index": 0,
                "delta": say.text,
            },
        ),
        _sse(
            "response.completed",
            {
                "type": "response.completed",
                "response": {
                    **base,
                    "status": "completed",
                    "output": [item],
                    "usage": _responses_usage(say.bill),
                },
            },
        ),
    ]


def _chat_usage(b: Bill) -> dict[str, Any]:
    return {
        "prompt_tokens": b.input,
        "completion_tokens": b.output,
        "total_tokens": b.input + b.output,
        "prompt_tokens_details": {"cached_tokens": b.cache_read},
        "completion_tokens_details": {"reasoning_tokens": b.reasoning},
    }


def chat(say: Say, model: str, req: dict[str, Any]) -> list[bytes]:
    ids, lp = req.get("return_token_ids") is True, req.get("logprobs") is True
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": model}
    out = []
    first: dict[str, Any] = {
        **base,
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
    }
    if ids:
        first["prompt_token_ids"] = PROMPT_IDS
    out.append(_sse(None, first))
    for ch in say.text:
        choice: dict[str, Any] = {"index": 0, "delta": {"content": ch}, "finish_reason": None}
        if ids:
            choice["token_ids"] = _ids(ch)
        if lp:
            choice["logprobs"] = {
                "content": [{"token": ch, "logprob": -0.5, "bytes": None, "top_logprobs": []}]
            }
        out.append(_sse(None, {**base, "choices": [choice]}))
    out.append(_sse(None, {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    opts = req.get("stream_options")
    if isinstance(opts, dict) and opts.get("include_usage") is True:
        out.append(_sse(None, {**base, "choices": [], "usage": _chat_usage(say.bill)}))
    out.append(_sse(None, "[DONE]"))
    return out


def chat_body(say: Say, model: str, req: dict[str, Any]) -> dict[str, Any]:
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": say.text},
        "finish_reason": "stop",
        "logprobs": None,
    }
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": model,
        "choices": [choice],
        "usage": _chat_usage(say.bill),
    }
    if req.get("return_token_ids") is True:
        body["prompt_token_ids"] = PROMPT_IDS
        choice["token_ids"] = _ids(say.text)
    if req.get("logprobs") is True:
        choice["logprobs"] = {
            "content": [{"token": c, "logprob": -0.5, "bytes": None, "top_logprobs": []} for c in say.text]
        }
    return body


def gemini_body(say: Say, model: str) -> dict[str, Any]:
    b = say.bill
    meta = {
        "promptTokenCount": b.input,
        "candidatesTokenCount": b.output - b.reasoning,
        "thoughtsTokenCount": b.reasoning,
        "cachedContentTokenCount": b.cache_read,
        "totalTokenCount": b.input + b.output,
    }
    return {
        "candidates": [
            {"content": {"role": "model", "parts": [{"text": say.text}]}, "finishReason": "STOP", "index": 0}
        ],
        "usageMetadata": meta,
        "modelVersion": model,
    }


def gemini_chunks(say: Say, model: str) -> list[dict[str, Any]]:
    """Two chunks of running totals, then a usage-only chunk (as Gemini 3 models end)."""
    whole = gemini_body(say, model)
    half = json.loads(json.dumps(whole))
    half["usageMetadata"]["candidatesTokenCount"] = 1
    half["candidates"][0].pop("finishReason")
    return [half, whole, {"usageMetadata": whole["usageMetadata"], "modelVersion": model}]


def _error(path: str, status: int, headers: dict[str, str] | None = None) -> dict[str, Any]:
    if status == 401:  # as OpenAI does: the rejected key is quoted back
        got = (headers or {}).get("authorization") or (headers or {}).get("x-api-key") or ""
        return {
            "error": {
                "message": f"Incorrect API key provided: {got}",
                "type": "invalid_request_error",
                "code": "invalid_api_key",
            }
        }
    if "/messages" in path:
        return {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    if "/v1beta/" in path:
        return {"error": {"code": status, "message": "busy", "status": "UNAVAILABLE"}}
    return {"error": {"message": "busy", "type": "server_error", "code": None}}


def _failed(chunks: list[bytes], path: str) -> list[bytes]:
    """The stream cut after its first events and ended with the dialect's error event."""
    if "/messages" in path:
        return [
            *chunks[:2],
            _sse("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ]
    if "/responses" in path:
        return [
            chunks[0],
            _sse(
                "response.failed",
                {
                    "type": "response.failed",
                    "response": {
                        "id": "resp_1",
                        "status": "failed",
                        "error": {"code": "server_error", "message": "boom"},
                        "usage": None,
                    },
                },
            ),
        ]
    return chunks[:1]  # chat and Gemini: the connection just ends


@dataclass
class Seen:
    """One request as the server got it."""

    path: str
    headers: dict[str, str]
    body: Any


class WireModels(BackgroundServer):
    """Serves a script of :class:`Say` answers over the four protocols and bills each call.

    Args:
        script: answers in order; once used up, ``Say()`` again and again.
        host: the address to bind.

    Attributes:
        requests: every request seen.
        bills: the bill of every answered generation call, in order.
        gate: set it to release a gated stream.
        finished: set when a gated stream has been written to its end.
    """

    def __init__(self, script: list[Say] | None = None, host: str = "127.0.0.1") -> None:
        self._script = list(script or [])
        self._lock = threading.Lock()
        self.requests: list[Seen] = []
        self.bills: list[Bill] = []
        self.gate = threading.Event()
        self.finished = threading.Event()
        self.host = host
        super().__init__(host, self._handler(), "wire-models")

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT`` (no ``/v1``)."""
        return f"http://{self.host}:{self._server.server_address[1]}"

    def _next(self) -> Say:
        with self._lock:
            return self._script.pop(0) if self._script else Say()

    def billed(self) -> Bill:
        """The sum of the bills so far."""
        with self._lock:
            parts = list(self.bills)
        return Bill(
            *(
                sum(getattr(b, f) for b in parts)
                for f in ("input", "output", "cache_read", "cache_write", "reasoning")
            )
        )

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        srv = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # else headers and body wait on delayed ACKs (~40 ms)

            def log_message(self, *args: Any) -> None:
                pass

            def _json(self, status: int, body: Any, say: Say | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                if say is not None and say.gzip:
                    data = gzip.compress(data)
                    self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("x-request-id", "req-abc")
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, chunks: list[bytes], say: Say) -> None:
                if say.fail_mid_stream:
                    chunks = _failed(chunks, self.path)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for i, chunk in enumerate(chunks):
                    self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                    self.wfile.flush()
                    if i == 0 and say.gated:
                        srv.gate.wait(30)
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
                if say.gated:
                    srv.finished.set()

            def do_GET(self) -> None:  # noqa: N802
                srv.requests.append(Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, None))
                self._json(200, {"object": "list", "data": [{"id": "m", "object": "model"}]})

            def do_POST(self) -> None:  # noqa: N802
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.loads(raw) if raw else {}
                srv.requests.append(Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                path = self.path.split("?", 1)[0]
                if path.endswith((":countTokens", "/count_tokens")):
                    self._json(200, {"totalTokens": 7} if ":" in path else {"input_tokens": 7})
                    return
                say = srv._next()
                if say.error_status is not None:
                    self._json(say.error_status, _error(path, say.error_status, srv.requests[-1].headers))
                    return
                model = str(body.get("model") or path.rsplit("/", 1)[-1].split(":")[0])
                if (
                    path.endswith("/chat/completions")
                    and body.get("stream_options")
                    and not body.get("stream")
                ):
                    self._json(400, _error(path, 400))  # vLLM's rule
                    return
                with srv._lock:
                    srv.bills.append(say.bill)
                if path.endswith("/v1/messages"):
                    if body.get("stream"):
                        self._stream(anthropic(say, model), say)
                    else:
                        self._json(200, anthropic_body(say, model), say)
                elif path.endswith("/v1/responses"):
                    self._stream(responses(say, model), say)
                elif path.endswith("/chat/completions"):
                    if body.get("stream"):
                        self._stream(chat(say, model, body), say)
                    else:
                        self._json(200, chat_body(say, model, body), say)
                elif path.endswith(":streamGenerateContent"):
                    if "alt=sse" in self.path:
                        self._stream([_sse(None, c) for c in gemini_chunks(say, model)], say)
                    else:
                        self._json(200, gemini_chunks(say, model))
                elif path.endswith(":generateContent"):
                    self._json(200, gemini_body(say, model), say)
                else:
                    self._json(404, _error(path, 404))

        return Handler
