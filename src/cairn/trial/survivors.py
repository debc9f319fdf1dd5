"""What an agent phase leaves running (issue #29 "survivors on the record"; #34 L4).

By design, as in Harbor, processes an agent started stay alive into the verifier (a server the
task asked for must still answer its tests) unless ``--hardened-verify``. Two things follow:

- **The record.** When an agent phase ends, the processes it started that still run are listed
  on the step's row in result.json (pid, uid, user, command line), shown by ``cairn report``
  and the viewer: a reward a survivor could have touched is visible as such.
- **No borrowed openings.** Before a verifier whose openings or secrets go beyond the agent
  phase's — a wider network mode or allowlist, an LLM judge's host, any verifier-only env
  value — the agent's processes are killed as ``--hardened-verify`` kills them, by default,
  before the sandbox's network switches to the verifier's policy. A verifier with no wider
  access keeps the agent's servers, as before.

Command lines are the agent's output: bounded and escaped here before anything records them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from cairn._util.text import printable
from cairn.errors import SandboxError, SandboxLostError
from cairn.netpolicy import NetworkMode, NetworkPolicy
from cairn.results.model import Survivor
from cairn.sandbox.base import ProcessInfo, Sandbox

if TYPE_CHECKING:  # pragma: no cover
    from cairn.task.model import Step
    from cairn.trial.context import TrialSettings
    from cairn.trial.step import Baseline

MAX_LISTED = 50
"""Survivors listed per step (:attr:`StepResult.survivors_total` counts them all)."""

CMDLINE_MAX_CHARS = 512
"""The longest command line recorded, characters (a longer one ends with ``…``)."""


def clean_cmdline(text: str, limit: int = CMDLINE_MAX_CHARS) -> str:
    """A command line safe to record and show (:func:`cairn._util.text.printable`)."""
    return printable(text, limit)


def _entries(policy: NetworkPolicy) -> set[str]:
    p = policy.effective()
    hosts = p.allowed_hosts if p.mode is NetworkMode.ALLOWLIST else ()
    return {h.strip().lower() for h in (*hosts, *p.model_hosts)}


def network_wider(agent: NetworkPolicy, verifier: NetworkPolicy) -> str | None:
    """Why ``verifier`` opens more than ``agent``, or ``None`` when it opens nothing more.

    Entries are compared as written (normalised case): a verifier entry the agent's policy
    does not list counts as wider even when an agent wildcard would cover it (conservative:
    the kill is the safe side).

    Args:
        agent: the agent phase's policy.
        verifier: the policy the sandbox switches to after the agent phase.
    """
    a, v = agent.effective(), verifier.effective()
    if a.mode is NetworkMode.PUBLIC:
        return None
    if v.mode is NetworkMode.PUBLIC:
        return f"network {v.describe()} beyond the agent's {a.describe()}"
    extra = sorted(_entries(v) - _entries(a))
    if extra:
        return f"network hosts {', '.join(extra[:5])} beyond the agent's {a.describe()}"
    return None


def env_wider(agent_env: Mapping[str, str], verifier_env: Mapping[str, str]) -> str | None:
    """Why the verifier's environment holds what the agent's does not (a judge key, a
    verifier-only secret), or ``None``. Names only: values are never put in the reason."""
    extra = sorted(k for k, v in verifier_env.items() if agent_env.get(k) != v)
    if extra:
        return f"verifier-only env {', '.join(extra[:5])}"
    return None


def verifier_wider(step: Step, s: TrialSettings) -> str | None:
    """Why the step's (shared) verifier has openings or secrets beyond its agent phase, or
    ``None``: a separate verifier sandbox (design §4.6) and ``--no-verify`` never share the
    agent's processes with a verifier.

    Args:
        step: the step.
        s: the trial's settings (its network plan, agent env and verifier envs).
    """
    if not s.verify or step.verifier_mode == "separate":
        return None
    reasons: list[str] = []
    nets = s.networks
    if nets is not None:
        agent = nets.agent.get(step.index, nets.environment)
        after = nets.verifier.get(step.index, nets.environment)
        if (why := network_wider(agent, after)) is not None:
            reasons.append(why)
    if (why := env_wider(s.agent_env, s.verifier_env(step.index))) is not None:
        reasons.append(why)
    return "; ".join(reasons) or None


def setup_wider(step: Step, s: TrialSettings) -> str | None:
    """Why step ``step``'s set-up opens more than the previous step's agent phase had, or
    ``None``: from step 2 on the set-up (the workdir copy, ``setup.sh``) runs under the
    ``[environment]`` policy, and what the earlier agent phases left running would run under
    it too (issue 34, N1). The previous agent phase's policy bounds what every left-over
    process has had: a process left by an earlier step ran through that phase as well.

    Args:
        step: the step about to set up.
        s: the trial's settings (its network plan).
    """
    nets = s.networks
    if step.index < 2 or nets is None or not nets.filtered:
        return None
    return network_wider(nets.agent.get(step.index - 1, nets.environment), nets.environment)


def after_agent_policy(step: Step, s: TrialSettings) -> NetworkPolicy | None:
    """The policy the step's sandbox switches to once its agent phase ended, or ``None``
    (no phase networks: the sandbox keeps its start policy).

    With a shared verifier, its policy (else the environment's): :func:`verifier_wider` has
    killed the agent's processes first when that opens more. When no verifier runs in this
    sandbox after the agent (a separate verifier sandbox, ``--no-verify``), the processes the
    agent left are all that runs here until the next phase, and they get nothing the agent
    phase did not have: a policy wider than the agent's is replaced by the agent's own, its
    model openings closed (issue 34: a left-over process reached the environment's allowlist
    and rewrote an artifact before it was collected). ``pre_artifacts.sh`` runs under it too.

    Args:
        step: the step.
        s: the trial's settings (its network plan, ``--no-verify``).
    """
    nets = s.networks
    if nets is None:
        return None
    after = nets.after_agent(step.index)
    if s.verify and step.verifier_mode != "separate":
        return after
    agent = nets.agent.get(step.index, nets.environment).effective()
    if network_wider(agent, after) is None:
        return after
    return NetworkPolicy(agent.mode, agent.allowed_hosts if agent.mode is NetworkMode.ALLOWLIST else ())


async def _user_names(sandbox: Sandbox, uids: set[int]) -> dict[int, str]:
    """uid → name from the sandbox's ``/etc/passwd`` (best effort: empty when unreadable)."""
    if not uids:
        return {}
    try:
        r = await sandbox.exec(["/bin/sh", "-c", "head -c 262144 /etc/passwd"], user="root", timeout_sec=20)
    except (SandboxError, OSError):
        return {}
    names: dict[int, str] = {}
    for line in r.stdout.splitlines():
        parts = line.split(":")
        if len(parts) > 2 and parts[2].isdigit() and int(parts[2]) in uids:
            names.setdefault(int(parts[2]), parts[0])
    return names


def survivors_from(
    procs: Sequence[ProcessInfo], users: Mapping[int, str], before: Baseline
) -> tuple[list[Survivor], int]:
    """The processes of ``procs`` started since ``before`` (never pid 1), as records.

    Args:
        procs: a listing of the sandbox's processes.
        users: uid → user name (the sandbox's ``/etc/passwd``).
        before: the agent phase's baseline.

    Returns:
        ``(the first MAX_LISTED survivors by pid, how many there are)``.
    """
    new = sorted((p for p in procs if before.is_new(p) and p.pid != 1), key=lambda p: p.pid)

    def user(uid: int | None) -> str | None:
        return clean_cmdline(users[uid], 64) if uid is not None and uid in users else None

    return [
        Survivor(pid=p.pid, uid=p.uid, user=user(p.uid), cmdline=clean_cmdline(p.cmdline))
        for p in new[:MAX_LISTED]
    ], len(new)


async def list_survivors(sandbox: Sandbox, before: Baseline) -> tuple[list[Survivor], int]:
    """The processes started since ``before`` that still run (never pid 1).

    Args:
        sandbox: the trial's sandbox.
        before: the agent phase's baseline (:func:`cairn.trial.step.take_baseline`).

    Returns:
        ``(the first MAX_LISTED survivors by pid, how many there are)``; ``([], 0)`` when the
        processes cannot be listed (the engine being gone is raised).

    Raises:
        SandboxLostError: the engine is gone.
    """
    try:
        procs: Sequence[ProcessInfo] = await sandbox.processes()
    except SandboxLostError:
        raise
    except (SandboxError, OSError):
        return [], 0
    new = [p for p in procs if before.is_new(p) and p.pid != 1]
    names = await _user_names(sandbox, {p.uid for p in new if p.uid is not None})
    return survivors_from(new, names, before)
