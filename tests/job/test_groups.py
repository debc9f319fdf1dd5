"""Whole groups of k attempts per task (issue 30, :func:`cairn.iter_groups`) on the local
backend: a member that hits an infra error is re-run and its group yielded complete; a whole
group is not held back by a short one; hardened verification is on by default."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

import cairn
from cairn.job.groups import AttemptGroup, GroupsIncompleteError
from cairn.plan import JobConfig
from testbed import local_available

pytestmark = [
    pytest.mark.local,
    pytest.mark.slow,
    pytest.mark.skipif(not local_available(), reason="no local sandbox support"),
]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "two-steps"


def _tasks(root: Path, *names: str) -> Path:
    for name in names:
        dst = root / name
        shutil.copytree(EXAMPLE, dst)
        toml = dst / "task.toml"
        toml.write_text(toml.read_text().replace('name = "cairn/two-steps"', f'name = "cairn/{name}"'))
    return root


def _groups(config: JobConfig, **kw) -> list[AttemptGroup]:
    async def collect() -> list[AttemptGroup]:
        return [g async for g in cairn.iter_groups(config, **kw)]

    return asyncio.run(asyncio.wait_for(collect(), 600))


def test_a_member_with_an_infra_error_is_refilled_and_its_group_yielded_whole(tmp_path):
    ds = _tasks(tmp_path / "ds", "alpha", "beta")
    marker = tmp_path / "setup-failed-once"  # the first trial to set up fails (infra), once
    config = JobConfig(
        paths=(ds,),
        agent="job_agents:FlakySetupAgent",
        backend="local",
        agent_kwargs={"marker": str(marker)},
        attempts=2,
        n_concurrent=1,
        max_retries=0,
        jobs_dir=tmp_path / "jobs",
        job_name="g",
    )
    groups = _groups(config)
    assert marker.exists()
    assert len(groups) == 2 and {g.task for g in groups} == {"cairn/alpha", "cairn/beta"}
    # the whole group came first, before the refill round; the refilled one after it
    assert [g.refilled for g in groups][0] == ()
    assert len(groups[1].refilled) == 1
    for g in groups:
        assert [r.attempt for r in g.results] == [1, 2]
        assert [r.outcome.value for r in g.results] == ["completed", "completed"]
        assert g.rewards == [1.0, 1.0]
        assert g.group_id.startswith(f"g:{g.task}:")
        assert len({r.trial_id for r in g.results}) == 2
    (again,) = groups[1].refilled
    member = next(r for r in groups[1].results if r.attempt == again)
    trial = tmp_path / "jobs" / "g" / "trials" / member.trial_name
    first = json.loads((trial / "attempts" / "1" / "result.json").read_text())
    assert first["error"]["kind"] == "agent_setup_failed"
    assert first["error"]["category"] == "infra"  # moved aside, not lost
    # hardened verification was on for every trial (the default here)
    for t in (tmp_path / "jobs" / "g" / "trials").iterdir():
        cfg = json.loads((t / "config.json").read_text())
        assert cfg["options"]["hardened_verify"] is True
    # the group's rollout records: one per executed step, joined to the member's rewards
    steps = groups[1].rollouts()
    assert [(s.attempt, s.step, s.reward) for s in steps] == [
        (1, "write", 1.0),
        (1, "append", 1.0),
        (2, "write", 1.0),
        (2, "append", 1.0),
    ]
    assert {s.group_id for s in steps} == {groups[1].group_id}


def test_a_group_still_short_after_the_refill_rounds_is_an_error_not_a_short_group(tmp_path):
    ds = _tasks(tmp_path / "ds", "alpha")
    marker = tmp_path / "setup-failed-once"
    config = JobConfig(
        paths=(ds,),
        agent="job_agents:FlakySetupAgent",
        backend="local",
        agent_kwargs={"marker": str(marker)},
        attempts=2,
        n_concurrent=1,
        max_retries=0,
        jobs_dir=tmp_path / "jobs",
        job_name="g",
    )
    with pytest.raises(GroupsIncompleteError) as exc:
        _groups(config, max_refills=0, hardened_verify=False)
    (gid,) = exc.value.short
    assert gid.startswith("g:cairn/alpha:") and len(exc.value.short[gid]) == 1
    assert "after 0 refill round(s)" in str(exc.value)
    with pytest.raises(ValueError, match="^max_refills must be >= 0, not -1$"):
        _groups(config, max_refills=-1)
