"""Render a job summary as text, markdown or JSON (SPEC §9 ``cairn report``).

Reads only what :mod:`cairn.store` wrote, so it works on job folders copied from elsewhere.
"""

from __future__ import annotations

import json

from cairn.results import JobSummary


def _f(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def summary_rows(summary: JobSummary) -> list[tuple[str, str]]:
    """The headline figures as (label, value) pairs."""
    s = summary
    outcomes = ", ".join(f"{k.value if hasattr(k, 'value') else k} {v}"
                         for k, v in s.outcomes.items() if v)
    errors = ", ".join(f"{k.value if hasattr(k, 'value') else k} {v}" for k, v in s.errors.items())
    rows = [
        ("trials", f"{s.n_trials} ({outcomes or 'none'})"),
        ("scored", str(s.n_scored)),
        ("mean reward", f"{_f(s.mean_reward)} over {s.n_scored - s.n_no_reward} scored trials"),
        ("mean, errors as 0", _f(s.mean_reward_errors_as_zero)),
        ("mean over all steps", _f(s.reward_all_steps_mean)),
        ("pass rate", f"{_f(s.pass_rate)} ({s.n_passed} passed)"),
    ]
    if s.pass_at_k:
        rows.append(("pass@k", ", ".join(f"@{k} {_f(v)}" for k, v in s.pass_at_k.items())))
    if errors:
        rows.append(("errors", errors))
    for key, stat in s.rewards.items():
        rows.append((f"reward[{key}]", f"{_f(stat.mean)} (n={stat.n})"))
    if s.tokens.prompt or s.tokens.completion:
        rows.append(("tokens", f"prompt {s.tokens.prompt}, completion {s.tokens.completion}, "
                               f"cached {s.tokens.cached}"))
    if s.cost_usd is not None:
        rows.append(("cost", f"${s.cost_usd:.4f}"))
    if s.timings.total_sec_mean is not None:
        rows.append(("trial time", f"mean {s.timings.total_sec_mean:.1f} s, "
                                   f"sum {s.timings.total_sec_sum:.1f} s"))
    return rows


def task_rows(summary: JobSummary) -> list[list[str]]:
    """Per task then per step rows: name, n, reward, passed, outcomes / reached."""
    rows: list[list[str]] = []
    for t in summary.tasks:
        outs = ", ".join(f"{k.value if hasattr(k, 'value') else k} {v}"
                         for k, v in t.outcomes.items() if v)
        rows.append([t.name, str(t.n_trials), _f(t.mean_reward), f"{t.n_passed}/{t.n_scored}",
                     outs])
        if len(t.steps) > 1 or (t.steps and t.steps[0].name != "main"):
            for st in t.steps:
                rows.append([f"  {st.index}. {st.name}", str(st.n_reached), _f(st.mean_reward),
                             f"{st.n_passed}/{st.n_reached}", f"reached {st.n_reached}"])
    return rows


def render(job, fmt: str = "text") -> str:
    """Render a :class:`~cairn.job.JobResult` (its summary) as ``text``, ``markdown`` or ``json``."""
    summary: JobSummary = job.summary
    if fmt == "json":
        return json.dumps(summary.model_dump(mode="json"), indent=2)
    head = ["task / step", "n", "reward", "passed", "outcomes"]
    rows = task_rows(summary)
    if fmt == "markdown":
        out = [f"# cairn job `{job.job_dir.name}`", "", "| | |", "|---|---|"]
        out += [f"| {k} | {v} |" for k, v in summary_rows(summary)]
        out += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        out += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(out)
    width = max([len(k) for k, _ in summary_rows(summary)] + [0])
    out = [f"job {job.job_dir.name}"]
    out += [f"  {k.ljust(width)}  {v}" for k, v in summary_rows(summary)]
    if rows:
        widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
        out.append("")
        out.append("  ".join(h.ljust(w) for h, w in zip(head, widths)))
        out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(out)
