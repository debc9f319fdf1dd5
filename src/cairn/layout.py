"""Where things are, in the sandbox and in a task's environment folder: one home for the
fixed paths every stage agrees on (design §1, §4).

A plain-value module with no dependencies (the local backend's helper programs run under the
system Python, without cairn's third-party packages).
"""

from __future__ import annotations

from pathlib import Path

LOGS_DIR = "/logs"
"""Parent of the per-phase log folders inside the sandbox."""
AGENT_LOGS_DIR = "/logs/agent"
"""The agent's logs (collected into ``steps/<nn>-<name>/agent/``)."""
VERIFIER_LOGS_DIR = "/logs/verifier"
"""The verifier's output; the reward file is ``reward.txt`` or ``reward.json`` here."""
ARTIFACTS_DIR = "/logs/artifacts"
"""Files handed on from the agent's sandbox (collected into ``steps/<nn>-<name>/artifacts/``)."""
LOG_DIRS = (AGENT_LOGS_DIR, VERIFIER_LOGS_DIR, ARTIFACTS_DIR)
"""The three log folders made fresh at sandbox start."""
REWARD_JSON = "reward.json"
"""File name of the keyed reward file in ``/logs/verifier`` (wins when both exist)."""
REWARD_TXT = "reward.txt"
"""File name of the single-number reward file."""
REWARD_FILES = (REWARD_JSON, REWARD_TXT)
"""The reward file names, in the order they are read (design §5.1)."""
REWARD_FILE_CAP_BYTES = 64 * 1024
"""Largest reward file accepted, in bytes; a larger one is a ``reward_parse_error``."""
TESTS_DIR = "/tests"
"""Where a step's ``tests/`` is uploaded for the verifier (fresh each time)."""
SOLUTION_DIR = "/solution"
"""Where the oracle's ``solution/`` is uploaded (removed before the verifier)."""

COMPOSE_FILE_NAMES = ("compose.yaml", "compose.yml", "docker-compose.yaml", "docker-compose.yml")
"""The file names that make an environment folder a multi-container (compose) environment: the
four that ``docker compose`` itself looks for, in its order of preference. Harbor's tasks use
``docker-compose.yaml``; cairn accepts every name Compose does, in every code path."""


def find_compose_file(env_dir: Path | str | None) -> Path | None:
    """The compose file of an environment folder (:data:`COMPOSE_FILE_NAMES`), or ``None``.

    Args:
        env_dir: the task's ``environment/`` folder (``None`` or missing: no compose file).
    """
    if env_dir is None:
        return None
    for name in COMPOSE_FILE_NAMES:
        p = Path(env_dir) / name
        if p.is_file():
            return p
    return None
