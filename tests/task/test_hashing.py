"""Task content hashes: stable across copies and mtimes, sensitive to bytes, names, exec bits."""

from __future__ import annotations

import os
import shutil

from cairn.task.hashing import env_hash, task_content_hash
from taskfiles import single_step_files, write_files


def test_hash_ignores_mtimes_pycache_and_git(tmp_path):
    a = write_files(tmp_path / "a", single_step_files())
    h = task_content_hash(a)
    os.utime(a / "instruction.md", (1, 1))
    (a / "__pycache__").mkdir()
    (a / "__pycache__" / "x.pyc").write_bytes(b"\0")
    (a / ".git").mkdir()
    (a / ".git" / "HEAD").write_text("ref")
    assert task_content_hash(a) == h
    b = tmp_path / "elsewhere" / "b"
    shutil.copytree(a, b)
    assert task_content_hash(b) == h  # the folder's own name and place do not count


def test_hash_changes_with_bytes_names_and_exec_bit(tmp_path):
    a = write_files(tmp_path / "a", single_step_files())
    h = task_content_hash(a)
    (a / "tests/test.sh").chmod(0o755)
    h_exec = task_content_hash(a)
    assert h_exec != h
    (a / "tests/test.sh").rename(a / "tests/test2.sh")
    assert task_content_hash(a) not in (h, h_exec)
    (a / "tests/test2.sh").rename(a / "tests/test.sh")
    assert task_content_hash(a) == h_exec
    (a / "instruction.md").write_text("changed")
    assert task_content_hash(a) != h_exec


def test_symlinks_are_hashed_by_target_not_followed(tmp_path):
    a = write_files(tmp_path / "a", single_step_files())
    (a / "link").symlink_to("/etc/hostname")
    h = task_content_hash(a)
    (a / "link").unlink()
    (a / "link").symlink_to("/etc/hosts")
    assert task_content_hash(a) != h


def test_env_hash_covers_environment_folder_and_image_settings(tmp_path):
    a = write_files(tmp_path / "a", single_step_files())
    env = a / "environment"
    h = env_hash(env, docker_image=None, workdir=None)
    assert env_hash(env, docker_image="debian:bookworm-slim", workdir=None) != h
    assert env_hash(env, docker_image=None, workdir="/src") != h
    (a / "instruction.md").write_text("other")
    assert env_hash(env, docker_image=None, workdir=None) == h
    (env / "Dockerfile").write_text("FROM debian:bookworm\n")
    assert env_hash(env, docker_image=None, workdir=None) != h
    assert env_hash(None, docker_image="x:1", workdir=None) == env_hash(
        tmp_path / "missing", docker_image="x:1", workdir=None
    )
