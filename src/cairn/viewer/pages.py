"""Page contexts: from :mod:`cairn.viewer.data` values to what each template shows.

Shared by the live server (:mod:`cairn.viewer.app`) and the static bundle
(:mod:`cairn.viewer.bundle`), so both show the same pages.
"""

from __future__ import annotations

from typing import Any

from cairn.results.model import JobSummary, Outcome
from cairn.viewer.data import (
    REFRESH_SEC,
    RUNNING,
    JobIndex,
    Library,
    TrialQuery,
    TrialView,
)
from cairn.viewer.render import Urls, fmt_num, fmt_pct, render_page

TRIAL_COLUMNS = [
    ("name", "trial"),
    ("task", "task"),
    ("attempt", "k"),
    ("outcome", "outcome"),
    ("reward", "reward"),
    ("ended_at", "stopped at"),
    ("steps_run", "steps"),
    ("error_kind", "error"),
    ("total_sec", "time"),
    ("tokens", "tokens"),
    ("cost_usd", "cost"),
]


def job_figures(s: JobSummary) -> list[tuple[str, str]]:
    """The job page's headline figures (label, value)."""
    figs = [
        ("trials", str(s.n_trials)),
        ("scored", str(s.n_scored)),
        ("mean reward", fmt_num(s.mean_reward)),
        ("mean, errors as 0", fmt_num(s.mean_reward_errors_as_zero)),
        ("mean over all steps", fmt_num(s.reward_all_steps_mean)),
        ("pass rate", f"{fmt_pct(s.pass_rate)} ({s.n_passed})"),
        ("errored", str(s.outcomes.get(Outcome.ERRORED, 0))),
    ]
    if s.tokens.prompt or s.tokens.completion:
        figs.append(("tokens", f"{s.tokens.prompt + s.tokens.completion}"))
    if s.cost_usd is not None:
        figs.append(("cost", f"${s.cost_usd:.4f}"))
    if s.timings.total_sec_mean is not None:
        figs.append(("mean trial time", f"{s.timings.total_sec_mean:.1f} s"))
    return figs


def render_jobs(lib: Library, u: Urls, *, bundle: bool = False, poll: str | None = None) -> str:
    """The jobs page."""
    return render_page("jobs.html", u=u, bundle=bundle, poll=poll, cards=lib.cards(), root=str(lib.root))


def render_job(
    job: JobIndex, q: TrialQuery, u: Urls, *, single: bool, bundle: bool = False, poll: str | None = None
) -> str:
    """A job page: figures, funnel, distribution, outcomes, one page of the trials table.

    Args:
        job: the job.
        q: the trials query (the bundle passes one page holding every trial).
        u: the URL builder.
        single: the viewer serves only this job (no jobs link).
        bundle: render for the static bundle.
        poll: the version URL for live updates.
    """
    job.refresh(0.0 if bundle else REFRESH_SEC)
    summary = job.summary()
    page = job.query(q)
    facets = job.facets()
    options = {
        "tasks": facets["tasks"],
        "errors": facets["errors"],
        "steps": facets["steps"],
        "outcomes": [o.value for o in Outcome] + ["passed", "failed", RUNNING],
    }
    return render_page(
        "job.html",
        u=u,
        bundle=bundle,
        poll=poll,
        job=job.name,
        meta=job.meta(),
        summary=summary,
        figures=job_figures(summary),
        page=page,
        q=page.query,
        options=options,
        columns=TRIAL_COLUMNS,
        n_rows=facets["n_rows"],
        n_running=facets["n_running"],
        histogram=facets["histogram"],
        single=single,
    )


_PHASE_WORDS = {"agent_setup": "agent setup", "pre_artifacts": "pre_artifacts.sh"}
_PHASE_SHORT = {"healthcheck": "health", "pre_artifacts": "pre", "artifacts": "art", "verifier": "verify"}


def timeline_segments(t: TrialView) -> list[dict[str, Any]]:
    """The trial timeline: the trial's own phases (environment, healthcheck, agent setup), then
    each step's setup, healthcheck, agent, pre_artifacts.sh, artifacts and verifier phases.

    Results that record ``timings.spans`` place every bar at its real start, so gaps are
    engine work between phases; older results (durations only) are laid end to end.

    Returns:
        ``[{phase, step, label, short, start, end, sec, lane, exact}]``, in seconds from the
        trial's start; lane 0 is the trial, lane 1 the steps; ``exact`` says the bars stand
        at recorded offsets.
    """
    trial_spans = list(t.result.timings.spans) if t.result is not None else []
    step_spans = [(s.row, list(s.row.timings.spans)) for s in t.steps]
    starts = [sp.started_at for sp in trial_spans] + [
        sp.started_at for _, spans in step_spans for sp in spans
    ]
    if not starts:
        return _laid_end_to_end(t)
    origin = min(starts + ([t.result.started_at] if t.result is not None else []))
    segs: list[dict[str, Any]] = []

    def add(sp: Any, step: str | None, label: str, short: str, lane: int) -> None:
        start = (sp.started_at - origin).total_seconds()
        sec = (sp.finished_at - sp.started_at).total_seconds()
        segs.append(
            {
                "phase": sp.phase,
                "step": step,
                "label": label,
                "short": short,
                "start": start,
                "end": start + sec,
                "sec": sec,
                "lane": lane,
                "exact": True,
            }
        )

    for sp in trial_spans:
        word = _PHASE_WORDS.get(sp.phase, sp.phase)
        add(sp, None, "environment healthcheck" if sp.phase == "healthcheck" else word, "", 0)
    for row, spans in step_spans:
        for sp in spans:
            word = _PHASE_WORDS.get(sp.phase, sp.phase)
            add(
                sp,
                row.name,
                f"step {row.index} {row.name}: {word}",
                f"{row.index}·{_PHASE_SHORT.get(sp.phase, sp.phase)}",
                1,
            )
    return segs


def _laid_end_to_end(t: TrialView) -> list[dict[str, Any]]:
    """The timeline of a result without spans: recorded durations laid end to end."""
    segs: list[dict[str, Any]] = []
    clock = 0.0
    if t.result is not None:
        tt = t.result.timings
        for phase, sec, label in (
            ("environment", tt.environment_sec, "environment"),
            ("healthcheck", tt.healthcheck_sec, "environment healthcheck"),
            ("agent_setup", tt.agent_setup_sec, "agent setup"),
        ):
            if sec:
                segs.append(
                    {
                        "phase": phase,
                        "step": None,
                        "label": label,
                        "short": "",
                        "start": clock,
                        "end": clock + sec,
                        "sec": sec,
                        "lane": 0,
                        "exact": False,
                    }
                )
                clock += sec
    for s in t.steps:
        tm = s.row.timings
        for phase, sec in (
            ("setup", tm.setup_sec),
            ("healthcheck", tm.healthcheck_sec),
            ("agent", tm.agent_sec),
            ("artifacts", tm.artifacts_sec),
            ("verifier", tm.verifier_sec),
        ):
            if sec is None:
                continue
            segs.append(
                {
                    "phase": phase,
                    "step": s.row.name,
                    "label": f"step {s.row.index} {s.row.name}: {phase}",
                    "short": f"{s.row.index}·{phase}",
                    "start": clock,
                    "end": clock + sec,
                    "sec": sec,
                    "lane": 1,
                    "exact": False,
                }
            )
            clock += sec
    return segs


def render_trial(
    t: TrialView, u: Urls, *, single: bool, bundle: bool = False, poll: str | None = None
) -> str:
    """A trial page."""
    return render_page(
        "trial.html", u=u, bundle=bundle, poll=poll, t=t, single=single, segments=timeline_segments(t)
    )


def _delta(a: float | None, b: float | None, digits: int = 2) -> str:
    if a is None or b is None:
        return ""
    return f"{b - a:+.{digits}f}"


def _cls(d: str) -> str:
    if not d or float(d) == 0:
        return ""
    return "up" if d.startswith("+") else "down"


def compare_context(a: JobSummary, b: JobSummary) -> dict[str, Any]:
    """Two jobs side by side: headline figures and, per task and per step, reward and pass
    deltas (B − A).

    Returns:
        ``{head: [(label, A, B, Δ)], rows: [...]}``; tasks and steps of either job appear
        (a side without them shows ``–``).
    """
    head = [
        ("trials", str(a.n_trials), str(b.n_trials), f"{b.n_trials - a.n_trials:+d}"),
        ("mean reward", fmt_num(a.mean_reward), fmt_num(b.mean_reward), _delta(a.mean_reward, b.mean_reward)),
        (
            "mean, errors as 0",
            fmt_num(a.mean_reward_errors_as_zero),
            fmt_num(b.mean_reward_errors_as_zero),
            _delta(a.mean_reward_errors_as_zero, b.mean_reward_errors_as_zero),
        ),
        ("pass rate", fmt_pct(a.pass_rate), fmt_pct(b.pass_rate), _delta(a.pass_rate, b.pass_rate)),
        (
            "errored",
            str(a.outcomes.get(Outcome.ERRORED, 0)),
            str(b.outcomes.get(Outcome.ERRORED, 0)),
            f"{b.outcomes.get(Outcome.ERRORED, 0) - a.outcomes.get(Outcome.ERRORED, 0):+d}",
        ),
    ]
    ta = {t.name: t for t in a.tasks}
    tb = {t.name: t for t in b.tasks}
    rows = []
    for name in list(ta) + [n for n in tb if n not in ta]:
        x, y = ta.get(name), tb.get(name)
        dr = _delta(x.mean_reward if x else None, y.mean_reward if y else None)
        dp = _delta(x.pass_rate if x else None, y.pass_rate if y else None)
        rows.append(
            {
                "task": name,
                "step": None,
                "ra": x.mean_reward if x else None,
                "rb": y.mean_reward if y else None,
                "dr": dr,
                "dr_class": _cls(dr),
                "pa": f"{x.n_passed}/{x.n_scored}" if x else "–",
                "pb": f"{y.n_passed}/{y.n_scored}" if y else "–",
                "dp": dp,
                "dp_class": _cls(dp),
            }
        )
        sa = {s.name: s for s in (x.steps if x else [])}
        sb = {s.name: s for s in (y.steps if y else [])}
        for sname in list(sa) + [n for n in sb if n not in sa]:
            p, q = sa.get(sname), sb.get(sname)
            rate_p = p.n_passed / p.n_reached if p and p.n_reached else None
            rate_q = q.n_passed / q.n_reached if q and q.n_reached else None
            dr = _delta(p.mean_reward if p else None, q.mean_reward if q else None)
            dp = _delta(rate_p, rate_q)
            rows.append(
                {
                    "task": name,
                    "step": sname,
                    "ra": p.mean_reward if p else None,
                    "rb": q.mean_reward if q else None,
                    "dr": dr,
                    "dr_class": _cls(dr),
                    "pa": f"{p.n_passed}/{p.n_reached}" if p else "–",
                    "pb": f"{q.n_passed}/{q.n_reached}" if q else "–",
                    "dp": dp,
                    "dp_class": _cls(dp),
                }
            )
    return {"head": head, "rows": rows}


def render_compare(a: JobIndex, b: JobIndex, u: Urls) -> str:
    """The compare page of two jobs."""
    return render_page(
        "compare.html", u=u, bundle=False, a=a.name, b=b.name, **compare_context(a.summary(), b.summary())
    )
