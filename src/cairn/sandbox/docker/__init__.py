"""The Docker backend: one container per trial (:mod:`~cairn.sandbox.docker.backend`), image builds
(:mod:`~cairn.sandbox.docker.build`), exec streams, and Compose environments
(:mod:`~cairn.sandbox.docker.compose`, :mod:`~cairn.sandbox.docker.compose_files`).

Only this package (and :mod:`cairn.sandbox.cleanup`) imports the Docker SDK.
"""

from __future__ import annotations

from cairn._util.lazy import lazy_face

_NAMES = {
    "DockerSandbox": "cairn.sandbox.docker.backend",
    "ComposeSandbox": "cairn.sandbox.docker.compose",
}

__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_face("cairn.sandbox.docker", _NAMES)
