"""Where the reference Harbor 0.26 is: the tests that compare cairn with Harbor read it from
``$CAIRN_HARBOR`` (the path of its ``harbor`` executable, in a virtual environment of its own,
never cairn's), which ``.ci/run`` sets from ``.ci/setup-harbor.sh``. No machine path here.

Without it those tests skip, except under CI (``CI=true``), where a missing Harbor fails them:
the parity checks must run on every submission.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

HARBOR_VAR = "CAIRN_HARBOR"
"""The variable naming the ``harbor`` executable."""


def harbor_bin() -> Path | None:
    """The ``harbor`` executable named by ``$CAIRN_HARBOR``, or ``None`` (unset or missing)."""
    value = os.environ.get(HARBOR_VAR)
    if not value:
        return None
    path = Path(value)
    return path if path.is_file() else None


def _missing() -> str:
    value = os.environ.get(HARBOR_VAR)
    where = f"${HARBOR_VAR}={value} is not a file" if value else f"${HARBOR_VAR} is not set"
    return (
        f"Harbor 0.26 is not set up ({where}): run `bash .ci/setup-harbor.sh` and export "
        f"{HARBOR_VAR}=<the path it prints>"
    )


def require_harbor() -> Path:
    """The ``harbor`` executable; skips the calling test when there is none, or fails it
    under CI (``CI=true``)."""
    path = harbor_bin()
    if path is None:
        if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
            pytest.fail(_missing(), pytrace=False)
        pytest.skip(_missing())
    return path


def require_harbor_python() -> Path:
    """The Python of Harbor's environment (beside ``harbor``), as :func:`require_harbor`."""
    python = require_harbor().parent / "python"
    if not python.is_file():
        pytest.fail(
            f"{python} is missing: ${HARBOR_VAR} must be the harbor of a virtual "
            "environment (.ci/setup-harbor.sh makes one)",
            pytrace=False,
        )
    return python
