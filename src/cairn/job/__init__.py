"""Stage 2, the job: plan a config's trials, run them concurrently, resume, read back.

Modules: :mod:`~cairn.job.discover` (task folders → entries), :mod:`~cairn.job.runner`
(the run loop), :mod:`~cairn.job.planner` (pure planning: tasks × attempts against the folder),
:mod:`~cairn.job.folder` (lock, job.json, left-overs), :mod:`~cairn.job.run` (the public entry points),
:mod:`~cairn.job.groups` (whole groups of k attempts per task, for training),
:mod:`~cairn.job.sanity` (oracle-passes / nop-fails checks).
"""

from __future__ import annotations

from cairn._util.lazy import lazy_face

_NAMES = {
    "JobResult": "cairn.job.run",
    "claim_job_dir": "cairn.job.run",
    "default_job_name": "cairn.job.run",
    "iter_trials": "cairn.job.run",
    "iter_groups": "cairn.job.groups",
    "AttemptGroup": "cairn.job.groups",
    "GroupsIncompleteError": "cairn.job.groups",
    "arun_job": "cairn.job.run",
    "run_job": "cairn.job.run",
    "resume_config": "cairn.job.folder",
    "resume_job": "cairn.job.run",
    "read_job": "cairn.job.run",
    "plan_trials": "cairn.job.planner",
    "TrialDecision": "cairn.job.planner",
}

__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_face("cairn.job", _NAMES)
