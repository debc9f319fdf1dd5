"""The one-line verdict a finished trial prints (design §9): what ran and what stopped it.

Examples::

    PASS reward=1.00 (mean of 2 steps) in 6.4 s
    FAIL reward=0.00 (mean of 1 steps) in 3.0 s
    STOPPED after step 2/5 diagnose: reward 0.00 < min_reward 1.0 (mean 0.50 over 2 of 5 steps run) in 9.1 s
    ERRORED at step 2/3 build: build_failed: docker build failed … (1 of 3 steps run) in 4.2 s

An errored or cancelled trial never shows a reward: a mean over the steps that happened to run
would read as a score of the trial.
"""

from __future__ import annotations

from cairn.results.model import ErrorInfo, Outcome, StopReason, TrialResult


def _num(v: float) -> str:
    return str(float(v))  # as a task author writes it: 1.0, 0.5


def _stop_text(stop: StopReason) -> str:
    if stop.kind == "min_reward":
        key = "reward" if stop.key in (None, "reward") else f"reward.{stop.key}"
        gate = "min_reward" if stop.key in (None, "reward") else f"min_reward.{stop.key}"
        threshold = _num(stop.threshold) if stop.threshold is not None else "?"
        if stop.value is None:
            return f"{key} missing (counts as -inf) < {gate} {threshold}"
        return f"{key} {stop.value:.2f} < {gate} {threshold}"
    kind = stop.error_kind.value if stop.error_kind is not None else "error"
    return f"step error {kind}"


def _step_pos(result: TrialResult, name: str | None) -> str:
    """``step k/n NAME``: the step's index in the task over the task's declared steps (under
    ``--start-step`` too, as the per-step lines number them; issue 27)."""
    n = len(result.steps) or result.steps_total
    for row in result.steps:
        if row.name == name:
            return f"step {row.index}/{n} {row.name}"
    return f"step ?/{n} {name}" if name else ""


def _run_of(result: TrialResult) -> str:
    """``k of n steps run``; under ``--start-step`` n counts the steps from the start step
    (the earlier ones were replayed, never scored), and the line says so."""
    start = f" from {result.start_step}" if result.start_step else ""
    return f"{result.steps_run} of {result.steps_total} steps run{start}"


LOG_TAIL_LINES = 8
"""Build or service log lines an errored trial's verdict shows below it, at most."""
LOG_TAIL_WIDTH = 200
"""Characters of each such line shown, at most."""

_TAIL_KINDS = ("build_failed", "build_timeout", "image_not_found", "service_exited", "start_failed")


def _log_tail(err: ErrorInfo | None) -> str:
    """The last lines of a failed build's (or service's) log, indented under the verdict, so
    the cause (``/bin/sh: 1: pip: not found``) is on the terminal, not only in result.json
    (issue 27). Bounded to :data:`LOG_TAIL_LINES` lines of :data:`LOG_TAIL_WIDTH` characters;
    control characters are dropped (the log is the task's and the engine's output)."""
    if err is None or err.kind.value not in _TAIL_KINDS:
        return ""
    tail = err.detail.get("log_tail") if isinstance(err.detail, dict) else None
    if not isinstance(tail, str) or not tail.strip():
        return ""
    first = err.message.splitlines()[0] if err.message else ""
    lines = []
    for raw in tail.splitlines():
        line = "".join(c for c in raw if c == "\t" or c.isprintable()).rstrip()
        if line.strip() and line.strip() != first.strip():
            lines.append(line[:LOG_TAIL_WIDTH] + ("…" if len(line) > LOG_TAIL_WIDTH else ""))
    lines = lines[-LOG_TAIL_LINES:]
    if not lines:
        return ""
    return f"\n  log (last {len(lines)} lines):" + "".join(f"\n  | {x}" for x in lines)


def verdict_line(result: TrialResult) -> str:
    """The verdict line of a finished trial.

    Args:
        result: the trial's result.

    Returns:
        ``PASS``/``FAIL`` with the reward and strategy; ``STOPPED after step k/n NAME: why``
        with the reward over the steps run; ``ERRORED``/``CANCELLED`` with where and why and
        how many steps ran, never a reward; a failed build (or service) adds the last lines
        of its log below, indented (``  | …``).
    """
    took = f" in {result.timings.total_sec:.1f} s" if result.timings.total_sec is not None else ""
    run_of = _run_of(result)
    if result.outcome in (Outcome.ERRORED, Outcome.CANCELLED):
        label = result.outcome.value.upper()
        err = result.error
        where = _step_pos(result, err.step) if err is not None else ""
        head = f"{label} at {where}" if where else label
        why = ""
        if err is not None:
            first = err.message.splitlines()[0][:300] if err.message else ""
            why = f": {err.kind.value}" + (f": {first}" if first else "")
        return f"{head}{why} ({run_of}){took}" + _log_tail(err)
    r = f"{result.reward:.2f}" if result.reward is not None else "none"
    if result.outcome is Outcome.STOPPED:
        where = _step_pos(
            result, result.stopped_after or (result.stop_reason.step if result.stop_reason else None)
        )
        why = f": {_stop_text(result.stop_reason)}" if result.stop_reason is not None else ""
        return f"STOPPED after {where}{why} ({result.strategy} {r} over {run_of}){took}"
    verdict = "PASS" if result.passed else "FAIL"
    how = f"{result.strategy} of {result.steps_total} steps"
    if result.steps_run < result.steps_total:
        how = f"{result.strategy} of {run_of}"
    return f"{verdict} reward={r} ({how}){took}"


__all__ = ["verdict_line"]
