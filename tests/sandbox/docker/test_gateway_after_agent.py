"""After the agent phase, the agent's left-over processes get no opening its phase did not
have (issue 34, "Before a verifier phase whose openings … go beyond the agent phase's").

A task whose ``[environment]`` opens a host on an allowlist while its ``[agent]`` phase is
``no-network``, verified in a separate sandbox (design §4.6). Between the agent phase and the
artifact collection the agent's sandbox used to switch back to the environment's policy: a
process the agent left running could then fetch from the environment's host and rewrite the
artifact the separate verifier scores. The same holds under ``--no-verify``, where nothing of
the task's verifier runs in the sandbox after the agent either.

The task's ``pre_artifacts.sh`` (which runs after the switch) tells the left-over process when
to try, and waits for its answer, so the attempt falls in that window on every run. The host is
a container the test starts (tests/helpers/nethosts).
"""

from __future__ import annotations

import json

import pytest

from cairn.agents.base import Agent

docker = pytest.importorskip("docker")
from nethosts import host_containers, requests_seen  # noqa: E402
from taskgen import write_task  # noqa: E402
from testbed import backend_available, run_trial_sync  # noqa: E402

pytestmark = pytest.mark.docker

SURVIVOR = r"""
import os, time, urllib.request
proxy = os.environ.get("HTTP_PROXY") or os.environ.get("http_proxy") or ""
opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy}))
open("/tmp/survivor-ready", "w").close()
deadline = time.monotonic() + 120
while not os.path.exists("/tmp/after-switch") and time.monotonic() < deadline:
    time.sleep(0.02)
try:
    body = opener.open("http://envonly.test/leak", timeout=5).read().decode()
    with open("/app/out.txt", "w") as f:
        f.write("tampered")
    res = "got " + body
except Exception as exc:
    res = f"error {type(exc).__name__} {exc}"
with open("/tmp/tried.part", "w") as f:
    f.write(res)
os.rename("/tmp/tried.part", "/tmp/tried.txt")
"""

PRE_ARTIFACTS = """\
touch /tmp/after-switch
for i in $(seq 600); do [ -e /tmp/tried.txt ] && break; sleep 0.05; done
"""

VERIFY = """\
if [ "$(cat /app/out.txt)" = result-42 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
"""


class _Leaver(Agent):
    """Writes the answer, then leaves a process that tries the environment's host later."""

    name = "leaver"

    async def run(self, instruction, sandbox, context) -> None:
        import asyncio

        assert (await sandbox.exec(["sh", "-c", "mkdir -p /app && echo result-42 > /app/out.txt"])).ok
        assert (await sandbox.exec(["sh", "-c", f"cat > /tmp/surv.py <<'PY'\n{SURVIVOR}PY\n"])).ok
        leave = "setsid nohup python3 /tmp/surv.py > /tmp/surv.log 2>&1 < /dev/null &"
        r = await sandbox.exec(["sh", "-c", leave])
        assert r.ok, r.stderr
        for _ in range(400):
            if (await sandbox.exec(["test", "-e", "/tmp/survivor-ready"])).ok:
                return
            await asyncio.sleep(0.05)
        raise AssertionError((await sandbox.exec(["cat", "/tmp/surv.log"])).stdout)


def _task(root, *, separate: bool):
    extra = '[agent]\nnetwork_mode = "no-network"\n'
    if separate:
        extra += (
            '[verifier]\nenvironment_mode = "separate"\n'
            '[verifier.environment]\ndocker_image = "python:3.12-slim"\nnetwork_mode = "no-network"\n'
        )
    return write_task(
        root,
        "narrow-agent",
        network="allowlist",
        allowed_hosts=("envonly.test",),
        root_keys='artifacts = ["/app/out.txt", "/tmp/tried.txt"]',
        dockerfile="FROM python:3.12-slim\nWORKDIR /app\n",
        test=VERIFY,
        toml_extra=extra,
        files={"pre_artifacts.sh": PRE_ARTIFACTS},
    )


@pytest.mark.parametrize("separate", [True, False], ids=["separate-verifier", "no-verify"])
def test_a_left_over_process_gets_no_environment_opening_after_the_agent_phase(tmp_path, separate):
    if not backend_available("docker"):
        pytest.skip("no Docker engine")
    with host_containers("envonly.test") as hosts:
        task = _task(tmp_path / "tasks", separate=separate)
        result = run_trial_sync(
            task,
            _Leaver(None),
            "docker",
            tmp_path / "jobs",
            add_hosts=tuple(hosts.items()),
            **({} if separate else {"verify": False}),
        )
        seen = requests_seen(hosts, "envonly.test")
    assert result.error is None, result.error
    trial = tmp_path / "jobs" / "job" / "trials" / result.trial_name
    (tried,) = [p for p in trial.rglob("tried.txt") if p.is_file()]
    answer = tried.read_text()
    # the attempt was made after the switch (pre_artifacts.sh waited for it) and got nothing
    assert answer.startswith("error"), answer
    assert seen == [], seen
    (out,) = [p for p in trial.rglob("out.txt") if p.is_file()]
    assert out.read_text().strip() == "result-42"
    if separate:
        assert result.reward == 1.0, result.steps[0]
    lines = (trial / "steps" / "01-main" / "network.jsonl").read_text().splitlines()
    leak = [r for r in map(json.loads, lines) if r.get("host") == "envonly.test"]
    assert leak and all(r["verdict"] == "denied" and r["address"] is None for r in leak), leak
    assert {r["phase"] for r in leak} == {"verifier" if separate else "after-agent"}, leak


# ---- the next step's set-up (issue 34, N1) ------------------------------------------------------

NEXT_SURVIVOR = r"""
import os, time, urllib.request
proxy = os.environ.get("HTTP_PROXY") or os.environ.get("http_proxy") or ""
opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy}))
with open("/tmp/survivor.pid", "w") as f:
    f.write(str(os.getpid()))
open("/tmp/survivor-ready", "w").close()
deadline = time.monotonic() + 120
while not os.path.exists("/tmp/in-setup") and time.monotonic() < deadline:
    time.sleep(0.02)
try:
    res = "got " + opener.open("http://envonly.test/leak", timeout=5).read().decode()
except Exception as exc:
    res = f"error {type(exc).__name__} {exc}"
with open("/tmp/tried.part", "w") as f:
    f.write(res)
os.rename("/tmp/tried.part", "/tmp/tried.txt")
"""

LEAVE_NEXT = (
    "cat > /tmp/surv.py <<'PY'\n" + NEXT_SURVIVOR + "PY\n"
    "setsid nohup python3 /tmp/surv.py > /tmp/surv.log 2>&1 < /dev/null &\n"
    "for i in $(seq 400); do [ -e /tmp/survivor-ready ] && exit 0; sleep 0.05; done\n"
    "cat /tmp/surv.log; exit 1\n"
)

# step 2's set-up, under the environment's allowlist: it tells the left-over process to try and
# waits until it has (or is gone), so its attempt falls inside the set-up on every run
NEXT_SETUP = """\
touch /tmp/in-setup
pid=$(cat /tmp/survivor.pid)
for i in $(seq 600); do
  [ -e /tmp/tried.txt ] && break
  [ -d "/proc/$pid" ] || break
  sleep 0.05
done
cp /tmp/tried.txt /app/tried.txt 2>/dev/null || echo none > /app/tried.txt
"""


@pytest.mark.parametrize("separate", [True, False], ids=["separate-verifier", "no-verify"])
def test_the_next_steps_set_up_gives_an_earlier_agents_process_no_opening(tmp_path, separate):
    """N1: from step 2 on, the set-up runs under the ``[environment]`` allowlist; a process step
    1's no-network agent left running is killed before the switch, so it reaches nothing."""
    from taskgen import StepSpec

    if not backend_available("docker"):
        pytest.skip("no Docker engine")
    extra = '[agent]\nnetwork_mode = "no-network"\n'
    if separate:
        extra += (
            '[verifier]\nenvironment_mode = "separate"\n'
            '[verifier.environment]\ndocker_image = "python:3.12-slim"\nnetwork_mode = "no-network"\n'
        )
    task = write_task(
        tmp_path / "tasks",
        "next-setup",
        network="allowlist",
        allowed_hosts=("envonly.test",),
        root_keys='artifacts = ["/app/tried.txt"]',
        dockerfile="FROM python:3.12-slim\nWORKDIR /app\n",
        toml_extra=extra,
        steps=[
            StepSpec("leave", solve=LEAVE_NEXT, test="echo 1 > /logs/verifier/reward.txt\n"),
            StepSpec(
                "next",
                solve="true\n",
                test="echo 1 > /logs/verifier/reward.txt\n",
                workdir={"setup.sh": NEXT_SETUP},
            ),
        ],
    )
    with host_containers("envonly.test") as hosts:
        result = run_trial_sync(
            task,
            "oracle",
            "docker",
            tmp_path / "jobs",
            add_hosts=tuple(hosts.items()),
            **({} if separate else {"verify": False}),
        )
        seen = requests_seen(hosts, "envonly.test")
    assert result.error is None, result.error
    assert [s.index for s in result.steps] == [1, 2], result.steps
    trial = tmp_path / "jobs" / "job" / "trials" / result.trial_name
    (tried,) = [p for p in trial.rglob("tried.txt") if p.is_file() and "02-next" in str(p)]
    # killed before the set-up: the process never tried (before the fix: "got …")
    assert tried.read_text().strip() == "none", tried.read_text()
    assert seen == [], seen
    step2 = result.steps[1]
    assert any("before this step's set-up" in w and "envonly.test" in w for w in step2.warnings), (
        step2.warnings
    )
    # step 1's row still lists the process it left
    assert any("surv.py" in s.cmdline for s in result.steps[0].survivors), result.steps[0].survivors
