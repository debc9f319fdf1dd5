"""cairn: run multi-step agent-evaluation tasks in sandboxes and score them.

The public API is re-exported here lazily so ``import cairn`` stays cheap.
"""

from __future__ import annotations

__version__ = "0.1.0"

_LAZY = {
    "load_task": "cairn.task.load",
    "load_dataset": "cairn.task.load",
    "run_trial": "cairn.trial",
    "run_job": "cairn.job",
    "resume_job": "cairn.job",
    "read_job": "cairn.job",
    "iter_trials": "cairn.job",
    "iter_groups": "cairn.job",
    "AttemptGroup": "cairn.job",
    "GroupsIncompleteError": "cairn.job",
    "JobConfig": "cairn.plan",
    "TrialResult": "cairn.results",
    "StepResult": "cairn.results",
    "Outcome": "cairn.results",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'cairn' has no attribute {name!r}")
