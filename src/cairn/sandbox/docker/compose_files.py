"""The files and variables cairn lays over a task's ``docker-compose.yaml`` (design §3.1).

Pure functions, no Docker: :mod:`cairn.sandbox.docker.compose` runs ``docker compose`` with

1. a *defaults* file first (Harbor's base and build files in one): ``main`` gets
   ``command: sh -c "sleep infinity"``, ``init: true``, the ``[environment.env]`` variables,
   the three ``/logs`` folders as project volumes, and — when ``environment/Dockerfile`` (or
   ``docker_image``) exists — its image; the task's file comes next and overrides any of it;
2. the task's compose file;
3. a *cairn* file last, made from the resolved model (``docker compose config``), that always
   wins: ownership labels on every service, network and volume; project-scoped names for
   networks, volumes and fixed ``container_name`` values; no host ports; content-hash tags for
   every built image; ``cpus``/``memory_mb`` on ``main``; and, under ``no-network``, every
   network of the project made internal with no address on the host.

Compose interpolates the task's file with :func:`harbor_variables` (the variables Harbor gives
compose tasks) and the resolved ``[environment.env]`` values on top, as Harbor does.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from cairn.errors import UnsupportedError
from cairn.sandbox.base import NetworkMode, SandboxSpec

MAIN_SERVICE = "main"
IMAGE_REPO = "cairn-env"
"""Built images are tagged ``cairn-env:<env_hash[:16]>-compose-<service>``."""

LOG_VOLUMES = {
    "agent": "cairn_logs_agent",
    "verifier": "cairn_logs_verifier",
    "artifacts": "cairn_logs_artifacts",
}
"""Project volumes mounted on ``main`` at ``/logs/<key>`` (Harbor's host log folders)."""
ALL_LOGS_VOLUME = "cairn_logs"

PROTECTED_VARS = frozenset(
    {
        "PATH",
        "HOME",
        "DOCKER_HOST",
        "DOCKER_CONFIG",
        "DOCKER_CONTEXT",
        "DOCKER_CERT_PATH",
        "DOCKER_TLS_VERIFY",
        "DOCKER_BUILDKIT",
        "COMPOSE_DOCKER_CLI_BUILD",
        "TMPDIR",
    }
)
"""Variables of the ``docker compose`` process itself that ``[environment.env]`` must not
replace (its value still reaches ``main``, written into the defaults file)."""

INHIBIT_IPV4 = "com.docker.network.bridge.inhibit_ipv4"
_EGRESS_MODES = ("host", "bridge", "default")


class Reset:
    """Renders as YAML ``!reset []``: Compose's way for a later file to clear a list."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(Reset, lambda d, _v: d.represent_sequence("!reset", []))


def dump_yaml(doc: Mapping[str, Any]) -> str:
    """Render a compose override document as YAML (``Reset`` values as ``!reset []``)."""
    return yaml.dump(dict(doc), Dumper=_Dumper, sort_keys=False, default_flow_style=False)


def check_compose_file(path: Path, *, main_supplied: bool = False) -> None:
    """Check, before anything starts, that a compose file is YAML with a ``main`` service, or
    that cairn supplies ``main`` (Harbor 0.26 does the same: ``main`` is built from
    ``environment/Dockerfile`` or runs ``[environment].docker_image``, on the project's default
    network with the task's services).

    Args:
        path: the task's compose file.
        main_supplied: ``environment/Dockerfile`` or ``docker_image`` exists, so the defaults
            file defines ``main`` when the task's file does not.

    Raises:
        UnsupportedError: the file is not a YAML mapping, or has no ``services.main`` and
            nothing to make one from.
    """
    from cairn.sandbox.compose_check import compose_file_problem

    problem = compose_file_problem(path, main_supplied=main_supplied)
    if problem is not None:
        raise UnsupportedError(f"{path.name}: {problem[0]}")


def project_name(trial_id: str, suffix: str) -> str:
    """A compose project name unique per trial: ``cairn-<trial id8>-<suffix>`` (lower case)."""
    tid = re.sub(r"[^a-z0-9]", "", trial_id.lower())[:8] or "adhoc"
    return re.sub(r"[^a-z0-9_-]", "-", f"cairn-{tid}-{suffix}".lower())


def built_image_tag(env_hash: str, service: str) -> str:
    """The tag cairn gives the image it builds for ``service`` (shared by every trial)."""
    svc = re.sub(r"[^a-z0-9_.-]", "-", service.lower())
    return f"{IMAGE_REPO}:{env_hash[:16]}-compose-{svc}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(float(value))


def host_memory_mb() -> int:
    """Physical memory of this host in MiB (what ``MEMORY`` says when no limit is set)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20))
    except (ValueError, OSError, AttributeError):
        return 1 << 20


def harbor_variables(spec: SandboxSpec, project: str, main_image: str) -> dict[str, str]:
    """The variables Harbor (and Terminal-Bench) give a compose file, with cairn's values.

    ``CPUS``/``MEMORY`` are the environment's limits (the host's size when unset, so a file that
    uses them imposes nothing extra); the ``HOST_*`` log "paths" name project volumes that
    cairn mounts on ``main`` at the ``ENV_*`` paths, so a sidecar that mounts one shares that
    folder with ``main``.

    Args:
        spec: the sandbox spec.
        project: the compose project name.
        main_image: the tag of ``main``'s image.

    Returns:
        Variable name → value.
    """
    cpus = _number(spec.cpus) if spec.cpus else str(os.cpu_count() or 1)
    memory = f"{int(spec.memory_mb)}M" if spec.memory_mb else f"{host_memory_mb()}M"
    env_dir = str(Path(spec.env_dir).resolve()) if spec.env_dir else ""
    v = {
        "MAIN_IMAGE_NAME": main_image,
        "CONTEXT_DIR": env_dir,
        "CPUS": cpus,
        "MEMORY": memory,
        "TEST_DIR": "/tests",
        "HOST_AGENT_LOGS_PATH": LOG_VOLUMES["agent"],
        "HOST_VERIFIER_LOGS_PATH": LOG_VOLUMES["verifier"],
        "HOST_ARTIFACTS_PATH": LOG_VOLUMES["artifacts"],
        "ENV_AGENT_LOGS_PATH": "/logs/agent",
        "ENV_VERIFIER_LOGS_PATH": "/logs/verifier",
        "ENV_ARTIFACTS_PATH": "/logs/artifacts",
        "T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME": main_image,
        "T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME": f"{project}-main",
        "T_BENCH_TASK_DOCKER_NAME_PREFIX": project,
        "T_BENCH_TEST_DIR": "/tests",
        "T_BENCH_CONTAINER_LOGS_PATH": "/logs",
        "T_BENCH_CONTAINER_AGENT_LOGS_PATH": "/logs/agent",
        "T_BENCH_TASK_LOGS_PATH": ALL_LOGS_VOLUME,
        "T_BENCH_TASK_AGENT_LOGS_PATH": LOG_VOLUMES["agent"],
    }
    if spec.docker_image:
        v["PREBUILT_IMAGE_NAME"] = spec.docker_image
    return v


def defaults_file(
    spec: SandboxSpec, main_image: str, *, build_main: bool, dockerfile: Path | None = None
) -> dict[str, Any]:
    """The first file: defaults for ``main`` that the task's own file may override.

    Args:
        spec: the sandbox spec (``env`` keys, ``docker_image``, ``env_dir``).
        main_image: the tag for ``main``'s image.
        build_main: build ``environment/Dockerfile`` as ``main``'s image (else, with
            ``docker_image``, use that image; else the task's file must say).
        dockerfile: the Dockerfile to build ``main`` from when not ``environment/Dockerfile``
            (a copy rewritten for the engine's built-in BuildKit frontend).

    Returns:
        The compose document.
    """
    environment: dict[str, str | None] = {}
    for key, value in spec.env.items():
        environment[key] = value.replace("$", "$$") if key in PROTECTED_VARS else None
    main: dict[str, Any] = {
        "command": ["sh", "-c", "sleep infinity"],
        "init": True,
        "volumes": [f"{vol}:/logs/{key}" for key, vol in LOG_VOLUMES.items()],
    }
    if environment:
        main["environment"] = [k if v is None else f"{k}={v}" for k, v in environment.items()]
    if build_main:
        main["build"] = {"context": str(Path(spec.env_dir).resolve())}  # type: ignore[arg-type]
        if dockerfile is not None:
            main["build"]["dockerfile"] = str(dockerfile)
        main["image"] = main_image
    elif spec.docker_image:
        main["image"] = spec.docker_image
    volumes: dict[str, dict[str, Any]] = {vol: {} for vol in (*LOG_VOLUMES.values(), ALL_LOGS_VOLUME)}
    return {"services": {MAIN_SERVICE: main}, "volumes": volumes}


def _refuse_egress(model: Mapping[str, Any]) -> None:
    """Under no-network, refuse what would connect a service to the outside."""
    for name, net in (model.get("networks") or {}).items():
        net = net or {}
        if net.get("external"):
            raise UnsupportedError(
                f'network_mode = "no-network": the compose network `{name}` is external; '
                "under no-network every network of a compose environment is the project's own "
                "and internal"
            )
        driver = net.get("driver")
        if driver not in (None, "", "bridge"):
            raise UnsupportedError(
                f'network_mode = "no-network": the compose network `{name}` uses driver '
                f"{driver!r}; only bridge networks can be made internal"
            )
    for svc, conf in (model.get("services") or {}).items():
        mode = str((conf or {}).get("network_mode") or "")
        if mode in _EGRESS_MODES or mode.startswith("container:"):
            raise UnsupportedError(
                f'network_mode = "no-network": service `{svc}` sets network_mode: {mode}, '
                "which reaches outside the project; under no-network services use the "
                "project's internal networks (or network_mode: none / service:<name>)"
            )


def cairn_file(
    model: Mapping[str, Any],
    spec: SandboxSpec,
    *,
    project: str,
    env_hash: str,
    labels: Mapping[str, str],
    gateway_env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The last file, made from the resolved model of the defaults and the task's file.

    Args:
        model: ``docker compose config --format json`` of the first two files.
        spec: the sandbox spec (limits, network mode).
        project: the compose project name.
        env_hash: content hash of the environment folder (tags of built images).
        labels: cairn's ownership labels (``cairn.job``, ``cairn.trial`` …).
        gateway_env: set when the project sits behind the egress gateway: every network is
            made internal (as under ``no-network``) and ``main`` gets these variables
            (``HTTP_PROXY`` …; ``NO_PROXY`` gains every service name).

    Returns:
        The compose document.

    Raises:
        UnsupportedError: under ``no-network`` or behind the gateway, a service or network
            that reaches outside.
    """
    no_network = spec.network_mode is NetworkMode.NO_NETWORK and not gateway_env
    sealed = no_network or gateway_env is not None
    if sealed:
        _refuse_egress(model)
    lab = {**labels, "cairn.compose_project": project}
    services: dict[str, Any] = {}
    renamed: dict[str, str] = {}
    for svc, conf in (model.get("services") or {}).items():
        if (conf or {}).get("build") is not None:
            tag = built_image_tag(env_hash, svc)
            if conf.get("image"):
                renamed[str(conf["image"])] = tag
    for svc, conf in (model.get("services") or {}).items():
        conf = conf or {}
        out: dict[str, Any] = {"labels": dict(lab)}
        if conf.get("build") is not None:
            out["image"] = built_image_tag(env_hash, svc)
            out["build"] = {"labels": {"cairn.env_hash": env_hash, "cairn.backend": "docker"}}
        elif str(conf.get("image") or "") in renamed:
            out["image"] = renamed[str(conf["image"])]
        if conf.get("container_name"):
            out["container_name"] = f"{project}-{svc}"
        if conf.get("ports"):
            out["ports"] = Reset()
        if svc == MAIN_SERVICE:
            out.update(_limits(conf, spec))
            if gateway_env is not None:
                # main gets a host name known in advance (its own, else "main"), so
                # NO_PROXY names it with the service names (issue 29)
                own = {str(n) for n in (model.get("services") or {})}
                if not conf.get("network_mode"):  # a shared namespace takes no host name
                    out["hostname"] = str(conf.get("hostname") or MAIN_SERVICE)
                    own.add(out["hostname"])
                names = ",".join(sorted(own))
                env = dict(gateway_env)
                for key in ("NO_PROXY", "no_proxy"):
                    if key in env:
                        env[key] = f"{env[key]},{names}"
                out["environment"] = env
        services[svc] = out
    doc: dict[str, Any] = {"services": services}
    networks: dict[str, Any] = {}
    for name, net in (model.get("networks") or {}).items():
        net = net or {}
        if net.get("external"):
            continue
        entry: dict[str, Any] = {"name": f"{project}_{name}", "labels": dict(lab)}
        if sealed:
            entry["internal"] = True
            entry["driver_opts"] = {INHIBIT_IPV4: "true"}
        networks[name] = entry
    if networks:
        doc["networks"] = networks
    volumes: dict[str, Any] = {}
    for name, vol in (model.get("volumes") or {}).items():
        if (vol or {}).get("external"):
            continue
        volumes[name] = {"name": f"{project}_{name}", "labels": dict(lab)}
    if volumes:
        doc["volumes"] = volumes
    return doc


def _limits(conf: Mapping[str, Any], spec: SandboxSpec) -> dict[str, Any]:
    """``cpus``/``memory_mb`` for ``main``, in every spelling the task's file already uses."""
    out: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    if spec.cpus:
        limits["cpus"] = _number(spec.cpus)
        if conf.get("cpus") is not None:
            out["cpus"] = float(spec.cpus)
    if spec.memory_mb:
        mem = f"{int(spec.memory_mb)}m"
        limits["memory"] = mem
        out["memswap_limit"] = mem
        if conf.get("mem_limit") is not None:
            out["mem_limit"] = mem
    if limits:
        out["deploy"] = {"resources": {"limits": limits}}
    return out


def with_images(model: Mapping[str, Any], doc: Mapping[str, Any]) -> dict[str, Any]:
    """``model`` with the images the cairn file ``doc`` sets (what Compose would resolve)."""
    services = {svc: dict(conf or {}) for svc, conf in (model.get("services") or {}).items()}
    for svc, out in (doc.get("services") or {}).items():
        if svc in services and "image" in out:
            services[svc]["image"] = out["image"]
    return {**model, "services": services}


def images_to_build(model: Mapping[str, Any]) -> dict[str, str]:
    """Service → image tag for every service the final model builds."""
    return {
        svc: str(conf.get("image"))
        for svc, conf in (model.get("services") or {}).items()
        if (conf or {}).get("build") is not None and conf.get("image")
    }


def images_to_find(model: Mapping[str, Any]) -> dict[str, str]:
    """Service → image for every service that runs a prebuilt image (must exist locally)."""
    built = set(images_to_build(model).values())
    return {
        svc: str(conf.get("image"))
        for svc, conf in (model.get("services") or {}).items()
        if (conf or {}).get("build") is None and conf.get("image") and str(conf.get("image")) not in built
    }
