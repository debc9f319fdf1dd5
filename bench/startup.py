"""How soon ``cairn run`` reaches the Docker engine after its process starts (#13, design §12).

The engine is reached through a relay: this script listens on a Unix socket of its own, points
``DOCKER_HOST`` at it, and forwards every connection to the real engine socket, noting when the
first one arrives and when the first request about the trial's image or container (anything
but ``/_ping``, ``/version``, ``/info``) passes. The figures are those moments − (process
spawn), medians of N runs of a trivial single-step oracle trial, printed next to a bare
``python3 -c pass`` start for scale. The target (design §12) is on the first: the engine ping
``cairn run`` starts before it parses its options.

Usage:
    python3 bench/startup.py [-n 7] [--engine /var/run/docker.sock] [--limit 0.25]

Exit status 0 when the median is within the limit (seconds), 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trivial_vs_floor import REPO, cairn_env, write_task  # noqa: E402

_REQUEST = re.compile(rb"(GET|POST|PUT|DELETE|HEAD) (/\S*) HTTP/1")
_CHECK = re.compile(rb"/(_ping|version|info)$")


class Relay:
    """A Unix-socket relay to the engine that records the time of its first connection."""

    def __init__(self, path: Path, engine: str) -> None:
        self.path, self.engine = path, engine
        self.first: float | None = None
        self.first_work: float | None = None
        self._srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._srv.bind(str(path))
        self._srv.listen(64)
        threading.Thread(target=self._accept, daemon=True).start()

    def reset(self) -> None:
        self.first = None
        self.first_work = None

    def _note(self, data: bytes) -> None:
        if self.first_work is not None:
            return
        for m in _REQUEST.finditer(data):
            path = m.group(2).split(b"?", 1)[0]
            if not _CHECK.search(path):
                self.first_work = time.perf_counter()
                return

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self._srv.accept()
            except OSError:
                return
            if self.first is None:
                self.first = time.perf_counter()
            up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            up.connect(self.engine)
            threading.Thread(target=self._pipe, args=(c, up, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(up, c, False), daemon=True).start()

    def _pipe(self, a: socket.socket, b: socket.socket, requests: bool) -> None:
        try:
            while data := a.recv(65536):
                if requests:
                    self._note(data)
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._srv.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=7)
    ap.add_argument("--engine", default="/var/run/docker.sock")
    ap.add_argument("--limit", type=float, default=0.25)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="cairn-startup-") as tmp:
        root = Path(tmp)
        task = write_task(root / "tasks", "debian:bookworm-slim")
        relay = Relay(root / "engine.sock", args.engine)
        env = {**cairn_env(), "DOCKER_HOST": f"unix://{root / 'engine.sock'}"}
        firsts, works, bare = [], [], []
        for i in range(args.n + 1):  # the first run builds the image and warms .pyc files
            relay.reset()
            t0 = time.perf_counter()
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "cairn",
                    "run",
                    "-p",
                    str(task),
                    "-a",
                    "oracle",
                    "-e",
                    "docker",
                    "--jobs-dir",
                    str(root / "jobs"),
                    "--job-name",
                    f"s{i}",
                ],
                env=env,
                cwd=REPO,
                capture_output=True,
                check=True,
            )
            if i and relay.first is not None:
                firsts.append(relay.first - t0)
            if i and relay.first_work is not None:
                works.append(relay.first_work - t0)
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], check=True)
            bare.append(time.perf_counter() - t0)
        relay.close()
    med = statistics.median(firsts)
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; runs: {len(firsts)}")
    print(
        f"cairn run: process start -> first engine call  {med * 1000:7.1f} ms (median; "
        f"min {min(firsts) * 1000:.1f}, max {max(firsts) * 1000:.1f})"
    )
    if works:
        print(
            f"cairn run: process start -> first image/container call "
            f"{statistics.median(works) * 1000:7.1f} ms (median)"
        )
    print(f"bare python3 -c pass (for scale)               {statistics.median(bare) * 1000:7.1f} ms")
    print(f"target <= {args.limit * 1000:.0f} ms: {'met' if med <= args.limit else 'NOT met'}")
    return 0 if med <= args.limit else 1


if __name__ == "__main__":
    sys.exit(main())
