"""Building and caching the local backend's Dockerfile layers (design §3.2).

An environment's Dockerfile runs once, in a build sandbox (host network, like ``docker build``)
whose upper folders are then merged into one tree and kept as a layer under
``<state>/layers/<env_hash>/`` (``root/`` + ``meta.json`` with WORKDIR, ENV, USER…). Later
sandboxes of the same environment, in this job or any later one, mount it as a read-only lower
layer above the host folders. One build at a time per hash: an ``asyncio.Lock`` of the job
(:mod:`cairn.sandbox.caches`) and a file lock across jobs and processes; the layer is built in a
temporary folder and renamed into place, so a reader never sees half a layer.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import fnmatch
import json
import os
import posixpath
import re
import tempfile
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from cairn._util.treehash import tree_hash
from cairn.errors import BuildError, ErrorKind, SandboxError
from cairn.lock import flock_async
from cairn.sandbox.base import SandboxSpec
from cairn.sandbox.local.dockerfile import (
    DockerfileError,
    DockerIgnore,
    ImageMeta,
    Instruction,
    analyze,
    expand,
    key_values,
    parse_dockerfile,
    split_words,
)
from cairn.sandbox.local.files import SandboxFS, resolve_user
from cairn.sandbox.local.namespace import InitConfig, NamespaceRuntime
from cairn.sandbox.local.rootfs import (
    HostSupport,
    layers_dir,
    prepare_mask,
    prepare_skeleton,
    remove_tree,
    root_plan,
)

LAYER_FORMAT = 1
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
LOG_TAIL_CHARS = 4000
RUN_OUTPUT_CAP = 1 << 20


@dataclass
class LayerMemo:
    """What the local backend remembers of one job's layer builds
    (:meth:`cairn.sandbox.caches.SandboxCaches.memo` ``"local.layer"``)."""

    force_built: set[str] = field(default_factory=set)
    """Layer keys rebuilt under ``--force-build`` already (once per job)."""


@dataclass(frozen=True)
class Layer:
    """A built layer.

    Attributes:
        path: the layer folder.
        root: its file tree (a lower layer of every sandbox of the environment).
        meta: WORKDIR, ENV, USER… recorded by the build.
    """

    path: Path
    root: Path
    meta: ImageMeta


def layer_key(spec: SandboxSpec) -> str:
    """The cache key of ``spec``'s environment: ``env_hash`` (else a hash of ``env_dir``)."""
    assert spec.env_dir is not None
    raw = spec.env_hash or tree_hash(spec.env_dir)
    return re.sub(r"[^A-Za-z0-9_.-]", "_", raw)[:64]


def load_layer(path: Path) -> Layer | None:
    """Read a committed layer folder, or ``None`` if it is missing or of another format."""
    try:
        data = json.loads((path / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if data.get("format") != LAYER_FORMAT or not (path / "root").is_dir():
        return None
    return Layer(path=path, root=path / "root", meta=ImageMeta.from_json(data["meta"]))


@contextlib.asynccontextmanager
async def _file_lock(path: Path) -> AsyncIterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        await flock_async(fd, 0.05)
        yield
    finally:
        os.close(fd)


async def ensure_layer(spec: SandboxSpec, support: HostSupport) -> Layer | None:
    """Return the layer of ``spec``'s Dockerfile, building it first if needed.

    Returns ``None`` when the environment has no Dockerfile. ``spec.force_build`` rebuilds
    once per job (:attr:`cairn.sandbox.base.SandboxSpec.caches`; an older layer still used by
    running sandboxes is moved aside, never deleted under them).

    Raises:
        UnsupportedError: the Dockerfile is outside the subset.
        BuildError: ``build_failed`` (a RUN failed, a COPY source is missing, a malformed
            Dockerfile) or ``build_timeout`` (past ``spec.build_timeout_sec``).
    """
    if spec.env_dir is None or not (spec.env_dir / "Dockerfile").is_file():
        return None
    key = layer_key(spec)
    final = layers_dir() / key
    memo = spec.caches.memo("local.layer", LayerMemo)
    async with spec.caches.lock(f"local-layer-{key}"), _file_lock(layers_dir() / f".{key}.lock"):
        force = spec.force_build and key not in memo.force_built
        layer = None if force else load_layer(final)
        if layer is not None:
            with contextlib.suppress(OSError):
                os.utime(final / "meta.json")
            return layer
        try:
            async with asyncio.timeout(spec.build_timeout_sec):
                layer = await _build(spec, support, key, final)
        except TimeoutError:
            raise BuildError(
                ErrorKind.BUILD_TIMEOUT, f"local layer build exceeded {spec.build_timeout_sec:.0f} s"
            ) from None
        if spec.force_build:
            memo.force_built.add(key)
        return layer


async def _build(spec: SandboxSpec, support: HostSupport, key: str, final: Path) -> Layer:
    assert spec.env_dir is not None
    text = (spec.env_dir / "Dockerfile").read_text(encoding="utf-8", errors="replace")
    try:
        instructions = parse_dockerfile(text)
    except DockerfileError as exc:
        raise BuildError(
            ErrorKind.BUILD_FAILED, f"malformed Dockerfile: {exc}", detail={"log_tail": str(exc)}
        ) from None
    analyze(instructions)
    build_dir = layers_dir() / f".build-{key[:16]}-{uuid.uuid4().hex[:8]}"
    build_dir.mkdir(parents=True)
    builder = _Builder(spec, support, build_dir)
    try:
        meta = await builder.run(instructions)
        meta.layer_id = f"local:{key[:12]}"
        staged = build_dir / "layer"
        await asyncio.to_thread(_assemble, build_dir, staged, builder.overlay_rels)
        (staged / "meta.json").write_text(
            json.dumps(
                {
                    "format": LAYER_FORMAT,
                    "key": key,
                    "meta": meta.to_json(),
                    "created_at": dt.datetime.now(dt.UTC).isoformat(),
                },
                indent=2,
            ),
            encoding="utf-8",
        )
        (staged / "build.log").write_text(builder.log_text(), encoding="utf-8")
        if final.exists():
            os.rename(final, final.with_name(f".old-{key}-{uuid.uuid4().hex[:8]}"))
        os.rename(staged, final)
    finally:
        await builder.stop()
        await asyncio.to_thread(remove_tree, build_dir)
    layer = load_layer(final)
    assert layer is not None
    return layer


def _assemble(build_dir: Path, staged: Path, rels: list[str]) -> None:
    """Merge the build sandbox's upper folders (``rels``: the overlays besides the root)
    into one tree, ``staged/root``."""
    staged.mkdir()
    root = staged / "root"
    os.rename(build_dir / "up" / "root", root)
    for rel in rels:
        src = build_dir / "up" / rel
        if not src.is_dir() or not any(os.scandir(src)):
            continue
        target = root / rel
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            os.rename(src, target)
            continue
        for child in os.listdir(src):
            remove_tree(target / child)
            os.rename(src / child, target / child)


def _is_tar(path: Path) -> bool:
    """Whether ``path`` is an archive ``ADD`` unpacks (:func:`tarfile.is_tarfile`). ``tarfile``
    is imported here, not with the module: a local run that adds no file does not load it."""
    import tarfile

    return tarfile.is_tarfile(path)


class _Builder:
    """Runs Dockerfile instructions in a build sandbox and records the image metadata."""

    def __init__(self, spec: SandboxSpec, support: HostSupport, build_dir: Path) -> None:
        self.spec = spec
        self.support = support
        self.dir = build_dir
        self.context = spec.env_dir
        self.ns: NamespaceRuntime | None = None
        self.fs: SandboxFS | None = None
        self.log: list[str] = []
        self.overlay_rels: list[str] = []
        ignore = (self.context / ".dockerignore") if self.context else None
        self.ignore = DockerIgnore(ignore.read_text(encoding="utf-8") if ignore and ignore.is_file() else "")

    def log_text(self) -> str:
        """The whole build log."""
        return "".join(self.log)

    def _fail(self, message: str, **detail: object) -> BuildError:
        tail = self.log_text()[-LOG_TAIL_CHARS:]
        return BuildError(ErrorKind.BUILD_FAILED, message, detail={"log_tail": tail, **detail})

    async def start(self) -> None:
        prepare_skeleton(self.dir / "skel")
        prepare_mask(self.dir / "mask", "cairn-build")
        plan = root_plan(self.dir, [], own_net=False, privileged=self.support.privileged)
        self.overlay_rels = [op["rel"] for op in plan if op["op"] == "overlay" and op["rel"] != "root"]
        self.ns = NamespaceRuntime(self.support)
        await self.ns.start(
            InitConfig(plan=plan, rootfs=self.dir / "rootfs", hostname="cairn-build", own_net=False)
        )
        self.fs = SandboxFS(self.ns.root)

    async def stop(self) -> None:
        if self.ns is not None:
            await self.ns.stop()

    async def run(self, instructions: list[Instruction]) -> ImageMeta:
        """Execute every instruction; returns the recorded metadata.

        Raises:
            BuildError: ``build_failed``.
        """
        await self.start()
        meta = ImageMeta()
        global_args: dict[str, str | None] = {}
        args: dict[str, str | None] = {}
        seen_from = False
        total = len(instructions)
        for n, ins in enumerate(instructions, 1):
            self.log.append(f"Step {n}/{total} : {ins.keyword} {ins.args}\n")
            vars_ = {**{k: v for k, v in args.items() if v is not None}, **meta.env}
            try:
                kw = ins.keyword
                if kw == "ARG":
                    for word in split_words(ins.args, vars_):
                        name, eq, value = word.partition("=")
                        scope = args if seen_from else global_args
                        scope[name] = value if eq else global_args.get(name)
                elif kw == "FROM":
                    seen_from = True
                    g = {k: v for k, v in global_args.items() if v is not None}
                    meta.from_image = expand(ins.args.split()[0], g) if ins.args else None
                elif kw == "ENV":
                    for k, v in key_values(ins.args, vars_):
                        meta.env[k] = v
                elif kw == "LABEL":
                    meta.labels.update(key_values(ins.args, vars_))
                elif kw == "WORKDIR":
                    path = posixpath.join(meta.workdir or "/", expand(ins.args, vars_))
                    meta.workdir = posixpath.normpath(path)
                    await asyncio.to_thread(self._mkdir, meta.workdir)
                elif kw == "USER":
                    meta.user = expand(ins.args, vars_)
                elif kw == "SHELL":
                    if not ins.json_args:
                        raise DockerfileError("SHELL needs the JSON array form")
                    meta.shell = ins.json_args
                elif kw == "CMD":
                    meta.cmd = ins.json_args if ins.json_args is not None else ins.args
                elif kw == "VOLUME":
                    for v in ins.json_args or split_words(ins.args, vars_):
                        await asyncio.to_thread(self._mkdir, posixpath.join(meta.workdir or "/", v))
                elif kw in ("COPY", "ADD"):
                    await asyncio.to_thread(self._copy, ins, vars_, meta)
                elif kw == "RUN":
                    await self._run(ins, args, meta)
            except DockerfileError as exc:
                raise self._fail(f"Dockerfile line {ins.line}: {exc}") from None
            except (OSError, SandboxError) as exc:
                self.log.append(f"error: {exc}\n")
                raise self._fail(
                    f"Dockerfile line {ins.line}: {ins.keyword} failed: {exc}", line=ins.line
                ) from None
        return meta

    def _mkdir(self, path: str) -> None:
        assert self.fs is not None
        os.close(self.fs.open_dir(path, create=True))

    async def _run(self, ins: Instruction, args: dict[str, str | None], meta: ImageMeta) -> None:
        assert self.ns is not None and self.fs is not None
        argv = ins.json_args if ins.json_args is not None else [*meta.shell, ins.args]
        resolved = resolve_user(self.fs, meta.user)
        if resolved is None:
            raise self._fail(f"Dockerfile line {ins.line}: unable to find user {meta.user}")
        uid, gid, groups, home = resolved
        env = {
            "PATH": DEFAULT_PATH,
            "HOSTNAME": "cairn-build",
            "HOME": home,
            **{k: v for k, v in args.items() if v is not None},
            **meta.env,
        }
        r = await self.ns.run(
            list(argv),
            uid=uid,
            gid=gid,
            groups=groups,
            cwd=meta.workdir or "/",
            env=env,
            timeout_sec=None,
            max_output_bytes=RUN_OUTPUT_CAP,
        )
        self.log.append(r.stdout)
        self.log.append(r.stderr)
        if r.exit_code != 0:
            self.log.append(f"The command '{' '.join(argv)}' returned a non-zero code: {r.exit_code}\n")
            raise self._fail(
                f"Dockerfile line {ins.line}: RUN failed with exit code {r.exit_code}",
                exit_code=r.exit_code,
                line=ins.line,
            )

    # ---- COPY / ADD ---------------------------------------------------------------------
    def _sources(self, pattern: str) -> list[Path]:
        assert self.context is not None
        ctx = self.context.resolve()
        rel = posixpath.normpath(pattern.lstrip("/")) if pattern.strip("/") else "."
        if rel == ".." or rel.startswith("../"):
            raise DockerfileError(f"forbidden path outside the build context: {pattern}")
        if not any(c in rel for c in "*?["):
            p = ctx / rel
            if not os.path.lexists(p) or (rel != "." and self.ignore.ignored(rel)):
                raise DockerfileError(
                    f"{pattern}: file not found in build context or excluded by .dockerignore"
                )
            return [p]
        matches = []
        for dirpath, dirnames, filenames in os.walk(ctx):
            for name in sorted(dirnames + filenames):
                p = Path(dirpath, name)
                r = p.relative_to(ctx).as_posix()
                if (
                    r.count("/") == rel.count("/")
                    and fnmatch.fnmatchcase(r, rel)
                    and not self.ignore.ignored(r)
                ):
                    matches.append(p)
        if not matches:
            raise DockerfileError(f"{pattern}: no source files were specified")
        return sorted(matches)

    def _skip(self, host_path: str) -> bool:
        assert self.context is not None
        rel = Path(host_path).relative_to(self.context.resolve()).as_posix()
        return self.ignore.ignored(rel)

    def _copy(self, ins: Instruction, vars_: dict[str, str], meta: ImageMeta) -> None:
        assert self.fs is not None
        words = (
            [expand(w, vars_) for w in ins.json_args]
            if ins.json_args is not None
            else split_words(ins.args, vars_)
        )
        if len(words) < 2:
            raise DockerfileError(f"{ins.keyword} needs a source and a destination")
        dest = words[-1]
        dest_is_dir = dest.endswith("/") or dest in (".", "..")
        dest = posixpath.normpath(posixpath.join(meta.workdir or "/", dest))
        sources = [p for pat in words[:-1] for p in self._sources(pat)]
        if len(sources) > 1 and not dest_is_dir:
            raise DockerfileError(
                f"When using {ins.keyword} with more than one source file, "
                "the destination must be a directory and end with a /"
            )
        owner = None
        if "chown" in ins.flags:
            resolved = resolve_user(self.fs, expand(ins.flags["chown"], vars_))
            if resolved is None:
                raise DockerfileError(f"--chown={ins.flags['chown']}: unknown user or group")
            owner = resolved[0], resolved[1]
        chmod = int(ins.flags["chmod"], 8) if "chmod" in ins.flags else None
        for src in sources:
            if ins.keyword == "ADD" and src.is_file() and _is_tar(src):
                self._add_tar(src, dest, owner, chmod)
                continue
            if src.is_dir() and not src.is_symlink():
                targets = self._copy_dir(src, dest)
            else:
                is_dir = dest_is_dir or self._is_dir(dest)
                target = posixpath.join(dest, src.name) if is_dir else dest
                self.fs.upload(src, target)
                targets = [target]
            for t in targets:
                self._set_owner_mode(t, owner, chmod)

    def _is_dir(self, path: str) -> bool:
        assert self.fs is not None
        try:
            os.close(self.fs.open_dir(path))
        except OSError:
            return False
        return True

    def _copy_dir(self, src: Path, dest: str) -> list[str]:
        assert self.fs is not None
        created = not self._is_dir(dest)
        self.fs.upload(src, dest, skip=self._skip)
        names = [e.name for e in os.scandir(src) if not self._skip(e.path)]
        return ([dest] if created else []) + [posixpath.join(dest, n) for n in names]

    def _add_tar(self, src: Path, dest: str, owner: tuple[int, int] | None, chmod: int | None) -> None:
        import tarfile  # only an ADD of an archive needs it (a local run's start-up, #13)

        assert self.fs is not None
        with tempfile.TemporaryDirectory(dir=self.dir) as tmp, tarfile.open(src) as tf:
            tf.extractall(tmp, filter="tar")
            self.fs.upload(Path(tmp), dest)
            for name in os.listdir(tmp):
                self._set_owner_mode(posixpath.join(dest, name), owner, chmod)

    def _set_owner_mode(self, path: str, owner: tuple[int, int] | None, chmod: int | None) -> None:
        assert self.fs is not None
        if owner is not None:
            self.fs.chown_tree(path, *owner)
        if chmod is not None:
            self.fs.chmod_tree(path, chmod)
