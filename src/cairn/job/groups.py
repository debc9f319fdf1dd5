"""Groups of k attempts per task for training loops (issue 30): :func:`iter_groups`.

A GRPO-style trainer normalises each attempt's reward against the other attempts of the same
task, so it wants *whole* groups: k scored attempts of one task, never k−1 because one sandbox
failed to start. :func:`iter_groups` runs a job of ``config.attempts`` attempts per task and
yields each task's group as soon as its last member is scored; a member that ended in an infra
error (or was cancelled: whatever ``cairn resume`` re-runs, :func:`cairn.job.planner.should_rerun`)
is re-run, in the same job folder and under the same trial id and attempt number, until the
group is whole or the refill rounds are used up.

How refills run: the job's own ``max_retries`` retries an infra error inside the trial's run
first (the failed attempt moved aside). Members still short when the job's run ends are re-run
by resuming the job (:func:`cairn.job.run.iter_trials` with ``resume=True``), which re-runs
exactly those trials; groups completed by it are yielded as they complete. Complete groups
are therefore never held back by a short one; a short group waits for the end of the round.

Hardened verification is on by default here (``hardened_verify=True``: every agent-started
process is killed and planted start-up files removed before the verifier runs, docs/design.md):
a training loop optimises against the verifier, and a policy that learns to game it is what
hardening is for.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn.errors import CairnError
from cairn.events import JobObserver
from cairn.plan import JobConfig
from cairn.results.model import TrialResult

if TYPE_CHECKING:
    from cairn.results.rollouts import RolloutStep


class GroupsIncompleteError(CairnError):
    """Some groups were still short after every refill round (or the job stopped early).

    Attributes:
        short: group id → the attempt numbers still missing a scored result.
        stopped_by: the job's ``stopped_by`` (``max_cost``, ``model_auth_failed`` …) when the
            job stopped starting trials, else ``None``.
    """

    def __init__(self, message: str, short: dict[str, list[int]], stopped_by: str | None = None) -> None:
        super().__init__(message)
        self.short = short
        self.stopped_by = stopped_by


@dataclass(frozen=True)
class AttemptGroup:
    """The k scored attempts of one task in one job.

    Attributes:
        group_id: ``<job>:<task>:<content hash prefix>``, the ``group_id`` of the task's
            ``cairn export --format rollouts`` records (:func:`cairn.results.rollouts.group_id`).
        task: the task name.
        job_dir: the job folder.
        results: the members, one per attempt ``1..k`` in attempt order.
        refilled: the attempt numbers whose earlier result was an infra error (or a
            cancellation) and that were re-run for this group.
    """

    group_id: str
    task: str
    job_dir: Path
    results: tuple[TrialResult, ...]
    refilled: tuple[int, ...] = field(default=())

    @property
    def rewards(self) -> list[float | None]:
        """Each member's trial reward, in attempt order (``None``: a task error, no score)."""
        return [r.reward for r in self.results]

    def rollouts(self) -> list[RolloutStep]:
        """The group's per-step rollout records, read from the job folder.

        Returns:
            The :class:`cairn.results.rollouts.RolloutStep` of every executed step of every
            member, in attempt order, then step order (token ids present with ``--rollout``).
        """
        from cairn.results.rollouts import trial_rollout_steps
        from cairn.results.store import JobPaths, TrialPaths

        trials = JobPaths(self.job_dir).trials_dir
        out: list[RolloutStep] = []
        for r in self.results:
            out.extend(trial_rollout_steps(self.job_dir.name, r, TrialPaths(trials / r.trial_name)))
        return out


def _scored(r: TrialResult) -> bool:
    from cairn.job.planner import should_rerun

    return not should_rerun(r, retry_errors=False)


async def iter_groups(
    config: JobConfig,
    *,
    job_dir: Path | None = None,
    max_refills: int = 3,
    hardened_verify: bool = True,
    observer: JobObserver | None = None,
) -> AsyncIterator[AttemptGroup]:
    """Run ``config.attempts`` attempts of every task and yield each task's group whole.

    Example (a GRPO-style loop; ``advantages`` as in docs/export.md)::

        config = JobConfig(paths=("tasks/",), agent="llm", model="openai/my-policy",
                           attempts=8, agent_kwargs={"api_base": URL, "rollout": "on"})
        async for group in iter_groups(config):
            steps = group.rollouts()            # token ids, logprobs, loss masks, rewards
            trainer.step(steps, advantages(group.rewards))

    Args:
        config: the job config; ``attempts`` is the group size k.
        job_dir: the job folder (default as :func:`cairn.job.run.iter_trials`).
        max_refills: how many times the job is resumed to re-run members that ended in an
            infra error or were cancelled (0: none beyond the job's own ``max_retries``).
        hardened_verify: kill agent processes and remove planted start-up files before
            verifying (default on: training optimises against the verifier).
        observer: receives the job's events and results.

    Yields:
        Each :class:`AttemptGroup`, as soon as its k-th member is scored. A member with a
        task error (a broken task) counts as scored: re-running cannot fix it; its reward is
        ``None``.

    Raises:
        ValueError: ``max_refills`` is negative.
        GroupsIncompleteError: after every complete group was yielded, some group is still
            short (the refill rounds ran out, or the job stopped starting trials:
            ``--max-cost-usd``, a rejected model key).
        UsageError: as :func:`cairn.job.run.iter_trials`, before anything runs.
    """
    from cairn.job.run import _job_dir, iter_trials
    from cairn.results.rollouts import group_id
    from cairn.results.store import read_job_json

    if max_refills < 0:
        raise ValueError(f"max_refills must be >= 0, not {max_refills}")
    k = config.attempts
    config = config.model_copy(update={"hardened_verify": hardened_verify})
    target = _job_dir(config, job_dir)
    if config.job_name is None:
        config = config.model_copy(update={"job_name": target.name})
    members: dict[str, dict[int, TrialResult]] = {}
    failed_once: dict[str, set[int]] = {}
    done: set[str] = set()
    for round_no in range(max_refills + 1):
        trials: Any = iter_trials(
            config, job_dir=target, resume=round_no > 0, observer=observer
        )  # an async generator: closed early too
        async with contextlib.aclosing(trials) as results:
            async for r in results:
                gid = group_id(target.name, r)
                if gid in done:
                    continue
                members.setdefault(gid, {})[r.attempt] = r
                if not _scored(r):
                    failed_once.setdefault(gid, set()).add(r.attempt)
                    continue
                got = members[gid]
                if len(got) == k and all(_scored(x) for x in got.values()):
                    done.add(gid)
                    yield AttemptGroup(
                        group_id=gid,
                        task=r.task.name,
                        job_dir=target,
                        results=tuple(got[a] for a in sorted(got)),
                        refilled=tuple(sorted(failed_once.get(gid, ()))),
                    )
        short = {
            g: sorted(set(range(1, k + 1)) - {a for a, x in m.items() if _scored(x)})
            for g, m in members.items()
            if g not in done
        }
        if not short:
            return
        stopped_by: Any = None
        with contextlib.suppress(OSError, ValueError):
            stopped_by = read_job_json(target).stopped_by
        if stopped_by:  # refilling would start trials the job itself refused to start
            raise GroupsIncompleteError(
                f"the job stopped ({stopped_by}) with {len(short)} group(s) short: "
                + ", ".join(f"{g} (attempts {a})" for g, a in short.items()),
                short,
                stopped_by,
            )
    raise GroupsIncompleteError(
        f"{len(short)} group(s) still short after {max_refills} refill round(s): "
        + ", ".join(f"{g} (attempts {a})" for g, a in short.items()),
        short,
    )
