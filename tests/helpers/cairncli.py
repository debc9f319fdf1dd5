"""The one way tests run the ``cairn`` command: ``python -m cairn`` of this checkout as a
subprocess (this checkout's ``src`` and the test helpers first on ``PYTHONPATH``), stdout and
stderr captured apart, bounded in time. Test modules keep thin wrappers (``cairn(...)``) that
call these with their own defaults.

tests/test_architecture.py holds that no other test module spells ``-m cairn`` itself (its
allowlist names the few that must, and why)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
SRC = TESTS.parent / "src"


def cairn_env(**extra: str | None) -> dict[str, str]:
    """The environment of a cairn subprocess: this process's, with this checkout's ``src``, the
    tests folder and its helpers on ``PYTHONPATH`` and LiteLLM's bundled cost map; ``extra``
    sets variables (``None`` removes one)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), str(TESTS), str(TESTS / "helpers")]),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    for key, value in extra.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def cairn_argv(*args: str, python_flags: tuple[str, ...] = ()) -> list[str]:
    """The argv of ``python [PYTHON_FLAGS] -m cairn ARGS`` with this interpreter.

    Args:
        args: the command line after ``cairn``.
        python_flags: interpreter options before ``-m`` (``("-S",)``: no site packages).

    Returns:
        The argv list.
    """
    return [sys.executable, *python_flags, "-m", "cairn", *args]


def run_cairn(
    *args: str,
    cwd: Path | None = None,
    timeout: float = 300,
    env: dict[str, str] | None = None,
    input: str | None = None,
    python_flags: tuple[str, ...] = (),
    umask: int = -1,
    **extra: str | None,
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m cairn ARGS`` to its end.

    Args:
        args: the command line after ``cairn``.
        cwd: its working folder (default: this process's).
        timeout: seconds before it is killed (``subprocess.TimeoutExpired``).
        env: the whole environment (default: :func:`cairn_env` with ``extra``).
        input: text for its standard input (default: none, stdin is ``/dev/null``).
        python_flags: interpreter options before ``-m`` (see :func:`cairn_argv`).
        umask: the child's umask (default ``-1``: this process's).
        extra: variables to set (``None``: remove) on top of :func:`cairn_env`.

    Returns:
        The finished process; ``stdout`` and ``stderr`` as text.
    """
    return subprocess.run(
        cairn_argv(*args, python_flags=python_flags),
        cwd=cwd,
        env=env if env is not None else cairn_env(**extra),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        input=input,
        stdin=None if input is not None else subprocess.DEVNULL,
        umask=umask,
    )


def start_cairn(
    *args: str,
    cwd: Path | None = None,
    merge_stderr: bool = False,
    env: dict[str, str] | None = None,
    **extra: str | None,
) -> subprocess.Popen[str]:
    """Start ``python -m cairn ARGS`` in the background (text pipes, line-buffered).

    Args:
        args: the command line after ``cairn``.
        cwd: its working folder.
        merge_stderr: stderr into the stdout pipe (one stream of lines to follow).
        env: the whole environment (default: :func:`cairn_env` with ``extra``).
        extra: variables to set (``None``: remove) on top of :func:`cairn_env`.

    Returns:
        The running process; the caller ends it (``terminate``/``wait``).
    """
    return subprocess.Popen(
        cairn_argv(*args),
        cwd=cwd,
        env=env if env is not None else cairn_env(**extra),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
        text=True,
        bufsize=1,
    )
