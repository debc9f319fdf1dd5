"""What a new user meets in the first hour (issue 27 / #32), through the real ``cairn`` entry
point: ``python3 -m cairn`` subprocesses on task folders written into tmp_path.

Covers: task validation warnings at ``cairn run`` (and ``--strict`` at run time), datasets one
level down named instead of skipped, the job header naming agent/model/backend, ``-m`` without a
model-driven agent, the CLI grammar (``-h`` everywhere, "did you mean" for options, one error
prefix, a jobs folder where a job folder is expected).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cairncli import run_cairn, start_cairn

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
SRC = REPO / "src"


def _env(**extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), str(TESTS / "helpers")]),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    env.pop("CAIRN_DEBUG", None)
    env.update(extra)
    return env


def cairn(*args: str, cwd: Path, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    """``python3 -m cairn ARGS`` to its end; stdout and stderr apart."""
    return run_cairn(*args, cwd=cwd, env=_env(**env), timeout=timeout)


def no_traceback(p: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in p.stdout + p.stderr, p.stdout + p.stderr


def typo_task(tmp_path: Path) -> Path:
    """A three-step task from ``cairn tasks init`` with ``min_rewrad`` and ``memroy_mb``."""
    p = cairn("tasks", "init", "my-task", "--steps", "fetch,fix,report", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    toml = tmp_path / "my-task" / "task.toml"
    text = toml.read_text()
    assert text.count("min_reward = 1.0") == 3 and "memory_mb" in text
    toml.write_text(text.replace("min_reward", "min_rewrad").replace("memory_mb", "memroy_mb"))
    return tmp_path / "my-task"


def _lineno(path: Path, key: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if line.startswith(key))


# ---- 1. task validation warnings at run time -------------------------------------------------


@pytest.mark.docker
def test_run_prints_task_warnings_with_line_and_suggestion_before_the_first_trial(tmp_path):
    task = typo_task(tmp_path)
    p = cairn("run", "-p", "my-task", "-a", "nop", "-e", "docker", "--job-name", "typo", cwd=tmp_path)
    no_traceback(p)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    line = _lineno(task / "task.toml", "min_rewrad")
    want = (
        f"my-task/task.toml:{line}: warning: unknown key `min_rewrad` in [steps[0]] "
        "(did you mean `min_reward`?)"
    )
    assert want in lines, p.stdout
    mem = _lineno(task / "task.toml", "memroy_mb")
    assert any(
        x.startswith(f"my-task/task.toml:{mem}: warning: unknown key `memroy_mb`") and "`memory_mb`" in x
        for x in lines
    ), p.stdout
    first_trial = next(i for i, x in enumerate(lines) if x.startswith("[local/my-task]"))
    assert lines.index(want) < first_trial
    assert lines[0].startswith("job typo: started") and lines.index(want) > 0
    # once per job, with the count and the way out
    assert p.stdout.count("`min_rewrad` in [steps[0]]") == 1
    assert "warning: 4 task validation warning(s) in 1 task(s)" in p.stdout
    assert "--strict" in p.stdout


@pytest.mark.docker
def test_run_strict_makes_task_warnings_errors(tmp_path):
    typo_task(tmp_path)
    p = cairn(
        "run", "-p", "my-task", "-a", "nop", "-e", "docker", "--strict", "--job-name", "strict", cwd=tmp_path
    )
    no_traceback(p)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "error: unknown key `min_rewrad` in [steps[0]] (did you mean `min_reward`?)" in p.stdout
    result = json.loads(next((tmp_path / "jobs" / "strict" / "trials").glob("*/result.json")).read_text())
    assert result["outcome"] == "errored"
    assert result["error"]["kind"] == "config_error"
    assert not any(s.get("agent") and s["agent"].get("elapsed_sec") for s in result["steps"])
    # the job remembers it: a resume keeps --strict
    meta = json.loads((tmp_path / "jobs" / "strict" / "job.json").read_text())
    assert meta["config"]["strict"] is True


def test_dry_run_and_check_show_the_warnings_and_check_counts_them(tmp_path):
    typo_task(tmp_path)
    p = cairn("run", "-p", "my-task", "--dry-run", "-e", "docker", cwd=tmp_path)
    no_traceback(p)
    assert "`min_rewrad` in [steps[2]] (did you mean `min_reward`?)" in p.stdout
    c = cairn("tasks", "check", "my-task", "-e", "none", cwd=tmp_path)
    assert c.returncode == 0
    assert "my-task: ok (4 warning(s))" in c.stdout.splitlines()


def test_dataset_warnings_are_capped_with_the_command_for_the_rest(tmp_path):
    ds = tmp_path / "ds"
    ds.mkdir()
    for i in range(6):
        assert (
            cairn("tasks", "init", f"t{i}", "--steps", "a,b,c", "--dir", "ds", cwd=tmp_path).returncode == 0
        )
        toml = ds / f"t{i}" / "task.toml"
        toml.write_text(toml.read_text().replace("min_reward", "min_rewrad"))
    p = cairn("run", "-p", "ds", "--dry-run", "-e", "docker", cwd=tmp_path)
    shown = [x for x in p.stdout.splitlines() if "unknown key `min_rewrad`" in x]
    assert len(shown) == 12  # the cap (MAX_WARNING_LINES), of 18
    assert (
        "warning: 6 more validation finding(s) in 2 task(s) not shown; list them: "
        "cairn tasks check ds/t4 ds/t5"
    ) in p.stdout
    assert "warning: 18 task validation warning(s) in 6 task(s)" in p.stdout


# ---- 2. folders holding datasets one level down ----------------------------------------------


def test_datasets_one_level_down_are_named_with_the_command(tmp_path):
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    c = cairn("tasks", "check", "examples/", "--strict", "-e", "none", cwd=tmp_path)
    assert c.returncode == 0, c.stdout + c.stderr
    assert (
        "warning: examples/dataset holds 4 task(s) one level down (folders are read one "
        "level deep), not checked: cairn tasks check examples/dataset"
    ) in c.stdout
    d = cairn("run", "-p", "examples", "--dry-run", "-e", "docker", cwd=tmp_path)
    assert "examples/dataset holds 4 task(s) one level down" in d.stdout
    assert "not included: add -p examples/dataset" in d.stdout
    (tmp_path / "outer").mkdir()
    shutil.move(str(tmp_path / "examples"), tmp_path / "outer" / "examples")
    e = cairn("run", "-p", "outer", "--dry-run", "-e", "docker", cwd=tmp_path)
    assert e.returncode == 2
    assert "holds datasets one level down, give them: -p" in e.stderr
    c2 = cairn("tasks", "check", "outer", "-e", "none", cwd=tmp_path)
    assert c2.returncode == 1
    assert (
        "outer: error: not a task (no task.toml or task.md) and holds no task folders; it "
        "holds datasets one level down, check them: cairn tasks check outer/examples"
    ) in c2.stdout


# ---- 4, 5. step numbering under --start-step; regrade's exit code and lines --------------------


def _local_ok() -> bool:
    sys.path.insert(0, str(TESTS / "helpers"))
    from testbed import local_available

    return local_available()


local = pytest.mark.skipif(not _local_ok(), reason="local backend unavailable")


@pytest.mark.local
@local
def test_start_step_verdict_numbers_the_step_in_the_task(tmp_path):
    shutil.copytree(REPO / "examples" / "incident", tmp_path / "incident")
    p = cairn(
        "run",
        "-p",
        "incident",
        "--start-step",
        "repair",
        "-a",
        "nop",
        "-e",
        "local",
        "--job-name",
        "ss",
        cwd=tmp_path,
    )
    no_traceback(p)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "step 3/5 repair: reward 0.00" in p.stdout
    assert (
        "STOPPED after step 3/5 repair: reward 0.00 < min_reward 1.0 (mean 0.00 over 1 of 3 "
        "steps run from repair)"
    ) in p.stdout
    assert "/3 repair" not in p.stdout


@pytest.mark.local
@local
def test_regrade_of_a_job_without_snapshots_exits_1_with_the_command(tmp_path):
    shutil.copytree(REPO / "examples" / "two-steps", tmp_path / "two-steps")
    run = cairn("run", "-p", "two-steps", "-a", "oracle", "-e", "local", "--job-name", "plain", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    p = cairn("regrade", "jobs/plain", "--job-name", "plain-re", cwd=tmp_path)
    no_traceback(p)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "regrade: 0 of 1 trial(s) regraded, 1 not regradable" in p.stderr
    assert (
        "1 trial(s) have no step snapshots: the job was run without --snapshot-steps; a "
        "regradable job is recorded by cairn run -p "
    ) in p.stderr
    assert "-a oracle --snapshot-steps --job-name plain-snap" in p.stderr
    assert "cairn: error: nothing in the job could be regraded" in p.stderr


@pytest.mark.local
@local
def test_partial_regrade_names_the_unreached_steps_and_what_a_full_one_needs(tmp_path):
    assert cairn("tasks", "init", "gate", "--steps", "write,append", cwd=tmp_path).returncode == 0
    run = cairn(
        "run",
        "-p",
        "gate",
        "-a",
        "nop",
        "-e",
        "local",
        "--snapshot-steps",
        "--job-name",
        "base",
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "STOPPED after step 1/2 write" in run.stdout
    test_sh = tmp_path / "gate" / "steps" / "write" / "tests" / "test.sh"
    test_sh.write_text(
        "#!/usr/bin/env bash\nmkdir -p /logs/verifier\necho 1 > /logs/verifier/reward.txt\n"
    )  # the "fixed" verifier
    p = cairn("regrade", "jobs/base", "-p", "gate", "--job-name", "fixed", cwd=tmp_path)
    no_traceback(p)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "regrade: 0 of 1 trial(s) regraded, 1 partial" in p.stderr
    line = next(x for x in p.stderr.splitlines() if "partial: step(s)" in x)
    assert "step(s) append never ran in the recorded trial and have no score" in line
    assert "--start-step append --from " in line and "jobs/base/trials/" in line
    assert "-i local/gate" in line and line.rstrip().endswith("-a nop")
    table = p.stdout.split("regrade (old → new)")[0]  # the task / step table
    rows = {
        x.split()[1]: x for x in table.splitlines() if x.startswith("  ") and x.split()[0] in ("1.", "2.")
    }
    assert "stopped here" not in rows["write"]  # the step passes now
    assert rows["append"].rstrip().endswith("regrade could not reach 1")


# ---- 9. a jobs folder where a job folder is expected --------------------------------------------


@pytest.mark.local
@local
def test_report_export_take_a_jobs_folder_resume_regrade_name_the_jobs(tmp_path):
    shutil.copytree(REPO / "examples" / "two-steps", tmp_path / "two-steps")
    for name in ("first", "second"):
        r = cairn(
            "run",
            "-p",
            "two-steps",
            "-a",
            "oracle",
            "-e",
            "local",
            "--job-name",
            name,
            "--snapshot-steps",
            cwd=tmp_path,
        )
        assert r.returncode == 0, r.stdout + r.stderr
    rep = cairn("report", "jobs", cwd=tmp_path)
    assert rep.returncode == 0, rep.stderr
    assert (
        "cairn report: jobs holds 2 jobs; reading the latest, jobs/second (give a job folder to pick another)"
    ) in rep.stderr
    assert rep.stdout.startswith("job second")
    exp = cairn("export", "jobs/", "-o", "s.jsonl", cwd=tmp_path)
    assert exp.returncode == 0 and "reading the latest, jobs/second" in exp.stderr
    assert len((tmp_path / "s.jsonl").read_text().splitlines()) == 2
    res = cairn("resume", "jobs", cwd=tmp_path)
    assert res.returncode == 2
    assert (
        "cairn: error: jobs is a jobs folder, not a job folder: it holds 2 jobs, latest "
        "first: jobs/second, jobs/first; give one: cairn resume jobs/second"
    ) in res.stderr
    reg = cairn("regrade", "jobs", cwd=tmp_path)
    assert reg.returncode == 2 and "give one: cairn regrade jobs/second" in reg.stderr
    sh = cairn("shell", "jobs/first", "--step", "write", "-c", "cat /app/a.txt", cwd=tmp_path)
    assert sh.returncode == 0, sh.stdout + sh.stderr
    assert "the one trial of jobs/first" in sh.stderr and sh.stdout.strip() == "1"
    none = cairn("report", "two-steps", cwd=tmp_path)
    assert none.returncode == 2
    assert "two-steps is not a job folder (no job.json) and holds no job folders" in none.stderr


# ---- 8, 9. the default agent; one CLI grammar ---------------------------------------------------


@pytest.mark.local
@local
def test_job_header_names_agent_model_and_backend(tmp_path):
    shutil.copytree(REPO / "examples" / "two-steps", tmp_path / "two-steps")
    p = cairn(
        "run", "-p", "two-steps", "-e", "local", "--job-name", "h", "--no-verify", "-a", "nop", cwd=tmp_path
    )
    assert p.stdout.splitlines()[0] == "job h: started (cairn 0.1.0, agent nop, backend local)"


def test_model_without_agent_suggests_llm(tmp_path):
    shutil.copytree(REPO / "examples" / "two-steps", tmp_path / "two-steps")
    p = cairn("run", "-p", "two-steps", "-m", "openai/gpt-4o", "--dry-run", cwd=tmp_path)
    assert p.returncode == 2
    assert p.stderr.startswith(
        "cairn: error: -m openai/gpt-4o needs a model-driven agent, and "
        "without -a the agent is oracle: add -a llm"
    ), p.stderr
    assert "remove -m" not in p.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["-h"],
        ["--help"],
        ["tasks", "-h"],
        ["report", "-h"],
        ["run", "-h"],
        ["view", "-h"],
        ["tasks", "check", "-h"],
        ["regrade", "-h"],
        ["agents", "list", "-h"],
    ],
)
def test_h_and_help_on_every_command(tmp_path, argv):
    p = cairn(*argv, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("Usage: cairn"), p.stdout


def test_help_of_every_registered_command_takes_h(tmp_path, capfd):
    """``cairn -h`` through the real entry point; then every command's ``-h`` through
    ``run_app``, the function the entry point hands its argv to (one process: a subprocess per
    command proves nothing more)."""
    sys.path.insert(0, str(SRC))
    from cairn.cli._app import _command_name, _register, app, run_app, tasks_app

    top = cairn("-h", cwd=tmp_path)
    assert top.returncode == 0 and top.stdout.startswith("Usage: cairn"), top.stderr
    _register()
    names = [[_command_name(c)] for c in app.registered_commands]
    names += [["tasks", _command_name(c)] for c in tasks_app.registered_commands]
    names += [[g.name] for g in app.registered_groups if g.name]
    assert len(names) > 12
    capfd.readouterr()
    for argv in names:
        code = run_app([*argv, "-h"])
        out, err = capfd.readouterr()
        assert code == 0 and out.startswith("Usage: cairn"), (argv, out, err)


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (
            ["run", "--agnet", "oracle", "-p", "x"],
            "cairn: error: No such option: --agnet (did you mean --agent?)",
        ),
        (
            ["tasks", "check", "--strct", "x"],
            "cairn: error: No such option: --strct (did you mean --strict?)",
        ),
        (["view", "--prot", "1"], "cairn: error: No such option: --prot (did you mean --port?)"),
        (["rn"], "cairn: error: No such command 'rn'. Did you mean 'run'?"),
        (["report"], "cairn: error: Missing argument 'job_dir'."),
        (["tasks", "check", "x", "--select", "no-such-rule"], "cairn: error: "),
    ],
)
def test_one_error_prefix_and_did_you_mean_for_options(tmp_path, argv, want):
    p = cairn(*argv, cwd=tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr
    errors = [x for x in p.stderr.splitlines() if "error" in x.lower()]
    assert errors and all(x.startswith("cairn: error: ") for x in errors), p.stderr
    assert any(x.startswith(want) for x in errors), p.stderr
    assert "Error:" not in p.stderr and "Traceback" not in p.stderr


# ---- 6. a failed build shows its cause on the terminal -----------------------------------------


@pytest.mark.local
@local
def test_failed_build_prints_the_tail_of_its_log(tmp_path):
    assert cairn("tasks", "init", "bad", cwd=tmp_path).returncode == 0
    dockerfile = tmp_path / "bad" / "environment" / "Dockerfile"
    noisy = "".join(f"RUN echo line-{i}\n" for i in range(20))
    dockerfile.write_text(dockerfile.read_text() + noisy + "RUN pip-not-here install requests\n")
    p = cairn("run", "-p", "bad", "-e", "local", "--job-name", "b", cwd=tmp_path)
    no_traceback(p)
    assert p.returncode == 1
    lines = p.stdout.splitlines()
    at = next(i for i, x in enumerate(lines) if x.startswith("[local/bad] ERRORED: build_failed"))
    assert lines[at + 1].startswith("  log (last 8 lines):")
    shown = lines[at + 2 : at + 10]
    assert all(x.startswith("  | ") for x in shown) and len(shown) == 8
    assert "  | /bin/sh: 1: pip-not-here: not found" in shown
    assert not lines[at + 10].startswith("  | ")  # bounded
    assert "line-0" not in p.stdout.split("log (last")[1]


# ---- 7. per-key means labelled -----------------------------------------------------------------


@pytest.mark.local
@local
def test_report_labels_per_key_means_so_they_do_not_read_as_failures(tmp_path):
    assert cairn("tasks", "init", "keys", "--steps", "fetch,fix,report", cwd=tmp_path).returncode == 0
    (tmp_path / "keys" / "steps" / "report" / "tests" / "test.sh").write_text(
        "#!/usr/bin/env bash\nmkdir -p /logs/verifier\n"
        'echo \'{"reward": 1, "total": 1, "bug": 1}\' > /logs/verifier/reward.json\n'
    )
    run = cairn("run", "-p", "keys", "-e", "local", "-k", "2", "--job-name", "k", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    p = cairn("report", "jobs/k", cwd=tmp_path)
    rows = {
        x.split("  ", 2)[1].strip(): x.split("  ", 2)[2].strip()
        for x in p.stdout.splitlines()
        if x.startswith("  reward")
    }
    assert rows["reward (primary)"] == (
        "reported by 3 of 3 step(s) (fetch, fix, report); mean "
        "over those 1.00; per-trial mean 1.00 (n=2 trials)"
    )
    assert rows["reward[total]"] == (
        "reported by 1 of 3 step(s) (report); mean over those 1.00; "
        "per-trial mean 0.33, missing steps as 0 (n=2 trials)"
    )
    assert "reward[reward]" not in p.stdout
    md_ = cairn("report", "jobs/k", "--format", "markdown", cwd=tmp_path)
    assert "| reward[bug] | reported by 1 of 3 step(s) (report); mean over those 1.00;" in md_.stdout


# ---- 3. model failures answer fast and out loud ------------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: nothing listens there


@pytest.mark.local
@local
def test_unreachable_model_host_is_a_fast_job_error_with_a_line_per_retry(tmp_path):
    shutil.copytree(REPO / "examples" / "two-steps", tmp_path / "two-steps")
    port = _free_port()
    import time

    t0 = time.monotonic()
    p = cairn(
        "run",
        "-p",
        "two-steps",
        "-a",
        "llm",
        "-m",
        "openai/gpt-4o",
        "--ak",
        f"api_base=http://127.0.0.1:{port}/v1",
        "-e",
        "local",
        "-k",
        "3",
        "-n",
        "1",
        "--job-name",
        "unreach",
        cwd=tmp_path,
        OPENAI_API_KEY="sk-test",
    )
    took = time.monotonic() - t0
    no_traceback(p)
    assert p.returncode == 1, p.stdout + p.stderr
    assert took < 60, took  # not minutes of retried sandboxes
    retries = [x for x in p.stdout.splitlines() if "model call failed (connection refused)" in x]
    assert retries == [
        "[cairn/two-steps] step 1/2 write: model call failed (connection refused); retry 1 of 2 in 2.0 s",
        "[cairn/two-steps] step 1/2 write: model call failed (connection refused); retry 2 of 2 in 2.0 s",
    ]
    assert f"host unreachable (connection refused) at http://127.0.0.1:{port}/v1" in p.stdout
    assert "job stopping: model_unreachable" in p.stdout
    assert "retrying in" not in p.stdout  # no trial retry on a fresh sandbox
    outcomes = sorted(
        json.loads(f.read_text())["outcome"]
        for f in (tmp_path / "jobs" / "unreach" / "trials").glob("*/result.json")
    )
    assert outcomes == ["cancelled", "cancelled", "errored"]


@pytest.mark.local
@local
def test_model_and_trial_retries_each_print_a_line_with_the_cause(tmp_path):
    from http.server import BaseHTTPRequestHandler

    sys.path.insert(0, str(TESTS / "helpers"))
    from threadserve import BackgroundServer

    class Down(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = b'{"error": {"message": "upstream overloaded", "type": "server_error"}}'
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self.send_response(503)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    shutil.copytree(REPO / "examples" / "two-steps", tmp_path / "two-steps")
    server = BackgroundServer("127.0.0.1", Down, "down-model").start()
    try:
        port = server._server.server_address[1]
        p = cairn(
            "run",
            "-p",
            "two-steps",
            "-a",
            "llm",
            "-m",
            "openai/gpt-4o",
            "--ak",
            f"api_base=http://127.0.0.1:{port}/v1",
            "--ak",
            "model_retries=1",
            "--ak",
            "retry_base_delay_sec=0.1",
            "-e",
            "local",
            "-r",
            "1",
            "--job-name",
            "down",
            cwd=tmp_path,
            OPENAI_API_KEY="sk-test",
        )
    finally:
        server.stop()
    no_traceback(p)
    lines = p.stdout.splitlines()
    model = [x for x in lines if "model call failed" in x]
    assert len(model) == 2, p.stdout  # one per model retry: one in each of the two runs
    assert all(
        x.startswith("[cairn/two-steps] step 1/2 write: model call failed (ServiceUnavailableError: ")
        and "upstream overloaded" in x
        and x.endswith("; retry 1 of 1 in 0.1 s")
        for x in model
    ), model
    trial = [x for x in lines if "retrying in" in x]
    assert len(trial) == 1, p.stdout
    assert trial[0].startswith(
        "[cairn/two-steps] infra error model_unavailable (model 'openai/gpt-4o' unavailable after 1 retries:"
    )
    assert "on a fresh sandbox (run 2 of 2)" in trial[0]


# ---- 9. cairn report on a running job ------------------------------------------------------------


@pytest.mark.local
@local
def test_report_on_a_running_job_shows_what_is_running(tmp_path):
    import signal
    import time

    assert cairn("tasks", "init", "slow", cwd=tmp_path).returncode == 0
    solve = tmp_path / "slow" / "solution" / "solve.sh"
    solve.write_text("#!/usr/bin/env bash\nsleep 60\n" + solve.read_text())
    bg = start_cairn("run", "-p", "slow", "-e", "local", "--job-name", "live", cwd=tmp_path, env=_env())
    try:
        deadline = time.monotonic() + 60
        trials = tmp_path / "jobs" / "live" / "trials"
        while not (trials.is_dir() and any(trials.iterdir())):
            assert time.monotonic() < deadline and bg.poll() is None
            time.sleep(0.2)
        p = cairn("report", "jobs/live", cwd=tmp_path)
        assert p.returncode == 0, p.stderr
        lines = p.stdout.splitlines()
        assert lines[0].startswith(
            "running: a cairn process holds this job; 0 trial(s) finished, 1 started and not finished"
        ), p.stdout
        assert lines[1].startswith("  running local-slow__1__")
    finally:
        bg.send_signal(signal.SIGINT)
        bg.communicate(timeout=60)
    after = cairn("report", "jobs/live", cwd=tmp_path)
    assert not after.stdout.startswith("running:")


@pytest.mark.local
@local
def test_tasks_sanity_prints_the_warnings_and_strict_fails_the_task(tmp_path):
    typo_task(tmp_path)
    p = cairn("tasks", "sanity", "my-task", "-e", "local", cwd=tmp_path)
    no_traceback(p)
    line = _lineno(tmp_path / "my-task" / "task.toml", "min_rewrad")
    want = (
        f"my-task/task.toml:{line}: warning: unknown key `min_rewrad` in [steps[0]] "
        "(did you mean `min_reward`?)"
    )
    assert want in p.stderr.splitlines(), p.stderr
    first_trial = next(i for i, x in enumerate(p.stderr.splitlines()) if x.startswith("[local/my-task]"))
    assert p.stderr.splitlines().index(want) < first_trial
    s = cairn("tasks", "sanity", "my-task", "-e", "local", "--strict", cwd=tmp_path)
    assert s.returncode == 1
    assert "local/my-task: FAIL" in s.stdout
    assert f"my-task/task.toml:{line}: error: unknown key `min_rewrad`" in s.stderr
