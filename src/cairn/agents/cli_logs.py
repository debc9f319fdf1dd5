"""Read the agent CLIs' native session logs: ATIF steps, per-step tokens and cost, session ids.

Each reader takes the text of one cairn step's logs and returns a :class:`CliRun`. CLI output is
hostile input: every line is parsed defensively (non-JSON lines and unexpected shapes are
skipped), and nothing here raises on bad input. What a CLI does not report is ``None``, never 0.

Sources (measured on the pinned versions, see docs/agents.md):

- Claude Code: ``--output-format stream-json`` on stdout for the turns (``assistant`` events are
  split per content block and share ``message.id``; ``user`` events carry ``tool_result``) and the
  final ``result`` event (``session_id``, ``total_cost_usd``, usage of this invocation); the
  session file ``~/.claude/projects/*/<session>.jsonl`` for the final usage of each message (the
  stream's ``assistant`` events carry the usage of ``message_start``, whose ``output_tokens`` is
  not final).
- Codex: the rollout file ``$CODEX_HOME/sessions/**/rollout-*.jsonl`` — ``response_item``
  entries after the last ``task_started`` are this invocation (a resumed thread appends to the
  same file), ``event_msg`` ``token_count`` entries carry ``last_token_usage`` per model call
  (``turn.completed`` in ``--json`` is cumulative over a resumed thread, so it is not used for
  per-step sums); ``--json`` stdout gives the ``thread_id``.
- Gemini CLI: the chat session files for the turns and per-call tokens, ``stream-json``
  stdout for the session id and the invocation's totals (see :func:`read_gemini`).
- Qwen Code: ``-o stream-json`` stdout, Claude-Code-shaped, with final usage per model call
  (see :func:`read_qwen`).
- opencode: ``--format json`` stdout — ``text``, ``reasoning``, ``tool_use`` (call with its
  input and output) and ``step_finish`` (per model call tokens and cost) events, each carrying
  ``sessionID``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cairn.agents.trajectory import step_metrics, tool_call


@dataclass
class CliRun:
    """What one CLI invocation did, read from its logs.

    Attributes:
        session_id: the CLI's session / thread id (for ``--resume-agent-session``).
        model_name: the model the CLI reported.
        steps: ATIF agent steps (without ``step_id``; the trajectory numbers them).
        prompt_tokens: prompt tokens of the invocation (cached included), ``None`` if unknown.
        completion_tokens: completion tokens, ``None`` if unknown.
        cached_tokens: cached prompt tokens, ``None`` if unknown.
        cost_usd: the cost the CLI reported, ``None`` if it reports none.
        is_error: the CLI's own error flag, ``None`` if it has none.
        extra: CLI-specific facts (turn counts, stop reasons).
    """

    session_id: str | None = None
    model_name: str | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cost_usd: float | None = None
    is_error: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def has_tokens(self) -> bool:
        """Whether any token count was reported."""
        return any(v is not None for v in (self.prompt_tokens, self.completion_tokens, self.cached_tokens))


def _dict(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one (hostile logs: any shape)."""
    return value if isinstance(value, dict) else {}


def json_lines(text: str) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSON-lines text; other lines are skipped."""
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            yield value


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float) and value >= 0 and value == int(value):
        return int(value)
    return None


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if value >= 0 else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _ms_iso(ms: Any) -> str | None:
    if not isinstance(ms, (int, float)) or isinstance(ms, bool):
        return None
    try:
        return (
            datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        )
    except (OverflowError, OSError, ValueError):
        return None


def _text_of(content: Any) -> str:
    """Text of a tool result / message content (a string or a list of text blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                parts.append(block["text"])
            elif isinstance(block, str):
                parts.append(block)
        return "\n".join(parts)
    return "" if content is None else json.dumps(content, ensure_ascii=False)[:100_000]


def _args(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return {"raw": value}
        return parsed if isinstance(parsed, dict) else {"value": parsed}
    return {} if value is None else {"value": value}


def _sum(values: Iterable[int | None]) -> int | None:
    seen = [v for v in values if v is not None]
    return sum(seen) if seen else None


def _agent_step(
    message: str = "", timestamp: str | None = None, model_name: str | None = None
) -> dict[str, Any]:
    return {
        "source": "agent",
        "message": message,
        "timestamp": timestamp,
        "model_name": model_name,
        "tool_calls": [],
        "observation": None,
        "metrics": None,
        "reasoning_content": None,
    }


def _add_result(steps: list[dict[str, Any]], call_id: str, content: str) -> None:
    for step in reversed(steps):
        if any(c["tool_call_id"] == call_id for c in step.get("tool_calls") or []):
            obs = step.get("observation") or {"results": []}
            obs["results"].append({"source_call_id": call_id, "content": content})
            step["observation"] = obs
            return


def _add_blocks(step: dict[str, Any], content: Any) -> None:
    """Fold an Anthropic-style ``assistant`` message's content blocks into an ATIF step:
    ``text`` joins the message, ``thinking`` is the reasoning, ``tool_use`` adds a call
    (Claude Code's and Qwen Code's stream-json)."""
    for block in content or []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            step["message"] = "\n".join(p for p in (step["message"], block["text"]) if p)
        elif block.get("type") == "thinking" and isinstance(block.get("thinking"), str):
            step["reasoning_content"] = block["thinking"]
        elif block.get("type") == "tool_use":
            step["tool_calls"].append(
                tool_call(str(block.get("id") or ""), str(block.get("name") or ""), _args(block.get("input")))
            )


def _add_tool_results(steps: list[dict[str, Any]], content: Any) -> None:
    """Attach a ``user`` message's ``tool_result`` blocks to the calls they answer."""
    for block in content or []:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            _add_result(steps, str(block.get("tool_use_id") or ""), _text_of(block.get("content")))


def _totals_from_steps(run: CliRun) -> None:
    metrics = [s["metrics"] for s in run.steps if s.get("metrics")]
    run.prompt_tokens = _sum(m.get("prompt_tokens") for m in metrics)
    run.completion_tokens = _sum(m.get("completion_tokens") for m in metrics)
    run.cached_tokens = _sum(m.get("cached_tokens") for m in metrics)


# ---- Claude Code ----------------------------------------------------------------------------
def _claude_usage(usage: Any) -> dict[str, Any] | None:
    if not isinstance(usage, dict):
        return None
    fresh = _int(usage.get("input_tokens"))
    read = _int(usage.get("cache_read_input_tokens"))
    write = _int(usage.get("cache_creation_input_tokens"))
    parts = [v for v in (fresh, read, write) if v is not None]
    return step_metrics(sum(parts) if parts else None, _int(usage.get("output_tokens")), read, None)


def read_claude(stdout: str, session_texts: Iterable[str] = ()) -> CliRun:
    """Read one ``claude -p --output-format stream-json --verbose`` run.

    Args:
        stdout: the stream-json output of this invocation.
        session_texts: texts of the session ``.jsonl`` files (final per-message usage).

    Returns:
        The :class:`CliRun`; step tokens come from the ``result`` event when the run finished,
        else from the per-message usage of the turns it completed.
    """
    final_usage: dict[str, dict[str, Any]] = {}
    for text in session_texts:
        for entry in json_lines(text):
            msg = entry.get("message")
            if entry.get("type") == "assistant" and isinstance(msg, dict) and isinstance(msg.get("id"), str):
                metrics = _claude_usage(msg.get("usage"))
                if metrics is not None:
                    final_usage[msg["id"]] = metrics
    run = CliRun()
    by_id: dict[str, dict[str, Any]] = {}
    result: dict[str, Any] | None = None
    for event in json_lines(stdout):
        kind = event.get("type")
        if kind == "system" and event.get("subtype") == "init":
            run.session_id = _str(event.get("session_id")) or run.session_id
            run.model_name = _str(event.get("model")) or run.model_name
        elif kind == "assistant" and isinstance(event.get("message"), dict):
            if event.get("parent_tool_use_id"):
                continue  # a sub-agent's turn: its tokens are in the result's usage
            msg = event["message"]
            mid = _str(msg.get("id")) or f"anon-{len(run.steps)}"
            step = by_id.get(mid)
            if step is None:
                step = _agent_step(timestamp=_str(event.get("timestamp")), model_name=_str(msg.get("model")))
                step["metrics"] = final_usage.get(mid) or _stream_usage(msg.get("usage"))
                by_id[mid] = step
                run.steps.append(step)
            _add_blocks(step, msg.get("content"))
        elif kind == "user" and isinstance(event.get("message"), dict):
            _add_tool_results(run.steps, event["message"].get("content"))
        elif kind == "result":
            result = event
    _totals_from_steps(run)
    if result is not None:
        run.session_id = _str(result.get("session_id")) or run.session_id
        run.cost_usd = _num(result.get("total_cost_usd"))
        run.is_error = result.get("is_error") if isinstance(result.get("is_error"), bool) else None
        metrics = _claude_usage(result.get("usage"))
        if metrics is not None:
            run.prompt_tokens = metrics["prompt_tokens"]
            run.completion_tokens = metrics["completion_tokens"]
            run.cached_tokens = metrics["cached_tokens"]
        run.extra = {
            k: result.get(k)
            for k in ("num_turns", "subtype", "stop_reason")
            if isinstance(result.get(k), (str, int))
        }
    else:
        run.extra = {"finished": False}
    return run


def _stream_usage(usage: Any) -> dict[str, Any] | None:
    """Usage from a stream ``assistant`` event: the prompt side only (output is not final)."""
    metrics = _claude_usage(usage)
    if metrics is not None:
        metrics["completion_tokens"] = None
    return metrics


# ---- Codex ----------------------------------------------------------------------------------
def read_codex(stdout: str, rollout: str | None) -> CliRun:
    """Read one ``codex exec --json`` run and its rollout file.

    Args:
        stdout: the ``--json`` events of this invocation.
        rollout: the thread's rollout ``.jsonl`` text (all invocations of the thread), or
            ``None`` when it was not found.

    Returns:
        The :class:`CliRun` for this invocation only.
    """
    run = CliRun()
    for event in json_lines(stdout):
        if event.get("type") == "thread.started":
            run.session_id = _str(event.get("thread_id")) or run.session_id
    entries = list(json_lines(rollout or ""))
    start = 0
    for i, entry in enumerate(entries):
        payload = entry.get("payload")
        if isinstance(payload, dict) and entry.get("type") == "session_meta":
            run.session_id = run.session_id or _str(payload.get("id"))
        if isinstance(payload, dict) and payload.get("type") == "task_started":
            start = i + 1
    current: dict[str, Any] | None = None
    for entry in entries[start:]:
        payload = entry.get("payload")
        if not isinstance(payload, dict):
            continue
        ts = _str(entry.get("timestamp"))
        kind = entry.get("type")
        ptype = payload.get("type")
        if kind == "turn_context":
            run.model_name = _str(payload.get("model")) or run.model_name
        if kind == "response_item":
            if ptype == "message" and payload.get("role") == "assistant":
                if current is None or current["metrics"] is not None:
                    current = _agent_step(timestamp=ts, model_name=run.model_name)
                    run.steps.append(current)
                current["message"] = "\n".join(
                    p for p in (current["message"], _text_of(payload.get("content"))) if p
                )
            elif ptype == "reasoning":
                if current is None or current["metrics"] is not None:
                    current = _agent_step(timestamp=ts, model_name=run.model_name)
                    run.steps.append(current)
                summary = payload.get("summary")
                current["reasoning_content"] = _text_of(summary) or None
            elif ptype in ("function_call", "custom_tool_call", "local_shell_call"):
                if current is None or current["metrics"] is not None:
                    current = _agent_step(timestamp=ts, model_name=run.model_name)
                    run.steps.append(current)
                args = payload.get("arguments", payload.get("input", payload.get("action")))
                current["tool_calls"].append(
                    tool_call(
                        str(payload.get("call_id") or ""), str(payload.get("name") or ptype), _args(args)
                    )
                )
            elif ptype in ("function_call_output", "custom_tool_call_output"):
                output = payload.get("output")
                if isinstance(output, dict):
                    output = output.get("content", output)
                _add_result(run.steps, str(payload.get("call_id") or ""), _text_of(output))
        elif kind == "event_msg" and ptype == "token_count":
            info = payload.get("info")
            last = info.get("last_token_usage") if isinstance(info, dict) else None
            if isinstance(last, dict):
                metrics = step_metrics(
                    _int(last.get("input_tokens")),
                    _int(last.get("output_tokens")),
                    _int(last.get("cached_input_tokens")),
                    None,
                )
                if current is None or current["metrics"] is not None:
                    current = _agent_step(timestamp=ts, model_name=run.model_name)
                    run.steps.append(current)
                current["metrics"] = metrics
    _totals_from_steps(run)
    run.extra = {"rollout_found": rollout is not None}
    return run


# ---- opencode -------------------------------------------------------------------------------
def read_opencode(stdout: str) -> CliRun:
    """Read one ``opencode run --format json`` run.

    Args:
        stdout: its JSON events.

    Returns:
        The :class:`CliRun`; one ATIF step per model call (``step_start`` … ``step_finish``).
    """
    run = CliRun()
    current: dict[str, Any] | None = None
    costs: list[float | None] = []
    for event in json_lines(stdout):
        run.session_id = run.session_id or _str(event.get("sessionID"))
        part = _dict(event.get("part"))
        kind = event.get("type")
        ts = _ms_iso(event.get("timestamp"))
        if kind == "step_start" or current is None:
            current = _agent_step(timestamp=ts)
            run.steps.append(current)
            if kind == "step_start":
                continue
        if kind == "text" and isinstance(part.get("text"), str):
            current["message"] = "\n".join(p for p in (current["message"], part["text"]) if p)
        elif kind == "reasoning" and isinstance(part.get("text"), str):
            current["reasoning_content"] = part["text"]
        elif kind == "tool_use":
            state = _dict(part.get("state"))
            call_id = str(part.get("callID") or part.get("id") or "")
            current["tool_calls"].append(
                tool_call(call_id, str(part.get("tool") or ""), _args(state.get("input")))
            )
            if "output" in state or "error" in state:
                _add_result(run.steps, call_id, _text_of(state.get("output", state.get("error"))))
        elif kind == "step_finish":
            tokens = _dict(part.get("tokens"))
            cache = _dict(tokens.get("cache"))
            fresh, read = _int(tokens.get("input")), _int(cache.get("read"))
            write = _int(cache.get("write"))
            parts = [v for v in (fresh, read, write) if v is not None]
            cost = _num(part.get("cost"))
            costs.append(cost)
            current["metrics"] = step_metrics(
                sum(parts) if parts else None, _int(tokens.get("output")), read, cost
            )
        elif kind == "error":
            run.is_error = True
            err = event.get("error")
            run.extra["error"] = _text_of(err.get("data", err) if isinstance(err, dict) else err)[:2000]
    run.steps = [s for s in run.steps if s["message"] or s["tool_calls"] or s["metrics"]]
    _totals_from_steps(run)
    known = [c for c in costs if c is not None]
    run.cost_usd = None if not costs or len(known) < len(costs) else float(sum(known))
    return run


# ---- Gemini CLI ---------------------------------------------------------------------------
def read_gemini(stdout: str, session_texts: Iterable[str] = ()) -> CliRun:
    """Read one ``gemini -p --output-format stream-json`` run and its chat session files.

    The turns come from the session files (``~/.gemini/tmp/<project>/chats/session-*.jsonl``:
    ``gemini`` entries with ``content``, ``toolCalls`` with their ``result``, and per-call
    ``tokens``; an entry is rewritten under the same ``id`` as it grows, the last copy wins),
    keeping only the entries of this invocation's session written at or after its ``init``
    event; stdout gives the session id, and the ``result`` event's ``stats`` the invocation's
    totals when the run finished.

    Args:
        stdout: the stream-json output of this invocation.
        session_texts: texts of the chat session files.

    Returns:
        The :class:`CliRun`.
    """
    run = CliRun()
    started: str | None = None
    result: dict[str, Any] | None = None
    for event in json_lines(stdout):
        if event.get("type") == "init":
            run.session_id = _str(event.get("session_id")) or run.session_id
            run.model_name = _str(event.get("model")) or run.model_name
            started = started or _str(event.get("timestamp"))
        elif event.get("type") == "result":
            result = event
    entries: dict[str, dict[str, Any]] = {}
    order: list[str] = []
    for text in session_texts:
        session_of_file: str | None = None
        for entry in json_lines(text):
            if isinstance(entry.get("sessionId"), str) and "type" not in entry:
                session_of_file = entry["sessionId"]
                continue
            if run.session_id and session_of_file and session_of_file != run.session_id:
                break
            if entry.get("type") != "gemini" or not isinstance(entry.get("id"), str):
                continue
            ts = _str(entry.get("timestamp"))
            if started and ts and ts < started:
                continue
            if entry["id"] not in entries:
                order.append(entry["id"])
            entries[entry["id"]] = entry
    for mid in order:
        entry = entries[mid]
        step = _agent_step(
            message=_text_of(entry.get("content")),
            timestamp=_str(entry.get("timestamp")),
            model_name=_str(entry.get("model")),
        )
        thoughts = entry.get("thoughts")
        if isinstance(thoughts, list) and thoughts:
            step["reasoning_content"] = (
                "\n".join(
                    str(t.get("description") or t.get("subject") or "") if isinstance(t, dict) else str(t)
                    for t in thoughts
                )
                or None
            )
        for call in entry.get("toolCalls") or []:
            if not isinstance(call, dict):
                continue
            cid = str(call.get("id") or "")
            step["tool_calls"].append(tool_call(cid, str(call.get("name") or ""), _args(call.get("args"))))
            outputs = []
            for res in call.get("result") or []:
                resp = res.get("functionResponse") if isinstance(res, dict) else None
                if isinstance(resp, dict):
                    body = resp.get("response")
                    outputs.append(
                        _text_of(body.get("output", body.get("error")))
                        if isinstance(body, dict)
                        else _text_of(body)
                    )
            if outputs:
                _add_result([step], cid, "\n".join(outputs))
        tokens = entry.get("tokens") if isinstance(entry.get("tokens"), dict) else None
        if tokens is not None:
            step["metrics"] = step_metrics(
                _int(tokens.get("input")), _int(tokens.get("output")), _int(tokens.get("cached")), None
            )
        run.steps.append(step)
    _totals_from_steps(run)
    if result is not None:
        stats = _dict(result.get("stats"))
        if not run.has_tokens:
            run.prompt_tokens = _int(stats.get("input_tokens"))
            run.completion_tokens = _int(stats.get("output_tokens"))
            run.cached_tokens = _int(stats.get("cached"))
        run.is_error = result.get("status") not in (None, "success")
        run.extra = {"status": result.get("status")} if isinstance(result.get("status"), str) else {}
    else:
        run.extra = {"finished": False}
    return run


# ---- Qwen Code ----------------------------------------------------------------------------
def read_qwen(stdout: str) -> CliRun:
    """Read one ``qwen -o stream-json`` run (Claude-Code-shaped events, OpenAI usage).

    Qwen Code prints each content block of a model call as its own ``assistant`` event with its
    own id, the call's final usage on the last one (``input_tokens`` *includes*
    ``cache_read_input_tokens``, unlike Claude Code's); consecutive ``assistant`` events with no
    tool result between them are one model call and become one ATIF step.

    Args:
        stdout: the stream-json output of this invocation.

    Returns:
        The :class:`CliRun`.
    """
    run = CliRun()
    current: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    for event in json_lines(stdout):
        kind = event.get("type")
        if kind == "system" and event.get("subtype") == "init":
            run.session_id = _str(event.get("session_id")) or run.session_id
            run.model_name = _str(event.get("model")) or run.model_name
        elif kind == "assistant" and isinstance(event.get("message"), dict):
            if event.get("parent_tool_use_id"):
                continue
            msg = event["message"]
            if current is None:
                current = _agent_step(model_name=_str(msg.get("model")))
                run.steps.append(current)
            _add_blocks(current, msg.get("content"))
            usage = _dict(msg.get("usage"))
            prompt, out = _int(usage.get("input_tokens")), _int(usage.get("output_tokens"))
            if prompt or out:
                current["metrics"] = step_metrics(
                    prompt, out, _int(usage.get("cache_read_input_tokens")), None
                )
        elif kind == "user" and isinstance(event.get("message"), dict):
            _add_tool_results(run.steps, event["message"].get("content"))
            current = None
        elif kind == "result":
            result = event
    _totals_from_steps(run)
    if result is not None:
        run.session_id = _str(result.get("session_id")) or run.session_id
        run.is_error = result.get("is_error") if isinstance(result.get("is_error"), bool) else None
        if not run.has_tokens and isinstance(result.get("usage"), dict):
            usage = result["usage"]
            run.prompt_tokens = _int(usage.get("input_tokens"))
            run.completion_tokens = _int(usage.get("output_tokens"))
            run.cached_tokens = _int(usage.get("cache_read_input_tokens"))
        run.extra = {
            k: result.get(k) for k in ("num_turns", "subtype") if isinstance(result.get(k), (str, int))
        }
    else:
        run.extra = {"finished": False}
    return run


# ---- aider ----------------------------------------------------------------------------------
def read_aider(llm_history: str, analytics: str, stdout: str = "") -> CliRun:
    """Read one ``aider --message`` run.

    Aider has no tool calls: the model answers with file listings or edit blocks that aider
    applies itself. One ATIF step per model call: its text from ``--llm-history-file`` (the
    ``LLM RESPONSE`` blocks, each line prefixed ``ASSISTANT``), its tokens and cost from the
    ``message_send`` events of ``--analytics-log`` (in call order). Aider does not report
    cached tokens for OpenAI-style usage, so they are ``None``; a cost of 0 (a model without a
    price) is ``None``. The files aider says it edited (``Applied edit to PATH`` on stdout) go
    to ``extra.applied_edits``.

    Args:
        llm_history: the ``--llm-history-file`` text of this invocation.
        analytics: the ``--analytics-log`` JSON lines of this invocation.
        stdout: aider's stdout.

    Returns:
        The :class:`CliRun`.
    """
    run = CliRun()
    replies: list[tuple[str | None, str]] = []
    current: list[str] | None = None
    stamp: str | None = None
    for line in llm_history.splitlines():
        if line.startswith("LLM RESPONSE "):
            if current is not None:
                replies.append((stamp, "\n".join(current)))
            current, stamp = [], line[len("LLM RESPONSE ") :].strip() or None
        elif line.startswith("TO LLM "):
            if current is not None:
                replies.append((stamp, "\n".join(current)))
            current = None
        elif current is not None and line.startswith("ASSISTANT"):
            current.append(line[len("ASSISTANT ") :] if line.startswith("ASSISTANT ") else "")
    if current is not None:
        replies.append((stamp, "\n".join(current)))
    sends = [_dict(e.get("properties")) for e in json_lines(analytics) if e.get("event") == "message_send"]
    for event in json_lines(analytics):
        if event.get("event") == "exit":
            run.extra["exit_reason"] = _str(_dict(event.get("properties")).get("reason"))
    for i in range(max(len(replies), len(sends))):
        stamp, text = replies[i] if i < len(replies) else (None, "")
        step = _agent_step(
            message=text.strip("\n"), timestamp=(stamp + "Z") if stamp and len(stamp) == 19 else stamp
        )
        if i < len(sends):
            props = sends[i]
            cost = _num(props.get("cost"))
            step["metrics"] = step_metrics(
                _int(props.get("prompt_tokens")),
                _int(props.get("completion_tokens")),
                None,
                cost if cost else None,
            )
        run.steps.append(step)
    _totals_from_steps(run)
    costs = [s["metrics"]["cost_usd"] for s in run.steps if s.get("metrics")]
    run.cost_usd = float(sum(costs)) if costs and all(c is not None for c in costs) else None
    edits = [
        line.split("Applied edit to ", 1)[1].strip()
        for line in stdout.splitlines()
        if line.startswith("Applied edit to ")
    ]
    if edits:
        run.extra["applied_edits"] = edits[:1000]
    if "exit_reason" not in run.extra:
        run.extra["finished"] = False
    return run


# ---- mini-swe-agent -------------------------------------------------------------------------
def read_mini(traj_text: str) -> CliRun:
    """Read one ``mini`` run from its trajectory file (``-o``, format ``mini-swe-agent-1.1``,
    rewritten after every model call, so a run cut off by the timeout keeps its turns).

    ``assistant`` messages are ATIF agent steps (text, ``bash`` tool calls, the model
    response's ``usage`` — ``prompt_tokens``, ``completion_tokens``,
    ``prompt_tokens_details.cached_tokens`` — and ``extra.cost``, ``None`` when 0: mini
    records 0 for a model without a price); the ``tool`` messages after them are the
    observations; the ``exit`` message gives ``extra.exit_status``.

    Args:
        traj_text: the trajectory JSON text.

    Returns:
        The :class:`CliRun` (empty when the file is missing or malformed).
    """
    run = CliRun()
    try:
        data = json.loads(traj_text) if traj_text.strip() else {}
    except ValueError:
        data = {}
    data = _dict(data)
    info = _dict(data.get("info"))
    raw = data.get("messages")
    messages: list[Any] = raw if isinstance(raw, list) else []
    costs: list[float | None] = []
    for msg in messages:
        if not isinstance(msg, dict):
            continue
        role = msg.get("role")
        extra = _dict(msg.get("extra"))
        if role == "assistant":
            ts = extra.get("timestamp")
            step = _agent_step(
                message=_text_of(msg.get("content")),
                timestamp=_ms_iso(ts * 1000) if isinstance(ts, (int, float)) else None,
            )
            for call in msg.get("tool_calls") or []:
                if not isinstance(call, dict):
                    continue
                fn = _dict(call.get("function"))
                step["tool_calls"].append(
                    tool_call(
                        str(call.get("id") or ""), str(fn.get("name") or ""), _args(fn.get("arguments"))
                    )
                )
            response = _dict(extra.get("response"))
            usage = _dict(response.get("usage"))
            step["model_name"] = _str(response.get("model"))
            run.model_name = run.model_name or step["model_name"]
            cost = _num(extra.get("cost"))
            costs.append(cost if cost else None)
            if usage:
                step["metrics"] = step_metrics(
                    _int(usage.get("prompt_tokens")),
                    _int(usage.get("completion_tokens")),
                    _int(_dict(usage.get("prompt_tokens_details")).get("cached_tokens")),
                    cost if cost else None,
                )
            run.steps.append(step)
        elif role == "tool":
            _add_result(run.steps, str(msg.get("tool_call_id") or ""), _text_of(msg.get("content")))
        elif role == "exit":
            run.extra["exit_status"] = _str(extra.get("exit_status"))
    _totals_from_steps(run)
    run.cost_usd = (
        float(sum(c for c in costs if c is not None)) if costs and all(c is not None for c in costs) else None
    )
    status = run.extra.get("exit_status") or _str(info.get("exit_status"))
    if status:
        run.extra["exit_status"] = status
        run.is_error = status not in ("Submitted",)
    else:
        run.extra["finished"] = False
    return run
