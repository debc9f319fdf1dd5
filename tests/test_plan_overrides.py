"""What a job changes in the tasks it runs (issue 19): extra instructions, resource overrides and
extra artifacts applied to the task the trial gets, the trial id moved by them (and only when
set), and the specific timeout multipliers — the build one checked where the sandbox spec is
made. No sandbox is started."""

from __future__ import annotations

from pathlib import Path

from cairn.plan import JobConfig, RunOptions, TrialPlan, trial_id
from cairn.task.load import load_task
from taskgen import StepSpec, write_task


def test_effective_task_appends_overrides_and_adds_artifacts(tmp_path):
    path = write_task(
        tmp_path, "two", steps=[StepSpec("a", instruction="Do a.\n"), StepSpec("b", instruction="Do b.")]
    )
    toml = path / "task.toml"
    toml.write_text('artifacts = ["/app/keep.txt"]\n' + toml.read_text() + "cpus = 4\nmemory_mb = 8192\n")
    task = load_task(path)
    assert [a.source for a in task.steps[0].artifacts] == ["/app/keep.txt"]
    cfg = JobConfig(
        paths=(path,),
        extra_instructions=("File text.\n", "Inline."),
        override_memory_mb=512,
        override_cpus=0.5,
        artifacts=("/app/keep.txt", "/app/more"),
    )
    eff = cfg.effective_task(task)
    assert [s.instruction for s in eff.steps] == [
        "Do a.\n\nFile text.\n\nInline.",
        "Do b.\n\nFile text.\n\nInline.",
    ]
    assert (eff.environment.cpus, eff.environment.memory_mb) == (0.5, 512)
    assert eff.environment.storage_mb == task.environment.storage_mb
    assert [a.source for a in eff.steps[0].artifacts] == ["/app/keep.txt", "/app/more"]
    assert eff.content_hash == task.content_hash  # the folder's hash; the id carries the rest
    assert [s.instruction for s in task.steps] == ["Do a.\n", "Do b."]  # the loaded task kept
    assert JobConfig(paths=(path,)).effective_task(task) is task


def test_trial_ids_move_with_what_the_job_changes_and_only_then(tmp_path):
    base = trial_id("t", "h", "oracle", {}, None, "docker", 1)
    assert trial_id("t", "h", "oracle", {}, None, "docker", 1, overrides={}) == base
    plain = JobConfig(paths=(tmp_path,))
    assert plain.task_overrides() == {}
    extra = JobConfig(paths=(tmp_path,), extra_instructions=("x",), override_memory_mb=256)
    assert extra.task_overrides() == {"extra_instructions": ["x"], "override_memory_mb": 256}
    moved = trial_id("t", "h", "oracle", {}, None, "docker", 1, overrides=extra.task_overrides())
    assert moved != base
    # timeouts and artifacts do not change what the agent is asked or given: the id stays
    same = JobConfig(paths=(tmp_path,), agent_timeout_multiplier=2.0, artifacts=("/a",))
    assert same.task_overrides() == {}


def test_specific_multipliers_replace_the_global_one_in_run_options(tmp_path):
    opts = JobConfig(
        paths=(tmp_path,),
        timeout_multiplier=3.0,
        verifier_timeout_multiplier=0.5,
        build_timeout_multiplier=4.0,
    ).run_options()
    t = opts.timeouts
    assert (t.agent, t.verifier, t.agent_setup, t.build) == (3.0, 0.5, 3.0, 4.0)
    assert RunOptions(timeout_multiplier=2.0).timeouts.verifier == 2.0


def test_build_multiplier_reaches_the_sandbox_spec(tmp_path):
    from cairn.agents.oracle import OracleAgent
    from cairn.trial.run import resolve_trial

    path = write_task(tmp_path, "b", toml_extra="")
    toml = path / "task.toml"
    toml.write_text(toml.read_text() + "build_timeout_sec = 100\n")
    cfg = JobConfig(
        paths=(path,), timeout_multiplier=2.0, build_timeout_multiplier=7.0, override_memory_mb=321
    )
    task = cfg.effective_task(load_task(path))
    trial_dir = tmp_path / "jobs" / "j" / "trials" / "b"
    trial_dir.mkdir(parents=True)
    plan = TrialPlan(
        task=task,
        agent_name="oracle",
        agent_kwargs={},
        model=None,
        backend="docker",
        attempt=1,
        trial_id="0" * 64,
        trial_dir=trial_dir,
        job_id="j",
        job_dir=Path(trial_dir).parents[1],
        options=cfg.run_options(),
    )
    spec = resolve_trial(plan, OracleAgent()).spec
    assert spec.build_timeout_sec == 700.0  # 100 x 7, not x 2
    assert spec.memory_mb == 321


def test_a_torn_job_json_is_rebuilt_with_the_overrides_so_trial_ids_match(tmp_path):
    import json

    from cairn.job import resume_config

    job = tmp_path / "jobs" / "j"
    trial = job / "trials" / "t__1__abcdef12"
    trial.mkdir(parents=True)
    (job / "job.json").write_text('{"torn')
    (trial / "config.json").write_text(
        json.dumps(
            {
                "task": {"name": "t", "content_hash": "h", "path": str(tmp_path / "t")},
                "agent": {"name": "oracle", "kwargs": {}},
                "model": None,
                "backend": "docker",
                "attempt": 1,
                "trial_id": "x",
                "job_id": "j",
                "options": {
                    "timeout_multiplier": 2.0,
                    "extra_instructions": ["Be brief."],
                    "resource_overrides": {"memory_mb": 512},
                    "timeout_multipliers": {"verifier": 3.0},
                    "extra_artifacts": ["/app/a"],
                },
            }
        )
    )
    cfg = resume_config(job)
    assert cfg.extra_instructions == ("Be brief.",) and cfg.override_memory_mb == 512
    assert (cfg.verifier_timeout_multiplier, cfg.timeout_multiplier) == (3.0, 2.0)
    assert cfg.artifacts == ("/app/a",)
    assert cfg.task_overrides() == {"extra_instructions": ["Be brief."], "override_memory_mb": 512}


def test_a_regrade_builds_with_the_jobs_build_multiplier(tmp_path):
    """cairn regrade restarts the sandbox as the job ran it: its image build is bounded by the
    recorded --build-timeout-multiplier (it used --timeout-multiplier before)."""
    from cairn.job.discover import cancelled_result
    from cairn.job.regrade import _TrialRegrade
    from cairn.plan import Timeouts

    path = write_task(tmp_path, "rb", toml_extra="")
    toml = path / "task.toml"
    toml.write_text(toml.read_text() + "build_timeout_sec = 100\n")
    task = load_task(path)
    trial_dir = tmp_path / "jobs" / "j" / "trials" / "rb"
    trial_dir.mkdir(parents=True)
    plan = TrialPlan(
        task=task,
        agent_name="oracle",
        agent_kwargs={},
        model=None,
        backend="docker",
        attempt=1,
        trial_id="1" * 64,
        trial_dir=trial_dir,
        job_id="j",
        job_dir=trial_dir.parents[1],
        options=RunOptions(),
    )
    timeouts = Timeouts.recorded({"timeout_multiplier": 2.0, "build_timeout_multiplier": 7.0})
    regrade = _TrialRegrade(
        task,
        cancelled_result(plan, "test"),
        trial_dir,
        job_id="j",
        job_dir=trial_dir.parents[1],
        timeouts=timeouts,
        emit=print,
    )
    assert regrade.spec.build_timeout_sec == 700.0  # 100 x 7, not x 2
    assert (timeouts.default, timeouts.verifier) == (2.0, 2.0)
