"""``cairn regrade``: re-run verifiers only, into a new derived job (docs/snapshots.md).

For every trial of a finished job and every step that ran, the step's verifier runs again —
the *current* tests of the task (``-p``, else the task folder the trial recorded), the same
verifier env and timeouts — on:

- shared-mode steps: a fresh sandbox started from the step's snapshot (``--snapshot-steps``),
  which holds the files as the agent left them at the end of its phase (not as the verifier
  left them);
- separate-mode steps: the verifier environment with the step's recorded artifacts.

Rewards are re-parsed and the trial re-aggregated with the current ``min_reward`` gates and
reward strategy (:mod:`cairn.results.aggregate`). No agent runs. A step that never ran stays
``not-run``; when the new gates would have let the trial go on to such a step, the trial is
marked ``regrade_partial`` with the step it could not reach — no score is invented for it.
Steps without a snapshot (and not separate) are listed as not regradable and copied
unchanged. The original job folder is only read; the derived one records ``derived_from``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from cairn.errors import Category, Phase, SandboxLostError, TrialFailure, UsageError
from cairn.plan import JobConfig, Timeouts, check_job_name
from cairn.results.aggregate import (
    evaluate_gates,
    primary_reward,
    score_trial,
    step_passed,
    step_reached,
    stop_decision,
    sum_judge,
)
from cairn.results.model import (
    DerivedFrom,
    Outcome,
    RegradeInfo,
    RegradeStep,
    StepResult,
    StepSource,
    StepTimings,
    TrialResult,
)
from cairn.task.model import Step, Task
from cairn.trial.snapshot import restore_spec

RegradeHow = Literal["snapshot", "artifacts", "not_regradable", "not-run", "oracle", "dropped", "unchanged"]
"""How a step was regraded (:class:`~cairn.results.model.RegradeStep`'s ``how``)."""
RegradeStatus = Literal["regraded", "regrade_partial", "not_regradable"]

RegradeSink = Callable[[str], None]
"""Receives the regrade's progress lines (the regrade has no typed events of its own)."""


@dataclass
class RegradeResult:
    """What :func:`regrade_job` produced.

    Attributes:
        job_dir: the new, derived job folder.
        source_dir: the original job folder (unchanged).
        results: every trial of the derived job (regraded, partial or copied unchanged).
        stopped_by: ``max_cost`` when ``max_cost_usd`` stopped it from regrading more
            trials (the rest were copied unchanged), else ``None``.
        judge_cost_usd: what the new verifications' LLM judges cost (their
            ``judge_usage.json``), USD.
        infra_failed: trial ids that could not be regraded because of an infra failure
            (their ``regrade.message`` says ``infra: …``).
    """

    job_dir: Path
    source_dir: Path
    results: list[TrialResult] = field(default_factory=list)
    stopped_by: str | None = None
    judge_cost_usd: float = 0.0
    infra_failed: list[str] = field(default_factory=list)
    """Trials whose regrade an infra failure (a lost engine) stopped."""
    rerun_command: str = ""
    """The ``cairn run`` command that records a regradable job of the same tasks and agent
    (``--snapshot-steps`` added to the source job's config), for the lines below."""
    source_args: str = ""
    """The source job's task sources as ``cairn run`` options (``-p … -d …``)."""

    def _status(self, status: str) -> list[TrialResult]:
        return [r for r in self.results if r.regrade is not None and r.regrade.status == status]

    @property
    def exit_code(self) -> int:
        """0 when some trial was regraded (errored trials copied unchanged are recorded); 1
        when a trial could not be regraded because of an infra failure, or when no trial
        could be regraded at all (e.g. a job run without ``--snapshot-steps``: the derived
        job would only copy the old scores; issue 27)."""
        if self.infra_failed:
            return 1
        return 1 if self.results and not (self._status("regraded") or self._status("regrade_partial")) else 0

    def lines(self) -> list[str]:
        """What the terminal shows after the report: how many trials were regraded, why the
        others were not and the command that makes them regradable, and for a partial
        regrade the steps it could not reach and what a full one needs.

        Returns:
            Lines without a trailing newline; empty for a job of no trial.
        """
        if not self.results:
            return []
        done, partial = self._status("regraded"), self._status("regrade_partial")
        nope = self._status("not_regradable")
        out = [
            f"regrade: {len(done)} of {len(self.results)} trial(s) regraded"
            + (f", {len(partial)} partial" if partial else "")
            + (f", {len(nope)} not regradable" if nope else "")
        ]
        no_snap = [r for r in nope if r.regrade and "no snapshot" in r.regrade.message]
        if no_snap:
            out.append(
                f"  {len(no_snap)} trial(s) have no step snapshots: the job was run "
                "without --snapshot-steps; a regradable job is recorded by "
                + (self.rerun_command or "cairn run ... --snapshot-steps")
            )
        for r in nope:
            if r not in no_snap and r.regrade is not None:
                out.append(f"  {r.trial_name}: {r.regrade.message}")
        for r in partial:
            assert r.regrade is not None
            unreached = [
                s.name
                for s in r.regrade.steps
                if s.how == "not-run"
                and s.index
                >= next((x.index for x in r.regrade.steps if x.name == r.regrade.unreached_step), 0)
            ]
            out.append(
                f"  {r.trial_name}: partial: step(s) {', '.join(unreached)} never ran "
                "in the recorded trial and have no score; a full regrade needs them "
                f"run: cairn run {self.source_args} -i {shlex.quote(r.task.name)} "
                f"--start-step {r.regrade.unreached_step} --from "
                f"{shlex.quote(str(self.source_dir / 'trials' / r.trial_name))} "
                f"-a {shlex.quote(r.agent.name)}"
            )
        return out


def _default_name(src: Path) -> str:
    return f"{src.name}__regrade-{datetime.now().strftime('%Y-%m-%d__%H-%M-%S')}"


def _load_tasks(paths: Sequence[Path] | None) -> dict[str, Task]:
    """``-p`` tasks by name (invalid ones left out: their trials are copied unchanged)."""
    if not paths:
        return {}
    from cairn.job.discover import discover_tasks

    entries = discover_tasks(JobConfig(paths=tuple(Path(p).absolute() for p in paths)))
    if not entries:
        raise UsageError("no task found under " + ", ".join(str(p) for p in paths))
    return {e.name: e.task for e in entries if e.task is not None}


def _recorded_task(trial_dir: Path, cache: dict[str, Task | None]) -> Task | None:
    """The task folder a trial recorded in its config.json, loaded (``None`` when gone)."""
    from cairn.results.store import read_config
    from cairn.task.load import load_task

    try:
        path = read_config(trial_dir).task.path
    except (OSError, ValueError):
        return None
    if path not in cache:
        try:
            cache[path] = load_task(Path(path))
        except Exception:  # noqa: BLE001 - a task that no longer loads: not regradable
            cache[path] = None
    return cache[path]


class _TrialRegrade:
    """Regrade one trial into its copy in the derived job."""

    def __init__(
        self,
        task: Task,
        old: TrialResult,
        trial_dir: Path,
        *,
        job_id: str,
        job_dir: Path,
        timeouts: Timeouts,
        emit: RegradeSink,
        add_hosts: tuple[tuple[str, str], ...] = (),
    ) -> None:
        from cairn.results.store import Masker

        self.task, self.old, self.dir = task, old, trial_dir
        self.job_id, self.job_dir, self.timeouts = job_id, job_dir, timeouts
        self.emit = emit
        self.spec, secrets = restore_spec(
            task, job_id=job_id, trial_id=old.trial_id, job_dir=job_dir, timeout_multiplier=timeouts.build
        )
        self.spec = dataclasses.replace(self.spec, add_hosts=add_hosts)  # the run's --add-host
        from cairn.task.envvars import resolve_env, secret_values

        self.verifier_envs = [resolve_env(s.verifier_env, os.environ) for s in task.steps]
        for s, resolved in zip(task.steps, self.verifier_envs, strict=True):
            secrets |= set(secret_values(s.verifier_env, resolved))
        self.masker = Masker(secrets)
        self.notes: list[str] = []

    async def verify(self, step: Step, old_row: StepResult) -> tuple[StepResult, RegradeHow]:
        """Run ``step``'s current verifier again; returns (new row, how)."""
        from cairn.results.store import TrialPaths, empty_folder
        from cairn.sandbox import get_backend
        from cairn.trial.verify import run_verifier

        sp = TrialPaths(self.dir).step(step.index, step.name)
        timeout = step.verifier_timeout_sec * self.timeouts.verifier  # as the job ran it
        venv = self.verifier_envs[step.index - 1]
        if step.verifier_mode == "separate":
            from cairn.trial.separate_verifier import plan_separate_verifier, run_separate_verifier

            plan = plan_separate_verifier(
                self.task,
                step,
                self.spec,
                self.old.backend,
                timeout_multiplier=self.timeouts.build,
                verifier_env=venv,
            )
            self.masker = type(self.masker)(set(self.masker.secrets) | set(plan.secrets))
            empty_folder(sp.verifier)
            v = await run_separate_verifier(
                plan,
                step,
                env=venv,
                timeout_sec=timeout,
                verifier_dir=sp.verifier,
                artifacts_dir=sp.artifacts,
                mask=self.masker.mask,
                timeout_multiplier=self.timeouts.default,
            )
            how: RegradeHow = "artifacts"
        else:
            from cairn.task.judge import judge_hosts

            snap = old_row.snapshot
            assert snap is not None
            cls = get_backend(self.old.backend, compose=self.task.compose_file is not None)
            # the verifier phase's own policy, with an LLM judge's opening, as in the run
            policy = (
                self.task.verifier_network(step)
                .with_model_hosts(judge_hosts(step.verifier_env, venv))
                .effective()
            )
            switch = policy != self.task.environment.network_policy.effective()
            spec = dataclasses.replace(
                self.spec, snapshot=snap.ref, network_phases=(policy,) if switch else ()
            )
            empty_folder(sp.verifier)
            async with cls(spec) as sandbox:
                hc = self.task.environment.healthcheck
                if hc is not None:
                    from cairn.trial.healthcheck import run_healthcheck

                    await run_healthcheck(sandbox, hc, timeout_multiplier=self.timeouts.default)
                if switch:
                    await sandbox.set_network(policy, phase="verifier")
                v = await run_verifier(
                    sandbox,
                    step,
                    env=venv,
                    timeout_sec=timeout,
                    verifier_dir=sp.verifier,
                    mask=self.masker.mask,
                )
            how = "snapshot"
        keep: dict[str, Any] = dict(
            index=step.index,
            name=step.name,
            agent_exit=old_row.agent_exit,
            tokens=old_row.tokens,
            cost_usd=old_row.cost_usd,
            snapshot=old_row.snapshot,
            judge=v.judge,  # the new verification's LLM-judge spend (#22)
            warnings=[*old_row.warnings, *(f"regrade: {w}" for w in v.warnings)],
            timings=StepTimings(
                setup_sec=old_row.timings.setup_sec,
                agent_sec=old_row.timings.agent_sec,
                verifier_sec=v.elapsed_sec,
            ),
        )
        if v.error is not None:
            from cairn.trial.classify import error_info

            err = error_info(v.error, step=step, phase=Phase.VERIFIER, mask=self.masker.mask)
            return StepResult(
                source=StepSource.ERROR,
                error=err,
                verifier_exit_code=v.exit_code,
                reward_file=v.reward_file,
                **keep,
            ), how
        gates = evaluate_gates(step.min_reward, v.rewards) if step.min_reward is not None else []
        return StepResult(
            source=StepSource.VERIFIER,
            reward=primary_reward(v.rewards),
            rewards=v.rewards,
            passed=step_passed(step.min_reward, v.rewards, True),
            verifier_exit_code=v.exit_code,
            reward_file=v.reward_file,
            gates=gates,
            **keep,
        ), how

    async def run(self) -> TrialResult:
        old, task = self.old, self.task
        rows: list[StepResult] = []
        info: list[RegradeStep] = []
        stop = None
        error = None
        partial: str | None = None
        first = next((r.index for r in old.steps if r.source is not StepSource.NOT_RUN or step_reached(r)), 1)
        n = len(task.steps)
        for step, old_row in zip(task.steps, old.steps, strict=True):
            how: RegradeHow
            ended = stop is not None or error is not None or partial is not None
            reached = old_row.source is not StepSource.NOT_RUN or step_reached(old_row)
            if ended:
                if reached and old_row.source is not StepSource.ORACLE and partial is None:
                    new, how = (
                        StepResult(
                            index=step.index,
                            name=step.name,
                            source=StepSource.NOT_RUN,
                            snapshot=old_row.snapshot,
                        ),
                        "dropped",
                    )
                else:
                    new, how = old_row, "not-run" if not reached else "unchanged"
            elif old_row.source is StepSource.ORACLE:
                new, how = old_row, "oracle"
            elif not reached:
                if step.index > first or (old.start_step is None and step.index == 1):
                    partial = step.name  # the new gates let the trial go on to a step never run
                new, how = old_row, "not-run"
            elif (
                old_row.source is StepSource.CANDIDATE_ERROR
                or (
                    old_row.source is StepSource.ERROR
                    and old_row.error is not None
                    and old_row.error.phase is not Phase.VERIFIER
                )
                or old_row.agent_exit is None
            ):
                new, how = old_row, "unchanged"  # no verifier ran: nothing to grade again
            elif step.verifier_mode != "separate" and old_row.snapshot is None:
                new, how = old_row, "not_regradable"
            else:
                try:
                    new, how = await self.verify(step, old_row)
                except SandboxLostError:
                    raise
                except TrialFailure as exc:
                    self.notes.append(f"step {step.name}: {exc.kind.value}: {exc}")
                    new, how = old_row, "not_regradable"
            info.append(
                RegradeStep(
                    index=step.index,
                    name=step.name,
                    how=how,
                    old_source=old_row.source,
                    old_reward=old_row.reward,
                    new_source=new.source,
                    new_reward=new.reward,
                )
            )
            rows.append(new)
            if ended or how in ("oracle", "not-run"):
                continue
            if (
                new.source is StepSource.ERROR
                and new.error is not None
                and new.error.category is not Category.CANDIDATE
            ):
                error = new.error
                continue
            stop = stop_decision(new, step.min_reward, is_last=step.index == n, verify=True)
        hows = {s.how for s in info}
        status: RegradeStatus = (
            "regrade_partial"
            if partial is not None
            else "regraded"
            if hows & {"snapshot", "artifacts"}
            else "not_regradable"
        )
        stop_reason = stop
        if partial is not None and stop is None:
            stop_reason = old.stop_reason  # what ended the recorded run; the rest never ran
        n_replayed = sum(r.source is StepSource.ORACLE for r in rows)
        score = score_trial(
            task.config.multi_step_reward_strategy,
            rows,
            steps_total=old.steps_total + n_replayed,
            stop_reason=stop_reason,
            error=error,
        )
        message = ""
        if partial is not None:
            message = (
                f"the new gates let the trial go on to step {partial!r}, which never ran "
                "in the recorded trial: it has no score (run the agent again, e.g. "
                f"--start-step {partial} --from this trial)"
            )
        elif "not_regradable" in hows:
            missing = [s.name for s in info if s.how == "not_regradable"]
            message = (
                "no snapshot (run with --snapshot-steps) for step(s) "
                + ", ".join(missing)
                + "; copied unchanged"
            )
        if self.notes:
            message = "; ".join([*([message] if message else []), *self.notes])
        outcome = score.outcome
        passed = score.passed and partial is None
        regrade = RegradeInfo(
            status=status,
            unreached_step=partial,
            old_reward=old.reward,
            old_outcome=old.outcome,
            steps=info,
            message=message,
        )
        return old.model_copy(
            update=dict(
                outcome=outcome,
                error=score.error,
                reward=score.reward,
                rewards=score.rewards,
                reward_all_steps=score.reward_all_steps,
                passed=passed,
                strategy=task.config.multi_step_reward_strategy,
                steps_run=sum(step_reached(r) and r.source is not StepSource.ORACLE for r in rows),
                stopped_after=score.stopped_after,
                stop_reason=score.stop_reason,
                steps=rows,
                judge=sum_judge(r.judge for r in rows),
                regrade=regrade,
            )
        )


def _unchanged(old: TrialResult, why: str) -> TrialResult:
    steps = [
        RegradeStep(
            index=r.index,
            name=r.name,
            how="not_regradable",
            old_source=r.source,
            old_reward=r.reward,
            new_source=r.source,
            new_reward=r.reward,
        )
        for r in old.steps
    ]
    return old.model_copy(
        update={
            "regrade": RegradeInfo(
                status="not_regradable",
                old_reward=old.reward,
                old_outcome=old.outcome,
                steps=steps,
                message=why,
            )
        }
    )


async def aregrade_job(
    job_dir: Path,
    *,
    paths: Sequence[Path] | None = None,
    job_name: str | None = None,
    n_concurrent: int = 4,
    max_cost_usd: float | None = None,
    on_event: RegradeSink | None = None,
) -> RegradeResult:
    """Regrade a finished job into a new derived job folder next to it (async).

    Args:
        job_dir: the job folder (never modified).
        paths: task or dataset folders with the *current* tasks (``-p``); default: the task
            folders the trials recorded.
        job_name: the derived job's name (default ``<name>__regrade-<time>``).
        n_concurrent: trials regraded at once.
        max_cost_usd: once the new verifications' LLM-judge spend (``judge_usage.json``)
            reaches this many USD, no further trial is regraded: the rest are copied unchanged
            (``not_regradable``, "--max-cost-usd reached"); regrades already running finish.
            No agent runs in a regrade, so the judge is all it spends.
        on_event: receives one line per regraded step.

    Returns:
        The :class:`RegradeResult`.

    Raises:
        UsageError: not a job folder, the job is running, the target exists, or ``-p``
            holds no task.
    """
    from cairn.lock import JobLock, is_locked
    from cairn.results.store import (
        JobPaths,
        TrialPaths,
        TrialStore,
        copy_job_folder,
        iter_trial_results,
        read_job_json,
        write_job_json,
        write_summary,
    )
    from cairn.results.summary import summarize_job

    emit = on_event or (lambda line: None)
    src = Path(job_dir).absolute()
    meta_path = JobPaths(src).job_json
    if not meta_path.is_file():
        raise UsageError(f"{job_dir} is not a job folder (no job.json)")
    if is_locked(src):
        raise UsageError(f"job {src.name} is running; regrade it after it ends")
    try:
        meta = read_job_json(src)
    except (OSError, ValueError) as exc:
        raise UsageError(f"{meta_path}: unreadable job.json ({exc})") from None
    if job_name is not None:
        try:
            check_job_name(job_name)
        except ValueError as exc:
            raise UsageError(f"--job-name: {exc}") from None
    tasks = _load_tasks(paths)
    dest = src.parent / (job_name or _default_name(src))
    if dest.exists():
        raise UsageError(f"{dest} exists; choose another --job-name")
    timeouts = Timeouts.recorded(meta.config)
    add_hosts = tuple(sorted((str(k), str(v)) for k, v in (meta.config.get("add_hosts") or {}).items()))
    copy_job_folder(src, dest)
    lock = JobLock(dest)
    lock.acquire()
    try:
        job_id = dest.name
        derived = DerivedFrom(
            kind="regrade",
            job_dir=str(src),
            job_name=src.name,
            tasks=[str(Path(p).absolute()) for p in paths] if paths else "recorded",
            at=datetime.now(UTC),
        )
        write_job_json(dest, meta.model_copy(update={"job_name": job_id, "derived_from": derived}))
        cache: dict[str, Task | None] = {}
        olds = []
        for rf in iter_trial_results(src):
            if rf.result is None:
                emit(f"unreadable {rf.path}: {rf.error}; copied unchanged")
                continue
            olds.append(rf.result)
        limit = asyncio.Semaphore(max(1, n_concurrent))
        results: list[TrialResult] = [None] * len(olds)  # type: ignore[list-item]
        spent = [0.0]
        stopped: list[str] = []
        infra_failed: list[str] = []

        async def one(i: int, old: TrialResult) -> None:
            trial_dir = dest / "trials" / old.trial_name
            task = (
                tasks.get(old.task.name) if paths else _recorded_task(src / "trials" / old.trial_name, cache)
            )
            if task is None:
                new = _unchanged(
                    old, "the task was not found" + (" under -p" if paths else " at its recorded path")
                )
            elif [s.name for s in task.steps] != [r.name for r in old.steps]:
                new = _unchanged(old, "the task's steps changed since the run")
            elif old.outcome is Outcome.CANCELLED:
                new = _unchanged(old, "the trial was cancelled")
            elif not any(step_reached(r) for r in old.steps):
                new = _unchanged(old, "no step ran")
            else:
                async with limit:
                    if max_cost_usd is not None and spent[0] >= max_cost_usd:
                        if not stopped:
                            stopped.append("max_cost")
                            emit(
                                f"--max-cost-usd {max_cost_usd:g} reached (judge spend "
                                f"${spent[0]:.4f}); no further trial is regraded"
                            )
                        new = _unchanged(
                            old,
                            f"--max-cost-usd {max_cost_usd:g} reached: the "
                            f"regrade's judge spend was ${spent[0]:.4f}",
                        )
                    else:
                        new, category = await _regrade_one(
                            task, old, trial_dir, job_id, dest, timeouts, emit, add_hosts
                        )
                        if category is Category.INFRA:
                            infra_failed.append(old.trial_id)
                        if new.regrade is not None and new.regrade.status != "not_regradable":
                            spent[0] += sum(r.judge.cost_usd or 0.0 for r in new.steps if r.judge is not None)
            store = TrialStore(TrialPaths(trial_dir))
            store.write_steps(new.steps)
            store.write_result(new)
            results[i] = new
            for s in new.regrade.steps if new.regrade else []:
                emit(
                    f"[{old.trial_name}] step {s.index} {s.name}: {_r(s.old_reward)} → "
                    f"{_r(s.new_reward)} ({s.how})"
                )
            emit(
                f"[{old.trial_name}] {new.regrade.status if new.regrade else '?'}: reward "
                f"{_r(old.reward)} → {_r(new.reward)}"
            )

        async with asyncio.TaskGroup() as tg:
            for i, old in enumerate(olds):
                tg.create_task(one(i, old))
        declared: dict[str, list[str]] = {}
        for r in results:
            declared.setdefault(r.task.name, [s.name for s in r.steps])
        write_summary(dest, summarize_job(results, declared))
        return RegradeResult(
            job_dir=dest,
            source_dir=src,
            results=results,
            stopped_by=stopped[0] if stopped else None,
            judge_cost_usd=spent[0],
            infra_failed=infra_failed,
            rerun_command=_rerun_command(meta.config),
            source_args=shlex.join(_source_args(meta.config)),
        )
    finally:
        lock.release()


async def _regrade_one(
    task: Task,
    old: TrialResult,
    trial_dir: Path,
    job_id: str,
    dest: Path,
    timeouts: Timeouts,
    emit: RegradeSink,
    add_hosts: tuple[tuple[str, str], ...],
) -> tuple[TrialResult, Category | None]:
    """One trial's regrade; a failure that stops it copies the trial unchanged with why.

    Returns:
        The trial's new result, and ``Category.INFRA`` when an infra failure (a lost engine)
        stopped its regrade (else ``None``).
    """
    try:
        return await _TrialRegrade(
            task,
            old,
            trial_dir,
            job_id=job_id,
            job_dir=dest,
            timeouts=timeouts,
            emit=emit,
            add_hosts=add_hosts,
        ).run(), None
    except SandboxLostError as exc:
        return _unchanged(old, f"infra: {exc.kind.value}: {exc}"), Category.INFRA
    except (TrialFailure, UsageError) as exc:
        return _unchanged(old, f"{exc}"), None


def _rerun_command(config: Mapping[str, Any]) -> str:
    """``cairn run`` with the source job's tasks and agent and ``--snapshot-steps`` (a new job
    name), the way to record a job this command can regrade."""
    parts = ["cairn", "run", *_source_args(config)]
    if config.get("agent"):
        parts += ["-a", str(config["agent"])]
    if config.get("model"):
        parts += ["-m", str(config["model"])]
    if (config.get("attempts") or 1) != 1:
        parts += ["-k", str(config["attempts"])]
    parts += ["--snapshot-steps", "--job-name", f"{config.get('job_name') or 'job'}-snap"]
    return shlex.join(parts)


def _source_args(config: Mapping[str, Any]) -> list[str]:
    """A job config's task sources as ``cairn run`` options."""
    parts: list[str] = []
    for p in config.get("paths") or []:
        parts += ["-p", str(p)]
    for d in config.get("datasets") or []:
        parts += ["-d", str(d)]
    for r in config.get("repos") or []:
        parts += ["--repo", str(r)]
    return parts


def _r(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def regrade_job(job_dir: Path, **kwargs: Any) -> RegradeResult:
    """Regrade a job (blocking). Arguments as :func:`aregrade_job`.

    Returns:
        The :class:`RegradeResult`.
    """
    return asyncio.run(aregrade_job(job_dir, **kwargs))


__all__ = ["RegradeResult", "aregrade_job", "regrade_job"]
