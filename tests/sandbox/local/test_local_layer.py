"""Dockerfile layers of the local backend: built once per environment hash and reused,
the subset's instructions applied, failures reported as build errors."""

from __future__ import annotations

import asyncio
import io
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn._util.treehash import tree_hash
from cairn.errors import BuildError, ErrorKind
from cairn.sandbox.base import NetworkMode, SandboxSpec
from cairn.sandbox.caches import SandboxCaches
from cairn.sandbox.local.backend import LocalSandbox, find_local_layers, remove_local_layer
from cairn.sandbox.local.layer import layer_key
from cairn.sandbox.local.rootfs import layers_dir
from testbed import local_available

pytestmark = [pytest.mark.local, pytest.mark.skipif(not local_available(), reason="no local sandbox support")]


def _env(tmp_path: Path, dockerfile: str, files: dict[str, str | bytes] | None = None) -> Path:
    env = tmp_path / f"env-{uuid.uuid4().hex[:6]}"
    env.mkdir()
    (env / "Dockerfile").write_text(dockerfile)
    for name, content in (files or {}).items():
        p = env / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)
    return env


_USED_KEYS: set[str] = set()


@pytest.fixture(autouse=True)
def _remove_built_layers() -> Iterator[None]:
    """Each test's environments are unique: drop their layers afterwards."""
    yield
    for key in _USED_KEYS:
        for path in [layers_dir() / key, *layers_dir().glob(f".old-{key}-*")]:
            if path.exists():
                remove_local_layer(path)
    _USED_KEYS.clear()


def _spec(env: Path, **kw: object) -> SandboxSpec:
    _USED_KEYS.add(tree_hash(env))
    fields: dict[str, object] = {
        "env_dir": env,
        "env_hash": tree_hash(env),
        "network_mode": NetworkMode.NO_NETWORK,
        "job_id": "test-layer",
        "trial_id": f"layer-{uuid.uuid4().hex[:8]}",
    }
    fields.update(kw)
    return SandboxSpec(**fields)  # type: ignore[arg-type]


async def _sh(sb: LocalSandbox, cmd: str, **kw: object) -> str:
    r = await sb.exec(cmd, **kw)  # type: ignore[arg-type]
    assert r.ok, f"{cmd!r}: exit {r.exit_code}, stderr {r.stderr!r}"
    return r.stdout


ACCEPTANCE_DOCKERFILE = """\
FROM debian:bookworm-slim
RUN mkdir -p /srv/data && echo x > /srv/data/f
WORKDIR /app
COPY data.txt .
ENV K=v
RUN date +%s%N > /built-at && sleep 1
"""
"""Issue 4's example; the last RUN stands for real build work (and stamps the build)."""


def test_layer_built_once_reused_and_faster(tmp_path: Path) -> None:
    env = _env(tmp_path, ACCEPTANCE_DOCKERFILE, {"data.txt": f"local file {uuid.uuid4()}\n"})

    async def one_trial() -> tuple[float, str]:
        t0 = time.monotonic()
        async with LocalSandbox(_spec(env)) as sb:
            took = time.monotonic() - t0
            assert (await _sh(sb, "cat /srv/data/f")) == "x\n"
            assert sb.workdir == "/app" and (await _sh(sb, "pwd")) == "/app\n"
            assert (await _sh(sb, "cat data.txt")) == (env / "data.txt").read_text()
            assert (await _sh(sb, "printenv K")) == "v\n"
            assert sb.info["image_id"] == f"local:{layer_key(sb.spec)[:12]}"
            return took, await _sh(sb, "cat /built-at")

    first, stamp1 = asyncio.run(one_trial())
    second, stamp2 = asyncio.run(one_trial())
    assert stamp1 == stamp2, "the second trial rebuilt the layer"
    assert first > 1.0 and second < first - 0.5, (first, second)
    assert (layers_dir() / tree_hash(env) / "meta.json").exists()
    [(_path, info)] = [(p, i) for p, i in find_local_layers() if p.name == tree_hash(env)]
    assert info["meta"]["from_image"] == "debian:bookworm-slim"


def test_concurrent_starts_build_once(tmp_path: Path) -> None:
    env = _env(tmp_path, "FROM debian\nRUN date +%s%N > /stamp && sleep 0.5\n", {"nonce": uuid.uuid4().hex})

    async def main() -> list[str]:
        async def one() -> str:
            async with LocalSandbox(_spec(env)) as sb:
                return await _sh(sb, "cat /stamp")

        return await asyncio.gather(one(), one(), one())

    stamps = asyncio.run(main())
    assert len(set(stamps)) == 1


def test_instructions_of_the_subset(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        data = b"from the archive\n"
        info = tarfile.TarInfo("pkg/inside.txt")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    dockerfile = """\
FROM debian:bookworm-slim
ARG GREETING=hello
ARG UNUSED
ENV APP_HOME=/opt/app PHRASE="$GREETING world"
RUN useradd -m builder
WORKDIR $APP_HOME
WORKDIR sub
COPY --chown=builder:builder src/ ./src/
COPY a.txt b.txt /opt/both/
COPY --chmod=700 run.sh /usr/local/bin/cairn-run
ADD bundle.tar.gz /opt/unpacked/
VOLUME /data
SHELL ["/bin/bash", "-c"]
RUN echo "${GREETING}-$BASH_VERSION" | cut -c1-7 > /opt/shell.txt; echo "[$UNUSED]" >> /opt/shell.txt
USER builder
RUN id -un > /home/builder/whoami
"""
    env = _env(
        tmp_path,
        dockerfile,
        {
            "src/main.py": "print('hi')\n",
            "src/skip.log": "ignored\n",
            "a.txt": "A\n",
            "b.txt": "B\n",
            "run.sh": "#!/bin/sh\necho ran\n",
            "bundle.tar.gz": buf.getvalue(),
            ".dockerignore": "**/*.log\n",
        },
    )

    async def main() -> None:
        async with LocalSandbox(_spec(env)) as sb:
            assert sb.workdir == "/opt/app/sub"
            assert (await _sh(sb, "id -un")) == "builder\n", "USER is the default exec user"
            assert (await _sh(sb, "id -un", user="root")) == "root\n"
            assert (await _sh(sb, "printenv PHRASE")) == "hello world\n"
            assert (await _sh(sb, "stat -c '%U:%G %n' src src/main.py")) == (
                "builder:builder src\nbuilder:builder src/main.py\n"
            )
            assert (await sb.exec("test -e src/skip.log")).exit_code == 1, ".dockerignore"
            assert (await _sh(sb, "cat /opt/both/a.txt /opt/both/b.txt")) == "A\nB\n"
            assert (
                await _sh(sb, "stat -c %a /usr/local/bin/cairn-run; cairn-run", user="root")
            ) == "700\nran\n"
            assert (await _sh(sb, "cat /opt/unpacked/pkg/inside.txt")) == "from the archive\n"
            assert (await _sh(sb, "test -d /data && cat /opt/shell.txt")) == "hello-5\n[]\n"
            assert (await _sh(sb, "cat /home/builder/whoami")) == "builder\n"
            assert sb._meta.from_image == "debian:bookworm-slim"

    asyncio.run(main())


def test_failing_run_is_build_failed_with_log_tail(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    env = _env(tmp_path, f"FROM debian\nRUN echo {marker}; echo oops >&2; exit 3\n")
    spec = _spec(env)

    async def main() -> None:
        async with LocalSandbox(spec):
            pass

    with pytest.raises(BuildError) as exc:
        asyncio.run(main())
    assert exc.value.kind is ErrorKind.BUILD_FAILED
    assert marker in exc.value.detail["log_tail"] and "oops" in exc.value.detail["log_tail"]
    assert exc.value.detail["exit_code"] == 3
    assert not (layers_dir() / layer_key(spec)).exists()
    assert not list(layers_dir().glob(f".build-{layer_key(spec)[:16]}-*"))


@pytest.mark.parametrize(
    "dockerfile, needle",
    [
        ("FROM debian\nCOPY missing.txt /x\n", "missing.txt"),
        ("FROM debian\nCOPY ../outside /x\n", "outside the build context"),
        ("FROM debian\nUSER nobody-here\nRUN true\n", "unable to find user"),
    ],
)
def test_bad_steps_are_build_failed(tmp_path: Path, dockerfile: str, needle: str) -> None:
    env = _env(tmp_path, dockerfile)

    async def main() -> None:
        async with LocalSandbox(_spec(env)):
            pass

    with pytest.raises(BuildError) as exc:
        asyncio.run(main())
    assert exc.value.kind is ErrorKind.BUILD_FAILED
    assert needle in str(exc.value)


def test_build_timeout(tmp_path: Path) -> None:
    env = _env(tmp_path, f"FROM debian\nRUN sleep 30 # {uuid.uuid4()}\n")

    async def main() -> None:
        async with LocalSandbox(_spec(env, build_timeout_sec=1.0)):
            pass

    t0 = time.monotonic()
    with pytest.raises(BuildError) as exc:
        asyncio.run(main())
    assert exc.value.kind is ErrorKind.BUILD_TIMEOUT
    assert time.monotonic() - t0 < 10


def test_force_build_rebuilds_once_per_job_not_once_per_process(tmp_path: Path) -> None:
    env = _env(tmp_path, "FROM debian\nRUN date +%s%N > /stamp\n", {"n": uuid.uuid4().hex})
    job_a, job_b = SandboxCaches(), SandboxCaches()

    async def stamp(caches: SandboxCaches) -> str:
        async with LocalSandbox(_spec(env, force_build=True, caches=caches)) as sb:
            return await _sh(sb, "cat /stamp")

    first = asyncio.run(stamp(job_a))
    assert asyncio.run(stamp(job_a)) == first  # the job rebuilt it already
    assert asyncio.run(stamp(job_b)) != first  # another job in this process rebuilds


def test_force_build_rebuilds_and_keeps_the_old_layer_aside(tmp_path: Path) -> None:
    env = _env(tmp_path, "FROM debian\nRUN date +%s%N > /stamp\n", {"n": uuid.uuid4().hex})

    async def stamp(**kw: object) -> str:
        async with LocalSandbox(_spec(env, **kw)) as sb:
            return await _sh(sb, "cat /stamp")

    first = asyncio.run(stamp())
    assert asyncio.run(stamp()) == first
    forced = asyncio.run(stamp(force_build=True))
    assert forced != first
    key = tree_hash(env)
    assert list(layers_dir().glob(f".old-{key}-*")), "the replaced layer was not set aside"
