"""BuildKit builds for Dockerfiles that need them (design §3.1), without buildx.

A Dockerfile that uses BuildKit-only syntax (:mod:`cairn.sandbox.dockerfile_syntax`: ``COPY
--chmod``, ``RUN --mount``, heredocs, …) cannot be built by the classic builder, which the
Docker SDK's ``/build`` call uses. The engine serves BuildKit builds over its API, but a
BuildKit ``/build`` (``version=2``) needs a gRPC session the SDK does not provide; the Docker
Compose v2 CLI provides one with no buildx installed (measured on docker 20.10.24 with the
client 28.2 and Compose 2.40: ``DOCKER_BUILDKIT=1 docker build`` refuses without buildx,
``docker compose build`` builds). So cairn builds such a Dockerfile with ``docker compose
build`` of a one-service compose file it writes, tagging the image ``cairn-env:<hash16>``
exactly as the classic path does — the content-hash cache is the same.

What the engine's built-in Dockerfile frontend understands depends on the engine version
(:func:`frontend_features`); a ``# syntax=`` line would make BuildKit pull that frontend from a
registry, so a line naming the stock frontend is dropped (with a warning) and the built-in
one is used; ``--link`` is dropped too (same files). A feature the built-in frontend lacks
is refused by :func:`check_dockerfile` before anything starts, with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from cairn.errors import BuildError, ErrorKind, UnsupportedError
from cairn.sandbox.caches import SandboxCaches
from cairn.sandbox.dockerfile_syntax import (
    buildkit_features,
    rewrite_for_builtin_frontend,
    unsupported_by,
)

_FEATURE_TEXT = {
    "copy-chmod": "`COPY --chmod`",
    "run-mount": "`RUN --mount`",
    "run-network": "`RUN --network`",
    "run-security": "`RUN --security`",
    "heredoc": "heredocs (`<<EOF`)",
    "syntax": "a `# syntax=` frontend other than the stock one",
}

_FEATURES_BY_ENGINE: tuple[tuple[tuple[int, int], frozenset[str]], ...] = (
    ((23, 0), frozenset({"copy-chmod", "run-mount", "run-network", "heredoc"})),
    ((18, 9), frozenset({"copy-chmod", "run-mount"})),
)
"""Built-in frontend features by minimum engine version: 20.10 measured here (chmod and mount
build; heredocs, ``--link`` and ``RUN --network`` fail with "unknown instruction"/"Unknown
flag"); 23.0 ships the Dockerfile 1.4+ frontend (heredocs, ``--network``)."""


@dataclass(frozen=True)
class BuildKitSupport:
    """What BuildKit can build here.

    Attributes:
        features: the BuildKit-only features the engine's built-in frontend builds (empty:
            classic builder only).
        reason: why BuildKit is not available (``""`` when it is).
        engine: the engine version string probed (``""`` when unknown).
    """

    features: frozenset[str]
    reason: str = ""
    engine: str = ""


def _version_tuple(text: str) -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def frontend_features(engine: str) -> frozenset[str]:
    """The BuildKit-only features an engine version's built-in frontend builds.

    Args:
        engine: the engine version (``20.10.24+dfsg1``).

    Returns:
        The feature names (empty before 18.09, which has no BuildKit).
    """
    v = _version_tuple(engine)
    for minimum, features in _FEATURES_BY_ENGINE:
        if v >= minimum:
            return features
    return frozenset()


def buildkit_support(caches: SandboxCaches) -> BuildKitSupport:
    """Probe (once per job) whether BuildKit builds run here, and with which features.

    Needs the ``docker`` CLI with Compose v2 (the session client) and an engine ≥ 18.09.

    Args:
        caches: the job's memos (:attr:`cairn.sandbox.base.SandboxSpec.caches`); the answer
            is kept in its :class:`~cairn.sandbox.docker.client.EngineFacts`, so the next job
            asks the engine it meets.

    Raises:
        SandboxLostError: no engine answers.
    """
    from cairn.sandbox.docker.client import engine_facts, engine_version, make_client
    from cairn.sandbox.docker.compose_cli import compose_cli

    facts = engine_facts(caches)
    if facts.buildkit is not None:
        return facts.buildkit
    client = make_client(caches)
    try:
        engine = engine_version(client, caches) or ""
    finally:
        with contextlib.suppress(Exception):
            client.close()
    try:
        compose_cli(caches)
    except UnsupportedError as exc:
        support = BuildKitSupport(
            frozenset(),
            f"no BuildKit client on this machine ({exc}; "
            "cairn builds BuildKit Dockerfiles with `docker compose build`)",
            engine,
        )
    else:
        features = frontend_features(engine)
        support = BuildKitSupport(
            features, "" if features else f"docker engine {engine} has only the classic builder", engine
        )
    facts.buildkit = support
    return support


def dockerfile_needs_buildkit(dockerfile: Path) -> bool:
    """Whether a Dockerfile uses any BuildKit-only feature."""
    try:
        text = dockerfile.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return bool(buildkit_features(text))


def check_dockerfile(dockerfile: Path, caches: SandboxCaches) -> list[str]:
    """Check, before anything starts, that this engine can build a Dockerfile.

    Args:
        dockerfile: the environment's Dockerfile.
        caches: the job's memos (:func:`buildkit_support` is asked once per job).

    Returns:
        Warnings (a stock ``# syntax=`` line that will be ignored).

    Raises:
        UnsupportedError: the Dockerfile uses BuildKit-only syntax this engine cannot build,
            naming the features, their lines and why.
    """
    try:
        text = dockerfile.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    features = buildkit_features(text)
    if not features:
        return []
    support = buildkit_support(caches)
    missing = unsupported_by(features, support.features)
    if missing:
        uses = ", ".join(f"{_FEATURE_TEXT.get(f.name, f.name)} (line {f.line})" for f in missing)
        why = support.reason or (
            f"the built-in Dockerfile frontend of docker engine "
            f"{support.engine} does not support it, and a newer frontend "
            "image cannot be pulled (no registry)"
        )
        raise UnsupportedError(f"environment/Dockerfile uses {uses}: {why}")
    _, notes = rewrite_for_builtin_frontend(text)
    return [f"environment/Dockerfile {n}" for n in notes if "syntax=" in n]


def _compose_doc(env_dir: Path, dockerfile: Path, tag: str, labels: dict[str, str]) -> str:
    import json

    # JSON is YAML; the paths and labels are quoted safely. `$` in paths is escaped for
    # compose interpolation.
    def esc(s: str) -> str:
        return s.replace("$", "$$")

    doc = {
        "services": {
            "build": {
                "image": tag,
                "build": {
                    "context": esc(str(env_dir.resolve())),
                    "dockerfile": esc(str(dockerfile)),
                    "labels": {k: esc(v) for k, v in labels.items()},
                },
            }
        }
    }
    return json.dumps(doc)


async def build_with_buildkit(
    env_dir: Path, tag: str, labels: dict[str, str], *, nocache: bool, deadline: float, timeout_sec: float
) -> float:
    """Build ``env_dir/Dockerfile`` with BuildKit (``docker compose build``) as ``tag``.

    Args:
        env_dir: the build context.
        tag: the image tag to give (``cairn-env:<hash16>``).
        labels: image labels.
        nocache: build without the layer cache (``--force-build``).
        deadline: event-loop time by which the build must end.
        timeout_sec: the configured bound (for the message).

    Returns:
        Seconds spent.

    Raises:
        BuildError: ``build_failed`` (with ``detail["log_tail"]``), ``image_not_found`` when
            the base image is missing, or ``build_timeout``.
    """
    from cairn.sandbox.docker.compose_cli import _run_cli, compose_cli

    docker_cli = compose_cli()
    loop = asyncio.get_running_loop()
    t0 = time.monotonic()
    text = (env_dir / "Dockerfile").read_text(encoding="utf-8", errors="replace")
    rewritten, _ = rewrite_for_builtin_frontend(text)
    with tempfile.TemporaryDirectory(prefix="cairn-buildkit-") as tmp:
        df = Path(tmp) / "Dockerfile"
        df.write_text(rewritten, encoding="utf-8")
        cf = Path(tmp) / "compose.json"
        cf.write_text(_compose_doc(env_dir, df, tag, labels), encoding="utf-8")
        project = "cairn-build-" + re.sub(r"[^a-z0-9]", "", tag.split(":")[-1].lower())[:16]
        env = {k: v for k, v in os.environ.items() if not k.startswith("COMPOSE_")}
        env.update(DOCKER_BUILDKIT="1", COMPOSE_DOCKER_CLI_BUILD="1")
        argv = [
            docker_cli,
            "compose",
            "--project-name",
            project,
            "-f",
            str(cf),
            "build",
            "--progress",
            "plain",
        ]
        if nocache:
            argv.append("--no-cache")
        code, out = await _run_cli(argv, env=env, timeout_sec=max(1.0, deadline - loop.time()), cwd=Path(tmp))
    tail = "\n".join(out.strip().splitlines()[-60:])
    if code is None:
        raise BuildError(
            ErrorKind.BUILD_TIMEOUT,
            f"building the environment (BuildKit) took longer than {timeout_sec:g} s",
            detail={"log_tail": tail},
        )
    if code != 0:
        last = _error_line(out) or f"exit {code}"
        if re.search(
            r"\[[^\]]*\binternal\] load metadata for|failed to resolve source metadata"
            r"|pull access denied|not found: manifest unknown",
            out,
        ) and re.search(r"FROM|load metadata|resolve", last):
            raise BuildError(
                ErrorKind.IMAGE_NOT_FOUND,
                f"base image not found and cannot be pulled: {last}",
                detail={"log_tail": tail},
            )
        raise BuildError(
            ErrorKind.BUILD_FAILED,
            f"docker build (BuildKit) failed: {last}",
            detail={"log_tail": tail, "builder": "buildkit"},
        )
    return time.monotonic() - t0


def _error_line(out: str) -> str:
    lines = [ln.strip() for ln in out.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ln.startswith(("failed to solve", "ERROR", "error")) or "failed to solve" in ln:
            return ln[-500:]
    return lines[-1][-500:] if lines else ""


__all__ = [
    "BuildKitSupport",
    "build_with_buildkit",
    "buildkit_support",
    "check_dockerfile",
    "dockerfile_needs_buildkit",
    "frontend_features",
]
