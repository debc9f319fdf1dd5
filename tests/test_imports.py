"""Every module of the package imports on a machine without Docker.

Most backend modules are exercised only by ``docker``/``local``-marked tests, so a broken import
in one of them (a name dropped from the module it is imported from) would pass the fast suite
unnoticed; this walks the whole package instead.
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import cairn

MODULES = sorted(m.name for m in pkgutil.walk_packages(cairn.__path__, "cairn.")
                 if not m.name.endswith(".__main__"))  # __main__ runs the CLI on import


def test_the_walk_finds_the_backend_modules() -> None:
    assert "cairn.sandbox.docker.compose" in MODULES
    assert "cairn.sandbox.local.pid1" in MODULES
    assert len(MODULES) > 60


@pytest.mark.parametrize("name", MODULES)
def test_module_imports(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__name__ == name


def test_compose_sandbox_finds_the_compose_file_rule() -> None:
    # ruff's unused-import fix once dropped the name compose.py imported from compose_files
    from cairn.layout import find_compose_file
    from cairn.sandbox.docker import compose

    assert compose.find_compose_file is find_compose_file
