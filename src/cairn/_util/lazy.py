"""Lazy package faces: a package's ``__init__`` names its entry points without importing them.

A stage package (``cairn.job``, ``cairn.trial``, ``cairn.sandbox.docker`` …) exports a few
names from its modules. Importing those modules eagerly from ``__init__`` would make every
``import cairn.trial.rewards`` pull in the whole trial engine (and, for the Docker backend, the
Docker SDK), and would turn sibling imports into cycles through the face. PEP 562's module
``__getattr__`` resolves a name on first use instead.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_face(package: str, names: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Build the ``__getattr__`` and ``__dir__`` of a package face.

    Args:
        package: the package's ``__name__`` (used in the error message).
        names: exported name → the module (dotted path) that defines it.

    Returns:
        ``(__getattr__, __dir__)`` to assign at the package's module level.

    Raises:
        AttributeError: (from the returned ``__getattr__``) the name is not exported.
    """

    def __getattr__(name: str) -> Any:
        try:
            module = names[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        return getattr(importlib.import_module(module), name)

    def __dir__() -> list[str]:
        return sorted(names)

    return __getattr__, __dir__
