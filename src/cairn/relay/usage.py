"""Exact usage from each provider's own usage fields (pure values; no I/O, no aiohttp).

One normalised shape, :class:`Usage`, read from the four wire dialects the agent CLIs speak:

- Anthropic Messages: ``usage`` {input_tokens, cache_creation_input_tokens,
  cache_read_input_tokens, output_tokens}. ``input_tokens`` excludes cache reads and writes, so
  the billed input is the three added. In streams ``message_start`` gives the input side and
  ``message_delta.usage`` counts are cumulative (the last one wins, never summed).
- OpenAI Chat Completions: ``usage`` {prompt_tokens (cached included),
  prompt_tokens_details.cached_tokens, completion_tokens (reasoning included),
  completion_tokens_details.reasoning_tokens}; streamed only with
  ``stream_options.include_usage``, in one extra chunk whose ``choices`` is empty.
- OpenAI Responses: ``response.usage`` {input_tokens, input_tokens_details.cached_tokens,
  output_tokens, output_tokens_details.reasoning_tokens} on the terminal event.
- Gemini: ``usageMetadata`` {promptTokenCount (cached included), toolUsePromptTokenCount,
  cachedContentTokenCount, candidatesTokenCount, thoughtsTokenCount}; in streams every chunk
  carries running totals, the last one wins. Thought tokens are billed as output.

Unknown is ``None``, never a made-up 0 (cairn's rule for token counts).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any


@dataclass(frozen=True)
class Usage:
    """Token counts of one model call, normalised across providers.

    Attributes:
        input_tokens: every billed prompt token, cache reads and writes included.
        output_tokens: every billed completion token, reasoning included.
        cache_read_tokens: prompt tokens read from the provider's cache (part of input).
        cache_write_tokens: prompt tokens written to the cache (part of input; Anthropic).
        reasoning_tokens: completion tokens spent on reasoning (part of output).
    """

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None

    @property
    def known(self) -> bool:
        """Whether both the input and the output counts are known."""
        return self.input_tokens is not None and self.output_tokens is not None

    @property
    def total_tokens(self) -> int:
        """Input plus output, the unknown parts counted as 0 (for limits only)."""
        return (self.input_tokens or 0) + (self.output_tokens or 0)

    def as_dict(self) -> dict[str, int | None]:
        """The counts as a JSON object (``None`` kept)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def merged(self, later: Usage) -> Usage:
        """This usage overwritten field by field by the known fields of ``later``."""
        changes = {
            f.name: getattr(later, f.name) for f in fields(later) if getattr(later, f.name) is not None
        }
        return replace(self, **changes)


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value)


def _get(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def anthropic_usage(usage: Any) -> Usage:
    """Read an Anthropic ``usage`` object (a whole message's, or ``message_start``'s).

    Args:
        usage: the ``usage`` object; anything else gives an unknown :class:`Usage`.

    Returns:
        The usage; input = input_tokens + cache reads + cache writes.
    """
    if not isinstance(usage, Mapping):
        return Usage()
    base = _int(usage.get("input_tokens"))
    read = _int(usage.get("cache_read_input_tokens"))
    write = _int(usage.get("cache_creation_input_tokens"))
    total = None if base is None else base + (read or 0) + (write or 0)
    return Usage(
        input_tokens=total,
        output_tokens=_int(usage.get("output_tokens")),
        cache_read_tokens=read,
        cache_write_tokens=write,
    )


def chat_usage(usage: Any) -> Usage:
    """Read an OpenAI Chat Completions ``usage`` object."""
    if not isinstance(usage, Mapping):
        return Usage()
    return Usage(
        input_tokens=_int(usage.get("prompt_tokens")),
        output_tokens=_int(usage.get("completion_tokens")),
        cache_read_tokens=_int(_get(usage, "prompt_tokens_details", "cached_tokens")),
        reasoning_tokens=_int(_get(usage, "completion_tokens_details", "reasoning_tokens")),
    )


def responses_usage(usage: Any) -> Usage:
    """Read an OpenAI Responses ``response.usage`` object."""
    if not isinstance(usage, Mapping):
        return Usage()
    return Usage(
        input_tokens=_int(usage.get("input_tokens")),
        output_tokens=_int(usage.get("output_tokens")),
        cache_read_tokens=_int(_get(usage, "input_tokens_details", "cached_tokens")),
        reasoning_tokens=_int(_get(usage, "output_tokens_details", "reasoning_tokens")),
    )


def gemini_usage(meta: Any) -> Usage:
    """Read a Gemini ``usageMetadata`` object.

    Input = promptTokenCount + toolUsePromptTokenCount; output = candidatesTokenCount +
    thoughtsTokenCount (Gemini bills thoughts as output).
    """
    if not isinstance(meta, Mapping):
        return Usage()
    prompt = _int(meta.get("promptTokenCount"))
    tool = _int(meta.get("toolUsePromptTokenCount"))
    cand = _int(meta.get("candidatesTokenCount"))
    thoughts = _int(meta.get("thoughtsTokenCount"))
    out = None if cand is None and thoughts is None else (cand or 0) + (thoughts or 0)
    return Usage(
        input_tokens=None if prompt is None else prompt + (tool or 0),
        output_tokens=out,
        cache_read_tokens=_int(meta.get("cachedContentTokenCount")),
        reasoning_tokens=thoughts,
    )


def usage_of_body(family: str, body: Any) -> Usage:
    """The usage of one whole (non-streamed) response body.

    Args:
        family: ``anthropic``, ``chat``, ``responses`` or ``gemini``.
        body: the parsed JSON body (for Gemini's non-SSE ``streamGenerateContent``, the
            JSON array of chunks).

    Returns:
        The usage (unknown fields ``None``).
    """
    if family == "anthropic":
        return anthropic_usage(_get(body, "usage"))
    if family == "chat":
        return chat_usage(_get(body, "usage"))
    if family == "responses":
        return responses_usage(_get(body, "usage"))
    if family == "gemini":
        if isinstance(body, list):
            last = Usage()
            for chunk in body:
                last = last.merged(gemini_usage(_get(chunk, "usageMetadata")))
            return last
        return gemini_usage(_get(body, "usageMetadata"))
    return Usage()


def sum_usage(parts: Iterable[Usage]) -> Usage:
    """Field-by-field sum; a field is ``None`` only when no part knows it."""
    totals: dict[str, int | None] = {f.name: None for f in fields(Usage)}
    for part in parts:
        for name, value in part.as_dict().items():
            if value is not None:
                totals[name] = (totals[name] or 0) + value
    return Usage(**totals)
