"""Stage 3, the trial: one (task, agent) run in one sandbox, step after step, scored.

Modules: :mod:`~cairn.trial.run` (the trial lifecycle), :mod:`~cairn.trial.step` (one step:
setup, healthcheck, agent, artifacts, verifier), :mod:`~cairn.trial.verify` (run the tests,
read the reward), :mod:`~cairn.trial.rewards` (reward files), :mod:`~cairn.trial.separate_verifier`,
:mod:`~cairn.trial.healthcheck`, :mod:`~cairn.trial.artifacts`.
"""

from __future__ import annotations

from cairn._util.lazy import lazy_face

_NAMES = {
    "run_trial": "cairn.trial.run",
    "make_agent": "cairn.trial.run",
    "error_info": "cairn.trial.classify",
}

__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_face("cairn.trial", _NAMES)
