"""``cairn view`` refuses a port it cannot listen on with exit 2 and one clear line, never a
traceback: a port outside 0-65535, a port another process holds, a host that is no address."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from cairncli import run_cairn
from viewer_job import env


def _view(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "jobs").mkdir(exist_ok=True)
    return run_cairn("view", str(tmp_path / "jobs"), *args, env=env(), timeout=60)


@pytest.mark.parametrize(
    "port,message",
    [
        ("99999", "less than or equal to 65535"),
        ("65536", "less than or equal to 65535"),
        ("-1", "greater than or equal to 0"),
    ],
)
def test_port_out_of_range_is_a_usage_error(tmp_path, port, message):
    p = _view(tmp_path, f"--port={port}")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "--port" in p.stderr and message in p.stderr
    assert "Traceback" not in p.stderr and "OverflowError" not in p.stderr


def test_port_in_use_names_the_address_and_exits_2(tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        p = _view(tmp_path, "--port", str(port))
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.strip() == (
        f"cairn: error: cannot listen on 127.0.0.1:{port}: Address "
        "already in use (choose another --port, or 0 for any free one)"
    )


def test_unknown_host_exits_2_without_traceback(tmp_path):
    p = _view(tmp_path, "--host", "no-such-host.invalid", "--port", "0")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "cannot listen on no-such-host.invalid:0" in p.stderr
    assert "Traceback" not in p.stderr


def test_bind_refuses_a_port_outside_the_range():
    from cairn.viewer import bind

    with pytest.raises(ValueError, match="port 70000 is outside 0-65535"):
        bind("127.0.0.1", 70000)
