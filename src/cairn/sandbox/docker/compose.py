"""Multi-container environments through the Docker Compose v2 CLI (SPEC §3.1).

A task whose ``environment/`` holds ``docker-compose.yaml`` runs as one compose project per
trial, named ``cairn-<trial id8>-<random>``; the agent's container is the service ``main``.
:class:`ComposeSandbox` is the docker backend with a different lifecycle: ``start()`` brings
the project up, then every operation (exec with process-tree kill, streamed transfers,
processes) is the docker backend's own, aimed at ``main``'s container; ``stop()`` takes the
whole project down — containers, networks, volumes, found by the project label, as
``down --volumes --remove-orphans --timeout 0`` would (that is the fallback) — also after a
failed or cancelled start.

Start, in order (all bounded by ``build_timeout_sec``, the up by :data:`UP_TIMEOUT_SEC`):

1. write the defaults file, resolve it with the task's file (``docker compose config``),
   write the cairn file from that model (:mod:`cairn.sandbox.docker.compose_files`);
2. build the images of services with ``build:`` that are missing (or all, with
   ``--force-build``) with the classic builder (``DOCKER_BUILDKIT=0``), one build per content
   hash at a time; a failing build is ``build_failed`` (``image_not_found`` when ``FROM``
   failed), with the log tail;
3. check that every prebuilt image exists locally (nothing is pulled): else ``image_not_found``;
4. ``up -d --no-build --pull never --wait``: services with healthchecks must be healthy, others
   running (a one-shot service that ``main`` waits for with
   ``service_completed_successfully`` may have exited 0);
5. create fresh ``/logs/{agent,verifier,artifacts}`` in ``main`` and its working dir.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shutil
import signal
import tempfile
import uuid
from collections import deque
from pathlib import Path
from typing import Any, ClassVar

import docker.errors

from cairn.errors import (
    BuildError,
    ErrorKind,
    SandboxError,
    SandboxLostError,
    TrialFailure,
    UnsupportedError,
)
from cairn.sandbox.base import LOG_DIRS, Capabilities, NetworkMode, SandboxSpec
from cairn.sandbox.docker.compose_files import (
    MAIN_SERVICE,
    PROTECTED_VARS,
    built_image_tag,
    cairn_file,
    check_compose_file,
    defaults_file,
    dump_yaml,
    find_compose_file,
    harbor_variables,
    images_to_build,
    images_to_find,
    project_name,
    with_images,
)
from cairn.sandbox.docker.backend import DockerSandbox, container_labels
from cairn.sandbox.docker.build import (
    ImageInfo,
    _build_lock,
    engine_version,
    hash_env_dir,
    in_thread,
    make_client,
)

log = logging.getLogger(__name__)

UP_TIMEOUT_SEC = 180.0
"""Bound on ``docker compose up --wait`` once the images exist, seconds."""
DOWN_TIMEOUT_SEC = 120.0
OUTPUT_TAIL_BYTES = 64 * 1024
PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"

_PREPARE_SCRIPT = """
set -e
for d in {logs}; do mkdir -p "$d"; find "$d" -mindepth 1 -delete; chmod 777 "$d"; done
mkdir -p "$1"
if command -v bash >/dev/null 2>&1; then echo bash; else echo sh; fi
""".format(logs=" ".join(LOG_DIRS))
_STEP_RE = re.compile(r"^Step \d+/\d+ : (\w+)", re.MULTILINE)
_COMPOSE_OK: dict[str, str] = {}


def compose_cli() -> str:
    """The ``docker`` CLI path, after checking that ``docker compose`` (v2) answers.

    Raises:
        UnsupportedError: no ``docker`` CLI, or no Compose v2 plugin.
    """
    if "docker" in _COMPOSE_OK:
        return _COMPOSE_OK["docker"]
    exe = shutil.which("docker")
    if exe is None:
        raise UnsupportedError("compose environments need the docker CLI with the Compose v2 "
                               "plugin (`docker compose`); no `docker` on PATH")
    import subprocess

    try:
        r = subprocess.run([exe, "compose", "version", "--short"], capture_output=True,
                           encoding="utf-8", errors="replace", timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UnsupportedError(f"`docker compose version` failed: {exc}") from None
    if r.returncode != 0 or not r.stdout.strip():
        raise UnsupportedError("compose environments need Docker Compose v2 (`docker compose`); "
                               f"`docker compose version` said: {(r.stderr or r.stdout)[-300:]}")
    _COMPOSE_OK["docker"] = exe
    _COMPOSE_OK["version"] = r.stdout.strip()
    return exe


async def _run_cli(argv: list[str], *, env: dict[str, str], timeout_sec: float,
                   cwd: Path | None = None) -> tuple[int | None, str]:
    """Run a CLI command in its own process group; (exit code or None on timeout, output tail).

    Cancellation and timeouts kill the whole group.
    """
    proc = await asyncio.create_subprocess_exec(
        *argv, env=env, cwd=cwd, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, start_new_session=True)
    chunks: deque[bytes] = deque()
    size = 0

    async def read() -> None:
        nonlocal size
        assert proc.stdout is not None
        while data := await proc.stdout.read(65536):
            chunks.append(data)
            size += len(data)
            while size > OUTPUT_TAIL_BYTES and len(chunks) > 1:
                size -= len(chunks.popleft())

    def kill() -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)

    code: int | None = None
    try:
        async with asyncio.timeout(timeout_sec):
            await read()
            code = await proc.wait()
    except TimeoutError:
        kill()
        await proc.wait()
    except BaseException:
        kill()
        with contextlib.suppress(BaseException):
            await asyncio.shield(proc.wait())
        raise
    return code, b"".join(chunks).decode("utf-8", "replace")[-OUTPUT_TAIL_BYTES:]


class ComposeSandbox(DockerSandbox):
    """A sandbox that is a compose project; the agent works in service ``main``.

    Args:
        spec: the frozen :class:`SandboxSpec`; ``env_dir`` holds the compose file.
    """

    name: ClassVar[str] = "docker"
    capabilities: ClassVar[Capabilities] = Capabilities(
        network_modes=frozenset({NetworkMode.PUBLIC, NetworkMode.NO_NETWORK}),
        cpu_limit=True, memory_limit=True, storage_limit=False, gpus=False, compose=True,
        dockerfile="full")

    def __init__(self, spec: SandboxSpec) -> None:
        super().__init__(spec)
        self.project = project_name(spec.trial_id, uuid.uuid4().hex[:6])
        self._tmp: Path | None = None
        self._files: list[Path] = []
        self._env: dict[str, str] = {}
        self._docker = ""
        self._compose_file: Path | None = None
        self._built: dict[str, str] = {}

    @classmethod
    def check(cls, spec: SandboxSpec) -> list[str]:
        """Check the spec, the compose file and the Compose CLI before anything starts.

        Raises:
            UnsupportedError: see :meth:`Sandbox.check`; no compose file, no ``main`` service,
                or no ``docker compose``.
        """
        warnings = super().check(spec)
        path = find_compose_file(spec.env_dir)
        if path is None:
            raise UnsupportedError("the compose backend needs environment/docker-compose.yaml")
        check_compose_file(path)
        compose_cli()
        clash = sorted(PROTECTED_VARS & set(spec.env))
        if clash:
            warnings.append(f"[environment.env] sets {', '.join(clash)}: passed to service main, "
                            "but not used to interpolate the compose file")
        return warnings

    @property
    def info(self) -> dict[str, str | None]:
        """The docker backend's info plus ``compose_project`` and ``compose_version``."""
        return {**super().info, "compose_project": self.project,
                "compose_version": _COMPOSE_OK.get("version")}

    # ---- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        """Build what is missing and bring the project up (see the module docstring).

        Raises:
            UnsupportedError: see :meth:`check`.
            TrialFailure: ``config_error`` when Compose rejects the files, or ``no-network``
                meets a service or network that reaches outside.
            BuildError: ``build_failed``, ``build_timeout`` or ``image_not_found``.
            SandboxError: ``start_failed``.
            SandboxLostError: the engine does not answer.
        """
        if self._started or self._stopped:
            raise SandboxError("a sandbox can be started once", kind=ErrorKind.START_FAILED)
        self._started = True
        spec = self.spec
        self.warnings = self.check(spec)
        self._docker = compose_cli()
        self._compose_file = find_compose_file(spec.env_dir)
        assert self._compose_file is not None and spec.env_dir is not None
        self._client = await in_thread(make_client)
        self._engine_version = await in_thread(engine_version, self._client)
        env_hash = spec.env_hash or await in_thread(hash_env_dir, spec.env_dir)
        self._tmp = Path(tempfile.mkdtemp(prefix=f"{self.project}-"))
        main_image = built_image_tag(env_hash, MAIN_SERVICE)
        self._env = self._cli_env(main_image)
        build_main = (Path(spec.env_dir) / "Dockerfile").is_file() and \
            (not spec.docker_image or spec.force_build)
        defaults = self._write("cairn-defaults.yaml",
                               defaults_file(spec, main_image, build_main=build_main))
        self._files = [defaults, self._compose_file]
        model = await self._config()
        try:
            doc = cairn_file(model, spec, project=self.project, env_hash=env_hash,
                             labels=container_labels(spec))
        except UnsupportedError as exc:
            raise TrialFailure(ErrorKind.CONFIG_ERROR, str(exc)) from None
        self._files.append(self._write("cairn-override.yaml", doc))
        model = with_images(model, doc)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + spec.build_timeout_sec
        self._built = await self._build(model, env_hash, deadline)
        await self._find_images(model)
        await self._up(UP_TIMEOUT_SEC)
        await self._adopt_main()
        self._ready = True

    def _cli_env(self, main_image: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("COMPOSE_")}
        env.update(harbor_variables(self.spec, self.project, main_image))
        env.update({k: v for k, v in self.spec.env.items() if k not in PROTECTED_VARS})
        env.update(DOCKER_BUILDKIT="0", COMPOSE_DOCKER_CLI_BUILD="0")
        return env

    def _write(self, name: str, doc: dict[str, Any]) -> Path:
        assert self._tmp is not None
        path = self._tmp / name
        path.write_text(dump_yaml(doc), encoding="utf-8")
        return path

    def _argv(self, *args: str, files: bool = True) -> list[str]:
        argv = [self._docker, "compose", "--project-name", self.project]
        if files and self._files:
            argv += ["--project-directory", str(Path(self.spec.env_dir or ".").resolve())]
            for f in self._files:
                argv += ["-f", str(f)]
        return [*argv, *args]

    async def _compose(self, *args: str, timeout_sec: float, files: bool = True
                       ) -> tuple[int | None, str]:
        return await _run_cli(self._argv(*args, files=files), env=self._env,
                              timeout_sec=timeout_sec, cwd=self._tmp)

    async def _config(self) -> dict[str, Any]:
        """The resolved model of the current files (``docker compose config --format json``).

        Raises:
            TrialFailure: ``config_error`` with Compose's message.
        """
        code, out = await self._compose("config", "--format", "json", timeout_sec=60)
        start = out.find("{")
        if code == 0 and start >= 0:
            with contextlib.suppress(ValueError):
                model = json.loads(out[start:])
                if isinstance(model, dict) and isinstance(model.get("services"), dict):
                    return model
        msg = out.strip()[-2000:]
        name = self._compose_file.name if self._compose_file else "the compose file"
        raise TrialFailure(ErrorKind.CONFIG_ERROR, f"docker compose rejected {name}: {msg}",
                           detail={"output_tail": msg})

    async def _image_exists(self, ref: str) -> bool:
        assert self._client is not None
        try:
            await in_thread(self._client.api.inspect_image, ref)
            return True
        except docker.errors.NotFound:
            return False
        except docker.errors.APIError:
            return False
        except Exception as exc:  # the engine is gone
            raise SandboxLostError(f"Docker engine not reachable: {exc}") from exc

    async def _build(self, model: dict[str, Any], env_hash: str, deadline: float
                     ) -> dict[str, str]:
        """Build the missing images of services with ``build:`` (one build per hash at a time).

        Returns:
            Service → tag of the images this call built.

        Raises:
            BuildError: see :meth:`start`.
        """
        wanted = images_to_build(model)
        if not wanted:
            return {}
        loop = asyncio.get_running_loop()
        try:
            async with _build_lock(f"compose-{env_hash}", deadline):
                missing = [svc for svc, tag in wanted.items()
                           if self.spec.force_build or not await self._image_exists(tag)]
                if not missing:
                    return {}
                code, out = await self._compose(
                    "build", *missing, timeout_sec=max(1.0, deadline - loop.time()))
        except TimeoutError:
            code, out = None, ""
        if code != 0:
            await self._remove_build_containers(out)
        if code is None:
            raise BuildError(ErrorKind.BUILD_TIMEOUT,
                             f"building the compose environment took longer than "
                             f"{self.spec.build_timeout_sec:g} s",
                             detail={"log_tail": out[-6000:]})
        if code == 0:  # trust the images, not only the exit code (a wrapper may lose it)
            for svc in missing:
                if not await self._image_exists(wanted[svc]):
                    code = -1
        if code != 0:
            tail = out[-6000:]
            steps = _STEP_RE.findall(out)
            if steps and steps[-1].upper() == "FROM":
                raise BuildError(ErrorKind.IMAGE_NOT_FOUND,
                                 "base image not found and cannot be pulled: "
                                 f"{tail.strip().splitlines()[-1] if tail.strip() else ''}",
                                 detail={"log_tail": tail})
            last = tail.strip().splitlines()[-1] if tail.strip() else f"exit {code}"
            raise BuildError(ErrorKind.BUILD_FAILED, f"docker compose build failed: {last}",
                             detail={"log_tail": tail, "services": missing})
        return {svc: wanted[svc] for svc in missing}

    async def _remove_build_containers(self, build_output: str) -> None:
        """Remove the intermediate containers a failed classic build left (they carry no labels,
        so ``cairn clean`` could never find them): the ids its ``Running in`` lines name."""
        assert self._client is not None
        ids = set(re.findall(r"Running in ([0-9a-f]{12,64})", build_output))
        for cid in ids:
            with contextlib.suppress(Exception):
                await in_thread(self._client.api.remove_container, cid, force=True)

    async def _find_images(self, model: dict[str, Any]) -> None:
        """Every prebuilt image must be here: nothing is pulled.

        Raises:
            BuildError: ``image_not_found`` naming the service and image.
        """
        for svc, ref in images_to_find(model).items():
            if not await self._image_exists(ref):
                raise BuildError(ErrorKind.IMAGE_NOT_FOUND,
                                 f"image {ref!r} of service `{svc}` is not present and cannot "
                                 "be pulled", detail={"image": ref, "service": svc})

    async def _up(self, timeout_sec: float) -> None:
        code, out = await self._compose(
            "up", "--detach", "--no-build", "--pull", "never", "--wait",
            "--wait-timeout", str(int(timeout_sec)), timeout_sec=timeout_sec + 30)
        problems = await self._project_problems() if code == 0 else []
        if code == 0 and not problems:
            return
        logs = ""
        with contextlib.suppress(Exception):
            _, logs = await self._compose("logs", "--no-color", "--tail", "30", timeout_sec=30)
        why = "timed out" if code is None else f"exit {code}" if code else "; ".join(problems)
        msg = out.strip()[-1500:]
        raise SandboxError(f"docker compose up failed ({why}): {msg}",
                           kind=ErrorKind.START_FAILED,
                           detail={"output_tail": msg, "logs": logs[-4000:]})

    async def _main_containers(self) -> list[dict[str, Any]]:
        assert self._client is not None
        flt = {"label": [f"{PROJECT_LABEL}={self.project}", f"{SERVICE_LABEL}={MAIN_SERVICE}"]}
        return await in_thread(self._client.api.containers, all=True, filters=flt)

    async def _project_problems(self) -> list[str]:
        """What is wrong with the project after ``up``, judged from the containers themselves
        (not only from the CLI's exit code, which a wrapper around the plugin may lose): ``main``
        must run; every service must run (healthy when it has a healthcheck) or have exited 0.
        """
        assert self._client is not None
        flt = {"label": [f"{PROJECT_LABEL}={self.project}"]}
        problems: list[str] = []
        containers = await in_thread(self._client.api.containers, all=True, filters=flt)
        services = {(c.get("Labels") or {}).get(SERVICE_LABEL): c for c in containers}
        if MAIN_SERVICE not in services:
            problems.append("service main has no container")
        for svc, c in sorted(services.items(), key=lambda kv: str(kv[0])):
            state, status = c.get("State"), str(c.get("Status") or "")
            if state == "running" and "unhealthy" not in status and "starting" not in status:
                continue
            if state == "exited" and svc != MAIN_SERVICE and status.startswith("Exited (0)"):
                continue
            problems.append(f"service {svc}: {status or state}")
        return problems

    async def _adopt_main(self) -> None:
        """Point the docker backend's operations at ``main``'s container and prepare it."""
        assert self._client is not None
        found = await self._main_containers()
        if not found:
            raise SandboxError("service main has no container after docker compose up",
                               kind=ErrorKind.START_FAILED)
        self._cid = found[0]["Id"]
        data = await in_thread(self._client.api.inspect_container, self._cid)
        img = await in_thread(self._client.api.inspect_image, data["Image"])
        cfg = img.get("Config") or {}
        self._image = ImageInfo(ref=(data.get("Config") or {}).get("Image") or data["Image"],
                                image_id=img["Id"], entrypoint=tuple(cfg.get("Entrypoint") or ()),
                                cmd=tuple(cfg.get("Cmd") or ()),
                                workdir=(data.get("Config") or {}).get("WorkingDir") or "",
                                built=MAIN_SERVICE in self._built)
        self._workdir = self.spec.workdir or self._image.workdir or "/"
        code, out, err = await self._run(["/bin/sh", "-c", _PREPARE_SCRIPT, "cairn-setup",
                                          self._workdir], user="0")
        if code != 0:
            raise SandboxError(f"service main did not come up (exit {code}): {err.strip()}",
                               kind=ErrorKind.START_FAILED, detail={"stderr": err[-4000:]})
        self._shell = "bash" if out.strip().endswith("bash") else "sh"

    async def stop(self) -> None:
        """Take the whole project down (containers, networks, volumes); idempotent, never
        raises; with ``spec.keep`` a started project is left running."""
        if self.spec.keep and self._ready and not self._stopped:
            self._stopped = True
            log.warning("keeping compose project %s (docker compose -p %s exec main %s)",
                        self.project, self.project, self._shell)
            return
        self._stopped = True
        if self._started and self._client is not None and not await self._sweep() \
                and self._docker:
            try:  # the engine refused a removal: let Compose try once
                code, out = await self._compose("down", "--volumes", "--remove-orphans",
                                                "--timeout", "0", timeout_sec=DOWN_TIMEOUT_SEC)
                if code != 0:
                    log.warning("docker compose down of %s: %s", self.project, out[-500:])
            except Exception as exc:  # noqa: BLE001 - stop never raises; labels let clean finish
                log.warning("docker compose down of %s failed: %s", self.project, exc)
        self._cid = None
        await super().stop()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    async def _sweep(self) -> bool:
        """Remove the project's containers (SIGKILL, with their anonymous volumes), then its
        networks and volumes, by the project label — what ``docker compose down --volumes
        --remove-orphans --timeout 0`` does, without a CLI round trip.

        Returns:
            Whether everything went (False: some removal failed; it was logged).
        """
        client = self._client
        if client is None:
            return True
        api = client.api
        flt = {"label": [f"{PROJECT_LABEL}={self.project}"]}
        ok = True

        def gone(fn, *args, **kw) -> None:
            with contextlib.suppress(docker.errors.NotFound):
                fn(*args, **kw)

        async def each(items, fn, key, **kw) -> None:
            nonlocal ok
            results = await asyncio.gather(*(in_thread(gone, fn, i[key], **kw) for i in items),
                                           return_exceptions=True)
            for item, res in zip(items, results):
                if isinstance(res, BaseException):
                    ok = False
                    log.warning("removing %s of compose project %s failed: %s", item.get(key),
                                self.project, res)

        try:
            await each(await in_thread(api.containers, all=True, filters=flt),
                       api.remove_container, "Id", force=True, v=True)
            await each(await in_thread(api.networks, filters=flt), api.remove_network, "Id")
            vols = (await in_thread(api.volumes, filters=flt) or {}).get("Volumes") or []
            await each(vols, api.remove_volume, "Name", force=True)
        except Exception as exc:  # noqa: BLE001 - listing failed: the engine may be gone
            log.warning("sweeping compose project %s failed: %s", self.project, exc)
            return False
        return ok
