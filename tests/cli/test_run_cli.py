"""``cairn run / resume / report / tasks sanity`` from the command line (design §8, §9; issue 6).

Every test runs ``python3 -m cairn`` in a subprocess, on real task folders written into
tmp_path, and checks what a user sees: the exit code, what is printed (and that no traceback
is), the files under ``jobs/`` and the containers left on the engine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from cairncli import run_cairn, start_cairn
from taskgen import reward_if, write_task

TESTS = Path(__file__).resolve().parents[1]
SRC = TESTS.parent / "src"


def _env(**extra: str | None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(TESTS), str(TESTS / "helpers")])}
    env.pop("FLAKY", None)
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def cairn(*args: str, cwd: Path, timeout: float = 600, **env: str | None) -> subprocess.CompletedProcess:
    """Run ``python3 -m cairn ARGS`` to its end; stdout and stderr captured apart."""
    return run_cairn(*args, cwd=cwd, timeout=timeout, env=_env(**env))


def cairn_bg(*args: str, cwd: Path, **env: str | None) -> subprocess.Popen:
    """Start ``python3 -m cairn ARGS`` in the background."""
    return start_cairn(*args, cwd=cwd, env=_env(**env))


def no_traceback(p: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in p.stdout + p.stderr, p.stdout + p.stderr


def job_name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def containers_of(job_dir: Path) -> list:
    """Containers (running or not) labelled with this job folder."""
    import docker

    client = docker.from_env()
    try:
        return client.api.containers(  # low-level: no per-container inspect racing removals
            all=True, filters={"label": f"cairn.job_dir={job_dir.absolute()}"}
        )
    finally:
        client.close()


def _running_in_job(job_dir: Path, command: str) -> int:
    """How many of the job's running containers have a process whose command is ``command``."""
    import docker

    client = docker.from_env()
    n = 0
    try:
        for c in containers_of(job_dir):
            try:
                procs = client.api.top(c["Id"]).get("Processes") or []
            except docker.errors.APIError:
                continue  # not running (yet, or any more)
            n += any(command in " ".join(map(str, row)) for row in procs)
    finally:
        client.close()
    return n


def results_of(job_dir: Path) -> dict[str, dict]:
    """task name (plus attempt when > 1) → result.json of every trial folder."""
    out = {}
    for d in sorted((job_dir / "trials").iterdir()):
        r = json.loads((d / "result.json").read_text())
        key = r["task"]["name"] + ("" if r["attempt"] == 1 else f"#{r['attempt']}")
        out[key] = r
    return out


def wait_for(cond, timeout: float = 120, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


# ---- usage errors: exit 2, nothing started (no Docker needed) -------------------------------
@pytest.fixture
def one_task(tmp_path: Path) -> Path:
    return write_task(
        tmp_path / "tasks", "one", solve="touch /app/done\n", test=reward_if("test -f /app/done")
    )


@pytest.mark.parametrize(
    "args,message",
    [
        (["--no-such-flag"], "No such option"),
        (["-i", "nothing-matches-*"], "no task matched"),
        (["-m", "openai/gpt-4o"], "without -a the agent is oracle: add -a llm"),
        (["-a", "oracle", "-m", "openai/gpt-4o"], "takes no model"),
        (["-a", "no-such-agent"], "unknown agent"),
        (["-e", "kubernetes"], "unknown sandbox backend"),
        (["-n", "0"], "n_concurrent"),
    ],
)
@pytest.mark.docker
def test_usage_errors_exit_2(tmp_path, one_task, args, message):
    p = cairn("run", "-p", str(one_task), "-e", "docker", "--jobs-dir", "jobs", *args, cwd=tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr
    assert message in p.stderr
    no_traceback(p)
    assert not (tmp_path / "jobs").exists() or not any((tmp_path / "jobs").iterdir())


@pytest.mark.docker
def test_missing_path_exit_2(tmp_path):
    p = cairn("run", "-p", "nowhere", "-e", "docker", cwd=tmp_path)
    assert p.returncode == 2 and "no such task or dataset folder" in p.stderr
    no_traceback(p)


@pytest.mark.docker
def test_unresolved_template_exit_2_before_anything_starts(tmp_path):
    ds = tmp_path / "ds"
    write_task(ds, "fine")
    write_task(ds, "needs-key", toml_extra='[verifier.env]\nAPI_KEY = "${CAIRN_TEST_UNSET_KEY}"\n')
    p = cairn(
        "run",
        "-p",
        str(ds),
        "-e",
        "docker",
        "--jobs-dir",
        "jobs",
        "--job-name",
        "j",
        cwd=tmp_path,
        CAIRN_TEST_UNSET_KEY=None,
    )
    assert p.returncode == 2, p.stderr
    assert "CAIRN_TEST_UNSET_KEY" in p.stderr and "test/needs-key" in p.stderr
    no_traceback(p)
    assert not (tmp_path / "jobs" / "j").exists()  # nothing ran, no job folder left


def test_report_on_missing_job_exit_2(tmp_path):
    p = cairn("report", str(tmp_path / "nope"), cwd=tmp_path)
    assert p.returncode == 2 and f"{tmp_path / 'nope'} does not exist" in p.stderr


# ---- the acceptance lines of issue 6 (Docker) ---------------------------------------------
@pytest.mark.docker
@pytest.mark.slow
def test_pass_fail_broken_dataset_and_report(tmp_path):
    ds = tmp_path / "ds"
    check = reward_if("test -f /app/done")
    write_task(ds, "pass", solve="touch /app/done\n", test=check)
    write_task(ds, "fail", solve="true\n", test=check)
    write_task(ds, "broken", solve="touch /app/done\n", test="no-such-program-cairn --check\n")
    name = job_name()
    p = cairn(
        "run",
        "-p",
        str(ds),
        "-e",
        "docker",
        "--jobs-dir",
        "jobs",
        "--job-name",
        name,
        "-n",
        "3",
        cwd=tmp_path,
    )
    no_traceback(p)
    assert p.returncode == 1, p.stdout + p.stderr
    job = tmp_path / "jobs" / name
    summary = json.loads((job / "summary.json").read_text())
    assert summary["n_trials"] == 3 and summary["n_scored"] == 2
    assert summary["mean_reward"] == pytest.approx(0.5)
    assert summary["errors"] == {"reward_missing": 1}
    assert summary["outcomes"]["completed"] == 2 and summary["outcomes"]["errored"] == 1
    rs = results_of(job)
    assert rs["test/broken"]["error"]["kind"] == "reward_missing"
    assert rs["test/broken"]["error"]["category"] == "task"
    assert rs["test/broken"]["reward"] is None  # an error is never folded in as 0
    report = cairn("report", str(job), cwd=tmp_path)
    assert report.returncode == 0
    text = report.stdout
    assert "3 (completed 2, errored 1)" in text
    assert "0.50 over 2 scored trials" in text
    assert "reward_missing 1" in text
    assert text.strip() in p.stdout  # the run printed the same summary
    md = cairn("report", str(job), "--format", "markdown", cwd=tmp_path).stdout
    assert "| test/pass |" in md.replace("  ", " ") or "test/pass" in md
    js = json.loads(cairn("report", str(job), "--format", "json", cwd=tmp_path).stdout)
    assert js["mean_reward"] == pytest.approx(0.5) and js["errors"] == {"reward_missing": 1}


@pytest.mark.docker
@pytest.mark.slow
def test_invalid_reward_json_no_traceback(tmp_path):
    ds = tmp_path / "ds"
    write_task(ds, "good", solve="touch /app/done\n", test=reward_if("test -f /app/done"))
    write_task(ds, "badjson", test="echo '{\"reward\": 1,,}' > /logs/verifier/reward.json\n")
    name = job_name()
    p = cairn(
        "run",
        "-p",
        str(ds),
        "-e",
        "docker",
        "--jobs-dir",
        "jobs",
        "--job-name",
        name,
        "-n",
        "2",
        cwd=tmp_path,
    )
    no_traceback(p)
    assert p.returncode == 1
    rs = results_of(tmp_path / "jobs" / name)
    assert set(rs) == {"test/good", "test/badjson"}
    assert rs["test/good"]["reward"] == 1.0 and rs["test/good"]["outcome"] == "completed"
    assert rs["test/badjson"]["error"]["kind"] == "reward_parse_error"


FLAKY_TEST = (
    'if [ "$FLAKY" = 1 ]; then echo "flaky: no reward this time"; exit 0; fi\n'
    "echo 1 > /logs/verifier/reward.txt\n"
)


@pytest.mark.docker
@pytest.mark.slow
def test_resume_rules_with_flaky_verifier(tmp_path):
    ds = tmp_path / "ds"
    write_task(ds, "flaky", toml_extra='[verifier.env]\nFLAKY = "${FLAKY:-0}"\n', test=FLAKY_TEST)
    write_task(ds, "steady")
    name = job_name()
    job = tmp_path / "jobs" / name
    first = cairn(
        "run",
        "-p",
        str(ds),
        "-e",
        "docker",
        "--jobs-dir",
        "jobs",
        "--job-name",
        name,
        cwd=tmp_path,
        FLAKY="1",
    )
    assert first.returncode == 1, first.stderr
    rs = results_of(job)
    assert rs["test/flaky"]["outcome"] == "errored"
    assert rs["test/flaky"]["error"]["category"] == "task"
    steady_file = next((job / "trials").glob("test-steady__1__*")) / "result.json"
    flaky_file = next((job / "trials").glob("test-flaky__1__*")) / "result.json"
    steady_bytes, flaky_bytes = steady_file.read_bytes(), flaky_file.read_bytes()

    plain = cairn("resume", str(job), cwd=tmp_path)  # without FLAKY: still nothing re-runs
    no_traceback(plain)
    assert plain.returncode == 1
    assert "step 1/1" not in plain.stdout + plain.stderr  # no trial ran
    assert flaky_file.read_bytes() == flaky_bytes and steady_file.read_bytes() == steady_bytes

    again = cairn("resume", str(job), "--retry-errors", cwd=tmp_path)
    no_traceback(again)
    assert again.returncode == 0, again.stdout + again.stderr
    rs = results_of(job)
    assert rs["test/flaky"]["outcome"] == "completed" and rs["test/flaky"]["reward"] == 1.0
    assert steady_file.read_bytes() == steady_bytes  # a genuine score is never re-run
    assert (flaky_file.parent / "attempts" / "1" / "result.json").is_file()  # kept, not deleted
    ran = [ln for ln in again.stdout.splitlines() if "step 1/1" in ln]
    assert len(ran) == 1 and ran[0].startswith("[test/flaky]")  # only that trial re-ran


@pytest.mark.docker
@pytest.mark.slow
def test_kill_9_then_resume_finishes_cleanly(tmp_path):
    from cairn.lock import is_locked

    task = write_task(
        tmp_path / "tasks", "sleepy", solve="sleep 2; touch /app/done\n", test=reward_if("test -f /app/done")
    )
    name = job_name()
    job = tmp_path / "jobs" / name
    proc = cairn_bg(
        "run",
        "-p",
        str(task),
        "-e",
        "docker",
        "--jobs-dir",
        "jobs",
        "--job-name",
        name,
        "-k",
        "20",
        "-n",
        "4",
        cwd=tmp_path,
    )
    try:
        wait_for(
            lambda: len(list(job.glob("trials/*/result.json"))) >= 2 and len(containers_of(job)) >= 2,
            what="a job in mid-run",
        )
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    done_before = len(list(job.glob("trials/*/result.json")))
    assert done_before < 20
    assert (job / "lock").exists() and not is_locked(job)  # the file stays, the lock does not
    assert containers_of(job), "a SIGKILLed run leaves its running sandboxes behind"

    p = cairn("resume", str(job), cwd=tmp_path)
    no_traceback(p)
    assert p.returncode == 0, p.stdout + p.stderr
    trial_dirs = sorted((job / "trials").iterdir())
    assert len(trial_dirs) == 20
    for d in trial_dirs:
        assert (d / "result.json").is_file()
        assert json.loads((d / "result.json").read_text())["reward"] == 1.0
    assert len(list(job.glob("trials/*/result.json"))) == 20  # exactly one result per trial
    summary = json.loads((job / "summary.json").read_text())
    assert summary["n_trials"] == 20 and summary["outcomes"]["completed"] == 20
    assert containers_of(job) == []  # the resume removed the killed run's left-overs
    assert "left-over" in p.stdout + p.stderr


@pytest.mark.docker
@pytest.mark.slow
def test_tasks_sanity(tmp_path):
    ds = tmp_path / "ds"
    check = reward_if("test -f /app/done")
    write_task(ds, "good", solve="touch /app/done\n", test=check)
    write_task(ds, "always-one", solve="touch /app/done\n", test="echo 1 > /logs/verifier/reward.txt\n")
    write_task(ds, "oracle-fails", solve="touch /app/wrong-file\n", test=check)
    p = cairn("tasks", "sanity", str(ds), "-e", "docker", "--jobs-dir", "jobs", cwd=tmp_path)
    no_traceback(p)
    assert p.returncode == 1
    lines = p.stdout.strip().splitlines()
    assert "test/good: ok" in lines
    bad = {ln.split(":")[0] for ln in lines if "FAIL" in ln}
    assert bad == {"test/always-one", "test/oracle-fails"}
    assert any("test/always-one" in ln and "nop passes" in ln for ln in lines)
    assert any("test/oracle-fails" in ln and "oracle does not pass" in ln for ln in lines)


@pytest.mark.docker
@pytest.mark.slow
def test_two_processes_same_task_and_same_job_name(tmp_path):
    task = write_task(
        tmp_path / "tasks", "shared", solve="sleep 3; touch /app/done\n", test=reward_if("test -f /app/done")
    )
    a, b = job_name(), job_name()
    args = ("run", "-p", str(task), "-e", "docker", "--jobs-dir", "jobs")
    pa = cairn_bg(*args, "--job-name", a, cwd=tmp_path)
    pb = cairn_bg(*args, "--job-name", b, cwd=tmp_path)
    wait_for(lambda: (tmp_path / "jobs" / a / "job.json").exists(), what="job a started")
    pc = cairn(*args, "--job-name", a, cwd=tmp_path)  # same name while a runs: refused
    assert pc.returncode == 2 and "already running" in pc.stderr
    no_traceback(pc)
    for proc, name in ((pa, a), (pb, b)):
        rc, out, err = finish(proc)
        assert rc == 0, out + err
        assert "PASS reward=1.00" in out
        rs = results_of(tmp_path / "jobs" / name)
        assert rs["test/shared"]["reward"] == 1.0
    # both jobs ran the same trial id (same task, agent, backend) in their own folders
    ta = [d.name for d in (tmp_path / "jobs" / a / "trials").iterdir()]
    tb = [d.name for d in (tmp_path / "jobs" / b / "trials").iterdir()]
    assert ta == tb


@pytest.mark.docker
@pytest.mark.slow
def test_attempts_pass_at_k_and_json_output(tmp_path):
    task = write_task(
        tmp_path / "tasks",
        "coin",
        solve='[ "$(( $(date +%N) % 2 ))" = 0 ] && touch /app/done; true\n',
        test=reward_if("test -f /app/done"),
    )
    name = job_name()
    p = cairn(
        "run",
        "-p",
        str(task),
        "-e",
        "docker",
        "--jobs-dir",
        "jobs",
        "--job-name",
        name,
        "-k",
        "3",
        "-n",
        "3",
        "--json",
        cwd=tmp_path,
    )
    no_traceback(p)
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stdout)  # only JSON on stdout; events went to stderr
    assert "[test/coin]" in p.stderr
    assert summary["n_trials"] == 3
    assert sorted(summary["pass_at_k"]) == ["1", "2", "3"]
    rewards = [r["reward"] for r in results_of(tmp_path / "jobs" / name).values()]
    assert len(rewards) == 3
    c = sum(r == 1.0 for r in rewards)
    assert summary["pass_at_k"]["1"] == pytest.approx(c / 3)
    assert summary["pass_at_k"]["3"] == pytest.approx(1.0 if c else 0.0)


@pytest.mark.docker
@pytest.mark.slow
def test_sigint_cancels_running_trials(tmp_path):
    task = write_task(tmp_path / "tasks", "long", solve="sleep 120\n")
    name = job_name()
    job = tmp_path / "jobs" / name
    proc = cairn_bg(
        "run",
        "-p",
        str(task),
        "-e",
        "docker",
        "--jobs-dir",
        "jobs",
        "--job-name",
        name,
        "-k",
        "4",
        "-n",
        "2",
        cwd=tmp_path,
    )
    try:
        wait_for(
            lambda: (job / "job.log").exists() and (job / "job.log").read_text().count("environment:") == 2,
            what="two trials started",
        )
        wait_for(lambda: _running_in_job(job, "sleep 120") == 2, what="both oracles in their `sleep 120`")
        proc.send_signal(signal.SIGINT)
        rc, out, err = finish(proc, timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 1, out + err
    assert "Traceback" not in out + err
    assert "interrupted" in err
    rs = [json.loads(f.read_text()) for f in job.glob("trials/*/result.json")]
    assert len(rs) == 4 and {r["outcome"] for r in rs} == {"cancelled"}
    assert containers_of(job) == []
    summary = json.loads((job / "summary.json").read_text())
    assert summary["outcomes"]["cancelled"] == 4
    assert json.loads((job / "job.json").read_text())["stopped_by"] == "interrupted"


@pytest.mark.docker
@pytest.mark.slow
def test_config_file_globs_and_no_verify(tmp_path):
    ds = tmp_path / "ds"
    for n in ("alpha", "alps", "beta"):
        write_task(ds, n, test="echo 0 > /logs/verifier/reward.txt\n")
    (tmp_path / "job.yaml").write_text(
        f"paths: [{ds}]\nagent: oracle\nattempts: 2\nn_concurrent: 1\ninclude: ['test/al*', beta]\n"
    )
    name = job_name()
    p = cairn(
        "run",
        "-c",
        "job.yaml",
        "-a",
        "nop",
        "-x",
        "*alps",
        "-n",
        "4",
        "--no-verify",
        "-e",
        "docker",
        "--jobs-dir",
        "jobs",
        "--job-name",
        name,
        cwd=tmp_path,
    )
    no_traceback(p)
    assert p.returncode == 0, p.stdout + p.stderr
    job = tmp_path / "jobs" / name
    cfg = json.loads((job / "job.json").read_text())["config"]
    assert cfg["agent"] == "nop" and cfg["n_concurrent"] == 4  # flags win
    assert cfg["attempts"] == 2  # from the file
    rs = results_of(job)
    assert sorted(rs) == ["test/alpha", "test/alpha#2", "test/beta", "test/beta#2"]
    for r in rs.values():
        assert r["outcome"] == "completed" and r["reward"] is None and not r["passed"]
        assert r["steps"][0]["source"] == "not-run"


def test_docker_backend_without_engine_is_exit_2(tmp_path):
    """-e docker with no engine answering is a job-level error before anything runs."""
    task = write_task(tmp_path / "tasks", "t")
    res = cairn(
        "run",
        "-p",
        str(task),
        "-a",
        "nop",
        "-e",
        "docker",
        cwd=tmp_path,
        DOCKER_HOST=f"unix://{tmp_path}/none.sock",
    )
    assert res.returncode == 2, res.stdout + res.stderr
    assert "no Docker engine" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "jobs").exists()


@pytest.mark.local
def test_fresh_run_does_not_claim_to_resume(tmp_path):
    """A fresh job of a broken task fails with that task's own error (exit 1, config_error
    in its result.json and on the console), never a crash of the command, and does not call
    itself a resume."""
    broken = write_task(tmp_path / "tasks", "broken")
    (broken / "instruction.md").unlink()
    res = cairn("run", "-p", str(broken), "-a", "nop", "-e", "local", "--job-name", "fresh", cwd=tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    out = res.stdout + res.stderr
    assert "resuming" not in out and "Traceback" not in out
    missing = f"{broken}: error: missing `instruction.md` (required for a single-step task)"
    assert f"[test/broken] ERRORED config_error: {missing}" in res.stdout
    (result,) = results_of(tmp_path / "jobs" / "fresh").values()
    assert result["outcome"] == "errored"
    assert result["error"]["kind"] == "config_error" and result["error"]["category"] == "task"
    assert result["error"]["message"] == missing


def test_version_and_help_examples(tmp_path):
    from cairn import __version__

    res = cairn("--version", cwd=tmp_path)
    assert res.returncode == 0 and res.stdout.strip() == f"cairn {__version__}"
    for args in (
        (),
        ("tasks",),
        ("run",),
        ("resume",),
        ("report",),
        ("clean",),
        ("tasks", "check"),
        ("tasks", "init"),
        ("tasks", "sanity"),
    ):
        out = cairn(*args, "--help", cwd=tmp_path)
        assert out.returncode == 0 and "Example" in out.stdout, args


# ---- default job names are claimed exclusively (issue #12) ----------------------------------
_FROZEN_CLOCK = (
    "import cairn.job.run as r; "
    "r.default_job_name = lambda now=None: '2026-12-01__08-00-00'; "
    "from cairn.cli import main; main()"
)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["docker", "local"])
def test_three_runs_in_the_same_second_get_their_own_job_folders(tmp_path, backend):
    """Three `cairn run` with the default job name in one second (the clock is frozen so the
    names collide for certain): each claims its own folder and runs its trial, exit 0."""
    from testbed import backend_available

    if not backend_available(backend):
        pytest.skip(f"backend {backend} not available")
    task = write_task(
        tmp_path / "tasks", "same-second", solve="touch /app/done\n", test=reward_if("test -f /app/done")
    )
    args = ["-c", _FROZEN_CLOCK, "run", "-p", str(task), "-e", backend, "--jobs-dir", "jobs"]
    procs = [
        subprocess.Popen(
            [sys.executable, *args],
            cwd=tmp_path,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outcomes = [finish(p) for p in procs]
    for rc, out, err in outcomes:
        assert rc == 0, out + err
        assert "Traceback" not in out + err
    names = sorted(p.name for p in (tmp_path / "jobs").iterdir())
    assert names == ["2026-12-01__08-00-00", "2026-12-01__08-00-00-2", "2026-12-01__08-00-00-3"]
    for name in names:
        job = json.loads((tmp_path / "jobs" / name / "job.json").read_text())
        assert job["job_name"] == name and job["config"]["job_name"] == name
        assert results_of(tmp_path / "jobs" / name)["test/same-second"]["reward"] == 1.0


def test_a_given_job_name_is_still_refused_while_it_runs(tmp_path, one_task):
    """--job-name keeps the lock's refusal (no suffix): a held lock → exit 2, nothing run."""
    from cairn.lock import JobLock

    with JobLock(tmp_path / "jobs" / "mine"):
        res = cairn(
            "run",
            "-p",
            str(one_task),
            "-e",
            "local",
            "--jobs-dir",
            "jobs",
            "--job-name",
            "mine",
            cwd=tmp_path,
        )
    assert res.returncode == 2 and "already running" in res.stderr
    assert sorted(p.name for p in (tmp_path / "jobs").iterdir()) == ["mine"]
    assert not (tmp_path / "jobs" / "mine" / "trials").exists()


def test_claim_job_dir_suffixes_on_collision_and_api_names_the_job(tmp_path):
    from datetime import datetime

    from cairn.job.run import claim_job_dir

    now = datetime(2026, 12, 1, 8, 0, 0)
    got = [claim_job_dir(tmp_path / "jobs", now).name for _ in range(3)]
    assert got == ["2026-12-01__08-00-00", "2026-12-01__08-00-00-2", "2026-12-01__08-00-00-3"]


# ---- -o through a symlink; agent options; --resume with a new --ve key (lowfix2) -------------
@pytest.mark.local
def test_jobs_dir_through_a_symlink_to_an_empty_folder_is_that_folder(tmp_path, one_task):
    from testbed import backend_available

    if not backend_available("local"):
        pytest.skip("backend local not available")
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to("real")
    plan = cairn("run", "-p", str(one_task), "-e", "local", "-o", "link", "--dry-run", cwd=tmp_path)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    for extra in ((), ("--job-name", "named")):
        res = cairn("run", "-p", str(one_task), "-e", "local", "-o", "link", *extra, cwd=tmp_path)
        assert res.returncode == 0, res.stdout + res.stderr
    assert (tmp_path / "link").is_symlink()
    jobs = sorted((tmp_path / "real").iterdir())
    assert len(jobs) == 2 and "named" in [j.name for j in jobs]
    for job in jobs:
        assert results_of(job)["test/one"]["reward"] == 1.0


@pytest.mark.parametrize(
    "make,message",
    [
        (
            lambda t: (t / "f").write_text("x") and (t / "out").symlink_to("f"),
            "the jobs folder out (-o/--jobs-dir) is a symlink to f, a file, not a folder",
        ),
        (
            lambda t: (t / "out").symlink_to("nowhere"),
            "the jobs folder out (-o/--jobs-dir) is a dangling symlink: its target nowhere does not exist",
        ),
        (
            lambda t: (t / "out").write_text("x"),
            "the jobs folder out (-o/--jobs-dir) exists and is not a folder",
        ),
    ],
)
def test_jobs_dir_that_is_not_a_folder_is_refused_before_anything(tmp_path, one_task, make, message):
    make(tmp_path)
    listing = sorted(p.name for p in tmp_path.iterdir())
    for extra in ((), ("--job-name", "named"), ("--dry-run",), ("--job-name", "n", "--dry-run")):
        res = cairn("run", "-p", str(one_task), "-e", "local", "-o", "out", *extra, cwd=tmp_path)
        assert res.returncode == 2, (extra, res.stdout + res.stderr)
        assert res.stderr.strip() == f"cairn: error: {message}; " + (
            "create that folder or choose another -o"
            if "dangling" in message
            else "point it at a folder or choose another -o"
            if "symlink" in message
            else "choose another -o"
        ), extra
        no_traceback(res)
    assert sorted(p.name for p in tmp_path.iterdir()) == listing
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("agent", ["oracle", "nop"])
def test_oracle_and_nop_refuse_an_option_they_do_not_take(tmp_path, one_task, agent):
    for extra in ((), ("--dry-run",)):
        res = cairn(
            "run",
            "-p",
            str(one_task),
            "-a",
            agent,
            "-e",
            "local",
            "--jobs-dir",
            "jobs",
            "--ak",
            "ignore_mcp=true",
            "--ak",
            "temprature=0",
            *extra,
            cwd=tmp_path,
        )
        assert res.returncode == 2, res.stdout + res.stderr
        assert res.stderr.strip() == (
            f"cairn: error: agent {agent!r} has no option 'temprature' (--ak); it takes no options"
        )
    assert not (tmp_path / "jobs").exists()
    # the same rule, the same words, as an agent that takes options
    res = cairn(
        "run", "-p", str(one_task), "-a", "claude-code", "-e", "local", "--ak", "temprature=0", cwd=tmp_path
    )
    assert res.returncode == 2 and res.stderr.strip() == (
        "cairn: error: agent 'claude-code' has no option 'temprature' (--ak); known: version, "
        "base_url, platform, prepare, relay"
    )


def test_oracle_options_refused_through_the_api_too(tmp_path, one_task):
    from cairn.agents.registry import create_agent, validate_agent_options
    from cairn.errors import UsageError

    for call in (
        lambda: validate_agent_options("nop", None, {"x": "1"}),
        lambda: create_agent("oracle", None, {"x": "1"}),
    ):
        with pytest.raises(UsageError, match="has no option 'x' .*it takes no options"):
            call()
    # a user's agent built on the oracle takes its own options (FlakySetupAgent: marker)
    assert create_agent("job_agents:FlakySetupAgent", None, {"marker": "m"}).kwargs == {"marker": "m"}


@pytest.mark.local
def test_resume_with_a_new_verifier_env_key_names_that_key(tmp_path, one_task):
    from testbed import backend_available

    if not backend_available("local"):
        pytest.skip("backend local not available")
    first = cairn(
        "run",
        "-p",
        str(one_task),
        "-e",
        "local",
        "--job-name",
        "j",
        "--ve",
        "OLD=a",
        cwd=tmp_path,
        OLD=None,
        NEW=None,
    )
    assert first.returncode == 0, first.stdout + first.stderr
    job_json = (tmp_path / "jobs" / "j" / "job.json").read_bytes()
    head = (
        "cairn: error: --resume continues jobs/j with the config it was started with "
        "(job.json), and the options given differ from it: "
    )
    # NEW differs (the job has no such key), whether or not OLD's value is given again
    for again, old in (((), None), (("--ve", "OLD=a"), None), ((), "a")):
        res = cairn(
            "run",
            "-p",
            str(one_task),
            "-e",
            "local",
            "--job-name",
            "j",
            "--resume",
            *again,
            "--ve",
            "NEW=secret-1",
            cwd=tmp_path,
            OLD=old,
            NEW=None,
        )
        assert res.returncode == 2, res.stdout + res.stderr
        assert res.stderr.startswith(
            head + "verifier_env.NEW: the job's none, given ***. Resume it as it is"
        ), (again, old, res.stderr)
        assert "secret-1" not in res.stderr and "OLD" not in res.stderr
    # OLD alone missing: named as before
    res = cairn(
        "run",
        "-p",
        str(one_task),
        "-e",
        "local",
        "--job-name",
        "j",
        "--resume",
        cwd=tmp_path,
        OLD=None,
        NEW=None,
    )
    assert res.returncode == 2 and res.stderr.strip() == (
        "cairn: error: the job's verifier env (--ve) values are not stored; set them in the "
        "environment to resume: OLD"
    )
    assert (tmp_path / "jobs" / "j" / "job.json").read_bytes() == job_json
    res = cairn(
        "run",
        "-p",
        str(one_task),
        "-e",
        "local",
        "--job-name",
        "j",
        "--resume",
        "--ve",
        "OLD=b",
        cwd=tmp_path,
        OLD=None,
        NEW=None,
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_a_new_run_never_writes_into_a_folder_that_holds_no_job(tmp_path, one_task):
    """--job-name naming a folder of something else (a Harbor job folder, an export) is
    refused, the run's words as the dry run's, and not a file is added (not even the lock)."""
    other = tmp_path / "jobs" / "h"
    other.mkdir(parents=True)
    (other / "result.json").write_text("{}")
    (other / "job.log").write_text("harbor's\n")
    for extra in ((), ("--dry-run",)):
        res = cairn("run", "-p", str(one_task), "-e", "local", "--job-name", "h", *extra, cwd=tmp_path)
        assert res.returncode == 2, res.stdout + res.stderr
        assert res.stderr.strip() == (
            f"cairn: error: {other} exists and is not a job folder; choose another --job-name (or -o)"
        ), extra
    assert sorted(p.name for p in other.iterdir()) == ["job.log", "result.json"]
    assert (other / "job.log").read_text() == "harbor's\n"


@pytest.mark.local
def test_a_folder_left_by_a_run_killed_at_its_start_is_still_taken(tmp_path, one_task):
    from testbed import backend_available

    if not backend_available("local"):
        pytest.skip("backend local not available")
    left = tmp_path / "jobs" / "k"
    left.mkdir(parents=True)
    for name in ("lock", "job.log", ".job.json.x1y2.tmp"):  # killed before job.json
        (left / name).write_text("")
    res = cairn("run", "-p", str(one_task), "-e", "local", "--job-name", "k", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert results_of(left)["test/one"]["reward"] == 1.0
