"""Docker engine plumbing for the docker backend: clients, error mapping, images (design §3.1).

- :func:`make_client` / :func:`engine_version`: Docker SDK clients (API version detected once
  per job, :class:`~cairn.sandbox.docker.client.EngineFacts`).
- :func:`in_thread`: runs a blocking SDK call on a dedicated, large thread pool, so long execs
  never starve the event loop's default executor.
- :func:`ensure_image`: builds ``environment/Dockerfile`` once per content hash (one build at
  a time per hash: an :class:`asyncio.Lock` in the job's :class:`~cairn.sandbox.caches.SandboxCaches`,
  a file lock across jobs and processes),
  reuses the image afterwards, and classifies failures as ``build_failed``, ``build_timeout`` or
  ``image_not_found``. A build past its timeout is aborted by killing the build's running
  intermediate container (read from the build output), which the SDK cannot cancel otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import os
import re
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import docker
import docker.errors
import requests.exceptions

from cairn._util.treehash import tree_hash
from cairn.errors import (
    BuildError,
    ErrorKind,
    SandboxError,
    SandboxLostError,
    TrialFailure,
    UnsupportedError,
)
from cairn.layout import find_compose_file
from cairn.lock import flock_async
from cairn.sandbox.base import SandboxSpec
from cairn.sandbox.caches import SandboxCaches
from cairn.sandbox.docker.client import engine_version, make_client  # noqa: F401 - re-exported

T = TypeVar("T")

IMAGE_REPO = "cairn-env"
"""Repository of built environment images: ``cairn-env:<env_hash[:16]>``."""

LABEL_ENV_HASH = "cairn.env_hash"
LOG_TAIL_LINES = 60
FAILURE_TTL_SEC = 300.0
"""How long a deterministic build failure is remembered in-process (no rebuild meanwhile)."""

_IO_POOL = ThreadPoolExecutor(max_workers=96, thread_name_prefix="cairn-docker")


# ---- threads and errors -------------------------------------------------------------------
async def in_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking call on cairn's docker I/O thread pool and await its result."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_IO_POOL, functools.partial(fn, *args, **kwargs))


def start_thread(fn: Callable[[], T]) -> asyncio.Future[T]:
    """Start ``fn`` on the I/O pool now; return an awaitable future (it is not cancelled with
    its awaiter: shield it, and stop the work by other means)."""
    return asyncio.get_running_loop().run_in_executor(_IO_POOL, fn)


SILENCES_KEPT = 64
"""How many moments of engine silence a job keeps (:class:`EngineSilences`)."""


@dataclass
class EngineSilences:
    """Wall-clock times (``time.time()``) at which the job found its engine not answering,
    the last :data:`SILENCES_KEPT` (issue #29): a container that stopped around one of them was
    stopped with the engine (a restart), not by the sandbox itself.

    The journal ``"docker.silences"`` of the job's :class:`~cairn.sandbox.caches.SandboxCaches`
    (:func:`engine_silences`): what one job saw never explains a stop in another job, and it
    outlives :meth:`~cairn.sandbox.caches.SandboxCaches.engine_lost` (the restart it records
    is what a later classification needs).
    """

    times: deque[float] = field(default_factory=lambda: deque(maxlen=SILENCES_KEPT))

    def note(self) -> None:
        """Note that the engine did not answer now."""
        self.times.append(time.time())


def engine_silences(caches: SandboxCaches) -> EngineSilences:
    """The job's :class:`EngineSilences` in ``caches``."""
    return caches.journal("docker.silences", EngineSilences)


def is_engine_gone(exc: BaseException, caches: SandboxCaches) -> bool:
    """Whether ``exc`` means the Docker engine does not answer (not a refused request).

    Args:
        exc: what a Docker SDK call raised.
        caches: the job's memos; a True answer is noted in its :class:`EngineSilences`.
    """
    gone = isinstance(exc, requests.exceptions.ConnectionError | requests.exceptions.Timeout) or (
        not isinstance(exc, docker.errors.APIError) and isinstance(exc, docker.errors.DockerException)
    )
    if gone:
        engine_silences(caches).note()
    return gone


def silent_near(
    when: float, caches: SandboxCaches, *, stop_lead_sec: float = 30.0, downtime_sec: float = 600.0
) -> float | None:
    """A time the job found the engine silent around ``when``, or ``None``: up to
    ``stop_lead_sec`` after it (a graceful engine stop ends its containers first, then stops
    answering) or up to ``downtime_sec`` before it (a killed engine's containers are ended
    when it starts again).

    Args:
        when: a wall-clock time (a container's ``FinishedAt``), seconds since the epoch.
        caches: the job's memos (its :class:`EngineSilences`).
        stop_lead_sec: how long after ``when`` a silence still counts, seconds.
        downtime_sec: how long before ``when`` a silence still counts, seconds.
    """
    for t in reversed(tuple(engine_silences(caches).times)):
        if when - downtime_sec <= t <= when + stop_lead_sec:
            return t
    return None


@contextlib.contextmanager
def translate(
    what: str, caches: SandboxCaches, *, kind: ErrorKind = ErrorKind.SANDBOX_UNUSABLE
) -> Iterator[None]:
    """Map Docker SDK failures inside the block to cairn's sandbox exceptions.

    Args:
        what: what the block does (the messages start with it).
        caches: the job's memos (an engine that does not answer is noted in its
            :class:`EngineSilences`).
        kind: the kind of a refused request.

    Raises:
        SandboxLostError: the engine does not answer.
        SandboxError: the engine refused the request (kind ``kind``).
    """
    try:
        yield
    except (TrialFailure, UnsupportedError, FileNotFoundError):
        raise
    except Exception as exc:
        if is_engine_gone(exc, caches):
            raise SandboxLostError(f"{what}: Docker engine not reachable: {exc}") from exc
        if isinstance(exc, docker.errors.APIError):
            msg = exc.explanation or str(exc)
            raise SandboxError(f"{what}: {msg}", kind=kind) from exc
        raise


# ---- task faults --------------------------------------------------------------------------
_TASK_FAULT_RE = re.compile(
    r"(executable file not found|no such file or directory|exec format error|permission denied"
    r"|not a directory)[^\n]*",
    re.IGNORECASE,
)
_OCI_RE = re.compile(
    r"OCI runtime (create|exec|start) failed|starting container process caused"
    r"|exec: \"|failed to create shim task",
    re.IGNORECASE,
)

_EXEC_RE = re.compile(r'exec: "[^"\n]*"[^\n]*?(?=: unknown|$)', re.MULTILINE)


def task_fault_reason(text: str) -> str | None:
    """Why a start failure is the task's own (its image or compose file), or ``None``.

    A container whose entrypoint or command does not exist, is not executable or is not a
    program for this machine fails the same way on every attempt; the engine says so in an
    OCI runtime error (``exec: "/opt/x": stat /opt/x: no such file or directory``).

    Args:
        text: the engine's or Compose's error output.

    Returns:
        The matching line, or ``None`` when the failure may be transient (infra).
    """
    if not _OCI_RE.search(text or ""):
        return None
    m = _EXEC_RE.search(text) or _TASK_FAULT_RE.search(text)
    return m.group(0).strip().removesuffix(": unknown")[:300] if m else None


def no_shell_reason(code: int | None, text: str) -> str | None:
    """Why a fresh container failed by the image's own definition: it has no ``/bin/sh``
    (exit 126/127 from the init), or its ENTRYPOINT program does not exist (the keeper says
    so); else ``None``."""
    m = re.search(r"cairn: the image ENTRYPOINT (.*) is not an executable in the image", text or "")
    if m:
        return f"the image ENTRYPOINT {m.group(1)[:200]} is not an executable in the image"
    if re.search(r"exec /bin/sh failed: no such file", text or "", re.IGNORECASE):
        return "the image has no /bin/sh (every command of a trial runs with it)"
    if code in (126, 127) and re.search(
        r"exec /bin/sh failed|/bin/sh: (not found|no such file)"
        r"|\"/bin/sh\": stat",
        text or "",
        re.IGNORECASE,
    ):
        return "the image has no /bin/sh (every command of a trial runs with it)"
    return None


# ---- clients ------------------------------------------------------------------------------
# ---- images -------------------------------------------------------------------------------
@dataclass(frozen=True)
class ImageInfo:
    """A resolved image and the parts of its config the sandbox needs.

    Attributes:
        ref: the name the container is created from (tag or id).
        image_id: the image id (``sha256:…``).
        entrypoint: the image ENTRYPOINT (empty when none).
        cmd: the image CMD (empty when none).
        workdir: the image WORKDIR ("" when none).
        built: whether this call built it (False: reused).
        build_sec: seconds spent building (0 when reused).
    """

    ref: str
    image_id: str
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]
    workdir: str
    built: bool = False
    build_sec: float = 0.0


def _image_info(client: docker.DockerClient, ref: str, **kw: Any) -> ImageInfo:
    data = client.api.inspect_image(ref)
    cfg = data.get("Config") or {}
    return ImageInfo(
        ref=ref,
        image_id=data["Id"],
        entrypoint=tuple(cfg.get("Entrypoint") or ()),
        cmd=tuple(cfg.get("Cmd") or ()),
        workdir=cfg.get("WorkingDir") or "",
        **kw,
    )


def snapshot_image_info(client: docker.DockerClient, image_id: str) -> ImageInfo:
    """The :class:`ImageInfo` of a step snapshot image: its own id, and the ENTRYPOINT, CMD
    and WORKDIR of the image its container was created from (recorded as labels when it was
    committed, because a committed container carries cairn's keeper as its entrypoint).

    Raises:
        SandboxError: ``start_failed`` when the image is gone (``cairn clean --snapshots``
            removed it) or is not a cairn snapshot.
    """
    import json

    try:
        data = client.api.inspect_image(image_id)
    except docker.errors.NotFound:
        raise SandboxError(
            f"snapshot image {image_id[:19]} not found (removed by `cairn clean --snapshots`?)",
            kind=ErrorKind.START_FAILED,
        ) from None
    cfg = data.get("Config") or {}
    labels = cfg.get("Labels") or {}
    if labels.get("cairn.snapshot") != "1":
        raise SandboxError(f"image {image_id[:19]} is not a cairn snapshot", kind=ErrorKind.START_FAILED)
    return ImageInfo(
        ref=data["Id"],
        image_id=data["Id"],
        entrypoint=tuple(json.loads(labels.get("cairn.image_entrypoint") or "[]")),
        cmd=tuple(json.loads(labels.get("cairn.image_cmd") or "[]")),
        workdir=labels.get("cairn.image_workdir") or cfg.get("WorkingDir") or "",
    )


def _lookup(client: docker.DockerClient, ref: str, caches: SandboxCaches) -> ImageInfo | None:
    """The image ``ref``'s info, or ``None`` when the engine has no such image (``caches``:
    the job's memos, for :func:`translate`).

    Raises:
        SandboxLostError: the engine does not answer (issue #29: under load a trial starting
            while the engine restarted reached here and the SDK's ``ConnectionError`` ended the
            whole job).
        SandboxError: the engine refused the request (``start_failed``).
    """
    with translate(f"looking up image {ref}", caches, kind=ErrorKind.START_FAILED):
        try:
            return _image_info(client, ref)
        except docker.errors.ImageNotFound:
            return None
        except docker.errors.NotFound:
            return None


@dataclass
class BuildMemo:
    """What the docker backend remembers of one job's image builds
    (:meth:`cairn.sandbox.caches.SandboxCaches.memo` ``"docker.build"``)."""

    failures: dict[str, tuple[float, BuildError]] = field(default_factory=dict)
    """env hash → (``time.monotonic()`` of the failure, the error): repeated for
    :data:`FAILURE_TTL_SEC` instead of building again."""
    force_built: set[str] = field(default_factory=set)
    """env hashes rebuilt under ``--force-build`` already (once per job)."""


def build_memo(caches: SandboxCaches) -> BuildMemo:
    """The job's :class:`BuildMemo` in ``caches``."""
    return caches.memo("docker.build", BuildMemo)


def _lock_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cairn" / "locks"
    try:
        base.mkdir(parents=True, exist_ok=True)
        return base
    except OSError:
        alt = Path("/tmp") / f"cairn-locks-{os.getuid()}"
        alt.mkdir(parents=True, exist_ok=True)
        return alt


@contextlib.asynccontextmanager
async def _build_lock(caches: SandboxCaches, env_hash: str, deadline: float) -> AsyncIterator[None]:
    """One build per hash at a time: in the job (``caches``' lock in this event loop), then
    across jobs and processes (flock).

    Raises:
        TimeoutError: ``deadline`` (event-loop time) passed while waiting.
    """
    lock = caches.lock(env_hash)
    async with asyncio.timeout_at(deadline):
        await lock.acquire()
    try:
        fd = os.open(_lock_dir() / f"build-{env_hash[:32]}.lock", os.O_RDWR | os.O_CREAT, 0o666)
        try:
            await flock_async(fd, 0.2, deadline)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
    finally:
        lock.release()


def build_in_progress(env_hash: str) -> bool:
    """Whether some process holds the build lock of ``env_hash`` right now."""
    from cairn.lock import flock_held

    return flock_held(_lock_dir() / f"build-{env_hash[:32]}.lock")


async def ensure_image(client: docker.DockerClient, spec: SandboxSpec) -> ImageInfo:
    """Resolve the spec's image: reuse or build the Dockerfile, or take ``docker_image``.

    Bounded by ``spec.build_timeout_sec`` (waiting for another trial's build included).

    Returns:
        The :class:`ImageInfo`.

    Raises:
        BuildError: ``build_failed`` (with ``detail["log_tail"]``), ``build_timeout`` or
            ``image_not_found``.
        UnsupportedError: a compose environment (not this backend's job).
        TrialFailure: ``config_error`` when the spec names no environment.
        SandboxLostError: the engine does not answer.
    """
    env_dir = spec.env_dir
    dockerfile = env_dir / "Dockerfile" if env_dir else None
    has_df = bool(dockerfile and dockerfile.is_file())
    if spec.docker_image and not (spec.force_build and has_df):
        info = await in_thread(_lookup, client, spec.docker_image, spec.caches)
        if info is not None:
            return info
        if not has_df:
            return await _pull(client, spec)
    if not has_df:
        if find_compose_file(env_dir) is not None:
            raise UnsupportedError("a docker-compose environment needs the compose backend")
        raise TrialFailure(
            ErrorKind.CONFIG_ERROR,
            "no environment definition: neither environment/Dockerfile nor [environment].docker_image",
        )
    assert env_dir is not None
    env_hash = spec.env_hash or await in_thread(tree_hash, env_dir)
    tag = f"{IMAGE_REPO}:{env_hash[:16]}"
    deadline = asyncio.get_running_loop().time() + spec.build_timeout_sec
    memo = build_memo(spec.caches)
    try:
        async with _build_lock(spec.caches, env_hash, deadline):
            failed = memo.failures.get(env_hash)
            if failed and time.monotonic() - failed[0] < FAILURE_TTL_SEC:
                raise BuildError(failed[1].kind, str(failed[1]), detail=failed[1].detail)
            if not spec.force_build or env_hash in memo.force_built:
                info = await in_thread(_lookup, client, tag, spec.caches)
                if info is not None:
                    return info
            from cairn.sandbox.docker.buildkit import dockerfile_needs_buildkit

            builder = _build_buildkit if dockerfile_needs_buildkit(env_dir / "Dockerfile") else _build
            args = (env_hash, spec.force_build, deadline, spec.build_timeout_sec, spec.caches)
            info = await builder(client, env_dir, tag, *args)
            if spec.force_build:
                memo.force_built.add(env_hash)
            return info
    except TimeoutError:
        raise BuildError(
            ErrorKind.BUILD_TIMEOUT,
            f"waited longer than {spec.build_timeout_sec:g} s for another build of this environment",
        ) from None


async def _pull(client: docker.DockerClient, spec: SandboxSpec) -> ImageInfo:
    name = spec.docker_image
    assert name
    try:
        async with asyncio.timeout(min(spec.build_timeout_sec, 600.0)):
            await in_thread(client.images.pull, name)
    except TimeoutError:
        raise BuildError(ErrorKind.BUILD_TIMEOUT, f"pulling image {name!r} timed out") from None
    except Exception as exc:
        if is_engine_gone(exc, spec.caches) and not isinstance(exc, requests.exceptions.Timeout):
            raise SandboxLostError(f"Docker engine not reachable: {exc}") from exc
        raise BuildError(
            ErrorKind.IMAGE_NOT_FOUND,
            f"image {name!r} is not present and cannot be pulled: {exc}",
            detail={"image": name},
        ) from exc
    info = await in_thread(_lookup, client, name, spec.caches)
    if info is None:
        raise BuildError(ErrorKind.IMAGE_NOT_FOUND, f"image {name!r} not found")
    return info


_STEP_RE = re.compile(r"^Step \d+/\d+ : (\w+)")
_RUNNING_RE = re.compile(r"^ ---> Running in ([0-9a-f]{12,64})")
_BUILT_RE = re.compile(r"^Successfully built ([0-9a-f]{12,64})")


class _BuildRun:
    """One classic-builder build, consumed on a thread; cancellable by killing its container."""

    def __init__(
        self, client: docker.DockerClient, env_dir: Path, tag: str, env_hash: str, nocache: bool
    ) -> None:
        self.client, self.env_dir, self.tag = client, env_dir, tag
        self.labels = {LABEL_ENV_HASH: env_hash, "cairn.backend": "docker"}
        self.nocache = nocache
        self.log: deque[str] = deque(maxlen=LOG_TAIL_LINES)
        self.containers: list[str] = []
        self.step = ""
        self.error: str | None = None
        self.image_id: str | None = None
        self.cancelled = threading.Event()
        self._mu = threading.Lock()

    def run(self) -> None:
        stream = self.client.api.build(
            path=str(self.env_dir),
            dockerfile="Dockerfile",
            tag=self.tag,
            labels=self.labels,
            rm=True,
            forcerm=True,
            decode=True,
            pull=False,
            nocache=self.nocache,
        )
        for chunk in stream:
            if "stream" in chunk:
                for line in str(chunk["stream"]).splitlines():
                    self._line(line)
            elif "error" in chunk:
                self.error = str(chunk.get("error") or "build error").strip()
                self.log.append(self.error)
            elif isinstance(chunk.get("aux"), dict) and chunk["aux"].get("ID"):
                self.image_id = chunk["aux"]["ID"]

    def _line(self, line: str) -> None:
        if line.strip():
            self.log.append(line.rstrip())
        if m := _STEP_RE.match(line):
            self.step = m.group(1).upper()
        elif m := _RUNNING_RE.match(line):
            with self._mu:
                self.containers.append(m.group(1))
            if self.cancelled.is_set():
                self._kill(m.group(1))
        elif m := _BUILT_RE.match(line):
            self.image_id = self.image_id or m.group(1)

    def _kill(self, cid: str) -> None:
        with contextlib.suppress(Exception):
            self.client.api.kill(cid)

    def cancel(self) -> None:
        """Abort: kill the running intermediate container (and any started later)."""
        self.cancelled.set()
        with self._mu:
            cids = list(self.containers)
        for cid in cids:
            self._kill(cid)

    def cleanup(self) -> None:
        """Remove every intermediate container the build started (the daemon usually has)."""
        with self._mu:
            cids = list(self.containers)
        for cid in cids:
            with contextlib.suppress(Exception):
                self.client.api.remove_container(cid, force=True)

    @property
    def log_tail(self) -> str:
        return "\n".join(self.log)


async def _build_buildkit(
    client: docker.DockerClient,
    env_dir: Path,
    tag: str,
    env_hash: str,
    nocache: bool,
    deadline: float,
    timeout_sec: float,
    caches: SandboxCaches,
) -> ImageInfo:
    """Build a Dockerfile that needs BuildKit (:mod:`cairn.sandbox.docker.buildkit`).

    Raises:
        BuildError: see :func:`ensure_image`.
    """
    from cairn.sandbox.docker.buildkit import build_with_buildkit

    memo = build_memo(caches)
    labels = {LABEL_ENV_HASH: env_hash, "cairn.backend": "docker"}
    try:
        sec = await build_with_buildkit(
            env_dir, tag, labels, nocache=nocache, deadline=deadline, timeout_sec=timeout_sec
        )
    except BuildError as err:
        if err.kind is not ErrorKind.BUILD_TIMEOUT:
            memo.failures[env_hash] = (time.monotonic(), err)
        raise
    info = await in_thread(_lookup, client, tag, caches)
    if info is None:
        raise BuildError(ErrorKind.BUILD_FAILED, "the BuildKit build finished without an image")
    return ImageInfo(
        ref=info.ref,
        image_id=info.image_id,
        entrypoint=info.entrypoint,
        cmd=info.cmd,
        workdir=info.workdir,
        built=True,
        build_sec=sec,
    )


async def _build(
    client: docker.DockerClient,
    env_dir: Path,
    tag: str,
    env_hash: str,
    nocache: bool,
    deadline: float,
    timeout_sec: float,
    caches: SandboxCaches,
) -> ImageInfo:
    """Build on a thread until ``deadline`` (event-loop time); past it, abort the build.

    Raises:
        BuildError: see :func:`ensure_image`.
    """
    memo = build_memo(caches)
    run = _BuildRun(client, env_dir, tag, env_hash, nocache)
    loop = asyncio.get_running_loop()
    t0 = time.monotonic()
    fut = start_thread(run.run)
    try:
        await asyncio.wait_for(asyncio.shield(fut), max(0.0, deadline - loop.time()))
    except (TimeoutError, asyncio.CancelledError) as exc:
        run.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(asyncio.shield(fut), 30)
        await asyncio.shield(in_thread(run.cleanup))
        if isinstance(exc, asyncio.CancelledError):
            raise
        raise BuildError(
            ErrorKind.BUILD_TIMEOUT,
            f"building the environment took longer than {timeout_sec:g} s "
            f"(aborted at step {run.step or '?'})",
            detail={"log_tail": run.log_tail, "containers": list(run.containers)},
        ) from None
    except Exception as exc:
        await in_thread(run.cleanup)
        if is_engine_gone(exc, caches):
            raise SandboxLostError(f"Docker engine not reachable during build: {exc}") from exc
        msg = getattr(exc, "explanation", None) or str(exc)
        err = BuildError(
            ErrorKind.BUILD_FAILED,
            f"docker build failed: {msg}",
            detail={"log_tail": run.log_tail + "\n" + msg},
        )
        memo.failures[env_hash] = (time.monotonic(), err)
        raise err from exc
    await in_thread(run.cleanup)
    if run.error is not None:
        if run.step == "FROM":
            kind = ErrorKind.IMAGE_NOT_FOUND
            msg = f"base image not found and cannot be pulled: {run.error}"
        else:
            kind = ErrorKind.BUILD_FAILED
            msg = f"docker build failed at {run.step or 'parse'}: {run.error}"
        err = BuildError(
            kind, msg, detail={"log_tail": run.log_tail, "step": run.step, "containers": list(run.containers)}
        )
        memo.failures[env_hash] = (time.monotonic(), err)
        raise err
    info = await in_thread(_lookup, client, tag, caches)
    if info is None:
        raise BuildError(
            ErrorKind.BUILD_FAILED, "the build finished without an image", detail={"log_tail": run.log_tail}
        )
    return ImageInfo(
        ref=info.ref,
        image_id=info.image_id,
        entrypoint=info.entrypoint,
        cmd=info.cmd,
        workdir=info.workdir,
        built=True,
        build_sec=time.monotonic() - t0,
    )
