"""The end of ``cairn run``: a one-trial job in text mode prints where its results are and no
table, so it imports no report module (#31: ``cairn.results.report`` and its model-call sums
cost ~8 ms of CPU at the end of every such run); a job of several trials still gets the table.
"""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

ONE_TRIAL = textwrap.dedent("""
    import io, sys
    from pathlib import Path
    from types import SimpleNamespace
    from cairn.cli.progress import Progress
    out = io.StringIO()
    Progress(stream=out).finish(SimpleNamespace(results=[object()], job_dir=Path("/jobs/j")))
    print(repr(out.getvalue()))
    print("cairn.results.report" in sys.modules)
""")


def test_a_one_trial_job_prints_its_folder_and_imports_no_report() -> None:
    r = subprocess.run(
        [sys.executable, "-c", ONE_TRIAL],
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=60,
        check=True,
    )
    assert r.stdout.splitlines() == ["'results: /jobs/j\\n'", "False"]


def _cancelled_results(tmp_path: Path, n: int) -> list:
    """``n`` cancelled trials of one task (stand-ins: the table needs results, not a run)."""
    from cairn.job.discover import cancelled_result
    from cairn.plan import TrialPlan, trial_id
    from cairn.results.store import trial_dir_name
    from cairn.task.load import load_task
    from taskgen import write_task

    task = load_task(write_task(tmp_path / "tasks", "table"))
    out = []
    for attempt in range(1, n + 1):
        tid = trial_id(task.name, task.content_hash, "oracle", {}, None, "local", attempt)
        plan = TrialPlan(
            task=task,
            agent_name="oracle",
            agent_kwargs={},
            model=None,
            backend="local",
            attempt=attempt,
            trial_id=tid,
            trial_dir=tmp_path / "jobs" / "j" / "trials" / trial_dir_name(task.name, attempt, tid),
            job_id="j",
            job_dir=tmp_path / "jobs" / "j",
        )
        out.append(cancelled_result(plan, "stand-in"))
    return out


def test_a_job_of_several_trials_prints_the_table(tmp_path: Path) -> None:
    from cairn.cli.progress import Progress
    from cairn.job.run import JobResult
    from cairn.results.report import HEAD
    from cairn.results.summary import summarize_job

    results = _cancelled_results(tmp_path, 2)
    job = JobResult(job_dir=tmp_path / "jobs" / "j", results=results, summary=summarize_job(results))
    out = io.StringIO()
    Progress(stream=out).finish(job)
    text = out.getvalue()
    assert all(h in text for h in HEAD)
    assert text.endswith(f"results: {tmp_path / 'jobs' / 'j'}\n")
