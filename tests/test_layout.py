"""The four compose file names are one list (cairn/layout.py), and every path agrees on it:
the task model, validation, the local backend's refusal and the separate verifier's lookup."""

from __future__ import annotations

from pathlib import Path

import pytest

from cairn.errors import UnsupportedError
from cairn.layout import COMPOSE_FILE_NAMES, find_compose_file
from cairn.sandbox.local.dockerfile import check_env_dir
from cairn.task.load import check_task, load_task

COMPOSE = "services:\n  main:\n    image: debian:bookworm-slim\n    command: sleep infinity\n"


def _compose_task(root: Path, name: str) -> Path:
    task = root / "t"
    (task / "environment").mkdir(parents=True)
    (task / "environment" / name).write_text(COMPOSE)
    (task / "tests").mkdir()
    (task / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    (task / "instruction.md").write_text("Do nothing.\n")
    (task / "task.toml").write_text('[task]\nname = "org/t"\n')
    return task


def test_the_names_are_the_four_compose_accepts():
    assert COMPOSE_FILE_NAMES == ("compose.yaml", "compose.yml", "docker-compose.yaml", "docker-compose.yml")


def test_find_prefers_composes_own_order(tmp_path):
    (tmp_path / "docker-compose.yml").write_text(COMPOSE)
    assert find_compose_file(tmp_path) == tmp_path / "docker-compose.yml"
    (tmp_path / "compose.yaml").write_text(COMPOSE)
    assert find_compose_file(tmp_path) == tmp_path / "compose.yaml"
    assert find_compose_file(None) is None and find_compose_file(tmp_path / "nope") is None


@pytest.mark.parametrize("name", COMPOSE_FILE_NAMES)
def test_every_name_is_a_compose_environment_everywhere(tmp_path, name):
    task_dir = _compose_task(tmp_path, name)
    errors = [f for f in check_task(task_dir) if f.severity == "error"]
    assert errors == []  # validation sees an environment definition
    task = load_task(task_dir)
    assert task.compose_file == task_dir / "environment" / name
    with pytest.raises(UnsupportedError, match="compose"):
        check_env_dir(task_dir / "environment")
