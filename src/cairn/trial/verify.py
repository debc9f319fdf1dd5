"""Run a step's verifier in the shared sandbox and read its reward (design §4.6, §5.1, §11).

Shared mode, in this order: empty ``/logs/verifier`` and ``/tests`` (as root); upload ``tests/``
then ``steps/<name>/tests/`` on top; run ``test.sh`` with bash as the verifier user, cwd
``/tests``, with the merged verifier env (the agent's env is not applied); save stdout and stderr
apart; record the exit code (not used for scoring); read the reward; remove ``/tests``.

On docker, test.sh, the copy of ``/logs/verifier`` and the clean-up after it are one exec
(:meth:`cairn.sandbox.base.Sandbox.exec_collect`, :mod:`cairn.sandbox.docker.fold`); whatever
that exec could not do (a timeout, a folder too big, a non-root verifier's clean-up) is done
here by a download and a root exec, as before.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cairn._util.aio import shielded
from cairn.errors import ErrorKind, SandboxError, SandboxLostError, TrialFailure
from cairn.layout import REWARD_FILE_CAP_BYTES, REWARD_FILES, TESTS_DIR, VERIFIER_LOGS_DIR
from cairn.results.model import JudgeUsage
from cairn.sandbox.base import ExecResult, FoldedExec, Sandbox, UploadItem
from cairn.task.model import Step
from cairn.trial.helper import VERIFIER_CLEANUP_CMD, reset_dirs_cmd
from cairn.trial.judge import read_judge_usage
from cairn.trial.rewards import read_reward

VERIFIER_LOGS = VERIFIER_LOGS_DIR


@dataclass
class VerifierRun:
    """What one verification produced.

    Attributes:
        rewards: the reward keys read (``None`` when reading failed; then ``error`` is set).
        reward_file: ``reward.json`` or ``reward.txt``.
        exit_code: test.sh's exit status (``None`` on timeout).
        elapsed_sec: wall time of test.sh, seconds.
        warnings: CRLF normalisation, both reward files present, values outside [0, 1].
        error: the failure (``test_missing``, ``verifier_timeout``, ``reward_*``), if any.
        judge: an LLM judge's spend from ``judge_usage.json``, if the verifier wrote one.
        network_records: a separate verifier sandbox's own gateway records (its judge
            opening); empty in shared mode (the trial reads the sandbox's).
    """

    rewards: dict[str, float] | None = None
    reward_file: str | None = None
    exit_code: int | None = None
    elapsed_sec: float = 0.0
    warnings: list[str] = field(default_factory=list)
    error: TrialFailure | None = None
    judge: JudgeUsage | None = None
    network_records: list[dict[str, object]] = field(default_factory=list)


async def empty_verifier_logs(sandbox: Sandbox) -> None:
    """Remove everything under ``/logs/verifier`` (as root) and leave it world-writable."""
    await sandbox.exec(reset_dirs_cmd(VERIFIER_LOGS), user="root")


FULL_KB = 64
"""Below this many kB free on ``/logs/verifier`` when the verifier starts, the sandbox's disk
counts as full: a reward the verifier then fails to leave is the agent's doing."""

FREE_KB_PROBE = f"df -Pk {VERIFIER_LOGS} 2>/dev/null | tail -n 1"
"""Shell probe printing the ``df -P`` row of the filesystem holding ``/logs/verifier``."""


def parse_free_kb(out: str) -> int | None:
    """The available kB of a :data:`FREE_KB_PROBE` output's last line; ``None`` when there
    is no such row (no ``df`` in the image, an unreadable answer)."""
    fields = out.strip().splitlines()[-1].split() if out.strip() else []
    try:
        return int(fields[3]) if len(fields) >= 6 else None
    except ValueError:
        return None


def _same(text: str) -> str:
    return text


def _read_capped(path: Path) -> bytes | None:
    """Read a downloaded reward file without following links; ``None`` when absent."""
    if path.is_symlink():
        raise TrialFailure(
            ErrorKind.REWARD_PARSE_ERROR, f"{path.name} is a symbolic link; a reward must be a regular file"
        )
    if not path.exists():
        return None
    if not path.is_file():
        raise TrialFailure(ErrorKind.REWARD_PARSE_ERROR, f"{path.name} is not a regular file")
    with path.open("rb") as fh:
        return fh.read(REWARD_FILE_CAP_BYTES + 1)


async def _prepare_tests(
    sandbox: Sandbox, step: Step, run: VerifierRun, *, prepared: bool, prepared_free_kb: int | None
) -> int | None:
    """Give the verifier an empty ``/logs/verifier`` and a fresh ``/tests`` (the step's
    tests folders, or the image's own ``/tests/test.sh``); sets ``run.error`` to
    ``test_missing`` when there is no test.sh at all.

    Returns:
        The kB free on ``/logs/verifier`` (``None``: unknown).
    """
    if step.test_sh is None:
        await empty_verifier_logs(sandbox)
        if not (await sandbox.exec(["test", "-f", f"{TESTS_DIR}/test.sh"], user="root")).ok:
            run.error = TrialFailure(
                ErrorKind.TEST_MISSING,
                f"step {step.name!r} has no test.sh, nor has the verifier's image a {TESTS_DIR}/test.sh",
            )
            return None
        await sandbox.exec(f"chmod -R a+rwX {TESTS_DIR}", user="root")
        return None
    free_kb = prepared_free_kb  # the after-agent exec measured it (cairn.trial.helper)
    if not prepared:  # one exec: empty /logs/verifier, fresh /tests, the space left
        prep = await sandbox.exec(
            f"{reset_dirs_cmd(VERIFIER_LOGS)}; rm -rf {TESTS_DIR}; {FREE_KB_PROBE}", user="root"
        )
        free_kb = parse_free_kb(prep.stdout)
    crlf: tuple[str, ...] = ()
    if b"\r\n" in step.test_sh.read_bytes():
        run.warnings.append("test.sh has CRLF line endings; normalised in the uploaded copy")
        crlf = ("test.sh",)
    # one archive: every tests folder (later ones over earlier), a+rwX, test.sh LF
    await sandbox.upload_many(
        [UploadItem(d, TESTS_DIR, world_writable=True, crlf=crlf) for d in step.tests_dirs]
    )
    return free_kb


async def _run_test_sh(
    sandbox: Sandbox,
    step: Step,
    run: VerifierRun,
    *,
    env: dict[str, str],
    timeout_sec: float,
    verifier_dir: Path,
    cleanup: bool,
) -> FoldedExec:
    """Run ``/tests/test.sh`` as the verifier user; its exit code and time go to ``run``.

    Where the backend can, the same engine round trip also brings ``/logs/verifier`` to
    ``verifier_dir`` and, with ``cleanup``, runs :data:`VERIFIER_CLEANUP_CMD`
    (:meth:`Sandbox.exec_collect`); what it did not do, the caller does. Nothing is copied
    nor cleaned after exit 126 or 127 (bash may be gone: checked first, below).

    Raises:
        SandboxError: bash itself no longer runs (the sandbox is broken, not the verifier).
    """
    started = time.monotonic()
    folded = await sandbox.exec_collect(
        ["bash", f"{TESTS_DIR}/test.sh"],
        collect=VERIFIER_LOGS,
        into=verifier_dir,
        then_root=VERIFIER_CLEANUP_CMD if cleanup else None,
        unless_exit=(126, 127),
        user=step.verifier_user,
        cwd=TESTS_DIR,
        env=env,
        timeout_sec=timeout_sec,
    )
    result = folded.result
    run.elapsed_sec = time.monotonic() - started
    run.exit_code = result.exit_code
    if result.exit_code in (126, 127) and not (await sandbox.exec(["bash", "-c", "true"], user="root")).ok:
        # bash itself no longer runs: whatever ran before broke the sandbox (design §6
        # sandbox_unusable), not the task's verifier
        raise SandboxError(
            f"bash no longer runs in the sandbox, so the verifier cannot: {result.stderr.strip()[-300:]}",
            detail={"exit_code": result.exit_code},
        )
    return folded


async def _download_logs(sandbox: Sandbox, folded: FoldedExec, verifier_dir: Path) -> None:
    """Download ``/logs/verifier`` after a fold that did not bring it.

    Raises:
        SandboxLostError: the fold was uncertain (the engine lost the end of its output, and
            with it whether its clean-up emptied the folder) and the folder came back empty:
            no verdict on the verifier, an infra error (retried).
    """
    await sandbox.download(VERIFIER_LOGS, verifier_dir)
    if folded.uncertain and not any(verifier_dir.iterdir()):
        raise SandboxLostError(
            f"the engine lost the end of the verifier's exec output and {VERIFIER_LOGS} "
            "came back empty: the fold's clean-up may have removed what test.sh wrote",
            detail={"exit_code": folded.result.exit_code},
        )


def _read_rewards(
    run: VerifierRun,
    result: ExecResult,
    verifier_dir: Path,
    *,
    free_kb: int | None,
    mask: Callable[[str], str],
) -> None:
    """Read the downloaded reward file into ``run`` (or its failure into ``run.error``).

    Raises:
        SandboxError: no reward and the disk was full when the verifier started (the agent's
            doing: ``sandbox_unusable``).
    """
    present = [n for n in REWARD_FILES if os.path.lexists(verifier_dir / n)]
    run.reward_file = present[0] if present else None
    try:
        files = {name: _read_capped(verifier_dir / name) for name in REWARD_FILES}
        read = read_reward(files)
    except TrialFailure as exc:
        detail = dict(exc.detail)
        detail.update(
            exit_code=result.exit_code,
            stdout_tail=mask(result.stdout[-2000:]),
            stderr_tail=mask(result.stderr[-2000:]),
        )
        if free_kb is not None and free_kb < FULL_KB:
            # the agent left no room for the verifier's reward: the agent's fault (design
            # §6 sandbox_unusable, scored 0), not the task's
            raise SandboxError(
                f"the sandbox's disk was full when the verifier started ({free_kb} kB free "
                f"on {VERIFIER_LOGS}), so the verifier could not leave a reward "
                f"({exc.kind.value}: {mask(str(exc))})",
                detail={**detail, "free_kb": free_kb},
            ) from exc
        run.error = TrialFailure(exc.kind, mask(str(exc)), detail=detail)
        return
    run.rewards = dict(read.rewards)
    run.reward_file = read.reward_file
    run.warnings.extend(read.warnings)


def _timed_out(timeout_sec: float) -> TrialFailure:
    """The ``verifier_timeout`` of a test.sh that outlived ``timeout_sec`` seconds."""
    return TrialFailure(
        ErrorKind.VERIFIER_TIMEOUT,
        f"test.sh did not finish within {timeout_sec:g} s; its processes were killed",
        detail={"timeout_sec": timeout_sec},
    )


async def run_verifier(
    sandbox: Sandbox,
    step: Step,
    *,
    env: dict[str, str],
    timeout_sec: float,
    verifier_dir: Path,
    mask: Callable[[str], str] = _same,
    image_tests: bool = False,
    prepared: bool = False,
    prepared_free_kb: int | None = None,
    cleanup: bool = True,
) -> VerifierRun:
    """Verify one step in the shared sandbox.

    Args:
        sandbox: the trial's sandbox.
        step: the step (its ``tests_dirs``, ``test_sh``, ``verifier_user``).
        env: the resolved, merged verifier env.
        timeout_sec: bound on test.sh, seconds (already multiplied).
        verifier_dir: host folder ``steps/<nn>-<name>/verifier`` (exists).
        mask: masks secret values in text written to the host.
        image_tests: when the step has no test.sh of its own, run the sandbox's own
            ``/tests/test.sh`` (a separate verifier's image may ship it) instead of failing
            with ``test_missing``.
        prepared: ``/tests`` is already gone and ``/logs/verifier`` empty and world-writable
            (the step's after-agent exec did it, :mod:`cairn.trial.helper`): one exec fewer.
        prepared_free_kb: with ``prepared``, the kB the after-agent exec found free on
            ``/logs/verifier`` (``None``: unknown); under 64 kB with no reward left makes
            the step ``sandbox_unusable`` (the agent filled the disk).
        cleanup: afterwards remove ``/tests``, empty ``/logs/verifier`` and ``/logs/agent``
            (:data:`cairn.trial.helper.VERIFIER_CLEANUP_CMD`); ``False`` when the sandbox is
            removed next anyway (the trial's last step), saving an exec.

    Returns:
        The :class:`VerifierRun`; failures of design §6 (task category) are in ``error``.

    Raises:
        SandboxError: a sandbox operation failed (the engine classifies it).
        SandboxLostError: the engine is gone.
    """
    run = VerifierRun()
    if step.test_sh is None and not image_tests:
        run.error = TrialFailure(ErrorKind.TEST_MISSING, f"step {step.name!r} has no test.sh")
        return run
    cleaned = False
    try:
        free_kb = await _prepare_tests(
            sandbox, step, run, prepared=prepared, prepared_free_kb=prepared_free_kb
        )
        if run.error is not None:
            return run
        folded = await _run_test_sh(
            sandbox, step, run, env=env, timeout_sec=timeout_sec, verifier_dir=verifier_dir, cleanup=cleanup
        )
        result, cleaned = folded.result, folded.cleaned
        if not folded.collected:
            await _download_logs(sandbox, folded, verifier_dir)
        (verifier_dir / "test-stdout.txt").write_text(mask(result.stdout), encoding="utf-8")
        (verifier_dir / "test-stderr.txt").write_text(mask(result.stderr), encoding="utf-8")
        run.judge, judge_warnings = read_judge_usage(verifier_dir)  # spent even on a timeout
        run.warnings.extend(judge_warnings)
        if result.timed_out:
            run.error = _timed_out(timeout_sec)
            return run
        _read_rewards(run, result, verifier_dir, free_kb=free_kb, mask=mask)
        return run
    finally:
        try:
            # /tests goes, and so does what this verifier left in /logs/verifier (it is on the
            # host already): the next step's agent must not read it, nor be blamed for it.
            if cleanup and not cleaned:
                await shielded(sandbox.exec(VERIFIER_CLEANUP_CMD, user="root"))
        except SandboxLostError:
            raise
        except Exception:  # noqa: BLE001 - the run's own error matters more than cleanup
            pass
