"""The floor of a harness built on cairn's libraries: the least work a trial needs, done through
the Docker SDK, in a process that first imports what ``cairn run`` must import.

Run as a child process by the two docker benchmarks (its whole-process wall time is the
figure), never imported by cairn:

    python3 bench/_sdkfloor.py trivial TASK IMAGE API          # one single-step trial
    python3 bench/_sdkfloor.py job TASK IMAGE API TRIALS N STEPS  # TRIALS trials, N at once

``IMAGE`` is the image's id (built before, by the caller); ``API`` the engine's API version
(``docker version --format '{{.Server.APIVersion}}'``, read by the caller), so the floor does not
spend a round trip asking for it.

It imports ``typer``, ``pydantic`` and ``asyncio`` (the CLI and the task/result models every
``cairn run`` uses) and the ``docker`` SDK (the engine client of the docker backend), then
does per trial only what scores it: create + start a container of the already-built image
(``--init``; ``trivial``: ``--network none``, ``job``: the engine's default bridge, as the
CLI floor), per step one archive upload of the solution, one exec of solve.sh, one archive
upload of the tests, one exec of test.sh, one read of the reward, and a forced remove. No
task parsing, image check, isolation of trials from each other, integrity checks, results or
logs. Engine calls per step: 3 execs + 2 uploads (``trivial`` reads the reward with an exec,
as the CLI script does; ``job`` with an archive download, as its CLI script does).

Prints one JSON line: ``{"ok": <trials with reward 1 on every step>, "import_sec": ...}``.
"""

from __future__ import annotations

import io
import json
import sys
import tarfile
import time
from pathlib import Path

T0 = time.perf_counter()
import asyncio  # noqa: E402,F401  (the floor is paying for these imports)

import docker  # noqa: E402
import pydantic  # noqa: E402,F401
import typer  # noqa: E402,F401

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


def trial(api: docker.APIClient, image: str, dirs: list[Path], network: str,
          read: str) -> bool:
    """One trial; True when every step's reward is 1."""
    host = api.create_host_config(init=True, network_mode=network)
    cid = api.create_container(image, ["sleep", "infinity"], host_config=host,
                               labels={"cairn.bench": "1"})["Id"]
    ok = True
    try:
        api.start(cid)
        for d in dirs:
            api.put_archive(cid, "/", _tar(d / "solution", "solution"))
            _exec(api, cid, ["bash", "/solution/solve.sh"])
            api.put_archive(cid, "/", _tar(d / "tests", "tests"))
            _exec(api, cid, ["bash", "-c", "mkdir -p /logs/verifier && bash /tests/test.sh; "
                             "rm -rf /tests /solution"])
            if read == "exec":
                reward = _exec(api, cid, ["cat", "/logs/verifier/reward.txt"])
            else:
                stream, _ = api.get_archive(cid, "/logs/verifier/reward.txt")
                with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                    member = tar.extractfile("reward.txt")
                    reward = member.read() if member is not None else b""
            ok = ok and reward.strip() == b"1"
    finally:
        api.remove_container(cid, force=True)
    return ok


def main(argv: list[str]) -> int:
    mode, task, image, version = argv[0], Path(argv[1]), argv[2], argv[3]
    api = docker.APIClient(base_url="unix:///var/run/docker.sock", version=version)
    if mode == "trivial":
        ok = int(trial(api, image, [task], "none", "exec"))
    else:
        from concurrent.futures import ThreadPoolExecutor

        trials, n, steps = int(argv[4]), int(argv[5]), int(argv[6])
        dirs = [task] if steps == 1 else [task / "steps" / f"s{i}" for i in range(1, steps + 1)]
        api = docker.APIClient(base_url="unix:///var/run/docker.sock", version=version,
                               max_pool_size=n)
        with ThreadPoolExecutor(n) as pool:
            ok = sum(pool.map(lambda _: trial(api, image, dirs, "bridge", "archive"),
                              range(trials)))
    print(json.dumps({"ok": ok, "import_sec": round(IMPORT_SEC, 4)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
