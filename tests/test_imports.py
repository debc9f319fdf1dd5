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

#: packages that only group modules (no code of their own to describe)
DOCSTRING_EXEMPT = {"cairn._util"}

MODULES = sorted(
    m.name for m in pkgutil.walk_packages(cairn.__path__, "cairn.") if not m.name.endswith(".__main__")
)  # __main__ runs the CLI on import


def test_the_walk_finds_the_backend_modules() -> None:
    assert "cairn.sandbox.docker.compose" in MODULES
    assert "cairn.sandbox.local.pid1" in MODULES
    assert len(MODULES) > 60


@pytest.mark.parametrize("name", MODULES)
def test_module_imports_and_keeps_its_promises(name: str) -> None:
    """The module imports, says what it is (a docstring; packages that only group modules
    are exempt), and every name its ``__all__`` promises exists."""
    module = importlib.import_module(name)
    if name not in DOCSTRING_EXEMPT:
        assert (module.__doc__ or "").strip(), f"{name} has no module docstring"
    missing = [n for n in getattr(module, "__all__", ()) if not hasattr(module, n)]
    assert missing == [], f"{name}.__all__ names what it does not define: {missing}"


def test_the_public_api_is_what_the_package_exports() -> None:
    assert set(cairn.__all__) >= {"load_task", "run_job", "resume_job", "read_job"}


def test_compose_sandbox_finds_the_compose_file_rule() -> None:
    # ruff's unused-import fix once dropped the name compose.py imported from compose_files
    from cairn.layout import find_compose_file
    from cairn.sandbox.docker import compose

    assert compose.find_compose_file is find_compose_file
