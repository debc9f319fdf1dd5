"""``cairn tasks sanity``: the oracle must pass every step, nop must not pass (design §2).

Tells a broken verifier (nop passes) or a broken solution (oracle fails) from a weak agent,
before a task is published.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn.events import JobObserver
from cairn.plan import JobConfig

if TYPE_CHECKING:  # pragma: no cover
    from cairn.job.run import JobResult


@dataclass
class SanityReport:
    """Per task: the oracle and nop verdicts.

    Attributes:
        problems: task name → list of problems found (empty for a good task).
        job_dirs: the oracle job's and the nop job's folders.
    """

    problems: dict[str, list[str]] = field(default_factory=dict)
    job_dirs: list[Path] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no task has a problem."""
        return not any(self.problems.values())

    def lines(self) -> list[str]:
        """One line per task: ``name: ok`` or ``name: FAIL: problem; problem``."""
        return [
            f"{name}: ok" if not p else f"{name}: FAIL: {'; '.join(p)}"
            for name, p in sorted(self.problems.items())
        ]


def run_sanity(
    paths: list[Path],
    *,
    backend: str = "auto",
    n_concurrent: int = 4,
    jobs_dir: Path = Path("jobs"),
    observer: JobObserver | None = None,
    strict: bool = False,
) -> SanityReport:
    """Run each task with ``oracle`` and with ``nop`` (two jobs) and compare.

    A task fails sanity when the oracle trial does not pass every step, or when the nop trial
    passes.

    Args:
        paths: task or dataset folders.
        backend: the sandbox backend (``auto``, ``docker``, ``local``).
        n_concurrent: trials at once, per job.
        jobs_dir: where the two jobs are written.
        observer: receives both jobs' events (each job prints its tasks' validation
            warnings before its first trial).
        strict: task validation warnings are errors (the task ends ``config_error`` in both
            jobs, so it fails sanity).

    Raises:
        UsageError: no task matched.
    """
    from cairn.job.run import arun_job, default_job_name

    stamp = f"{default_job_name()}-{uuid.uuid4().hex[:4]}"
    report = SanityReport()

    async def both() -> tuple[JobResult, JobResult]:
        base: dict[str, Any] = {
            "paths": tuple(paths),
            "backend": backend,
            "n_concurrent": n_concurrent,
            "jobs_dir": jobs_dir,
            "max_retries": 1,
            "strict": strict,
        }
        oracle = await arun_job(
            JobConfig(agent="oracle", job_name=f"sanity-oracle-{stamp}", **base), observer=observer
        )
        nop = await arun_job(
            JobConfig(agent="nop", job_name=f"sanity-nop-{stamp}", **base), observer=observer
        )
        return oracle, nop

    oracle, nop = asyncio.run(both())
    report.job_dirs = [oracle.job_dir, nop.job_dir]
    for r in oracle.results:
        probs = report.problems.setdefault(r.task.name, [])
        if r.outcome.value == "errored" and r.error is not None:
            first = (r.error.message or "").strip().splitlines()[:1]
            probs.append(
                f"oracle errored ({r.error.kind.value}" + (f": {first[0][:200]}" if first else "") + ")"
            )
        failing = [s.name for s in r.steps if not s.passed]
        if failing and r.outcome.value != "errored":
            probs.append(f"oracle does not pass step(s) {', '.join(failing)}")
    for r in nop.results:
        probs = report.problems.setdefault(r.task.name, [])
        if r.passed:
            probs.append("nop passes (the verifier accepts an untouched sandbox)")
    return report
