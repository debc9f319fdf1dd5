"""Shared context and assertions of the conformance suite (:mod:`cairn.sandbox.conformance`)."""

from __future__ import annotations

import contextlib
import hashlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cairn._util.treehash import tree_hash
from cairn.sandbox.base import NetworkMode, ProcessInfo, Sandbox, SandboxSpec

SandboxFactory = Callable[[SandboxSpec], Sandbox]
"""Makes an *unstarted* sandbox from a spec (usually the backend class itself)."""

LeftoverProbe = Callable[[SandboxSpec], Awaitable[list[str]]]
"""Lists what still exists of a stopped sandbox (containers, networks, folders), by its spec's
``trial_id``; an empty list means everything was removed."""

CONFORMANCE_JOB_ID = "cairn-conformance"
"""``job_id`` of every sandbox the suite starts."""

BASE_DOCKERFILE = """\
FROM debian:bookworm-slim
RUN id agent >/dev/null 2>&1 || useradd -m agent
RUN mkdir -p /logs/agent /logs/verifier && echo stale > /logs/agent/stale.txt \\
    && echo stale > /logs/verifier/reward.txt && chmod 700 /logs/agent
ENV CAIRN_CONF_IMAGE_ENV="from image"
WORKDIR /app
RUN echo app-file > /app/present.txt
"""
"""The suite's environment: a user ``agent``, stale ``/logs`` content, an image ENV, WORKDIR."""


# ---- context ------------------------------------------------------------------------------
@dataclass
class CheckContext:
    """What a check gets: a factory for sandboxes, a scratch folder and optional probes.

    Attributes:
        make_sandbox: factory of unstarted sandboxes.
        tmp: a fresh host folder for this check.
        check_name: the running check's name (used in trial ids).
        leftovers: optional probe listing what remains of a stopped sandbox.
        base_spec: overrides applied to every spec (e.g. ``job_dir``).
    """

    make_sandbox: SandboxFactory
    tmp: Path
    check_name: str
    leftovers: LeftoverProbe | None = None
    base_spec: dict[str, Any] = field(default_factory=dict)

    def env_dir(self, dockerfile: str = BASE_DOCKERFILE, name: str = "env") -> Path:
        """Write an environment folder holding ``dockerfile`` and return it."""
        d = self.tmp / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "Dockerfile").write_text(dockerfile, encoding="utf-8")
        return d

    def spec(self, *, dockerfile: str = BASE_DOCKERFILE, **overrides: Any) -> SandboxSpec:
        """A spec for the suite's environment with a unique trial id.

        Args:
            dockerfile: the Dockerfile text of the environment.
            **overrides: SandboxSpec fields to set.
        """
        env_dir = self.env_dir(dockerfile, name="env-" + hashlib.sha256(dockerfile.encode()).hexdigest()[:8])
        fields: dict[str, Any] = {
            "env_dir": env_dir,
            "env_hash": tree_hash(env_dir),
            "network_mode": NetworkMode.NO_NETWORK,
            "job_id": CONFORMANCE_JOB_ID,
            "trial_id": f"{self.check_name}-{uuid.uuid4().hex[:8]}",
            "name": f"conformance-{self.check_name}",
            "build_timeout_sec": 180.0,
        }
        fields.update(self.base_spec)
        fields.update(overrides)
        return SandboxSpec(**fields)

    @contextlib.asynccontextmanager
    async def sandbox(self, **overrides: Any) -> AsyncIterator[Sandbox]:
        """Start a sandbox of :meth:`spec` (``overrides`` applied) and stop it afterwards."""
        sb = self.make_sandbox(self.spec(**overrides))
        async with sb:
            yield sb


# ---- assertions ---------------------------------------------------------------------------
class ConformanceFailure(AssertionError):
    """A check found the backend behaving against the interface."""


def expect(cond: object, message: str) -> None:
    """Raise :class:`ConformanceFailure` with ``message`` unless ``cond``."""
    if not cond:
        raise ConformanceFailure(message)


async def run_ok(sb: Sandbox, command: str | Sequence[str], **kw: Any) -> str:
    """Run ``command``, fail the check unless it exits 0; return its stdout."""
    r = await sb.exec(command, **kw)
    expect(
        r.ok,
        f"command {command!r} failed: exit {r.exit_code}, timed_out {r.timed_out}, "
        f"stderr {r.stderr[-500:]!r}",
    )
    return r.stdout


def sleepers(procs: Sequence[ProcessInfo], numbers: Sequence[int]) -> list[ProcessInfo]:
    """The processes whose command line is exactly ``sleep <n>`` for one of ``numbers``."""
    wanted = {f"sleep {n}" for n in numbers}
    return [p for p in procs if " ".join(p.cmdline.split()) in wanted]


async def processes_with(sb, numbers: Sequence[int], timeout_sec: float = 3.0) -> list[ProcessInfo]:
    """``sb.processes()`` once every ``sleep <n>`` of ``numbers`` shows (or the time is up).

    A backgrounded ``sleep`` may not have exec'd yet when the command that started it returns
    (a forked shell is still a shell for a moment), on any fast backend; polling briefly keeps
    the checks about what they test, not about that race.
    """
    import asyncio
    import time

    deadline = time.monotonic() + timeout_sec
    while True:
        procs = await sb.processes()
        if len(sleepers(procs, numbers)) >= len(set(numbers)) or time.monotonic() > deadline:
            return procs
        await asyncio.sleep(0.05)
