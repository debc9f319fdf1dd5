"""The docker sandbox backend (design §3.1), through the Docker SDK for Python.

One container per sandbox:

- image: built from ``environment/Dockerfile`` once per content hash, or ``docker_image`` as is
  (:mod:`cairn.sandbox.docker.build`);
- PID 1 is Docker's init (tini), its child a tiny shell "keeper" that first starts the image's
  ENTRYPOINT (with its CMD) in the background — so services the image starts come up — then
  idles; SIGTERM ends it at once, and ``stop()`` removes the container with SIGKILL anyway;
- labels ``cairn.job``, ``cairn.trial``, ``cairn.job_dir``, ``cairn.owner``, ``cairn.backend``
  make every container attributable, so ``cairn clean`` removes exactly the left-overs;
- networks (:mod:`.gateway`): ``no-network`` is ``--network none``; ``public`` the trial's own
  bridge network; an allowlist, a model host of an in-sandbox agent, or phases whose policies
  differ put the sandbox on an internal network behind a per-trial egress gateway, started
  concurrently with the sandbox; :meth:`DockerSandbox.set_network` switches it per phase;
- exec output is read from the multiplexed attach stream keeping only a tail per stream; a
  timeout kills the exec's whole process tree inside the container (:mod:`.exec_stream`);
- transfers are streamed tar archives (``put_archive`` fed by a generator, ``get_archive``
  extracted as it arrives) through :mod:`cairn._util.tar`, so memory stays bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import posixpath
import re
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

import docker
import docker.errors

from cairn._util.tail import TailBuffer
from cairn._util.tar import ExtractReport, extract_tar_stream, tar_stream, tar_stream_many
from cairn.errors import ErrorKind, HostPathsSkippedError, SandboxError, SandboxLostError
from cairn.layout import COMPOSE_FILE_NAMES, SOLUTION_DIR
from cairn.lock import owner_token
from cairn.sandbox.base import (
    DEFAULT_MAX_OUTPUT_BYTES,
    LOG_DIRS,
    SNAPSHOT_LABEL,
    Capabilities,
    ExecRequest,
    ExecResult,
    FoldedExec,
    NetworkMode,
    NetworkPolicy,
    ProcessInfo,
    Sandbox,
    SandboxConnection,
    SandboxEnd,
    SandboxSpec,
    ServiceExit,
    SnapshotRef,
    UploadItem,
)
from cairn.sandbox.caches import SandboxCaches
from cairn.sandbox.docker import netpool
from cairn.sandbox.docker.build import (
    ImageInfo,
    engine_version,
    ensure_image,
    in_thread,
    is_engine_gone,
    make_client,
    no_shell_reason,
    silent_near,
    snapshot_image_info,
    start_thread,
    task_fault_reason,
    translate,
)
from cairn.sandbox.docker.ends import api_time, engine_kills
from cairn.sandbox.docker.exec_stream import (
    EXEC_ID_VAR,
    KEEPER_MARKER,
    KEEPER_SCRIPT,
    KILL_BY_ENV_SCRIPT,
    KILL_KEYS_SCRIPT,
    KILL_SINCE_SCRIPT,
    PS_SCRIPT,
    SERVICE_EXIT_FILE,
    ExecStream,
    exec_output,
    is_keep_alive,
    parse_processes,
)
from cairn.sandbox.docker.fold import FOLD_LIMIT_BYTES, fold_argv, fold_env, parse_fold
from cairn.sandbox.docker.gateway import (
    POOL_KIND,
    POOL_LIMIT,
    POOL_WAIT_SEC,
    Layout,
    TrialNetwork,
    ensure_gateway_image,
    plan_layout,
    proxy_env,
    sandbox_hostname,
)

log = logging.getLogger(__name__)

START_TIMEOUT_SEC = 120.0
"""Bound on creating and starting the container once the image exists, seconds."""

KILL_GRACE_SEC = 3.0
"""After a timed-out exec's tree is killed, how long its output may take to close, seconds."""
REMOVE_WAIT_SEC = 60.0
"""How long :meth:`DockerSandbox.stop` waits for the engine to finish removing the container
(a busy engine answers a forced removal before the container is gone, or fails it), seconds."""
ENDED_SETTLE_SEC = 5.0
"""How long :meth:`DockerSandbox.ended` waits for the engine to record the end of a container
that no longer runs an exec but is still reported running, and then for its event log (whether
it was killed from outside), seconds."""

_GONE: Mapping[str, Any] = MappingProxyType({"Running": False})
""":meth:`DockerSandbox._state` when the engine no longer knows the container (a sentinel)."""
_UNANSWERED: Mapping[str, Any] = MappingProxyType({"Running": False})
""":meth:`DockerSandbox._state` when the engine does not answer at all (issue #29)."""


def _silence_at_end(state: Mapping[str, Any], caches: SandboxCaches) -> str | None:
    """``HH:MM:SS`` of a moment the job (``caches``) found the engine silent around the
    container's ``FinishedAt`` (:func:`~cairn.sandbox.docker.build.silent_near`), or ``None``."""
    stamp = api_time(str(state.get("FinishedAt") or ""))
    if stamp is None:
        return None
    t = silent_near(float(stamp), caches)
    return None if t is None else datetime.fromtimestamp(t, UTC).strftime("%H:%M:%S")


_SETUP_SCRIPT = """
set -e
for d in {logs}; do rm -rf "$d"; mkdir -p "$d"; chmod 777 "$d"; done
rm -rf {solution}
mkdir -p "$1"
if command -v bash >/dev/null 2>&1; then echo bash; else echo sh; fi
cat /proc/uptime 2>/dev/null || true
set +e
for d in /proc/[0-9]*; do
  pp=""
  while read -r a b _; do [ "$a" = PPid: ] && {{ pp=$b; break; }}; done 2>/dev/null < "$d/status"
  [ "$pp" = 1 ] || continue
  case "$(tr '\\0' ' ' 2>/dev/null < "$d/cmdline")" in *{marker}*) echo "keeper=${{d#/proc/}}"; break;; esac
done
""".format(logs=" ".join(LOG_DIRS), solution=SOLUTION_DIR, marker=KEEPER_MARKER)
"""Fresh ``/logs`` folders, no ``/solution`` (the oracle's upload is then fresh without a
``rm`` exec, design §11), the working dir; prints the shell, then the container's uptime (so
:attr:`DockerSandbox.boot_clock` can tell whether it shares the host's clock), then
``keeper=<pid>``: the keeper's pid, found while nothing but cairn runs in the container (a
process the agent later names after the keeper is not it)."""

BOOT_CLOCK_SLACK_SEC = 0.05
"""How far the container's ``/proc/uptime`` may stray from the host's ``CLOCK_BOOTTIME`` read
around the exec for the two to count as one clock (same kernel), seconds."""

SNAPSHOT_REPO = "cairn-snap"
"""Repository of step snapshot images: ``cairn-snap:<trial12>-<step>-<random8>``."""

_ENV_SKIP = frozenset({"Dockerfile", *COMPOSE_FILE_NAMES, ".dockerignore"})


def container_labels(spec: SandboxSpec, env_hash: str = "") -> dict[str, str]:
    """The ownership labels every cairn container carries (design §3)."""
    labels = {
        "cairn.job": spec.job_id,
        "cairn.trial": spec.trial_id,
        "cairn.backend": "docker",
        "cairn.owner": owner_token(),
    }
    if spec.job_dir is not None:
        labels["cairn.job_dir"] = str(Path(spec.job_dir).absolute())
    if env_hash:
        labels["cairn.env_hash"] = env_hash
    return labels


async def _gather(*aws: Any) -> list[Any]:
    """Await all of ``aws``; when one fails, wait for the others to settle, then raise the
    first failure (so nothing is still being created when ``stop()`` runs)."""
    results = await asyncio.gather(*aws, return_exceptions=True)
    for res in results:
        if isinstance(res, BaseException):
            raise res
    return results


def _keys_line(out: str, word: str) -> list[ProcessInfo]:
    """The ``pid:start`` keys of :data:`KILL_SINCE_SCRIPT`'s ``word`` line, as processes (no
    command line: the script reads none)."""
    for line in out.splitlines():
        head, _, rest = line.partition(" ")
        if head == word or line == word:
            found = []
            for key in rest.split():
                pid, _, start = key.partition(":")
                if pid.isdigit() and start.isdigit():
                    found.append(ProcessInfo(pid=int(pid), ppid=0, start_ticks=int(start), cmdline=""))
            return found
    return []


def _user(user: str | int | None) -> str:
    return "" if user is None else str(user)


class DockerSandbox(Sandbox):
    """A sandbox that is one Docker container (see the module docstring).

    Args:
        spec: the frozen :class:`SandboxSpec`.
    """

    name: ClassVar[str] = "docker"
    capabilities: ClassVar[Capabilities] = Capabilities(
        network_modes=frozenset(NetworkMode),
        cpu_limit=True,
        memory_limit=True,
        storage_limit=False,
        gpus=False,
        compose=False,
        dockerfile="full",
        snapshot=True,
        gateway=True,
        read_only_mounts=True,
    )
    known_conformance_gaps: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def engine_version(cls) -> str | None:
        """The Docker engine's version (``docker version``'s server version), or ``None``.

        Asked on every call (once per job, by the job's runner): no job's memos here, so a
        fresh :class:`~cairn.sandbox.caches.SandboxCaches` holds what this call learns.
        """
        caches = SandboxCaches()
        try:
            client = make_client(caches, timeout=5)
            try:
                return engine_version(client, caches)
            finally:
                client.close()
        except Exception:  # noqa: BLE001 - a version is informative only
            return None

    def __init__(self, spec: SandboxSpec) -> None:
        super().__init__(spec)
        self._client: docker.DockerClient | None = None
        self._cid: str | None = None
        self._service = False  # whether the keeper started an ENTRYPOINT service
        self._creating: asyncio.Future[str] | None = None
        self._image: ImageInfo | None = None
        self._workdir = spec.workdir or "/"
        self._shell = "sh"
        self._started = False
        self._ready = False
        self._stopped = False
        self._engine_version: str | None = None
        self._net: TrialNetwork | None = None
        self.warnings: list[str] = []

    # ---- lifecycle --------------------------------------------------------------------
    @property
    def workdir(self) -> str:
        """``spec.workdir``, else the image WORKDIR, else ``/``."""
        return self._workdir

    @property
    def container_id(self) -> str | None:
        """The container's id while it exists."""
        return self._cid

    @property
    def info(self) -> dict[str, str | None]:
        """``backend``, ``image_id``, ``engine_version``, plus ``image`` and ``container_id``."""
        return {
            "backend": self.name,
            "image_id": self._image.image_id if self._image else None,
            "engine_version": self._engine_version,
            "image": self._image.ref if self._image else None,
            "container_id": self._cid,
        }

    @property
    def image(self) -> ImageInfo | None:
        """The resolved image (after :meth:`start`)."""
        return self._image

    @classmethod
    def host_address(cls) -> str | None:
        """This machine's address on the engine's default bridge (``docker0``'s, e.g.
        ``172.17.0.1``): routed from a sandbox on its own bridge network and from the egress
        gateway's bridge leg (:meth:`Sandbox.host_address`, docs/relay.md).

        Raises:
            UsageError: the engine is not on this machine, or no address of it is on the bridge.
        """
        from cairn.sandbox.docker.hostaddr import bridge_address

        client = make_client(SandboxCaches(), timeout=30)  # no job's memos here
        try:
            return bridge_address(client)
        finally:
            client.close()

    @classmethod
    def check(cls, spec: SandboxSpec) -> list[str]:
        """:meth:`Sandbox.check`, plus: a Dockerfile that needs BuildKit must be buildable here.

        Raises:
            UnsupportedError: see :meth:`Sandbox.check`; BuildKit-only Dockerfile syntax this
                engine cannot build (:func:`~cairn.sandbox.docker.buildkit.check_dockerfile`).
        """
        warnings = super().check(spec)
        dockerfile = Path(spec.env_dir) / "Dockerfile" if spec.env_dir else None
        if dockerfile is not None and dockerfile.is_file() and (not spec.docker_image or spec.force_build):
            from cairn.sandbox.docker.buildkit import check_dockerfile

            warnings += check_dockerfile(dockerfile, spec.caches)
        return warnings

    async def start(self) -> None:
        """Build or reuse the image, start the container, prepare ``/logs`` and the workdir.

        Raises:
            UnsupportedError: a network mode or GPU request this backend cannot honour.
            BuildError: ``build_failed``, ``build_timeout`` or ``image_not_found``.
            SandboxError: ``start_failed``.
            SandboxLostError: the engine does not answer.
        """
        if self._started or self._stopped:
            raise SandboxError("a sandbox can be started once", kind=ErrorKind.START_FAILED)
        self._started = True
        self.warnings = self.check(self.spec)
        self._client = await in_thread(make_client, self.spec.caches)
        net = self._net = self._make_network(self._client)
        reused = await self._reuse_network(net)
        if reused is not None:
            net = self._net = reused
        gateway_image = (
            ensure_gateway_image(self._client, self.spec.caches)
            if net.layout is Layout.GATEWAY and reused is None
            else asyncio.sleep(0, None)
        )
        # a reused gateway takes this trial's policy while the image is resolved
        networks = (
            netpool.create_or_take(net, self.spec.pool)  # a public trial's bridge may be reused
            if reused is None
            else reused.adopt(
                self._client, self.spec.network_policy, "environment", dict(self.spec.add_hosts)
            )
        )
        if self.spec.snapshot:  # the files of a step snapshot, the image config it recorded
            image = in_thread(snapshot_image_info, self._client, self.spec.snapshot)
        else:
            image = ensure_image(self._client, self.spec)
        # Independent engine round trips at once: version, image, gateway image, networks.
        # An SDK error none of them translated is still the engine's (issue #29).
        with translate("starting the sandbox", self.spec.caches, kind=ErrorKind.START_FAILED):
            self._engine_version, self._image, gw_image, _ = await _gather(
                in_thread(engine_version, self._client, self.spec.caches), image, gateway_image, networks
            )
        self._workdir = self.spec.workdir or self._image.workdir or "/"
        try:
            async with asyncio.timeout(START_TIMEOUT_SEC):
                if reused is not None:  # its policy was set while the image was resolved
                    await _gather(self._container_up(), reused.confirm())
                elif net.layout is Layout.GATEWAY:
                    # The gateway comes up (and says it listens) while the sandbox starts and
                    # is prepared: nothing of the preparation needs the network.
                    await _gather(
                        self._container_up(),
                        net.start_gateway(gw_image, self.spec.network_policy, "environment"),
                    )
                else:
                    await self._create_and_start()
                    await self._prepare()
        except TimeoutError:
            raise SandboxError(
                f"the container did not start within {START_TIMEOUT_SEC:g} s", kind=ErrorKind.START_FAILED
            ) from None
        self._ready = True

    async def _container_up(self) -> None:
        """The sandbox's container created, started and prepared (``/logs``, the workdir);
        in the gateway layout beside the gateway's own start, and on the public net when the
        start policy is public."""
        await self._create_and_start()
        if self._net is not None and self._net.layout is Layout.GATEWAY:
            await _gather(self._prepare(), self._attach_public())
        else:
            await self._prepare()

    def _make_network(self, client: Any) -> TrialNetwork:
        spec = self.spec
        policies = spec.network_policies
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", spec.name).strip("-.")[:24] or "sandbox"
        return TrialNetwork(
            client,
            plan_layout(policies),
            container_labels(spec),
            f"cairn-{slug}-{re.sub(r'[^A-Za-z0-9]', '', spec.trial_id)[:8]}",
            needs_public=any(p.mode is NetworkMode.PUBLIC for p in policies),
            hosts=dict(spec.add_hosts),
            caches=spec.caches,
        )

    async def _reuse_network(self, fresh: TrialNetwork) -> TrialNetwork | None:
        """A gateway and internal network an earlier trial of this job left in the job's pool
        (``spec.pool``, :mod:`cairn.sandbox.pools`; :meth:`start` switches it to this trial's
        policy and host map); or ``None`` (no pool, none idle, a layout that is not reused) to
        make fresh ones. A pooled gateway that died idle fails this trial's start as
        ``start_failed`` (infra: retried on a fresh one)."""
        pool = self.spec.pool
        if not fresh.poolable_plan or pool is None or pool.closed:
            return None
        item = await pool.take_or_wait(POOL_KIND, wait_sec=POOL_WAIT_SEC)
        return item if isinstance(item, TrialNetwork) else None

    async def _attach_public(self) -> None:
        """In the gateway layout, a sandbox whose start policy is public joins the public net."""
        if self._net is not None and self._cid is not None and self.spec.network_mode is NetworkMode.PUBLIC:
            await self._net.attach_public(self._cid, True)

    @property
    def network_layout(self) -> str | None:
        """``none``, ``bridge`` or ``gateway`` once started (see :mod:`.gateway`)."""
        return self._net.layout.value if self._net is not None else None

    async def set_network(self, policy: NetworkPolicy, *, phase: str) -> None:
        """Switch the egress gateway to ``policy`` (gateway layout); see
        :meth:`Sandbox.set_network`. In the other layouts every policy is the same one.

        Raises:
            UnsupportedError: a policy the layout cannot give (the spec did not list it).
            SandboxError: the gateway did not take the switch.
        """
        net = self._net
        if net is not None and net.layout is Layout.GATEWAY:
            await net.apply(policy.effective(), phase, self._cid)
            return
        if policy.effective() not in self.spec.network_policies or len(self.spec.network_policies) > 1:
            from cairn.errors import UnsupportedError

            raise UnsupportedError(
                f"the sandbox was not started for the network policy "
                f"{policy.describe()} (list it in network_phases)"
            )

    async def service_exit(self) -> ServiceExit | None:
        """The image ENTRYPOINT's exit status once it has ended (the keeper records it), with
        the container log's tail; see :meth:`Sandbox.service_exit`."""
        if not self._service or self._cid is None:
            return None
        code, out, _ = await self._run(["/bin/sh", "-c", f"cat {SERVICE_EXIT_FILE} 2>/dev/null"], user="0")
        status = out.strip()
        if code != 0 or not status.isdigit():
            return None
        return ServiceExit(int(status), await self._container_logs())

    async def network_records(self) -> list[dict[str, object]]:
        """The gateway's connection records not returned before (see :meth:`Sandbox.network_records`)."""
        if self._net is None or self._net.layout is not Layout.GATEWAY:
            return []
        return await self._net.records(self._cid)

    def _environment(self, hostname: str | None = None) -> dict[str, str] | None:
        env = dict(self.spec.env)
        if self._net is not None and self._net.layout is Layout.GATEWAY:
            env = {**proxy_env((hostname,) if hostname else ()), **env}
        return env or None

    async def _create_and_start(self) -> None:
        assert self._client is not None and self._image is not None
        assert self._net is not None
        api = self._client.api
        spec = self.spec
        host_kw: dict[str, Any] = {
            "init": True,
            "network_mode": self._net.container_network,
        }
        if spec.mounts:
            host_kw["binds"] = {str(host): {"bind": target, "mode": "ro"} for host, target in spec.mounts}
        if spec.cpus:
            host_kw["nano_cpus"] = int(float(spec.cpus) * 1e9)
        if spec.memory_mb:
            host_kw["mem_limit"] = f"{int(spec.memory_mb)}m"
            host_kw["memswap_limit"] = f"{int(spec.memory_mb)}m"
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", spec.name).strip("-.")[:40] or "sandbox"
        trial8 = re.sub(r"[^A-Za-z0-9]", "", spec.trial_id)[:8]
        name = f"cairn-{slug}-{trial8}-{uuid.uuid4().hex[:6]}"
        env_hash = spec.env_hash
        # behind the gateway the host name is set, so NO_PROXY can name it (issue 29)
        gated = self._net.layout is Layout.GATEWAY
        hostname = sandbox_hostname(name) if gated else None
        img = self._image
        service = [*img.entrypoint, *img.cmd] if img.entrypoint else []
        if is_keep_alive(service):  # the keeper idles anyway
            service = []
        self._service = bool(service)
        with translate("creating the container", self.spec.caches, kind=ErrorKind.START_FAILED):
            host_config = api.create_host_config(**host_kw)

            def create() -> str:
                # The id is recorded on the worker thread, so a start cancelled while the
                # engine creates the container still lets stop() find and remove it.
                created = api.create_container(
                    img.image_id,
                    entrypoint=["/bin/sh", "-c", KEEPER_SCRIPT, KEEPER_MARKER],
                    command=service,
                    labels=container_labels(spec, env_hash),
                    host_config=host_config,
                    name=name,
                    working_dir=self._workdir,
                    environment=self._environment(hostname),
                    hostname=hostname,
                    detach=True,
                )
                self._cid = created["Id"]
                return self._cid

            self._creating = start_thread(create)
            await asyncio.shield(self._creating)
        with translate("starting the container", self.spec.caches, kind=ErrorKind.START_FAILED):
            try:
                await in_thread(api.start, self._cid)
            except docker.errors.APIError as exc:
                why = task_fault_reason(exc.explanation or str(exc))
                if why is None:
                    raise
                raise SandboxError(
                    f"the task's image cannot start: {why}", kind=ErrorKind.START_FAILED, task_fault=True
                ) from exc

    async def _prepare(self) -> None:
        before = time.clock_gettime(time.CLOCK_BOOTTIME)
        try:
            code, out, err = await self._run(
                ["/bin/sh", "-c", _SETUP_SCRIPT, "cairn-setup", self._workdir], user="0"
            )
        except SandboxError as exc:  # the container may already have exited by itself
            logs = await self._container_logs()
            exit_code = await self._exit_code()
            why = no_shell_reason(126 if exit_code is not None else None, logs)
            if why is None:
                raise
            raise SandboxError(
                f"the task's image cannot start: {why}",
                kind=ErrorKind.START_FAILED,
                detail={"logs": logs},
                task_fault=True,
            ) from exc
        after = time.clock_gettime(time.CLOCK_BOOTTIME)
        if code != 0:
            logs = await self._container_logs()
            why = no_shell_reason(code, f"{err}\n{logs}")
            detail: dict[str, Any] = {"stderr": err[-4000:], "logs": logs}
            if why is not None:  # the task's image: the same on every attempt
                raise SandboxError(
                    f"the task's image cannot start: {why}",
                    kind=ErrorKind.START_FAILED,
                    detail=detail,
                    task_fault=True,
                )
            raise SandboxError(
                f"the container did not come up (exit {code}): {err.strip()} {logs}".strip(),
                kind=ErrorKind.START_FAILED,
                detail=detail,
            )
        lines = out.split()
        self._shell = "bash" if "bash" in lines[:1] else "sh"
        try:  # "<uptime> <idle>" after the shell's name
            uptime = float(lines[1])
        except (IndexError, ValueError):
            uptime = -1.0
        self._boot_clock = before - BOOT_CLOCK_SLACK_SEC <= uptime <= after + BOOT_CLOCK_SLACK_SEC
        keeper = [w.removeprefix("keeper=") for w in lines if w.startswith("keeper=")]
        self._keeper_pid = int(keeper[0]) if keeper and keeper[0].isdigit() else None
        img, env_dir = self._image, self.spec.env_dir
        if (
            img is not None
            and not img.built
            and self.spec.docker_image
            and env_dir
            and not self.spec.snapshot
            and env_dir.is_dir()
            and not (env_dir / "Dockerfile").is_file()
        ):
            for entry in sorted(env_dir.iterdir()):
                if entry.name not in _ENV_SKIP:
                    await self.upload(entry, posixpath.join(self._workdir, entry.name))

    async def _exit_code(self) -> int | None:
        """The container's exit code once it has exited by itself, else ``None``."""
        if not (self._client and self._cid):
            return None
        with contextlib.suppress(Exception):
            state = (await in_thread(self._client.api.inspect_container, self._cid))["State"]
            if not state.get("Running"):
                return int(state.get("ExitCode"))
        return None

    async def ended(self) -> SandboxEnd | None:
        """:meth:`Sandbox.ended`: the container is no longer running although nobody here
        stopped it, from the engine's state. Its init died (the out-of-memory killer; a process
        inside that killed the keeper, e.g. ``kill -9 -1``): the sandbox's own end. The engine
        killed it on someone else's order (``docker kill``/``stop``/``rm -f``: a ``kill`` in
        the engine's event log, :mod:`.ends`) or it no longer exists: ``from_outside``."""
        if not (self._client and self._cid) or self._stopped:
            return None
        state = await self._state()
        if state is not None and state.get("Running"):
            # Asked right after an operation failed, the engine may not have seen the init's
            # death yet (an exec refused with 126 while the OOM-killed container winds down):
            # a container that still runs a trivial exec is alive; one that does not is
            # waited for, briefly, until the engine says how it ended.
            if await self._answers():
                return None
            loop = asyncio.get_running_loop()
            deadline = loop.time() + ENDED_SETTLE_SEC
            while state is not None and state.get("Running") and loop.time() < deadline:
                await asyncio.sleep(0.05)
                state = await self._state()
        if state is _GONE:
            return SandboxEnd(
                "its container was removed from outside the sandbox (docker rm, not cairn)", from_outside=True
            )
        if state is _UNANSWERED:  # issue #29: the engine itself went away (a restart)
            return SandboxEnd("the Docker engine stopped answering", from_outside=True)
        if state is None or state.get("Running"):
            return None
        code = state.get("ExitCode")
        oom = bool(state.get("OOMKilled"))
        reason = f"its container exited (exit {code})"
        if oom:  # the sandbox's own: the limit is the task's and the agent's to keep
            reason += ": the sandbox ran out of memory" + (
                f" (memory_mb = {int(self.spec.memory_mb)})" if self.spec.memory_mb else ""
            )
            signals: list[int | str] = []
        else:  # an engine too slow to say counts as no kill (the sandbox's own end)
            try:
                signals = await asyncio.wait_for(
                    in_thread(engine_kills, self._client, self._cid, state), ENDED_SETTLE_SEC
                )
            except TimeoutError:
                signals = []
        if signals:
            reason = (
                f"its container was killed from outside the sandbox (the engine sent "
                f"signal {signals[0]}: docker kill, stop or rm -f, not cairn; exit {code})"
            )
        elif not oom and (silence := _silence_at_end(state, self.spec.caches)) is not None:
            # issue #29: stopped with the engine (a restart); the event log went with it
            return SandboxEnd(
                f"its container was stopped with the Docker engine (exit {code}; "
                f"the engine did not answer at {silence} UTC: a restart)",
                exit_code=code if isinstance(code, int) else None,
                from_outside=True,
            )
        return SandboxEnd(
            reason,
            exit_code=code if isinstance(code, int) else None,
            oom_killed=oom,
            from_outside=bool(signals),
        )

    async def _state(self) -> Mapping[str, Any] | None:
        """The container's engine ``State``; :data:`_GONE` when the engine no longer knows the
        container; ``None`` when the engine cannot tell."""
        assert self._client is not None
        try:
            return (await in_thread(self._client.api.inspect_container, self._cid))["State"]
        except docker.errors.NotFound:
            return _GONE
        except Exception as exc:  # noqa: BLE001 - the engine cannot tell: say nothing
            return _UNANSWERED if is_engine_gone(exc, self.spec.caches) else None

    async def _answers(self) -> bool:
        """Whether the container still runs a trivial exec (``true``)."""
        try:
            code, _, _ = await self._run(["true"], user="0")
        except Exception:  # noqa: BLE001 - refused or gone: it does not answer
            return False
        return code == 0

    async def _container_logs(self) -> str:
        if not (self._client and self._cid):
            return ""
        with contextlib.suppress(Exception):
            raw = await in_thread(self._client.api.logs, self._cid, tail=30)
            return raw.decode("utf-8", "replace").strip()
        return ""

    async def stop(self) -> None:
        """Remove the container (SIGKILL, no grace period). Idempotent; never raises for
        resources already gone; with ``spec.keep`` a started sandbox is left running."""
        if self.spec.keep and self._cid and not self._stopped and self._ready:
            self._stopped = True
            log.warning(
                "keeping sandbox container %s (docker exec -it %s %s)", self._cid, self._cid[:12], self._shell
            )
            return
        pool = self.spec.pool
        reuse = (
            self._ready
            and self._net is not None
            and self._net.poolable
            and pool is not None
            and pool.expect(POOL_KIND)
        )
        bridge_back = netpool.expect(self._net, pool, self._ready)
        try:
            if self._net is not None and not reuse:  # sandbox and gateway go at once
                await asyncio.gather(self._stop_container(), self._net.remove_gateway())
            else:
                await self._stop_container()
        finally:
            net, self._net = self._net, None
            try:
                # A gateway is handed on only once this trial's container is gone for sure.
                kept = (
                    reuse
                    and net is not None
                    and self.removal_error is None
                    and await net.recycle()
                    and pool is not None
                    and pool.give(POOL_KIND, net, limit=POOL_LIMIT)
                )
                if net is not None and not kept:
                    clean = self.removal_error is None
                    await netpool.give_back_or_remove(net, pool, expected=bridge_back, clean=clean)
            finally:
                if reuse and pool is not None:
                    pool.settle(POOL_KIND)
            client, self._client = self._client, None
            if client is not None:
                with contextlib.suppress(Exception):
                    client.close()

    async def _stop_container(self) -> None:
        self._stopped = True
        if self._creating is not None and not self._creating.done():
            with contextlib.suppress(Exception):  # let a cancelled create land, then remove it
                await asyncio.wait_for(asyncio.shield(self._creating), START_TIMEOUT_SEC)
        cid, self._cid = self._cid, None
        client = self._client
        if client is None:
            return
        if cid is not None:
            error = await remove_container_and_wait(client, cid, REMOVE_WAIT_SEC, self.spec.caches)
            if error:  # stop never raises; the label lets `cairn clean` finish
                log.warning("could not remove container %s: %s", cid[:12], error)
                self.removal_error = error

    removal_error: str | None = None
    """Why the container could not be removed within :data:`REMOVE_WAIT_SEC` (after
    :meth:`stop`), else None."""

    # ---- snapshots ----------------------------------------------------------------------
    async def snapshot(self, labels: Mapping[str, str]) -> SnapshotRef:
        """Commit the container's files to an image labelled with ``labels`` (see
        :meth:`Sandbox.snapshot`). The container is paused during the commit, so a process
        still writing cannot leave a torn file; it resumes afterwards.

        Returns:
            A :class:`SnapshotRef` whose ``ref`` is the image id and ``size_bytes`` the size of
            the committed layer (the image's size minus its parent's).

        Raises:
            SandboxError: the commit failed. SandboxLostError: the engine does not answer.
        """
        api, cid = self._require()
        img = self._image
        assert img is not None
        t0 = time.monotonic()
        meta = {
            **{k: str(v) for k, v in labels.items()},
            SNAPSHOT_LABEL: "1",
            "cairn.backend": "docker",
            "cairn.image_entrypoint": json.dumps(list(img.entrypoint)),
            "cairn.image_cmd": json.dumps(list(img.cmd)),
            "cairn.image_workdir": img.workdir or "",
        }
        trial = re.sub(r"[^A-Za-z0-9]", "", str(labels.get("cairn.trial", "")))[:12] or "adhoc"
        step = re.sub(r"[^A-Za-z0-9_.-]+", "-", str(labels.get("cairn.step", "step")))[:40]
        tag = f"{trial}-{step}-{uuid.uuid4().hex[:8]}".strip("-.") or uuid.uuid4().hex

        def work() -> tuple[str, int | None]:
            done = api.commit(cid, repository=SNAPSHOT_REPO, tag=tag, pause=True, conf={"Labels": meta})
            image_id = done["Id"]
            size = api.inspect_image(image_id).get("Size")
            base = api.inspect_image(img.image_id).get("Size")
            return image_id, (
                max(0, int(size) - int(base)) if size is not None and base is not None else None
            )

        with translate("snapshot (docker commit)", self.spec.caches, kind=ErrorKind.SANDBOX_UNUSABLE):
            image_id, size = await in_thread(work)
        return SnapshotRef(backend=self.name, ref=image_id, size_bytes=size, seconds=time.monotonic() - t0)

    @classmethod
    async def remove_snapshot(cls, ref: str) -> None:
        """Remove a snapshot image (its tags too); one already gone is fine.

        Raises:
            SandboxError: a container still uses it, or the engine refused.
        """
        caches = SandboxCaches()  # no job's memos here
        client = await in_thread(make_client, caches)
        try:

            def work() -> None:
                try:
                    data = client.api.inspect_image(ref)
                except docker.errors.NotFound:
                    return
                for t in data.get("RepoTags") or []:
                    client.api.remove_image(t)
                with contextlib.suppress(docker.errors.NotFound):
                    client.api.remove_image(data["Id"])

            with translate(f"removing snapshot {ref[:19]}", caches):
                await in_thread(work)
        finally:
            with contextlib.suppress(Exception):
                client.close()

    @classmethod
    async def engine_answers(cls, timeout_sec: float) -> bool:
        """Whether the Docker engine answers a ping (:func:`cairn.sandbox.auto.docker_answers`)."""
        from cairn.sandbox.auto import docker_answers

        return await asyncio.to_thread(docker_answers, timeout_sec)

    def connection(self, *, user: str | int | None = None) -> SandboxConnection:
        """``docker exec -it <container12> bash`` (the hint), the full :meth:`shell_argv` and
        the container id."""
        cid = self._cid
        if not cid:
            return super().connection(user=user)
        try:
            argv = tuple(self.shell_argv(user=user))
        except SandboxError:
            argv = ()
        return SandboxConnection(
            type=self.name, hint=f"docker exec -it {cid[:12]} bash", argv=argv, container=self._cid
        )

    def shell_argv(self, *, user: str | int | None = None, tty: bool = True) -> list[str]:
        """``docker exec -it <container> bash`` as ``user`` in the working dir."""
        _, cid = self._require()
        argv = ["docker", "exec", "-it" if tty else "-i", "-w", self._workdir]
        if user is not None:
            argv += ["-u", str(user)]
        return [*argv, cid, self._shell]

    # ---- exec -------------------------------------------------------------------------
    def _require(self) -> tuple[Any, str]:
        if self._cid is None or self._client is None or self._stopped:
            raise SandboxError("the sandbox is not running")
        return self._client.api, self._cid

    async def _run(
        self, argv: list[str], *, user: str | int | None = None, env: dict[str, str] | None = None
    ) -> tuple[int | None, str, str]:
        """An internal exec: no timeout machinery, small output, (exit code, stdout, stderr)."""
        api, cid = self._require()

        def work() -> tuple[int | None, str, str]:
            ex = api.exec_create(cid, argv, stdout=True, stderr=True, user=_user(user), environment=env)
            out, err = exec_output(api, ex["Id"])
            code = api.exec_inspect(ex["Id"]).get("ExitCode")
            return code, (out or b"").decode("utf-8", "replace"), (err or b"").decode("utf-8", "replace")

        with translate("exec", self.spec.caches):
            return await in_thread(work)

    async def _exec(self, req: ExecRequest) -> ExecResult:
        """Run a command in the container; see :meth:`Sandbox.exec`.

        Raises:
            SandboxError: the container is gone or refuses execs.
            SandboxLostError: the engine does not answer.
        """
        stream, timed_out, code, elapsed = await self._exec_stream(req)
        return ExecResult(
            exit_code=code,
            stdout=stream.stdout.text(),
            stderr=stream.stderr.text(),
            timed_out=timed_out,
            elapsed_sec=elapsed,
            stdout_truncated=stream.stdout.truncated,
            stderr_truncated=stream.stderr.truncated,
        )

    async def _exec_stream(
        self, req: ExecRequest, *, stdout_cap: int | None = None
    ) -> tuple[ExecStream, bool, int | None, float]:
        """One exec with its timeout and tree kill: (its stream, timed out, exit code or
        ``None``, wall seconds). ``stdout_cap`` keeps more of stdout than ``req`` says.

        Raises:
            SandboxError: the container is gone or refuses execs.
            SandboxLostError: the engine does not answer.
        """
        api, cid = self._require()
        argv, user, cwd, env = req.argv, req.user, req.cwd, req.env
        timeout_sec, max_output_bytes = req.timeout_sec, req.max_output_bytes
        token = uuid.uuid4().hex
        environment = {**(env or {}), EXEC_ID_VAR: token}
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with translate("exec", self.spec.caches):
            created = await in_thread(
                api.exec_create,
                cid,
                argv,
                stdout=True,
                stderr=True,
                user=_user(user),
                workdir=cwd or self._workdir,
                environment=environment,
            )
        stream = ExecStream(api, created["Id"], max_output_bytes, stdout_cap)
        fut = start_thread(stream.run)
        timed_out = False
        try:
            with translate("exec", self.spec.caches):
                if timeout_sec is None:
                    await asyncio.shield(fut)
                else:
                    await asyncio.wait_for(asyncio.shield(fut), max(0.0, timeout_sec))
        except TimeoutError:
            timed_out = True
            await asyncio.shield(self._kill_tree(token, user, stream, fut))
        except asyncio.CancelledError:
            await asyncio.shield(self._kill_tree(token, user, stream, fut))
            raise
        code: int | None = None
        if not timed_out:
            with translate("exec", self.spec.caches):
                code = await in_thread(stream.exit_code)
        return stream, timed_out, code, loop.time() - t0

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
        """:meth:`Sandbox.exec_collect` as one exec (:mod:`.fold`): the command, then a tar
        of ``collect`` on stdout after its output, then ``then_root`` when the exec's user is
        root. What the fold could not do is left to the caller (``collected``/``cleaned``).

        Raises:
            ValueError: ``argv`` is empty.
            SandboxError: the exec failed; the archive came back with unsafe members
                (``transfer_failed``, as :meth:`download`); or the clean-up had already run
                and the archive does not parse (the folder is lost).
            SandboxLostError: the engine does not answer.
        """
        command = [str(a) for a in argv]
        if not command:
            raise ValueError("empty argv")
        src = self._abs(collect)
        if src == "/":
            return await super().exec_collect(
                command, collect=collect, into=into, user=user, cwd=cwd, env=env,
                timeout_sec=timeout_sec, max_output_bytes=max_output_bytes,
            )  # fmt: skip
        token = uuid.uuid4().hex
        wrapped = fold_argv(
            command, collect=src, then_root=then_root, unless_exit=unless_exit, timeout_sec=timeout_sec
        )
        folded_env = {**(env or {}), **fold_env(token)}  # the token is on no command line
        req = ExecRequest(wrapped, user, cwd, folded_env, timeout_sec, max_output_bytes)
        stream, timed_out, code, elapsed = await self._exec_stream(
            req, stdout_cap=max_output_bytes + FOLD_LIMIT_BYTES + 4096
        )
        fold = parse_fold(stream.stdout.data(), token, truncated=stream.stdout.truncated)
        if not fold.started and not timed_out and code in (126, 127):
            # /bin/sh would not start (an agent removed it): the command runs as a plain exec
            return FoldedExec(
                await self.exec(
                    command, user=user, cwd=cwd, env=env, timeout_sec=timeout_sec,
                    max_output_bytes=max_output_bytes,
                )
            )  # fmt: skip
        if timed_out and (ended := fold.ended_by()) is not None:
            # the command had ended, with this code, before the timeout struck (the script
            # was archiving the folder, or cleaning up after its footer): no timeout; the copy
            # and the clean-up are the caller's
            timed_out, code = False, ended
            folded_timeout = True
        else:
            folded_timeout = timed_out
        out = TailBuffer(max_output_bytes)
        out.append(fold.out)
        result = ExecResult(
            exit_code=code,
            stdout=out.text(),
            stderr=stream.stderr.text(),
            timed_out=timed_out,
            elapsed_sec=elapsed,
            stdout_truncated=out.truncated or stream.stdout.truncated,
            stderr_truncated=stream.stderr.truncated,
        )
        # The marker lines can be written by whatever holds the exec's user (its token is in
        # the wrapper's argv): after a timeout nothing of the fold is taken but the command's
        # exit code from the script's ``:out`` line (the caller downloads and cleans up, as
        # without a fold), and a "cleaned" line counts only when the exec's user may be root,
        # the one user the script cleans up as.
        may_clean = then_root is not None and _may_be_root(user)
        if folded_timeout:
            # cut after a whole archive's footer: the clean-up may have begun, so a folder that
            # downloads empty is a lost copy, not a command that wrote nothing
            return FoldedExec(result, uncertain=may_clean and fold.footer and fold.whole and not timed_out)
        cleaned = fold.cleaned and may_clean
        if fold.bad_tar and cleaned:
            raise SandboxError(
                f"the copy of {src} that came back with the exec does not parse, and the "
                "folder was already cleaned up in the sandbox",
                kind=ErrorKind.TRANSFER_FAILED,
            )
        if fold.tar is None:
            if cleaned and fold.whole:  # the clean-up ran, the whole archive it announced is lost
                raise SandboxLostError(
                    f"the engine lost the copy of {src} from the exec's output, and the folder "
                    "was already cleaned up in the sandbox"
                )
            return FoldedExec(result, uncertain=may_clean and fold.may_have_cleaned(unless_exit, code))
        tar = fold.tar

        def work() -> ExtractReport:
            return extract_tar_stream(iter((tar,)), Path(into), root_name=posixpath.basename(src))

        with translate(f"copy of {src}", self.spec.caches, kind=ErrorKind.TRANSFER_FAILED):
            report = await in_thread(work)
        _raise_for_report(report, src)
        return FoldedExec(result, collected=True, cleaned=cleaned)

    async def _kill_tree(
        self, token: str, user: str | int | None, stream: ExecStream, fut: asyncio.Future[None]
    ) -> None:
        """Kill every process of one exec (found by its CAIRN_EXEC_ID), then stop reading."""
        try:
            async with asyncio.timeout(30):
                await self._run(["/bin/sh", "-c", KILL_BY_ENV_SCRIPT, "cairn-kill", token], user=user)
        except Exception as exc:  # noqa: BLE001 - the container may be gone; reading still has to stop
            log.debug("killing exec tree failed: %s", exc)
        try:
            await asyncio.wait_for(asyncio.shield(fut), KILL_GRACE_SEC)
        except BaseException:  # noqa: BLE001 - output still open, or the read failed
            stream.abort()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(fut), 5)

    # ---- processes ----------------------------------------------------------------------
    @property
    def boot_clock(self) -> bool:
        """Whether the container's uptime matched the host's ``CLOCK_BOOTTIME`` at start (an
        engine on this kernel; a remote or VM engine does not)."""
        return getattr(self, "_boot_clock", False)

    async def processes(self) -> list[ProcessInfo]:
        """List the container's processes from its own ``/proc`` (one exec).

        Raises:
            SandboxError: the list could not be read.
        """
        code, out, err = await self._run(["/bin/sh", "-c", PS_SCRIPT, "cairn-ps"], user="0")
        if code != 0:
            raise SandboxError(f"listing processes failed (exit {code}): {err.strip()[-500:]}")
        return parse_processes(out)

    def _is_keeper(self, p: ProcessInfo) -> bool:
        """Whether ``p`` is the container's keeper: the pid found at start (a process named
        after it later is not); by its name only when the start found none."""
        keeper = getattr(self, "_keeper_pid", None)
        if keeper is not None:
            return p.pid == keeper
        return p.ppid == 1 and KEEPER_MARKER in p.cmdline

    async def kill_since(
        self, after_tick: int | None, spare: Sequence[ProcessInfo] = ()
    ) -> tuple[list[ProcessInfo], list[ProcessInfo]]:
        """Kill every process started since a baseline, in one exec (:data:`KILL_SINCE_SCRIPT`:
        stopped first and scanned again until none is new, so a fork chain cannot stay ahead);
        see :meth:`Sandbox.kill_since`.

        Raises:
            SandboxError: the exec failed.
        """
        keeper = getattr(self, "_keeper_pid", None)
        args = ["-" if after_tick is None else str(after_tick), "" if keeper is None else str(keeper)]
        if after_tick is None:
            args += [f"{p.pid}:{p.start_ticks}" for p in spare]
        argv = ["/bin/sh", "-c", KILL_SINCE_SCRIPT, "cairn-killsince", *args]
        code, out, err = await self._run(argv, user="0")
        if code != 0:
            raise SandboxError(f"killing processes failed (exit {code}): {err.strip()[-500:]}")
        return _keys_line(out, "killed"), _keys_line(out, "left")

    async def kill_processes(self, pids: Sequence[ProcessInfo]) -> None:
        """SIGKILL the given processes if their start time still matches; never PID 1 nor the
        container's keeper (killing it would end the container).

        Raises:
            SandboxError: the kill could not be sent.
        """
        keys = [f"{p.pid}:{p.start_ticks}" for p in pids if p.pid != 1 and not self._is_keeper(p)]
        if not keys:
            return
        code, _, err = await self._run(["/bin/sh", "-c", KILL_KEYS_SCRIPT, "cairn-killp", *keys], user="0")
        if code != 0:
            raise SandboxError(f"killing processes failed (exit {code}): {err.strip()[-500:]}")

    # ---- files --------------------------------------------------------------------------
    def _abs(self, path: str) -> str:
        p = path if path.startswith("/") else posixpath.join(self._workdir, path)
        return posixpath.normpath(p) if p != "/" else "/"

    async def upload(self, host_path: Path, sandbox_path: str) -> None:
        """Stream a host file or folder into the container; see :meth:`Sandbox.upload`.

        Raises:
            FileNotFoundError: ``host_path`` does not exist.
            SandboxError: kind ``transfer_failed``.
        """
        api, cid = self._require()
        host_path = Path(host_path)
        if not os.path.lexists(host_path):
            raise FileNotFoundError(f"no such host path: {host_path}")
        dest = self._abs(sandbox_path)
        is_dir = host_path.is_dir() and not host_path.is_symlink()
        if not is_dir and dest == "/":
            raise SandboxError("cannot upload a file onto /", kind=ErrorKind.TRANSFER_FAILED)
        if is_dir and not any(os.scandir(host_path)):
            code, _, err = await self._run(["mkdir", "-p", dest], user="0")
            if code != 0:
                raise SandboxError(f"upload to {dest}: {err.strip()}", kind=ErrorKind.TRANSFER_FAILED)
            return
        arc = dest.lstrip("/")
        with translate(f"upload to {dest}", self.spec.caches, kind=ErrorKind.TRANSFER_FAILED):
            await in_thread(api.put_archive, cid, "/", tar_stream(host_path, arc, include_root=False))

    async def upload_many(self, items: Sequence[UploadItem]) -> None:
        """Send several host files or folders as one archive (one ``put_archive``), modes and
        line endings applied in the archive; see :meth:`Sandbox.upload_many`.

        Raises:
            FileNotFoundError: a ``host_path`` does not exist.
            SandboxError: kind ``transfer_failed``.
        """
        api, cid = self._require()
        parts = []
        for it in items:
            if not os.path.lexists(it.host_path):
                raise FileNotFoundError(f"no such host path: {it.host_path}")
            dest = self._abs(it.sandbox_path)
            is_dir = Path(it.host_path).is_dir() and not Path(it.host_path).is_symlink()
            if not is_dir and dest == "/":
                raise SandboxError("cannot upload a file onto /", kind=ErrorKind.TRANSFER_FAILED)
            parts.append((Path(it.host_path), dest.lstrip("/"), it.world_writable, it.crlf))
        if not parts:
            return
        with translate("upload", self.spec.caches, kind=ErrorKind.TRANSFER_FAILED):
            await in_thread(api.put_archive, cid, "/", tar_stream_many(parts))

    async def download(self, sandbox_path: str, host_path: Path) -> None:
        """Stream a container file or folder to the host; see :meth:`Sandbox.download`.

        Raises:
            FileNotFoundError: ``sandbox_path`` does not exist.
            SandboxError: kind ``transfer_failed``, also when members were refused as unsafe
                (everything safe is still written).
        """
        api, cid = self._require()
        src = self._abs(sandbox_path)

        def work() -> Any:
            try:
                chunks, stat = api.get_archive(cid, src, chunk_size=1 << 20)
            except docker.errors.NotFound as exc:
                if (
                    "container" in (exc.explanation or "").lower()
                    and "could not find the file" not in (exc.explanation or "").lower()
                ):
                    raise
                raise FileNotFoundError(f"no such path in the sandbox: {src}") from None
            return extract_tar_stream(chunks, Path(host_path), root_name=stat["name"])

        with translate(f"download of {src}", self.spec.caches, kind=ErrorKind.TRANSFER_FAILED):
            report = await in_thread(work)
        _raise_for_report(report, src)


def _raise_for_report(report: ExtractReport, src: str) -> None:
    """Raise for what an extraction of ``src`` refused or skipped (everything safe is written).

    Raises:
        SandboxError: kind ``transfer_failed``: unsafe members were refused.
        HostPathsSkippedError: paths too long for the host were skipped.
    """
    if report.refused:
        raise SandboxError(
            f"download of {src}: refused {len(report.refused)} unsafe member(s): "
            f"{'; '.join(report.refused[:5])}",
            kind=ErrorKind.TRANSFER_FAILED,
            detail={"refused": report.refused[:100]},
        )
    if report.too_long_count:  # issue #29: written but for paths the host cannot hold
        raise HostPathsSkippedError(
            f"download of {src}: {report.too_long_count} path(s) too long for the host "
            f"skipped: {'; '.join(report.too_long[:3])[:600]}",
            paths=report.too_long,
            count=report.too_long_count,
        )


ENGINE_GONE_SEC = 10.0
"""How long :func:`remove_container_and_wait` keeps trying while the engine does not answer at
all, seconds (the job's final sweep and ``cairn clean`` remove the container later)."""


async def remove_container_and_wait(
    client: Any, cid: str, wait_sec: float, caches: SandboxCaches
) -> str | None:
    """Force-remove a container and return only once the engine no longer knows it.

    A loaded engine may answer ``remove`` with an error ("removal already in progress", a kill
    that timed out) or leave the container in "Removal In Progress" for a while; the removal is
    re-issued with backoff (0.1 s doubling to 2 s) until the container is gone or ``wait_sec``
    has passed — or, when the engine does not answer at all, :data:`ENGINE_GONE_SEC`.

    Args:
        client: a Docker SDK client.
        cid: the container id.
        wait_sec: the bound on the whole wait, seconds.
        caches: the job's memos (an engine that does not answer is noted in them).

    Returns:
        None when the container is gone, else the engine's last error (or "still present").
    """
    start = time.monotonic()
    deadline = start + wait_sec
    delay, error = 0.1, None
    gone_since: float | None = None  # the engine itself does not answer (not a refusal)
    while True:
        try:
            await in_thread(client.api.remove_container, cid, force=True, v=True)
            gone_since = None
        except docker.errors.NotFound:
            return None
        except Exception as exc:  # noqa: BLE001 - retried; reported when it never succeeds
            error = str(getattr(exc, "explanation", None) or exc)
            if is_engine_gone(exc, caches):
                gone_since = gone_since or time.monotonic()
        try:
            await in_thread(client.api.inspect_container, cid)
        except docker.errors.NotFound:
            return None
        except Exception as exc:  # noqa: BLE001 - an engine that does not answer: retried
            error = str(exc)
        now = time.monotonic()
        if now >= deadline or (gone_since is not None and now - gone_since >= ENGINE_GONE_SEC):
            return error or "still present"
        await asyncio.sleep(delay)
        delay = min(delay * 2, 2.0)


def _may_be_root(user: str | int | None) -> bool:
    """Whether an exec as ``user`` may run as root: the image's default user (``None``, which
    the fold script checks itself), or root named by name or uid (``root``, ``0``, ``0:0``)."""
    if user is None:
        return True
    name = str(user).split(":", 1)[0].strip()
    return name in ("root", "0")
