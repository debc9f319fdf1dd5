"""The same fixtures through Harbor 0.26 and through cairn score the same (issue #21).

Needs Harbor 0.26 in an environment of its own (never a dependency of cairn), named by
``$CAIRN_HARBOR`` (``.ci/setup-harbor.sh``; tests/helpers/harbor_env.py: skipped without it,
failed under CI), and Docker. Harbor runs with its telemetry off and
LiteLLM's bundled cost map, so nothing leaves this machine. The BuildKit fixture goes to
Harbor without its ``# syntax=`` line and ``--link`` flag: on this engine (docker 20.10, no
registry) Harbor would try to pull the frontend image and fail; cairn strips both itself.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from cairn.job.run import run_job
from cairn.plan import JobConfig
from harbor_env import require_harbor
from testbed import backend_available

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "harbor026"
PARITY = [
    "verifier-env-implies-separate",
    "multistep-step-env-implies-separate",
    "buildkit-dockerfile",
    "compose-without-main",
    "legacy-memory-key",
    "sidecar-collect-artifact",
]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.docker,
    pytest.mark.skipif(not backend_available("docker"), reason="no docker"),
]


def _dataset(root: Path) -> Path:
    ds = root / "ds"
    for name in PARITY:
        shutil.copytree(FIXTURES / name, ds / name)
    df = ds / "buildkit-dockerfile" / "environment" / "Dockerfile"
    df.write_text(
        "".join(
            line.replace("COPY --link ", "COPY ")
            for line in df.read_text().splitlines(keepends=True)
            if not line.startswith("# syntax=")
        )
    )
    return ds


def _harbor_rewards(ds: Path, jobs: Path) -> dict[str, float | None]:
    env = {**os.environ, "HARBOR_TELEMETRY": "0", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    proc = subprocess.run(
        [str(require_harbor()), "run", "-p", str(ds), "-a", "oracle", "-o", str(jobs), "-n", "2", "-y", "-q"],
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out: dict[str, float | None] = {}
    for result in jobs.glob("*/*/result.json"):
        data = json.loads(result.read_text())
        if "task_name" not in data:
            continue
        rewards = (data.get("verifier_result") or {}).get("rewards") or {}
        out[data["task_name"]] = rewards.get("reward")
    return out


def test_harbor_and_cairn_score_the_fixtures_the_same(tmp_path):
    require_harbor()
    ds = _dataset(tmp_path)
    harbor = _harbor_rewards(ds, tmp_path / "harbor-jobs")
    cairn_job = run_job(
        JobConfig(
            paths=(ds,),
            agent="oracle",
            backend="docker",
            jobs_dir=tmp_path / "cairn-jobs",
            job_name="parity",
            n_concurrent=2,
            max_retries=0,
        )
    )
    cairn = {r.task.name: r.reward for r in cairn_job.results}
    names = {tomllib.loads((ds / n / "task.toml").read_text())["task"]["name"] for n in PARITY}
    assert set(cairn) == names
    by_short = {k.split("/")[-1]: v for k, v in harbor.items()}
    assert {n: by_short.get(n.split("/")[-1]) for n in sorted(names)} == {n: cairn[n] for n in sorted(names)}
    assert set(cairn.values()) == {1.0}
