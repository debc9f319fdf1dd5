"""The local backend against issue 4's acceptance lines: isolation from the host, refusals
before anything runs, process-tree kill, symlink-safe transfers, clean-up helpers."""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import uuid
from pathlib import Path

import pytest

from cairn.errors import SandboxError, UnsupportedError
from cairn.sandbox.base import NetworkMode, SandboxSpec
from cairn.sandbox.local.backend import LocalSandbox, find_local_sandboxes, remove_local_sandbox
from cairn.sandbox.local.dockerfile import NEEDS_DOCKER
from cairn.sandbox.local.layer import layer_key
from cairn.sandbox.local.rootfs import layers_dir, probe_host, process_start_ticks
from testbed import local_available

DOCKER_CAPS_MASK = "00000000a80425fb"


pytestmark = [pytest.mark.local, pytest.mark.skipif(not local_available(), reason="no local sandbox support")]


def _spec(**kw: object) -> SandboxSpec:
    fields: dict[str, object] = {
        "network_mode": NetworkMode.NO_NETWORK,
        "job_id": "test-local",
        "trial_id": f"t-{uuid.uuid4().hex[:10]}",
    }
    fields.update(kw)
    return SandboxSpec(**fields)  # type: ignore[arg-type]


async def _sh(sb: LocalSandbox, cmd: str, **kw: object) -> str:
    r = await sb.exec(cmd, **kw)  # type: ignore[arg-type]
    assert r.ok, f"{cmd!r}: exit {r.exit_code}, stderr {r.stderr!r}"
    return r.stdout


def _sha(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_writes_to_system_folders_never_touch_the_host() -> None:
    probe = f"cairn-probe-{uuid.uuid4().hex[:8]}"
    passwd_before = _sha("/etc/passwd")

    async def main() -> None:
        async with LocalSandbox(_spec()) as sb:
            await _sh(
                sb,
                f"echo in > /usr/bin/{probe} && echo in > /etc/{probe} "
                "&& echo 'intruder:x:0:0::/:/bin/sh' >> /etc/passwd "
                f"&& rm -f /usr/bin/env && mkdir -p /opt/{probe}",
            )
            assert (await _sh(sb, f"cat /usr/bin/{probe} /etc/{probe}")) == "in\nin\n"
            assert "intruder" in await _sh(sb, "cat /etc/passwd")
            assert (await sb.exec("test -e /usr/bin/env")).exit_code == 1

    asyncio.run(main())
    assert not os.path.lexists(f"/usr/bin/{probe}")
    assert not os.path.lexists(f"/etc/{probe}")
    assert not os.path.lexists(f"/opt/{probe}")
    assert os.path.exists("/usr/bin/env")
    assert _sha("/etc/passwd") == passwd_before


def test_host_private_folders_and_secrets_are_not_visible(tmp_path: Path) -> None:
    probe = f"cairn-probe-{uuid.uuid4().hex[:8]}"
    planted = [tmp_path / probe, Path("/root") / probe]
    if Path("/home").is_dir():
        planted.append(Path("/home") / probe)
    for p in planted:
        p.write_text("host secret\n")
    try:

        async def main() -> None:
            async with LocalSandbox(_spec()) as sb:
                for p in planted:
                    assert (await sb.exec(["test", "-e", str(p)])).exit_code == 1, p
                assert (await _sh(sb, "ls -A /root /home /tmp /run")).split() == [
                    "/home:",
                    "/root:",
                    "/run:",
                    "/tmp:",
                ]
                for hidden in (
                    "/work",
                    "/var/lib/docker",
                    "/var/lib/containerd",
                    "/etc/shadow",
                    "/etc/gshadow",
                ):
                    r = await sb.exec(["cat", hidden])
                    assert r.exit_code != 0 and r.stdout == "", hidden
                r = await sb.exec("ls /etc/ssh/ | grep -c key || true")
                assert r.stdout.strip() in ("", "0")
                # Only the sandbox's own processes are visible.
                pids = (await _sh(sb, "ls /proc | grep -E '^[0-9]+$'")).split()
                assert "1" in pids and len(pids) < 10
                status = await _sh(sb, "cat /proc/self/status")
                assert f"CapBnd:\t{DOCKER_CAPS_MASK}" in status
                assert f"CapEff:\t{DOCKER_CAPS_MASK}" in status
                assert "NoNewPrivs:\t1" in status
                r = await sb.exec("echo h > /proc/sysrq-trigger")
                assert r.exit_code != 0
                # The caller's environment does not leak in.
                os.environ["CAIRN_TEST_HOST_SECRET"] = "leak"
                try:
                    assert "CAIRN_TEST_HOST_SECRET" not in await _sh(sb, "env")
                finally:
                    del os.environ["CAIRN_TEST_HOST_SECRET"]

        asyncio.run(main())
    finally:
        for p in planted:
            p.unlink()


def test_no_network_has_only_loopback_and_public_shares_the_host() -> None:
    async def main() -> tuple[list[str], list[str]]:
        async with LocalSandbox(_spec(network_mode=NetworkMode.NO_NETWORK)) as sb:
            none_ifaces = (await _sh(sb, "ls /sys/class/net")).split()
            assert "UP" in await _sh(
                sb, "cat /sys/class/net/lo/operstate; ip link show lo 2>/dev/null || echo UP"
            )
            assert (
                await _sh(
                    sb,
                    'python3 -c "import socket; s=socket.socket(); '
                    "s.bind(('127.0.0.1', 0)); s.listen(); "
                    "c=socket.create_connection(s.getsockname()); print('ok')\"",
                )
            ).strip() == "ok"
        async with LocalSandbox(_spec(network_mode=NetworkMode.PUBLIC)) as sb:
            # the host's network namespace itself (its identity, not a listing of interfaces,
            # which other tests' containers change meanwhile)
            public_netns = (await _sh(sb, "readlink /proc/self/ns/net")).strip()
        return none_ifaces, public_netns

    none_ifaces, public_netns = asyncio.run(main())
    assert none_ifaces == ["lo"]
    assert public_netns == os.readlink("/proc/self/ns/net")


@pytest.mark.parametrize(
    "files, needle",
    [
        (
            {
                "Dockerfile": "FROM golang:1.22 AS build\nRUN go build -o /app\n"
                "FROM debian:bookworm-slim\nCOPY --from=build /app /app\n"
            },
            "multi-stage",
        ),
        (
            {
                "Dockerfile": "FROM debian:bookworm-slim\n",
                "docker-compose.yaml": "services:\n  main:\n    build: .\n",
            },
            "compose",
        ),
    ],
)
def test_refused_before_anything_runs(tmp_path: Path, files: dict[str, str], needle: str) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    spec = _spec(env_dir=tmp_path, env_hash=uuid.uuid4().hex)
    with pytest.raises(UnsupportedError) as exc:
        LocalSandbox.check(spec)
    assert NEEDS_DOCKER in str(exc.value) and needle in str(exc.value)
    sb = LocalSandbox(spec)

    async def main() -> None:
        try:
            await sb.start()
        finally:
            await sb.stop()

    with pytest.raises(UnsupportedError, match=NEEDS_DOCKER):
        asyncio.run(main())
    assert not [m for _, m in find_local_sandboxes() if m.get("trial_id") == spec.trial_id]
    assert not (layers_dir() / layer_key(spec)).exists()
    assert not list(layers_dir().glob(f".build-{layer_key(spec)[:16]}-*"))


def test_allowlist_refused() -> None:
    with pytest.raises(UnsupportedError, match="unsupported network mode.*use -e docker"):
        LocalSandbox.check(_spec(network_mode=NetworkMode.ALLOWLIST))


def test_model_host_under_no_network_and_phase_switches_refused() -> None:
    from cairn.netpolicy import NetworkPolicy

    model = NetworkPolicy(NetworkMode.NO_NETWORK, (), ("api.example.com",))
    with pytest.raises(UnsupportedError, match="cannot enforce.*use -e docker"):
        LocalSandbox.check(_spec(network_mode=NetworkMode.NO_NETWORK, network_phases=(model,)))
    with pytest.raises(UnsupportedError, match="cannot switch the network between phases"):
        LocalSandbox.check(
            _spec(network_mode=NetworkMode.PUBLIC, network_phases=(NetworkPolicy(NetworkMode.NO_NETWORK),))
        )
    # public with a model host is plain public: nothing to filter, nothing refused
    assert (
        LocalSandbox.check(
            _spec(
                network_mode=NetworkMode.PUBLIC,
                network_phases=(NetworkPolicy(NetworkMode.PUBLIC, (), ("api.example.com",)),),
            )
        )
        == []
    )


def test_timeout_kills_the_whole_tree_seen_from_the_host() -> None:
    tag = uuid.uuid4().int % 1000 + 8000

    def host_sleepers() -> list[int]:
        out = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmd[:1] == [b"sleep"] and cmd[1:2] and cmd[1].startswith(str(tag).encode()):
                out.append(int(pid))
        return out

    async def main() -> None:
        async with LocalSandbox(_spec()) as sb:
            r = await sb.exec(
                f"(sleep {tag}1 &); setsid sleep {tag}2 & nohup sleep {tag}3 "
                f">/dev/null 2>&1 & env -u HOME sleep {tag}4 & sleep {tag}5",
                timeout_sec=1.5,
            )
            assert r.timed_out and r.exit_code is None
            assert host_sleepers() == []
            assert (await _sh(sb, "echo alive")) == "alive\n"

    asyncio.run(main())


def test_transfers_never_follow_planted_links_to_the_host(tmp_path: Path) -> None:
    src = tmp_path / "payload.txt"
    src.write_text("payload\n")
    probe = f"cairn-probe-{uuid.uuid4().hex[:8]}"

    async def main() -> None:
        async with LocalSandbox(_spec()) as sb:
            await _sh(
                sb,
                "mkdir -p /app && ln -s /etc /app/etc-link && ln -s ../../../.. /app/up "
                "&& ln -s /etc/hostname /app/host-file",
            )
            await sb.upload(src, f"/app/etc-link/{probe}")
            await sb.upload(src, f"/app/up/{probe}")
            assert (await _sh(sb, f"cat /etc/{probe} /{probe}")) == "payload\npayload\n"
            out = tmp_path / "hostname-copy"
            await sb.download("/app/etc-link/hostname", out)
            assert out.read_text() == (await _sh(sb, "cat /etc/hostname"))
            link_out = tmp_path / "link-copy"
            await sb.download("/app/host-file", link_out)
            assert link_out.is_symlink() and os.readlink(link_out) == "/etc/hostname"
            with pytest.raises(
                FileNotFoundError, match="^no such path in the sandbox: /app/etc-link/no-such-file$"
            ):
                await sb.download("/app/etc-link/no-such-file", tmp_path / "x")

    asyncio.run(main())
    assert not os.path.lexists(f"/etc/{probe}")
    assert not os.path.lexists(f"/{probe}")


def test_kept_sandbox_is_found_and_removed_by_clean_helpers(tmp_path: Path) -> None:
    spec = _spec(keep=True, job_dir=tmp_path / "job")

    async def main() -> None:
        sb = LocalSandbox(spec)
        async with sb:
            await _sh(sb, "nohup sleep 600 >/dev/null 2>&1 &")
        with pytest.raises(SandboxError, match=r"^local sandbox is not running \(state stopped\)$"):
            await sb.exec("true")

    asyncio.run(main())
    found = [(p, m) for p, m in find_local_sandboxes() if m.get("trial_id") == spec.trial_id]
    assert len(found) == 1
    path, marker = found[0]
    assert marker["job_id"] == "test-local" and marker["job_dir"] == str(tmp_path / "job")
    assert marker["backend"] == "local" and marker["created_at"]
    assert process_start_ticks(marker["pid"]) == marker["pid_start_ticks"], "kept init died"
    remove_local_sandbox(path)
    assert not path.exists()
    assert process_start_ticks(marker["pid"]) != marker["pid_start_ticks"]
    remove_local_sandbox(path)  # already gone: no error
    with pytest.raises(ValueError, match=f"^{re.escape(str(tmp_path))} is not a local sandbox folder$"):
        remove_local_sandbox(tmp_path)


def test_stop_removes_the_sandbox_folder_and_processes() -> None:
    spec = _spec()

    async def main() -> tuple[Path, int]:
        sb = LocalSandbox(spec)
        await sb.start()
        [(path, marker)] = [(p, m) for p, m in find_local_sandboxes() if m.get("trial_id") == spec.trial_id]
        await _sh(sb, "nohup sleep 600 >/dev/null 2>&1 &")
        await sb.stop()
        await sb.stop()
        return path, marker["pid"]

    path, pid = asyncio.run(main())
    assert not path.exists()
    assert not os.path.exists(f"/proc/{pid}")


def test_unknown_user_and_missing_cwd() -> None:
    async def main() -> None:
        async with LocalSandbox(_spec()) as sb:
            r = await sb.exec("id", user="nosuchuser")
            assert r.exit_code == 126 and "unable to find user nosuchuser" in r.stderr
            r = await sb.exec("pwd", cwd="/no/such/dir")
            assert r.exit_code == 126 and "/no/such/dir" in r.stderr
            r = await sb.exec(["id", "-u"], user=4321)
            assert r.ok and r.stdout == "4321\n"
            big = "x" * 100_000
            r = await sb.exec(["printenv", "BIG"], env={"BIG": big})
            assert r.ok and r.stdout == big + "\n"

    asyncio.run(main())


def test_probe_refuses_without_root_or_user_namespaces(tmp_path: Path) -> None:
    (tmp_path / "filesystems").write_text("nodev\tproc\nnodev\toverlay\n")
    (tmp_path / "sys" / "kernel").mkdir(parents=True)
    (tmp_path / "sys" / "user").mkdir(parents=True)
    (tmp_path / "sys" / "kernel" / "unprivileged_userns_clone").write_text("0\n")
    (tmp_path / "sys" / "user" / "max_user_namespaces").write_text("0\n")
    with pytest.raises(UnsupportedError) as exc:
        probe_host(euid=1000, proc_root=tmp_path, which=lambda _: "/usr/bin/unshare")
    assert "needs root or unprivileged user namespaces" in str(exc.value)
    assert "unprivileged_userns_clone = 0" in str(exc.value)
    (tmp_path / "sys" / "kernel" / "unprivileged_userns_clone").write_text("1\n")
    (tmp_path / "sys" / "user" / "max_user_namespaces").write_text("100\n")
    assert not probe_host(euid=1000, proc_root=tmp_path, which=lambda _: "/usr/bin/unshare").privileged
    assert probe_host(euid=0, proc_root=tmp_path, which=lambda _: "/usr/bin/unshare").privileged
    with pytest.raises(UnsupportedError, match="unshare"):
        probe_host(euid=0, proc_root=tmp_path, which=lambda _: None)
    old = tmp_path / "old-unshare"
    old.write_text("#!/bin/sh\necho 'Usage: unshare [options] --map-root-user'\n")
    old.chmod(0o755)
    with pytest.raises(UnsupportedError, match="lacks --keep-caps"):
        probe_host(euid=0, proc_root=tmp_path, which=lambda _: str(old))
    (tmp_path / "filesystems").write_text("nodev\tproc\n")
    with pytest.raises(UnsupportedError, match="overlayfs"):
        probe_host(euid=0, proc_root=tmp_path, which=lambda _: "/usr/bin/unshare")


CRASHING_OWNER = """\
import asyncio, os, sys
from cairn.sandbox.base import NetworkMode, SandboxSpec
from cairn.sandbox.local.backend import LocalSandbox

async def main():
    sb = LocalSandbox(SandboxSpec(network_mode=NetworkMode.NO_NETWORK, job_id="test-local",
                                  trial_id=sys.argv[1]))
    await sb.start()
    await sb.exec("nohup sleep 600 >/dev/null 2>&1 &")
    print(sb._ns.host_pid, flush=True)
    os._exit(9)  # the owner dies without stopping the sandbox

asyncio.run(main())
"""


def test_sandbox_ends_when_its_owner_dies(tmp_path: Path) -> None:
    """A crashed cairn process leaves no running sandbox, only a folder clean removes."""
    import subprocess
    import sys
    import time

    script = tmp_path / "owner.py"
    script.write_text(CRASHING_OWNER)
    trial = f"crash-{uuid.uuid4().hex[:8]}"
    out = subprocess.run(
        [sys.executable, str(script), trial], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 9, out.stderr
    pid = int(out.stdout.strip())
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not os.path.exists(f"/proc/{pid}"), "the init outlived its owner"
    [(path, marker)] = [(p, m) for p, m in find_local_sandboxes() if m.get("trial_id") == trial]
    assert marker["pid"] == pid
    remove_local_sandbox(path)
    assert not path.exists()


UNPRIVILEGED_SCRIPT = """\
import asyncio, os, sys
from pathlib import Path
from cairn.sandbox.base import NetworkMode, SandboxSpec
from cairn.sandbox.local.backend import LocalSandbox

async def main():
    env = Path(sys.argv[1])
    sb = LocalSandbox(SandboxSpec(env_dir=env, network_mode=NetworkMode.NO_NETWORK,
                                  trial_id="unprivileged"))
    async with sb:
        for cmd in ("id -u", "cat /built.txt", "pwd", "echo w > /tmp/w && cat /tmp/w",
                    "test -e /var/lib/docker && echo visible || echo hidden"):
            r = await sb.exec(cmd)
            print(r.exit_code, r.stdout.strip())
        r = await sb.exec("id", user="nobody")
        print(r.exit_code, "only root is mapped" in r.stderr)

asyncio.run(main())
"""


@pytest.mark.skipif(
    os.geteuid() != 0 or not Path("/usr/bin/python3").exists(),
    reason="needs root to switch to an unprivileged user and /usr/bin/python3",
)
def test_unprivileged_user_namespace_mode(tmp_path: Path) -> None:
    """Run as ``nobody`` (unprivileged user namespace): layers build, execs run as root
    inside, other users are refused with a clear message."""
    import subprocess

    work = Path("/tmp") / f"cairn-unpriv-{uuid.uuid4().hex[:8]}"
    env = work / "env"
    env.mkdir(parents=True)
    (env / "Dockerfile").write_text("FROM debian\nRUN echo built > /built.txt\nWORKDIR /app\n")
    (work / "run.py").write_text(UNPRIVILEGED_SCRIPT)
    state = work / "state"
    subprocess.run(["chown", "-R", "nobody", str(work)], check=True)
    src = Path(__file__).resolve().parents[3] / "src"
    try:
        out = subprocess.run(
            [
                "setpriv",
                "--reuid=nobody",
                "--regid=nogroup",
                "--clear-groups",
                "--",
                "/usr/bin/python3",
                str(work / "run.py"),
                str(env),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=work,
            check=False,
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(src), "CAIRN_LOCAL_DIR": str(state)},
        )
        if out.returncode != 0 and "needs root or unprivileged user namespaces" in out.stderr:
            pytest.skip("unprivileged user namespaces are not available here")
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines() == ["0 0", "0 built", "0 /app", "0 w", "0 hidden", "126 True"]
    finally:
        subprocess.run(["rm", "-rf", str(work)], check=False)


def test_docker_image_environment_runs_on_the_host_system(tmp_path: Path) -> None:
    """``docker_image`` without a Dockerfile: the host stands in (warning) and the
    environment's other files land in the working dir."""
    (tmp_path / "data.csv").write_text("a,b\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "x.txt").write_text("x\n")
    (tmp_path / ".dockerignore").write_text("*.tmp\n")
    spec = _spec(env_dir=tmp_path, docker_image="python:3.12-slim", workdir="/work")
    assert any("python:3.12-slim" in w for w in LocalSandbox.check(spec))

    async def main() -> None:
        async with LocalSandbox(spec) as sb:
            assert (await _sh(sb, "pwd; ls -A")) == "/work\ndata.csv\nsub\n"
            assert (await _sh(sb, "cat sub/x.txt")) == "x\n"

    asyncio.run(main())
