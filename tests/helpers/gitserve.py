"""Real git repositories of tasks, served on 127.0.0.1 for the datasets tests.

- :func:`commit_all` commits a work tree and returns the commit id.
- :class:`GitDaemon` runs ``git daemon`` (``git://127.0.0.1:<port>/<name>``).
- :class:`SmartHTTP` runs ``git http-backend`` behind a small threaded HTTP server
  (``http://127.0.0.1:<port>/git/<name>``) that also serves static files (a registry.json)
  from a folder (``http://127.0.0.1:<port>/files/<name>``).

Both bind a free port on loopback only and stop when their ``with`` block ends.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(*args: str, cwd: Path) -> str:
    """Run git in ``cwd``; return stdout (raises on failure)."""
    p = subprocess.run(
        ["git", *args],
        cwd=cwd,
        env={**os.environ, **GIT_ENV},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if p.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {p.stderr}")
    return p.stdout


def init_repo(path: Path) -> Path:
    """An empty repository with a work tree at ``path`` (branch ``main``)."""
    path.mkdir(parents=True, exist_ok=True)
    git("init", "-q", "-b", "main", cwd=path)
    return path


def commit_all(repo: Path, message: str = "tasks") -> str:
    """Commit every file of the work tree; return the commit id."""
    git("add", "-A", cwd=repo)
    git("commit", "-q", "--allow-empty", "-m", message, cwd=repo)
    return git("rev-parse", "HEAD", cwd=repo).strip()


def bare_clone(repo: Path, dest: Path) -> Path:
    """A bare copy of ``repo`` at ``dest`` (what the servers export)."""
    if dest.exists():
        shutil.rmtree(dest)
    git("clone", "-q", "--bare", str(repo), str(dest), cwd=repo.parent)
    return dest


def push(repo: Path, bare: Path, *, force: bool = False) -> None:
    """Push ``main`` (and tags) of ``repo`` to the bare repository ``bare``."""
    git("push", "-q", *(["--force"] if force else []), str(bare), "main", "--tags", cwd=repo)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_listening(port: int, proc: subprocess.Popen | None = None, timeout_sec: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_sec
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        with socket.socket() as s:
            s.settimeout(0.2)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout_sec} s")


class GitDaemon:
    """``git daemon`` exporting every repository under ``base`` on 127.0.0.1.

    Args:
        base: the folder of bare repositories.
        config: extra ``-c key=value`` settings for the daemon's upload-pack (e.g.
            ``uploadpack.allowFilter=true``).
    """

    def __init__(self, base: Path, *, config: dict[str, str] | None = None) -> None:
        self.base = Path(base)
        self.port = free_port()
        self.config = dict(config or {})
        self.proc: subprocess.Popen | None = None

    def url(self, name: str) -> str:
        return f"git://127.0.0.1:{self.port}/{name}"

    def start(self) -> GitDaemon:
        cfg = []
        for k, v in self.config.items():
            cfg += ["-c", f"{k}={v}"]
        self.proc = subprocess.Popen(
            [
                "git",
                *cfg,
                "daemon",
                "--reuseaddr",
                "--export-all",
                f"--base-path={self.base}",
                "--listen=127.0.0.1",
                f"--port={self.port}",
                str(self.base),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, **GIT_ENV},
        )
        _wait_listening(self.port, self.proc)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None

    def __enter__(self) -> GitDaemon:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _handle(self) -> None:
        path, _, query = self.path.partition("?")
        self.server.requests.append(path)
        if path.startswith("/files/"):
            f = self.server.files / path[len("/files/") :]
            if self.command != "GET" or not f.is_file():
                self.send_error(404)
                return
            data = f.read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if not path.startswith("/git/"):
            self.send_error(404)
            return
        body = self._body()
        env = {
            **os.environ,
            "GIT_PROJECT_ROOT": str(self.server.repos),
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": path[len("/git") :],
            "REQUEST_METHOD": self.command,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_ADDR": "127.0.0.1",
        }
        if self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        p = subprocess.run(
            ["git", *self.server.git_config, "http-backend"],
            input=body,
            env=env,
            capture_output=True,
            timeout=60,
            check=False,
        )
        head, _, payload = p.stdout.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = p.stdout.partition(b"\n\n")
        status, headers = 200, []
        for line in head.decode("latin-1").splitlines():
            k, _, v = line.partition(":")
            if k.lower() == "status":
                status = int(v.strip().split()[0])
            elif k:
                headers.append((k, v.strip()))
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = _handle
    do_POST = _handle


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    repos: Path
    files: Path
    git_config: list[str]
    requests: list[str]


class SmartHTTP:
    """Smart HTTP git (``git http-backend``) plus static files, on 127.0.0.1.

    Args:
        repos: the folder of bare repositories (``/git/<name>``).
        files: the folder of static files (``/files/<name>``).
        config: ``-c key=value`` settings for http-backend's upload-pack.
    """

    def __init__(self, repos: Path, files: Path, *, config: dict[str, str] | None = None) -> None:
        self.server = _Server(("127.0.0.1", 0), _Handler)
        self.server.repos, self.server.files = Path(repos), Path(files)
        self.server.git_config = [a for k, v in (config or {}).items() for a in ("-c", f"{k}={v}")]
        self.server.requests = []
        self.port = self.server.server_address[1]
        self._thread: threading.Thread | None = None

    @property
    def requests(self) -> list[str]:
        return self.server.requests

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/git/{name}"

    def file_url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/files/{name}"

    def __enter__(self) -> SmartHTTP:
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self.server.shutdown()
            self.server.server_close()
            self._thread.join(timeout=10)
            self._thread = None

    def __exit__(self, *exc: object) -> None:
        self.stop()
