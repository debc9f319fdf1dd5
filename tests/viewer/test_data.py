"""The viewer's read layer and pages without a browser: job folders written through the real
store (TrialStore, write_summary), safe paths, server-side filter/sort/paging, the summary it
shows, live rows from status.json, the bundle's CSP, and export marking replayed steps.
"""

from __future__ import annotations

import base64
import hashlib
import html as html_lib
import io
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

pytest.importorskip("jinja2")

from cairn.errors import Category, ErrorKind, Phase  # noqa: E402
from cairn.results.export import ExportFilter, export_job  # noqa: E402
from cairn.results.model import (  # noqa: E402
    AgentRef,
    ErrorInfo,
    JobMeta,
    Outcome,
    StepResult,
    StepSource,
    StopReason,
    TaskRef,
    TrialResult,
)
from cairn.results.store import JobPaths, TrialStore, write_job_json, write_summary  # noqa: E402
from cairn.results.summary import summarize_job  # noqa: E402
from cairn.viewer.bundle import write_bundle  # noqa: E402
from cairn.viewer.data import JobIndex, Library, TrialQuery, load_trial, safe_path  # noqa: E402

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def _result(
    i: int, task: str, outcome: Outcome, reward: float | None, *, steps=None, error=None, stopped_after=None
) -> TrialResult:
    steps = steps or [
        StepResult(
            index=1,
            name="main",
            source=StepSource.VERIFIER,
            reward=reward,
            rewards={"reward": reward} if reward is not None else None,
            passed=reward == 1.0,
        )
    ]
    return TrialResult(
        trial_id=f"{i:08x}" + "0" * 56,
        trial_name=f"{task}__1__{i:08x}",
        task=TaskRef(name=task, content_hash="h"),
        agent=AgentRef(name="oracle"),
        backend="local",
        outcome=outcome,
        error=error,
        reward=reward,
        rewards={"reward": reward} if reward is not None else None,
        passed=outcome is Outcome.COMPLETED and reward == 1.0,
        steps_total=len(steps),
        steps_run=sum(s.source is not StepSource.NOT_RUN for s in steps),
        steps=steps,
        stopped_after=stopped_after,
        stop_reason=StopReason(
            kind="min_reward", step=stopped_after, key="reward", value=reward, threshold=1.0
        )
        if stopped_after
        else None,
        started_at=NOW,
        finished_at=NOW,
    )


def _job(tmp_path: Path, results: list[TrialResult], name: str = "job") -> Path:
    job = tmp_path / name
    write_job_json(
        job,
        JobMeta(
            job_name=name,
            cairn_version="0.1.0",
            backend="local",
            config={"agent": "oracle", "model": None},
            started_at=NOW,
        ),
    )
    for r in results:
        store = TrialStore(JobPaths(job).trial(r.task.name, r.attempt, r.trial_id)).create()
        for s in r.steps:
            if s.source is not StepSource.NOT_RUN:
                store.step_dirs(s.index, s.name)
                store.write_instruction(s.index, s.name, f"do {s.name}")
        store.write_result(r)
    write_summary(job, summarize_job(results))
    return job


def test_safe_path_refuses_escapes(tmp_path):
    root = tmp_path / "job"
    (root / "a").mkdir(parents=True)
    (root / "a" / "f.txt").write_text("ok")
    (tmp_path / "outside.txt").write_text("no")
    (root / "a" / "link").symlink_to(tmp_path / "outside.txt")
    (root / "a" / "inlink").symlink_to(root / "a" / "f.txt")
    (root / "d").symlink_to(tmp_path)
    assert safe_path(root, "a/f.txt") == (root / "a" / "f.txt").resolve()
    for bad in (
        "../outside.txt",
        "a/../../outside.txt",
        "/etc/passwd",
        "a/link",
        "a/inlink",
        "d/outside.txt",
        "a",
        "",
        "a//f.txt",
        "./a/f.txt",
        "a\\f.txt",
        "a/f.txt\x00",
        "a/missing",
    ):
        assert safe_path(root, bad) is None, bad


def test_query_filters_sorts_and_pages_server_side(tmp_path):
    err = ErrorInfo(kind=ErrorKind.REWARD_MISSING, category=Category.TASK, phase=Phase.VERIFIER, step="main")
    results = [_result(i, f"t{i % 3}", Outcome.COMPLETED, (i % 5) / 4) for i in range(1, 22)]
    results.append(
        _result(
            500,
            "t0",
            Outcome.ERRORED,
            None,
            error=err,
            steps=[StepResult(index=1, name="main", source=StepSource.ERROR, error=err)],
        )
    )
    results.append(
        _result(
            501,
            "t1",
            Outcome.STOPPED,
            0.5,
            stopped_after="a",
            steps=[
                StepResult(
                    index=1, name="a", source=StepSource.VERIFIER, reward=0.5, rewards={"reward": 0.5}
                ),
                StepResult(index=2, name="b", source=StepSource.NOT_RUN),
            ],
        )
    )
    job = JobIndex(_job(tmp_path, results))
    page = job.query(TrialQuery(per_page=10))
    assert (page.total, page.pages, len(page.rows)) == (23, 3, 10)
    last = job.query(TrialQuery(per_page=10, page=99))
    assert last.query.page == 3 and len(last.rows) == 3
    top = job.query(TrialQuery(sort="reward", desc=True, per_page=5)).rows
    assert [r.reward for r in top] == [1.0, 1.0, 1.0, 1.0, 0.75]
    assert [r.name for r in job.query(TrialQuery(error="reward_missing")).rows] == ["t0__1__000001f4"]
    assert [r.name for r in job.query(TrialQuery(step="a")).rows] == ["t1__1__000001f5"]
    passed = job.query(TrialQuery(outcome="passed", task="t2", per_page=500))
    assert passed.total == sum(1 for r in results if r.passed and r.task.name == "t2")
    q = TrialQuery.from_params({"page": "x", "per_page": "100000", "sort": "evil", "desc": "1"})
    assert (q.page, q.per_page, q.sort, q.desc) == (1, 500, "name", True)
    # the summary shown is the store's summary.json, equal to recomputing from the results
    assert job.summary() == summarize_job(results)


def test_a_kept_order_follows_new_trials(tmp_path):
    results = [_result(i, "t", Outcome.COMPLETED, (i % 4) / 4) for i in range(1, 9)]
    root = _job(tmp_path, results)
    job = JobIndex(root)
    q = TrialQuery(sort="reward", desc=True, per_page=3)
    first = job.query(q)
    assert [r.reward for r in first.rows] == [0.75, 0.75, 0.5]
    assert (
        job.query(TrialQuery(sort="reward", desc=True, per_page=3, page=3)).rows[-1].reward == 0.0
    )  # another page of the same order
    new = _result(99, "t", Outcome.COMPLETED, 1.0)
    TrialStore(JobPaths(root).trial(new.task.name, new.attempt, new.trial_id)).create().write_result(new)
    job.refresh()
    again = job.query(q)
    assert again.total == 9 and [r.reward for r in again.rows] == [1.0, 0.75, 0.75]


def test_every_template_is_compiled_before_a_page_is_asked_for():
    from cairn.viewer.render import environment, warm_templates

    names = warm_templates()
    assert {"base.html", "macros.html", "job.html", "trial.html"} <= set(names)
    env = environment()
    loaded = {key[1] for key in env.cache}  # jinja2 caches compiled templates by (loader, name)
    assert set(names) <= loaded


def test_stale_summary_is_recomputed(tmp_path):
    results = [_result(i, "t", Outcome.COMPLETED, 1.0) for i in range(1, 4)]
    path = _job(tmp_path, results)
    write_summary(path, summarize_job(results[:1]))  # stale: counts one trial of three
    s = JobIndex(path).summary()
    assert s.n_trials == 3 and s.n_passed == 3


def test_running_trial_row_shows_step_and_phase(tmp_path):
    path = _job(tmp_path, [_result(1, "t", Outcome.COMPLETED, 1.0)])
    store = TrialStore(JobPaths(path).trial("t", 1, "ab" * 32)).create()
    store.write_steps(
        [
            StepResult(
                index=1,
                name="one",
                source=StepSource.VERIFIER,
                reward=1.0,
                rewards={"reward": 1.0},
                passed=True,
            ),
            StepResult(index=2, name="two", source=StepSource.NOT_RUN),
            StepResult(index=3, name="three", source=StepSource.NOT_RUN),
        ]
    )
    store.write_status("agent", 2, "two")
    job = JobIndex(path)
    running = [r for r in job.refresh() if r.outcome == "running"]
    assert [(r.step, r.phase, r.steps_run, r.steps_total) for r in running] == [("2/3 two", "agent", 1, 3)]
    v1 = job.version
    store.write_status("verifier", 2, "two")
    job.refresh()
    assert job.version != v1  # the live page refreshes on a phase change
    view = load_trial(job, running[0].name)
    assert view.status["phase"] == "verifier" and view.steps[1].running_phase == "verifier"


def test_bundle_pages_have_no_script_and_a_matching_style_hash(tmp_path):
    path = _job(tmp_path, [_result(1, "t", Outcome.COMPLETED, 1.0)])
    index = write_bundle(path, tmp_path / "site")
    html = index.read_text()
    assert "<script" not in html
    csp = html_lib.unescape(
        re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html).group(1)
    )
    css = re.search(r"<style>(.*?)</style>", html, re.S).group(1)
    digest = base64.b64encode(hashlib.sha256(css.encode()).digest()).decode()
    assert f"style-src 'sha256-{digest}'" in csp and "default-src 'none'" in csp
    trial = next((tmp_path / "site" / "jobs" / "job" / "trials").iterdir())
    assert "do main" in (trial / "index.html").read_text()
    with pytest.raises(ValueError, match="must not be inside"):
        write_bundle(path, path / "site")


def test_library_lists_jobs_and_refuses_odd_names(tmp_path):
    _job(tmp_path, [_result(1, "t", Outcome.COMPLETED, 1.0)], "a")
    _job(tmp_path, [_result(2, "t", Outcome.COMPLETED, 0.0)], "b")
    (tmp_path / "not-a-job").mkdir()
    lib = Library(tmp_path)
    cards = {c.name: c for c in lib.cards()}
    assert set(cards) == {"a", "b"}
    assert (cards["a"].pass_rate, cards["b"].mean_reward, cards["a"].agent) == (1.0, 0.0, "oracle")
    for bad in ("..", ".", "not-a-job", "a/b", ""):
        assert lib.job(bad) is None


def test_export_marks_replayed_steps(tmp_path):
    steps = [
        StepResult(index=1, name="setup", source=StepSource.ORACLE),
        StepResult(
            index=2, name="fix", source=StepSource.VERIFIER, reward=1.0, rewards={"reward": 1.0}, passed=True
        ),
    ]
    path = _job(tmp_path, [_result(1, "t", Outcome.COMPLETED, 1.0, steps=steps)])
    out = io.StringIO()
    assert export_job(path, "jsonl", out) == 2
    recs = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(r["step"], r["source"], r["replayed"], r["reward"]) for r in recs] == [
        ("setup", "oracle", True, None),
        ("fix", "verifier", False, 1.0),
    ]
    assert recs[1]["messages"] == [{"role": "user", "content": "do fix"}]
    out = io.StringIO()
    assert export_job(path, "jsonl", out, ExportFilter(passed_only=True)) == 1


def test_compare_deltas_per_task_and_step(tmp_path):
    from cairn.viewer.pages import compare_context, render_compare
    from cairn.viewer.render import Urls

    two = [
        StepResult(
            index=1, name="a", source=StepSource.VERIFIER, reward=1.0, rewards={"reward": 1.0}, passed=True
        ),
        StepResult(index=2, name="b", source=StepSource.VERIFIER, reward=0.0, rewards={"reward": 0.0}),
    ]
    better = [
        StepResult(
            index=1, name="a", source=StepSource.VERIFIER, reward=1.0, rewards={"reward": 1.0}, passed=True
        ),
        StepResult(
            index=2, name="b", source=StepSource.VERIFIER, reward=1.0, rewards={"reward": 1.0}, passed=True
        ),
    ]
    _job(tmp_path, [_result(1, "t", Outcome.COMPLETED, 0.5, steps=two)], "a")
    _job(tmp_path, [_result(2, "t", Outcome.COMPLETED, 1.0, steps=better)], "b")
    lib = Library(tmp_path)
    ctx = compare_context(lib.job("a").summary(), lib.job("b").summary())
    assert ("mean reward", "0.50", "1.00", "+0.50") in ctx["head"]
    rows = {(r["task"], r["step"]): (r["dr"], r["pa"], r["pb"], r["dp"]) for r in ctx["rows"]}
    assert rows == {
        ("t", None): ("+0.50", "0/1", "1/1", "+1.00"),
        ("t", "a"): ("+0.00", "1/1", "1/1", "+0.00"),
        ("t", "b"): ("+1.00", "0/1", "1/1", "+1.00"),
    }
    html = render_compare(lib.job("a"), lib.job("b"), Urls())
    assert 'data-task="t" data-step="b"' in html
