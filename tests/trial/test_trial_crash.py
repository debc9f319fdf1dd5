"""A trial whose engine code raises something that is not a trial outcome (a bug; the jobs
folder failing) writes no result.json: it is never taken for a completed trial, and
`cairn resume` runs it again (design §8)."""

from __future__ import annotations

import pytest

from cairn.agents.oracle import OracleAgent
from taskgen import write_task
from testbed import run_trial_sync


class _BrokenHost(OracleAgent):
    async def prepare_host(self, task, *, can_mount):  # noqa: ARG002 - the hook's signature
        raise RuntimeError("a bug in the agent's host preparation")


@pytest.mark.local
def test_a_crash_writes_no_result(tmp_path):
    task = write_task(tmp_path / "tasks", "t")
    with pytest.raises(RuntimeError, match="a bug"):
        run_trial_sync(task, _BrokenHost(), "local", tmp_path / "jobs")
    trials = list((tmp_path / "jobs" / "job" / "trials").iterdir())
    assert len(trials) == 1
    assert (trials[0] / "config.json").is_file()
    assert not (trials[0] / "result.json").exists()
