"""Every key of Harbor 0.26's task models is a key of cairn's (issue #21).

Reads Harbor's models from the reference environment named by ``$CAIRN_HARBOR`` (a subprocess
of its own Python; Harbor is never imported into cairn's), walks cairn's the same way, and
compares the key paths. Skipped when the reference environment is absent (failed under CI:
tests/helpers/harbor_env.py).
"""

from __future__ import annotations

import json
import subprocess
import typing

from pydantic import BaseModel

from cairn.task.model import TaskConfig
from harbor_env import require_harbor_python

_WALK = r"""
import json, typing
from pydantic import BaseModel
from harbor.models.task.config import TaskConfig

def walk(model, path, out):
    for name, f in model.model_fields.items():
        p = path + (name,)
        out.append(".".join(p))
        stack = [f.annotation]
        while stack:
            a = stack.pop()
            if isinstance(a, type) and issubclass(a, BaseModel):
                if len(p) < 6:
                    walk(a, p, out)
            else:
                stack.extend(typing.get_args(a))
out = []
walk(TaskConfig, (), out)
print(json.dumps(sorted(set(out))))
"""


def _cairn_paths(model: type[BaseModel], path: tuple[str, ...] = ()) -> set[str]:
    out: set[str] = set()
    for name, f in model.model_fields.items():
        p = path + (name,)
        out.add(".".join(p))
        stack = [f.annotation]
        while stack:
            a = stack.pop()
            if isinstance(a, type) and issubclass(a, BaseModel):
                if len(p) < 6:
                    out |= _cairn_paths(a, p)
            else:
                stack.extend(typing.get_args(a))
    return out


def test_every_harbor_026_key_path_is_a_cairn_key():
    proc = subprocess.run(
        [str(require_harbor_python()), "-c", _WALK],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={"HARBOR_TELEMETRY": "0", "PATH": "/usr/bin:/bin"},
    )
    harbor = set(json.loads(proc.stdout))
    assert len(harbor) > 100  # the walk reached the nested tables
    cairn = _cairn_paths(TaskConfig)
    assert sorted(harbor - cairn) == []


def test_collect_hook_keys_match_harbor_026():
    from cairn.task.model import CollectHook

    # Harbor 0.26 VerifierCollectConfig: command, service, timeout_sec, user (a forward
    # reference the walk above does not follow).
    assert set(CollectHook.model_fields) == {"command", "service", "timeout_sec", "user"}
