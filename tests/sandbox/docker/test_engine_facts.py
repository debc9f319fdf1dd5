"""What a job learns about the Docker engine (API version, version, own addresses, BuildKit
support) belongs to the job's :class:`~cairn.sandbox.caches.SandboxCaches`, per engine: an
engine restarted as another version, or replaced, between two jobs of one process (the Python
API, a Ray worker) is probed again by the second job (issues #28 and #29).

The engine replaced between jobs is a stand-in on a Unix socket of the test's own that answers
the three calls these facts come from (``/version``, ``/vX/version``, ``/vX/networks``) and
counts them: the machine's engine cannot be upgraded under a test. One test (``docker``) reads
the real engine; the last one holds that the moments the engine went silent are the job's too.
"""

from __future__ import annotations

import json
import socketserver
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from cairn.sandbox.caches import SandboxCaches
from cairn.sandbox.docker import buildkit
from cairn.sandbox.docker.client import engine_facts, engine_version, make_client
from cairn.sandbox.docker.gateway import engine_addresses
from cairn.trial.context import JobServices


@dataclass
class _Engine:
    """What the stand-in engine says, and the paths it was asked (without the version)."""

    api_version: str
    version: str
    gateway: str
    asked: Counter[str] = field(default_factory=Counter)


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def _serve(sock: Path, engine: _Engine) -> socketserver.UnixStreamServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            path = self.path.split("?")[0]
            bare = "/" + path.lstrip("/").split("/", 1)[1] if path.startswith("/v1.") else path
            engine.asked[bare if path == bare else f"versioned {bare}"] += 1
            if bare == "/version":
                body = {"Version": engine.version, "ApiVersion": engine.api_version, "Os": "linux"}
            elif bare == "/networks":
                body = [{"Name": "bridge", "IPAM": {"Config": [{"Gateway": engine.gateway}]}}]
            else:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet
            pass

    server = _UnixHTTPServer(str(sock), Handler)
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True, name="stand-in-engine"
    ).start()
    return server


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[_Engine]:
    """A stand-in engine at ``DOCKER_HOST`` answering as docker 20.10 (API 1.41)."""
    engine = _Engine("1.41", "20.10.24", "192.0.2.1")
    sock = tmp_path / "engine.sock"
    server = _serve(sock, engine)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{sock}")
    try:
        yield engine
    finally:
        server.shutdown()
        server.server_close()


def _facts(caches: SandboxCaches) -> tuple[str, str | None, list[str]]:
    client = make_client(caches, timeout=10)
    try:
        return client.api.api_version, engine_version(client, caches), engine_addresses(client, caches)
    finally:
        client.close()


def test_a_job_asks_the_engine_once(stand_in: _Engine) -> None:
    caches = JobServices.for_job([], prestart=False, limit=1, in_process=True).caches
    first = _facts(caches)
    assert first[:2] == ("1.41", "20.10.24")
    assert "192.0.2.1" in first[2]
    again = _facts(caches)
    assert again == first
    # one API-version detection, one version, one network listing for the whole job
    assert stand_in.asked == Counter({"/version": 1, "versioned /version": 1, "versioned /networks": 1})


def test_an_engine_upgraded_between_two_jobs_is_probed_again(stand_in: _Engine) -> None:
    job_a = JobServices.for_job([], prestart=False, limit=1, in_process=True)
    assert _facts(job_a.caches)[:2] == ("1.41", "20.10.24")
    support_a = buildkit.buildkit_support(job_a.caches)
    assert support_a.engine == "20.10.24"
    # the engine restarts as docker 24 on other networks before the process's next job
    stand_in.api_version, stand_in.version, stand_in.gateway = "1.43", "24.0.7", "198.51.100.1"
    job_b = JobServices.for_job([], prestart=False, limit=1, in_process=True)
    api, version, addresses = _facts(job_b.caches)
    assert (api, version) == ("1.43", "24.0.7")
    assert "198.51.100.1" in addresses and "192.0.2.1" not in addresses
    support_b = buildkit.buildkit_support(job_b.caches)
    assert support_b.engine == "24.0.7"
    assert "heredoc" in buildkit.frontend_features(support_b.engine)
    assert engine_facts(job_a.caches) is not engine_facts(job_b.caches)
    assert stand_in.asked["/version"] == 2  # each job detected the API version itself


def test_a_fresh_caches_outside_a_job_probes_on_its_own(stand_in: _Engine) -> None:
    job = SandboxCaches()
    _facts(job)
    stand_in.version = "24.0.7"
    assert _facts(SandboxCaches())[1] == "24.0.7"  # e.g. a backend classmethod's own caches
    assert _facts(job)[1] == "20.10.24"  # the job keeps what it learnt, once


def test_facts_are_kept_per_engine_host(
    tmp_path: Path, stand_in: _Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    caches = SandboxCaches()
    assert _facts(caches)[1] == "20.10.24"
    other = _Engine("1.43", "24.0.7", "198.51.100.1")
    server = _serve(tmp_path / "other.sock", other)
    try:
        monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'other.sock'}")
        api, version, addresses = _facts(caches)  # the same job, another engine
        assert (api, version) == ("1.43", "24.0.7")
        assert "198.51.100.1" in addresses and "192.0.2.1" not in addresses
    finally:
        server.shutdown()
        server.server_close()
    assert engine_facts(caches, f"unix://{tmp_path / 'engine.sock'}").version == "20.10.24"


@pytest.mark.docker
def test_the_facts_are_the_real_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    from testbed import need_backend

    need_backend("docker")
    r = subprocess.run(
        ["docker", "version", "--format", "{{.Server.Version}} {{.Server.APIVersion}}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    version, api = r.stdout.split()
    job_a, job_b = SandboxCaches(), SandboxCaches()
    facts_a = _facts(job_a)
    assert facts_a[:2] == (api, version)
    assert facts_a == _facts(job_b)  # the same engine, learnt twice
    assert engine_facts(job_a) is not engine_facts(job_b)
    assert engine_facts(job_a).addresses == facts_a[2]


def test_engine_silences_are_the_jobs_and_outlive_a_lost_engine() -> None:
    import time

    import requests.exceptions

    from cairn.sandbox.docker.build import is_engine_gone, silent_near

    job_a, job_b = SandboxCaches(), SandboxCaches()
    assert is_engine_gone(requests.exceptions.ConnectionError("refused"), job_a)
    now = time.time()
    noted = silent_near(now, job_a)
    assert noted is not None and now - 60 < noted <= now
    assert silent_near(now, job_b) is None  # another job's silence explains none of its stops
    job_a.engine_lost()  # the retry's memos go; the record of the restart stays
    assert silent_near(now, job_a) == noted
