"""README.md's tour, run as written (issue 27 / #32): every ``cairn`` line of "A short tour", in
order, in a fresh copy of the repository's files, with only what the README's own install line
brings.

"Only what the install brings" without a network: the install line (``pip install .`` and any
``[extras]``) is read from the README, the distributions it pulls in are the closure of
pyproject.toml's requirements over this machine's installed metadata, and every ``cairn``
process runs with an import guard (a ``sitecustomize`` on PYTHONPATH) that refuses any other
top-level module, as a fresh venv would (ModuleNotFoundError). A line whose comment says
``needs network`` or ``needs a model`` is skipped for that stated reason (this machine reaches no
registry or model API); no other line may be skipped.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest

from cairncli import run_cairn, start_cairn

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
README = REPO / "README.md"

SKIP_REASONS = ("needs network", "needs a model")
"""The stated reasons a tour line may be skipped for (they must appear in its comment)."""


def readme_blocks() -> list[list[str]]:
    """The README's ```bash blocks, each as its lines."""
    return [b.splitlines() for b in re.findall(r"```bash\n(.*?)```", README.read_text(), re.S)]


def install_line() -> str:
    """The README's install: the ``pip install …`` before the first ``&&`` of its first line."""
    first = readme_blocks()[0][0]
    m = re.match(r"\s*pip install (\S+) &&", first)
    assert m, f"the README's first command is not `pip install X && ...`: {first!r}"
    return m.group(1).strip("'\"")


def tour_lines() -> list[tuple[str, str]]:
    """``(command, comment)`` of every non-blank line of the block after "## A short tour"."""
    text = README.read_text()
    tour = text[text.index("## A short tour") :]
    block = re.search(r"```bash\n(.*?)```", tour, re.S)
    assert block
    out = []
    for line in block.group(1).splitlines():
        if not line.strip():
            continue
        cmd, _, comment = line.partition("  #")
        out.append((cmd.strip(), comment.strip()))
    return out


def _dist_names(spec: str) -> set[str]:
    """The distributions ``pip install SPEC`` (``.`` or ``.[a,b]``) brings: cairn's requirements
    (with those extras) and theirs, recursively, markers evaluated for this interpreter."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    extras = set(re.findall(r"\[(.*)\]", spec)[0].split(",")) if "[" in spec else set()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    todo = [Requirement(r) for r in project["dependencies"]]
    for e in extras:
        todo += [Requirement(r) for r in project["optional-dependencies"][e.strip()]]
    seen: set[str] = set()
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        seen.add(name)
        try:
            dist = md.distribution(req.name)
        except md.PackageNotFoundError:
            continue  # not installed here: it can provide no module to the guard either
        for r in dist.requires or []:
            sub = Requirement(r)
            if (
                sub.marker is None
                or sub.marker.evaluate({"extra": ""})
                or any(sub.marker.evaluate({"extra": x}) for x in req.extras)
            ):
                todo.append(sub)
    return seen


def allowed_modules(spec: str) -> set[str]:
    """Top-level module names a fresh install of ``spec`` provides (plus the stdlib)."""
    from packaging.utils import canonicalize_name

    dists = _dist_names(spec)
    mods = {
        m for m, ds in md.packages_distributions().items() if any(canonicalize_name(d) in dists for d in ds)
    }
    return mods | set(sys.stdlib_module_names) | {"cairn", "sitecustomize", "__main__"}


GUARD = '''\
import sys
_ALLOWED = set({allowed!r})
class _FreshInstall:
    """Refuse top-level modules a fresh `pip install {spec}` would not have."""
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if path is None and top not in _ALLOWED and not top.startswith("_"):
            raise ModuleNotFoundError(f"No module named {{name!r}} (not brought by "
                                      f"`pip install {spec}`: README tour guard)", name=name)
        return None
sys.meta_path.insert(0, _FreshInstall())
'''


def fresh_copy(dest: Path) -> Path:
    """The repository's files as a clone has them (tracked and new, not ignored) in ``dest``."""
    files = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout
    dest.mkdir()
    for rel in filter(None, files.decode().split("\0")):
        src = REPO / rel
        if not src.is_file() or rel.startswith("jobs/"):
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_bytes(src.read_bytes())
        (dest / rel).chmod(src.stat().st_mode & 0o777)
    return dest


def test_readme_tour_is_parsed_and_states_its_skips():
    """Fast: the tour holds the commands the issue names, each skipped line says why, and the
    files it uses are shipped."""
    lines = tour_lines()
    cmds = [c for c, _ in lines]
    assert all(c.startswith(("cairn ", "pip install ")) for c in cmds), cmds
    skipped = [(c, why) for c, why in lines if any(r in why for r in SKIP_REASONS)]
    assert all(c.split("&&")[-1].split()[:2] == ["cairn", "run"] for c, _ in skipped)
    assert len(skipped) == 2, skipped  # the model line and the registry line, nothing else
    assert any("-a llm" in c and "needs a model" in why for c, why in skipped)
    assert any("-d terminal-bench" in c and "needs network" in why for c, why in skipped)
    for c in cmds:
        for word in shlex.split(c):
            if word.startswith("examples/"):
                assert (REPO / word).exists(), f"{word} (used by the tour) is not shipped"
    assert install_line() == "."
    assert {"starlette", "uvicorn", "jinja2"} <= allowed_modules(".")  # `cairn view` needs no extra
    assert "litellm" not in allowed_modules(".")  # the llm extra stays optional (named on its line)


def _check(cmd: str, p: subprocess.CompletedProcess, root: Path) -> None:
    """What each tour line must have done, beyond exit 0 and no traceback."""
    out = p.stdout + p.stderr
    if cmd.startswith("cairn tasks init"):
        assert (root / "my-task" / "steps" / "report" / "instruction.md").is_file()
    elif cmd.startswith("cairn tasks check"):
        assert "my-task: ok" in p.stdout and "examples/incident: ok" in p.stdout
        assert "not checked: cairn tasks check examples/dataset" in p.stdout
    elif cmd.startswith("cairn tasks sanity"):
        assert p.stdout.count(": ok") == 4, out
    elif cmd == "cairn run -p examples/incident -a oracle":
        assert "PASS reward=1.00 (mean of 5 steps)" in p.stdout
        assert "agent oracle" in p.stdout.splitlines()[0]
    elif "--job-name nightly" in cmd:
        assert len(list((root / "jobs" / "nightly" / "trials").iterdir())) == 12
    elif cmd.startswith("cairn report"):
        assert "| cairn/hello |" in p.stdout
    elif cmd.startswith("cairn export"):
        rows = [json.loads(x) for x in (root / "steps.jsonl").read_text().splitlines()]
        assert rows and all("reward" in r for r in rows)
    elif "--start-step repair" in cmd:
        assert "STOPPED after step 3/5 repair" in p.stdout, out
    elif "--snapshot-steps" in cmd:
        assert "PASS reward=1.00" in p.stdout
    elif cmd.startswith("cairn regrade"):
        assert "regrade: 1 of 1 trial(s) regraded" in p.stderr, out
    elif cmd.startswith("cairn shell"):
        assert json.loads(p.stdout)["code"], out
    elif "--dry-run" in cmd:
        assert "tasks: 4, attempts: 1, trials: 4" in p.stdout
    elif "harbor-job.yaml -c" in cmd:
        assert len(list((root / "jobs" / "harbor-example-k2" / "trials").iterdir())) == 8


def _view(args: list[str], root: Path, env: dict[str, str]) -> None:
    """``cairn view``: serves until Ctrl-C; the page lists the tour's jobs."""
    proc = start_cairn(*args, cwd=root, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"at (http://\S+)", line)
        assert m, line + (proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
        deadline = time.monotonic() + 20
        while True:
            try:
                page = urllib.request.urlopen(m.group(1), timeout=5).read().decode()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        assert "nightly" in page
    finally:
        proc.send_signal(signal.SIGINT)  # the README's Ctrl-C
        try:
            code = proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        assert code in (0, 130, -signal.SIGINT), code


@pytest.mark.docker
@pytest.mark.slow
def test_readme_tour_runs_as_written_after_the_readmes_install(tmp_path):
    root = fresh_copy(tmp_path / "clone")
    spec = install_line()
    guard = tmp_path / "guard"
    guard.mkdir()
    (guard / "sitecustomize.py").write_text(GUARD.format(allowed=sorted(allowed_modules(spec)), spec=spec))
    env = {k: v for k, v in os.environ.items() if k not in ("CAIRN_DEBUG", "PYTHONPATH")}
    env["PYTHONPATH"] = os.pathsep.join([str(guard), str(root / "src")])
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    # the guard works: a module outside the install is refused in these processes
    probe = subprocess.run(
        [sys.executable, "-c", "import litellm"],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    assert probe.returncode == 1 and "README tour guard" in probe.stderr
    ran, skipped = [], []
    for cmd, comment in tour_lines():
        reason = next((r for r in SKIP_REASONS if r in comment), None)
        if reason is not None:
            skipped.append((cmd, reason))
            continue
        words = shlex.split(cmd)
        assert words[0] == "cairn", cmd
        if words[1] == "view":
            _view(words[1:], root, env)
            ran.append(cmd)
            continue
        p = run_cairn(*words[1:], cwd=root, env=env, timeout=600)
        assert "Traceback" not in p.stdout + p.stderr, (cmd, p.stdout + p.stderr)
        assert p.returncode == 0, (cmd, p.returncode, p.stdout + p.stderr)
        _check(cmd, p, root)
        ran.append(cmd)
    assert len(skipped) == 2 and len(ran) == len(tour_lines()) - 2
