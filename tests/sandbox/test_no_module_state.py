"""No module of :mod:`cairn.sandbox` keeps mutable state of its own (issue #28's acceptance):
what the backends remember belongs to the job (:mod:`cairn.sandbox.caches`), so two jobs in
one process, or an engine restarted between them, never meet another job's facts.

Read from the source (``ast``): a ``global`` statement, a module-level name that a function
changes in place (item store or delete, ``append``/``add``/``update``/…), or a memoising
decorator (``functools.cache``/``lru_cache``) outside :data:`HOST_FACTS`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import cairn.sandbox

ROOT = Path(cairn.sandbox.__file__).parent

MUTATORS = frozenset(
    {
        "append",
        "add",
        "update",
        "setdefault",
        "pop",
        "popitem",
        "clear",
        "remove",
        "discard",
        "extend",
        "insert",
    }
)

HOST_FACTS = {
    "local/rootfs.py:_unshare_missing_options": "which options this machine's `unshare` binary "
    "accepts (a fact of the host's util-linux, keyed by its path; no engine state)",
}
"""Memoised functions allowed, with why: facts of the host's binaries, not of an engine."""


def _module_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def _locals(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    args = fn.args
    own = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
    own |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    for n in ast.walk(fn):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            own.add(n.id)
    return own


def _findings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    rel = path.relative_to(ROOT).as_posix()
    module = _module_names(tree)
    out: list[str] = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for deco in fn.decorator_list:
            target = deco.func if isinstance(deco, ast.Call) else deco
            name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
            if name in {"cache", "lru_cache", "cached_property"} and f"{rel}:{fn.name}" not in HOST_FACTS:
                out.append(f"{rel}:{fn.lineno}: @{name} on {fn.name}")
        shadowed = _locals(fn)
        for n in ast.walk(fn):
            if isinstance(n, ast.Global):
                out.append(f"{rel}:{n.lineno}: global {', '.join(n.names)} in {fn.name}")
            elif (
                isinstance(n, ast.Subscript)
                and isinstance(n.ctx, ast.Store | ast.Del)
                and isinstance(n.value, ast.Name)
                and n.value.id in module
                and n.value.id not in shadowed
            ):
                out.append(f"{rel}:{n.lineno}: {n.value.id}[…] changed in {fn.name}")
            elif (
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and n.func.attr in MUTATORS
                and isinstance(n.func.value, ast.Name)
                and n.func.value.id in module
                and n.func.value.id not in shadowed
            ):
                out.append(f"{rel}:{n.lineno}: {n.func.value.id}.{n.func.attr}() in {fn.name}")
    return out


def test_no_sandbox_module_keeps_mutable_state() -> None:
    files = sorted(ROOT.rglob("*.py"))
    assert len(files) > 20  # the package's sources are here
    found = [f for path in files for f in _findings(path)]
    assert found == []


def test_the_check_finds_a_module_registry(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    planted = tmp_path / "planted.py"
    planted.write_text(
        "import functools\n_SEEN = {}\n_LOG = []\n_FLAG = None\n\n"
        "def note(k, v):\n    _SEEN[k] = v\n    _LOG.append(k)\n\n"
        "def local_only():\n    _LOG = []\n    _LOG.append(1)\n\n"
        "def flag():\n    global _FLAG\n    _FLAG = 1\n\n"
        "@functools.lru_cache\ndef version(client):\n    return client.version()\n"
    )
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    assert _findings(planted) == [
        "planted.py:7: _SEEN[…] changed in note",
        "planted.py:8: _LOG.append() in note",
        "planted.py:15: global _FLAG in flag",
        "planted.py:19: @lru_cache on version",
    ]
