"""Healthchecks with Docker HEALTHCHECK semantics, run by cairn with execs (design §4.3)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from cairn.sandbox.base import Sandbox
from cairn.task.model import Healthcheck


@dataclass(frozen=True)
class HealthcheckOutcome:
    """Result of :func:`run_healthcheck`.

    Attributes:
        healthy: whether a probe succeeded before the check failed.
        probes: number of probes run.
        last_exit_code: exit code of the last probe (``None`` when it timed out).
        last_output: tail of the last probe's stdout+stderr.
    """

    healthy: bool
    probes: int
    last_exit_code: int | None
    last_output: str


async def run_healthcheck(
    sandbox: Sandbox, check: Healthcheck, *, user: str | int | None = None, timeout_multiplier: float = 1.0
) -> HealthcheckOutcome:
    """Probe ``check.command`` (``sh -c``) until it passes or fails (Docker's semantics).

    During ``start_period_sec`` probes run every ``start_interval_sec`` and failures do not count
    (whether a probe fell inside the period is decided when it finishes). After it, ``retries``
    consecutive failures spaced by ``interval_sec`` fail the check. The first success passes.

    Args:
        sandbox: the sandbox to probe.
        check: the healthcheck settings (seconds).
        user: the user probes run as.
        timeout_multiplier: the job's timeout multiplier, applied to the per-probe timeout and the start
            period.

    Returns:
        The :class:`HealthcheckOutcome`.
    """
    started = time.monotonic()
    start_period = check.start_period_sec * timeout_multiplier
    failures = 0
    probes = 0
    while True:
        probes += 1
        r = await sandbox.exec(
            ["sh", "-c", check.command],
            user=user,
            timeout_sec=check.timeout_sec * timeout_multiplier,
            max_output_bytes=4096,
        )
        output = (r.stdout + r.stderr)[-2000:]
        if r.ok:
            return HealthcheckOutcome(True, probes, r.exit_code, output)
        in_start_period = (time.monotonic() - started) < start_period
        if not in_start_period:
            failures += 1
            if failures >= max(check.retries, 1):
                return HealthcheckOutcome(False, probes, r.exit_code, output)
        await asyncio.sleep(check.start_interval_sec if in_start_period else check.interval_sec)
