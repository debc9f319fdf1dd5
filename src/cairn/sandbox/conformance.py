"""The backend-agnostic conformance suite (SPEC §3.4).

Every sandbox backend runs the same behavioural checks: files, exec, users, cwd, env, timeouts,
process-tree kill, output caps, big and oddly named files, symlinks, network modes, resource
limits and cleanup. A check is an async function of a :class:`CheckContext`; it talks to the
backend only through :class:`~cairn.sandbox.base.Sandbox`.

A backend declares the checks it knowingly fails in its ``known_conformance_gaps`` ClassVar; the
suite skips them and :func:`format_gaps` lists them. A test module runs every check as its own
test::

    from cairn.sandbox import conformance
    from cairn.sandbox.docker import DockerSandbox

    @pytest.mark.parametrize("check", conformance.pytest_params(DockerSandbox))
    def test_conformance(check, tmp_path):
        conformance.run_check_sync(check, DockerSandbox, tmp_path)

The environment the checks use is written by the suite itself (:data:`BASE_DOCKERFILE`): it uses
only ``FROM``/``RUN``/``WORKDIR``/``ENV``, so Dockerfile-subset backends can build it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cairn.errors import BuildError, ErrorKind, SandboxError, UnsupportedError
from cairn.sandbox.base import LOG_DIRS, NetworkMode, ProcessInfo, Sandbox, SandboxSpec

SandboxFactory = Callable[[SandboxSpec], Sandbox]
"""Makes an *unstarted* sandbox from a spec (usually the backend class itself)."""

LeftoverProbe = Callable[[SandboxSpec], Awaitable[list[str]]]
"""Lists what still exists of a stopped sandbox (containers, networks, folders), by its spec's
``trial_id``; an empty list means everything was removed."""

CONFORMANCE_JOB_ID = "cairn-conformance"
"""``job_id`` of every sandbox the suite starts."""

CHECK_TIMEOUT_SEC = 240.0
"""Bound on one check, seconds (the first one may build the suite's image)."""

BASE_DOCKERFILE = """\
FROM debian:bookworm-slim
RUN id agent >/dev/null 2>&1 || useradd -m agent
RUN mkdir -p /logs/agent /logs/verifier && echo stale > /logs/agent/stale.txt \\
    && echo stale > /logs/verifier/reward.txt && chmod 700 /logs/agent
ENV CAIRN_CONF_IMAGE_ENV="from image"
WORKDIR /app
RUN echo app-file > /app/present.txt
"""
"""The suite's environment: a user ``agent``, stale ``/logs`` content, an image ENV, WORKDIR."""


class CheckSkipped(Exception):
    """Raised by :func:`run_check` for a check the backend declares as a known gap."""


# ---- context ------------------------------------------------------------------------------
@dataclass
class CheckContext:
    """What a check gets: a factory for sandboxes, a scratch folder and optional probes.

    Attributes:
        make_sandbox: factory of unstarted sandboxes.
        tmp: a fresh host folder for this check.
        check_name: the running check's name (used in trial ids).
        leftovers: optional probe listing what remains of a stopped sandbox.
        base_spec: overrides applied to every spec (e.g. ``job_dir``).
    """

    make_sandbox: SandboxFactory
    tmp: Path
    check_name: str
    leftovers: LeftoverProbe | None = None
    base_spec: dict[str, Any] = field(default_factory=dict)

    def env_dir(self, dockerfile: str = BASE_DOCKERFILE, name: str = "env") -> Path:
        """Write an environment folder holding ``dockerfile`` and return it."""
        d = self.tmp / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "Dockerfile").write_text(dockerfile)
        return d

    def spec(self, *, dockerfile: str = BASE_DOCKERFILE, **overrides: Any) -> SandboxSpec:
        """A spec for the suite's environment with a unique trial id.

        Args:
            dockerfile: the Dockerfile text of the environment.
            **overrides: SandboxSpec fields to set.
        """
        env_dir = self.env_dir(dockerfile, name="env-" + hashlib.sha256(
            dockerfile.encode()).hexdigest()[:8])
        fields: dict[str, Any] = {
            "env_dir": env_dir,
            "env_hash": _hash_env_dir(env_dir),
            "network_mode": NetworkMode.NO_NETWORK,
            "job_id": CONFORMANCE_JOB_ID,
            "trial_id": f"{self.check_name}-{uuid.uuid4().hex[:8]}",
            "name": f"conformance-{self.check_name}",
            "build_timeout_sec": 180.0,
        }
        fields.update(self.base_spec)
        fields.update(overrides)
        return SandboxSpec(**fields)

    @contextlib.asynccontextmanager
    async def sandbox(self, **overrides: Any) -> AsyncIterator[Sandbox]:
        """Start a sandbox of :meth:`spec` (``overrides`` applied) and stop it afterwards."""
        sb = self.make_sandbox(self.spec(**overrides))
        async with sb:
            yield sb


def _hash_env_dir(path: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        rel = p.relative_to(path).as_posix()
        h.update(rel.encode() + b"\0")
        if p.is_file() and not p.is_symlink():
            h.update(p.read_bytes())
            h.update(b"x" if os.access(p, os.X_OK) else b"-")
    return h.hexdigest()


# ---- assertions ---------------------------------------------------------------------------
class ConformanceFailure(AssertionError):
    """A check found the backend behaving against the interface."""


def _expect(cond: object, message: str) -> None:
    if not cond:
        raise ConformanceFailure(message)


async def _ok(sb: Sandbox, command: str | Sequence[str], **kw: Any) -> str:
    r = await sb.exec(command, **kw)
    _expect(r.ok, f"command {command!r} failed: exit {r.exit_code}, timed_out {r.timed_out}, "
                  f"stderr {r.stderr[-500:]!r}")
    return r.stdout


def _sleepers(procs: Sequence[ProcessInfo], numbers: Sequence[int]) -> list[ProcessInfo]:
    wanted = {f"sleep {n}" for n in numbers}
    return [p for p in procs if " ".join(p.cmdline.split()) in wanted]


# ---- exec ---------------------------------------------------------------------------------
async def check_exec_stdout_stderr_separate(ctx: CheckContext) -> None:
    """stdout and stderr come back apart; exit codes, argv quoting, bash for shell strings."""
    async with ctx.sandbox() as sb:
        r = await sb.exec("echo out; echo err >&2; exit 3")
        _expect(r.exit_code == 3 and not r.timed_out, f"exit code {r.exit_code}, want 3")
        _expect(r.stdout == "out\n", f"stdout {r.stdout!r}")
        _expect(r.stderr == "err\n", f"stderr {r.stderr!r}")
        r = await sb.exec(["printf", "%s|", "a b", "it's", 'say "hi"', "$HOME", ""])
        _expect(r.stdout == "a b|it's|say \"hi\"|$HOME||", f"argv not passed verbatim: {r.stdout!r}")
        r = await sb.exec("echo ${BASH_VERSION:+bash}")
        _expect(r.stdout.strip() == "bash", "a shell string does not run with bash")
        r = await sb.exec("kill -9 $$")
        _expect(r.exit_code == 137, f"a SIGKILLed command gives exit {r.exit_code}, want 137")
        r = await sb.exec(["/no/such/binary"])
        _expect(r.exit_code in (126, 127), f"missing binary gives exit {r.exit_code}")
        r = await sb.exec("printf 'no newline'; printf '\\377\\376' >&2")
        _expect(r.stdout == "no newline", f"stdout {r.stdout!r}")
        _expect(r.stderr == "\ufffd\ufffd", f"undecodable bytes not replaced: {r.stderr!r}")


async def check_exec_concurrent(ctx: CheckContext) -> None:
    """Several execs in one sandbox run at the same time."""
    async with ctx.sandbox() as sb:
        t0 = time.monotonic()
        rs = await asyncio.gather(*(sb.exec(f"sleep 1; echo {i}") for i in range(4)))
        took = time.monotonic() - t0
        _expect([r.stdout.strip() for r in rs] == ["0", "1", "2", "3"], "wrong outputs")
        _expect(took < 3.5, f"4 concurrent 1 s execs took {took:.1f} s")


async def check_exec_background_returns(ctx: CheckContext) -> None:
    """A command that leaves a redirected background process returns at once; it keeps running."""
    async with ctx.sandbox() as sb:
        t0 = time.monotonic()
        r = await sb.exec("nohup sleep 7701 >/dev/null 2>&1 &", timeout_sec=20)
        took = time.monotonic() - t0
        _expect(r.exit_code == 0 and not r.timed_out, f"exit {r.exit_code}")
        _expect(took < 5, f"exec waited {took:.1f} s for a background process")
        _expect(_sleepers(await sb.processes(), [7701]), "the background process is gone")


async def check_exec_timeout(ctx: CheckContext) -> None:
    """A timed-out exec returns promptly with ``timed_out`` and no exit code, keeping output."""
    async with ctx.sandbox() as sb:
        t0 = time.monotonic()
        r = await sb.exec("echo started; sleep 60", timeout_sec=1.5)
        took = time.monotonic() - t0
        _expect(r.timed_out, "timed_out not set")
        _expect(r.exit_code is None, f"exit code {r.exit_code} on a timeout, want None")
        _expect(took < 5, f"a 1.5 s timeout returned after {took:.1f} s")
        _expect(r.stdout == "started\n", f"output before the timeout lost: {r.stdout!r}")
        r = await sb.exec("echo still usable")
        _expect(r.ok and r.stdout == "still usable\n", "sandbox unusable after a timeout")


async def check_exec_timeout_kills_tree(ctx: CheckContext) -> None:
    """A timeout kills the exec's whole tree, double-forked, setsid and nohup children too."""
    async with ctx.sandbox() as sb:
        await _ok(sb, "nohup sleep 7773 >/dev/null 2>&1 &")
        t0 = time.monotonic()
        r = await sb.exec("(sleep 7774 &); setsid sleep 7775 & nohup sleep 7776 & sleep 7777",
                          timeout_sec=3)
        took = time.monotonic() - t0
        _expect(r.timed_out, "timed_out not set")
        _expect(took < 6, f"3 s timeout returned after {took:.1f} s")
        left = _sleepers(await sb.processes(), [7774, 7775, 7776, 7777])
        _expect(not left, f"processes survived the timeout: {[p.cmdline for p in left]}")
        _expect(_sleepers(await sb.processes(), [7773]),
                "a process started before the timed-out exec was killed")


async def check_exec_timeout_as_user(ctx: CheckContext) -> None:
    """A timeout also kills the tree of an exec run as a non-root user."""
    async with ctx.sandbox() as sb:
        r = await sb.exec("setsid sleep 7778 & (sleep 7779 &); sleep 7780", user="agent",
                          timeout_sec=2)
        _expect(r.timed_out, "timed_out not set")
        left = _sleepers(await sb.processes(), [7778, 7779, 7780])
        _expect(not left, f"processes survived: {[p.cmdline for p in left]}")


async def check_output_cap(ctx: CheckContext) -> None:
    """Output is kept to a bounded tail per stream, flagged as truncated."""
    async with ctx.sandbox() as sb:
        cap = 1_000_000
        r = await sb.exec("head -c 3000000 /dev/zero | tr '\\0' a; echo END; echo small >&2",
                          max_output_bytes=cap)
        _expect(r.ok, f"exit {r.exit_code}")
        _expect(len(r.stdout.encode()) <= cap, f"stdout kept {len(r.stdout)} bytes > cap {cap}")
        _expect(len(r.stdout) >= cap - 4096, f"stdout kept only {len(r.stdout)} bytes")
        _expect(r.stdout.endswith("aaaEND\n"), "the tail of stdout was not kept")
        _expect(r.stdout_truncated and not r.stderr_truncated, "truncation flags wrong")
        _expect(r.stderr == "small\n", f"stderr {r.stderr[:100]!r}")
        r = await sb.exec("head -c 300000 /dev/zero | tr '\\0' b >&2; echo E >&2",
                          max_output_bytes=1000)
        _expect(len(r.stderr) <= 1000 and r.stderr.endswith("bE\n") and r.stderr_truncated,
                "stderr tail not capped")


# ---- users, cwd, env ----------------------------------------------------------------------
async def check_users(ctx: CheckContext) -> None:
    """Default user is the image's; a name or a uid switches user; /logs dirs are writable."""
    async with ctx.sandbox() as sb:
        _expect((await _ok(sb, "id -un")).strip() == "root", "default user is not root")
        _expect((await _ok(sb, "id -un", user="agent")).strip() == "agent", "user=agent")
        uid = int((await _ok(sb, "id -u agent")).strip())
        _expect((await _ok(sb, ["id", "-un"], user=uid)).strip() == "agent", "user=<uid>")
        _expect((await _ok(sb, "id -u", user=str(uid))).strip() == str(uid), "user='<uid>'")
        for d in LOG_DIRS:
            await _ok(sb, f"touch {d}/by-agent && test -O {d}/by-agent", user="agent")


async def check_cwd(ctx: CheckContext) -> None:
    """The working dir is the image WORKDIR, or spec.workdir (created); cwd overrides it."""
    async with ctx.sandbox() as sb:
        _expect(sb.workdir == "/app", f"workdir {sb.workdir!r}, want the image's /app")
        _expect((await _ok(sb, "pwd")).strip() == "/app", "default cwd is not the workdir")
        _expect((await _ok(sb, "cat present.txt")).strip() == "app-file", "image files missing")
        _expect((await _ok(sb, "pwd", cwd="/tmp")).strip() == "/tmp", "cwd ignored")
        _expect((await _ok(sb, ["pwd"], cwd="/usr", user="agent")).strip() == "/usr",
                "cwd ignored for argv as a user")
    async with ctx.sandbox(workdir="/srv/work dir") as sb:
        _expect(sb.workdir == "/srv/work dir", f"workdir {sb.workdir!r}")
        _expect((await _ok(sb, "pwd")).strip() == "/srv/work dir", "spec.workdir not used")
        await _ok(sb, "touch made-by-agent", user="agent")


async def check_env(ctx: CheckContext) -> None:
    """Image ENV, spec.env and per-exec env reach the command verbatim; host env does not."""
    marker = f"CAIRN_CONF_HOST_ONLY_{uuid.uuid4().hex[:6]}"
    os.environ[marker] = "leaked"
    try:
        spec_env = {"SPEC_VAR": "from spec", "OVERRIDE": "spec", "DOLLAR": "$HOME and `x`"}
        async with ctx.sandbox(env=spec_env) as sb:
            out = await _ok(sb, ["printenv", "CAIRN_CONF_IMAGE_ENV", "SPEC_VAR", "DOLLAR"])
            _expect(out == "from image\nfrom spec\n$HOME and `x`\n", f"env: {out!r}")
            out = await _ok(sb, ["printenv", "OVERRIDE", "EXTRA", "MULTI"],
                            env={"OVERRIDE": "exec", "EXTRA": "it's \"q\"", "MULTI": "a\nb"})
            _expect(out == "exec\nit's \"q\"\na\nb\n", f"exec env: {out!r}")
            out = await _ok(sb, ["printenv", "SPEC_VAR"], user="agent")
            _expect(out == "from spec\n", "spec env missing for another user")
            r = await sb.exec(["printenv", marker])
            _expect(r.exit_code == 1 and r.stdout == "", "the host environment leaked in")
            out = await _ok(sb, "echo $PATH")
            _expect("/usr/bin" in out and "/bin" in out, f"PATH {out!r}")
    finally:
        os.environ.pop(marker, None)


async def check_logs_dirs_fresh(ctx: CheckContext) -> None:
    """/logs/{agent,verifier,artifacts} exist empty at start, whatever the image left there."""
    async with ctx.sandbox() as sb:
        for d in LOG_DIRS:
            out = await _ok(sb, f"ls -A {d}")
            _expect(out == "", f"{d} not empty at start: {out!r}")
            await _ok(sb, f"test -d {d} && test -w {d}", user="agent")


# ---- files --------------------------------------------------------------------------------
def _tree(root: Path) -> dict[str, str | bytes]:
    """A comparable picture of a host folder: rel path → bytes, 'dir', or 'link:<target>'."""
    out: dict[str, str | bytes] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = Path(dirpath, n)
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                out[rel] = "link:" + os.readlink(p)
            elif p.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = p.read_bytes()
    return out


async def check_upload_download_roundtrip(ctx: CheckContext) -> None:
    """Files and folders go in and out intact: modes kept, folders merged, parents created."""
    src = ctx.tmp / "src"
    (src / "sub" / "deeper").mkdir(parents=True)
    (src / "a.txt").write_text("alpha\n")
    (src / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (src / "run.sh").chmod(0o755)
    (src / "sub" / "deeper" / "b.bin").write_bytes(bytes(range(256)) * 10)
    (src / "empty_dir").mkdir()
    single = ctx.tmp / "single.txt"
    single.write_text("one file\n")
    async with ctx.sandbox() as sb:
        await _ok(sb, "mkdir -p /data && echo keep > /data/old.txt && echo stale > /data/a.txt")
        await sb.upload(src, "/data")
        _expect((await _ok(sb, "cat /data/old.txt")).strip() == "keep", "upload removed a file")
        _expect((await _ok(sb, "cat /data/a.txt")).strip() == "alpha", "same name not replaced")
        _expect((await _ok(sb, "/data/run.sh")).strip() == "ran", "exec bit lost")
        await _ok(sb, "test -d /data/empty_dir")
        await sb.upload(single, "/new/parent dir/copy.txt")
        _expect((await _ok(sb, ["cat", "/new/parent dir/copy.txt"])) == "one file\n",
                "single-file upload")
        await sb.upload(src, "/fresh/target")
        back = ctx.tmp / "back"
        await sb.download("/fresh/target", back)
        _expect(_tree(back) == _tree(src), "folder round trip differs")
        _expect(os.access(back / "run.sh", os.X_OK), "exec bit lost on download")
        fback = ctx.tmp / "out" / "nested" / "copy.txt"
        await sb.download("/new/parent dir/copy.txt", fback)
        _expect(fback.read_text() == "one file\n", "single-file download")
        with contextlib.suppress(FileNotFoundError):
            await sb.download("/no/such/path", ctx.tmp / "nothing")
            raise ConformanceFailure("download of a missing path did not raise FileNotFoundError")
        with contextlib.suppress(FileNotFoundError):
            await sb.upload(ctx.tmp / "missing-host-path", "/x")
            raise ConformanceFailure("upload of a missing host path did not raise")


ODD_NAMES = (
    "with space.txt", "single'quote.txt", 'double"quote.txt', "back\\slash.txt",
    "dollar$HOME.txt", "-leading-dash.txt", "ünïcødé ✓.txt", "semi;colon&amp.txt",
    "star*and?.txt", "x" * 150 + ".txt", "sub dir/nested 'q' \"d\".txt",
)
"""File names the suite round-trips (spaces, quotes, shell metacharacters, unicode, long)."""


async def check_odd_names(ctx: CheckContext) -> None:
    """Names with spaces, quotes, shell metacharacters, unicode and >100 chars round-trip."""
    src = ctx.tmp / "odd"
    for i, name in enumerate(ODD_NAMES):
        p = src / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"content {i}\n")
    async with ctx.sandbox() as sb:
        await sb.upload(src, "/odd dir")
        out = await _ok(sb, ["find", "/odd dir", "-type", "f", "-printf", "%P\\0"])
        names = sorted(n for n in out.split("\0") if n)
        _expect(names == sorted(ODD_NAMES), f"names changed inside: {names}")
        back = ctx.tmp / "odd-back"
        await sb.download("/odd dir", back)
        _expect(_tree(back) == _tree(src), "odd names did not round-trip")


async def check_symlink_not_followed(ctx: CheckContext) -> None:
    """Symlinks travel as links both ways and are never followed on the host."""
    src = ctx.tmp / "links-src"
    src.mkdir()
    (src / "real.txt").write_text("real\n")
    os.symlink("/etc/hostname", src / "to_host_file")
    os.symlink("real.txt", src / "relative")
    async with ctx.sandbox() as sb:
        await sb.upload(src, "/up")
        _expect((await _ok(sb, "readlink /up/to_host_file")).strip() == "/etc/hostname",
                "host symlink not uploaded as a link")
        _expect((await _ok(sb, "readlink /up/relative")).strip() == "real.txt", "relative link")
        await _ok(sb, "mkdir -p /links && cd /links && echo hi > f && ln -s /etc/passwd passwd "
                      "&& ln -s ../../../../etc/shadow up && ln -s /nowhere dangling "
                      "&& ln -s f rel && mkdir d && ln -s /etc d/etcdir")
        back = ctx.tmp / "links-back"
        await sb.download("/links", back)
        for name, target in (("passwd", "/etc/passwd"), ("up", "../../../../etc/shadow"),
                             ("dangling", "/nowhere"), ("rel", "f"), ("d/etcdir", "/etc")):
            p = back / name
            _expect(p.is_symlink(), f"{name} was not stored as a link")
            _expect(os.readlink(p) == target, f"{name} -> {os.readlink(p)!r}, want {target!r}")
        one = ctx.tmp / "one-link"
        await sb.download("/links/passwd", one)
        _expect(one.is_symlink() and os.readlink(one) == "/etc/passwd",
                "a downloaded single symlink was followed")


async def check_download_stays_inside_target(ctx: CheckContext) -> None:
    """A download never writes through host symlinks or outside its target folder."""
    outside = ctx.tmp / "outside"
    outside.mkdir()
    victim = outside / "victim.txt"
    victim.write_text("untouched\n")
    target = ctx.tmp / "target"
    target.mkdir()
    os.symlink(outside, target / "sub")
    os.symlink(victim, target / "file.txt")
    async with ctx.sandbox() as sb:
        await _ok(sb, "mkdir -p /esc/sub && echo evil > /esc/sub/planted.txt "
                      "&& echo evil > /esc/file.txt && ln -s / /esc/root")
        with contextlib.suppress(SandboxError):
            await sb.download("/esc", target)
        _expect(victim.read_text() == "untouched\n", "download wrote through a host symlink")
        _expect(sorted(os.listdir(outside)) == ["victim.txt"], "download wrote outside target")
        ftarget = ctx.tmp / "file-link"
        os.symlink(victim, ftarget)
        with contextlib.suppress(SandboxError):
            await sb.download("/esc/file.txt", ftarget)
        _expect(victim.read_text() == "untouched\n", "file download followed a host symlink")


BIG_FILE_BYTES = 256 * 1024 * 1024
RSS_GROWTH_LIMIT_BYTES = 96 * 1024 * 1024


class _RssSampler:
    """Samples this process's resident set size from a thread; reports the peak growth."""

    def __init__(self) -> None:
        self.base = self.peak = _rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, _rss_bytes())

    def __enter__(self) -> _RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_bytes())

    @property
    def growth(self) -> int:
        """Peak RSS minus the RSS at creation, bytes."""
        return self.peak - self.base


def _rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


async def check_big_file_256mib(ctx: CheckContext) -> None:
    """A 256 MiB file round-trips byte-identical with bounded host memory."""
    big = ctx.tmp / "big.bin"
    h = hashlib.sha256()
    block = os.urandom(1 << 20)
    with open(big, "wb") as f:
        for i in range(BIG_FILE_BYTES >> 20):
            chunk = i.to_bytes(8, "big") + block[8:]
            f.write(chunk)
            h.update(chunk)
    digest = h.hexdigest()
    del block
    async with ctx.sandbox() as sb:
        with _RssSampler() as up:
            await sb.upload(big, "/big/big.bin")
        out = await _ok(sb, "sha256sum /big/big.bin", timeout_sec=120)
        _expect(out.split()[0] == digest, "uploaded bytes differ")
        back = ctx.tmp / "big-back.bin"
        with _RssSampler() as down:
            await sb.download("/big/big.bin", back)
        big.unlink()
        h2 = hashlib.sha256()
        with open(back, "rb") as f:
            while chunk := f.read(1 << 20):
                h2.update(chunk)
        _expect(h2.hexdigest() == digest, "downloaded bytes differ")
        for what, s in (("upload", up), ("download", down)):
            _expect(s.growth < RSS_GROWTH_LIMIT_BYTES,
                    f"{what} of 256 MiB grew host memory by {s.growth >> 20} MiB")


# ---- processes ----------------------------------------------------------------------------
async def check_processes_and_kill(ctx: CheckContext) -> None:
    """processes() sees double-forked/setsid/nohup children; kill_processes kills by identity."""
    async with ctx.sandbox() as sb:
        await _ok(sb, "nohup sleep 7783 >/dev/null 2>&1 &")
        before = await sb.processes()
        _expect(any(p.pid == 1 for p in before), "pid 1 not listed")
        _expect(_sleepers(before, [7783]), "a running process is not listed")
        await _ok(sb, "(sleep 7784 >/dev/null 2>&1 &); setsid sleep 7785 >/dev/null 2>&1 & "
                      "nohup sleep 7786 >/dev/null 2>&1 &", user="agent")
        after = await sb.processes()
        new = [p for p in after if p.key not in {q.key for q in before}]
        _expect(len(_sleepers(new, [7784, 7785, 7786])) == 3,
                f"new processes not all listed: {[p.cmdline for p in new]}")
        s = _sleepers(new, [7784])[0]
        stale = ProcessInfo(pid=s.pid, ppid=s.ppid, start_ticks=s.start_ticks + 1,
                            cmdline=s.cmdline)
        await sb.kill_processes([stale] + [p for p in after if p.pid == 1])
        await asyncio.sleep(0.3)
        _expect(_sleepers(await sb.processes(), [7784]), "a pid with another start time was killed")
        await sb.kill_processes(new)
        await asyncio.sleep(0.3)
        now = await sb.processes()
        left = _sleepers(now, [7784, 7785, 7786])
        _expect(not left, f"kill_processes left {[p.cmdline for p in left]}")
        _expect(_sleepers(now, [7783]), "a process started before was killed")
        await sb.kill_processes(new)
        _expect((await _ok(sb, "echo alive")).strip() == "alive", "sandbox broke after kills")


# ---- network ------------------------------------------------------------------------------
class _Listener:
    """A TCP listener on all host interfaces that counts accepted connections."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("0.0.0.0", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def __enter__(self) -> _Listener:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


def _host_primary_ip() -> str | None:
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("10.255.255.255", 1))
        return s.getsockname()[0]
    return None


async def _candidate_addresses(sb: Sandbox) -> list[str]:
    """Addresses that reach the host from inside: the sandbox's default gateway, loopback,
    the host's primary address."""
    addrs: list[str] = []
    r = await sb.exec(["cat", "/proc/net/route"])
    for line in r.stdout.splitlines()[1:]:
        parts = line.split()
        if len(parts) > 2 and parts[1] == "00000000":
            gw = int(parts[2], 16)
            addrs.append(socket.inet_ntoa(gw.to_bytes(4, "little")))
    addrs.append("127.0.0.1")
    if (ip := _host_primary_ip()) and ip not in addrs:
        addrs.append(ip)
    return addrs


async def _probe(sb: Sandbox, addrs: list[str], port: int) -> dict[str, bool]:
    script = "; ".join(
        f"if timeout 5 bash -c 'exec 3<>/dev/tcp/{a}/{port}' 2>/dev/null; "
        f"then echo {a} ok; else echo {a} fail; fi" for a in addrs)
    r = await sb.exec(script, timeout_sec=60)
    got = dict(line.split() for line in r.stdout.splitlines() if len(line.split()) == 2)
    return {a: got.get(a) == "ok" for a in addrs}


async def check_network_none(ctx: CheckContext) -> None:
    """no-network: a TCP connect to a listener on this machine fails, and fails fast."""
    with _Listener() as lst:
        async with ctx.sandbox(network_mode=NetworkMode.NO_NETWORK) as sb:
            addrs = await _candidate_addresses(sb)
            t0 = time.monotonic()
            res = await _probe(sb, addrs, lst.port)
            took = time.monotonic() - t0
    _expect(not any(res.values()), f"no-network sandbox reached the host: {res}")
    _expect(lst.accepted == 0, "the host listener accepted a connection from a no-network sandbox")
    _expect(took < 3 * len(addrs), f"connects took {took:.1f} s (should fail fast)")


async def check_network_public(ctx: CheckContext) -> None:
    """public: a TCP connect to a listener on this machine succeeds."""
    with _Listener() as lst:
        async with ctx.sandbox(network_mode=NetworkMode.PUBLIC) as sb:
            addrs = await _candidate_addresses(sb)
            res = await _probe(sb, addrs, lst.port)
    _expect(any(res.values()), f"public sandbox could not reach the host: {res}")
    _expect(lst.accepted >= 1, "the host listener saw no connection")


async def check_network_allowlist_refused(ctx: CheckContext) -> None:
    """allowlist is refused with 'unsupported network mode', never silently relaxed."""
    sb = ctx.make_sandbox(ctx.spec(network_mode=NetworkMode.ALLOWLIST))
    try:
        await sb.start()
    except UnsupportedError as exc:
        _expect("unsupported network mode" in str(exc), f"message: {exc}")
    else:
        raise ConformanceFailure("an allowlist sandbox started")
    finally:
        await sb.stop()


# ---- resource limits ----------------------------------------------------------------------
_MEMORY_LIMIT_SH = ("cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null "
                    "|| cat /sys/fs/cgroup/memory.max")
_CPU_LIMIT_SH = ("if [ -e /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then "
                 "echo $(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) "
                 "$(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us); "
                 "else cat /sys/fs/cgroup/cpu.max; fi")


async def check_memory_limit(ctx: CheckContext) -> None:
    """memory_mb is applied as the sandbox's cgroup memory limit."""
    async with ctx.sandbox(memory_mb=256) as sb:
        out = (await _ok(sb, _MEMORY_LIMIT_SH)).strip()
        _expect(out == str(256 * 1024 * 1024), f"memory limit {out!r}, want 268435456")


async def check_cpu_limit(ctx: CheckContext) -> None:
    """cpus is applied as the sandbox's cgroup CPU quota."""
    async with ctx.sandbox(cpus=1) as sb:
        out = (await _ok(sb, _CPU_LIMIT_SH)).split()
        _expect(len(out) == 2 and out[0].lstrip("-").isdigit() and out[1].isdigit(),
                f"cpu quota {out!r}")
        _expect(int(out[0]) > 0 and int(out[0]) / int(out[1]) == 1.0,
                f"cpu quota/period {out!r}, want 1 cpu")


# ---- lifecycle ----------------------------------------------------------------------------
async def check_build_failed(ctx: CheckContext) -> None:
    """A failing RUN is build_failed with the build-log tail; nothing is left behind."""
    marker = f"conformance-fail-{uuid.uuid4().hex[:8]}"
    spec = ctx.spec(dockerfile=f"FROM debian:bookworm-slim\nRUN echo {marker} && exit 1\n")
    sb = ctx.make_sandbox(spec)
    try:
        async with sb:
            raise ConformanceFailure("a failing RUN built")
    except BuildError as exc:
        _expect(exc.kind is ErrorKind.BUILD_FAILED, f"kind {exc.kind}, want build_failed")
        _expect(marker in str(exc.detail.get("log_tail", "")), "log tail lacks the RUN output")
    if ctx.leftovers is not None:
        left = await ctx.leftovers(spec)
        _expect(not left, f"a failed start left {left}")


async def check_stop_fast(ctx: CheckContext) -> None:
    """stop() is quick even with processes running inside."""
    async with ctx.sandbox() as sb:
        await _ok(sb, "nohup sleep 1000 >/dev/null 2>&1 & trap '' TERM; "
                      "nohup sh -c 'trap \"\" TERM; sleep 1001' >/dev/null 2>&1 &")
        t0 = time.monotonic()
        await sb.stop()
        took = time.monotonic() - t0
    _expect(took < 2.0, f"stop took {took:.2f} s")


async def check_stop_removes_everything(ctx: CheckContext) -> None:
    """stop() removes all, is idempotent, works unstarted, and exec afterwards raises."""
    spec = ctx.spec()
    sb = ctx.make_sandbox(spec)
    await sb.stop()
    await sb.start()
    await _ok(sb, "echo up")
    await sb.stop()
    await sb.stop()
    if ctx.leftovers is not None:
        left = await ctx.leftovers(spec)
        _expect(not left, f"stop left {left}")
    try:
        await sb.exec("echo after stop")
    except SandboxError:
        pass
    else:
        raise ConformanceFailure("exec after stop did not raise SandboxError")


# ---- registry -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Check:
    """One named conformance check.

    Attributes:
        name: stable name (used in ``known_conformance_gaps``).
        func: the async check.
        slow: whether it takes more than a few seconds.
    """

    name: str
    func: Callable[[CheckContext], Awaitable[None]]
    slow: bool = False

    @property
    def doc(self) -> str:
        """First line of the check's docstring."""
        return (self.func.__doc__ or "").strip().splitlines()[0]


CHECKS: tuple[Check, ...] = (
    Check("exec_stdout_stderr_separate", check_exec_stdout_stderr_separate),
    Check("exec_concurrent", check_exec_concurrent),
    Check("exec_background_returns", check_exec_background_returns),
    Check("exec_timeout", check_exec_timeout),
    Check("exec_timeout_kills_tree", check_exec_timeout_kills_tree),
    Check("exec_timeout_as_user", check_exec_timeout_as_user),
    Check("output_cap", check_output_cap),
    Check("users", check_users),
    Check("cwd", check_cwd),
    Check("env", check_env),
    Check("logs_dirs_fresh", check_logs_dirs_fresh),
    Check("upload_download_roundtrip", check_upload_download_roundtrip),
    Check("odd_names", check_odd_names),
    Check("symlink_not_followed", check_symlink_not_followed),
    Check("download_stays_inside_target", check_download_stays_inside_target),
    Check("big_file_256mib", check_big_file_256mib, slow=True),
    Check("processes_and_kill", check_processes_and_kill),
    Check("network_none", check_network_none),
    Check("network_public", check_network_public),
    Check("network_allowlist_refused", check_network_allowlist_refused),
    Check("memory_limit", check_memory_limit),
    Check("cpu_limit", check_cpu_limit),
    Check("build_failed", check_build_failed),
    Check("stop_fast", check_stop_fast),
    Check("stop_removes_everything", check_stop_removes_everything),
)
"""Every check, in a stable order."""

CHECK_NAMES: tuple[str, ...] = tuple(c.name for c in CHECKS)
_BY_NAME = {c.name: c for c in CHECKS}


def gaps_of(backend: type[Sandbox]) -> frozenset[str]:
    """The checks ``backend`` declares it fails.

    Raises:
        ValueError: a declared gap names no check (a typo would silently hide nothing).
    """
    gaps = frozenset(getattr(backend, "known_conformance_gaps", frozenset()))
    unknown = gaps - set(CHECK_NAMES)
    if unknown:
        raise ValueError(f"{backend.__name__}.known_conformance_gaps names unknown checks: "
                         f"{sorted(unknown)}")
    return gaps


def format_gaps(backend: type[Sandbox]) -> str:
    """A human listing of ``backend``'s known gaps, one line per check."""
    gaps = gaps_of(backend)
    name = getattr(backend, "name", backend.__name__)
    if not gaps:
        return f"conformance: backend {name!r} declares no known gaps"
    lines = [f"conformance: backend {name!r} declares {len(gaps)} known gap(s):"]
    lines += [f"  - {g}: {_BY_NAME[g].doc}" for g in CHECK_NAMES if g in gaps]
    return "\n".join(lines)


def print_gaps(backend: type[Sandbox]) -> None:
    """Print :func:`format_gaps` on stdout."""
    print(format_gaps(backend))


async def run_check(name: str, make_sandbox: SandboxFactory, tmp_path: Path, *,
                    leftovers: LeftoverProbe | None = None,
                    base_spec: dict[str, Any] | None = None,
                    gaps: frozenset[str] = frozenset()) -> None:
    """Run one check.

    Args:
        name: a name from :data:`CHECK_NAMES`.
        make_sandbox: factory of unstarted sandboxes (a backend class works).
        tmp_path: a fresh host folder for the check.
        leftovers: optional probe of what a stopped sandbox left behind.
        base_spec: SandboxSpec fields applied to every spec the check makes.
        gaps: names to skip (the backend's declared gaps).

    Raises:
        CheckSkipped: ``name`` is in ``gaps``.
        ConformanceFailure: the backend misbehaved (an AssertionError).
        KeyError: no check has that name.
    """
    check = _BY_NAME[name]
    if name in gaps:
        raise CheckSkipped(f"{name}: known conformance gap")
    ctx = CheckContext(make_sandbox=make_sandbox, tmp=tmp_path, check_name=name,
                       leftovers=leftovers, base_spec=dict(base_spec or {}))
    async with asyncio.timeout(CHECK_TIMEOUT_SEC):
        await check.func(ctx)


def run_check_sync(name: str, make_sandbox: SandboxFactory, tmp_path: Path,
                   **kwargs: Any) -> None:
    """:func:`run_check` in a fresh event loop (for plain pytest tests)."""
    asyncio.run(run_check(name, make_sandbox, tmp_path, **kwargs))


@dataclass(frozen=True)
class SuiteReport:
    """Outcome of :func:`run_suite`: names passed, failed (with message) and skipped."""

    passed: list[str]
    failed: dict[str, str]
    skipped: list[str]


async def run_suite(backend: type[Sandbox], tmp_path: Path, *,
                    make_sandbox: SandboxFactory | None = None,
                    leftovers: LeftoverProbe | None = None,
                    names: Sequence[str] | None = None) -> SuiteReport:
    """Run every check (or ``names``) one after another against ``backend`` and print gaps.

    Returns:
        A :class:`SuiteReport`.
    """
    gaps = gaps_of(backend)
    report = SuiteReport([], {}, [])
    for name in names or CHECK_NAMES:
        d = tmp_path / name
        d.mkdir(parents=True, exist_ok=True)
        try:
            await run_check(name, make_sandbox or backend, d, leftovers=leftovers, gaps=gaps)
        except CheckSkipped:
            report.skipped.append(name)
        except Exception as exc:  # noqa: BLE001 - a report collects every failure
            report.failed[name] = f"{type(exc).__name__}: {exc}"
        else:
            report.passed.append(name)
    print_gaps(backend)
    return report


def pytest_params(backend: type[Sandbox]) -> list[Any]:
    """Every check as a ``pytest.param``: known gaps carry a skip mark, slow ones ``slow``.

    Use with ``@pytest.mark.parametrize("check", pytest_params(Backend))``.
    """
    import pytest

    gaps = gaps_of(backend)
    params = []
    for c in CHECKS:
        marks: list[Any] = []
        if c.slow:
            marks.append(pytest.mark.slow)
        if c.name in gaps:
            marks.append(pytest.mark.skip(
                reason=f"known conformance gap of backend {getattr(backend, 'name', '?')!r}"))
        params.append(pytest.param(c.name, id=c.name, marks=marks))
    return params


__all__ = [
    "BASE_DOCKERFILE", "CHECKS", "CHECK_NAMES", "Check", "CheckContext", "CheckSkipped",
    "ConformanceFailure", "SuiteReport", "format_gaps", "gaps_of", "print_gaps",
    "pytest_params", "run_check", "run_check_sync", "run_suite",
]
