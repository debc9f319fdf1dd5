"""The relay's HTTP server and upstream client (aiohttp, imported only here).

One :class:`ModelRelay` per job. It listens on ``host:port``; each trial gets a
:class:`~cairn.relay.ledger.TrialLease` whose token the agent presents as its "API key". The relay
holds the provider key, forwards the call to the upstream, passes streams through event by
event as they arrive, reads the provider's usage from a copy, records the call and enforces the
budgets (docs/relay.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import parse_qsl, urlencode

from cairn.relay.ledger import BudgetStop, CallRecord, JobLedger, Limits, TrialLease
from cairn.relay.prices import Price, PriceBook
from cairn.relay.wire import (
    ANTHROPIC,
    CHAT,
    GEMINI,
    PROVIDER_OF,
    Rewrite,
    RolloutTap,
    Route,
    SseSplitter,
    StreamTap,
    body_tap,
    error_body,
    rewrite_request,
    route_of,
    strip_provider_tools,
    wants_stream,
)
from cairn.results.masking import Masker

if TYPE_CHECKING:
    from aiohttp import ClientResponse, ClientSession, web

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
"""RFC 9110 §7.6.1 hop-by-hop headers, never forwarded either way."""

AUTH_HEADERS = frozenset({"authorization", "x-api-key", "api-key", "x-goog-api-key"})
"""Where a client puts its key; the per-trial token is read from any one of them."""

_DROP_REQUEST = HOP_BY_HOP | AUTH_HEADERS | {"host", "content-length", "cookie", "accept-encoding", "expect"}
_DROP_RESPONSE = HOP_BY_HOP | {"content-length", "content-encoding", "set-cookie"}

IDLE_KEEPALIVE_SEC = 5.0
"""How long the relay keeps an idle client connection open, seconds."""


@dataclass(frozen=True)
class Upstream:
    """Where one provider's calls go.

    Attributes:
        base_url: the upstream's base URL (``--ak base_url=URL``), with or without ``/v1``.
        api_key: the provider key the relay sends (``None``: no auth header upstream).
        auth: ``x-api-key`` (Anthropic's default), ``bearer`` (OpenAI's default) or
            ``x-goog-api-key`` (Gemini's default); ``None`` picks the provider's default.
    """

    base_url: str
    api_key: str | None = None
    auth: str | None = None

    def url(self, path: str) -> str:
        """The upstream URL of a canonical path, without doubling a ``/v1``/``/v1beta``."""
        base = self.base_url.rstrip("/")
        for version in ("/v1beta", "/v1"):
            if base.endswith(version) and path.startswith(version + "/"):
                return base + path[len(version) :]
        return base + path

    def auth_headers(self, provider: str) -> dict[str, str]:
        """The upstream auth header for ``provider``'s calls."""
        if not self.api_key:
            return {}
        style = self.auth or {"anthropic": "x-api-key", "gemini": "x-goog-api-key"}.get(provider, "bearer")
        if style == "bearer":
            return {"Authorization": f"Bearer {self.api_key}"}
        return {style: self.api_key}


@dataclass(frozen=True)
class RelayConfig:
    """How a job's relay runs.

    Attributes:
        upstreams: provider (``anthropic``, ``openai``, ``gemini``) or ``*`` → its upstream.
        host: the address to listen on.
        port: the port (0: any free one).
        limits: the budgets (job and default per-trial).
        record_bodies: write request and response bodies into the records (secrets masked).
        rollout: ask OpenAI-compatible chat servers for token ids and logprobs and record them.
        prices: model → price, consulted before LiteLLM's map.
        stop_status: the HTTP status of a budget refusal (400: no pinned CLI retries it except
            mini-swe-agent, which stops on 401 for every provider; see docs/relay.md).
        mask_secrets: more values to mask in recorded bodies (the upstream keys always are).
        max_body_bytes: the largest request body accepted.
        upstream_idle_sec: the longest silence from the upstream before the call fails.
        add_hosts: host name → address the relay resolves itself when it connects to an
            upstream: the job's ``--add-host``, so the relay reaches a model host where the
            sandbox would have (a name only the sandbox's gateway knew fails otherwise).
    """

    upstreams: Mapping[str, Upstream]
    host: str = "127.0.0.1"
    port: int = 0
    limits: Limits = field(default_factory=Limits)
    record_bodies: bool = False
    rollout: bool = False
    prices: Mapping[str, Price] = field(default_factory=dict)
    stop_status: int = 400
    mask_secrets: tuple[str, ...] = ()
    max_body_bytes: int = 64 * 1024 * 1024
    upstream_idle_sec: float = 900.0
    add_hosts: Mapping[str, str] = field(default_factory=dict)


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _guess_family(request: web.Request) -> str:
    if request.path.startswith(("/v1beta", "/models")) or "x-goog-api-key" in request.headers:
        return GEMINI
    if (
        request.path.startswith("/v1/messages")
        or "x-api-key" in request.headers
        or "anthropic-version" in request.headers
    ):
        return ANTHROPIC
    return CHAT


def _tokens_of(request: web.Request) -> set[str]:
    found: set[str] = set()
    for name in AUTH_HEADERS:
        for value in request.headers.getall(name, []):
            value = value.strip()
            if name == "authorization":
                scheme, _, rest = value.partition(" ")
                value = rest.strip() if scheme.lower() == "bearer" else value
            if value:
                found.add(value)
    key = request.query.get("key")
    if key:
        found.add(key)
    return found


class ModelRelay:
    """A job's model relay; an async context manager (started on enter, closed on exit).

    Args:
        config: the :class:`RelayConfig`.

    Attributes:
        ledger: the job's spend and its job-level stop.

    Raises:
        UsageError: aiohttp is not installed (``pip install 'cairn-eval[relay]'``).
    """

    def __init__(self, config: RelayConfig) -> None:
        self.config = config
        self.ledger = JobLedger(config.limits)
        self._prices = PriceBook(config.prices)
        self._leases: dict[str, TrialLease] = {}
        self._inflight: dict[str, set[asyncio.Task[Any]]] = {}
        self._masker = Masker(
            [u.api_key for u in config.upstreams.values() if u.api_key] + list(config.mask_secrets)
        )
        self._runner: Any = None
        self._extra_ports: dict[str, int] = {}
        self._session: ClientSession | None = None
        self._preload: asyncio.Future[None] | None = None
        self.port = 0

    @property
    def url(self) -> str:
        """``http://HOST:PORT``: the base URL agents are given (append ``/v1`` for OpenAI)."""
        return f"http://{self.config.host}:{self.port}"

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.shield(self.aclose())

    async def start(self) -> None:
        """Bind the port and start serving.

        Raises:
            UsageError: aiohttp is missing.
            OSError: the address cannot be bound.
        """
        try:
            import aiohttp
            from aiohttp import web
        except ImportError as exc:
            from cairn.errors import UsageError

            raise UsageError("the model relay needs aiohttp: pip install 'cairn-eval[relay]'") from exc
        app = web.Application(client_max_size=self.config.max_body_bytes)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # An idle client connection is closed after IDLE_KEEPALIVE_SEC, not aiohttp's 75 s: a
        # Node CLI (qwen-code) keeps its process alive while its keep-alive sockets are open, so
        # each step waited the whole 75 s after its answer through the relay.
        runner = web.AppRunner(
            app, access_log=None, handle_signals=False, keepalive_timeout=IDLE_KEEPALIVE_SEC
        )
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.config.host, self.config.port)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = int(runner.addresses[0][1])
        self._preload = asyncio.get_running_loop().run_in_executor(None, self._prices.load)
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(
                limit=0,
                enable_cleanup_closed=True,
                resolver=_add_hosts_resolver(self.config.add_hosts) if self.config.add_hosts else None,
            ),
            timeout=aiohttp.ClientTimeout(
                total=None, sock_connect=10, sock_read=self.config.upstream_idle_sec
            ),
            auto_decompress=True,
        )

    async def listen(self, host: str) -> int:
        """Also serve on ``host`` (an address a sandbox reaches the relay at: the Docker
        bridge's address on this machine), on the relay's own port when it is free there.

        Idempotent per address. Never binds all interfaces.

        Args:
            host: an IP address of this machine.

        Returns:
            The port the relay answers on at ``host``.

        Raises:
            OSError: the address cannot be bound.
            ValueError: ``host`` is ``0.0.0.0``/``::`` (all interfaces) or the relay is not
                started.
        """
        import ipaddress

        from aiohttp import web

        if ipaddress.ip_address(host).is_unspecified:
            raise ValueError("the relay never listens on all interfaces")
        if self._runner is None:
            raise ValueError("the relay is not started")
        if host in self._extra_ports:
            return self._extra_ports[host]
        if host == self.config.host:
            return self.port
        try:
            site = web.TCPSite(self._runner, host, self.port)
            await site.start()
        except OSError:
            site = web.TCPSite(self._runner, host, 0)
            await site.start()
        server = getattr(site, "_server", None)
        sockets = getattr(server, "sockets", None) or ()
        port = int(sockets[0].getsockname()[1]) if sockets else self.port
        self._extra_ports[host] = port
        return port

    async def serve_socket(self, sock: Any) -> Any:
        """Serve on a listening socket made elsewhere (one created inside a sandbox's own
        network namespace, :mod:`cairn.relay.reach`).

        Args:
            sock: a bound, listening ``socket.socket``; the relay owns it from here on.

        Returns:
            A handle for :meth:`stop_serving`.

        Raises:
            ValueError: the relay is not started.
        """
        from aiohttp import web

        if self._runner is None:
            raise ValueError("the relay is not started")
        site = web.SockSite(self._runner, sock)
        await site.start()
        return site

    async def stop_serving(self, handle: Any) -> None:
        """Stop serving on a socket given to :meth:`serve_socket` (idempotent)."""
        with contextlib.suppress(Exception):
            await handle.stop()

    async def aclose(self) -> None:
        """Revoke every trial, stop serving and close the upstream connections."""
        for lease in list(self._leases.values()):
            self.revoke(lease)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self._extra_ports.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._preload is not None:
            await asyncio.gather(self._preload, return_exceptions=True)
            self._preload = None

    # ---- trials ------------------------------------------------------------------------------
    def open_trial(
        self,
        trial_id: str,
        *,
        limits: Limits | None = None,
        on_stop: Callable[[BudgetStop], None] | None = None,
    ) -> TrialLease:
        """Mint a trial's token.

        Args:
            trial_id: the trial's id (written into each record).
            limits: the trial's limits; default the relay's (the job cost limit is always the
                job's).
            on_stop: called once when a budget closes this trial's model.

        Returns:
            The lease; give ``lease.token`` to the agent as its API key.
        """
        lease = TrialLease(trial_id, self.ledger, limits or self.config.limits, on_stop)
        self._leases[_token_hash(lease.token)] = lease
        return lease

    def revoke(self, lease: TrialLease) -> None:
        """Kill a trial's token: later calls get 401; calls in flight are cut off."""
        lease.revoked = True
        self._leases.pop(_token_hash(lease.token), None)
        for task in self._inflight.pop(lease.token, set()):
            task.cancel()

    # ---- serving -------------------------------------------------------------------------------
    async def _error(
        self,
        request: web.Request,
        family: str,
        status: int,
        message: str,
        code: str,
        headers: Mapping[str, str] | None = None,
    ) -> web.StreamResponse:
        from aiohttp import web

        resp = web.json_response(
            error_body(family, status, message, code), status=status, headers=dict(headers or {})
        )
        await resp.prepare(request)
        await resp.write_eof()
        return resp

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        from aiohttp import web

        t0 = time.perf_counter()
        if request.method == "HEAD" and request.path.rstrip("/") == "/api/hello":
            return web.Response(status=200)  # Claude Code's gateway warm-up
        route = route_of(request.method, request.path)
        family = route.family if route is not None else _guess_family(request)
        tokens = _tokens_of(request)
        lease = self._leases.get(_token_hash(next(iter(tokens)))) if len(tokens) == 1 else None
        if lease is None or lease.revoked:
            return await self._error(
                request,
                family,
                401,
                "cairn relay: missing, unknown or expired trial token",
                "invalid_api_key",
            )
        if route is None:
            return await self._error(
                request,
                family,
                404,
                f"cairn relay: no model route {request.method} {request.path}",
                "not_found",
            )
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        model = route.model or (body.get("model") if isinstance(body, dict) else None)
        stream = wants_stream(route, body, dict(request.query))
        rec = lease.new_call(
            endpoint=route.path,
            family=family,
            kind=route.kind,
            model=str(model) if model is not None else None,
            stream=stream,
            request_key=route.path.encode() + b"\0" + raw,
        )
        if self.config.record_bodies:
            rec.request_body = (
                self._masker.mask_json(body)
                if body is not None
                else (self._masker.mask(raw.decode("utf-8", "replace")))
            )
        task = asyncio.current_task()
        if task is not None:
            self._inflight.setdefault(lease.token, set()).add(task)
        try:
            stop = lease.blocked()
            if stop is not None and route.kind == "generate":
                lease.refuse(stop)
                rec.error, rec.status = "budget_exceeded", self.config.stop_status
                resp = await self._error(
                    request,
                    family,
                    self.config.stop_status,
                    stop.message(),
                    "insufficient_quota",
                    {"x-should-retry": "false"},
                )
                rec.ttfb_sec = time.perf_counter() - t0
                return resp
            return await self._forward(request, lease, route, body, raw, stream, rec, t0)
        except asyncio.CancelledError:
            rec.error = rec.error or "aborted"
            raise
        finally:
            rec.latency_sec = round(time.perf_counter() - t0, 6)
            if rec.ttfb_sec is not None:
                rec.ttfb_sec = round(rec.ttfb_sec, 6)
            if route.kind == "generate" and rec.error != "budget_exceeded":
                price = self._prices.price(rec.model, route.family)
                rec.cost_usd = price.cost_usd(rec.usage) if price is not None else None
            if task is not None:
                self._inflight.get(lease.token, set()).discard(task)
            lease.finish_call(rec)

    def _upstream(self, route: Route) -> Upstream | None:
        ups = self.config.upstreams
        return ups.get(PROVIDER_OF[route.family]) or ups.get("*")

    def _out_headers(self, up: ClientResponse) -> dict[str, str]:
        return {k: self._masker.mask(v) for k, v in up.headers.items() if k.lower() not in _DROP_RESPONSE}

    async def _forward(
        self,
        request: web.Request,
        lease: TrialLease,
        route: Route,
        body: Any,
        raw: bytes,
        stream: bool,
        rec: CallRecord,
        t0: float,
    ) -> web.StreamResponse:
        import aiohttp

        upstream = self._upstream(route)
        session = self._session
        if upstream is None or session is None:
            rec.error, rec.status = "no_upstream", 502
            return await self._error(
                request, route.family, 502, "cairn relay: no upstream for this provider", "no_upstream"
            )
        stripped: list[str] = []
        if not lease.provider_tools:
            body, stripped = strip_provider_tools(route, body)
            rec.stripped_tools = stripped or None
        rewrite = rewrite_request(route, body, stream=stream, rollout=self.config.rollout)
        if rewrite.body is not None:
            data = json.dumps(rewrite.body).encode()
        elif stripped:
            data = json.dumps(body).encode()
        else:
            data = raw
        query = [(k, v) for k, v in parse_qsl(request.query_string, keep_blank_values=True) if k != "key"]
        url = upstream.url(route.path) + (f"?{urlencode(query)}" if query else "")
        headers = {
            k: v
            for k, v in request.headers.items()
            if k.lower() not in _DROP_REQUEST and not k.lower().startswith("x-cairn-")
        }
        headers.update(upstream.auth_headers(PROVIDER_OF[route.family]))
        rollout = (
            RolloutTap()
            if self.config.rollout and route.family == CHAT and route.kind == "generate"
            else None
        )
        try:
            async with session.request(
                request.method, url, data=data if raw else None, headers=headers, allow_redirects=False
            ) as up:
                rec.status = up.status
                ctype = up.headers.get("Content-Type", "")
                if up.status < 400 and "text/event-stream" in ctype:
                    return await self._relay_sse(request, up, route, rewrite, rollout, rec, t0)
                if up.status < 400 and stream and route.family == GEMINI:
                    return await self._relay_raw(request, up, route, rec, t0)
                return await self._relay_whole(request, up, route, rewrite, rollout, rec, t0)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            if rec.ttfb_sec is not None:
                rec.error = rec.error or "upstream_broke"
                raise  # an answer had started: closing it must not look like success
            rec.error, rec.status = "upstream_unreachable", 502
            return await self._error(
                request,
                route.family,
                502,
                f"cairn relay: upstream {_netloc(url)} failed: {_connect_cause(exc)}",
                "upstream_unreachable",
            )
        finally:
            if rollout is not None:
                sent = rewrite.body if rewrite.body is not None else body
                rec.rollout = rollout.as_dict(
                    {
                        k: sent[k]
                        for k in (
                            "temperature",
                            "top_p",
                            "top_k",
                            "max_tokens",
                            "max_completion_tokens",
                            "seed",
                            "logprobs",
                            "top_logprobs",
                            "stop",
                            "n",
                        )
                        if isinstance(sent, dict) and k in sent
                    }
                )

    async def _relay_whole(
        self,
        request: web.Request,
        up: ClientResponse,
        route: Route,
        rewrite: Rewrite,
        rollout: RolloutTap | None,
        rec: CallRecord,
        t0: float,
    ) -> web.StreamResponse:
        from aiohttp import web

        data = await up.read()
        parsed: Any = None
        try:
            parsed = json.loads(data) if data else None
        except ValueError:
            parsed = None
        if up.status < 400 and parsed is not None and route.kind == "generate":
            rec.usage, client = body_tap(route.family, parsed, rewrite, rollout)
            rec.complete = True
            if client is not parsed:
                data = json.dumps(client).encode()
        elif up.status < 400:
            rec.complete = True
        data = self._masker.mask_bytes(data)
        if self.config.record_bodies:
            rec.response_body = (
                self._masker.mask_json(parsed) if parsed is not None else (data.decode("utf-8", "replace"))
            )
        resp = web.Response(body=data, status=up.status, headers=self._out_headers(up))
        await resp.prepare(request)
        rec.ttfb_sec = time.perf_counter() - t0
        await resp.write_eof()
        return resp

    async def _relay_sse(
        self,
        request: web.Request,
        up: ClientResponse,
        route: Route,
        rewrite: Rewrite,
        rollout: RolloutTap | None,
        rec: CallRecord,
        t0: float,
    ) -> web.StreamResponse:
        import aiohttp
        from aiohttp import web

        resp = web.StreamResponse(status=up.status, headers=self._out_headers(up))
        await resp.prepare(request)
        tap = StreamTap(route.family, rewrite, rollout=rollout)
        splitter = SseSplitter()
        kept: list[bytes] = []
        broken = False
        try:
            async for chunk in up.content.iter_any():
                for ev in splitter.feed(chunk):
                    out = tap.feed(ev)
                    if out is None:
                        continue
                    out = self._masker.mask_bytes(out)
                    try:
                        await resp.write(out)
                    except ConnectionError:
                        rec.error = "aborted"  # the client left; the upstream call is closed
                        return resp
                    if rec.ttfb_sec is None:
                        rec.ttfb_sec = time.perf_counter() - t0
                    if self.config.record_bodies:
                        kept.append(out)
            tail = splitter.rest()
            if tail:
                await resp.write(self._masker.mask_bytes(tail))
        except asyncio.CancelledError:
            rec.error = rec.error or "aborted"
            raise
        except (aiohttp.ClientError, OSError, TimeoutError):
            rec.error = rec.error or "upstream_broke"
            broken = True
        finally:
            usage = tap.usage
            if not tap.complete and not tap.saw_output:
                usage = replace(usage, output_tokens=None)  # a placeholder, not a count
            rec.usage, rec.complete = usage, tap.complete and tap.error is None
            if tap.error is not None:
                rec.error = rec.error or f"provider: {tap.error}"[:2000]
            elif not tap.complete and rec.error is None:
                rec.error = "incomplete_stream"
            if self.config.record_bodies:
                rec.response_body = b"".join(kept).decode("utf-8", "replace")
        if broken:
            # an answer had started: closing an incomplete stream must not look like success
            if request.transport is not None:
                request.transport.close()
            return resp
        await resp.write_eof()
        return resp

    async def _relay_raw(
        self, request: web.Request, up: ClientResponse, route: Route, rec: CallRecord, t0: float
    ) -> web.StreamResponse:
        """Gemini's ``streamGenerateContent`` without ``alt=sse``: one JSON array, streamed."""
        from aiohttp import web

        resp = web.StreamResponse(status=up.status, headers=self._out_headers(up))
        await resp.prepare(request)
        parts: list[bytes] = []
        async for chunk in up.content.iter_any():
            chunk = self._masker.mask_bytes(chunk)
            await resp.write(chunk)
            if rec.ttfb_sec is None:
                rec.ttfb_sec = time.perf_counter() - t0
            parts.append(chunk)
        whole = b"".join(parts)
        try:
            parsed = json.loads(whole)
            rec.usage, _ = body_tap(route.family, parsed, Rewrite(), None)
            rec.complete = True
        except ValueError:
            rec.error = "incomplete_stream"
        if self.config.record_bodies:
            rec.response_body = whole.decode("utf-8", "replace")
        await resp.write_eof()
        return resp


def _netloc(url: str) -> str:
    """``host:port`` of ``url`` (no user info, path or query: nothing secret), for error text."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = parts.hostname or "?"
    return f"{host}:{parts.port}" if parts.port else host


def _connect_cause(exc: BaseException) -> str:
    """A short cause for an upstream call that failed before any answer, naming a host that
    cannot be resolved or refuses connections in the words the ``llm`` agent's
    ``unreachable_cause`` knows (``name resolution failed``, ``connection refused``), so a
    model host that is not there ends the job fast through the relay too (issue 27).

    Args:
        exc: what aiohttp (or the socket layer) raised.

    Returns:
        One line, at most 200 characters, with the exception's type.
    """
    import socket

    cur: BaseException | None = exc
    seen: set[int] = set()
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, socket.gaierror):
            return f"{type(exc).__name__}: name resolution failed"
        if isinstance(cur, ConnectionRefusedError):
            return f"{type(exc).__name__}: connection refused"
        os_error = getattr(cur, "os_error", None)
        cur = os_error if isinstance(os_error, BaseException) else (cur.__cause__ or cur.__context__)
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first}"[:200]


def _add_hosts_resolver(add_hosts: Mapping[str, str]) -> Any:
    """An aiohttp resolver that answers the names of ``add_hosts`` (name → IPv4/IPv6 address)
    itself and asks the default resolver for every other name.

    Built on call so that aiohttp is imported only when a relay starts."""
    import ipaddress
    import socket

    from aiohttp.abc import AbstractResolver, ResolveResult
    from aiohttp.resolver import DefaultResolver

    table = {name.lower().rstrip("."): addr for name, addr in add_hosts.items()}

    class AddHostsResolver(AbstractResolver):
        def __init__(self) -> None:
            self._default = DefaultResolver()

        async def resolve(
            self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
        ) -> list[ResolveResult]:
            addr = table.get(host.lower().rstrip("."))
            if addr is None:
                return await self._default.resolve(host, port, family)
            fam = socket.AF_INET6 if ipaddress.ip_address(addr).version == 6 else socket.AF_INET
            return [
                ResolveResult(
                    hostname=host,
                    host=addr,
                    port=port,
                    family=fam,
                    proto=0,
                    flags=socket.AI_NUMERICHOST,
                )
            ]

        async def close(self) -> None:
            await self._default.close()

    return AddHostsResolver()
