"""Render a job summary as text, markdown or JSON (design §9 ``cairn report``).

Reads only what :mod:`cairn.results.store` wrote (through :func:`cairn.job.read_job`), so it works on
job folders copied from elsewhere. The per (task, step) rows are the "where do agents stop"
view: how many scored trials reached each step, passed it, and stopped or errored there.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from cairn._util.text import printable
from cairn.results.model import JobSummary, Outcome, TrialResult
from cairn.results.model_calls import CallSums, JobCallSums, job_call_sums

if TYPE_CHECKING:  # pragma: no cover
    from cairn.job.run import JobResult


def _f(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _counts(items: Mapping[Any, int]) -> str:
    return ", ".join(f"{getattr(k, 'value', k)} {v}" for k, v in items.items() if v)


def key_rows(summary: JobSummary, results: Sequence[TrialResult] = ()) -> list[tuple[str, str]]:
    """Per reward key, a row that cannot be read as a pass rate (issue 27): which steps report
    the key, the mean over those steps' values, and the per-trial mean with the steps that do
    not report it counted as 0 (what summary.json's ``rewards[key]`` holds), each named.

    The ``reward`` key is labelled the primary reward. Without ``results`` (a summary read
    alone) only the named per-trial mean is shown.

    Args:
        summary: the job summary.
        results: the job's trials (their step rows tell which steps report a key).

    Returns:
        ``(label, value)`` pairs, one per key, in the summary's order.
    """
    from cairn.results.model import StepSource

    rows = []
    for key, stat in summary.rewards.items():
        steps: dict[str, None] = {}
        declared: dict[str, None] = {}
        values: list[float] = []
        for r in results:
            if r.rewards is None or key not in r.rewards:
                continue  # not one of the trials the per-trial mean counts
            for row in r.steps:
                if row.source in (StepSource.ORACLE, StepSource.NOT_RUN):
                    continue  # replayed (never scored) or never reached
                declared[row.name] = None
                v = (row.rewards or {}).get(key)
                if v is not None:
                    steps[row.name] = None
                    values.append(v)
        label = "reward (primary)" if key == "reward" else f"reward[{key}]"
        trial_mean = (
            f"per-trial mean {_f(stat.mean)}, missing steps as 0 (n={stat.n} trials)"
            if len(steps) < len(declared) or not results
            else f"per-trial mean {_f(stat.mean)} (n={stat.n} trials)"
        )
        if not results or not values:
            rows.append((label, trial_mean))
            continue
        which = ", ".join(steps) if len(steps) <= 4 else f"{', '.join(list(steps)[:4])}, …"
        rows.append(
            (
                label,
                f"reported by {len(steps)} of {len(declared)} step(s) ({which}); "
                f"mean over those {_f(sum(values) / len(values))}; {trial_mean}",
            )
        )
    return rows


def summary_rows(
    summary: JobSummary, stopped_by: str | None = None, results: Sequence[TrialResult] = ()
) -> list[tuple[str, str]]:
    """The headline figures as (label, value) pairs.

    Args:
        summary: the job summary.
        stopped_by: why the job stopped early, if it did.
        results: the job's trials, for the per-key rows (:func:`key_rows`).
    """
    s = summary
    rows = [
        ("trials", f"{s.n_trials} ({_counts(s.outcomes) or 'none'})"),
        ("scored", str(s.n_scored)),
        ("mean reward", f"{_f(s.mean_reward)} over {s.n_scored - s.n_no_reward} scored trials"),
        ("mean, errors as 0", _f(s.mean_reward_errors_as_zero)),
        ("mean over all steps", _f(s.reward_all_steps_mean)),
        ("pass rate", f"{_f(s.pass_rate)} ({s.n_passed} passed)"),
    ]
    if s.pass_at_k:
        rows.append(("pass@k", ", ".join(f"@{k} {_f(v)}" for k, v in s.pass_at_k.items())))
    if s.errors:
        rows.append(("errors", _counts(s.errors)))
    if s.error_categories:
        rows.append(("error categories", _counts(s.error_categories)))
    rows += key_rows(s, results)
    if s.tokens.prompt or s.tokens.completion:
        rows.append(
            (
                "tokens",
                f"prompt {s.tokens.prompt}, completion {s.tokens.completion}, "
                "cached " + ("not reported" if s.tokens.cached is None else str(s.tokens.cached)),
            )
        )
    if s.cost_usd is not None:
        rows.append(("cost", f"${s.cost_usd:.4f}"))
    if s.judge is not None:  # an LLM judge's spend, apart from the agents'
        j = s.judge
        rows.append(
            (
                "judge",
                f"{j.calls} call(s), prompt {j.tokens.prompt}, completion "
                f"{j.tokens.completion}" + (f", ${j.cost_usd:.4f}" if j.cost_usd is not None else ""),
            )
        )
    if s.timings.total_sec_mean is not None:
        rows.append(
            ("trial time", f"mean {s.timings.total_sec_mean:.1f} s, sum {s.timings.total_sec_sum:.1f} s")
        )
    if stopped_by:
        rows.append(("stopped early", stopped_by))
    return rows


def source_rows(results: Sequence[TrialResult]) -> list[tuple[str, str]]:
    """Where the tasks came from: one ``("source", …)`` row per (dataset, repository,
    commit), with its task count; none for tasks run from local folders.

    Example value: ``demo@1.0 from https://…/registry.json: git://…/tasks.git @ 7cdbc59f3a0d
    (2 tasks)``.
    """
    tasks: dict[tuple[str | None, ...], set[str]] = {}
    for r in results:
        s = r.task.source
        if s is None:
            continue
        key = (s.dataset, s.dataset_version, s.registry, s.git_url, s.git_ref, s.commit)
        tasks.setdefault(key, set()).add(r.task.name)
    rows = []
    for (ds, version, registry, url, ref, commit), names in tasks.items():
        parts = []
        if ds:
            parts.append(f"{ds}@{version} from {registry}")
        if url:
            parts.append(f"{url} @ {(commit or '?')[:12]}" + (f" ({ref})" if ref else ""))
        n = len(names)
        rows.append(("source", ": ".join(parts) + f" ({n} task{'s' if n != 1 else ''})"))
    return rows


def _ends_by_step(results: Sequence[TrialResult]) -> dict[tuple[str, str], Counter[str]]:
    """(task, step) → how many trials stopped / errored at that step (a partial regrade: the
    step it could not reach, which never ran in the recorded trial; issue 27)."""
    ends: dict[tuple[str, str], Counter[str]] = {}
    for r in results:
        if (
            r.regrade is not None and r.regrade.status == "regrade_partial" and r.regrade.unreached_step
        ):  # the old stop is gone: the regrade ran out of steps
            ends.setdefault((r.task.name, r.regrade.unreached_step), Counter())[
                "regrade could not reach"
            ] += 1
        elif r.outcome is Outcome.STOPPED and r.stopped_after:
            ends.setdefault((r.task.name, r.stopped_after), Counter())["stopped"] += 1
        elif r.outcome is Outcome.ERRORED and r.error is not None and r.error.step:
            ends.setdefault((r.task.name, r.error.step), Counter())["errored"] += 1
    return ends


def task_rows(summary: JobSummary, results: Sequence[TrialResult] = ()) -> list[list[str]]:
    """Per task, then per step of multi-step tasks: name, n, reward, passed, outcomes.

    Task rows count trials; step rows count the scored trials that reached the step, how
    many passed it, and how many stopped (or errored) there.
    """
    ends = _ends_by_step(results)
    rows: list[list[str]] = []
    for t in summary.tasks:
        rows.append(
            [t.name, str(t.n_trials), _f(t.mean_reward), f"{t.n_passed}/{t.n_scored}", _counts(t.outcomes)]
        )
        if len(t.steps) > 1:
            for st in t.steps:
                here = ends.get((t.name, st.name), Counter())
                notes = {(k if k.startswith("regrade") else f"{k} here"): v for k, v in sorted(here.items())}
                if st.n_replayed:
                    notes["replayed by oracle (not scored)"] = st.n_replayed
                rows.append(
                    [
                        f"  {st.index}. {st.name}",
                        str(st.n_reached),
                        _f(st.mean_reward),
                        f"{st.n_passed}/{st.n_reached}",
                        _counts(notes),
                    ]
                )
    return rows


HEAD = ["task / step", "n", "reward", "passed", "outcomes"]
NET_HEAD = ["trial", "step", "denied", "allowed", "denied hosts"]


def network_rows(results: Sequence[TrialResult]) -> list[list[str]]:
    """Per trial and step with a filtered network: connection attempts denied and allowed by
    the egress gateway, and the first hosts denied (from ``steps[].network``, which the store
    wrote from ``network.jsonl``). Steps with denials come first, most denials first.
    """
    rows: list[tuple[int, list[str]]] = []
    for r in results:
        for st in r.steps:
            if st.network is None:
                continue
            rows.append(
                (
                    st.network.denied,
                    [
                        r.trial_name,
                        f"{st.index}. {st.name}",
                        str(st.network.denied),
                        str(st.network.allowed),
                        ", ".join(st.network.denied_hosts),
                    ],
                )
            )
    rows.sort(key=lambda item: -item[0])
    return [row for _, row in rows]


SURVIVOR_HEAD = ["trial", "step", "pid", "user", "before the verifier", "command"]


def survivor_rows(results: Sequence[TrialResult]) -> list[list[str]]:
    """Per process an agent phase left running (``steps[].survivors``, issue #29): the trial,
    the step, pid, user, whether it was killed before the verifier or ran into it, and its
    command line (escaped again here: result.json may come from elsewhere)."""
    rows: list[list[str]] = []
    for r in sorted(results, key=lambda r: r.trial_name):
        for st in r.steps:
            fate = "killed" if st.survivors_killed else "ran into it"
            for sv in st.survivors:
                user = sv.user or (str(sv.uid) if sv.uid is not None else "?")
                rows.append(
                    [
                        r.trial_name,
                        f"{st.index}. {st.name}",
                        str(sv.pid),
                        printable(user, 64),
                        fate,
                        printable(sv.cmdline, 120),
                    ]
                )
            if st.survivors_total > len(st.survivors):
                rows.append(
                    [
                        r.trial_name,
                        f"{st.index}. {st.name}",
                        "",
                        "",
                        fate,
                        f"(+{st.survivors_total - len(st.survivors)} more)",
                    ]
                )
    return rows


REGRADE_HEAD = ["trial / step", "old reward", "new reward", "how"]


def regrade_rows(results: Sequence[TrialResult]) -> list[list[str]]:
    """Old and new reward side by side, per trial then per step, for the trials of a job made
    by ``cairn regrade`` (empty for other jobs)."""
    rows: list[list[str]] = []
    for r in sorted(results, key=lambda r: r.trial_name):
        g = r.regrade
        if g is None:
            continue
        status = g.status + (f" (could not reach {g.unreached_step})" if g.unreached_step else "")
        rows.append([r.trial_name, _f(g.old_reward), _f(r.reward), status])
        for st in g.steps:
            rows.append([f"  {st.index}. {st.name}", _f(st.old_reward), _f(st.new_reward), st.how])
    return rows


CALLS_HEAD = [
    "trial / step",
    "calls",
    "errors",
    "retries",
    "input",
    "output",
    "cache read",
    "cache write",
    "reasoning",
    "cost",
    "spend from",
]


def _n(x: int | None) -> str:
    """A token count; ``?`` when unknown (never a made-up 0)."""
    return "?" if x is None else str(x)


def _usd(x: float | None) -> str:
    return "?" if x is None else f"${x:.6f}"


def _sums_cells(s: CallSums) -> list[str]:
    return [
        str(s.calls),
        str(s.errors),
        str(s.retries),
        _n(s.input_tokens),
        _n(s.output_tokens),
        _n(s.cache_read_tokens),
        _n(s.cache_write_tokens),
        _n(s.reasoning_tokens),
        _usd(s.cost_usd),
    ]


def _notes(s: CallSums) -> str:
    notes = []
    if s.refused:
        notes.append(f"{s.refused} refused by budget")
    if s.incomplete:
        notes.append(f"{s.incomplete} incomplete")
    if s.unreadable:
        notes.append(f"{s.unreadable} unreadable line(s) skipped")
    return ("; " + ", ".join(notes)) if notes else ""


def call_rows(calls: JobCallSums) -> list[list[str]]:
    """Per model-driven trial, then per step: the relay's record of its model calls summed
    (count, errors, retries, tokens by kind, cost); a trial without a record (``--no-relay``,
    an agent not on the relay) shows the spend its agent reported, with ``-`` in the call
    columns (no calls were recorded: not zero). Trials of agents with no model are left out.

    Args:
        calls: :func:`cairn.results.model_calls.job_call_sums` of the job.

    Returns:
        Rows of :data:`CALLS_HEAD`'s columns.
    """
    rows: list[list[str]] = []
    for t in calls.trials:
        if t.record and t.sums is not None:
            rows.append([t.trial, *_sums_cells(t.sums), f"relay{_notes(t.sums)}"])
            for st in t.steps:
                label = f"  {st.index}. {st.name}"
                if st.sums is None:
                    rows.append([label, *["-"] * 9, "not run by the agent"])
                else:
                    rows.append([label, *_sums_cells(st.sums), f"relay{_notes(st.sums)}"])
        elif t.agent_tokens is not None:
            tok = t.agent_tokens
            rows.append(
                [
                    t.trial,
                    "-",
                    "-",
                    "-",
                    _n(tok.get("prompt")),
                    _n(tok.get("completion")),
                    _n(tok.get("cached")),
                    "-",
                    "-",
                    _usd(t.agent_cost_usd),
                    f"{t.spend_source} (its own report; no relay record)",
                ]
            )
    return rows


def call_summary_rows(calls: JobCallSums) -> list[tuple[str, str]]:
    """The job's totals of model calls as headline ``(label, value)`` rows: the relay's record,
    and apart from it the spend agents reported for trials without one."""
    rows: list[tuple[str, str]] = []
    t = calls.total
    if t is not None:
        rows.append(
            (
                "model calls",
                f"{t.calls} in {calls.recorded_trials} trial(s) (relay record): errors {t.errors}, "
                f"retries {t.retries}; input {_n(t.input_tokens)}, output {_n(t.output_tokens)}, "
                f"cache read {_n(t.cache_read_tokens)}, cache write {_n(t.cache_write_tokens)}, "
                f"reasoning {_n(t.reasoning_tokens)}; cost {_usd(t.cost_usd)}{_notes(t)}",
            )
        )
    if calls.agent_reported_trials and calls.agent_tokens is not None:
        a = calls.agent_tokens
        rows.append(
            (
                "agent-reported spend",
                f"{calls.agent_reported_trials} trial(s) without a relay record (spend_source agent): "
                f"prompt {_n(a.get('prompt'))}, completion {_n(a.get('completion'))}, "
                f"cached {_n(a.get('cached'))}; cost {_usd(calls.agent_cost_usd)}",
            )
        )
    return rows


def _table(head: list[str], rows: list[list[str]], fmt: str) -> list[str]:
    if fmt == "markdown":
        out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return out + ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    widths = [max(len(r[i]) for r in [*rows, head]) for i in range(len(head))]
    out = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip()]
    return out + ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def render(job: JobResult, fmt: str = "text") -> str:
    """Render a :class:`~cairn.job.JobResult` as ``text``, ``markdown`` or ``json``.

    Args:
        job: the job (its summary, results and stop reason).
        fmt: ``text`` (aligned columns), ``markdown`` (tables) or ``json`` (summary.json's
            content, plus ``model_calls``: :class:`~cairn.results.model_calls.JobCallSums`).

    Returns:
        The rendered report (no trailing newline).
    """
    summary: JobSummary = job.summary
    stopped_by = getattr(job, "stopped_by", None)
    results = getattr(job, "results", ())
    calls = job_call_sums(job.job_dir, results)
    if fmt == "json":
        return json.dumps(
            {**summary.model_dump(mode="json"), "model_calls": calls.model_dump(mode="json")}, indent=2
        )
    crows = call_rows(calls)
    rows = task_rows(summary, results)
    net = network_rows(results)
    head = summary_rows(summary, stopped_by, results) + source_rows(results) + call_summary_rows(calls)
    if net:
        head.append(
            (
                "network denied",
                f"{sum(int(r[2]) for r in net)} connection attempts "
                f"in {sum(1 for r in net if r[2] != '0')} steps",
            )
        )
    if fmt == "markdown":
        out = [f"# cairn job `{job.job_dir.name}`", "", "| | |", "|---|---|"]
        out += [f"| {k} | {v} |" for k, v in head]
        out += ["", "| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
        out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
        if net:
            out += ["", "| " + " | ".join(NET_HEAD) + " |", "|" + "---|" * len(NET_HEAD)]
            out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in net]
        if crows:
            out += ["", "## model calls", ""] + _table(CALLS_HEAD, crows, "markdown")
        survivors = survivor_rows(results)
        if survivors:
            out += ["", "## processes left running by agent phases", ""]
            out += _table(SURVIVOR_HEAD, survivors, "markdown")
        regrade = regrade_rows(getattr(job, "results", ()))
        if regrade:
            out += ["", "## regrade", ""] + _table(REGRADE_HEAD, regrade, "markdown")
        return "\n".join(out)
    width = max(len(k) for k, _ in head)
    out = [f"job {job.job_dir.name}"]
    out += [f"  {k.ljust(width)}  {v}" for k, v in head]
    if rows:
        widths = [max(len(r[i]) for r in [*rows, HEAD]) for i in range(len(HEAD))]
        out.append("")
        out.append("  ".join(h.ljust(w) for h, w in zip(HEAD, widths, strict=True)).rstrip())
        out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    if net:
        widths = [max(len(r[i]) for r in [*net, NET_HEAD]) for i in range(len(NET_HEAD))]
        out += ["", "network (egress gateway)"]
        out.append("  ".join(h.ljust(w) for h, w in zip(NET_HEAD, widths, strict=True)).rstrip())
        out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in net]
    if crows:
        out += ["", "model calls (the relay's record, docs/relay.md; tokens and cost over billed calls)"]
        out += _table(CALLS_HEAD, crows, "text")
    survivors = survivor_rows(results)
    if survivors:
        out += ["", "processes left running by agent phases (docs/guarantees.md)"]
        out += _table(SURVIVOR_HEAD, survivors, "text")
    regrade = regrade_rows(getattr(job, "results", ()))
    if regrade:
        out += ["", "regrade (old → new)"] + _table(REGRADE_HEAD, regrade, "text")
    return "\n".join(out)
