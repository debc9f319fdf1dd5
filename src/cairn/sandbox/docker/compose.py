"""Multi-container environments through the Docker Compose v2 CLI (design §3.1).

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
import tempfile
import uuid
from pathlib import Path
from typing import Any, ClassVar

import docker.errors

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
from cairn.sandbox.base import LOG_DIRS, Capabilities, NetworkMode, SandboxSpec, ServiceExit
from cairn.sandbox.docker.backend import DockerSandbox, _gather, container_labels
from cairn.sandbox.docker.build import (
    ImageInfo,
    _build_lock,
    engine_version,
    in_thread,
    make_client,
    task_fault_reason,
)
from cairn.sandbox.docker.compose_cli import _run_cli, compose_cli, compose_memo
from cairn.sandbox.docker.compose_files import (
    MAIN_SERVICE,
    PROTECTED_VARS,
    built_image_tag,
    cairn_file,
    check_compose_file,
    defaults_file,
    dump_yaml,
    harbor_variables,
    images_to_build,
    images_to_find,
    project_name,
    with_images,
)
from cairn.sandbox.docker.gateway import Layout, ensure_gateway_image, proxy_env

log = logging.getLogger(__name__)

UP_TIMEOUT_SEC = 180.0
"""Bound on ``docker compose up --wait`` once the images exist, seconds."""
DOWN_TIMEOUT_SEC = 120.0
PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"

_PREPARE_SCRIPT = """
set -e
for d in {logs}; do mkdir -p "$d"; find "$d" -mindepth 1 -delete; chmod 777 "$d"; done
mkdir -p "$1"
if command -v bash >/dev/null 2>&1; then echo bash; else echo sh; fi
""".format(logs=" ".join(LOG_DIRS))
_STEP_RE = re.compile(r"^Step \d+/\d+ : (\w+)", re.MULTILINE)


class ComposeSandbox(DockerSandbox):
    """A sandbox that is a compose project; the agent works in service ``main``.

    Args:
        spec: the frozen :class:`SandboxSpec`; ``env_dir`` holds the compose file.
    """

    name: ClassVar[str] = "docker"
    capabilities: ClassVar[Capabilities] = Capabilities(
        network_modes=frozenset(NetworkMode),
        cpu_limit=True,
        memory_limit=True,
        storage_limit=False,
        gpus=False,
        compose=True,
        dockerfile="full",
        gateway=True,
    )
    known_conformance_gaps: ClassVar[frozenset[str]] = frozenset({"snapshot_roundtrip"})
    """Step snapshots of compose projects are not built yet (docs/snapshots.md)."""

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
        check_compose_file(
            path,
            main_supplied=bool(spec.docker_image) or (Path(spec.env_dir) / "Dockerfile").is_file(),  # type: ignore[arg-type]
        )
        compose_cli(spec.caches)
        clash = sorted(PROTECTED_VARS & set(spec.env))
        if clash:
            warnings.append(
                f"[environment.env] sets {', '.join(clash)}: passed to service main, "
                "but not used to interpolate the compose file"
            )
        return warnings

    async def snapshot(self, labels):  # noqa: ANN001 - see Sandbox.snapshot
        """Not supported yet for compose projects (the restore would have to replace ``main``'s
        image in the project); :meth:`Sandbox.snapshot` documents the contract.

        Raises:
            UnsupportedError: always.
        """
        raise UnsupportedError("step snapshots of compose environments are not supported yet")

    @property
    def info(self) -> dict[str, str | None]:
        """The docker backend's info plus ``compose_project`` and ``compose_version``."""
        return {
            **super().info,
            "compose_project": self.project,
            "compose_version": compose_memo(self.spec.caches).version,
        }

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
        self._docker = compose_cli(spec.caches)
        self._compose_file = find_compose_file(spec.env_dir)
        assert self._compose_file is not None and spec.env_dir is not None
        self._client = await in_thread(make_client, spec.caches)
        self._engine_version = await in_thread(engine_version, self._client, spec.caches)
        env_hash = spec.env_hash or await in_thread(tree_hash, spec.env_dir)
        self._tmp = Path(tempfile.mkdtemp(prefix=f"{self.project}-"))
        main_image = built_image_tag(env_hash, MAIN_SERVICE)
        self._env = self._cli_env(main_image)
        build_main = (Path(spec.env_dir) / "Dockerfile").is_file() and (
            not spec.docker_image or spec.force_build
        )
        main_df = self._main_dockerfile() if build_main else None
        defaults = self._write(
            "cairn-defaults.yaml", defaults_file(spec, main_image, build_main=build_main, dockerfile=main_df)
        )
        self._files = [defaults, self._compose_file]
        net = self._make_network(self._client)
        gated = net.layout is Layout.GATEWAY
        if gated:  # otherwise the project's own networks are the trial's (none / isolated)
            net.own_internal = False
            self._net = net
        model = await self._config()
        try:
            doc = cairn_file(
                model,
                spec,
                project=self.project,
                env_hash=env_hash,
                labels=container_labels(spec),
                gateway_env=proxy_env() if gated else None,
            )
        except UnsupportedError as exc:
            raise TrialFailure(ErrorKind.CONFIG_ERROR, str(exc)) from None
        # The gateway (image, networks, container) comes up while the project builds.
        gateway = asyncio.ensure_future(self._start_gateway()) if gated else None
        self._files.append(self._write("cairn-override.yaml", doc))
        model = with_images(model, doc)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + spec.build_timeout_sec
        try:
            self._built = await self._build(model, env_hash, deadline)
            await self._find_images(model)
            await self._up(UP_TIMEOUT_SEC)
            await self._adopt_main()
        except BaseException:
            if gateway is not None:
                gateway.cancel()
                with contextlib.suppress(BaseException):
                    await asyncio.shield(gateway)
            raise
        if gateway is not None:
            await gateway  # raises the gateway's own failure
            await self._join_gateway()
        self._ready = True

    async def _start_gateway(self) -> None:
        assert self._client is not None and self._net is not None
        image, _ = await _gather(
            ensure_gateway_image(self._client, self.spec.caches), self._net.create_networks()
        )
        await self._net.start_gateway(image, self.spec.network_policy, "environment")

    async def _join_gateway(self) -> None:
        """Join the gateway to every network of ``main`` (alias ``cairn-gateway``)."""
        assert self._client is not None and self._net is not None and self._cid is not None
        data = await in_thread(self._client.api.inspect_container, self._cid)
        networks = sorted((data.get("NetworkSettings") or {}).get("Networks") or {})
        if not networks:
            raise SandboxError(
                "service main has no network to reach the egress gateway on (network_mode: none?)",
                kind=ErrorKind.START_FAILED,
            )
        await _gather(*(self._net.connect_gateway(n) for n in networks))
        await self._attach_public()

    def _main_dockerfile(self) -> Path | None:
        """A copy of environment/Dockerfile rewritten for the built-in BuildKit frontend when
        the rewrite changes it (a stock ``# syntax=`` line, ``--link``), else ``None``."""
        from cairn.sandbox.dockerfile_syntax import rewrite_for_builtin_frontend

        assert self._tmp is not None and self.spec.env_dir is not None
        text = (Path(self.spec.env_dir) / "Dockerfile").read_text(encoding="utf-8", errors="replace")
        new, notes = rewrite_for_builtin_frontend(text)
        if not notes:
            return None
        path = self._tmp / "Dockerfile.main"
        path.write_text(new, encoding="utf-8")
        return path

    def _needs_buildkit(self, model: dict[str, Any], services: list[str]) -> bool:
        """Whether any of these services' Dockerfiles uses BuildKit-only syntax."""
        from cairn.sandbox.docker.buildkit import dockerfile_needs_buildkit

        for svc in services:
            build = ((model.get("services") or {}).get(svc) or {}).get("build") or {}
            if not isinstance(build, dict) or not build.get("context"):
                continue
            df = Path(str(build.get("dockerfile") or "Dockerfile"))
            if not df.is_absolute():
                df = Path(str(build["context"])) / df
            if dockerfile_needs_buildkit(df):
                return True
        return False

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

    async def _compose(self, *args: str, timeout_sec: float, files: bool = True) -> tuple[int | None, str]:
        return await _run_cli(
            self._argv(*args, files=files), env=self._env, timeout_sec=timeout_sec, cwd=self._tmp
        )

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
        raise TrialFailure(
            ErrorKind.CONFIG_ERROR, f"docker compose rejected {name}: {msg}", detail={"output_tail": msg}
        )

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

    async def _build(self, model: dict[str, Any], env_hash: str, deadline: float) -> dict[str, str]:
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
            async with _build_lock(self.spec.caches, f"compose-{env_hash}", deadline):
                missing = [
                    svc
                    for svc, tag in wanted.items()
                    if self.spec.force_build or not await self._image_exists(tag)
                ]
                if not missing:
                    return {}
                env = self._env
                if self._needs_buildkit(model, missing):  # else the classic builder, as before
                    env = {**self._env, "DOCKER_BUILDKIT": "1", "COMPOSE_DOCKER_CLI_BUILD": "1"}
                code, out = await _run_cli(
                    self._argv("build", *missing),
                    env=env,
                    timeout_sec=max(1.0, deadline - loop.time()),
                    cwd=self._tmp,
                )
        except TimeoutError:
            code, out = None, ""
        if code != 0:
            await self._remove_build_containers(out)
        if code is None:
            raise BuildError(
                ErrorKind.BUILD_TIMEOUT,
                f"building the compose environment took longer than {self.spec.build_timeout_sec:g} s",
                detail={"log_tail": out[-6000:]},
            )
        if code == 0:  # trust the images, not only the exit code (a wrapper may lose it)
            for svc in missing:
                if not await self._image_exists(wanted[svc]):
                    code = -1
        if code != 0:
            tail = out[-6000:]
            steps = _STEP_RE.findall(out)
            if steps and steps[-1].upper() == "FROM":
                raise BuildError(
                    ErrorKind.IMAGE_NOT_FOUND,
                    "base image not found and cannot be pulled: "
                    f"{tail.strip().splitlines()[-1] if tail.strip() else ''}",
                    detail={"log_tail": tail},
                )
            last = tail.strip().splitlines()[-1] if tail.strip() else f"exit {code}"
            raise BuildError(
                ErrorKind.BUILD_FAILED,
                f"docker compose build failed: {last}",
                detail={"log_tail": tail, "services": missing},
            )
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
                raise BuildError(
                    ErrorKind.IMAGE_NOT_FOUND,
                    f"image {ref!r} of service `{svc}` is not present and cannot be pulled",
                    detail={"image": ref, "service": svc},
                )

    async def _up(self, timeout_sec: float) -> None:
        code, out = await self._compose(
            "up",
            "--detach",
            "--no-build",
            "--pull",
            "never",
            "--wait",
            "--wait-timeout",
            str(int(timeout_sec)),
            timeout_sec=timeout_sec + 30,
        )
        problems = await self._project_problems() if code == 0 else []
        if code == 0 and not problems:
            return
        logs = ""
        with contextlib.suppress(Exception):
            _, logs = await self._compose("logs", "--no-color", "--tail", "30", timeout_sec=30)
        why = "timed out" if code is None else f"exit {code}" if code else "; ".join(problems)
        msg = out.strip()[-1500:]
        detail: dict[str, Any] = {"output_tail": msg, "logs": logs[-4000:]}
        fault = task_fault_reason(out) if code is not None else None
        if fault is None and code is not None:
            fault = await self._exited_by_itself()
        if fault is not None:  # the task's own definition: the same on every attempt
            raise SandboxError(
                f"docker compose up failed: the task's services cannot start: {fault}",
                kind=ErrorKind.START_FAILED,
                detail=detail,
                task_fault=True,
            )
        raise SandboxError(
            f"docker compose up failed ({why}): {msg}", kind=ErrorKind.START_FAILED, detail=detail
        )

    async def _exited_by_itself(self) -> str | None:
        """A service whose own process exited with a failure code during ``up`` (not killed:
        137/143 may be the engine's doing), as ``service web exited 127``; else ``None``."""
        assert self._client is not None
        flt = {"label": [f"{PROJECT_LABEL}={self.project}"]}
        with contextlib.suppress(Exception):
            for c in await in_thread(self._client.api.containers, all=True, filters=flt):
                m = re.match(r"Exited \((\d+)\)", str(c.get("Status") or ""))
                if m and int(m.group(1)) not in (0, 137, 143):
                    svc = (c.get("Labels") or {}).get(SERVICE_LABEL)
                    return f"service {svc} exited {m.group(1)}"
        return None

    async def service_exit(self) -> ServiceExit | None:
        """``main``'s ENTRYPOINT's end (as the docker backend tracks it), else the first other
        service of the project (by name) whose container has exited non-zero since ``up``
        — including 137, a kill the trial did not ask for (the engine's OOM killer) — with
        its log tail; see :meth:`Sandbox.service_exit`. A service that exited 0, or is
        restarting under its restart policy, is not an end.
        """
        own = await super().service_exit()
        if (own is not None and own.exit_code != 0) or self._client is None or self._stopped:
            return own
        flt = {"label": [f"{PROJECT_LABEL}={self.project}"]}
        try:
            containers = await in_thread(self._client.api.containers, all=True, filters=flt)
        except Exception:  # noqa: BLE001 - the engine's trouble shows in the next operation
            return own
        ended: list[tuple[str, int, str]] = []
        for c in containers:
            svc = str((c.get("Labels") or {}).get(SERVICE_LABEL) or "")
            m = re.match(r"Exited \((\d+)\)", str(c.get("Status") or ""))
            if svc and svc != MAIN_SERVICE and c.get("State") == "exited" and m and int(m.group(1)) != 0:
                ended.append((svc, int(m.group(1)), str(c.get("Id"))))
        if not ended:
            return own
        svc, code, cid = min(ended)
        tail = ""
        with contextlib.suppress(Exception):
            raw = await in_thread(self._client.api.logs, cid, tail=30)
            tail = raw.decode("utf-8", "replace").strip()
        return ServiceExit(code, tail, service=svc)

    async def for_service(self, service: str) -> DockerSandbox:
        """A view of service ``service``'s container: the docker backend's exec and download
        aimed at it (collect hooks and artifacts with a ``service``). Its ``stop()`` does
        nothing: the project is stopped as a whole.

        Raises:
            UnsupportedError: the project has no running container for that service.
        """
        if service == MAIN_SERVICE:
            return self
        assert self._client is not None
        flt = {"label": [f"{PROJECT_LABEL}={self.project}", f"{SERVICE_LABEL}={service}"]}
        found = await in_thread(self._client.api.containers, filters=flt)
        if not found:
            raise UnsupportedError(f"compose service {service!r} has no running container")
        view = _ServiceView(self.spec)
        view._client, view._cid = self._client, found[0]["Id"]
        data = await in_thread(self._client.api.inspect_container, view._cid)
        view._workdir = (data.get("Config") or {}).get("WorkingDir") or "/"
        view._started = view._ready = True
        return view

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
            raise SandboxError(
                "service main has no container after docker compose up", kind=ErrorKind.START_FAILED
            )
        self._cid = found[0]["Id"]
        data = await in_thread(self._client.api.inspect_container, self._cid)
        img = await in_thread(self._client.api.inspect_image, data["Image"])
        cfg = img.get("Config") or {}
        self._image = ImageInfo(
            ref=(data.get("Config") or {}).get("Image") or data["Image"],
            image_id=img["Id"],
            entrypoint=tuple(cfg.get("Entrypoint") or ()),
            cmd=tuple(cfg.get("Cmd") or ()),
            workdir=(data.get("Config") or {}).get("WorkingDir") or "",
            built=MAIN_SERVICE in self._built,
        )
        self._workdir = self.spec.workdir or self._image.workdir or "/"
        code, out, err = await self._run(
            ["/bin/sh", "-c", _PREPARE_SCRIPT, "cairn-setup", self._workdir], user="0"
        )
        if code != 0:
            raise SandboxError(
                f"service main did not come up (exit {code}): {err.strip()}",
                kind=ErrorKind.START_FAILED,
                detail={"stderr": err[-4000:]},
            )
        self._shell = "bash" if out.strip().endswith("bash") else "sh"

    async def stop(self) -> None:
        """Take the whole project down (containers, networks, volumes); idempotent, never
        raises; with ``spec.keep`` a started project is left running."""
        if self.spec.keep and self._ready and not self._stopped:
            self._stopped = True
            log.warning(
                "keeping compose project %s (docker compose -p %s exec main %s)",
                self.project,
                self.project,
                self._shell,
            )
            return
        self._stopped = True
        if self._net is not None:  # it joined the project's networks: it goes first
            await self._net.remove_gateway()
        if self._started and self._client is not None and not await self._sweep() and self._docker:
            try:  # the engine refused a removal: let Compose try once
                code, out = await self._compose(
                    "down", "--volumes", "--remove-orphans", "--timeout", "0", timeout_sec=DOWN_TIMEOUT_SEC
                )
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
            results = await asyncio.gather(
                *(in_thread(gone, fn, i[key], **kw) for i in items), return_exceptions=True
            )
            for item, res in zip(items, results, strict=True):  # gather: one result each
                if isinstance(res, BaseException):
                    ok = False
                    log.warning(
                        "removing %s of compose project %s failed: %s", item.get(key), self.project, res
                    )

        try:
            await each(
                await in_thread(api.containers, all=True, filters=flt),
                api.remove_container,
                "Id",
                force=True,
                v=True,
            )
            await each(await in_thread(api.networks, filters=flt), api.remove_network, "Id")
            vols = (await in_thread(api.volumes, filters=flt) or {}).get("Volumes") or []
            await each(vols, api.remove_volume, "Name", force=True)
        except Exception as exc:  # noqa: BLE001 - listing failed: the engine may be gone
            log.warning("sweeping compose project %s failed: %s", self.project, exc)
            return False
        return ok


class _ServiceView(DockerSandbox):
    """One compose service's container, borrowed from a :class:`ComposeSandbox` (never owns
    the container or the client)."""

    async def stop(self) -> None:
        """Nothing: the compose project is stopped as a whole."""
        self._stopped = True
