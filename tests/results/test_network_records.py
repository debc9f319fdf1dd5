"""``network.jsonl`` lines are :class:`ConnectionRecord` values: what the gateway's proxy
writes validates, the store appends through the model, and the typed reader reads it back."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

import cairn.sandbox.network.proxy as proxy_mod
from cairn.results.model import ConnectionRecord
from cairn.results.store import Masker, TrialPaths, TrialStore, read_network_records


def _proxy_records(tmp_path: Path) -> list[dict[str, object]]:
    """Run the real proxy on loopback, send it a denied request and a request it cannot
    parse, and return its record lines (the ``ready`` line left out)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    state = {"generation": 3, "phase": "agent", "policy": {"mode": "no-network"}, "peers": ["127.0.0.0/8"]}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-u",
            proxy_mod.__file__,
            "serve",
            str(tmp_path / "state.json"),
            str(port),
            json.dumps(state),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    try:
        assert json.loads(proc.stdout.readline())["event"] == "ready"
        for head in (b"GET http://sneaky.test/x HTTP/1.1\r\nHost: sneaky.test\r\n\r\n", b"nonsense\r\n\r\n"):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
                c.sendall(head)
                c.recv(4096)
        return [json.loads(proc.stdout.readline()) for _ in range(2)]
    finally:
        proc.kill()
        proc.wait(10)


def test_the_proxys_records_are_connection_records_field_for_field(tmp_path: Path) -> None:
    lines = _proxy_records(tmp_path)
    for line in lines:
        assert set(line) == set(ConnectionRecord.model_fields), line
        rec = ConnectionRecord.model_validate(line)
        assert (rec.generation, rec.phase, rec.verdict) == (3, "agent", "denied")
    hosts = {ConnectionRecord.model_validate(x).host for x in lines}
    assert "sneaky.test" in hosts


def test_the_store_appends_through_the_model_and_reads_back_typed(tmp_path: Path) -> None:
    secret = "s3cr3t-value"
    store = TrialStore(TrialPaths(tmp_path / "t"), Masker([secret])).create()
    hostile = "\x1b[31mevil\n.test"
    records = [
        {"time": "2026-12-02T12:00:00.000Z", "phase": "agent", "conn": 1, "request": 1,
         "peer": "10.0.0.2:40000", "method": "CONNECT", "host": hostile, "port": 443,
         "address": None, "verdict": "denied", "reason": f"not allowed {secret}", "cut": False,
         "bytes_out": 0, "bytes_in": 0},
        {"time": "2026-12-02T12:00:01.000Z", "phase": "verifier", "conn": 2, "request": 1,
         "peer": "10.0.0.2:40001", "method": "GET", "host": "ok.test", "port": 80,
         "address": "10.0.0.9", "verdict": "allowed", "reason": None, "cut": True,
         "bytes_out": 10, "bytes_in": 2000},
    ]  # fmt: skip
    counts = store.append_network_records(1, "main", records)
    assert (counts.allowed, counts.denied) == (1, 1)
    path = store.paths.step(1, "main").network
    on_disk = [json.loads(x) for x in path.read_text().splitlines()]
    assert set(on_disk[0]) == set(records[0])  # the fields as the gateway gave them, no more
    assert secret not in path.read_text()
    back = read_network_records(path)
    assert [r.host for r in back] == [hostile, "ok.test"]
    assert back[1].bytes_in == 2000 and back[1].cut and back[0].generation is None
    with path.open("a") as f:
        f.write('{"verdict": "maybe"}\n{"time": "torn')
    assert len(read_network_records(path)) == 2  # a line that is not a record is left out
    assert read_network_records(tmp_path / "absent.jsonl") == []


def test_a_record_that_is_not_one_is_refused_before_it_is_written(tmp_path: Path) -> None:
    store = TrialStore(TrialPaths(tmp_path / "t")).create()
    with pytest.raises(ValidationError):
        store.append_network_records(1, "main", [{"verdict": "allowed", "surprise": 1}])
    assert (
        not store.paths.step(1, "main").network.exists()
        or not store.paths.step(1, "main").network.read_text()
    )
