"""The ``local`` sandbox backend: daemonless namespaces + overlayfs (design §3.2).

A local sandbox is a tree of Linux namespaces (user, mount, pid, ipc, uts; net for no-network)
made with util-linux ``unshare``, whose root is an overlay of the host's system folders (/usr,
/etc, /var, /opt, /lib*) under a per-sandbox upper folder, with the environment's Dockerfile
applied once as a cached layer. It needs no daemon and starts in tens of milliseconds; it is
for trusted agents and development (see docs/local-backend.md for what it does not isolate).

Module map: :mod:`~cairn.sandbox.local.rootfs` (state folders, host checks, the mount plan),
:mod:`~cairn.sandbox.local.pid1` (PID 1), :mod:`~cairn.sandbox.local.namespace` (start, exec,
processes), :mod:`~cairn.sandbox.local.files` (symlink-safe copies),
:mod:`~cairn.sandbox.local.dockerfile` (the Dockerfile subset) and
:mod:`~cairn.sandbox.local.layer` (building and caching layers).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import os
import re
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from cairn.errors import BuildError, ErrorKind, SandboxError, UnsupportedError
from cairn.layout import SOLUTION_DIR
from cairn.sandbox.base import (
    LOG_DIRS,
    Capabilities,
    ExecRequest,
    ExecResult,
    NetworkMode,
    ProcessInfo,
    Sandbox,
    SandboxSpec,
    SnapshotRef,
    started_since,
)
from cairn.sandbox.local.dockerfile import (
    COMPOSE_FILES,
    NEEDS_DOCKER,
    ImageMeta,
    check_env_dir,
)
from cairn.sandbox.local.files import SandboxFS, resolve_user
from cairn.sandbox.local.layer import ensure_layer
from cairn.sandbox.local.namespace import InitConfig, NamespaceRuntime
from cairn.sandbox.local.rootfs import (
    HostSupport,
    check_state_dir,
    kill_init,
    layers_dir,
    list_state_folders,
    prepare_mask,
    prepare_skeleton,
    probe_host,
    read_marker,
    remove_tree,
    root_plan,
    sandboxes_dir,
    write_marker,
)

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

KILL_STOP_ROUNDS = 200
"""The most stop-and-list rounds of :meth:`LocalSandbox.kill_since` (a stopped process forks
no more: each round can only find the children forked before their parent was stopped)."""

__all__ = [
    "COMPOSE_FILES",
    "NEEDS_DOCKER",
    "LocalSandbox",
    "find_local_layers",
    "find_local_sandboxes",
    "remove_local_layer",
    "remove_local_sandbox",
]


def _safe_name(text: str, limit: int = 48) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.")[:limit] or "sandbox"


class LocalSandbox(Sandbox):
    """A sandbox made of namespaces and overlays on this host (no daemon).

    See the module docstring; capabilities: network ``public`` (the host network) and
    ``no-network`` (loopback only); no CPU or memory limits (declared gaps); the Dockerfile
    subset of design §3.2; no compose.
    """

    name: ClassVar[str] = "local"
    capabilities: ClassVar[Capabilities] = Capabilities(
        network_modes=frozenset({NetworkMode.PUBLIC, NetworkMode.NO_NETWORK}),
        cpu_limit=False,
        memory_limit=False,
        storage_limit=False,
        gpus=False,
        compose=False,
        dockerfile="subset",
        snapshot=True,
        gateway=False,
        network_hint="allowlists, model hosts of in-sandbox agents under no-network and "
        "per-phase network modes need the egress gateway: use -e docker",
    )
    known_conformance_gaps: ClassVar[frozenset[str]] = frozenset({"memory_limit", "cpu_limit"})

    def __init__(self, spec: SandboxSpec) -> None:
        super().__init__(spec)
        self._ns: NamespaceRuntime | None = None
        self._fs: SandboxFS | None = None
        self._dir: Path | None = None
        self._meta = ImageMeta()
        self._workdir = "/"
        self._shell = "/bin/bash"
        self._hostname = ""
        self._state = "new"
        self._overlay_rels: list[str] = []
        self._last_snapshot: Path | None = None

    # ---- capability check -------------------------------------------------------------
    @classmethod
    def host_problem(cls) -> str | None:
        """Why this host cannot run local sandboxes (:func:`probe_host`), or ``None``."""
        try:
            probe_host()
        except UnsupportedError as exc:
            return str(exc)
        return None

    @classmethod
    def check(cls, spec: SandboxSpec) -> list[str]:
        """Check, before anything runs, that this host and this environment suit ``local``.

        Returns:
            Warnings: the host system stands in for the ``FROM`` image, ignored Dockerfile
            instructions, resource limits the backend cannot apply.

        Raises:
            UnsupportedError: allowlist networking, GPUs, a compose file or a Dockerfile
                outside the subset ("this environment needs -e docker"), or a host without
                root or unprivileged user namespaces.
        """
        warnings = super().check(spec)
        warnings += check_env_dir(spec.env_dir, spec.docker_image)
        probe_host()
        check_state_dir(sandboxes_dir())
        return warnings

    # ---- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        """Build or reuse the environment's layer and start the sandbox (see ``Sandbox``).

        Raises:
            UnsupportedError: see :meth:`check`.
            BuildError: ``build_failed`` (a RUN failed) or ``build_timeout``.
            SandboxError: ``start_failed``.
        """
        if self._state != "new":
            raise SandboxError(f"local sandbox already {self._state}")
        self._state = "starting"
        spec = self.spec
        self.check(spec)
        support = probe_host()
        try:
            async with asyncio.timeout(spec.build_timeout_sec):
                await self._start(support)
        except TimeoutError:
            raise BuildError(
                ErrorKind.BUILD_TIMEOUT,
                f"local sandbox build and start exceeded build_timeout_sec = {spec.build_timeout_sec:.0f} s",
            ) from None
        except OSError as exc:  # e.g. no space left where sandboxes live: infra, retried
            raise SandboxError(
                f"could not set up the local sandbox under {sandboxes_dir()}: {exc}",
                kind=ErrorKind.START_FAILED,
            ) from exc
        self._state = "running"

    async def _start(self, support: HostSupport) -> None:
        spec = self.spec
        layer = await ensure_layer(spec, support)
        self._meta = layer.meta if layer else ImageMeta()
        base = sandboxes_dir()
        base.mkdir(parents=True, exist_ok=True)
        self._dir = base / f"{_safe_name(spec.trial_id)}-{uuid.uuid4().hex[:8]}"
        self._dir.mkdir(mode=0o711)
        marker = {
            "backend": "local",
            "job_id": spec.job_id,
            "trial_id": spec.trial_id,
            "job_dir": str(spec.job_dir) if spec.job_dir else None,
            "created_at": dt.datetime.now(dt.UTC).isoformat(),
            "pid": None,
            "pid_start_ticks": None,
            "owner_pid": os.getpid(),
            "env_hash": spec.env_hash,
            "keep": spec.keep,
        }
        write_marker(self._dir, marker)
        self._hostname = _safe_name(spec.trial_id, 12).lower().strip("-_.") or "cairn"
        own_net = spec.network_mode is NetworkMode.NO_NETWORK
        await asyncio.to_thread(self._prepare_dirs)
        lowers = [layer.root] if layer else []
        if spec.snapshot:  # a step snapshot's tree is the topmost lower layer
            from cairn.sandbox.local.snapshot import snapshot_root

            try:
                lowers.insert(0, snapshot_root(spec.snapshot))
            except FileNotFoundError as exc:
                raise SandboxError(str(exc), kind=ErrorKind.START_FAILED) from None
        plan = root_plan(self._dir, lowers, own_net=own_net, privileged=support.privileged)
        self._overlay_rels = [op["rel"] for op in plan if op["op"] == "overlay"]
        self._ns = NamespaceRuntime(support)
        await self._ns.start(
            InitConfig(
                plan=plan,
                rootfs=self._dir / "rootfs",
                hostname=self._hostname,
                own_net=own_net,
                keep=spec.keep,
            )
        )
        marker.update(pid=self._ns.host_pid, pid_start_ticks=self._ns.start_ticks)
        write_marker(self._dir, marker)
        self._fs = SandboxFS(self._ns.root)
        await asyncio.to_thread(self._prepare_inside)

    def _prepare_dirs(self) -> None:
        assert self._dir is not None
        prepare_skeleton(self._dir / "skel")
        prepare_mask(self._dir / "mask", self._hostname)

    def _prepare_inside(self) -> None:
        """Fresh /logs folders, the working dir, and a ``docker_image`` environment's files."""
        fs = self._fs
        assert fs is not None
        for d in LOG_DIRS:
            fs.make_fresh_dir(d, 0o777)
        fs.remove(SOLUTION_DIR)  # as on docker: no /solution before the oracle's (design §11)
        self._workdir = self.spec.workdir or self._meta.workdir or "/"
        os.close(fs.open_dir(self._workdir, create=True))  # mkdir -p, as on docker
        if not _exists(fs, "/bin/bash"):
            self._shell = "/bin/sh"
        env_dir = self.spec.env_dir
        if (
            self.spec.docker_image
            and env_dir
            and not (env_dir / "Dockerfile").exists()
            and not self.spec.snapshot
        ):
            for entry in sorted(env_dir.iterdir()):
                if entry.name not in (*COMPOSE_FILES, "Dockerfile", ".dockerignore"):
                    fs.upload(entry, f"{self._workdir.rstrip('/')}/{entry.name}")

    async def stop(self) -> None:
        """Kill the init (and so every process inside), remove the sandbox folder.

        Idempotent; safe after a failed start. With ``spec.keep`` the sandbox keeps running
        and its folder stays (``cairn clean`` removes it later).
        """
        if self._state == "stopped":
            return
        started = self._state == "running"
        self._state = "stopped"
        if self._ns is not None:
            if self.spec.keep and started:
                self._ns.detach()
                return
            await self._ns.stop()
        if self._dir is not None:
            await asyncio.to_thread(remove_tree, self._dir)

    # ---- snapshots ------------------------------------------------------------------------
    async def snapshot(self, labels: Mapping[str, str]) -> SnapshotRef:
        """Copy the sandbox's upper folders into a snapshot folder (see
        :mod:`cairn.sandbox.local.snapshot`: reflinks where possible, files unchanged since this
        sandbox's previous snapshot hard linked to it). The sandbox is not paused.

        Returns:
            A :class:`SnapshotRef` whose ``ref`` is the snapshot folder and ``size_bytes`` the
            bytes copied.

        Raises:
            SandboxError: the copy failed (nothing is left behind).
        """
        self._running()
        assert self._dir is not None
        from cairn.sandbox.local.snapshot import make_snapshot

        t0 = time.monotonic()
        marker_labels = {**{k: str(v) for k, v in labels.items()}, "cairn.backend": "local"}
        try:
            base = None
            if self.spec.snapshot:  # started from a snapshot: its files are part of the state
                from cairn.sandbox.local.snapshot import snapshot_root

                base = snapshot_root(self.spec.snapshot)
            folder, copied = await asyncio.to_thread(
                make_snapshot, self._dir, self._overlay_rels, marker_labels, self._last_snapshot, base
            )
        except OSError as exc:
            raise SandboxError(f"snapshot failed: {exc}") from exc
        self._last_snapshot = folder
        return SnapshotRef(
            backend=self.name, ref=str(folder), size_bytes=copied, seconds=time.monotonic() - t0
        )

    @classmethod
    async def remove_snapshot(cls, ref: str) -> None:
        """Delete a local snapshot folder; one already gone is fine.

        Raises:
            SandboxError: ``ref`` is not a local snapshot folder.
        """
        from cairn.sandbox.local.snapshot import remove_local_snapshot

        try:
            await asyncio.to_thread(remove_local_snapshot, Path(ref))
        except ValueError as exc:
            raise SandboxError(str(exc)) from None

    def shell_argv(self, *, user: str | int | None = None, tty: bool = True) -> list[str]:
        """``nsenter`` into the sandbox's namespaces and root, then ``bash`` (or ``sh``) in the
        working dir with the sandbox's environment (not the caller's)."""
        ns, _ = self._running()
        resolved = self.resolve_user(user)
        uid, gid, _groups, home = resolved if resolved is not None else (0, 0, [], "/root")
        env = {
            "PATH": DEFAULT_PATH,
            "HOSTNAME": self._hostname,
            "HOME": home,
            "TERM": os.environ.get("TERM", "xterm"),
            **self._meta.env,
            **self.spec.env,
        }
        argv = [
            "nsenter",
            "-t",
            str(ns.host_pid),
            "-U",
            "-m",
            "-p",
            "-i",
            "-u",
            "--preserve-credentials" if not ns.support.privileged else "-S0",
            "-r",
            f"--wdns={self._workdir}",
        ]
        if self.spec.network_mode is NetworkMode.NO_NETWORK:
            argv.insert(5, "-n")
        if ns.support.privileged:
            argv[argv.index("-S0")] = f"-S{uid}"
            argv.insert(argv.index(f"-S{uid}") + 1, f"-G{gid}")
        return [*argv, "env", "-i", *[f"{k}={v}" for k, v in env.items()], self._shell]

    # ---- operations -------------------------------------------------------------------
    @property
    def workdir(self) -> str:
        """``spec.workdir``, else the Dockerfile WORKDIR, else ``/``."""
        return self._workdir

    @property
    def info(self) -> dict[str, str | None]:
        """Results record the backend, the layer (as image id) and the kernel release."""
        return {
            "backend": self.name,
            "image_id": self._meta.layer_id,
            "engine_version": f"linux {os.uname().release}",
        }

    def _running(self) -> tuple[NamespaceRuntime, SandboxFS]:
        if self._state != "running" or self._ns is None or self._fs is None:
            raise SandboxError(f"local sandbox is not running (state {self._state})")
        return self._ns, self._fs

    def resolve_user(self, user: str | int | None) -> tuple[int, int, list[int], str] | None:
        """Resolve a user name or uid (``None``: the image's USER, else root) against the
        sandbox's ``/etc/passwd``; see :func:`~cairn.sandbox.local.files.resolve_user`."""
        _, fs = self._running()
        return resolve_user(fs, user if user is not None else self._meta.user)

    async def _exec(self, req: ExecRequest) -> ExecResult:
        """Run a command in the sandbox (see ``Sandbox.exec``); an unknown user gives exit 126.

        Raises:
            SandboxError: the sandbox is not running. SandboxLostError: its init is gone.
        """
        ns, _fs = self._running()
        argv, user, cwd, env = req.argv, req.user, req.cwd, req.env
        resolved = self.resolve_user(user)
        if resolved is None:
            name = user if user is not None else self._meta.user
            return ExecResult(
                exit_code=126, stderr=f"unable to find user {name}: no matching entries in passwd file\n"
            )
        uid, gid, groups, home = resolved
        if not ns.support.privileged and (uid, gid) != (0, 0):
            return ExecResult(
                exit_code=126,
                stderr=(
                    f"cairn: user {user!r} (uid {uid}) cannot run here: the local backend runs in "
                    "an unprivileged user namespace where only root is mapped; run cairn as root "
                    "for other users\n"
                ),
            )
        full_env = {
            "PATH": DEFAULT_PATH,
            "HOSTNAME": self._hostname,
            "HOME": home,
            **self._meta.env,
            **self.spec.env,
            **(env or {}),
        }
        return await ns.run(
            argv,
            uid=uid,
            gid=gid,
            groups=groups,
            cwd=cwd or self._workdir,
            env=full_env,
            timeout_sec=req.timeout_sec,
            max_output_bytes=req.max_output_bytes,
        )

    async def upload(self, host_path: Path, sandbox_path: str) -> None:
        """Copy a host file or folder into the sandbox (see ``Sandbox.upload``).

        Raises:
            FileNotFoundError: ``host_path`` does not exist. SandboxError: the copy failed.
        """
        _, fs = self._running()
        if not os.path.lexists(host_path):
            raise FileNotFoundError(f"no such host path: {host_path}")
        try:
            await asyncio.to_thread(fs.upload, Path(host_path), sandbox_path)
        except OSError as exc:  # the docker backend's kind for the same failure
            raise SandboxError(
                f"upload to {sandbox_path} failed: {exc}", kind=ErrorKind.TRANSFER_FAILED
            ) from exc

    async def download(self, sandbox_path: str, host_path: Path) -> None:
        """Copy a sandbox file or folder to the host (see ``Sandbox.download``).

        Raises:
            FileNotFoundError: ``sandbox_path`` does not exist. SandboxError: the copy failed.
        """
        _, fs = self._running()
        try:
            await asyncio.to_thread(fs.download, sandbox_path, Path(host_path))
        except (FileNotFoundError, NotADirectoryError):
            raise FileNotFoundError(f"no such path in the sandbox: {sandbox_path}") from None
        except OSError as exc:
            raise SandboxError(
                f"download of {sandbox_path} failed: {exc}", kind=ErrorKind.TRANSFER_FAILED
            ) from exc

    @property
    def netns_pid(self) -> int | None:
        """The host pid of the sandbox's init, whose network namespace is the sandbox's (the
        model relay puts its listener there under ``no-network``, docs/relay.md); ``None``
        before start."""
        return self._ns.host_pid if self._ns is not None else None

    @property
    def host_clock(self) -> bool:
        """Always: a local sandbox runs on this machine's kernel (see ``Sandbox``)."""
        return True

    async def processes(self) -> list[ProcessInfo]:
        """The sandbox's processes as its pid namespace sees them (see ``Sandbox``).

        Raises:
            SandboxError: the sandbox is not running or its processes cannot be read.
        """
        ns, _ = self._running()
        return ns.processes()  # a few /proc reads: cheaper inline than a thread hop

    async def kill_processes(self, pids: Sequence[ProcessInfo]) -> None:
        """SIGKILL processes by identity; pid 1 is never killed (see ``Sandbox``).

        Raises:
            SandboxError: the sandbox is not running.
        """
        ns, _ = self._running()
        ns.kill(list(pids))

    async def kill_since(
        self, after_tick: int | None, spare: Sequence[ProcessInfo] = ()
    ) -> tuple[list[ProcessInfo], list[ProcessInfo]]:
        """Kill every process started since a baseline, from the host: each new one is
        stopped (SIGSTOP) and the namespace listed again until none is new, then all are
        SIGKILLed (see :meth:`Sandbox.kill_since`).

        Raises:
            SandboxError: the sandbox is not running.
        """
        ns, _ = self._running()
        new = started_since(after_tick, spare)
        stopped: dict[tuple[int, int], ProcessInfo] = {}
        for _ in range(KILL_STOP_ROUNDS):
            found = [p for p in ns.processes() if new(p) and p.key not in stopped]
            if not found:
                break
            ns.freeze(found)
            stopped.update((p.key, p) for p in found)
        ns.kill(list(stopped.values()))
        left = [p for p in ns.processes() if new(p) and p.key not in stopped]
        return list(stopped.values()), left


def _exists(fs: SandboxFS, path: str) -> bool:
    try:
        fs.lstat(path)
    except OSError:
        return False
    return True


# ---- cairn clean ------------------------------------------------------------------------
def find_local_sandboxes() -> list[tuple[Path, dict]]:
    """Every local sandbox folder on this host with its marker (``cairn.json``).

    Returns:
        ``(folder, marker)`` pairs; the marker holds ``job_id``, ``trial_id``, ``job_dir``,
        ``created_at``, ``pid`` (the init's host pid, or None) and ``pid_start_ticks``. A
        folder whose marker cannot be read is listed with ``{"unreadable": "<reason>"}``.
    """
    return list_state_folders(sandboxes_dir(), read_marker)


def remove_local_sandbox(path: Path) -> None:
    """Remove one local sandbox: SIGKILL its init if it still runs (pid and start time from
    the marker), then delete its folder. Never raises for what is already gone.

    Raises:
        ValueError: ``path`` is not inside the local sandboxes folder.
    """
    path = Path(path)
    if path.parent.resolve() != sandboxes_dir().resolve():
        raise ValueError(f"{path} is not a local sandbox folder")
    with contextlib.suppress(OSError, ValueError):
        marker = read_marker(path)
        kill_init(marker.get("pid"), marker.get("pid_start_ticks"))
    remove_tree(path)


def find_local_layers() -> list[tuple[Path, dict]]:
    """Every cached Dockerfile layer of the local backend (``cairn clean --images``).

    Returns:
        ``(folder, info)`` pairs; ``info`` is the layer's ``meta.json`` (``key``, ``meta``,
        ``created_at``), ``{"replaced": True}`` for a layer set aside by ``--force-build``, or
        ``{"unreadable": "<reason>"}``. Half-built ``.build-*`` folders of crashed builds
        are listed with ``{"partial": True}``.
    """

    def info(d: Path) -> dict | None:
        if d.name.startswith(".old-"):
            return {"replaced": True}
        if d.name.startswith(".build-"):
            return {"partial": True}
        if d.name.startswith("."):
            return None
        return json.loads((d / "meta.json").read_text(encoding="utf-8"))

    return list_state_folders(layers_dir(), info)


def remove_local_layer(path: Path) -> None:
    """Delete one cached layer folder (and its lock file). Sandboxes already running on it
    keep working only if they are stopped first: call this for left-overs only.

    Raises:
        ValueError: ``path`` is not inside the layers folder.
    """
    path = Path(path)
    if path.parent.resolve() != layers_dir().resolve():
        raise ValueError(f"{path} is not a local layer folder")
    remove_tree(path)
    with contextlib.suppress(FileNotFoundError):
        (path.parent / f".{path.name}.lock").unlink()
