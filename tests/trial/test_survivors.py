"""What an agent phase leaves running (issue #29 "survivors on the record"; issue #34 L4).

Default mode keeps the agent's processes alive into the verifier (a server the task asked for
must still answer); they are listed on the step's row in result.json, shown by ``cairn report``
and the viewer. Before a verifier with access beyond the agent's (here: a verifier-only secret)
they are killed, so a left-over process cannot read it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cairn._util.text import printable
from cairn.netpolicy import NetworkMode, NetworkPolicy
from cairn.trial.survivors import clean_cmdline, env_wider, network_wider
from faultkit import cairn
from taskgen import write_task

LOOP = "while sleep 0.5; do echo 1 > /logs/verifier/reward.txt; done"

UP = "while [ ! -e /tmp/up ]; do sleep 0.02; done\n"
"""The end of a solution that leaves a process behind: it waits until that process runs its own
command (it touches /tmp/up). Without it the agent phase can end between the background fork and
its exec, and the survivor is listed, truly, with its parent's command line (solve.sh's)."""


def leave_running(script: str) -> str:
    """A solve.sh that leaves ``bash -c script`` running, once it runs (see :data:`UP`)."""
    return f"nohup bash -c 'touch /tmp/up; {script}' >/dev/null 2>&1 &\n" + UP


def _run(tmp_path: Path, task: Path, backend: str, *extra: str) -> dict:
    res = cairn(
        "run",
        "-p",
        str(task),
        "-a",
        "oracle",
        "-e",
        backend,
        "--jobs-dir",
        "jobs",
        "--job-name",
        "j",
        *extra,
        cwd=tmp_path,
    )
    assert "Traceback" not in res.stdout + res.stderr, res.stdout + res.stderr
    (result,) = (tmp_path / "jobs" / "j" / "trials").glob("*/result.json")
    return json.loads(result.read_text())


def test_a_process_the_agent_left_running_is_on_the_record(tmp_path, backend):
    task = write_task(
        tmp_path / "tasks",
        "survivor",
        solve=leave_running(LOOP),
        test="echo 0 > /logs/verifier/reward.txt; sleep 1.5\n",
    )
    r = _run(tmp_path, task, backend)
    step = r["steps"][0]
    loops = [s for s in step["survivors"] if LOOP in s["cmdline"]]
    assert loops, step["survivors"]
    assert loops[0]["pid"] > 1 and loops[0]["uid"] == 0 and loops[0]["user"] == "root"
    assert step["survivors_total"] >= 1 and step["survivors_killed"] is None
    # the default mode's hazard, now visible: the survivor overwrote the verifier's 0
    assert r["reward"] == 1.0
    rep = cairn("report", str(tmp_path / "jobs" / "j"), cwd=tmp_path)
    assert rep.returncode == 0 and "processes left running by agent phases" in rep.stdout
    assert LOOP in rep.stdout and "ran into it" in rep.stdout


def test_hardened_verify_says_the_survivors_were_killed(tmp_path, backend):
    task = write_task(
        tmp_path / "tasks",
        "hardened",
        solve=leave_running(LOOP),
        test="echo 0 > /logs/verifier/reward.txt; sleep 1.5\n",
    )
    r = _run(tmp_path, task, backend, "--hardened-verify")
    step = r["steps"][0]
    assert any(LOOP in s["cmdline"] for s in step["survivors"])
    assert step["survivors_killed"] == "hardened_verify" and r["reward"] == 0.0


LEAK = leave_running(
    "while true; do for e in /proc/[0-9]*/environ; do "
    'tr "\\0" "\\n" < $e 2>/dev/null | grep "^VSECRET=" >> /tmp/leak; done; '
    "sleep 0.05; done"
)


def test_a_left_over_process_cannot_read_the_verifiers_secret(tmp_path, backend):
    """#34 L4: the verifier has an env value the agent did not (``--ve``); the agent's
    processes are killed before it starts, so the one scanning /proc for it finds nothing."""
    task = write_task(
        tmp_path / "tasks",
        "leak",
        solve=LEAK,
        test="sleep 2; if grep -q VSECRET= /tmp/leak 2>/dev/null; then echo 0; "
        "else echo 1; fi > /logs/verifier/reward.txt\n",
    )
    r = _run(tmp_path, task, backend, "--ve", "VSECRET=verifier-only-value-4242")
    step = r["steps"][0]
    assert r["reward"] == 1.0, step  # 0 when the survivor read the verifier's environment
    assert step["survivors_killed"].startswith("verifier_wider: verifier-only env VSECRET")
    assert "verifier-only-value-4242" not in json.dumps(r)
    assert any("/proc/" in s["cmdline"] for s in step["survivors"])


def test_a_verifier_with_no_wider_access_keeps_the_agents_server(tmp_path, backend):
    """A server the task asked the agent to leave running still answers the verifier."""
    task = write_task(
        tmp_path / "tasks",
        "server",
        # a counter, not ``date``: two reads 1 s apart can fall in the same second of ``date``
        # (the writes come 0.2 s apart, later under load), which read as a dead server
        solve=leave_running("i=0; while true; do i=$((i+1)); echo $i > /tmp/alive; sleep 0.2; done"),
        test="a=$(cat /tmp/alive); sleep 1; "
        'if [ "$(cat /tmp/alive)" != "$a" ]; then echo 1; else echo 0; fi '
        "> /logs/verifier/reward.txt\n",
    )
    r = _run(tmp_path, task, backend)
    assert r["reward"] == 1.0 and r["steps"][0]["survivors_killed"] is None


def test_command_lines_are_bounded_and_escaped():
    hostile = "\x1b]0;pwned\x07\x1b[2J" + "x\ny\r" + "\u202e" + "z" * 2000
    out = clean_cmdline(hostile)
    assert len(out) == 512 and out.endswith("\u2026")
    assert "\x1b" not in out and "\n" not in out and "\u202e" not in out
    assert out.startswith("\\x1b]0;pwned\\x07\\x1b[2J") and "x\\x0ay\\x0d\\u202e" in out
    assert printable("plain text") == "plain text"


def test_what_counts_as_wider_access():
    none = NetworkPolicy(NetworkMode.NO_NETWORK)
    allow = NetworkPolicy(NetworkMode.ALLOWLIST, ("a.test",))
    assert network_wider(none, none) is None
    assert network_wider(allow, allow) is None
    assert network_wider(allow, none) is None  # narrower
    assert "b.test" in network_wider(allow, NetworkPolicy(NetworkMode.ALLOWLIST, ("a.test", "b.test")))
    assert network_wider(none, NetworkPolicy(NetworkMode.PUBLIC)) is not None
    assert network_wider(NetworkPolicy(NetworkMode.PUBLIC), NetworkPolicy(NetworkMode.PUBLIC)) is None
    judge = none.with_model_hosts(["judge.test"])
    assert "judge.test" in network_wider(none, judge)
    assert env_wider({"A": "1"}, {"A": "1"}) is None
    assert env_wider({}, {"KEY": "secret"}) == "verifier-only env KEY"
    assert "secret" not in env_wider({"KEY": "x"}, {"KEY": "secret"})


def test_after_the_agent_phase_a_sandbox_without_its_verifier_opens_nothing_wider():
    from types import SimpleNamespace

    from cairn.trial.context import PhaseNetworks
    from cairn.trial.survivors import after_agent_policy

    env = NetworkPolicy(NetworkMode.ALLOWLIST, ("env.test",))
    agent = NetworkPolicy(NetworkMode.NO_NETWORK, (), ("model.test",))
    nets = PhaseNetworks(env, agent={1: agent})

    def after(mode: str, verify: bool = True, networks: PhaseNetworks | None = nets):
        step = SimpleNamespace(index=1, verifier_mode=mode)
        return after_agent_policy(step, SimpleNamespace(networks=networks, verify=verify))

    # a shared verifier gets its policy (the environment's); the survivors were killed first
    assert after("shared") == env
    # no verifier here: the agent's own policy, its model opening closed
    assert after("separate") == after("shared", verify=False) == NetworkPolicy(NetworkMode.NO_NETWORK)
    # an agent allowlist keeps its hosts, not the model's
    wide_agent = NetworkPolicy(NetworkMode.ALLOWLIST, ("a.test",), ("model.test",))
    nets2 = PhaseNetworks(NetworkPolicy(NetworkMode.PUBLIC), agent={1: wide_agent})
    assert after("separate", networks=nets2) == NetworkPolicy(NetworkMode.ALLOWLIST, ("a.test",))
    # an environment no wider than the agent's stays as it is
    nets3 = PhaseNetworks(NetworkPolicy(NetworkMode.NO_NETWORK), agent={1: wide_agent})
    assert after("separate", networks=nets3) == NetworkPolicy(NetworkMode.NO_NETWORK)
    assert after("separate", networks=None) is None


REACH = r"""
import os, re, time, urllib.request
open("/tmp/up", "w").close()  # running its own command line now (UP)
def proxies():
    found = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
            except OSError:
                continue
            for kv in env:
                k, _, v = kv.decode(errors="replace").partition("=")
                if k.lower() == "http_proxy" and v:
                    found["http"] = v
    return found
while True:  # the verifier's proxy, taken from its processes' environment once it runs
    via = proxies()
    if via:
        try:
            opener = urllib.request.build_opener(urllib.request.ProxyHandler(via))
            body = opener.open("http://allowed.test/", timeout=2).read().decode()
            open("/tmp/reached", "a").write(body)
        except Exception:
            pass
    time.sleep(0.1)
"""

VERIFY_REACH = (
    "python3 - <<'EOF' > /logs/verifier/verifier-reach.txt 2>&1\n"
    "import urllib.request\n"
    "print(urllib.request.urlopen('http://allowed.test/', timeout=10).read().decode())\n"
    "EOF\n"
    "sleep 2\n"
    "if [ -s /tmp/reached ]; then echo 0; else echo 1; fi > /logs/verifier/reward.txt\n"
)


@pytest.mark.docker
def test_a_left_over_process_cannot_reach_the_verifier_only_host(tmp_path):
    """#34 L4 on docker: the verifier's allowlist opens a host (a container this test starts)
    the no-network agent phase does not; the agent's left-over process, which looks for the
    proxy in every process's environment, reaches nothing: it is killed before the switch."""
    from nethosts import host_containers
    from testbed import backend_available, run_trial_sync

    if not backend_available("docker"):
        pytest.skip("no Docker engine")
    task = write_task(
        tmp_path / "tasks",
        "reach",
        solve="nohup python3 /opt/reach.py >/dev/null 2>&1 &\n" + UP,
        files={"environment/reach.py": REACH},
        test=VERIFY_REACH,
        dockerfile="FROM debian:bookworm-slim\nWORKDIR /app\nCOPY reach.py /opt/reach.py\n",
        toml_extra='[verifier]\nnetwork_mode = "allowlist"\nallowed_hosts = ["allowed.test"]\n',
    )
    with host_containers("allowed.test") as addrs:
        r = run_trial_sync(task, "oracle", "docker", tmp_path / "jobs", add_hosts=tuple(addrs.items()))
    step = r.steps[0]
    trial = tmp_path / "jobs" / "job" / "trials" / r.trial_name
    reach = (trial / "steps" / "01-main" / "verifier" / "verifier-reach.txt").read_text()
    assert "host=allowed.test" in reach, reach  # the verifier itself reaches the host
    assert r.reward == 1.0, (step.warnings, step.survivors_killed)  # the survivor did not
    assert step.survivors_killed and "allowed.test" in step.survivors_killed
    assert any("reach.py" in s.cmdline for s in step.survivors)


def test_the_next_steps_set_up_is_wider_only_when_the_environment_opens_more():
    """N1 (issue 34): step k's set-up runs under the environment's policy; it is wider than
    what step k-1's agent phase had exactly when ``network_wider`` says so, never for step 1."""
    from types import SimpleNamespace

    from cairn.trial.context import PhaseNetworks
    from cairn.trial.survivors import setup_wider

    env = NetworkPolicy(NetworkMode.ALLOWLIST, ("env.test",))
    narrow = NetworkPolicy(NetworkMode.NO_NETWORK, (), ("model.test",))

    def why(index: int, nets: PhaseNetworks | None) -> str | None:
        return setup_wider(SimpleNamespace(index=index), SimpleNamespace(networks=nets))

    nets = PhaseNetworks(env, agent={1: narrow, 2: env})
    assert why(1, nets) is None  # step 1 starts in the environment's policy, no agent ran yet
    assert "env.test" in why(2, nets)  # step 1's agent had no network
    assert why(3, nets) is None  # step 2's agent had the environment's allowlist itself
    assert why(2, None) is None
    assert why(2, PhaseNetworks(NetworkPolicy(NetworkMode.PUBLIC))) is None  # nothing filters


CHAIN = (
    "cat > /tmp/c.sh <<'SH'\n"
    "echo $$ >> /tmp/chain\n"
    "sleep 0.01\n"
    "sh /tmp/c.sh &\n"
    "SH\n"
    "sh /tmp/c.sh &\n"
    # a process named after docker's keeper, a child of PID 1 once its parent exits
    "setsid bash -c 'exec -a cairn-keeper sleep 7781' >/dev/null 2>&1 < /dev/null &\n"
    "for i in $(seq 200); do [ -s /tmp/chain ] && break; sleep 0.02; done\n"
)

# the verifier: the chain has stopped growing and the fake keeper is gone
CHAIN_GONE = (
    "a=$(wc -l < /tmp/chain); sleep 1; b=$(wc -l < /tmp/chain)\n"
    "fake=0; for p in /proc/[0-9]*; do\n"
    "  tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -q 'cairn-keeper 7781' && fake=1\n"
    "done\n"
    'if [ "$a" = "$b" ] && [ $fake = 0 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n'
    'echo "chain $a $b fake $fake" > /logs/verifier/seen.txt\n'
)


def test_hardened_verify_kills_a_fork_chain_and_a_fake_keeper(tmp_path, backend):
    """Review of #34: a script that starts its next copy and exits stays ahead of a list-then-kill
    loop, and a process renamed ``cairn-keeper`` under PID 1 was spared as docker's keeper. The
    kill stops every new process first and scans again; the keeper is the pid found at start."""
    task = write_task(tmp_path / "tasks", "chain", solve=CHAIN, test=CHAIN_GONE)
    r = _run(tmp_path, task, backend, "--hardened-verify")
    seen = next((tmp_path / "jobs" / "j" / "trials").glob("*/steps/01-main/verifier/seen.txt"))
    assert r["reward"] == 1.0, seen.read_text()
    assert r["steps"][0]["survivors_killed"] == "hardened_verify"


# the agent swaps /usr/bin/sleep for a wrapper that starts a heartbeat first, then kills every
# `sleep` it can: a keeper that ran `sleep` in a loop ran the wrapper after each kill of the
# agent's processes (it is the one process they spare), and the heartbeat outlived the kill
SLEEP_SWAP = (
    'real=$(command -v sleep); cp "$real" /usr/local/bin/.sleep-real\n'
    "cat > /tmp/hb.sh <<'SH'\n"
    "while :; do date +%s%N > /tmp/hb; /usr/local/bin/.sleep-real 0.05; done\n"
    "SH\n"
    "for s in /usr/bin/sleep /bin/sleep; do\n"
    "  [ -e $s ] || continue\n"
    "  printf '#!/bin/sh\\nsetsid sh /tmp/hb.sh >/dev/null 2>&1 < /dev/null &\\n"
    'exec /usr/local/bin/.sleep-real "$@"\\n\' > $s.new && chmod +x $s.new && mv -f $s.new $s\n'
    "done\n"
    "for p in /proc/[0-9]*; do\n"
    "  tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -q '^sleep 2147483647' && kill ${p#/proc/}\n"
    "done\n"
    "for i in $(seq 100); do [ -s /tmp/hb ] && break; /usr/local/bin/.sleep-real 0.05; done\n"
)

HEARTBEAT_GONE = (
    "a=$(cat /tmp/hb 2>/dev/null); /usr/local/bin/.sleep-real 1; b=$(cat /tmp/hb 2>/dev/null)\n"
    'if [ "$a" = "$b" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n'
)


def test_hardened_verify_leaves_no_program_the_agent_swapped_in_to_run_afterwards(tmp_path, backend):
    task = write_task(tmp_path / "tasks", "swap", solve=SLEEP_SWAP, test=HEARTBEAT_GONE)
    r = _run(tmp_path, task, backend, "--hardened-verify")
    assert r["reward"] == 1.0, r["steps"][0]


# Python start-up hooks an agent plants for the verifier's python3: a .pth whose time is set
# back (the modification time only: the inode's change time cannot be), a .pth that starts a
# daemon when any python3 with site runs (cairn's own clean-up ran one as root, after the kill),
# a symlinked .pth and a sitecustomize package
PLANT = (
    "d=$(python3 -c 'import site; print(site.getsitepackages()[0])'); mkdir -p \"$d\"\n"
    "cat > /tmp/hb.sh <<'SH'\n"
    "while :; do date +%s%N > /tmp/hb; sleep 0.05; done\n"
    "SH\n"
    "echo \"import os; open('/tmp/hooked', 'a').write('old ')\" > \"$d/zz_old.pth\"\n"
    'touch -d 2000-01-01 "$d/zz_old.pth"\n'
    "echo \"import subprocess; subprocess.Popen(['sh', '/tmp/hb.sh'], start_new_session=True)\" "
    "> /tmp/daemon.pth\n"
    'ln -s /tmp/daemon.pth "$d/zz_daemon.pth"\n'
    "mkdir -p \"$d/sitecustomize\"; echo \"open('/tmp/hooked', 'a').write('pkg ')\" "
    '> "$d/sitecustomize/__init__.py"\n'
    'echo "$d" > /tmp/site-dir\n'
)

HOOKS_GONE = (
    "d=$(cat /tmp/site-dir); rm -f /tmp/hooked\n"
    "python3 -c pass\n"
    "a=$(cat /tmp/hb 2>/dev/null); sleep 1; b=$(cat /tmp/hb 2>/dev/null)\n"
    'left=$(ls -A "$d" | grep -E "^(zz_|sitecustomize)" | tr "\\n" " ")\n'
    'echo "hooked=$(cat /tmp/hooked 2>/dev/null) hb=$a/$b left=$left" > /logs/verifier/seen.txt\n'
    'if [ ! -e /tmp/hooked ] && [ "$a" = "$b" ] && [ -z "$left" ]; then echo 1; else echo 0; fi '
    "> /logs/verifier/reward.txt\n"
)


def test_hardened_verify_removes_the_planted_hooks_without_running_them(tmp_path, backend):
    """A fresh-clone attack on ``--hardened-verify``: the hook clean-up asked ``python3`` (with
    site) for the site folders, which ran a planted ``.pth`` as root after the kill, and it kept
    files whose modification time was set back, symlinks and packages."""
    task = write_task(tmp_path / "tasks", "hooks", solve=PLANT, test=HOOKS_GONE)
    r = _run(tmp_path, task, backend, "--hardened-verify")
    seen = next((tmp_path / "jobs" / "j" / "trials").glob("*/steps/01-main/verifier/seen.txt"))
    assert r["reward"] == 1.0, seen.read_text()
