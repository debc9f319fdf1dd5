"""Conformance checks: exec, users, cwd, env, processes and lifecycle (design §3, §3.4, §4.4)."""

from __future__ import annotations

import asyncio
import os
import time
import uuid

from cairn.errors import BuildError, ErrorKind, SandboxError
from cairn.sandbox.base import LOG_DIRS, ProcessInfo
from cairn.sandbox.conformance.context import (
    CheckContext,
    ConformanceFailure,
    expect,
    processes_with,
    run_ok,
    sleepers,
)


# ---- exec ---------------------------------------------------------------------------------
async def check_exec_stdout_stderr_separate(ctx: CheckContext) -> None:
    """stdout and stderr come back apart; exit codes, argv quoting, bash for shell strings."""
    async with ctx.sandbox() as sb:
        r = await sb.exec("echo out; echo err >&2; exit 3")
        expect(r.exit_code == 3 and not r.timed_out, f"exit code {r.exit_code}, want 3")
        expect(r.stdout == "out\n", f"stdout {r.stdout!r}")
        expect(r.stderr == "err\n", f"stderr {r.stderr!r}")
        r = await sb.exec(["printf", "%s|", "a b", "it's", 'say "hi"', "$HOME", ""])
        expect(r.stdout == 'a b|it\'s|say "hi"|$HOME||', f"argv not passed verbatim: {r.stdout!r}")
        r = await sb.exec("echo ${BASH_VERSION:+bash}")
        expect(r.stdout.strip() == "bash", "a shell string does not run with bash")
        r = await sb.exec("kill -9 $$")
        expect(r.exit_code == 137, f"a SIGKILLed command gives exit {r.exit_code}, want 137")
        r = await sb.exec(["/no/such/binary"])
        expect(r.exit_code in (126, 127), f"missing binary gives exit {r.exit_code}")
        r = await sb.exec("printf 'no newline'; printf '\\377\\376' >&2")
        expect(r.stdout == "no newline", f"stdout {r.stdout!r}")
        expect(r.stderr == "\ufffd\ufffd", f"undecodable bytes not replaced: {r.stderr!r}")


async def check_exec_concurrent(ctx: CheckContext) -> None:
    """Several execs in one sandbox run at the same time."""
    async with ctx.sandbox() as sb:
        t0 = time.monotonic()
        rs = await asyncio.gather(*(sb.exec(f"sleep 1; echo {i}") for i in range(4)))
        took = time.monotonic() - t0
        expect([r.stdout.strip() for r in rs] == ["0", "1", "2", "3"], "wrong outputs")
        expect(took < 3.5, f"4 concurrent 1 s execs took {took:.1f} s")


async def check_exec_background_returns(ctx: CheckContext) -> None:
    """A command that leaves a redirected background process returns at once; it keeps running."""
    async with ctx.sandbox() as sb:
        t0 = time.monotonic()
        r = await sb.exec("nohup sleep 7701 >/dev/null 2>&1 &", timeout_sec=20)
        took = time.monotonic() - t0
        expect(r.exit_code == 0 and not r.timed_out, f"exit {r.exit_code}")
        expect(took < 5, f"exec waited {took:.1f} s for a background process")
        expect(sleepers(await processes_with(sb, [7701]), [7701]), "the background process is gone")


async def check_exec_timeout(ctx: CheckContext) -> None:
    """A timed-out exec returns promptly with ``timed_out`` and no exit code, keeping output."""
    async with ctx.sandbox() as sb:
        t0 = time.monotonic()
        r = await sb.exec("echo started; sleep 60", timeout_sec=1.5)
        took = time.monotonic() - t0
        expect(r.timed_out, "timed_out not set")
        expect(r.exit_code is None, f"exit code {r.exit_code} on a timeout, want None")
        expect(took < 5, f"a 1.5 s timeout returned after {took:.1f} s")
        expect(r.stdout == "started\n", f"output before the timeout lost: {r.stdout!r}")
        r = await sb.exec("echo still usable")
        expect(r.ok and r.stdout == "still usable\n", "sandbox unusable after a timeout")


async def check_exec_timeout_kills_tree(ctx: CheckContext) -> None:
    """A timeout kills the exec's whole tree, double-forked, setsid and nohup children too."""
    async with ctx.sandbox() as sb:
        await run_ok(sb, "nohup sleep 7773 >/dev/null 2>&1 &")
        t0 = time.monotonic()
        r = await sb.exec("(sleep 7774 &); setsid sleep 7775 & nohup sleep 7776 & sleep 7777", timeout_sec=3)
        took = time.monotonic() - t0
        expect(r.timed_out, "timed_out not set")
        expect(took < 6, f"3 s timeout returned after {took:.1f} s")
        left = sleepers(await sb.processes(), [7774, 7775, 7776, 7777])
        expect(not left, f"processes survived the timeout: {[p.cmdline for p in left]}")
        expect(
            sleepers(await sb.processes(), [7773]), "a process started before the timed-out exec was killed"
        )


async def check_exec_timeout_as_user(ctx: CheckContext) -> None:
    """A timeout also kills the tree of an exec run as a non-root user."""
    async with ctx.sandbox() as sb:
        r = await sb.exec("setsid sleep 7778 & (sleep 7779 &); sleep 7780", user="agent", timeout_sec=2)
        expect(r.timed_out, "timed_out not set")
        left = sleepers(await sb.processes(), [7778, 7779, 7780])
        expect(not left, f"processes survived: {[p.cmdline for p in left]}")


async def check_output_cap(ctx: CheckContext) -> None:
    """Output is kept to a bounded tail per stream, flagged as truncated."""
    async with ctx.sandbox() as sb:
        cap = 1_000_000
        r = await sb.exec(
            "head -c 3000000 /dev/zero | tr '\\0' a; echo END; echo small >&2", max_output_bytes=cap
        )
        expect(r.ok, f"exit {r.exit_code}")
        expect(len(r.stdout.encode()) <= cap, f"stdout kept {len(r.stdout)} bytes > cap {cap}")
        expect(len(r.stdout) >= cap - 4096, f"stdout kept only {len(r.stdout)} bytes")
        expect(r.stdout.endswith("aaaEND\n"), "the tail of stdout was not kept")
        expect(r.stdout_truncated and not r.stderr_truncated, "truncation flags wrong")
        expect(r.stderr == "small\n", f"stderr {r.stderr[:100]!r}")
        r = await sb.exec("head -c 300000 /dev/zero | tr '\\0' b >&2; echo E >&2", max_output_bytes=1000)
        expect(
            len(r.stderr) <= 1000 and r.stderr.endswith("bE\n") and r.stderr_truncated,
            "stderr tail not capped",
        )


# ---- users, cwd, env ----------------------------------------------------------------------
async def check_users(ctx: CheckContext) -> None:
    """Default user is the image's; a name or a uid switches user; /logs dirs are writable."""
    async with ctx.sandbox() as sb:
        expect((await run_ok(sb, "id -un")).strip() == "root", "default user is not root")
        expect((await run_ok(sb, "id -un", user="agent")).strip() == "agent", "user=agent")
        uid = int((await run_ok(sb, "id -u agent")).strip())
        expect((await run_ok(sb, ["id", "-un"], user=uid)).strip() == "agent", "user=<uid>")
        expect((await run_ok(sb, "id -u", user=str(uid))).strip() == str(uid), "user='<uid>'")
        for d in LOG_DIRS:
            await run_ok(sb, f"touch {d}/by-agent && test -O {d}/by-agent", user="agent")


async def check_cwd(ctx: CheckContext) -> None:
    """The working dir is the image WORKDIR, or spec.workdir (created); cwd overrides it."""
    async with ctx.sandbox() as sb:
        expect(sb.workdir == "/app", f"workdir {sb.workdir!r}, want the image's /app")
        expect((await run_ok(sb, "pwd")).strip() == "/app", "default cwd is not the workdir")
        expect((await run_ok(sb, "cat present.txt")).strip() == "app-file", "image files missing")
        expect((await run_ok(sb, "pwd", cwd="/tmp")).strip() == "/tmp", "cwd ignored")
        expect(
            (await run_ok(sb, ["pwd"], cwd="/usr", user="agent")).strip() == "/usr",
            "cwd ignored for argv as a user",
        )
    async with ctx.sandbox(workdir="/srv/work dir") as sb:
        expect(sb.workdir == "/srv/work dir", f"workdir {sb.workdir!r}")
        expect((await run_ok(sb, "pwd")).strip() == "/srv/work dir", "spec.workdir not used")


async def check_env(ctx: CheckContext) -> None:
    """Image ENV, spec.env and per-exec env reach the command verbatim; host env does not."""
    marker = f"CAIRN_CONF_HOST_ONLY_{uuid.uuid4().hex[:6]}"
    os.environ[marker] = "leaked"
    try:
        spec_env = {"SPEC_VAR": "from spec", "OVERRIDE": "spec", "DOLLAR": "$HOME and `x`"}
        async with ctx.sandbox(env=spec_env) as sb:
            out = await run_ok(sb, ["printenv", "CAIRN_CONF_IMAGE_ENV", "SPEC_VAR", "DOLLAR"])
            expect(out == "from image\nfrom spec\n$HOME and `x`\n", f"env: {out!r}")
            out = await run_ok(
                sb,
                ["printenv", "OVERRIDE", "EXTRA", "MULTI"],
                env={"OVERRIDE": "exec", "EXTRA": 'it\'s "q"', "MULTI": "a\nb"},
            )
            expect(out == 'exec\nit\'s "q"\na\nb\n', f"exec env: {out!r}")
            out = await run_ok(sb, ["printenv", "SPEC_VAR"], user="agent")
            expect(out == "from spec\n", "spec env missing for another user")
            r = await sb.exec(["printenv", marker])
            expect(r.exit_code == 1 and r.stdout == "", "the host environment leaked in")
            out = await run_ok(sb, "echo $PATH")
            expect("/usr/bin" in out and "/bin" in out, f"PATH {out!r}")
    finally:
        os.environ.pop(marker, None)


async def check_logs_dirs_fresh(ctx: CheckContext) -> None:
    """/logs/{agent,verifier,artifacts} exist empty at start, whatever the image left there."""
    async with ctx.sandbox() as sb:
        for d in LOG_DIRS:
            out = await run_ok(sb, f"ls -A {d}")
            expect(out == "", f"{d} not empty at start: {out!r}")
            await run_ok(sb, f"test -d {d} && test -w {d}", user="agent")


# ---- processes ----------------------------------------------------------------------------
async def check_processes_and_kill(ctx: CheckContext) -> None:
    """processes() sees double-forked/setsid/nohup children; kill_processes kills by identity."""
    async with ctx.sandbox() as sb:
        await run_ok(sb, "nohup sleep 7783 >/dev/null 2>&1 &")
        before = await processes_with(sb, [7783])
        expect(any(p.pid == 1 for p in before), "pid 1 not listed")
        expect(sleepers(before, [7783]), "a running process is not listed")
        await run_ok(
            sb,
            "(sleep 7784 >/dev/null 2>&1 &); setsid sleep 7785 >/dev/null 2>&1 & "
            "nohup sleep 7786 >/dev/null 2>&1 &",
            user="agent",
        )
        after = await processes_with(sb, [7783, 7784, 7785, 7786])
        new = [p for p in after if p.key not in {q.key for q in before}]
        expect(
            len(sleepers(new, [7784, 7785, 7786])) == 3,
            f"new processes not all listed: {[p.cmdline for p in new]}",
        )
        s = sleepers(new, [7784])[0]
        stale = ProcessInfo(pid=s.pid, ppid=s.ppid, start_ticks=s.start_ticks + 1, cmdline=s.cmdline)
        await sb.kill_processes([stale] + [p for p in after if p.pid == 1])
        await asyncio.sleep(0.3)
        expect(sleepers(await sb.processes(), [7784]), "a pid with another start time was killed")
        await sb.kill_processes(new)
        await asyncio.sleep(0.3)
        now = await sb.processes()
        left = sleepers(now, [7784, 7785, 7786])
        expect(not left, f"kill_processes left {[p.cmdline for p in left]}")
        expect(sleepers(now, [7783]), "a process started before was killed")
        await sb.kill_processes(new)
        expect((await run_ok(sb, "echo alive")).strip() == "alive", "sandbox broke after kills")


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
        expect(exc.kind is ErrorKind.BUILD_FAILED, f"kind {exc.kind}, want build_failed")
        expect(marker in str(exc.detail.get("log_tail", "")), "log tail lacks the RUN output")
    if ctx.leftovers is not None:
        left = await ctx.leftovers(spec)
        expect(not left, f"a failed start left {left}")


async def check_stop_fast(ctx: CheckContext) -> None:
    """stop() is quick even with processes running inside."""
    async with ctx.sandbox() as sb:
        await run_ok(
            sb,
            "nohup sleep 1000 >/dev/null 2>&1 & trap '' TERM; "
            "nohup sh -c 'trap \"\" TERM; sleep 1001' >/dev/null 2>&1 &",
        )
        t0 = time.monotonic()
        await sb.stop()
        took = time.monotonic() - t0
    expect(took < 2.0, f"stop took {took:.2f} s")


async def check_stop_removes_everything(ctx: CheckContext) -> None:
    """stop() removes all, is idempotent, works unstarted, and exec afterwards raises."""
    await ctx.make_sandbox(ctx.spec()).stop()  # never started: a no-op
    spec = ctx.spec()
    sb = ctx.make_sandbox(spec)
    await sb.start()
    await run_ok(sb, "echo up")
    await sb.stop()
    await sb.stop()
    if ctx.leftovers is not None:
        left = await ctx.leftovers(spec)
        expect(not left, f"stop left {left}")
    try:
        await sb.exec("echo after stop")
    except SandboxError:
        pass
    else:
        raise ConformanceFailure("exec after stop did not raise SandboxError")
