"""The separate verifier (design §4.6, "Separate mode"): grade in a fresh sandbox that sees only
the step's declared artifacts.

For a step whose ``environment_mode`` is ``"separate"`` (step level, else task level):

1. Before anything starts, :func:`plan_separate_verifier` resolves the verifier's environment:
   the ``[verifier].environment`` table (the step's, else the task's), else a copy of
   ``[environment]``; its image is built from the step's ``tests/`` folder when that holds a
   ``Dockerfile`` or ``docker-compose.yaml``, else from the task's ``tests/``, else it is that
   table's ``docker_image``. With neither, the task is refused (``config_error``), as Harbor
   refuses it. Env templates are resolved and the backend's capability check runs here, so a
   bad verifier environment fails in a second, not after the agent's hour.
2. After the agent phase and the artifact collection, :func:`run_separate_verifier` starts that
   sandbox with the trial's backend (its compose variant for a compose folder), runs its
   ``healthcheck`` if set, copies the step's declared artifacts in at their original paths from
   the host copies in the step's ``artifacts/`` folder (only entries the manifest marks
   ``copied``; ``exclude``d files stay out), restores ``/logs/artifacts``, hands the restored
   copies to the verifier's user when one is set (the agent may have written them under
   ``umask 077`` as another user; its originals are untouched), then runs the verifier
   exactly as in shared mode (:func:`cairn.trial.verify.run_verifier`), and removes the sandbox.
   When the task ships no ``test.sh`` for the step, the image's own ``/tests/test.sh`` runs.

Failures of the verifier's sandbox are not the agent's: a build failure keeps its kind
(``build_failed`` / ``image_not_found``, task), any other sandbox failure becomes
``start_failed`` (infra, retried).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from cairn.errors import (
    BuildError,
    ErrorKind,
    SandboxError,
    SandboxLostError,
    TrialFailure,
    UnsupportedError,
)
from cairn.layout import ARTIFACTS_DIR, COMPOSE_FILE_NAMES, find_compose_file
from cairn.netpolicy import NetworkPolicy
from cairn.results.model import ArtifactEntry
from cairn.results.store import ARTIFACTS_MANIFEST, read_artifacts_manifest
from cairn.sandbox import get_backend
from cairn.sandbox.base import Sandbox, SandboxSpec
from cairn.task.envvars import resolve_env, secret_values
from cairn.task.hashing import env_hash
from cairn.task.judge import judge_hosts
from cairn.task.model import EnvironmentConfig, Healthcheck, Step, Task
from cairn.trial.classify import as_start_failure
from cairn.trial.healthcheck import run_healthcheck
from cairn.trial.verify import VerifierRun, run_verifier

LOGS_ARTIFACTS = ARTIFACTS_DIR
_DEFINITION_FILES = ("Dockerfile", *COMPOSE_FILE_NAMES)


@dataclass(frozen=True)
class SeparatePlan:
    """How one step's separate verifier sandbox is made (resolved before anything starts).

    Attributes:
        backend: the sandbox class (the trial's backend, or its compose variant).
        spec: the verifier sandbox's spec.
        healthcheck: the verifier environment's healthcheck, if any.
        secrets: resolved template values of the verifier environment's env (to mask).
        warnings: capability warnings of the backend for this spec.
    """

    backend: type[Sandbox]
    spec: SandboxSpec
    healthcheck: Healthcheck | None
    secrets: frozenset[str] = frozenset()
    warnings: tuple[str, ...] = ()
    verifier_policy: NetworkPolicy | None = None
    """The verifier phase's policy when it differs from the environment's: an LLM judge's
    opening (:mod:`cairn.task.judge`), switched to just before ``test.sh`` runs."""


def verifier_build_context(task: Task, step: Step) -> Path | None:
    """The folder the step's verifier image is built from: ``steps/<name>/tests/`` when it holds
    a Dockerfile or compose file, else ``tests/`` when that does, else ``None``."""
    for d in (task.path / "steps" / step.name / "tests", task.path / "tests"):
        if any((d / n).is_file() for n in _DEFINITION_FILES):
            return d
    return None


def plan_separate_verifier(
    task: Task,
    step: Step,
    base: SandboxSpec,
    backend: str,
    *,
    environ: Mapping[str, str] | None = None,
    timeout_multiplier: float = 1.0,
    verifier_env: Mapping[str, str] | None = None,
) -> SeparatePlan:
    """Resolve the separate verifier sandbox of ``step``.

    Args:
        task: the loaded task.
        step: a step with ``verifier_mode == "separate"``.
        base: the trial's sandbox spec (job and trial ids, ``force_build``, job folder).
        backend: the trial's backend name (``docker``, ``local``).
        environ: the host environment for ``${VAR}`` templates (default ``os.environ``).
        timeout_multiplier: the timeout multiplier (applied to ``build_timeout_sec``).
        verifier_env: the step's resolved verifier env (``--ve`` applied): a judge credential
            in it gives the verifier phase the same opening to the judge's host as a shared
            verifier gets (docs/network.md), through the verifier sandbox's own gateway.

    Returns:
        The :class:`SeparatePlan`.

    Raises:
        TrialFailure: ``config_error`` — nothing to build the verifier from, a template missing
            on the host, or an environment the backend cannot run.
    """
    cfg: EnvironmentConfig = step.verifier_environment or task.environment
    context, fallback_note = _verifier_context(task, step, cfg)
    env = resolve_env(cfg.env, os.environ if environ is None else environ)
    judge = judge_hosts(step.verifier_env, verifier_env) if verifier_env is not None else []
    policy = cfg.network_policy.with_model_hosts(judge) if judge else None
    spec = _verifier_spec(
        base,
        cfg,
        context,
        env=env,
        policy=policy,
        name=f"{task.slug}-verifier",
        timeout_multiplier=timeout_multiplier,
    )
    cls = get_backend(backend, compose=find_compose_file(context) is not None)
    try:
        warnings = cls.check(spec)
    except UnsupportedError as exc:
        raise TrialFailure(
            ErrorKind.CONFIG_ERROR, f"separate verifier of step {step.name!r}: {exc}"
        ) from None
    return SeparatePlan(
        backend=cls,
        spec=spec,
        healthcheck=cfg.healthcheck,
        secrets=frozenset(secret_values(cfg.env, env)),
        warnings=(*fallback_note, *warnings),
        verifier_policy=policy,
    )


def _verifier_context(task: Task, step: Step, cfg: EnvironmentConfig) -> tuple[Path | None, tuple[str, ...]]:
    """The verifier's build folder (``None``: ``cfg``'s ``docker_image`` as is) and the
    warning that says it fell back to a fresh copy of the task's environment.

    Raises:
        TrialFailure: ``config_error`` — neither an image, a ``tests/`` definition nor a task
            environment to start.
    """
    context = verifier_build_context(task, step)
    if context is not None or cfg.docker_image:
        return context, ()
    # design §4.6 "else a copy of [environment]": with no verifier image of its own and no
    # Dockerfile in tests/, the verifier gets a fresh sandbox of the task's own environment
    # (pristine: none of the agent's changes, only the declared artifacts).
    context = task.env_dir
    if context is None or (find_compose_file(context) is None and not (context / "Dockerfile").is_file()):
        raise TrialFailure(
            ErrorKind.CONFIG_ERROR,
            f"step {step.name!r} verifies in a separate environment but it has nothing to "
            "start: set [verifier.environment].docker_image, add tests/Dockerfile, or give "
            "the task an environment/Dockerfile",
        )
    return context, (
        "separate verifier: no verifier image given; using a fresh copy of the task's environment",
    )


def _verifier_spec(
    base: SandboxSpec,
    cfg: EnvironmentConfig,
    context: Path | None,
    *,
    env: dict[str, str],
    policy: NetworkPolicy | None,
    name: str,
    timeout_multiplier: float,
) -> SandboxSpec:
    """The verifier sandbox's spec: the trial's ``base`` with the verifier environment's
    image, resources, network and env (``policy``: the verifier phase's own, if any)."""
    return dataclasses.replace(
        base,
        env_dir=context,
        docker_image=cfg.docker_image,
        workdir=cfg.workdir,
        cpus=cfg.cpus,
        memory_mb=cfg.memory_mb,
        storage_mb=cfg.storage_mb,
        gpus=cfg.gpus,
        network_mode=cfg.effective_network_mode,
        allowed_hosts=cfg.network_policy.allowed_hosts,
        network_phases=(policy,) if policy is not None else (),
        env=env,
        build_timeout_sec=cfg.build_timeout_sec * timeout_multiplier,
        env_hash=env_hash(context, docker_image=cfg.docker_image, workdir=cfg.workdir),
        name=name,
        keep=False,
    )


def _declared_rows(artifacts_dir: Path) -> list[ArtifactEntry]:
    """The manifest rows of the step's artifacts folder (empty when there is none)."""
    return read_artifacts_manifest(artifacts_dir)


def _inside(root: Path, rel: str) -> Path | None:
    """``root / rel`` when it stays inside ``root`` (no ``..``, not absolute), else ``None``."""
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts:
        return None
    return root if str(p) in ("", ".") else root / p


async def restore_artifacts(
    sandbox: Sandbox, artifacts_dir: Path, owner: str | int | None = None
) -> list[str]:
    """Copy the step's collected artifacts into ``sandbox`` at their original paths.

    Every manifest row with status ``copied`` goes back to its ``source`` path; the files
    ``/logs/artifacts`` held (the folder's root, minus ``manifest.json`` and the other entries'
    destinations) go back to ``/logs/artifacts``. With a non-root ``owner`` (the verifier's
    user) the restored copies are chowned to it, so a file the agent wrote with mode 0600 is
    readable by a verifier running as another user.

    Args:
        sandbox: the verifier's fresh sandbox.
        artifacts_dir: the step's host ``artifacts/`` folder (with ``manifest.json``).
        owner: the verifier's user (name or uid); ``None`` or root leaves ownership as copied.

    Returns:
        The sandbox paths restored.

    Raises:
        SandboxError: a transfer failed.
    """
    restored: list[str] = []
    rows = _declared_rows(artifacts_dir)
    taken: set[str] = {ARTIFACTS_MANIFEST}
    for row in rows:
        dest = row.destination
        if row.source != LOGS_ARTIFACTS and dest not in ("", "."):
            taken.add(PurePosixPath(dest).parts[0])
    for row in rows:
        source, dest = row.source, row.destination
        if row.status != "copied" or not source.startswith("/"):
            continue
        if source == LOGS_ARTIFACTS:
            for entry in sorted(artifacts_dir.iterdir()):
                if entry.name not in taken:
                    await sandbox.upload(entry, f"{LOGS_ARTIFACTS}/{entry.name}")
                    restored.append(f"{LOGS_ARTIFACTS}/{entry.name}")
            continue
        host = _inside(artifacts_dir, dest)
        if host is None or not os.path.lexists(host) or host == artifacts_dir:
            continue
        parent = str(PurePosixPath(source).parent)
        await sandbox.exec(["mkdir", "-p", parent], user="root")
        await sandbox.upload(host, source)
        restored.append(source)
    if restored and owner is not None and str(owner) not in ("root", "0"):
        await _give_to(sandbox, restored, owner)
    return restored


async def _give_to(sandbox: Sandbox, paths: list[str], owner: str | int) -> None:
    """``chown -R`` the restored copies to the verifier's user; when the image does not know
    that user, make them readable by everyone instead (never fails the verifier by itself).

    Raises:
        SandboxError: the sandbox could not run the command at all.
    """
    chown = await sandbox.exec(["chown", "-R", "-h", "--", str(owner), *paths], user="root")
    if not chown.ok:
        await sandbox.exec(["chmod", "-R", "a+rX", "--", *paths], user="root")


async def run_separate_verifier(
    plan: SeparatePlan,
    step: Step,
    *,
    env: dict[str, str],
    timeout_sec: float,
    verifier_dir: Path,
    artifacts_dir: Path,
    mask: Callable[[str], str] = str,
    timeout_multiplier: float = 1.0,
) -> VerifierRun:
    """Verify ``step`` in a fresh sandbox holding only its declared artifacts.

    Args:
        plan: from :func:`plan_separate_verifier`.
        step: the step.
        env: the resolved, merged verifier env (as in shared mode).
        timeout_sec: bound on test.sh, seconds (already multiplied).
        verifier_dir: host ``steps/<nn>-<name>/verifier`` (exists).
        artifacts_dir: host ``steps/<nn>-<name>/artifacts`` (collected, with its manifest).
        mask: masks secret values in text written to the host.
        timeout_multiplier: the timeout multiplier (healthcheck timing).

    Returns:
        The :class:`~cairn.trial.verify.VerifierRun`; sandbox failures are in ``error``
        (``build_failed``/``image_not_found``/``build_timeout`` as built, others
        ``start_failed``).

    Raises:
        SandboxLostError: the engine is gone.
    """
    try:
        async with plan.backend(plan.spec) as sb:
            return await _verify_in(
                sb,
                plan,
                step,
                env=env,
                timeout_sec=timeout_sec,
                verifier_dir=verifier_dir,
                artifacts_dir=artifacts_dir,
                mask=mask,
                timeout_multiplier=timeout_multiplier,
            )
    except SandboxLostError:
        raise
    except BuildError as exc:
        return VerifierRun(
            error=TrialFailure(
                exc.kind,
                f"separate verifier environment of step {step.name!r}: {mask(str(exc))}",
                detail=_masked(exc.detail, mask),
            )
        )
    except (SandboxError, UnsupportedError) as exc:
        return VerifierRun(
            error=as_start_failure(
                exc,
                f"separate verifier sandbox of step {step.name!r}: {mask(str(exc))}",
                detail=_masked(getattr(exc, "detail", {}), mask),
            )
        )
    except TrialFailure as exc:
        if exc.kind is ErrorKind.CONFIG_ERROR:
            return VerifierRun(error=exc)
        raise


def _masked(detail: Mapping[str, object], mask: Callable[[str], str]) -> dict[str, object]:
    """``detail`` with its text values masked (a sandbox error's detail goes to the host)."""
    return {k: mask(v) if isinstance(v, str) else v for k, v in detail.items()}


async def _verify_in(
    sb: Sandbox,
    plan: SeparatePlan,
    step: Step,
    *,
    env: dict[str, str],
    timeout_sec: float,
    verifier_dir: Path,
    artifacts_dir: Path,
    mask: Callable[[str], str],
    timeout_multiplier: float,
) -> VerifierRun:
    """In the started verifier sandbox: healthcheck, restore the artifacts, open the judge's
    host, run the verifier (arguments as :func:`run_separate_verifier`).

    Raises:
        SandboxLostError: the engine is gone.
        SandboxError: the sandbox failed.
    """
    if plan.healthcheck is not None:
        hc = await run_healthcheck(sb, plan.healthcheck, timeout_multiplier=timeout_multiplier)
        if not hc.healthy:
            return VerifierRun(
                error=TrialFailure(
                    ErrorKind.ENV_HEALTHCHECK_FAILED,
                    f"the separate verifier environment of step {step.name!r} failed its "
                    f"healthcheck after {hc.probes} probes",
                    detail={"exit_code": hc.last_exit_code, "output_tail": mask(hc.last_output)},
                )
            )
    restored = await restore_artifacts(sb, artifacts_dir, owner=step.verifier_user)
    # test.sh runs in phase ``verifier``: with the judge's opening when there is one, else under
    # the sandbox's own policy, switched so that its requests are recorded in that phase
    # (they read ``environment`` before, test_gateway_hostile_verifier.py)
    await sb.set_network(plan.verifier_policy or sb.spec.network_policy, phase="verifier")
    run = await run_verifier(
        sb,
        step,
        env=env,
        timeout_sec=timeout_sec,
        verifier_dir=verifier_dir,
        mask=mask,
        image_tests=True,
    )
    run.network_records = list(await sb.network_records())
    run.warnings.extend(plan.warnings)
    if not restored:
        run.warnings.append("separate verifier: no artifact was copied into its sandbox")
    return run
