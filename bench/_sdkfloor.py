"""A floor on cairn's libraries: the least work of a trial, done through the Docker SDK, in a
process that first imports what ``cairn run`` cannot run without.

Run as a child process by the two docker benchmarks (its whole-process wall time is the
figure), never imported by cairn:

    python3 bench/_sdkfloor.py trivial TASK IMAGE API [NAME]   # one single-step trial
    python3 bench/_sdkfloor.py job TASK IMAGE API TRIALS N STEPS [bridge|own|shared|pool]
                                                   # TRIALS trials, N at once

``IMAGE`` is the image's id (built before, by the caller: no image check here); ``API`` the
engine's API version (``docker version --format '{{.Server.APIVersion}}'``, read by the
caller), so the floor spends no round trip asking for it; ``NAME`` names the container (the
trivial bench counts its engine calls by it).

It imports ``typer`` (the CLI), ``pydantic`` with its model machinery (the task and result
models), ``asyncio`` and the ``docker`` SDK (the docker backend's engine client), then does per
trial only what scores it: create + start a container of the image (``--init``; ``trivial``:
``--network none``; ``job``: the engine's default bridge, as the job's CLI script, or with
``own`` a bridge network created for the trial and removed after it, the isolation cairn's
and Harbor's ``public`` trials have, or with ``shared`` one user-defined bridge network for all
the job's trials, or with ``pool`` a bridge network per trial taken over from a trial whose
container is gone, or created when none is idle, all removed at the job's end), per step
one archive upload of the solution, one exec of solve.sh, one archive upload of the tests and
ONE exec that empties ``/logs/verifier``, runs test.sh, removes the step's folders and prints
the reward (:data:`VERIFY`), then a forced remove: 2 execs + 2 uploads per step. No task
parsing or validation, isolation of trials from each other, integrity checks, results or
logs, and nothing overlapped (a harness could, e.g., start its container while it imports).
It is the reference for "the same least work on these libraries", not a proof that nothing is
faster.

Prints one JSON line: ``{"ok": <trials with reward 1 on every step>, "import_sec": ...}``.
"""

from __future__ import annotations

import io
import json
import sys
import tarfile
import time
import uuid
from pathlib import Path

T0 = time.perf_counter()
import asyncio  # noqa: E402,F401  (the floor is paying for these imports)

import docker  # noqa: E402
import pydantic  # noqa: E402,F401
import typer  # noqa: E402,F401
from pydantic import BaseModel  # noqa: E402,F401  (pydantic's model machinery, lazy otherwise)

IMPORT_SEC = time.perf_counter() - T0


def _tar(folder: Path, name: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(str(folder), arcname=name)
    return buf.getvalue()


def _exec(api: docker.APIClient, cid: str, cmd: list[str]) -> bytes:
    ex = api.exec_create(cid, cmd)
    out = api.exec_start(ex["Id"])
    return out if isinstance(out, bytes) else b""


MARK = b"\nCAIRN-FLOOR-REWARD:"
VERIFY = (
    "rm -rf /logs/verifier; mkdir -p /logs/verifier && bash /tests/test.sh; "
    "rm -rf /tests /solution; printf '\\nCAIRN-FLOOR-REWARD:'; "
    "cat /logs/verifier/reward.txt 2>/dev/null"
)
"""The verifier's one exec: a fresh ``/logs/verifier`` (nothing the solution planted there is
read), test.sh, the step's folders removed, then the reward after a marker (the last one in
the output: test.sh's own output comes before it)."""


IDLE: list[str] = []
"""``pool``: networks whose trial's container is gone, for the next trial (list ops are atomic)."""
MADE: list[str] = []
"""``pool``: every network made, removed at the job's end."""


def _own_network(api: docker.APIClient) -> str:
    return api.create_network(
        f"cairn-bench-floor-{uuid.uuid4().hex[:12]}", driver="bridge", labels={"cairn.bench": "1"}
    )["Id"]


def trial(api: docker.APIClient, image: str, dirs: list[Path], network: str, name: str | None = None) -> bool:
    """One trial: per step an upload of the solution, its exec, an upload of the tests, one
    exec of :data:`VERIFY`; True when every step's reward is 1."""
    net = None
    if network == "own":  # a bridge network of the trial's own, as cairn's public trials
        net = _own_network(api)
    elif network == "pool":  # one of its own, taken over from a trial whose container is gone
        try:
            pooled = IDLE.pop()
        except IndexError:
            pooled = _own_network(api)
            MADE.append(pooled)
        try:
            return trial(api, image, dirs, pooled, name)
        finally:
            IDLE.append(pooled)  # only after the container was removed
    host = api.create_host_config(init=True, network_mode=net or network)
    try:
        cid = api.create_container(
            image, ["sleep", "infinity"], host_config=host, name=name, labels={"cairn.bench": "1"}
        )["Id"]
    except BaseException:
        if net:
            api.remove_network(net)
        raise
    ok = True
    try:
        api.start(cid)
        for d in dirs:
            api.put_archive(cid, "/", _tar(d / "solution", "solution"))
            _exec(api, cid, ["bash", "/solution/solve.sh"])
            api.put_archive(cid, "/", _tar(d / "tests", "tests"))
            out = _exec(api, cid, ["bash", "-c", VERIFY])
            reward = out.rpartition(MARK)[2] if MARK in out else b""
            ok = ok and reward.strip() == b"1"
    finally:
        try:
            api.remove_container(cid, force=True)
        finally:
            if net:
                api.remove_network(net)
    return ok


def main(argv: list[str]) -> int:
    mode, task, image, version = argv[0], Path(argv[1]), argv[2], argv[3]
    if mode == "trivial":
        api = docker.APIClient(base_url="unix:///var/run/docker.sock", version=version)
        ok = int(trial(api, image, [task], "none", argv[4] if len(argv) > 4 else None))
    else:
        from concurrent.futures import ThreadPoolExecutor

        trials, n, steps = int(argv[4]), int(argv[5]), int(argv[6])
        network = argv[7] if len(argv) > 7 else "bridge"
        dirs = [task] if steps == 1 else [task / "steps" / f"s{i}" for i in range(1, steps + 1)]
        api = docker.APIClient(base_url="unix:///var/run/docker.sock", version=version, max_pool_size=n)
        shared = None
        if network == "shared":  # one user-defined bridge network for every trial of the job
            shared = api.create_network(
                f"cairn-bench-floor-{uuid.uuid4().hex[:12]}", driver="bridge", labels={"cairn.bench": "1"}
            )["Id"]
            network = shared
        try:
            with ThreadPoolExecutor(n) as pool:
                ok = sum(pool.map(lambda _: trial(api, image, dirs, network), range(trials)))
        finally:
            if shared:
                api.remove_network(shared)
            for made in MADE:  # pool: at most N networks, removed at the end
                api.remove_network(made)
    print(json.dumps({"ok": ok, "import_sec": round(IMPORT_SEC, 4)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
