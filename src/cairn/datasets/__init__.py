"""Stage 0, datasets: task folders by name from a registry, or from a git repository.

Modules: :mod:`~cairn.datasets.registry` (Harbor's ``registry.json``; ``NAME@VERSION``),
:mod:`~cairn.datasets.git` (refs → commits, shallow and sparse fetches through ``git``),
:mod:`~cairn.datasets.cache` (the content-addressed, read-only task cache),
:mod:`~cairn.datasets.resolve` (a job's ``-d``/``--repo`` → cached folders with provenance)
and :mod:`~cairn.datasets.clean` (``cairn cache clean``).
"""

from __future__ import annotations

from cairn._util.lazy import lazy_face

_NAMES = {
    "DEFAULT_REGISTRY_URL": "cairn.datasets.registry",
    "load_registry": "cairn.datasets.registry",
    "resolve_dataset": "cairn.datasets.registry",
    "TaskCache": "cairn.datasets.cache",
    "cache_root": "cairn.datasets.cache",
    "resolve_sources": "cairn.datasets.resolve",
    "export_tasks": "cairn.datasets.resolve",
    "clean_cache": "cairn.datasets.clean",
}

__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_face("cairn.datasets", _NAMES)
