"""The sandbox interface (design §3): one abstract class, one module per backend.

Agents, the verifier and the trial engine know only :class:`Sandbox`; a backend module
(``cairn.sandbox.docker.backend``, ``cairn.sandbox.local.backend``) implements it and is looked up by name
through :func:`cairn.sandbox.get_backend`, so the orchestrator never imports ``docker``.

Every operation is async. A sandbox is used as an async context manager whose ``stop()`` always
runs, shielded from cancellation, also when ``start()`` failed halfway (Inspect's lifecycle).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, ClassVar

from cairn._util.aio import shielded
from cairn.layout import LOG_DIRS as _LOG_DIRS
from cairn.netpolicy import NetworkMode, NetworkPolicy  # noqa: F401 - NetworkMode re-exported
from cairn.sandbox.caches import SandboxCaches

if TYPE_CHECKING:  # pragma: no cover
    from cairn.sandbox.pools import ResourcePool

DEFAULT_MAX_OUTPUT_BYTES = 10 * 1024 * 1024
"""Default tail kept per output stream of one exec: 10 MiB."""

LOG_DIRS = _LOG_DIRS
"""Folders every sandbox creates empty at start, writable by the agent user (design §3.1)."""


@dataclass(frozen=True)
class ExecResult:
    """The result of one :meth:`Sandbox.exec`.

    Attributes:
        exit_code: the process's exit status; ``None`` when it timed out and was killed, or
            when the sandbox could not report one. A signal death is ``128 + signum``.
        stdout: the tail of standard output, decoded as UTF-8 with replacement.
        stderr: the tail of standard error, decoded likewise.
        timed_out: whether ``timeout_sec`` ran out (the whole process tree was then killed).
        elapsed_sec: wall time of the exec in seconds.
        stdout_truncated: whether output was dropped from the front of stdout.
        stderr_truncated: likewise for stderr.
    """

    exit_code: int | None
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    elapsed_sec: float = 0.0
    stdout_truncated: bool = False
    stderr_truncated: bool = False

    @property
    def ok(self) -> bool:
        """True when the command exited 0 without timing out."""
        return self.exit_code == 0 and not self.timed_out


@dataclass(frozen=True)
class FoldedExec:
    """What one :meth:`Sandbox.exec_collect` did.

    Attributes:
        result: the command's :class:`ExecResult` (its own stdout and stderr only).
        collected: the folder is on the host, copied as :meth:`Sandbox.download` copies it;
            otherwise the caller downloads it.
        cleaned: the clean-up command ran as root after the copy; otherwise the caller runs it.
        uncertain: nothing was copied, and the clean-up may have run all the same (the
            engine lost the end of the exec's output): the caller's download of the folder
            finding it empty is a lost copy, not a command that wrote nothing.
    """

    result: ExecResult
    collected: bool = False
    cleaned: bool = False
    uncertain: bool = False


@dataclass(frozen=True)
class ExecRequest:
    """One :meth:`Sandbox.exec` call as its backend gets it (the arguments of ``exec``, the
    command already an argv: a shell string became ``[shell, "-c", string]``).

    Attributes:
        argv: the program and its arguments (never empty).
        user: user name or uid; ``None`` = image default.
        cwd: working directory; ``None`` = the sandbox's workdir.
        env: extra environment variables on top of ``spec.env``.
        timeout_sec: wall-clock bound in seconds (``None``: none).
        max_output_bytes: tail kept per stream, in bytes.
    """

    argv: list[str]
    user: str | int | None = None
    cwd: str | None = None
    env: dict[str, str] | None = None
    timeout_sec: float | None = None
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES


def started_since(after_tick: int | None, spare: Sequence[ProcessInfo]) -> Callable[[ProcessInfo], bool]:
    """Whether a process is new since a baseline (:meth:`Sandbox.kill_since`'s rule): never
    PID 1; with ``after_tick``, started after it; else not in ``spare`` by key."""
    keys = {q.key for q in spare}

    def new(p: ProcessInfo) -> bool:
        if p.pid == 1:
            return False
        return p.start_ticks > after_tick if after_tick is not None else p.key not in keys

    return new


KILL_ROUNDS = 50
"""The most list-and-kill rounds of :meth:`Sandbox.kill_since`'s default."""


@dataclass(frozen=True)
class ProcessInfo:
    """One process inside a sandbox, as seen from the sandbox's own pid namespace.

    ``(pid, start_ticks)`` identifies a process even when a pid is reused.

    Attributes:
        pid: the pid inside the sandbox.
        ppid: the parent's pid inside the sandbox.
        start_ticks: field 22 of ``/proc/<pid>/stat`` (clock ticks since boot).
        cmdline: the command line, arguments joined by spaces ("" for kernel threads).
        uid: the process's user id (docker: the real uid from ``/proc/<pid>/status``; local:
            the owner of ``/proc/<pid>``, its effective uid), or ``None`` when unreadable.
    """

    pid: int
    ppid: int
    start_ticks: int
    cmdline: str
    uid: int | None = None

    @property
    def key(self) -> tuple[int, int]:
        """``(pid, start_ticks)``: a process identity that survives pid reuse."""
        return (self.pid, self.start_ticks)


@dataclass(frozen=True)
class UploadItem:
    """One entry of :meth:`Sandbox.upload_many`.

    Attributes:
        host_path: a host file or folder (a folder's contents land in ``sandbox_path``).
        sandbox_path: the absolute destination inside the sandbox.
        world_writable: make everything uploaded readable and writable by every user, folders
            and executables searchable (``chmod -R a+rwX``), the destination folder too.
        crlf: names (relative to ``sandbox_path``) of files whose CRLF line endings are
            normalised to LF in the uploaded copy.
    """

    host_path: Path
    sandbox_path: str
    world_writable: bool = False
    crlf: tuple[str, ...] = ()


def host_boot_clock() -> tuple[float, int]:
    """The host's ``CLOCK_BOOTTIME`` now, in seconds, and the clock-tick rate (``SC_CLK_TCK``,
    ticks per second): :attr:`ProcessInfo.start_ticks` count ticks of this clock when
    :attr:`Sandbox.boot_clock` holds."""
    import os
    import time

    return time.clock_gettime(time.CLOCK_BOOTTIME), os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class SandboxInfo:
    """What results record about a running sandbox.

    Attributes:
        backend: the backend's registry name.
        image_id: the image (docker) or layer (local) the sandbox runs, if known.
        engine_version: the engine behind it (Docker's version, ``linux <release>``), if known.
        extra: backend-specific facts (``container_id``, ``compose_project``, …).
    """

    backend: str
    image_id: str | None = None
    engine_version: str | None = None
    extra: Mapping[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class SandboxConnection:
    """How a person (``cairn shell``, the ``--keep-sandbox`` line) gets into a running sandbox.

    Attributes:
        type: the backend's name.
        hint: the line to tell a person (``docker exec -it <id12> bash``).
        argv: a host command line that opens a shell inside (empty when the backend has none).
        container: the container id, for container backends.
    """

    type: str
    hint: str
    argv: tuple[str, ...] = ()
    container: str | None = None


@dataclass(frozen=True)
class Capabilities:
    """What a backend can enforce; checked before any trial is queued (docs/architecture.md, habit 7).

    Attributes:
        network_modes: the network modes the backend enforces.
        cpu_limit: whether ``cpus`` is applied.
        memory_limit: whether ``memory_mb`` is applied.
        storage_limit: whether ``storage_mb`` is applied.
        gpus: whether ``gpus > 0`` can be given to a sandbox.
        compose: whether multi-container (compose) environments run.
        dockerfile: ``"full"`` (any Dockerfile) or ``"subset"`` (design §3.2's subset).
        snapshot: whether :meth:`Sandbox.snapshot` works and a sandbox can start from a
            snapshot (:attr:`SandboxSpec.snapshot`).
        gateway: whether the backend filters egress per phase (allowlists, model hosts of
            in-sandbox agents, switching between phases whose policies differ).
        network_hint: what to tell a user whose network policy this backend cannot enforce.
        read_only_mounts: whether :attr:`SandboxSpec.mounts` (host folders bound read-only)
            are applied; without it a caller uploads instead.
    """

    network_modes: frozenset[NetworkMode]
    cpu_limit: bool
    memory_limit: bool
    storage_limit: bool = False
    gpus: bool = False
    compose: bool = False
    dockerfile: str = "full"
    snapshot: bool = False
    gateway: bool = False
    network_hint: str = ""
    read_only_mounts: bool = False


SNAPSHOT_LABEL = "cairn.snapshot"
"""Docker label (and local marker key) that marks a resource as a step snapshot."""


@dataclass(frozen=True)
class SnapshotRef:
    """A snapshot of a sandbox's files (not its processes), made by :meth:`Sandbox.snapshot`.

    Attributes:
        backend: the backend that made it (``docker``, ``local``); a snapshot only restores on
            the backend that made it.
        ref: what the backend needs to start from it: a Docker image id (``sha256:…``) or the
            absolute path of a local snapshot folder.
        size_bytes: disk the snapshot adds, in bytes (docker: the committed layer; local: the
            bytes copied, hard-linked files counted 0), or ``None`` when unknown.
        seconds: wall time taken to make it, seconds.
    """

    backend: str
    ref: str
    size_bytes: int | None = None
    seconds: float = 0.0


@dataclass(frozen=True)
class SandboxSpec:
    """Everything a backend needs to build and start one sandbox; a frozen value.

    Attributes:
        env_dir: the task's ``environment/`` folder (build context), or ``None``.
        docker_image: a prebuilt image to use as is (``[environment].docker_image``).
        workdir: ``[environment].workdir``; ``None`` keeps the image WORKDIR.
        cpus: CPU limit (cores), or ``None``.
        memory_mb: memory limit in MiB, or ``None``.
        storage_mb: disk limit in MiB, or ``None``.
        gpus: GPUs requested (0 = none).
        network_mode: the environment's network mode (the policy the sandbox starts with).
        allowed_hosts: the environment's allowlist (``network_mode = "allowlist"``).
        network_phases: every other policy the trial will switch the sandbox into
            (:meth:`Sandbox.set_network`): each step's agent and verifier phase. A backend
            plans its wiring from these before it starts.
        add_hosts: ``(name, address)`` pairs the egress gateway resolves itself (like
            ``docker run --add-host``), e.g. a local model server or a test host.
        env: resolved environment variables set in every exec (``[environment].env``).
        build_timeout_sec: bound on build + start, seconds (already multiplied).
        force_build: rebuild even when an image with the content hash exists.
        job_id: owning job id (label ``cairn.job``).
        trial_id: owning trial id (label ``cairn.trial``).
        env_hash: content hash of ``env_dir`` (label ``cairn.env_hash``; image tag).
        name: a human hint for resource names (task slug).
        keep: leave the sandbox running on stop (``--keep-sandbox``).
        job_dir: absolute path of the owning job's folder (label ``cairn.job_dir``), so
            ``cairn clean`` can tell whether the job is running (its lock is held); ``None``
            for sandboxes outside a job (then the owning process decides).
        snapshot: start from this snapshot's files (:attr:`SnapshotRef.ref` of a snapshot made
            by the same backend) instead of the environment's fresh image; ``None`` starts
            fresh. The environment (``env_dir``, ``docker_image``) still supplies the image
            config (workdir, env, user).
        mounts: ``(host_folder, sandbox_path)`` pairs bound read-only into the sandbox (an
            agent's prepared runtime); only on backends with ``read_only_mounts``.
        pool: the running job's pool of reusable resources (:mod:`cairn.sandbox.pools`), or
            ``None`` (a trial run alone, a Ray worker): then the backend removes what it
            made. Not part of the spec's equality (a pre-started sandbox matches without it).
        caches: the backend memos and build locks shared by the job's sandboxes
            (:mod:`cairn.sandbox.caches`; the job's own, else a fresh one per spec, kept by
            every spec derived with :func:`dataclasses.replace`). Not part of the equality.
    """

    env_dir: Path | None = None
    docker_image: str | None = None
    workdir: str | None = None
    cpus: float | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None
    gpus: int = 0
    network_mode: NetworkMode = NetworkMode.PUBLIC
    allowed_hosts: tuple[str, ...] = ()
    network_phases: tuple[NetworkPolicy, ...] = ()
    add_hosts: tuple[tuple[str, str], ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    build_timeout_sec: float = 600.0
    force_build: bool = False
    job_id: str = "adhoc"
    trial_id: str = "adhoc"
    env_hash: str = ""
    name: str = "sandbox"
    keep: bool = False
    job_dir: Path | None = None
    snapshot: str | None = None
    mounts: tuple[tuple[str, str], ...] = ()
    pool: ResourcePool[object] | None = field(default=None, compare=False, repr=False)
    caches: SandboxCaches = field(default_factory=SandboxCaches, compare=False, repr=False)

    @property
    def network_policy(self) -> NetworkPolicy:
        """The policy the sandbox starts with (the environment's)."""
        hosts = self.allowed_hosts if self.network_mode is NetworkMode.ALLOWLIST else ()
        return NetworkPolicy(self.network_mode, tuple(hosts))

    @property
    def network_policies(self) -> tuple[NetworkPolicy, ...]:
        """The start policy and every phase policy, reduced (:meth:`NetworkPolicy.effective`)."""
        out = [self.network_policy.effective()]
        for p in self.network_phases:
            if p.effective() not in out:
                out.append(p.effective())
        return tuple(out)


@dataclass(frozen=True)
class ServiceExit:
    """A start-up service (the image ENTRYPOINT) that has ended.

    Attributes:
        exit_code: its exit status (128+n when killed by signal n).
        log_tail: the last lines of the sandbox's output (the service's stdout/stderr).
        service: the compose service that ended, when it is not ``main``'s own ENTRYPOINT
            (``None`` for the image ENTRYPOINT of a single-container sandbox or of ``main``).
    """

    exit_code: int
    log_tail: str = ""
    service: str | None = None


@dataclass(frozen=True)
class SandboxEnd:
    """A sandbox that stopped running while in use although cairn did not stop it (its main
    process died, or it was killed or removed from outside).

    Attributes:
        reason: one line a user reads, e.g. "its container exited (exit 137): the sandbox ran
            out of memory (memory_mb = 64)".
        exit_code: the main process's exit status (128+n when killed by signal n), if known.
        oom_killed: the kernel's out-of-memory killer acted inside the sandbox.
        from_outside: the sandbox did not end by its own doing: the engine killed or removed
            it on someone else's order (``docker kill``, ``docker stop``, ``docker rm -f`` by
            an operator or another program). The trial then records an infra error
            (``sandbox_lost``, retried), never the candidate's (design §6).
    """

    reason: str
    exit_code: int | None = None
    oom_killed: bool = False
    from_outside: bool = False

    def detail(self) -> dict[str, object]:
        """The facts for an error's ``detail``."""
        return {
            "sandbox_exit_code": self.exit_code,
            "oom_killed": self.oom_killed,
            "from_outside": self.from_outside,
        }


class Sandbox(ABC):
    """One running sandbox: a container, a namespace tree, or a compose project.

    Paths inside the sandbox are POSIX strings. ``user`` is a name or uid; ``None`` means the
    image's default user. ``cwd`` ``None`` means the working dir (:attr:`workdir`).

    Usage::

        async with get_backend("docker")(spec) as sb:
            r = await sb.exec("echo hi")
    """

    name: ClassVar[str]
    """The backend's registry name (``docker``, ``local``)."""

    capabilities: ClassVar[Capabilities]

    known_conformance_gaps: ClassVar[frozenset[str]] = frozenset()
    """Names of conformance checks (:mod:`cairn.sandbox.conformance`) this backend knowingly
    fails; the suite skips and lists them (design §3.4)."""

    @classmethod
    def engine_version(cls) -> str | None:
        """The version of the engine behind this backend (recorded in job.json), or ``None``
        when there is none or it does not answer. Never raises."""
        return None

    @classmethod
    def host_address(cls) -> str | None:
        """This machine's address as this backend's sandboxes reach it (where a host service
        such as the job's model relay listens for them), or ``None`` when the host's loopback
        serves (a shared host network, or a per-sandbox listener placed in the sandbox's own
        network namespace). Blocking (may ask the engine); never ``0.0.0.0``.

        Raises:
            UsageError: the backend's sandboxes cannot reach this machine (a remote engine).
        """
        return None

    @classmethod
    def host_problem(cls) -> str | None:
        """Why this machine cannot run the backend at all (whatever the environment), or
        ``None``; a cheap probe that never starts a sandbox. Never raises."""
        return None

    def __init__(self, spec: SandboxSpec) -> None:
        self.spec = spec

    # ---- capability check -------------------------------------------------------------
    @classmethod
    def check(cls, spec: SandboxSpec) -> list[str]:
        """Check that this backend can run ``spec``, before anything starts.

        Returns:
            Warnings for requests the backend cannot apply but may ignore (``storage_mb``).

        Raises:
            UnsupportedError: the backend cannot run it (a network mode it cannot enforce,
                ``gpus > 0`` without GPU support, a compose file on a backend without compose).
        """
        from cairn.errors import UnsupportedError

        caps = cls.capabilities
        warnings: list[str] = []
        hint = f" ({caps.network_hint})" if caps.network_hint else ""
        policies = spec.network_policies
        for policy in policies:
            if policy.mode not in caps.network_modes:
                raise UnsupportedError(
                    f"unsupported network mode {policy.mode.value!r} on backend {cls.name!r}{hint}"
                )
            if policy.needs_gateway and not caps.gateway:
                raise UnsupportedError(
                    f"backend {cls.name!r} cannot enforce the network policy {policy.describe()}{hint}"
                )
        if len(policies) > 1 and not caps.gateway:
            raise UnsupportedError(
                f"backend {cls.name!r} cannot switch the network between phases "
                f"({' / '.join(p.describe() for p in policies)}){hint}"
            )
        if spec.mounts and not caps.read_only_mounts:
            raise UnsupportedError(
                f"backend {cls.name!r} cannot bind host folders read-only into a sandbox (mounts)"
            )
        if spec.gpus and not caps.gpus:
            raise UnsupportedError(f"backend {cls.name!r} cannot give GPUs to a sandbox (gpus = {spec.gpus})")
        if spec.storage_mb and not caps.storage_limit:
            warnings.append(
                f"backend {cls.name!r} cannot apply storage_mb = {spec.storage_mb}; "
                "the sandbox runs without a disk limit"
            )
        if spec.cpus and not caps.cpu_limit:
            warnings.append(f"backend {cls.name!r} cannot apply cpus = {spec.cpus}")
        if spec.memory_mb and not caps.memory_limit:
            warnings.append(f"backend {cls.name!r} cannot apply memory_mb = {spec.memory_mb}")
        return warnings

    # ---- lifecycle ------------------------------------------------------------------
    @abstractmethod
    async def start(self) -> None:
        """Build or reuse the image and start the sandbox; create fresh ``/logs/*`` folders.

        Raises:
            BuildError: ``build_failed``, ``build_timeout`` or ``image_not_found``.
            SandboxError: kind ``start_failed`` when the sandbox cannot start.
            SandboxLostError: the engine does not answer.
        """

    @abstractmethod
    async def stop(self) -> None:
        """Remove everything this sandbox created (containers, networks, folders).

        Safe to call after a failed or partial ``start()`` and more than once. Never raises for
        resources already gone. With ``spec.keep`` it leaves the sandbox running.
        """

    async def __aenter__(self) -> Sandbox:
        try:
            await self.start()
        except BaseException:
            await shielded(self.stop())
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await shielded(self.stop())

    # ---- network phases ---------------------------------------------------------------
    async def set_network(self, policy: NetworkPolicy, *, phase: str) -> None:
        """Switch the sandbox to ``policy`` for ``phase`` (``agent``, ``verifier``, ``setup``…).

        A backend with :attr:`Capabilities.gateway` applies it at once and closes every
        connection opened before (a phase never inherits an earlier phase's openings). The
        default accepts only policies that admit what the start policy admits (nothing to do).

        Raises:
            UnsupportedError: the backend cannot switch to ``policy`` (:meth:`check` refuses
                such specs before start, so this means the caller skipped it).
            SandboxError: the switch failed.
        """
        from cairn.errors import UnsupportedError

        if policy.effective() != self.spec.network_policy.effective():
            raise UnsupportedError(f"backend {self.name!r} cannot switch the network to {policy.describe()}")

    async def service_exit(self) -> ServiceExit | None:
        """The start-up service's end, if the image ENTRYPOINT the sandbox started has ended
        (or, for a compose project, another service has exited non-zero since start).

        Returns:
            ``None`` while it runs, when the image has no ENTRYPOINT (or a keep-alive one), or
            on a backend that starts no services; else its :class:`ServiceExit`.
        """
        return None

    async def ended(self) -> SandboxEnd | None:
        """Whether the sandbox has stopped running although cairn did not stop it, and why
        (asked after an operation failed, to say so in the error: an out-of-memory kill of its
        main process; a kill or removal from outside, which makes the failure infra).

        Returns:
            ``None`` while it runs, once :meth:`stop` was called, when the engine cannot tell,
            or on a backend that does not track it; else its :class:`SandboxEnd`.
        """
        return None

    async def network_records(self) -> list[dict[str, object]]:
        """The connection records of the sandbox's egress gateway not returned before: one dict
        per request (``time``, ``phase``, ``conn``, ``request``, ``peer``, ``method``,
        ``host``, ``port``, ``address``, ``verdict``, ``reason``, ``cut``, ``bytes_out``,
        ``bytes_in``; docs/network.md "The record"); ``[]`` without a gateway.

        It ends a phase: the gateway first takes a closed policy (``no-network``, phase
        ``closed``), so every connection still open is cut and recorded with its bytes, and
        nothing reaches out until the next :meth:`set_network` (the trial calls this after
        each step, so its last call holds every connection of the trial)."""
        return []

    # ---- services -------------------------------------------------------------------
    async def for_service(self, service: str) -> Sandbox:
        """The sandbox view of one compose service (Harbor 0.26's ``service_exec``): exec and
        download aimed at that service's container. ``main`` is this sandbox.

        Raises:
            UnsupportedError: the backend runs no services, or the project has no such service.
        """
        if service == "main":
            return self
        from cairn.errors import UnsupportedError

        raise UnsupportedError(
            f"backend {self.name!r} runs no compose services (asked for service {service!r})"
        )

    # ---- operations -------------------------------------------------------------------
    @property
    @abstractmethod
    def workdir(self) -> str:
        """The working dir: ``spec.workdir``, else the image WORKDIR, else ``/``."""

    @property
    def info(self) -> dict[str, str | None]:
        """What results record about this sandbox: ``backend``, ``image_id``, ``engine_version``."""
        return {"backend": self.name, "image_id": None, "engine_version": None}

    def sandbox_info(self) -> SandboxInfo:
        """:attr:`info` as a typed :class:`SandboxInfo`."""
        raw = dict(self.info)
        return SandboxInfo(
            backend=str(raw.pop("backend", None) or self.name),
            image_id=raw.pop("image_id", None),
            engine_version=raw.pop("engine_version", None),
            extra=raw,
        )

    def connection(self, *, user: str | int | None = None) -> SandboxConnection:
        """How a person gets into this running sandbox (the default: :meth:`shell_argv`, when
        the backend has one, and a hint naming the backend and its :attr:`info`).

        Args:
            user: user name or uid; ``None`` = the image default.
        """
        from cairn.errors import SandboxError, UnsupportedError

        try:
            argv = tuple(self.shell_argv(user=user))
        except (UnsupportedError, SandboxError):
            argv = ()
        return SandboxConnection(type=self.name, hint=f"{self.name} sandbox {self.info}", argv=argv)

    @classmethod
    async def engine_answers(cls, timeout_sec: float) -> bool:
        """Whether this backend's engine answers a ping within ``timeout_sec`` seconds (the job
        asks, with backoff, after a lost sandbox and before its retry). Backends without an
        engine answer at once. Never raises."""
        return True

    async def exec(
        self,
        command: str | Sequence[str],
        *,
        user: str | int | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: float | None = None,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    ) -> ExecResult:
        """Run a command inside the sandbox.

        Args:
            command: an argv list, or one shell string run with ``bash -c`` (``sh -c`` when
                the image has no bash).
            user: user name or uid; ``None`` = image default.
            cwd: working directory; ``None`` = :attr:`workdir`.
            env: extra environment variables on top of ``spec.env``.
            timeout_sec: wall-clock bound in seconds; on expiry the exec's whole process tree
                inside the sandbox is killed (also double-forked, setsid and nohup children)
                and the result has ``timed_out=True``.
            max_output_bytes: tail kept per stream, in bytes.

        Returns:
            The :class:`ExecResult`.

        Raises:
            ValueError: ``command`` is an empty argv.
            SandboxError: the exec could not be run (sandbox gone or broken).
            SandboxLostError: the engine does not answer.
        """
        if isinstance(command, str):
            argv = [self._shell, "-c", command]
        else:
            argv = [str(a) for a in command]
            if not argv:
                raise ValueError("empty argv")
        return await self._exec(ExecRequest(argv, user, cwd, env, timeout_sec, max_output_bytes))

    _shell: str = "sh"
    """The shell a string command runs with (a backend finds bash at start)."""

    async def exec_collect(
        self,
        argv: Sequence[str],
        *,
        collect: str,
        into: Path,
        then_root: str | None = None,
        unless_exit: tuple[int, ...] = (),
        user: str | int | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: float | None = None,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    ) -> FoldedExec:
        """Run ``argv`` as :meth:`exec` does, then, in the same engine round trip where the
        backend can, copy the folder ``collect`` to ``into`` as :meth:`download` does and run
        ``then_root`` as root (the verifier's test.sh, its ``/logs/verifier`` and the
        clean-up between steps: one exec on docker, :mod:`cairn.sandbox.docker.fold`).

        Whatever the backend did not do is the caller's: it downloads when ``collected`` is
        false and runs ``then_root`` when ``cleaned`` is false, exactly as without the fold.
        The default folds nothing (the local backend's calls are no engine round trips).

        Args:
            argv: the command (never empty).
            collect: the absolute sandbox folder the command writes into.
            into: the host folder it is copied to.
            then_root: a shell command run as root once the folder is copied (``None``: none).
            unless_exit: exit codes of the command after which nothing is copied nor run
                (the caller decides what follows).
            user: as :meth:`exec`.
            cwd: as :meth:`exec`.
            env: as :meth:`exec`.
            timeout_sec: as :meth:`exec`, the bound on the command.
            max_output_bytes: as :meth:`exec`, the tail kept of the command's streams.

        Returns:
            The :class:`FoldedExec`.

        Raises:
            ValueError: ``argv`` is empty.
            SandboxError: the exec could not be run, or the folder came back unsafe (as
                :meth:`download` raises).
            SandboxLostError: the engine does not answer.
        """
        result = await self.exec(
            list(argv),
            user=user,
            cwd=cwd,
            env=env,
            timeout_sec=timeout_sec,
            max_output_bytes=max_output_bytes,
        )
        return FoldedExec(result)

    @abstractmethod
    async def _exec(self, req: ExecRequest) -> ExecResult:
        """Run ``req.argv`` inside the sandbox: the backend's half of :meth:`exec` (same
        meaning of every field, same errors)."""

    @abstractmethod
    async def upload(self, host_path: Path, sandbox_path: str) -> None:
        """Copy a host file or folder to ``sandbox_path`` (created or replaced; a folder's
        *contents* land in ``sandbox_path``, merged over what is there).

        Streams (bounded memory); preserves names with spaces/quotes, modes, and symlinks as
        links. Files are owned by root unless the caller chowns them.

        Raises:
            FileNotFoundError: ``host_path`` does not exist.
            SandboxError: the transfer failed.
        """

    async def upload_many(self, items: Sequence[UploadItem]) -> None:
        """Upload several host files or folders as one transfer (one engine round trip where
        the backend can), each item as :meth:`upload` would, in order (later items merge over
        earlier ones).

        The default does one :meth:`upload` per item, then one root exec for the items'
        ``world_writable`` and ``crlf`` fix-ups; the docker backend sends one archive with
        the modes and line endings already applied.

        Raises:
            FileNotFoundError: a ``host_path`` does not exist.
            SandboxError: the transfer failed.
        """
        import shlex

        fix: list[str] = []
        for it in items:
            await self.upload(it.host_path, it.sandbox_path)
            if it.world_writable:
                fix.append(f"chmod -R a+rwX {shlex.quote(it.sandbox_path)}")
            for name in it.crlf:
                fix.append(f"sed -i 's/\\r$//' {shlex.quote(sandbox_path_join(it.sandbox_path, name))}")
        if fix:
            # sh, not the exec's default bash: an agent may have removed bash, and the
            # verifier that follows is what reports that (design §6 sandbox_unusable)
            r = await self.exec(["/bin/sh", "-c", " && ".join(fix)], user="root")
            if not r.ok:
                from cairn.errors import ErrorKind, SandboxError

                raise SandboxError(
                    f"upload fix-ups failed (exit {r.exit_code}): {r.stderr.strip()[-300:]}",
                    kind=ErrorKind.TRANSFER_FAILED,
                )

    @property
    def boot_clock(self) -> bool:
        """Whether this sandbox's :attr:`ProcessInfo.start_ticks` count the host's own
        ``CLOCK_BOOTTIME`` (the same kernel), so a moment read on the host orders the sandbox's
        processes without an exec (:func:`host_boot_clock`). ``False`` unless the backend
        checked it."""
        return False

    @property
    def host_clock(self) -> bool:
        """Whether the sandbox's wall clock is this machine's (the same kernel: file times it
        writes compare with ``time.time()`` here); by default what :attr:`boot_clock` says."""
        return self.boot_clock

    @abstractmethod
    async def download(self, sandbox_path: str, host_path: Path) -> None:
        """Copy a sandbox file or folder to ``host_path`` (a folder's contents into it).

        Streams (bounded memory); symlinks are stored as links and never followed on the host;
        nothing is written outside ``host_path``.

        Raises:
            FileNotFoundError: ``sandbox_path`` does not exist.
            SandboxError: the transfer failed.
        """

    @abstractmethod
    async def processes(self) -> list[ProcessInfo]:
        """List the processes running in the sandbox (its own pid namespace view).

        Raises:
            SandboxError: the list could not be read.
        """

    @abstractmethod
    async def kill_processes(self, pids: Sequence[ProcessInfo]) -> None:
        """SIGKILL the given processes (matched by :attr:`ProcessInfo.key`, so a reused pid is
        spared). Processes already gone are ignored. PID 1 is never killed.

        Raises:
            SandboxError: the kill could not be sent.
        """

    async def kill_since(
        self, after_tick: int | None, spare: Sequence[ProcessInfo] = ()
    ) -> tuple[list[ProcessInfo], list[ProcessInfo]]:
        """Kill every process started since a baseline: with ``after_tick``, those whose
        ``start_ticks`` is above it (the boot clock's tick of the baseline); without, those
        not in ``spare`` (the baseline's listing, by :attr:`ProcessInfo.key`). Never PID 1 nor
        what keeps the sandbox alive. Backends stop the processes first and look again until
        none is new, so a process that keeps forking cannot stay ahead of the kill (docker:
        one exec; local: from the host); this default lists and kills in rounds.

        Args:
            after_tick: the baseline's boot-clock tick, or ``None``.
            spare: the processes of the baseline (used when ``after_tick`` is ``None``).

        Returns:
            ``(killed, left)``: the processes killed, and new ones still running after it
            (started meanwhile by a process that is not new: a task's own service).

        Raises:
            SandboxError: the processes could not be listed or killed.
        """
        new = started_since(after_tick, spare)
        killed: dict[tuple[int, int], ProcessInfo] = {}
        for _ in range(KILL_ROUNDS):
            found = [p for p in await self.processes() if new(p) and p.key not in killed]
            if not found:
                return list(killed.values()), []
            await self.kill_processes(found)
            killed.update((p.key, p) for p in found)
        left = [p for p in await self.processes() if new(p) and p.key not in killed]
        return list(killed.values()), left

    # ---- snapshots (design §4.7; docs/snapshots.md) ---------------------------------------
    async def snapshot(self, labels: Mapping[str, str]) -> SnapshotRef:
        """Record the sandbox's files as they are now (running processes are not captured).

        The sandbox keeps running unchanged; what it writes afterwards never changes the
        snapshot. A new sandbox starts from it with ``SandboxSpec(snapshot=ref.ref)``.

        Args:
            labels: ownership labels to attach (``cairn.job``, ``cairn.trial``,
                ``cairn.step``, ``cairn.job_dir`` …): Docker image labels, or the local
                snapshot folder's marker, so ``cairn clean`` can find it.

        Returns:
            The :class:`SnapshotRef`.

        Raises:
            UnsupportedError: the backend cannot snapshot (``capabilities.snapshot`` false).
            SandboxError: the snapshot could not be made (nothing is left behind).
            SandboxLostError: the engine does not answer.
        """
        from cairn.errors import UnsupportedError

        raise UnsupportedError(f"backend {self.name!r} cannot snapshot a sandbox")

    @classmethod
    async def remove_snapshot(cls, ref: str) -> None:
        """Delete a snapshot this backend made; one already gone is fine.

        Raises:
            UnsupportedError: the backend cannot snapshot.
            SandboxError: the snapshot is in use (a sandbox runs from it) or cannot be removed.
        """
        from cairn.errors import UnsupportedError

        raise UnsupportedError(f"backend {cls.name!r} cannot snapshot a sandbox")

    def shell_argv(self, *, user: str | int | None = None, tty: bool = True) -> list[str]:
        """A host command line that opens an interactive shell inside this running sandbox
        (``cairn shell``), as ``user`` in the working dir.

        Args:
            user: user name or uid; ``None`` = the image default.
            tty: allocate a terminal (``False`` when stdin is not a terminal).

        Raises:
            UnsupportedError: the backend has no way to attach a shell.
        """
        from cairn.errors import UnsupportedError

        raise UnsupportedError(f"backend {self.name!r} cannot attach an interactive shell")


def sandbox_path_join(*parts: str) -> str:
    """Join POSIX path parts for use inside a sandbox."""
    return str(PurePosixPath(*parts))
