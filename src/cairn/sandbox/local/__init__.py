"""The daemonless local backend: user, mount and pid namespaces with an overlay root
(:mod:`~cairn.sandbox.local.backend`; PID 1 is :mod:`~cairn.sandbox.local.pid1`).
"""

from __future__ import annotations

from cairn._util.lazy import lazy_face

_NAMES = {
    "COMPOSE_FILES": "cairn.sandbox.local.backend",
    "NEEDS_DOCKER": "cairn.sandbox.local.backend",
    "LocalSandbox": "cairn.sandbox.local.backend",
    "find_local_layers": "cairn.sandbox.local.backend",
    "find_local_sandboxes": "cairn.sandbox.local.backend",
    "remove_local_layer": "cairn.sandbox.local.backend",
    "remove_local_sandbox": "cairn.sandbox.local.backend",
}

__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_face("cairn.sandbox.local", _NAMES)
