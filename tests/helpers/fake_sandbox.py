"""A recording, in-memory :class:`~cairn.sandbox.base.Sandbox` for the trial engine's own tests.

Like httpx's ``MockTransport``: an implementation of the interface the engine talks to, with
its files in a dict, an exec handler a test may supply, and a log of every call. It runs no
process and needs no Docker engine and no namespaces, so engine tests (step order, stop rules,
gates, classification, phases, status, timings) run in milliseconds. What only a kernel
sandbox proves (isolation, timeouts that kill process trees, networks) stays with the real
backends and their conformance suite; the checks this fake passes are declared below like a
backend's (:data:`FakeSandbox.known_conformance_gaps` lists the rest).

Commands: the engine's own fragments (the after-agent exec, evidence and verifier clean-ups,
``reset_dirs_cmd``) are emulated; scripts (``bash FILE``, ``sh -c TEXT``) run through a tiny
interpreter of ``echo … > file``, ``exit N``, ``sleep S``, ``test``/``[ ]``, ``grep -q``,
``mkdir``/``rm``/``touch``/``cat``, ``true``/``false`` and ``&&``/``||`` chains; a test's
:attr:`FakeWorld.handler` sees every exec first and may answer it.
"""

from __future__ import annotations

import asyncio
import inspect
import shlex
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from cairn.errors import SandboxError
from cairn.layout import AGENT_LOGS_DIR, ARTIFACTS_DIR, LOG_DIRS, SOLUTION_DIR, TESTS_DIR, VERIFIER_LOGS_DIR
from cairn.netpolicy import NetworkMode, NetworkPolicy
from cairn.sandbox.base import (
    Capabilities,
    ExecRequest,
    ExecResult,
    ProcessInfo,
    Sandbox,
    SandboxSpec,
    UploadItem,
)
from cairn.trial.helper import AFTER_AGENT_SCRIPT, CLEAR_EVIDENCE_CMD, PLANTED_PREFIX, VERIFIER_CLEANUP_CMD
from cairn.trial.step import HOOK_NAMES

Handler = Callable[["FakeSandbox", ExecRequest], "ExecResult | None | Awaitable[ExecResult | None]"]

PASSED_CONFORMANCE = frozenset({"logs_dirs_fresh", "stop_removes_everything"})
"""The conformance checks (:mod:`cairn.sandbox.conformance`) this fake passes; the
test ``tests/trial/test_fake_engine.py`` runs them against it."""


@dataclass(frozen=True)
class Call:
    """One recorded call on a fake sandbox.

    Attributes:
        op: ``start``, ``stop``, ``exec``, ``upload``, ``download``, ``set_network``,
            ``processes``, ``kill``.
        detail: the exec's argv (joined), a path, a policy's description.
        user: the exec's user.
        trial_id: the sandbox's trial.
    """

    op: str
    detail: str = ""
    user: str | int | None = None
    trial_id: str = ""


@dataclass
class FakeWorld:
    """What every fake sandbox of a test shares: their files, handler, calls and processes.

    Attributes:
        files: sandbox path → content of each file (one namespace for all sandboxes of a test).
        dirs: folders that exist.
        handler: called with every exec before the built-in commands; returns an
            :class:`ExecResult` to answer it, or ``None`` to let the fake run it.
        calls: every call, in order.
        processes: the processes "running" (an agent may add some; kills remove them).
        start_error: raised by the next ``start()`` (then cleared), to fake a failed start.
        lost: every operation raises this once set (an engine gone away).
        respawn: command lines a process that is not new (a task's own supervisor) starts
            again each time they are killed.
    """

    files: dict[str, bytes] = field(default_factory=dict)
    dirs: set[str] = field(default_factory=lambda: {"/", "/app", "/tmp", "/logs"})
    handler: Handler | None = None
    calls: list[Call] = field(default_factory=list)
    processes: list[ProcessInfo] = field(default_factory=list)
    start_error: BaseException | None = None
    lost: BaseException | None = None
    respawn: set[str] = field(default_factory=set)
    _next_pid: int = 100

    def backend(self) -> type[FakeSandbox]:
        """A :class:`FakeSandbox` class bound to this world (what ``run_trial`` gets)."""
        world = self

        class Bound(FakeSandbox):
            _world = world

        return Bound

    def spawn(self, cmdline: str) -> ProcessInfo:
        """Record a process as running (what an agent left behind)."""
        self._next_pid += 1
        p = ProcessInfo(pid=self._next_pid, ppid=1, start_ticks=self._next_pid, cmdline=cmdline)
        self.processes.append(p)
        return p

    def ops(self, *ops: str) -> list[Call]:
        """The recorded calls of these kinds."""
        return [c for c in self.calls if c.op in ops]

    def text(self, path: str) -> str:
        """A file's content as text."""
        return self.files[path].decode("utf-8")

    # ---- the file system -------------------------------------------------------------------
    def write(self, path: str, data: bytes, *, append: bool = False) -> None:
        """Write a file (its folders are made)."""
        p = PurePosixPath(path)
        for parent in p.parents:
            self.dirs.add(str(parent))
        self.files[str(p)] = (self.files.get(str(p), b"") if append else b"") + data

    def listing(self, folder: str) -> list[str]:
        """Every file and folder under ``folder`` (not itself)."""
        pre = folder.rstrip("/") + "/"
        return sorted(
            [f for f in self.files if f.startswith(pre)] + [d for d in self.dirs if d.startswith(pre)]
        )

    def remove(self, path: str, *, contents_only: bool = False) -> None:
        """Remove a file or folder (or only what is under a folder)."""
        pre = path.rstrip("/") + "/"
        for f in [f for f in self.files if f.startswith(pre) or (f == path and not contents_only)]:
            del self.files[f]
        for d in [d for d in self.dirs if d.startswith(pre) or (d == path and not contents_only)]:
            self.dirs.discard(d)

    def exists(self, path: str) -> bool:
        return path in self.files or path in self.dirs


def _ok(stdout: str = "", exit_code: int = 0, stderr: str = "") -> ExecResult:
    return ExecResult(exit_code=exit_code, stdout=stdout, stderr=stderr)


class FakeSandbox(Sandbox):
    """The in-memory sandbox (module docstring). Use :meth:`FakeWorld.backend` to get a class
    bound to a test's world."""

    name = "fake"
    capabilities = Capabilities(
        network_modes=frozenset(NetworkMode),
        cpu_limit=True,
        memory_limit=True,
        storage_limit=True,
        gateway=True,
    )
    known_conformance_gaps: frozenset[str] = frozenset()  # set below: conformance_gaps()
    _world: FakeWorld = FakeWorld()

    def __init__(self, spec: SandboxSpec) -> None:
        super().__init__(spec)
        self.world = self._world
        self.policies: list[tuple[NetworkPolicy, str]] = []
        self.started = self.stopped = False
        self._shell = "bash"

    def _record(self, op: str, detail: str = "", user: str | int | None = None) -> None:
        if self.world.lost is not None:
            raise self.world.lost
        if self.stopped and op != "stop":
            raise SandboxError(f"fake sandbox {self.spec.trial_id}: {op} after stop")
        self.world.calls.append(Call(op, detail, user, self.spec.trial_id))

    async def start(self) -> None:
        self._record("start")
        if self.world.start_error is not None:
            err, self.world.start_error = self.world.start_error, None
            raise err
        for d in LOG_DIRS:
            self.world.remove(d, contents_only=True)
            self.world.dirs.add(d)
        self.started = True

    async def stop(self) -> None:
        self.world.calls.append(Call("stop", "", None, self.spec.trial_id))
        self.stopped = True

    @property
    def workdir(self) -> str:
        return self.spec.workdir or "/app"

    async def set_network(self, policy: NetworkPolicy, *, phase: str) -> None:
        self._record("set_network", f"{phase}: {policy.describe()}")
        self.policies.append((policy, phase))

    async def network_records(self) -> list[dict[str, object]]:
        return []

    # ---- files -----------------------------------------------------------------------------
    async def upload(self, host_path: Path, sandbox_path: str) -> None:
        self._record("upload", sandbox_path)
        if not host_path.exists():
            raise FileNotFoundError(host_path)
        if host_path.is_file():
            self.world.write(sandbox_path, host_path.read_bytes())
            return
        self.world.dirs.add(sandbox_path)
        for p in sorted(host_path.rglob("*")):
            rel = p.relative_to(host_path).as_posix()
            target = f"{sandbox_path.rstrip('/')}/{rel}"
            if p.is_dir():
                self.world.dirs.add(target)
            else:
                self.world.write(target, p.read_bytes())

    async def upload_many(self, items: Sequence[UploadItem]) -> None:
        for item in items:
            await self.upload(item.host_path, item.sandbox_path)
            for name in item.crlf:
                path = f"{item.sandbox_path.rstrip('/')}/{name}"
                if path in self.world.files:
                    self.world.files[path] = self.world.files[path].replace(b"\r\n", b"\n")

    async def download(self, sandbox_path: str, host_path: Path) -> None:
        self._record("download", sandbox_path)
        w = self.world
        if sandbox_path in w.files:
            host_path.parent.mkdir(parents=True, exist_ok=True)
            host_path.write_bytes(w.files[sandbox_path])
            return
        if sandbox_path not in w.dirs:
            raise FileNotFoundError(sandbox_path)
        host_path.mkdir(parents=True, exist_ok=True)
        for path in w.listing(sandbox_path):
            rel = path[len(sandbox_path.rstrip("/")) + 1 :]
            if path in w.files:
                (host_path / rel).parent.mkdir(parents=True, exist_ok=True)
                (host_path / rel).write_bytes(w.files[path])
            else:
                (host_path / rel).mkdir(parents=True, exist_ok=True)

    # ---- processes -------------------------------------------------------------------------
    async def processes(self) -> list[ProcessInfo]:
        self._record("processes")
        return [ProcessInfo(pid=1, ppid=0, start_ticks=1, cmdline="init"), *self.world.processes]

    async def kill_processes(self, pids: Sequence[ProcessInfo]) -> None:
        self._record("kill", " ".join(str(p.pid) for p in pids))
        keys = {p.key for p in pids if p.pid != 1}
        gone = [p for p in self.world.processes if p.key in keys]
        self.world.processes = [p for p in self.world.processes if p.key not in keys]
        for p in gone:
            if p.cmdline in self.world.respawn:
                self.world.spawn(p.cmdline)

    # ---- exec ------------------------------------------------------------------------------
    async def _exec(self, req: ExecRequest) -> ExecResult:
        self._record(
            "exec",
            shlex.join(req.argv)
            if req.argv[:2] != ["/bin/sh", "-c"] or req.argv[2] != AFTER_AGENT_SCRIPT
            else "after-agent",
            req.user,
        )
        if self.world.handler is not None:
            answer = self.world.handler(self, req)
            if inspect.isawaitable(answer):
                answer = await answer
            if answer is not None:
                return answer
        try:
            if req.timeout_sec is None:
                return await self._run_argv(req.argv, req)
            async with asyncio.timeout(req.timeout_sec):
                return await self._run_argv(req.argv, req)
        except TimeoutError:
            return ExecResult(exit_code=None, timed_out=True)

    async def _run_argv(self, argv: list[str], req: ExecRequest) -> ExecResult:
        if argv[:3] == ["/bin/sh", "-c", AFTER_AGENT_SCRIPT]:
            return self._after_agent(argv[4], argv[5] == "1", argv[7:], argv[6] == "1")
        if len(argv) >= 3 and argv[1] == "-c" and argv[0].endswith(("sh", "bash")):
            return await self._script(argv[2], req)
        if len(argv) == 2 and argv[0].endswith(("sh", "bash")):
            path = argv[1] if argv[1].startswith("/") else f"{req.cwd or self.workdir}/{argv[1]}"
            if path not in self.world.files:
                return _ok(exit_code=127, stderr=f"bash: {path}: No such file or directory")
            return await self._script(self.world.text(path), req)
        return await self._command(argv, req)

    def _after_agent(
        self, planted: str, prep: bool, artifacts: list[str], list_processes: bool = False
    ) -> ExecResult:
        """The emulated :data:`cairn.trial.helper.AFTER_AGENT_SCRIPT` (``PS=1``: the world's
        processes as ``/proc`` records, then a one-user ``/etc/passwd``)."""
        w = self.world
        w.remove(SOLUTION_DIR)
        out: list[str] = []
        for d in (AGENT_LOGS_DIR, ARTIFACTS_DIR):
            w.dirs.add(d)
            if w.listing(d):
                out.append(f"full {d}")
        if w.listing(VERIFIER_LOGS_DIR):
            for path in w.listing(VERIFIER_LOGS_DIR):
                if path in w.files:
                    w.write(planted + path[len(VERIFIER_LOGS_DIR) :], w.files[path])
            w.remove(VERIFIER_LOGS_DIR, contents_only=True)
            out.append(f"planted {planted}")
        w.dirs.add(VERIFIER_LOGS_DIR)
        if prep:
            w.remove(TESTS_DIR)
            out.append("free 1000000")
        for i, a in enumerate(artifacts):
            if a in w.files:
                out.append(f"art {i} {len(w.files[a])} f")
            elif a in w.dirs:
                size = sum(len(w.files[f]) for f in w.listing(a) if f in w.files)
                out.append(f"art {i} {size} d")
            else:
                out.append(f"art {i} - -")
        text = "\n".join(out) + "\n"
        if list_processes:
            procs = [ProcessInfo(pid=1, ppid=0, start_ticks=1, cmdline="init", uid=0), *w.processes]
            stat = "S {ppid} 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 {start}"
            text += (
                "\x1ePS999"
                + "".join(
                    f"\x1e{p.uid if p.uid is not None else 0}\x1d{p.pid}) "
                    f"{stat.format(ppid=p.ppid, start=p.start_ticks)}\x1f{p.cmdline}"
                    for p in procs
                )
                + "\x1ePWroot:x:0:0:root:/root:/bin/sh\n"
            )
        return _ok(text)

    async def _script(self, text: str, req: ExecRequest) -> ExecResult:
        """Run a script: the engine's own fragments by name, anything else line by line."""
        w = self.world
        if text == CLEAR_EVIDENCE_CMD:
            w.remove(AGENT_LOGS_DIR, contents_only=True)
            for f in [f for f in w.files if f.startswith(PLANTED_PREFIX)]:
                del w.files[f]
            return _ok()
        if HOOK_NAMES in text:  # hardened verify: no Python start-up hooks here
            return _ok()
        if text == VERIFIER_CLEANUP_CMD:
            w.remove(TESTS_DIR)
            w.remove(VERIFIER_LOGS_DIR, contents_only=True)
            return _ok()
        out: list[str] = []
        code = 0
        for line in text.replace(";", "\n").splitlines():
            line = line.strip()
            if not line or line.startswith("#") or line.startswith("set "):
                continue
            code = await self._chain(line, out, req)
            if code < 0:  # exit N
                code = -code - 1
                break
        return _ok("".join(out), exit_code=code)

    async def _chain(self, line: str, out: list[str], req: ExecRequest) -> int:
        """``a && b || c``: bash's left-to-right short circuit."""
        parts: list[tuple[str, str]] = []
        op = ""
        rest = line
        while True:
            i_and, i_or = rest.find("&&"), rest.find("||")
            cut = min((i for i in (i_and, i_or) if i >= 0), default=-1)
            if cut < 0:
                parts.append((op, rest.strip()))
                break
            parts.append((op, rest[:cut].strip()))
            op, rest = rest[cut : cut + 2], rest[cut + 2 :]
        code = 0
        for op, cmd in parts:
            if (op == "&&" and code != 0) or (op == "||" and code == 0):
                continue
            code = await self._simple(cmd, out, req)
            if code < 0:
                return code
        return code

    async def _simple(self, cmd: str, out: list[str], req: ExecRequest) -> int:
        redirect, append = None, False
        if ">>" in cmd:
            cmd, redirect = cmd.split(">>", 1)
            append = True
        elif ">" in cmd and "2>" not in cmd:
            cmd, redirect = cmd.split(">", 1)
        words = shlex.split(cmd)
        sink: list[str] = []
        code = (await self._command(words, req, sink)).exit_code if words else 0
        text = "".join(sink)
        if redirect is not None:
            self.world.write(redirect.strip(), text.encode("utf-8"), append=append)
        else:
            out.append(text)
        return code if code is not None else 1

    async def _command(self, words: list[str], req: ExecRequest, sink: list[str] | None = None) -> ExecResult:
        """One simple command."""
        w = self.world
        name, args = words[0], words[1:]
        paths = [a for a in args if not a.startswith("-")]
        if name == "exit":
            return ExecResult(exit_code=-(int(args[0]) if args else 0) - 1)
        if name in ("true", ":", "chmod", "chown", "sed", "cd", "export"):
            return _ok()
        if name == "false":
            return _ok(exit_code=1)
        if name == "echo":
            text = " ".join(args) + "\n"
            if sink is not None:
                sink.append(text)
                return _ok()
            return _ok(text)
        if name == "sleep":
            await asyncio.sleep(float(args[0]))
            return _ok()
        if name in ("test", "["):
            args = [a for a in args if a != "]"]
            test = {
                "-f": lambda p: p in w.files,
                "-d": lambda p: p in w.dirs,
                "-e": w.exists,
                "-w": w.exists,
            }.get(args[0])
            return _ok(exit_code=0 if test is not None and test(args[1]) else 1)
        if name == "grep":
            word, path = paths[0], paths[1]
            found = path in w.files and word in w.text(path)
            return _ok(exit_code=0 if found else 1)
        if name == "cat":
            if paths[0] not in w.files:
                return _ok(exit_code=1)
            text = w.text(paths[0])
            if sink is not None:
                sink.append(text)
            return _ok(text if sink is None else "")
        if name == "ls":
            folder = paths[0] if paths else self.workdir
            pre = folder.rstrip("/") + "/"
            names = sorted({p[len(pre) :].split("/")[0] for p in w.listing(folder)})
            text = "".join(f"{n}\n" for n in names)
            if sink is not None:
                sink.append(text)
                return _ok()
            return _ok(text)
        if name == "mkdir":
            for p in paths:
                w.dirs.add(p)
            return _ok()
        if name == "touch":
            for p in paths:
                w.write(p, w.files.get(p, b""))
            return _ok()
        if name == "rm":
            for p in paths:
                w.remove(p)
            return _ok()
        if name == "find" and "-delete" in args:
            w.remove(paths[0], contents_only=True)
            return _ok()
        if name == "id":
            return _ok("0\n")
        if name == "spawn":  # the fake's own: leave a process running
            w.spawn(" ".join(args))
            return _ok()
        return _ok(exit_code=127, stderr=f"fake sandbox: {name}: command not found")


def conformance_gaps() -> frozenset[str]:
    """Every conformance check the fake does not pass (all but :data:`PASSED_CONFORMANCE`)."""
    from cairn.sandbox.conformance import CHECK_NAMES

    return frozenset(CHECK_NAMES) - PASSED_CONFORMANCE


FakeSandbox.known_conformance_gaps = conformance_gaps()

__all__ = ["PASSED_CONFORMANCE", "Call", "FakeSandbox", "FakeWorld", "SandboxError"]
