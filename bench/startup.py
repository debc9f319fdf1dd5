"""How soon ``cairn run`` reaches the Docker engine after its process starts (#13, design §12).

The engine is reached through a relay: this script listens on a Unix socket of its own, points
``DOCKER_HOST`` at it, and forwards every connection to the real engine socket, noting when the
first one arrives. The figure is (first connection) − (process spawn), median of N runs of a
trivial single-step oracle trial, printed next to a bare ``python3 -c pass`` start for scale.

Usage:
    python3 bench/startup.py [-n 7] [--engine /var/run/docker.sock] [--limit 0.25]

Exit status 0 when the median is within the limit (seconds), 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
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


class Relay:
    """A Unix-socket relay to the engine that records the time of its first connection."""

    def __init__(self, path: Path, engine: str) -> None:
        self.path, self.engine = path, engine
        self.first: float | None = None
        self._srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._srv.bind(str(path))
        self._srv.listen(64)
        threading.Thread(target=self._accept, daemon=True).start()

    def reset(self) -> None:
        self.first = None

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
            for a, b in ((c, up), (up, c)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
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
        firsts, bare = [], []
        for i in range(args.n + 1):  # the first run builds the image and warms .pyc files
            relay.reset()
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "cairn", "run", "-p", str(task), "-a",
                            "oracle", "-e", "docker", "--jobs-dir", str(root / "jobs"),
                            "--job-name", f"s{i}"], env=env, cwd=REPO,
                           capture_output=True, check=True)
            if i and relay.first is not None:
                firsts.append(relay.first - t0)
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], check=True)
            bare.append(time.perf_counter() - t0)
        relay.close()
    med = statistics.median(firsts)
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; runs: {len(firsts)}")
    print(f"cairn run: process start -> first engine call  {med * 1000:7.1f} ms (median; "
          f"min {min(firsts) * 1000:.1f}, max {max(firsts) * 1000:.1f})")
    print(f"bare python3 -c pass (for scale)               "
          f"{statistics.median(bare) * 1000:7.1f} ms")
    print(f"target <= {args.limit * 1000:.0f} ms: {'met' if med <= args.limit else 'NOT met'}")
    return 0 if med <= args.limit else 1


if __name__ == "__main__":
    sys.exit(main())
