"""Conformance checks: files, symlinks, big transfers, network modes and resource limits."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import socket
import threading
import time
from pathlib import Path

from cairn.errors import SandboxError, UnsupportedError
from cairn.sandbox.base import NetworkMode, Sandbox, UploadItem, host_boot_clock
from cairn.sandbox.conformance.context import CheckContext, ConformanceFailure, expect, run_ok


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
    (src / "a.txt").write_text("alpha\n", encoding="utf-8")
    (src / "run.sh").write_text("#!/bin/sh\necho ran\n", encoding="utf-8")
    (src / "run.sh").chmod(0o755)
    (src / "sub" / "deeper" / "b.bin").write_bytes(bytes(range(256)) * 10)
    (src / "empty_dir").mkdir()
    single = ctx.tmp / "single.txt"
    single.write_text("one file\n", encoding="utf-8")
    async with ctx.sandbox() as sb:
        await run_ok(sb, "mkdir -p /data && echo keep > /data/old.txt && echo stale > /data/a.txt")
        await sb.upload(src, "/data")
        expect((await run_ok(sb, "cat /data/old.txt")).strip() == "keep", "upload removed a file")
        expect((await run_ok(sb, "cat /data/a.txt")).strip() == "alpha", "same name not replaced")
        expect((await run_ok(sb, "/data/run.sh")).strip() == "ran", "exec bit lost")
        await run_ok(sb, "test -d /data/empty_dir")
        await sb.upload(single, "/new/parent dir/copy.txt")
        expect((await run_ok(sb, ["cat", "/new/parent dir/copy.txt"])) == "one file\n", "single-file upload")
        await sb.upload(src, "/fresh/target")
        back = ctx.tmp / "back"
        await sb.download("/fresh/target", back)
        expect(_tree(back) == _tree(src), "folder round trip differs")
        expect(os.access(back / "run.sh", os.X_OK), "exec bit lost on download")
        fback = ctx.tmp / "out" / "nested" / "copy.txt"
        await sb.download("/new/parent dir/copy.txt", fback)
        expect(fback.read_text(encoding="utf-8") == "one file\n", "single-file download")
        with contextlib.suppress(FileNotFoundError):
            await sb.download("/no/such/path", ctx.tmp / "nothing")
            raise ConformanceFailure("download of a missing path did not raise FileNotFoundError")
        with contextlib.suppress(FileNotFoundError):
            await sb.upload(ctx.tmp / "missing-host-path", "/x")
            raise ConformanceFailure("upload of a missing host path did not raise")


async def check_upload_many(ctx: CheckContext) -> None:
    """Several items in one upload: later ones merge over earlier, ``world_writable`` gives
    a+rwX (the folder too), ``crlf`` normalises line endings in the copy only."""
    base, over = ctx.tmp / "base", ctx.tmp / "over"
    (base / "sub").mkdir(parents=True)
    over.mkdir()
    (base / "keep.txt").write_text("base\n", encoding="utf-8")
    (base / "same.txt").write_text("base\n", encoding="utf-8")
    (base / "sub" / "x.sh").write_text("echo x\n", encoding="utf-8")
    (base / "sub" / "x.sh").chmod(0o700)
    (over / "same.txt").write_text("over\n", encoding="utf-8")
    (over / "test.sh").write_bytes(b"echo one\r\necho two\r\n")
    single = ctx.tmp / "one.txt"
    single.write_text("single\n", encoding="utf-8")
    async with ctx.sandbox() as sb:
        await sb.upload_many([])
        await sb.upload_many(
            [
                UploadItem(base, "/many", world_writable=True),
                UploadItem(over, "/many", world_writable=True, crlf=("test.sh",)),
                UploadItem(single, "/elsewhere/one.txt"),
            ]
        )
        expect(
            (await run_ok(sb, "cat /many/keep.txt /many/same.txt")) == "base\nover\n",
            "items did not merge in order",
        )
        expect((await run_ok(sb, ["bash", "/many/test.sh"])) == "one\ntwo\n", "CRLF not normalised")
        modes = await run_ok(sb, "stat -c '%a %n' /many /many/sub /many/sub/x.sh /many/keep.txt")
        expect(
            modes.split()
            == ["777", "/many", "777", "/many/sub", "777", "/many/sub/x.sh", "666", "/many/keep.txt"],
            f"not a+rwX: {modes!r}",
        )
        expect((await run_ok(sb, "cat /elsewhere/one.txt")) == "single\n", "file item")
        expect(
            over.joinpath("test.sh").read_bytes() == b"echo one\r\necho two\r\n", "the host file was changed"
        )
        if sb.boot_clock:  # the sandbox's process start times count the host's boot clock
            now, hz = host_boot_clock()
            before = int(now * hz)
            await asyncio.sleep((before + 1) / hz - now + 0.0005)  # into the next tick
            await run_ok(sb, "sleep 3 >/dev/null 2>&1 & echo started")
            new = [p for p in await sb.processes() if p.start_ticks > before]
            expect(
                any("sleep 3" in p.cmdline for p in new),
                "a process started now does not count as started after the host's moment",
            )
            expect(all(p.pid != 1 for p in new), "pid 1 counted as new")


ODD_NAMES = (
    "with space.txt",
    "single'quote.txt",
    'double"quote.txt',
    "back\\slash.txt",
    "dollar$HOME.txt",
    "-leading-dash.txt",
    "ünïcødé ✓.txt",
    "semi;colon&amp.txt",
    "star*and?.txt",
    "x" * 150 + ".txt",
    "sub dir/nested 'q' \"d\".txt",
)
"""File names the suite round-trips (spaces, quotes, shell metacharacters, unicode, long)."""


async def check_odd_names(ctx: CheckContext) -> None:
    """Names with spaces, quotes, shell metacharacters, unicode and >100 chars round-trip."""
    src = ctx.tmp / "odd"
    for i, name in enumerate(ODD_NAMES):
        p = src / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"content {i}\n", encoding="utf-8")
    async with ctx.sandbox() as sb:
        await sb.upload(src, "/odd dir")
        out = await run_ok(sb, ["find", "/odd dir", "-type", "f", "-printf", "%P\\0"])
        names = sorted(n for n in out.split("\0") if n)
        expect(names == sorted(ODD_NAMES), f"names changed inside: {names}")
        back = ctx.tmp / "odd-back"
        await sb.download("/odd dir", back)
        expect(_tree(back) == _tree(src), "odd names did not round-trip")


async def check_symlink_not_followed(ctx: CheckContext) -> None:
    """Symlinks travel as links both ways and are never followed on the host."""
    src = ctx.tmp / "links-src"
    src.mkdir()
    (src / "real.txt").write_text("real\n", encoding="utf-8")
    os.symlink("/etc/hostname", src / "to_host_file")
    os.symlink("real.txt", src / "relative")
    async with ctx.sandbox() as sb:
        await sb.upload(src, "/up")
        expect(
            (await run_ok(sb, "readlink /up/to_host_file")).strip() == "/etc/hostname",
            "host symlink not uploaded as a link",
        )
        expect((await run_ok(sb, "readlink /up/relative")).strip() == "real.txt", "relative link")
        await run_ok(
            sb,
            "mkdir -p /links && cd /links && echo hi > f && ln -s /etc/passwd passwd "
            "&& ln -s ../../../../etc/shadow up && ln -s /nowhere dangling "
            "&& ln -s f rel && mkdir d && ln -s /etc d/etcdir",
        )
        back = ctx.tmp / "links-back"
        await sb.download("/links", back)
        for name, target in (
            ("passwd", "/etc/passwd"),
            ("up", "../../../../etc/shadow"),
            ("dangling", "/nowhere"),
            ("rel", "f"),
            ("d/etcdir", "/etc"),
        ):
            p = back / name
            expect(p.is_symlink(), f"{name} was not stored as a link")
            expect(os.readlink(p) == target, f"{name} -> {os.readlink(p)!r}, want {target!r}")
        one = ctx.tmp / "one-link"
        await sb.download("/links/passwd", one)
        expect(
            one.is_symlink() and os.readlink(one) == "/etc/passwd", "a downloaded single symlink was followed"
        )


async def check_download_stays_inside_target(ctx: CheckContext) -> None:
    """A download never writes through host symlinks or outside its target folder."""
    outside = ctx.tmp / "outside"
    outside.mkdir()
    victim = outside / "victim.txt"
    victim.write_text("untouched\n", encoding="utf-8")
    target = ctx.tmp / "target"
    target.mkdir()
    os.symlink(outside, target / "sub")
    os.symlink(victim, target / "file.txt")
    async with ctx.sandbox() as sb:
        await run_ok(
            sb,
            "mkdir -p /esc/sub && echo evil > /esc/sub/planted.txt "
            "&& echo evil > /esc/file.txt && ln -s / /esc/root",
        )
        with contextlib.suppress(SandboxError):
            await sb.download("/esc", target)
        expect(victim.read_text(encoding="utf-8") == "untouched\n", "download wrote through a host symlink")
        expect(sorted(os.listdir(outside)) == ["victim.txt"], "download wrote outside target")
        ftarget = ctx.tmp / "file-link"
        os.symlink(victim, ftarget)
        with contextlib.suppress(SandboxError):
            await sb.download("/esc/file.txt", ftarget)
        expect(victim.read_text(encoding="utf-8") == "untouched\n", "file download followed a host symlink")


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
    with open("/proc/self/status", encoding="utf-8") as f:
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
        out = await run_ok(sb, "sha256sum /big/big.bin", timeout_sec=120)
        expect(out.split()[0] == digest, "uploaded bytes differ")
        back = ctx.tmp / "big-back.bin"
        with _RssSampler() as down:
            await sb.download("/big/big.bin", back)
        big.unlink()
        h2 = hashlib.sha256()
        with open(back, "rb") as f:
            while chunk := f.read(1 << 20):
                h2.update(chunk)
        expect(h2.hexdigest() == digest, "downloaded bytes differ")
        for what, s in (("upload", up), ("download", down)):
            expect(
                s.growth < RSS_GROWTH_LIMIT_BYTES,
                f"{what} of 256 MiB grew host memory by {s.growth >> 20} MiB",
            )


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
        f"then echo {a} ok; else echo {a} fail; fi"
        for a in addrs
    )
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
    expect(not any(res.values()), f"no-network sandbox reached the host: {res}")
    expect(lst.accepted == 0, "the host listener accepted a connection from a no-network sandbox")
    expect(took < 3 * len(addrs), f"connects took {took:.1f} s (should fail fast)")


async def check_network_public(ctx: CheckContext) -> None:
    """public: a TCP connect to a listener on this machine succeeds."""
    with _Listener() as lst:
        async with ctx.sandbox(network_mode=NetworkMode.PUBLIC) as sb:
            addrs = await _candidate_addresses(sb)
            res = await _probe(sb, addrs, lst.port)
    expect(any(res.values()), f"public sandbox could not reach the host: {res}")
    expect(lst.accepted >= 1, "the host listener saw no connection")


async def check_network_allowlist(ctx: CheckContext) -> None:
    """allowlist: a backend with an egress gateway starts it and a direct connection to a
    listener on this machine fails (only the gateway is reachable); any other backend refuses
    it with 'unsupported network mode' before starting — never silently relaxed."""
    spec = ctx.spec(network_mode=NetworkMode.ALLOWLIST, allowed_hosts=("allowed.invalid",))
    sb = ctx.make_sandbox(spec)
    if not type(sb).capabilities.gateway:
        try:
            await sb.start()
        except UnsupportedError as exc:
            expect("unsupported network mode" in str(exc), f"message: {exc}")
        else:
            raise ConformanceFailure("an allowlist sandbox started on a backend without a gateway")
        finally:
            await sb.stop()
        return
    with _Listener() as lst:
        try:
            await sb.start()
            addrs = await _candidate_addresses(sb)
            res = await _probe(sb, addrs, lst.port)
        finally:
            await sb.stop()
    expect(not any(res.values()), f"allowlist sandbox reached the host directly: {res}")
    expect(lst.accepted == 0, "the host listener accepted a direct connection")


# ---- resource limits ----------------------------------------------------------------------
_MEMORY_LIMIT_SH = (
    "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max"
)
_CPU_LIMIT_SH = (
    "if [ -e /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then "
    "echo $(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) "
    "$(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us); "
    "else cat /sys/fs/cgroup/cpu.max; fi"
)


async def check_memory_limit(ctx: CheckContext) -> None:
    """memory_mb is applied as the sandbox's cgroup memory limit."""
    async with ctx.sandbox(memory_mb=256) as sb:
        out = (await run_ok(sb, _MEMORY_LIMIT_SH)).strip()
        expect(out == str(256 * 1024 * 1024), f"memory limit {out!r}, want 268435456")


async def check_cpu_limit(ctx: CheckContext) -> None:
    """cpus is applied as the sandbox's cgroup CPU quota."""
    async with ctx.sandbox(cpus=1) as sb:
        out = (await run_ok(sb, _CPU_LIMIT_SH)).split()
        expect(len(out) == 2 and out[0].lstrip("-").isdigit() and out[1].isdigit(), f"cpu quota {out!r}")
        expect(int(out[0]) > 0 and int(out[0]) / int(out[1]) == 1.0, f"cpu quota/period {out!r}, want 1 cpu")
