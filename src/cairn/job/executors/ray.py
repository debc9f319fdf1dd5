"""The ``ray`` executor: each trial runs as a Ray task on a worker node (docs/scale-out.md).

The driver (``cairn run --executor ray``) stays the only writer of the job folder. Per trial:

1. the task folder travels as tar bytes through Ray's object store, put once per content hash;
   a node unpacks it once into its cache (``$CAIRN_RAY_CACHE`` or ``$TMPDIR/cairn-ray-cache``,
   one folder per node and content hash) and loads the task from there;
2. the worker checks it runs the driver's cairn version and has the trial's backend, then runs
   :func:`cairn.trial.run.run_trial` with the node's own sandbox backend into a temporary
   trial folder, pushing each event line to an actor the driver polls (live progress);
3. the finished trial folder comes back whole as tar bytes and the driver installs it with
   :func:`cairn.results.store.install_trial` (result.json last, ``executor`` recorded).

A node that dies mid-trial (or a worker process that crashes) makes the trial an ``infra``
error (``sandbox_lost``), which the job's run loop retries under ``--max-retries``; Ray itself
never re-runs a trial (``max_retries=0``). A plain cluster is enough: trials are placed by CPUs
(1 CPU per trial by default, whatever the task's ``[environment] cpus``; or
``--ray-trial-cpus``) and each node's sandbox
backends are found by probing it (:mod:`cairn.job.executors.ray_nodes`); the custom resources
``cairn_trial_slot`` and ``cairn_backend_<name>`` stay an option for mixed clusters.

This is the only module that imports :mod:`ray` (the optional extra ``cairn-eval[ray]``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn import __version__
from cairn.errors import Category, ErrorKind, Phase, UsageError
from cairn.events import Event, EventKind, EventSink
from cairn.job.executors import Executor
from cairn.job.executors.ray_nodes import (
    BACKEND_PREFIX,
    SLOT,
    NodeMap,
    backend_resource,
    placement,
    probe_nodes,
    trial_nodes,
)

if TYPE_CHECKING:  # pragma: no cover
    from cairn.plan import JobConfig, TrialPlan
    from cairn.results.model import TrialResult
    from cairn.sandbox.cleanup import CleanReport
    from cairn.trial.context import JobServices

log = logging.getLogger("cairn.job")

INSTALL_HINT = "pip install 'cairn-eval[ray]'"
"""The command that installs the optional extra."""
POLL_SEC = 0.1
"""How often the driver collects event lines from the workers."""
CANCEL_WAIT_SEC = 60.0
"""How long Ctrl-C waits for the worker to remove a cancelled trial's sandbox."""


def _ray() -> Any:
    """Import Ray, or say how to install it.

    Raises:
        UsageError: Ray is not installed.
    """
    try:
        import ray
    except ImportError:
        raise UsageError(f"--executor ray needs Ray: {INSTALL_HINT}") from None
    return ray


# ---- worker side --------------------------------------------------------------------------------
class _EventBox:
    """Ray actor (created by the driver): workers push event values (the frozen
    :mod:`cairn.events` dataclasses, pickled as they are), the driver takes them."""

    def __init__(self) -> None:
        self.rows: list[Event] = []

    def push(self, rows: list[Event]) -> None:
        self.rows.extend(rows)

    def flush(self) -> None:
        """A no-op a worker awaits: Ray runs one caller's calls in order, so its earlier
        pushes are in when this returns."""

    def take(self) -> list[Event]:
        rows, self.rows = self.rows, []
        return rows


def _cache_root(node_id: str) -> Path:
    base = os.environ.get("CAIRN_RAY_CACHE") or os.path.join(tempfile.gettempdir(), "cairn-ray-cache")
    return Path(base) / node_id[:16]


def _cached_task(ray: Any, content_hash: str, folder_name: str, ref: Any, node_id: str) -> Path:
    """The task folder on this node: unpacked once per content hash (atomic rename)."""
    from cairn._util.tar import extract_tar_stream

    root = _cache_root(node_id)
    final = root / content_hash
    if not final.is_dir():
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=root))
        try:
            report = extract_tar_stream([ray.get(ref)], tmp / folder_name)
            if report.refused:
                raise ValueError(f"task archive refused members: {report.refused[:3]}")
            try:
                os.rename(tmp, final)
            except OSError:  # another trial of the same task on this node got there first
                if not final.is_dir():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final / folder_name


def _where(ray: Any) -> dict[str, str]:
    return {"node": ray.get_runtime_context().get_node_id(), "host": socket.gethostname()}


def run_on_node(driver_version: str, plan: TrialPlan, task_ref: list[Any], events: Any) -> dict[str, Any]:
    """The Ray task body: one trial on this worker node (called by Ray, not by users).

    Args:
        driver_version: the driver's cairn version (a mismatch refuses the trial).
        plan: the driver's plan (its task and trial paths are the driver's).
        task_ref: ``[ObjectRef]`` of the task folder's tar bytes (nested so Ray fetches it
            only when this node's cache lacks it).
        events: the driver's event actor.

    Returns:
        ``{"node", "host"}`` plus either ``{"refused": why}`` (nothing was started),
        ``{"lacks": why}`` (this node cannot run the trial's backend; nothing was started) or
        ``{"result": result JSON, "archive": tar bytes of the trial folder}``.
    """
    import ray

    from cairn._util.tar import tar_stream
    from cairn.sandbox import host_problem
    from cairn.task.load import load_task
    from cairn.trial.run import run_trial

    where = _where(ray)
    who = f"worker node {where['host']} ({where['node'][:12]})"
    if driver_version != __version__:
        return {
            **where,
            "refused": f"{who} runs cairn {__version__}, the driver cairn "
            f"{driver_version}: install the same version on every node",
        }
    problem = host_problem(plan.backend)
    if problem is not None:
        return {**where, "lacks": problem}
    try:
        task_dir = _cached_task(ray, plan.task.content_hash, plan.task.path.name, task_ref[0], where["node"])
        task = load_task(task_dir)
    except Exception as exc:  # noqa: BLE001 - any failure to get the task refuses the trial
        return {**where, "refused": f"{who} could not unpack the task: {exc}"}
    if task.content_hash != plan.task.content_hash:
        return {**where, "refused": f"{who}: the task's content hash changed in transit"}

    def push(event: Event) -> None:
        events.push.remote([event])

    work = Path(tempfile.mkdtemp(prefix="cairn-trial-"))
    try:
        local = dataclasses.replace(plan, task=task, trial_dir=work / plan.trial_name)
        try:
            result = asyncio.run(run_trial(local, on_event=push))
        except BaseException:  # cancelled (KeyboardInterrupt from ray.cancel): leave nothing
            from cairn.sandbox.cleanup import remove_trial_sandboxes

            with contextlib.suppress(Exception):
                remove_trial_sandboxes(plan.trial_id)
            raise
        archive = b"".join(tar_stream(local.trial_dir, include_root=False))
        with contextlib.suppress(Exception):
            ray.get(events.flush.remote(), timeout=30)
        return {**where, "result": result.model_dump(mode="json"), "archive": archive}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def probe_node() -> dict[str, Any]:
    """Ray task body (pinned to one node by the driver, no CPU reserved): this node's
    sandbox backends (:func:`cairn.sandbox.host_problem`).

    Returns:
        ``{"node": node id, "host": host name, "backends": {backend name: None when usable,
        else why not}}``.
    """
    import ray

    from cairn.sandbox import BACKEND_NAMES, host_problem

    return {**_where(ray), "backends": {name: host_problem(name) for name in BACKEND_NAMES}}


def clean_on_node(
    job: str | None, own_job_dir: str | None, images: bool, snapshots: bool = False
) -> tuple[dict[str, str], Any]:
    """Ray task body of ``cairn clean --executor ray``: this node's left-over sandboxes.

    Returns:
        ``({"node", "host"}, CleanReport)``.
    """
    import ray

    from cairn.sandbox.cleanup import clean

    return _where(ray), clean(
        job=job, own_job_dir=Path(own_job_dir) if own_job_dir else None, images=images, snapshots=snapshots
    )


# ---- driver side --------------------------------------------------------------------------------
def _errored(plan: TrialPlan, kind: ErrorKind, message: str) -> TrialResult:
    """An infra-errored result for a trial whose node was lost or refused it."""
    from cairn.job.discover import cancelled_result
    from cairn.results.model import ErrorInfo, Outcome

    base = cancelled_result(plan, "not run")
    return base.model_copy(
        update={
            "outcome": Outcome.ERRORED,
            "error": ErrorInfo(kind=kind, category=Category.INFRA, phase=Phase.ENVIRONMENT, message=message),
        }
    )


class RayExecutor(Executor):
    """Runs each trial as a Ray task on a worker node (module docstring)."""

    name = "ray"

    def __init__(self, config: JobConfig) -> None:
        super().__init__(config)
        self._ray: Any = None
        self._owns_ray = False
        self._remote: Any = None
        self._events: Any = None
        self._poller: asyncio.Task[None] | None = None
        self._sinks: dict[str, EventSink] = {}
        self._default_sink: EventSink | None = None
        self._task_refs: dict[str, Any] = {}
        self._nodes: NodeMap | None = None

    def open(self) -> None:
        """Connect to the cluster (``--ray-address``, else ``RAY_ADDRESS``, else a fresh local
        Ray whose one node advertises a slot per ``-n`` and the backends found here).

        Raises:
            UsageError: Ray is not installed, the cluster does not answer, or the job asks
                for step snapshots (``--from``, ``--snapshot-steps``), which stay on a node.
        """
        if self._ray is not None:
            return
        if self.config.from_trial is not None or self.config.snapshot_steps:
            raise UsageError(
                "--executor ray does not take --from or --snapshot-steps yet: step "
                "snapshots stay on the node that made them (docs/scale-out.md)"
            )
        ray = _ray()
        address = self.config.ray_address or os.environ.get("RAY_ADDRESS") or None
        if not ray.is_initialized():
            try:
                if address:
                    ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
                else:
                    ray.init(
                        address="local",
                        include_dashboard=False,
                        logging_level=logging.WARNING,
                        log_to_driver=False,
                        resources=self._local_resources(),
                    )
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise UsageError(
                    f"--executor ray: cannot reach the Ray cluster at {address or 'a fresh local Ray'}: {exc}"
                ) from None
            self._owns_ray = True
        self._ray = ray
        self._remote = ray.remote(max_retries=0)(run_on_node)
        here = ray.get_runtime_context().get_node_id()
        strategy = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(here, soft=True)
        self._events = ray.remote(num_cpus=0)(_EventBox).options(scheduling_strategy=strategy).remote()

    def _local_resources(self) -> dict[str, float]:
        from cairn.sandbox.auto import docker_answers

        n = float(self.config.n_concurrent)
        res = {SLOT: n, backend_resource("local"): n}
        if docker_answers(2.0):
            res[backend_resource("docker")] = n
        return res

    def _node_map(self) -> NodeMap:
        """What the cluster advertises (slots, pinned backends), its nodes probed once."""
        if self._nodes is None:
            have = self._ray.cluster_resources()
            nodes = NodeMap(
                uses_slots=SLOT in have,
                pinned=frozenset(
                    k.removeprefix(BACKEND_PREFIX) for k in have if k.startswith(BACKEND_PREFIX)
                ),
            )
            ids = [n["NodeID"] for n in trial_nodes(self._ray, nodes.uses_slots)]
            probe_nodes(self._ray, probe_node, nodes, ids)
            self._nodes = nodes
        return self._nodes

    def _unknown(self, nodes: NodeMap, backend: str, alive: list[str]) -> bool:
        """One of the ``alive`` nodes is not known to lack ``backend`` (its probe did not
        answer: its first trial finds out)."""
        return bool(set(alive) - set(nodes.lacking(backend)))

    def resolve_backend(self, name: str) -> str:
        """Resolve ``-e`` against what the cluster's nodes run, before any trial starts:
        ``auto`` is ``docker`` when some node has it, else ``local``.

        A node's backends are what it advertises (``cairn_backend_<name>``), else what a probe
        pinned to it found (module :mod:`cairn.job.executors.ray_nodes`).

        Raises:
            UsageError: an unknown backend, no node that can take trials (CPUs, or
                ``cairn_trial_slot`` when some node advertises it), or no node that runs the
                backend (each node's reason given).
        """
        from cairn.sandbox import BACKEND_NAMES

        self.open()
        if name != "auto" and name not in BACKEND_NAMES:
            raise UsageError(f"unknown sandbox backend {name!r}; use auto, " + ", ".join(BACKEND_NAMES))
        nodes = self._node_map()
        alive = [n["NodeID"] for n in trial_nodes(self._ray, nodes.uses_slots)]
        if not alive:
            need = f"a {SLOT} resource" if nodes.uses_slots else "CPUs"
            raise UsageError(
                f"--executor ray: no alive node of the cluster has {need} to run "
                "trials on (docs/scale-out.md)"
            )
        candidates = ("docker", "local") if name == "auto" else (name,)
        for known in (True, False):  # a backend some node was found to run comes first
            for candidate in candidates:
                if (
                    candidate in nodes.pinned
                    or nodes.able(candidate)
                    or (not known and self._unknown(nodes, candidate, alive))
                ):
                    return candidate
        why = "; ".join(f"{c}: {nodes.why_not(c)}" for c in candidates)
        raise UsageError(
            f"-e {name}: no node of the Ray cluster can run "
            f"{'a sandbox backend' if name == 'auto' else 'it'} ({why})"
        )

    def _task_ref(self, plan: TrialPlan) -> Any:
        """The task folder's tar bytes in the object store, put once per content hash."""
        from cairn._util.tar import tar_stream

        h = plan.task.content_hash
        if h not in self._task_refs:
            data = b"".join(tar_stream(plan.task.path, include_root=False))
            self._task_refs[h] = self._ray.put(data)
        return self._task_refs[h]

    def _trial_cpus(self, plan: TrialPlan) -> float:
        """CPUs Ray reserves for the trial: ``--ray-trial-cpus``, else 1 (issue 29: a trial per
        CPU by default; the task's ``[environment] cpus`` is the sandbox's limit, not its Ray
        reservation)."""
        if self.config.ray_trial_cpus is not None:
            return float(self.config.ray_trial_cpus)
        return 1.0

    def _options(self, plan: TrialPlan) -> dict[str, Any]:
        return placement(
            self._node_map(), plan.backend, self._trial_cpus(plan), plan.task.config.environment.memory_mb
        )

    def _unplaceable(self, plan: TrialPlan) -> str | None:
        """Why no alive node can take the trial (backend, CPUs), or ``None``."""
        nodes = self._node_map()
        alive = trial_nodes(self._ray, nodes.uses_slots)
        if plan.backend not in nodes.pinned:
            lacking = set(nodes.lacking(plan.backend))
            alive = [n for n in alive if n["NodeID"] not in lacking]
            if not alive:
                return (
                    f"no alive node of the Ray cluster can run backend {plan.backend} "
                    f"({nodes.why_not(plan.backend)})"
                )
        cpus = self._trial_cpus(plan)
        most = max((float((n.get("Resources") or {}).get("CPU", 0)) for n in alive), default=0.0)
        if cpus > most:
            return (
                f"the trial asks Ray for {cpus:g} CPUs and no node that runs backend "
                f"{plan.backend} has more than {most:g} (--ray-trial-cpus lowers it)"
            )
        return None

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(POLL_SEC)
            with contextlib.suppress(Exception):
                self._dispatch(await self._events.take.remote())

    def _dispatch(self, rows: list[Event]) -> None:
        for event in rows:
            sink = self._sinks.get(event.trial_id or "", self._default_sink)
            if sink is not None:
                sink(event)

    async def _drain(self) -> None:
        with contextlib.suppress(Exception):
            self._dispatch(await self._events.take.remote())

    async def run_trial(
        self, plan: TrialPlan, on_event: EventSink, services: JobServices | None = None
    ) -> TrialResult:
        """Run the trial on a worker node and install its folder here (module docstring).

        ``services`` stay in this process: a worker's trial runs with none (its sandbox
        removal is awaited on the node; no pool crosses to it).

        Returns:
            The result as stored; a lost node or a refusal is an ``infra`` error result.
        """
        from cairn.results.model import ExecutorRef, TrialResult
        from cairn.results.store import TrialPaths, TrialStore, install_trial

        self.open()
        ray = self._ray
        self._sinks[plan.trial_id] = on_event
        self._default_sink = self._default_sink or on_event
        if self._poller is None:
            self._poller = asyncio.create_task(self._poll())
        tp = TrialPaths(plan.trial_dir)
        ref: Any = None
        try:
            try:
                while True:  # a node found without the backend: placed again without it
                    why = self._unplaceable(plan)
                    if why is not None:
                        result = _errored(plan, ErrorKind.START_FAILED, f"ray: {why}")
                        TrialStore(tp).create().write_result(result)
                        return result
                    ref = self._remote.options(**self._options(plan)).remote(
                        __version__, plan, [self._task_ref(plan)], self._events
                    )
                    known = set(self._node_map().lacking(plan.backend))
                    out = await ref
                    if "lacks" not in out:
                        break
                    if str(out["node"]) in known:  # the label selector was not honoured
                        result = _errored(
                            plan,
                            ErrorKind.START_FAILED,
                            f"ray: placed again on node {out['host']}, which "
                            f"cannot run backend {plan.backend}: {out['lacks']}",
                        )
                        TrialStore(tp).create().write_result(result)
                        return result
                    self._node_map().record(
                        str(out["node"]), str(out["host"]), plan.backend, str(out["lacks"])
                    )
                    on_event(
                        Event(
                            EventKind.WARNING,
                            f"[{plan.task.name}] node {out['host']} "
                            f"({str(out['node'])[:12]}) cannot run backend "
                            f"{plan.backend} ({out['lacks']}): placed elsewhere",
                            plan.task.name,
                            plan.trial_id,
                        )
                    )
            except asyncio.CancelledError:
                if ref is not None:  # KeyboardInterrupt in the worker: it removes its sandbox
                    ray.cancel(ref)
                    with contextlib.suppress(BaseException):
                        await asyncio.wait_for(asyncio.wrap_future(ref.future()), CANCEL_WAIT_SEC)
                from cairn.job.discover import cancelled_result

                with contextlib.suppress(OSError):
                    TrialStore(tp).create().write_result(cancelled_result(plan, "interrupted"))
                raise
            except ray.exceptions.RayError as exc:
                first = (str(exc).strip().splitlines() or [""])[0][:300]
                result = _errored(
                    plan,
                    ErrorKind.SANDBOX_LOST,
                    f"ray: the trial's worker was lost ({type(exc).__name__}: {first})",
                )
                TrialStore(tp).create().write_result(result)
                return result
            # The trial has finished on its node: from here a Ctrl-C must not lose it (the CI
            # of 2cc5a80 saw a finished trial with no folder when the interrupt came during
            # the drain). Its folder is installed first; the cancellation is raised after.
            interrupted = False
            try:
                await self._drain()
            except asyncio.CancelledError:
                interrupted = True
            node = ExecutorRef(name=self.name, node=str(out["node"]), host=str(out["host"]))
            if "refused" in out:
                result = _errored(plan, ErrorKind.START_FAILED, str(out["refused"]))
                result = result.model_copy(update={"executor": node})
                TrialStore(tp).create().write_result(result)
                if interrupted:
                    raise asyncio.CancelledError
                return result
            result = TrialResult.model_validate(out["result"]).model_copy(update={"executor": node})
            refused = install_trial(tp, out["archive"], result)
            if refused:
                on_event(
                    Event(
                        EventKind.WARNING,
                        f"[{plan.task.name}] trial archive: refused {len(refused)} unsafe member(s)",
                        plan.task.name,
                        plan.trial_id,
                    )
                )
            if interrupted:
                raise asyncio.CancelledError
            return result
        finally:
            self._sinks.pop(plan.trial_id, None)

    def clean(
        self,
        *,
        job: str | None = None,
        own_job_dir: Path | None = None,
        images: bool = False,
        snapshots: bool = False,
    ) -> CleanReport:
        """Run the clean-up on every alive node of the cluster (and here), one report.

        Each line of the merged report names the node it came from.
        """
        from cairn.sandbox.cleanup import CleanReport, clean

        self.open()
        ray = self._ray
        strategy = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy
        remote = ray.remote(num_cpus=0, max_retries=0)(clean_on_node)
        refs = [
            remote.options(scheduling_strategy=strategy(n["NodeID"], soft=False)).remote(
                job, str(own_job_dir) if own_job_dir else None, images, snapshots
            )
            for n in ray.nodes()
            if n.get("Alive")
        ]
        merged = clean(job=job, own_job_dir=own_job_dir, images=images, snapshots=snapshots)
        for where, rep in ray.get(refs, timeout=300):
            tag = f"{where['host']}/{where['node'][:12]}"
            merged = CleanReport(
                containers=merged.containers + rep.containers,
                networks=merged.networks + rep.networks,
                volumes=merged.volumes + rep.volumes,
                images=merged.images + rep.images,
                folders=merged.folders + rep.folders,
                snapshots=merged.snapshots + rep.snapshots,
                kept=merged.kept + [f"{k} on {tag}" for k in rep.kept],
                errors=merged.errors + [f"{tag}: {e}" for e in rep.errors],
                engine_reachable=merged.engine_reachable or rep.engine_reachable,
            )
        return merged

    def close(self) -> None:
        """Stop polling, hand over the last event lines, and leave a Ray this run started."""
        if self._poller is not None:
            self._poller.cancel()
            self._poller = None
        if self._ray is None:
            return
        with contextlib.suppress(Exception):
            self._dispatch(self._ray.get(self._events.take.remote(), timeout=5))
        with contextlib.suppress(Exception):
            self._ray.kill(self._events)
        if self._owns_ray:
            with contextlib.suppress(Exception):
                self._ray.shutdown()
        self._ray = None
        self._nodes = None
        self._task_refs.clear()
