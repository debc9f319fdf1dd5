"""Stage 4, results: the persisted shapes and everything that reads or writes them.

Modules: :mod:`~cairn.results.model` (the versioned pydantic models of result.json, steps.json
and summary.json), :mod:`~cairn.results.store` (the only writer under ``jobs/``: paths, atomic
files), :mod:`~cairn.results.aggregate` (step rewards → a trial's score; pure),
:mod:`~cairn.results.summary` (trials → the job summary; pure), :mod:`~cairn.results.masking`
(secrets out of stored text), :mod:`~cairn.results.report` (text / markdown / JSON from disk),
and ``schemas/`` (JSON Schemas generated from the models).

The model classes are imported eagerly (they are plain values); the rest on first use.
"""

from __future__ import annotations

from cairn._util.lazy import lazy_face
from cairn.results.model import (
    AgentExit,
    AgentRef,
    ErrorInfo,
    Gate,
    JobSummary,
    KeyStat,
    Outcome,
    StepResult,
    StepsFile,
    StepSource,
    StepSummary,
    StepTimings,
    StopReason,
    TaskRef,
    TaskSource,
    TaskSummary,
    TimingSummary,
    Tokens,
    TrialResult,
    TrialTimings,
)

_NAMES = {
    "JobResult": "cairn.job.run",
    "read_job": "cairn.job.run",
    "summarize_job": "cairn.results.summary",
    "score_trial": "cairn.results.aggregate",
    "render": "cairn.results.report",
}

__all__ = [
    "AgentExit",
    "AgentRef",
    "ErrorInfo",
    "Gate",
    "JobSummary",
    "KeyStat",
    "Outcome",
    "StepResult",
    "StepSource",
    "StepSummary",
    "StepTimings",
    "StepsFile",
    "StopReason",
    "TaskRef",
    "TaskSource",
    "TaskSummary",
    "TimingSummary",
    "Tokens",
    "TrialResult",
    "TrialTimings",
    *_NAMES,
]
__getattr__, __dir__ = lazy_face("cairn.results", _NAMES)
