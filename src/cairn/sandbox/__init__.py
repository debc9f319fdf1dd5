"""Sandbox backends behind one interface (design §3), looked up by name.

Backends register lazily: ``get_backend("docker")`` imports ``cairn.sandbox.docker.backend`` only when
asked, so importing cairn never imports the Docker SDK.
"""

from __future__ import annotations

import importlib
import os

from cairn.errors import UsageError
from cairn.sandbox.base import (
    Capabilities,
    ExecResult,
    FoldedExec,
    NetworkMode,
    ProcessInfo,
    Sandbox,
    SandboxSpec,
)

_BACKENDS: dict[str, str] = {
    "docker": "cairn.sandbox.docker.backend:DockerSandbox",
    "local": "cairn.sandbox.local.backend:LocalSandbox",
}

_COMPOSE_VARIANTS: dict[str, str] = {
    "docker": "cairn.sandbox.docker.compose:ComposeSandbox",
}
"""The class that runs multi-container (compose) environments, per backend; a backend without
one refuses compose files in its own ``check()``."""

BACKEND_NAMES = tuple(_BACKENDS)


def get_backend(name: str, *, compose: bool = False) -> type[Sandbox]:
    """Return the sandbox class registered under ``name`` (``docker``, ``local``).

    ``auto`` is resolved by :func:`resolve_backend`, not here.

    Args:
        name: the backend name.
        compose: the environment is a compose file: return the backend's compose variant
            (``docker`` → ``ComposeSandbox``), or the backend itself when it has none (its
            ``check()`` then refuses the environment).

    Raises:
        KeyError: no backend has that name (the message lists the known ones).
    """
    try:
        target = _BACKENDS[name]
    except KeyError:
        raise KeyError(f"unknown sandbox backend {name!r}; known: {', '.join(_BACKENDS)}") from None
    if compose and name in _COMPOSE_VARIANTS:
        target = _COMPOSE_VARIANTS[name]
    module_name, _, attr = target.partition(":")
    return getattr(importlib.import_module(module_name), attr)


def resolve_backend(name: str) -> str:
    """Resolve a ``-e`` value to a registered backend, before anything runs.

    ``auto`` → ``docker`` when an engine answers within 2 s, else ``local`` (design §3.3; the
    choice is printed on stderr by :func:`cairn.sandbox.auto.resolve_auto`); a named backend is
    checked against the registry, and ``docker`` must have an engine answering.

    Args:
        name: ``auto``, ``docker`` or ``local``.

    Returns:
        The backend name (``docker`` or ``local``).

    Raises:
        UsageError: an unknown backend name, or ``docker`` with no engine answering within 5 s
            (design §9: exit 2 before anything runs).
    """
    from cairn.sandbox.auto import AUTO, docker_answers, resolve_auto

    if name == AUTO:
        return resolve_auto(name)
    if name not in BACKEND_NAMES:
        raise UsageError(f"unknown sandbox backend {name!r}; use auto, " + ", ".join(BACKEND_NAMES))
    if name == "docker" and not docker_answers(5.0, early=True):
        raise UsageError(
            "-e docker: no Docker engine answers (DOCKER_HOST="
            f"{os.environ.get('DOCKER_HOST', 'unix:///var/run/docker.sock')}); "
            "start one, or use -e local / -e auto"
        )
    return name


def host_problem(name: str) -> str | None:
    """Why this machine cannot run backend ``name`` now, or ``None`` when it can (the probe a
    Ray worker node answers for the ``ray`` executor, docs/scale-out.md).

    ``docker``: an engine answers within 5 s (``DOCKER_HOST`` or the default socket);
    ``local``: its host probe passes (Linux, util-linux ``unshare``, overlayfs, root or user
    namespaces).

    Args:
        name: ``docker`` or ``local``.

    Returns:
        ``None``, or a one-line reason.

    Raises:
        UsageError: an unknown backend name.
    """
    try:
        resolve_backend(name)  # docker: an engine answers
    except UsageError as exc:
        if name not in BACKEND_NAMES:
            raise
        return str(exc)
    return get_backend(name).host_problem()


__all__ = [
    "BACKEND_NAMES",
    "Capabilities",
    "ExecResult",
    "FoldedExec",
    "NetworkMode",
    "ProcessInfo",
    "Sandbox",
    "SandboxSpec",
    "get_backend",
    "host_problem",
    "resolve_backend",
]
