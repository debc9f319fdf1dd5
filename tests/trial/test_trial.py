"""Trial engine acceptance (issue 5): exact step order, stop rules, outcomes, results on disk.

Every test runs a real task folder in a real sandbox (docker, and local when it exists).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cairn.agents.nop import NopAgent
from taskgen import StepSpec, constant_reward, reward_if, write_task
from testbed import run_trial_sync, validate_result_files

pytestmark = pytest.mark.slow


def _trial_dir(jobs: Path) -> Path:
    (d,) = list((jobs / "job" / "trials").iterdir())
    return d


def _two_steps(tmp_path: Path) -> Path:
    return write_task(
        tmp_path,
        "two-steps",
        strategy="final",
        steps=[
            StepSpec(
                "write",
                instruction="Write 1 to /app/a.txt.",
                solve="echo 1 > /app/a.txt\n",
                test=reward_if('[ "$(cat /app/a.txt)" = 1 ]'),
                min_reward=1.0,
            ),
            StepSpec(
                "append",
                instruction="Keep a.txt; write 2 to /app/b.txt.",
                solve="echo 2 > /app/b.txt\n",
                test=reward_if('[ "$(cat /app/a.txt)" = 1 ] && [ "$(cat /app/b.txt)" = 2 ]'),
            ),
        ],
    )


def test_two_steps_oracle_passes(tmp_path, backend):
    task = _two_steps(tmp_path / "tasks")
    r = run_trial_sync(task, "oracle", backend, tmp_path / "jobs")
    assert [s.reward for s in r.steps] == [1.0, 1.0]
    assert r.reward == 1.0 and r.outcome.value == "completed" and r.passed
    assert r.steps_run == 2 and r.stop_reason is None
    d = _trial_dir(tmp_path / "jobs")
    validate_result_files(d)
    assert (d / "steps" / "01-write" / "verifier" / "reward.txt").read_text().strip() == "1"
    assert (d / "steps" / "02-append" / "verifier" / "test-stdout.txt").exists()
    assert (d / "steps" / "02-append" / "artifacts" / "manifest.json").exists()


def test_two_steps_nop_stops_after_write(tmp_path, backend):
    task = _two_steps(tmp_path / "tasks")
    r = run_trial_sync(task, "nop", backend, tmp_path / "jobs")
    assert r.steps[0].reward == 0.0
    assert r.outcome.value == "stopped" and r.stopped_after == "write"
    assert r.stop_reason.kind == "min_reward" and r.stop_reason.key == "reward"
    assert r.steps[1].source.value == "not-run"
    assert r.reward == 0.0 and r.steps_run == 1 and not r.passed
    validate_result_files(_trial_dir(tmp_path / "jobs"))


def _three(tmp_path, rewards, *, strategy=None, gates=(None, None, None)):
    steps = [
        StepSpec(f"s{i + 1}", test=constant_reward(v) if v is not None else "true\n", min_reward=g)
        for i, (v, g) in enumerate(zip(rewards, gates, strict=True))
    ]
    return write_task(tmp_path / "tasks", "three", steps=steps, strategy=strategy)


@pytest.mark.parametrize("strategy", ["mean", "final"])
def test_three_steps_no_gates(tmp_path, backend, strategy):
    r = run_trial_sync(_three(tmp_path, [1, 0, 0.5], strategy=strategy), "nop", backend, tmp_path / "jobs")
    assert r.reward == pytest.approx(0.5) and r.reward_all_steps == pytest.approx(0.5)
    assert r.outcome.value == "completed" and not r.passed


def test_three_steps_gate_stops_after_first(tmp_path, backend):
    r = run_trial_sync(
        _three(tmp_path, [0.25, 1, 1], gates=(0.5, None, None)), "nop", backend, tmp_path / "jobs"
    )
    assert r.steps_run == 1 and r.reward == pytest.approx(0.25)
    assert r.reward_all_steps == pytest.approx(0.25 / 3)
    assert r.outcome.value == "stopped"
    assert [s.source.value for s in r.steps] == ["verifier", "not-run", "not-run"]


def test_table_gate_missing_key_stops(tmp_path, backend):
    r = run_trial_sync(
        _three(tmp_path, [{"reward": 1}, 1, 1], gates=({"safety": 1}, None, None)),
        "nop",
        backend,
        tmp_path / "jobs",
    )
    assert r.outcome.value == "stopped" and r.reward == 1.0 and not r.passed
    assert r.stop_reason.key == "safety" and r.stop_reason.value is None


def test_final_strategy_missing_reward_is_task_error(tmp_path, backend):
    r = run_trial_sync(_three(tmp_path, [1, 1, None], strategy="final"), "nop", backend, tmp_path / "jobs")
    assert r.reward is None and r.outcome.value == "errored"
    assert r.error.kind.value == "reward_missing" and r.error.category.value == "task"
    assert r.error.step == "s3"


def test_gate_on_last_step_stops_nothing(tmp_path, backend):
    r = run_trial_sync(
        _three(tmp_path, [1, 1, 0.5], gates=(None, None, 1.0)), "nop", backend, tmp_path / "jobs"
    )
    assert r.outcome.value == "completed" and r.steps_run == 3
    assert not r.steps[2].passed and r.steps[2].gates[0].passed is False


def test_mean_over_keys(tmp_path, backend):
    task = write_task(
        tmp_path / "tasks",
        "keys",
        steps=[
            StepSpec("a", test=constant_reward({"correctness": 1, "evidence": 1})),
            StepSpec("b", test=constant_reward({"correctness": 0.5})),
            StepSpec("c", test="true\n"),
        ],
    )
    r = run_trial_sync(task, "nop", backend, tmp_path / "jobs")
    assert r.rewards == {"correctness": pytest.approx(0.75), "evidence": pytest.approx(0.5)}


def test_declared_order_one_sandbox(tmp_path, backend):
    task = write_task(
        tmp_path / "tasks",
        "order",
        steps=[
            StepSpec(
                "zeta",
                solve="echo zeta >> /app/order; cat /proc/1/cmdline | md5sum > /app/id1\n",
                test=constant_reward(1),
            ),
            StepSpec(
                "alpha",
                solve="echo alpha >> /app/order\n",
                test=reward_if('[ "$(cat /app/order | tr "\\n" ,)" = "zeta,alpha," ]'),
            ),
        ],
    )
    r = run_trial_sync(task, "oracle", backend, tmp_path / "jobs")
    assert [s.name for s in r.steps] == ["zeta", "alpha"]
    assert r.steps[1].reward == 1.0
    d = _trial_dir(tmp_path / "jobs")
    assert (d / "steps" / "01-zeta").is_dir() and (d / "steps" / "02-alpha").is_dir()


def test_workdir_copy_keeps_agent_files(tmp_path, backend):
    task = write_task(
        tmp_path / "tasks",
        "wd",
        steps=[
            StepSpec(
                "one",
                workdir={"data.txt": "v1\n"},
                solve="echo mine > notes.txt\n",
                test=reward_if('[ "$(cat /app/data.txt)" = v1 ]'),
            ),
            StepSpec(
                "two",
                workdir={"data.txt": "v2\n"},
                solve="pwd > /app/cwd.txt\n",
                test=reward_if(
                    '[ "$(cat /app/data.txt)" = v2 ] && [ "$(cat /app/notes.txt)" = mine ]'
                    ' && [ "$(cat /app/cwd.txt)" = /app ]'
                ),
            ),
        ],
    )
    r = run_trial_sync(task, "oracle", backend, tmp_path / "jobs")
    assert [s.reward for s in r.steps] == [1.0, 1.0]


def _setup_fail(tmp_path, on_step: int):
    steps = [StepSpec(f"s{i}", test=constant_reward(1)) for i in (1, 2, 3)]
    steps[on_step - 1].workdir = {"setup.sh": "echo boom >&2\nexit 3\n"}
    return write_task(tmp_path / "tasks", "setup", steps=steps)


def test_setup_failure_later_step_is_candidate(tmp_path, backend):
    r = run_trial_sync(_setup_fail(tmp_path, 2), "nop", backend, tmp_path / "jobs")
    s2 = r.steps[1]
    assert s2.error.kind.value == "setup_failed" and s2.error.category.value == "candidate"
    assert s2.error.detail["exit_code"] == 3 and "boom" in s2.error.detail["stderr_tail"]
    assert s2.source.value == "candidate_error" and s2.reward == 0.0 and s2.agent_exit is None
    assert r.steps[2].source.value == "not-run"
    assert r.outcome.value == "stopped" and r.stop_reason.kind == "step_error"


def test_setup_failure_first_step_is_task_error(tmp_path, backend):
    r = run_trial_sync(_setup_fail(tmp_path, 1), "nop", backend, tmp_path / "jobs")
    assert r.outcome.value == "errored"
    assert r.error.kind.value == "setup_failed" and r.error.category.value == "task"


def test_background_server_survives_finished_agent(tmp_path, backend):
    task = write_task(
        tmp_path / "tasks",
        "server",
        instruction="serve",
        solve="cd /tmp && nohup python3 -m http.server 8000 >/dev/null 2>&1 &\nsleep 1\n",
        test=reward_if(
            "python3 -c \"import urllib.request as u; u.urlopen('http://127.0.0.1:8000/', timeout=5)\""
        ),
    )
    r = run_trial_sync(task, "oracle", backend, tmp_path / "jobs")
    assert r.reward == 1.0


def test_timed_out_agent_leaves_no_process(tmp_path, backend):
    task = write_task(
        tmp_path / "tasks",
        "sleeper",
        toml_extra="[agent]\ntimeout_sec = 2\n",
        solve="(sleep 4444 &)\nsleep 30\n",
        test=reward_if(
            "! (for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; "
            "done 2>/dev/null | grep -q '^sleep 4444')"
        ),
    )
    r = run_trial_sync(task, "oracle", backend, tmp_path / "jobs")
    assert r.steps[0].agent_exit.value == "timeout"
    assert r.reward == 1.0


@pytest.mark.parametrize(
    "content, kind",
    [
        ("1abc", "reward_parse_error"),
        ("nan", "reward_parse_error"),
        ("-inf", "reward_parse_error"),
        ("Infinity", "reward_parse_error"),
        ("1\\n2", "reward_parse_error"),
        ("", "reward_empty"),
    ],
)
def test_bad_reward_txt(tmp_path, backend, content, kind):
    task = write_task(
        tmp_path / "tasks", "bad", test=f"printf '%b' '{content}' > /logs/verifier/reward.txt\n"
    )
    r = run_trial_sync(task, "nop", backend, tmp_path / "jobs")
    assert r.outcome.value == "errored" and r.error.kind.value == kind
    assert r.steps[0].reward_file == "reward.txt"


def test_reward_json_wins_and_exit_code_ignored(tmp_path, backend):
    task = write_task(
        tmp_path / "tasks",
        "both",
        test=(
            "echo 0 > /logs/verifier/reward.txt\necho '{\"reward\": 1}' > /logs/verifier/reward.json\n"
            "exit 3\n"
        ),
    )
    r = run_trial_sync(task, "nop", backend, tmp_path / "jobs")
    assert r.reward == 1.0 and r.steps[0].reward_file == "reward.json"
    assert r.steps[0].verifier_exit_code == 3
    assert any("reward.json" in w for w in r.steps[0].warnings)


def test_set_e_test_exits_before_reward(tmp_path, backend):
    task = write_task(
        tmp_path / "tasks", "sete", test="set -e\necho checking\nfalse\necho 1 > /logs/verifier/reward.txt\n"
    )
    r = run_trial_sync(task, "nop", backend, tmp_path / "jobs")
    assert r.error.kind.value == "reward_missing"
    assert r.error.detail["exit_code"] == 1 and "checking" in r.error.detail["stdout_tail"]


def test_agent_timeout_after_answer_still_scores(tmp_path, backend):
    task = write_task(
        tmp_path / "tasks",
        "late",
        toml_extra="[agent]\ntimeout_sec = 2\n",
        solve="echo done > /app/answer\nsleep 60\n",
        test=reward_if("test -f /app/answer"),
    )
    r = run_trial_sync(task, "oracle", backend, tmp_path / "jobs")
    assert r.steps[0].agent_exit.value == "timeout" and r.reward == 1.0
    assert r.outcome.value == "completed"


def test_agent_timeout_without_answer_scores_zero(tmp_path, backend):
    task = write_task(
        tmp_path / "tasks",
        "slow",
        toml_extra="[agent]\ntimeout_sec = 2\n",
        solve="sleep 60\necho done > /app/answer\n",
        test=reward_if("test -f /app/answer"),
    )
    r = run_trial_sync(task, "oracle", backend, tmp_path / "jobs")
    assert r.reward == 0.0 and r.error is None and r.outcome.value == "completed"


def test_verifier_timeout(tmp_path, backend):
    task = write_task(
        tmp_path / "tasks",
        "vt",
        toml_extra="[verifier]\ntimeout_sec = 3\n",
        test="sleep 1000\necho 1 > /logs/verifier/reward.txt\n",
    )
    r = run_trial_sync(task, "nop", backend, tmp_path / "jobs")
    assert r.error.kind.value == "verifier_timeout" and r.reward is None
    assert r.steps[0].timings.verifier_sec < 10


def test_planted_reward_never_read(tmp_path, backend):
    task = write_task(
        tmp_path / "tasks",
        "plant",
        solve="echo 1 > /logs/verifier/reward.txt\necho '{\"reward\": 1}' > /logs/verifier/reward.json\n",
        test="echo 0 > /logs/verifier/reward.txt\n",
    )
    r = run_trial_sync(task, "oracle", backend, tmp_path / "jobs")
    assert r.reward == 0.0
    planted = _trial_dir(tmp_path / "jobs") / "steps" / "01-main" / "agent" / "planted-verifier-logs"
    assert (planted / "reward.txt").read_text().strip() == "1"


def test_tests_and_solution_absent_during_agent(tmp_path, backend):
    task = write_task(
        tmp_path / "tasks",
        "peek",
        solve="if [ -e /tests ]; then echo yes > /app/saw_tests; fi\nls /solution > /app/sol.txt 2>&1\n",
        test=reward_if("[ ! -e /app/saw_tests ] && [ ! -e /solution ]"),
    )
    r = run_trial_sync(task, "oracle", backend, tmp_path / "jobs")
    assert r.reward == 1.0


def test_secret_masked_everywhere(tmp_path, backend, monkeypatch):
    monkeypatch.setenv("CAIRN_TEST_SECRET", "s3cr3t-value-42")
    task = write_task(
        tmp_path / "tasks",
        "secret",
        toml_extra='[verifier.env]\nTOKEN = "${CAIRN_TEST_SECRET}"\n',
        test='echo "token is $TOKEN"; echo "err $TOKEN" >&2\n'
        '[ "$TOKEN" = s3cr3t-value-42 ] && echo 1 > /logs/verifier/reward.txt\n',
    )
    r = run_trial_sync(task, "nop", backend, tmp_path / "jobs")
    assert r.reward == 1.0
    for p in (tmp_path / "jobs").rglob("*"):
        if p.is_file():
            assert b"s3cr3t-value-42" not in p.read_bytes(), p
    out = _trial_dir(tmp_path / "jobs") / "steps" / "01-main" / "verifier" / "test-stdout.txt"
    assert "***" in out.read_text()


def test_missing_template_is_config_error(tmp_path, backend, monkeypatch):
    monkeypatch.delenv("CAIRN_TEST_MISSING", raising=False)
    task = write_task(
        tmp_path / "tasks", "tmpl", toml_extra='[verifier.env]\nTOKEN = "${CAIRN_TEST_MISSING}"\n'
    )
    r = run_trial_sync(task, "nop", backend, tmp_path / "jobs")
    assert r.outcome.value == "errored" and r.error.kind.value == "config_error"
    assert "CAIRN_TEST_MISSING" in r.error.message


def test_artifacts_collected(tmp_path, backend):
    task = write_task(
        tmp_path / "tasks",
        "arts",
        toml_extra='[environment.env]\nX = "1"\n',
        solve="mkdir -p /app/out && echo hi > /app/out/r.txt && echo no > /app/out/skip.log\n"
        "echo art > /logs/artifacts/a.txt\n",
    )
    (task / "task.toml").write_text(
        'artifacts = [{ source = "/app/out", destination = "out", exclude = ["*.log"] }, "/nope"]\n'
        + (task / "task.toml").read_text()
    )
    r = run_trial_sync(task, "oracle", backend, tmp_path / "jobs")
    arts = _trial_dir(tmp_path / "jobs") / "steps" / "01-main" / "artifacts"
    assert (arts / "out" / "r.txt").read_text() == "hi\n"
    assert not (arts / "out" / "skip.log").exists()
    assert (arts / "a.txt").read_text() == "art\n"
    assert arts.stat().st_mode & 0o022 == 0  # not group/world-writable on the host
    manifest = json.loads((arts / "manifest.json").read_text())
    assert {m["source"]: m["status"] for m in manifest} == {
        "/app/out": "copied",
        "/nope": "failed",
        "/logs/artifacts": "copied",
    }
    assert r.reward == 1.0


def test_verifier_files_do_not_leak_into_next_step(tmp_path, backend):
    """Step 1's verifier output is gone before step 2's agent runs, and is not called planted."""
    task = write_task(
        tmp_path / "tasks",
        "leak",
        steps=[
            StepSpec(
                "one",
                test="echo secret-answer > /logs/verifier/notes.txt\necho 1 > /logs/verifier/reward.txt\n",
            ),
            StepSpec(
                "two", solve="ls /logs/verifier > /app/seen.txt\n", test=reward_if("[ ! -s /app/seen.txt ]")
            ),
        ],
    )
    r = run_trial_sync(task, "oracle", backend, tmp_path / "jobs")
    assert [s.reward for s in r.steps] == [1.0, 1.0]
    assert not any("planted" in w for s in r.steps for w in s.warnings)
    d = _trial_dir(tmp_path / "jobs")
    assert not (d / "steps" / "02-two" / "agent" / "planted-verifier-logs").exists()


def test_agent_logs_leave_the_sandbox_before_the_verifier(tmp_path, backend):
    """What the agent writes in /logs/agent is on the host and gone from the sandbox before the
    verifier runs (design §4.2 item 6), and step 2's agent sees none of step 1's; the
    planted-file evidence of the same step keeps its own folder."""
    task = write_task(
        tmp_path / "tasks",
        "agentlogs",
        steps=[
            StepSpec(
                "one",
                solve="echo step-one-notes > /logs/agent/notes.txt\necho fake > /logs/verifier/reward.txt\n",
                test=reward_if(
                    '[ -z "$(ls -A /logs/agent)" ] && '
                    '[ -z "$(ls -A /logs/verifier)" ] && '
                    '[ -z "$(ls -d /logs/.cairn-* 2>/dev/null)" ]'
                ),
            ),
            StepSpec(
                "two", solve="ls -A /logs/agent > /app/seen.txt\n", test=reward_if("[ ! -s /app/seen.txt ]")
            ),
        ],
    )
    r = run_trial_sync(task, "oracle", backend, tmp_path / "jobs")
    assert [s.reward for s in r.steps] == [1.0, 1.0]
    d = _trial_dir(tmp_path / "jobs")
    one = d / "steps" / "01-one" / "agent"
    assert (one / "notes.txt").read_text(encoding="utf-8") == "step-one-notes\n"
    assert (one / "planted-verifier-logs" / "reward.txt").read_text(encoding="utf-8") == "fake\n"
    assert any("planted" in w for w in r.steps[0].warnings)
    assert not (d / "steps" / "02-two" / "agent" / "notes.txt").exists()


@pytest.mark.docker
def test_kept_sandbox_has_no_tests_after_the_last_step(tmp_path):
    """--keep-sandbox: the kept container looks as after every other verifier — no /tests, an
    empty /logs/verifier (design §4.6 item 5, §11)."""
    from testbed import backend_available

    if not backend_available("docker"):
        pytest.skip("no docker")
    import docker

    client = docker.from_env()
    bad = write_task(tmp_path / "tasks", "keptclean", test="echo 0 > /logs/verifier/reward.txt\n")
    r = run_trial_sync(bad, "oracle", "docker", tmp_path / "jobs", keep_sandbox=True)
    try:
        kept = client.containers.list(all=True, filters={"label": f"cairn.trial={r.trial_id}"})
        assert not r.passed and len(kept) == 1
        assert kept[0].exec_run(["test", "-e", "/tests"]).exit_code == 1
        assert kept[0].exec_run(["ls", "-A", "/logs/verifier"]).output == b""
        assert kept[0].exec_run(["test", "-e", "/solution"]).exit_code == 1
    finally:
        for c in client.containers.list(all=True, filters={"label": f"cairn.trial={r.trial_id}"}):
            c.remove(force=True)


@pytest.mark.docker
def test_keep_sandbox_keeps_failed_trial_only(tmp_path):
    """--keep-sandbox leaves a failed trial's container running (until `cairn clean`); a
    passing trial's container is removed as usual."""
    from testbed import backend_available

    if not backend_available("docker"):
        pytest.skip("no docker")
    import docker

    client = docker.from_env()
    good = write_task(tmp_path / "tasks", "good")
    bad = write_task(tmp_path / "tasks", "bad", test="echo 0 > /logs/verifier/reward.txt\n")
    r_good = run_trial_sync(good, "nop", "docker", tmp_path / "jobs-good", keep_sandbox=True)
    r_bad = run_trial_sync(bad, "nop", "docker", tmp_path / "jobs-bad", keep_sandbox=True)
    try:
        kept = client.containers.list(all=True, filters={"label": f"cairn.trial={r_bad.trial_id}"})
        gone = client.containers.list(all=True, filters={"label": f"cairn.trial={r_good.trial_id}"})
        assert r_good.passed and not r_bad.passed
        assert len(kept) == 1 and kept[0].status == "running" and gone == []
        assert kept[0].exec_run(["test", "-d", "/logs/verifier"]).exit_code == 0
    finally:
        for c in client.containers.list(all=True, filters={"label": f"cairn.trial={r_bad.trial_id}"}):
            c.remove(force=True)


def test_environment_healthcheck_failure_is_task_error(tmp_path, backend):
    task = write_task(tmp_path / "tasks", "envhc", toml_extra="")
    (task / "task.toml").write_text(
        (task / "task.toml").read_text()
        + (
            '\n[environment.healthcheck]\ncommand = "test -f /nope"\ninterval_sec = 0.1\n'
            "start_interval_sec = 0.1\nretries = 2\n"
        )
    )
    r = run_trial_sync(task, "nop", backend, tmp_path / "jobs")
    assert r.outcome.value == "errored"
    assert r.error.kind.value == "env_healthcheck_failed" and r.error.category.value == "task"
    assert r.steps[0].source.value == "not-run"


def test_step_healthcheck_after_setup_and_before_agent(tmp_path, backend):
    """A step healthcheck runs after setup.sh (which makes it pass) and fails on a later step
    whose state the agent broke → candidate error, scored 0, trial stopped."""
    hc = (
        '[steps.healthcheck]\ncommand = "test -f /app/ready"\ninterval_sec = 0.1\n'
        "start_interval_sec = 0.1\nretries = 2\n"
    )
    task = write_task(
        tmp_path / "tasks",
        "stephc",
        steps=[
            StepSpec(
                "one",
                workdir={"setup.sh": "touch /app/ready\n"},
                toml_extra=hc,
                solve="rm -f /app/ready\n",
                test=constant_reward(1),
            ),
            StepSpec("two", toml_extra=hc, test=constant_reward(1)),
            StepSpec("three", test=constant_reward(1)),
        ],
    )
    r = run_trial_sync(task, "oracle", backend, tmp_path / "jobs")
    assert r.steps[0].reward == 1.0
    s2 = r.steps[1]
    assert s2.error.kind.value == "healthcheck_failed" and s2.error.category.value == "candidate"
    assert s2.source.value == "candidate_error" and s2.reward == 0.0
    assert r.outcome.value == "stopped" and r.steps[2].source.value == "not-run"


def test_hardened_verify_kills_agent_processes_and_python_hooks(tmp_path, backend):
    """--hardened-verify: a process the agent left running (even after finishing normally) and a
    planted sitecustomize.py are gone before the verifier runs."""
    task = write_task(
        tmp_path / "tasks",
        "hard",
        solve="nohup sh -c 'i=0; while true; do i=$((i+1)); echo $i > /app/tick; sleep 0.2; done'"
        " >/dev/null 2>&1 &\n"
        "d=$(python3 -c 'import site; print(site.getsitepackages()[0])')\n"
        'mkdir -p "$d" && echo \'open("/app/hooked", "w")\' > "$d/sitecustomize.py"\n'
        "sleep 0.5\n",
        # a counter, not `date`: a live loop changes it within the 3 s window even on a loaded
        # machine (a second-resolution clock made the unhardened run flaky under load)
        test=(
            "python3 -c 'pass'\nsleep 0.5\na=$(cat /app/tick)\n"
            'for k in $(seq 30); do sleep 0.1; b=$(cat /app/tick); [ "$a" != "$b" ] && break; done\n'
            + reward_if('[ "$a" = "$b" ] && [ ! -e /app/hooked ]')
        ),
    )
    r = run_trial_sync(task, "oracle", backend, tmp_path / "jobs", hardened_verify=True)
    assert r.reward == 1.0
    soft = run_trial_sync(task, "oracle", backend, tmp_path / "jobs-soft")
    assert soft.reward == 0.0  # without hardening the agent's loop and hook stay


def test_agent_that_breaks_bash_is_scored_zero_not_a_task_error(tmp_path, backend):
    """An agent that deletes bash leaves a sandbox the verifier cannot use: candidate error,
    scored 0 (design §6 sandbox_unusable), not the task's reward_missing."""
    task = write_task(
        tmp_path / "tasks",
        "nobash",
        steps=[
            StepSpec("break", solve="rm -f /bin/bash /usr/bin/bash\n", test=constant_reward(1)),
            StepSpec("after", test=constant_reward(1)),
        ],
    )
    r = run_trial_sync(task, "oracle", backend, tmp_path / "jobs")
    s1 = r.steps[0]
    assert s1.source.value == "candidate_error" and s1.reward == 0.0
    assert s1.error.kind.value == "sandbox_unusable" and s1.error.category.value == "candidate"
    assert r.outcome.value == "stopped" and r.steps[1].source.value == "not-run"


def test_crlf_solve_sh_is_normalised(tmp_path, backend):
    task = write_task(
        tmp_path / "tasks",
        "crlf",
        solve="echo 1 > /app/a.txt\n",
        test=reward_if('[ "$(cat /app/a.txt)" = 1 ]'),
    )
    solve = task / "solution" / "solve.sh"
    solve.write_bytes(solve.read_bytes().replace(b"\n", b"\r\n"))
    r = run_trial_sync(task, "oracle", backend, tmp_path / "jobs")
    assert r.reward == 1.0 and r.steps[0].agent_exit.value == "ok"


def test_cancel_during_agent_records_step_and_phase(tmp_path, backend):
    """Ctrl-C mid-agent: outcome cancelled, the error names the running step and phase, and
    result.json is written (the sandbox removed)."""
    import asyncio

    from cairn.plan import RunOptions, TrialPlan, trial_id
    from cairn.task.load import load_task
    from cairn.trial.run import run_trial

    path = write_task(tmp_path / "tasks", "cancel", solve="sleep 60\n")
    task = load_task(path)
    tid = trial_id(task.name, task.content_hash, "oracle", {}, None, backend, 1)
    trial_dir = tmp_path / "jobs" / "job" / "trials" / f"x__1__{tid[:8]}"
    plan = TrialPlan(
        task=task,
        agent_name="oracle",
        agent_kwargs={},
        model=None,
        backend=backend,
        attempt=1,
        trial_id=tid,
        trial_dir=trial_dir,
        job_id="cancel-" + tid[:8],
        job_dir=tmp_path / "jobs" / "job",
        options=RunOptions(),
    )

    from cairn.agents.oracle import OracleAgent

    class _Announcing(OracleAgent):
        """The oracle, saying when its run (the agent phase) has begun."""

        started: asyncio.Event

        async def run(self, instruction, sandbox, context):
            self.started.set()
            await super().run(instruction, sandbox, context)

    async def go():
        agent = _Announcing()
        agent.started = asyncio.Event()
        t = asyncio.create_task(run_trial(plan, agent=agent))
        await asyncio.wait_for(agent.started.wait(), 300)  # in the agent phase: cancel now
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t

    asyncio.run(go())
    data = json.loads((trial_dir / "result.json").read_text())
    assert data["outcome"] == "cancelled"
    assert data["error"]["kind"] == "cancelled" and data["error"]["step"] == "main"
    assert data["error"]["phase"] == "agent"


class _SetupTimeoutProbe(NopAgent):
    """An agent that records the setup timeout it is handed (and does nothing else)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[float] = []

    async def setup(self, sandbox, context) -> None:
        self.seen.append(context.timeout_sec)


@pytest.mark.docker
def test_agent_setup_gets_the_scaled_timeout_it_is_held_to(tmp_path):
    """Regression: the setup context carried the unscaled timeout while asyncio.timeout used the
    scaled one; an agent bounding its own install by ``timeout_sec`` stopped too early."""
    from testbed import backend_available

    if not backend_available("docker"):
        pytest.skip("needs docker")
    agent = _SetupTimeoutProbe()
    run_trial_sync(
        _two_steps(tmp_path),
        agent,
        "docker",
        tmp_path / "jobs",
        timeout_multiplier=3.0,
        agent_setup_timeout_sec=40.0,
    )
    assert agent.seen == [120.0]
