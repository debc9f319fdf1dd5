"""Per-trial networks and the egress gateway of the docker backend (design §3.1; docs/network.md).

A sandbox's network *layout* follows from every policy it will be switched into (the
environment's, each step's agent and verifier phase):

- ``none`` — every phase ``no-network`` and no model host: ``--network none``, no gateway;
- ``bridge`` — every phase ``public``: the trial's own bridge network (labelled, removed with
  the trial), so no trial reaches another trial's sandbox;
- ``gateway`` — anything else (an allowlist, a model host under ``no-network``, phases that
  differ): the sandbox sits on the trial's *internal* network (no route out, and no address
  on the host, so the host's own listeners are out of reach as well); a gateway
  container joins that network (alias :data:`GATEWAY_ALIAS`) and the default bridge and runs
  :mod:`cairn.sandbox.network.proxy`. The sandbox gets ``HTTP_PROXY``/``HTTPS_PROXY``/
  ``NO_PROXY``/``NODE_USE_ENV_PROXY`` (:func:`proxy_env`). The gateway routes nothing and
  holds no capability (:data:`GATEWAY_SYSCTLS`; docs/network.md). A ``public`` phase in
  this layout also connects the sandbox to the trial's own bridge network for that phase
  (real egress, not only through the proxy); leaving the phase disconnects it.

The gateway image is built once per content hash of the proxy's two files, ``FROM`` the local
``python:3.12-slim`` (never pulled), tagged ``cairn-env:gateway-<hash16>``. The gateway carries
the same ownership labels as every cairn container, so ``cairn clean`` finds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import json
import logging
import posixpath
import re
import tarfile
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import docker.errors

from cairn.errors import ErrorKind, SandboxError
from cairn.netpolicy import NetworkMode, NetworkPolicy, parse_address
from cairn.sandbox.caches import SandboxCaches
from cairn.sandbox.docker.build import _build_lock, in_thread, start_thread, translate

log = logging.getLogger(__name__)

SEALED_PHASE = "closed"
"""The phase name of the closed policy a record pass leaves the gateway in."""
GATEWAY_ALIAS = "cairn-gateway"
"""The gateway's name on the sandbox's internal network (what ``HTTP_PROXY`` points at)."""
PROXY_PORT = 3128
STATE_PATH = "/run/cairn-gateway/state.json"
BASE_IMAGE = "python:3.12-slim"
"""The local image the gateway is built from (``FROM``; nothing is pulled)."""
IMAGE_REPO = "cairn-env"
READY_TIMEOUT_SEC = 30.0
SWITCH_TIMEOUT_SEC = 30.0
NO_PROXY = "localhost,127.0.0.1,::1,0.0.0.0"
"""The local spellings clients compare literally (Node, Python, curl each match ``NO_PROXY``
entries as written). Not ``[::1]``: httpx (≤ 0.28, under the OpenAI SDK, LiteLLM and every
Python agent here) reads a bracketed entry as a URL with the port ``:1]`` and fails every
request of its client; Node's ``fetch`` and urllib then send a request for
``http://[::1]…`` to the gateway (``403``), which the sandbox could not answer anyway (no IPv6 loopback in a
container of an IPv4 network)."""
GATEWAY_SYSCTLS = {
    "net.ipv4.ip_forward": "0",
    "net.ipv4.conf.all.forwarding": "0",
    "net.ipv4.conf.default.forwarding": "0",
    "net.ipv6.conf.all.forwarding": "0",
    "net.ipv6.conf.default.forwarding": "0",
    "net.ipv4.conf.all.rp_filter": "1",
    "net.ipv4.conf.default.rp_filter": "1",
    "net.ipv4.conf.all.accept_source_route": "0",
    "net.ipv4.conf.default.accept_source_route": "0",
    "net.ipv4.conf.all.accept_redirects": "0",
    "net.ipv4.conf.default.accept_redirects": "0",
}
"""The gateway routes nothing (a frame sent to its MAC, tagged or crafted, is not forwarded
at the IP layer: ``ip_forward`` off on every interface, also those joined later, which take
the ``default`` values) and answers only on the side a packet belongs to (strict reverse-path
filter: a packet claiming an internal source that arrives on the egress leg is dropped)."""
INHIBIT_IPV4 = "com.docker.network.bridge.inhibit_ipv4"
MAX_USES = 50
"""How many trials one gateway serves before it is removed (bounds its log)."""
POOL_KIND = "docker-gateway"
POOL_LIMIT = 16
"""The most idle gateways a job keeps (about its concurrency: each returns after its trial)."""
POOL_WAIT_SEC = 3.0
"""How long a starting trial waits for a gateway an earlier trial of its job is handing back
(its container's removal runs beside the next trial, #13) before it makes a fresh one;
a fresh gateway takes about 1 s to start here."""


class Layout(StrEnum):
    """How a sandbox is wired (see the module docstring)."""

    NONE = "none"
    BRIDGE = "bridge"
    GATEWAY = "gateway"


def plan_layout(policies: tuple[NetworkPolicy, ...] | list[NetworkPolicy]) -> Layout:
    """The layout that enforces every one of ``policies``.

    Example: ``[no-network]`` → ``none``; ``[public, public]`` → ``bridge``;
    ``[public, no-network]`` or ``[allowlist [a.test]]`` → ``gateway``.
    """
    modes = {p.mode for p in policies}
    if any(p.needs_gateway for p in policies) or len(modes) > 1:
        return Layout.GATEWAY
    if modes == {NetworkMode.NO_NETWORK}:
        return Layout.NONE
    return Layout.BRIDGE


def proxy_env(extra_no_proxy: tuple[str, ...] = ()) -> dict[str, str]:
    """The variables that send the sandbox's HTTP(S) clients through the gateway.

    ``HTTP_PROXY``/``HTTPS_PROXY`` in both cases (curl reads only the lower-case
    ``http_proxy``), ``NODE_USE_ENV_PROXY=1`` (Node ≥ 22.21 / 24.5: without it the built-in
    ``fetch`` and ``http`` ignore the proxy variables), and ``NO_PROXY``/``no_proxy`` with
    every local spelling (:data:`NO_PROXY`) and ``extra_no_proxy`` (the sandbox's host name,
    compose service names), so a local request never goes to the gateway.
    """
    url = f"http://{GATEWAY_ALIAS}:{PROXY_PORT}"
    no_proxy = ",".join(dict.fromkeys([NO_PROXY, *(h for h in extra_no_proxy if h)]))
    return {
        "HTTP_PROXY": url,
        "HTTPS_PROXY": url,
        "http_proxy": url,
        "https_proxy": url,
        "NO_PROXY": no_proxy,
        "no_proxy": no_proxy,
        "NODE_USE_ENV_PROXY": "1",
    }


def sandbox_hostname(container_name: str) -> str:
    """The host name a sandbox behind the gateway gets (known before it is created, so
    ``NO_PROXY`` can name it): its container name as one DNS label, at most 63 characters."""
    label = re.sub(r"[^a-z0-9-]+", "-", container_name.lower()).strip("-")[:63].strip("-")
    return label or "sandbox"


def engine_addresses(client: Any, caches: SandboxCaches) -> list[str]:
    """The engine host's own addresses a container may reach (each Docker network's gateway
    address and, for a local engine, this machine's addresses): targets a name must not
    resolve to unless the list names them (docs/network.md).

    Asked once per job and engine (``caches``' :class:`~cairn.sandbox.docker.client.EngineFacts`:
    another job, or another ``DOCKER_HOST``, asks its own engine). Never raises (what cannot
    be read is left out; the proxy adds its own addresses and next hops).

    Args:
        client: a Docker SDK client of :func:`~cairn.sandbox.docker.client.make_client`.
        caches: the memos ``client`` was made with.

    Returns:
        The addresses, sorted (a copy: the caller may change it).
    """
    from cairn.sandbox.docker.client import engine_facts
    from cairn.sandbox.network import httpwire

    facts = engine_facts(caches)
    if facts.addresses is not None:
        return list(facts.addresses)
    found: set[str] = set()
    with contextlib.suppress(Exception):
        for net in client.api.networks():
            for cfg in (net.get("IPAM") or {}).get("Config") or []:
                gw = str(cfg.get("Gateway") or "") or _first_host(cfg.get("Subnet"))
                if gw and parse_address(gw) is not None:
                    found.add(gw)
    key = str(getattr(client.api, "base_url", ""))
    if key.startswith(("http+unix://", "unix://", "http+docker://")):
        found |= {str(a) for a in httpwire.local_addresses() if not a.is_loopback and not a.is_link_local}
    facts.addresses = sorted(found)
    return list(facts.addresses)


def _first_host(subnet: object) -> str:
    """The first host address of ``subnet`` (``"172.17.0.0/16"`` → ``"172.17.0.1"``), the one
    Docker's default IPAM gives a network's gateway; ``""`` when it is not a subnet. The engine
    leaves ``Gateway`` out of a network's IPAM config at times (the default bridge after the
    engine restarted onto an existing ``docker0``)."""
    import ipaddress

    try:
        net = ipaddress.ip_network(str(subnet), strict=False)
    except ValueError:
        return ""
    return str(net.network_address + 1) if net.num_addresses > 2 else ""


def _tar_file(name: str, data: bytes) -> bytes:
    """A tar archive holding one file (what ``put_archive`` takes)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mode = 0o600
        info.mtime = int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _untar_one(archive: bytes) -> bytes:
    """The content of the first file of a tar archive (what ``get_archive`` returns)."""
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar:
            if member.isfile():
                f = tar.extractfile(member)
                return f.read(4096) if f is not None else b""
    return b""


# ---- the image ----------------------------------------------------------------------------
def _gateway_files() -> dict[str, bytes]:
    here = Path(__file__).resolve().parents[1]
    proxy = (here / "network" / "proxy.py").read_bytes()
    wire = (here / "network" / "httpwire.py").read_bytes()
    policy = (here.parent / "netpolicy.py").read_bytes()
    dockerfile = (
        f"FROM {BASE_IMAGE}\n"
        "COPY proxy.py httpwire.py netpolicy.py /opt/cairn-gateway/\n"
        "RUN python3 -m compileall -q /opt/cairn-gateway\n"
        'ENTRYPOINT ["python3", "-u", "-S", "/opt/cairn-gateway/proxy.py"]\n'
    ).encode()
    return {"Dockerfile": dockerfile, "proxy.py": proxy, "httpwire.py": wire, "netpolicy.py": policy}


def gateway_image_tag() -> tuple[str, str]:
    """(tag, content hash) of the gateway image for this cairn's proxy files."""
    h = hashlib.sha256()
    for name, data in sorted(_gateway_files().items()):
        h.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    digest = h.hexdigest()
    return f"{IMAGE_REPO}:gateway-{digest[:16]}", digest


@dataclass
class GatewayImageMemo:
    """The gateway images one job found or built (:meth:`cairn.sandbox.caches.SandboxCaches.memo`
    ``"docker.gateway_image"``)."""

    digests: dict[str, str] = field(default_factory=dict)
    """image tag → content digest of the gateway files, once the image exists."""


async def ensure_gateway_image(client: Any, caches: SandboxCaches, timeout_sec: float = 300.0) -> str:
    """Build the gateway image once per content hash (reused by every trial and job; the
    engine is asked once per job).

    Args:
        client: the Docker SDK client.
        caches: the job's memos and build locks (:attr:`cairn.sandbox.base.SandboxSpec.caches`).
        timeout_sec: bound on waiting for and building the image, seconds.

    Returns:
        The image tag.

    Raises:
        SandboxError: ``start_failed`` when the build fails (e.g. no local ``python:3.12-slim``).
    """
    tag, digest = gateway_image_tag()
    memo = caches.memo("docker.gateway_image", GatewayImageMemo)
    if memo.digests.get(tag):
        return tag
    deadline = asyncio.get_running_loop().time() + timeout_sec

    def exists() -> bool:
        try:
            client.api.inspect_image(tag)
            return True
        except docker.errors.NotFound:
            return False

    def build() -> None:
        with tempfile.TemporaryDirectory(prefix="cairn-gateway-") as tmp:
            for name, data in _gateway_files().items():
                Path(tmp, name).write_bytes(data)
            out: list[str] = []
            for chunk in client.api.build(
                path=tmp,
                tag=tag,
                rm=True,
                forcerm=True,
                pull=False,
                labels={"cairn.env_hash": digest, "cairn.backend": "docker"},
                decode=True,
            ):
                if "error" in chunk:
                    raise SandboxError(
                        f"building the egress gateway image failed: {chunk['error']}".strip(),
                        kind=ErrorKind.START_FAILED,
                        detail={"log_tail": "".join(out)[-4000:]},
                    )
                out.append(str(chunk.get("stream") or ""))

    try:
        async with _build_lock(caches, f"gateway-{digest}", deadline):
            with translate("building the egress gateway image", caches, kind=ErrorKind.START_FAILED):
                if not await in_thread(exists):
                    await in_thread(build)
    except TimeoutError:
        raise SandboxError(
            "waited too long for the egress gateway image build", kind=ErrorKind.START_FAILED
        ) from None
    memo.digests[tag] = digest
    return tag


# ---- one trial's networks and gateway -------------------------------------------------------
@dataclass
class _Net:
    name: str
    ident: str


class TrialNetwork:
    """The networks (and, in the gateway layout, the gateway container) of one sandbox.

    Args:
        client: a Docker SDK client.
        layout: the :class:`Layout`.
        labels: cairn's ownership labels (``container_labels`` of the sandbox).
        name_hint: a name stem (``cairn-<slug>-<trial8>``).
        needs_public: the gateway layout switches into a ``public`` phase at some point.
        hosts: host name → address the gateway resolves itself (``--add-host``).
        own_internal: create the internal network (``False`` for a compose project, whose
            own networks are made internal and joined by :meth:`connect_gateway`).
        caches: the job's memos (:attr:`cairn.sandbox.base.SandboxSpec.caches`): the engine's
            own addresses are read once per job (:func:`engine_addresses`), and an engine that
            does not answer is noted in them.
    """

    def __init__(
        self,
        client: Any,
        layout: Layout,
        labels: dict[str, str],
        name_hint: str,
        *,
        needs_public: bool = False,
        hosts: dict[str, str] | None = None,
        own_internal: bool = True,
        caches: SandboxCaches,
    ) -> None:
        self.client = client
        self.caches = caches
        self.layout = layout
        self.labels = dict(labels)
        self.stem = f"{name_hint}-{uuid.uuid4().hex[:6]}"
        self.needs_public = needs_public
        self.own_internal = own_internal
        self.hosts = dict(hosts or {})
        self.local_addresses: list[str] = []
        self.internal: _Net | None = None
        self.public: _Net | None = None
        self.gateway_id: str | None = None
        self.generation = 0
        self.policy: NetworkPolicy | None = None
        self.phase = ""
        self._public_attached: set[str] = set()
        self._records_seen = 0
        self._creating: list[asyncio.Future[Any]] = []
        self.first_generation = 0
        """Records of connections made under an older generation belong to an earlier
        trial of a reused gateway and are never returned."""
        self.uses = 1

    # ---- networks ---------------------------------------------------------------------------
    @property
    def container_network(self) -> str:
        """What the sandbox container is created on (``network_mode``)."""
        if self.layout is Layout.NONE:
            return "none"
        if self.layout is Layout.BRIDGE:
            assert self.public is not None
            return self.public.name
        assert self.internal is not None
        return self.internal.name

    async def create_networks(self) -> None:
        """Create the trial's networks (none for the ``none`` layout).

        Raises:
            SandboxError: ``start_failed``.
        """
        want: list[tuple[str, bool]] = []
        if self.layout is Layout.BRIDGE or (self.layout is Layout.GATEWAY and self.needs_public):
            want.append(("pub", False))
        if self.layout is Layout.GATEWAY and self.own_internal:
            want.append(("int", True))
        results = await asyncio.gather(
            *(self._create_net(kind, internal) for kind, internal in want), return_exceptions=True
        )
        for res in results:
            if isinstance(res, BaseException):
                raise res

    async def _create_net(self, kind: str, internal: bool) -> None:
        name = f"{self.stem}-{kind}"
        api = self.client.api

        def create() -> None:
            # internal: no route out; inhibit_ipv4: no address on the host either, so the
            # host's own services are out of reach too (Docker still gives internal networks
            # a default route to the bridge address otherwise).
            created = api.create_network(
                name,
                driver="bridge",
                internal=internal,
                options={INHIBIT_IPV4: "true"} if internal else None,
                labels={**self.labels, "cairn.network": kind},
                check_duplicate=True,
            )
            net = _Net(name, created["Id"])
            if kind == "int":
                self.internal = net
            else:
                self.public = net

        with translate(f"creating network {name}", self.caches, kind=ErrorKind.START_FAILED):
            fut = start_thread(create)
            self._creating.append(fut)
            await asyncio.shield(fut)

    # ---- the gateway ------------------------------------------------------------------------
    def _state(self, policy: NetworkPolicy, phase: str) -> str:
        return json.dumps(
            {
                "generation": self.generation,
                "phase": phase,
                "policy": policy.to_json(),
                "hosts": self.hosts,
                "local_addresses": self.local_addresses,
            },
            separators=(",", ":"),
        )

    async def start_gateway(self, image: str, policy: NetworkPolicy, phase: str) -> None:
        """Create and start the gateway on the internal network (when this object made one)
        and the default bridge.

        Args:
            image: the gateway image (:func:`ensure_gateway_image`).
            policy: the policy it starts with.
            phase: the phase it starts in.

        Raises:
            SandboxError: ``start_failed``.
        """
        api = self.client.api
        self.policy, self.phase = policy, phase
        name = f"{self.stem}-gw"

        def create() -> None:
            self.local_addresses = engine_addresses(self.client, self.caches)
            state = self._state(policy, phase)
            internal = self.internal
            netcfg = (
                api.create_networking_config(
                    {internal.name: api.create_endpoint_config(aliases=[GATEWAY_ALIAS])}
                )
                if internal is not None
                else None
            )
            # It uses no capability (port 3128, its own files): all dropped, NET_RAW too,
            # and it routes nothing (GATEWAY_SYSCTLS).
            host = api.create_host_config(
                network_mode=internal.name if internal is not None else "bridge",
                init=True,
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                sysctls=GATEWAY_SYSCTLS,
            )
            created = api.create_container(
                image,
                command=[
                    "serve",
                    STATE_PATH,
                    str(PROXY_PORT),
                    state,
                    "primary" if internal is not None else "any",
                ],
                name=name,
                labels={**self.labels, "cairn.role": "gateway"},
                host_config=host,
                networking_config=netcfg,
                detach=True,
            )
            self.gateway_id = created["Id"]
            api.start(self.gateway_id)

        def egress() -> None:  # the proxy needs no egress to come up: join while it starts
            api.connect_container_to_network(self.gateway_id, "bridge")

        with translate("starting the egress gateway", self.caches, kind=ErrorKind.START_FAILED):
            fut = start_thread(create)
            self._creating.append(fut)
            await asyncio.shield(fut)
            if self.internal is not None:
                fut = start_thread(egress)
                self._creating.append(fut)
                await asyncio.gather(asyncio.shield(fut), self.wait_ready())
            else:
                await self.wait_ready()

    async def wait_ready(self) -> None:
        """Wait until the proxy listens (its first output line), bounded; one streaming read
        of the gateway's output, no polling.

        Raises:
            SandboxError: ``start_failed`` with the gateway's output when it does not come up.
        """
        assert self.gateway_id is not None
        api = self.client.api
        gid = self.gateway_id
        seen: list[bytes] = []

        def follow() -> bool:
            for chunk in api.logs(gid, stdout=True, stderr=True, stream=True, follow=True):
                seen.append(chunk)
                if b'"event":"ready"' in b"".join(seen[-4:]):
                    return True
            return False  # the stream ended: the proxy exited

        try:
            with translate("reading the gateway's output", self.caches, kind=ErrorKind.START_FAILED):
                ready = await asyncio.wait_for(in_thread(follow), READY_TIMEOUT_SEC)
        except TimeoutError:
            ready = False
        if not ready:
            out = b"".join(seen).decode("utf-8", "replace")
            raise SandboxError(
                f"the egress gateway did not come up: {out[-1500:]}",
                kind=ErrorKind.START_FAILED,
                detail={"logs": out[-4000:]},
            )

    async def apply(
        self, policy: NetworkPolicy, phase: str, sandbox_id: str | None, *, wait: bool = True
    ) -> None:
        """Switch to ``policy`` for ``phase``: new proxy generation (closes every tunnel opened
        before), and the public network attached or detached.

        With ``wait=False`` the state is copied in without waiting for the proxy's
        acknowledgement: every connection made after this returns already sees it (the proxy
        reads a changed state before serving each one), but tunnels opened before may still be
        open — only for a gateway that has none (a recycled one, before its trial's sandbox
        exists).

        Raises:
            SandboxError: the switch failed (the trial cannot be trusted to continue).
        """
        if self.layout is not Layout.GATEWAY:
            return
        assert self.gateway_id is not None
        api = self.client.api
        gid = self.gateway_id
        self.generation += 1
        want = str(self.generation).encode()
        state = _tar_file(posixpath.basename(STATE_PATH), self._state(policy, phase).encode())

        def run() -> bool:
            # Copy the state in (no process started in the gateway), then wait for the
            # proxy's acknowledgement: by then every older tunnel is closed.
            api.put_archive(gid, posixpath.dirname(STATE_PATH), state)
            return True if not wait else self._acknowledged(want)

        with translate("switching the gateway's policy", self.caches):
            ok = await in_thread(run)
        if not ok:
            raise SandboxError(
                f"the egress gateway did not take the {phase} policy within {SWITCH_TIMEOUT_SEC:g} s"
            )
        self.policy, self.phase = policy, phase
        if sandbox_id is not None and self.public is not None:
            await self.attach_public(sandbox_id, policy.mode is NetworkMode.PUBLIC)

    def _acknowledged(self, want: bytes) -> bool:
        """Poll (bounded, backing off) until the proxy names generation ``want`` as applied;
        False when it does not within :data:`SWITCH_TIMEOUT_SEC` (runs in a worker thread)."""
        api, gid = self.client.api, self.gateway_id
        applied = f"{posixpath.dirname(STATE_PATH)}/{posixpath.basename(STATE_PATH)}.applied"
        delay = 0.005
        deadline = time.monotonic() + SWITCH_TIMEOUT_SEC
        while time.monotonic() < deadline:
            try:
                chunks, _ = api.get_archive(gid, applied)
                if _untar_one(b"".join(chunks)).strip() == want:
                    return True
            except docker.errors.NotFound:
                pass
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
        return False

    async def confirm(self) -> None:
        """Wait until the proxy acknowledges the current generation (after an
        ``apply(wait=False)``): a reused gateway that died idle fails here.

        Raises:
            SandboxError: ``start_failed`` (infra, retried on a fresh gateway).
        """

        def check() -> bool:  # a gateway no longer running fails at once, not after the wait
            state = self.client.api.inspect_container(self.gateway_id).get("State") or {}
            return bool(state.get("Running")) and self._acknowledged(str(self.generation).encode())

        with translate("confirming the gateway's policy", self.caches, kind=ErrorKind.START_FAILED):
            ok = await in_thread(check)
        if not ok:
            raise SandboxError("the reused egress gateway did not answer", kind=ErrorKind.START_FAILED)

    async def attach_public(self, container_id: str, attached: bool) -> None:
        """Connect or disconnect a container to the trial's public network (idempotent)."""
        if self.public is None or attached == (container_id in self._public_attached):
            return
        api = self.client.api
        with translate("switching the sandbox's network", self.caches):
            if attached:
                await in_thread(api.connect_container_to_network, container_id, self.public.name)
                self._public_attached.add(container_id)
            else:
                await in_thread(
                    api.disconnect_container_from_network, container_id, self.public.name, force=True
                )
                self._public_attached.discard(container_id)

    async def records(self, sandbox_id: str | None = None, *, seal: bool = True) -> list[dict[str, Any]]:
        """The gateway's connection records not returned before (each a dict of the proxy's
        JSON line; lines that are not records are skipped).

        With ``seal`` (what a trial's record pass after a step gets) the gateway first takes
        a closed policy (``no-network``, phase :data:`SEALED_PHASE`): every connection still
        open — an agent's tunnel, a verifier's request — is cut and its record (with its
        bytes) written before this reads, and nothing new reaches out until the next
        :meth:`apply`. So the last read of a trial holds every connection, and nothing can be
        contacted between it and the gateway's removal or recycling.
        """
        if self.gateway_id is None:
            return []
        if seal and self.layout is Layout.GATEWAY:
            await self.apply(NetworkPolicy(NetworkMode.NO_NETWORK), SEALED_PHASE, sandbox_id)
        with translate("reading the gateway's records", self.caches):
            raw = await in_thread(self.client.api.logs, self.gateway_id, stdout=True, stderr=False)
        out: list[dict[str, Any]] = []
        lines = raw.decode("utf-8", "replace").splitlines()
        if raw and not raw.endswith(b"\n"):
            lines = lines[:-1]  # a line still being written: read it next time
        for line in lines[self._records_seen :]:
            with contextlib.suppress(ValueError, TypeError):
                item = json.loads(line)
                if isinstance(item, dict) and "verdict" in item:
                    if int(item.pop("generation", self.first_generation)) < self.first_generation:
                        continue  # an earlier trial's connection, ended late (reused gateway)
                    out.append(item)
        self._records_seen = len(lines)
        return out

    async def connect_gateway(self, network: str) -> None:
        """Join the gateway to another network (a compose project's) under its alias."""
        assert self.gateway_id is not None
        with translate(f"connecting the gateway to {network}", self.caches, kind=ErrorKind.START_FAILED):
            await in_thread(
                self.client.api.connect_container_to_network,
                self.gateway_id,
                network,
                aliases=[GATEWAY_ALIAS],
            )

    # ---- reuse by a later trial of the same job (cairn.sandbox.pools) -------------------------
    @property
    def poolable_plan(self) -> bool:
        """Whether a network of this plan may be taken from a job's pool (the gateway
        layout on its own internal network, and never a public phase)."""
        return self.layout is Layout.GATEWAY and self.own_internal and not self.needs_public

    @property
    def poolable(self) -> bool:
        """Whether this network can serve a later trial: the gateway layout on its own
        internal network, no public network, started, and not worn out."""
        return (
            self.layout is Layout.GATEWAY
            and self.own_internal
            and self.public is None
            and self.internal is not None
            and self.gateway_id is not None
            and self.uses < MAX_USES
        )

    async def recycle(self) -> bool:
        """Make the network safe for another trial, once the trial's containers are gone:
        the gateway takes a closed policy (``no-network``, empty host map; a new generation,
        so every tunnel of the trial is cut before this returns), the trial's records are
        read past, and the internal network must hold nothing but the gateway.

        Returns:
            ``True`` when it can be reused; ``False`` (and nothing changed that matters) when
            it must be removed instead. Never raises.
        """
        if not self.poolable:
            return False
        assert self.internal is not None
        try:
            self.hosts = {}
            await self.apply(NetworkPolicy(NetworkMode.NO_NETWORK), "idle", None)
            await self.records(seal=False)  # the trial's own lines are behind us now
            info = await in_thread(self.client.api.inspect_network, self.internal.ident)
        except Exception as exc:  # noqa: BLE001 - not reusable: removed instead
            log.info("gateway %s not reused: %s", (self.gateway_id or "")[:12], exc)
            return False
        attached = set((info.get("Containers") or {}).keys())
        if attached != {self.gateway_id}:
            log.info(
                "gateway %s not reused: its network still holds %s",
                (self.gateway_id or "")[:12],
                sorted(attached - {self.gateway_id}),
            )
            return False
        self.first_generation = self.generation
        return True

    async def adopt(self, client: Any, policy: NetworkPolicy, phase: str, hosts: dict[str, str]) -> None:
        """Take this recycled network for a new trial: its client, its host map and its first
        policy (a new generation; records of earlier generations are never returned).

        Raises:
            SandboxError: the gateway did not take the policy (the caller removes it).
        """
        self.client = client
        self.hosts = dict(hosts)
        self._creating = []
        self._public_attached = set()
        self.uses += 1
        self.first_generation = self.generation + 1
        # recycle() cut every tunnel and no container but the gateway is on the network: the
        # new state only has to be in place before the trial's sandbox exists
        await self.apply(policy, phase, None, wait=False)

    # ---- removal ----------------------------------------------------------------------------
    async def remove(self) -> None:
        """Remove the gateway and the networks (after the sandbox's containers are gone).
        Never raises; labels let ``cairn clean`` finish what fails here."""
        await self.remove_gateway()
        api = self.client.api

        async def drop(net: _Net) -> None:
            try:
                await in_thread(api.remove_network, net.ident)
            except docker.errors.NotFound:
                pass
            except Exception as exc:  # noqa: BLE001 - stop never raises
                log.warning("could not remove network %s: %s", net.name, exc)

        await asyncio.gather(*(drop(n) for n in (self.internal, self.public) if n is not None))
        self.internal = self.public = None

    async def remove_gateway(self) -> None:
        """Remove the gateway container (first, so the networks it joined can go). Never
        raises."""
        for fut in self._creating:  # let a cancelled create land, then remove what it made
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(fut), 60)
        api = self.client.api
        if self.gateway_id is not None:
            gid, self.gateway_id = self.gateway_id, None
            try:
                await in_thread(api.remove_container, gid, force=True, v=True)
            except docker.errors.NotFound:
                pass
            except Exception as exc:  # noqa: BLE001 - stop never raises
                log.warning("could not remove gateway %s: %s", gid[:12], exc)
