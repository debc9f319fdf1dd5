"""What each node of a Ray cluster can run, for the ``ray`` executor (docs/scale-out.md).

A cluster started the ordinary way (``ray start --head``, ``ray start --address=…``) advertises
CPUs and memory only. cairn finds each node's sandbox backends itself: before the first trial
it runs a tiny probe task pinned to every alive node that can take trials (no CPU reserved), and
a node that joins later is probed by the first trial Ray places on it (the trial's worker checks
its backend before anything starts). A node found without the trial's backend is then left out
of that backend's placements with a label selector on Ray's own ``ray.io/node-id`` label, so,
for example, a node without Docker never starts a docker trial.

Custom resources stay an option for mixed or shared clusters: a node started with
``--resources '{"cairn_trial_slot": N}'`` bounds the trials it runs at once (when any node of
the cluster advertises it, trials ask for one slot each and only such nodes take them), and
``cairn_backend_docker`` / ``cairn_backend_local`` pin a backend's trials to the nodes that
advertise it (no probing for that backend).

This module never imports :mod:`ray` itself: the functions take the imported module (the probe
task body is :func:`cairn.job.executors.ray.probe_node`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SLOT = "cairn_trial_slot"
"""Optional custom resource: one unit per trial a node runs at once."""
BACKEND_PREFIX = "cairn_backend_"
"""Optional custom resource prefix: ``cairn_backend_local`` / ``cairn_backend_docker`` on a
node that has that sandbox backend."""
NODE_ID_LABEL = "ray.io/node-id"
"""The label Ray puts on every node (its node id), used to leave nodes out of a placement."""
PROBE_TIMEOUT_SEC = 60.0
"""How long the driver waits for the nodes' probes before the first trial (a node that does
not answer in time is probed by its first trial instead)."""


def backend_resource(backend: str) -> str:
    """The custom resource a node may advertise when it has ``backend``
    (``cairn_backend_local``)."""
    return BACKEND_PREFIX + backend


@dataclass
class NodeMap:
    """The driver's view of which node runs which backend (filled by probes and by trials).

    Attributes:
        uses_slots: some node advertises :data:`SLOT`: trials ask for one slot each.
        pinned: backends some node advertises a :func:`backend_resource` for (placed by that
            resource, never probed).
        hosts: node id → host name, for messages.
        problems: node id → {backend: why not}; ``None`` means the node runs that backend.
    """

    uses_slots: bool = False
    pinned: frozenset[str] = frozenset()
    hosts: dict[str, str] = field(default_factory=dict)
    problems: dict[str, dict[str, str | None]] = field(default_factory=dict)

    def record(self, node: str, host: str, backend: str, problem: str | None) -> None:
        """Note what a probe or a trial found about ``backend`` on ``node``."""
        self.hosts[node] = host
        self.problems.setdefault(node, {})[backend] = problem

    def lacking(self, backend: str) -> list[str]:
        """Node ids found unable to run ``backend`` (sorted)."""
        return sorted(n for n, p in self.problems.items() if p.get(backend))

    def able(self, backend: str) -> list[str]:
        """Node ids found able to run ``backend`` (sorted)."""
        return sorted(n for n, p in self.problems.items() if backend in p and p[backend] is None)

    def why_not(self, backend: str, limit: int = 4) -> str:
        """The nodes that lack ``backend`` and why, for an error message."""
        nodes = self.lacking(backend)
        parts = [f"{self.hosts.get(n, '?')} ({n[:12]}): {self.problems[n][backend]}" for n in nodes[:limit]]
        more = f"; and {len(nodes) - limit} more" if len(nodes) > limit else ""
        return "; ".join(parts) + more


def trial_nodes(ray: Any, uses_slots: bool) -> list[dict[str, Any]]:
    """The alive nodes that can take a trial: with a :data:`SLOT` when the cluster uses slots,
    else with at least some CPU.

    Args:
        ray: the imported :mod:`ray` module (connected).
        uses_slots: the cluster advertises :data:`SLOT` somewhere.

    Returns:
        ``ray.nodes()`` entries.
    """
    out = []
    for node in ray.nodes():
        res = node.get("Resources") or {}
        if node.get("Alive") and (res.get(SLOT, 0) > 0 if uses_slots else res.get("CPU", 0) > 0):
            out.append(node)
    return out


def probe_nodes(
    ray: Any, probe: Any, nodes: NodeMap, node_ids: list[str], timeout_sec: float = PROBE_TIMEOUT_SEC
) -> None:
    """Run ``probe`` (the Ray task body :func:`cairn.job.executors.ray.probe_node`) on each of
    ``node_ids`` (pinned, no CPU reserved) and record every backend's answer in ``nodes``.
    A node that does not answer within ``timeout_sec`` stays unknown (its first trial checks
    it).

    Args:
        ray: the imported :mod:`ray` module (connected).
        probe: the probe function (returns ``{"node", "host", "backends"}``).
        nodes: the map to fill.
        node_ids: the nodes to probe.
        timeout_sec: bound of the whole probe, in seconds.
    """
    if not node_ids:
        return
    affinity = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy
    remote = ray.remote(num_cpus=0, max_retries=0)(probe)
    refs = [remote.options(scheduling_strategy=affinity(n, soft=False)).remote() for n in node_ids]
    ready, late = ray.wait(refs, num_returns=len(refs), timeout=timeout_sec)
    for ref in late:
        ray.cancel(ref, force=True)
    for ref in ready:
        try:
            info = ray.get(ref)
        except Exception:  # noqa: BLE001 - a node lost mid-probe stays unknown
            continue
        for backend, problem in info["backends"].items():
            nodes.record(str(info["node"]), str(info["host"]), backend, problem)


def placement(
    nodes: NodeMap,
    backend: str,
    cpus: float,
    memory_mb: int | None,
) -> dict[str, Any]:
    """Ray task options that place a trial of ``backend`` where it can run.

    Args:
        nodes: what is known of the cluster's nodes.
        backend: the trial's sandbox backend.
        cpus: CPUs the trial reserves.
        memory_mb: memory the trial reserves (``None``: none).

    Returns:
        ``num_cpus``, ``memory``, ``resources`` (a slot, a pinned backend's resource) and a
        ``label_selector`` leaving out the nodes known to lack the backend.
    """
    resources: dict[str, float] = {}
    if nodes.uses_slots:
        resources[SLOT] = 1.0
    if backend in nodes.pinned:
        resources[backend_resource(backend)] = 0.001
    opts: dict[str, Any] = {"num_cpus": cpus, "resources": resources}
    if memory_mb:
        opts["memory"] = int(memory_mb) * 1024 * 1024
    lacking = nodes.lacking(backend) if backend not in nodes.pinned else []
    if lacking:
        opts["label_selector"] = {NODE_ID_LABEL: f"!in({','.join(lacking)})"}
    return opts


__all__ = [
    "BACKEND_PREFIX",
    "NODE_ID_LABEL",
    "SLOT",
    "NodeMap",
    "backend_resource",
    "placement",
    "probe_nodes",
    "trial_nodes",
]
