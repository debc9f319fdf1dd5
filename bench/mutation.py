"""Mutation testing of the scoring core with cosmic-ray (``pip install 'cairn-eval[mutation]'``).

Each module that decides a score is mutated one change at a time (cosmic-ray's operators:
comparisons, boolean and arithmetic operators, numbers, ``break``/``continue``, exceptions …)
and, for each mutant, only that module's quick unit tests run. A mutant the tests do not fail
*survives*; every survivor must be either killed by a new quick test or listed in
``bench/mutation_equivalent.toml`` with the reason it is equivalent (no input tells the
mutant from the original). Nothing runs on the working tree: the repository's ``src`` and
``tests`` are copied to a temporary folder first.

Usage::

    python3 bench/mutation.py                      # every module below
    python3 bench/mutation.py verdict errors       # some of them
    python3 bench/mutation.py --json out.json      # also write the report as JSON

Exit status 1 when a mutant survives that is not listed as equivalent. The pytest marker
``mutation`` (tests/test_mutation.py, not run by default CI) runs this script.
Wall time: minutes per module on a 2-core machine (each mutant is one pytest process).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EQUIVALENT_FILE = ROOT / "bench" / "mutation_equivalent.toml"


@dataclass(frozen=True)
class Target:
    """One module of the scoring core and the quick unit tests that must kill its mutants."""

    name: str
    module: str
    tests: tuple[str, ...]
    what: str


TARGETS: tuple[Target, ...] = (
    Target(
        "rewards",
        "src/cairn/trial/rewards.py",
        ("tests/trial/test_rewards.py",),
        "reward.txt / reward.json parsing",
    ),
    Target(
        "aggregate",
        "src/cairn/results/aggregate.py",
        ("tests/results/test_aggregate.py",),
        "gates and stop rules, mean/final, all-steps, replayed steps, pass@k",
    ),
    Target(
        "errors",
        "src/cairn/errors.py",
        ("tests/trial/test_error_kinds.py -k 'not each_kind and not each_engine_kind'",),
        "error classification (category_of)",
    ),
    Target(
        "classify",
        "src/cairn/trial/classify.py",
        ("tests/trial/test_classify.py",),
        "error classification at the catch site",
    ),
    Target("verdict", "src/cairn/results/verdict.py", ("tests/results/test_verdict.py",), "the verdict line"),
)


@dataclass
class ModuleReport:
    """The outcome of one module's mutants."""

    name: str
    module: str
    total: int = 0
    killed: int = 0
    incompetent: int = 0
    equivalent: list[dict] = field(default_factory=list)
    survivors: list[dict] = field(default_factory=list)
    elapsed_sec: float = 0.0

    @property
    def score(self) -> float:
        """Killed over the mutants that are neither incompetent nor equivalent (1.0 = all)."""
        live = self.total - self.incompetent - len(self.equivalent)
        return 1.0 if live <= 0 else self.killed / live


def load_equivalents() -> list[dict]:
    """The declared equivalent mutants: ``[[equivalent]]`` tables with ``module`` and
    ``operator`` (shell-style patterns), optionally ``line``, ``occurrence``, ``source`` (a
    regex the original source line must match) and ``diff`` (a regex the mutant's diff must
    match), and a ``reason`` (required)."""
    if not EQUIVALENT_FILE.is_file():
        return []
    data = tomllib.loads(EQUIVALENT_FILE.read_text(encoding="utf-8"))
    out = data.get("equivalent", [])
    for e in out:
        if not str(e.get("reason", "")).strip():
            raise SystemExit(f"{EQUIVALENT_FILE}: an equivalent mutant without a reason: {e}")
    return out


def _matches(eq: dict, m: dict) -> bool:
    return (
        fnmatch.fnmatch(m["module"], eq["module"])
        and fnmatch.fnmatch(m["operator"], eq["operator"])
        and ("line" not in eq or int(eq["line"]) == m["line"])
        and ("occurrence" not in eq or int(eq["occurrence"]) == m["occurrence"])
        and ("diff" not in eq or re.search(eq["diff"], m["diff"] or "") is not None)
        and ("source" not in eq or re.search(eq["source"], m["source"]) is not None)
    )


def _copy_tree(dest: Path) -> None:
    for part in ("src", "tests", "pyproject.toml", "examples"):
        src = ROOT / part
        if src.is_dir():
            shutil.copytree(src, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.is_file():
            shutil.copy2(src, dest / part)


def _env(work: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(work / "src"), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    env.pop("CI", None)
    return env


def _recheck(target: Target, work: Path, db: Path, tests: str) -> None:
    """Run the tests of today's tree (copied into ``work`` again) against every mutant that
    survived in a kept session; a mutant they now fail is recorded as killed."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkResult

    shutil.rmtree(work / "tests")
    shutil.copytree(ROOT / "tests", work / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    module = work / target.module
    with use_db(str(db), WorkDB.Mode.open) as wdb:
        for item, result in list(wdb.completed_work_items):
            if result.test_outcome != TestOutcome.SURVIVED:
                continue
            (mutation,) = item.mutations
            original = module.read_bytes()
            try:
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "cosmic_ray.cli",
                        "apply",
                        str(module),
                        mutation.operator_name,
                        str(mutation.occurrence),
                    ],
                    cwd=work,
                    env=_env(work),
                    check=True,
                    capture_output=True,
                )
                out = subprocess.run(
                    f"{sys.executable} -m pytest -x -q -p no:cacheprovider {tests}",
                    shell=True,
                    cwd=work,
                    env=_env(work),
                    capture_output=True,
                    text=True,
                    timeout=600,
                    check=False,
                )
            finally:
                module.write_bytes(original)
            if out.returncode != 0:
                wdb.set_result(
                    item.job_id,
                    WorkResult(
                        worker_outcome=result.worker_outcome,
                        output=out.stdout[-2000:],
                        test_outcome=TestOutcome.KILLED,
                        diff=result.diff,
                    ),
                )


def run_target(target: Target, work: Path, timeout_sec: float, recheck: bool = False) -> ModuleReport:
    """Init and exec one cosmic-ray session in ``work`` (a copy of the tree); read it back."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome

    started = time.monotonic()
    tests = " ".join(target.tests)
    cfg = work / f"cr-{target.name}.toml"
    cfg.write_text(
        "[cosmic-ray]\n"
        f'module-path = "{target.module}"\n'
        f"timeout = {timeout_sec}\n"
        "excluded-modules = []\n"
        f'test-command = "{sys.executable} -m pytest -x -q -p no:cacheprovider '
        f'{tests}"\n'
        '[cosmic-ray.distributor]\nname = "local"\n',
        encoding="utf-8",
    )
    db = work / f"cr-{target.name}.sqlite"
    env = _env(work)
    steps = [["init", str(cfg), str(db)], ["baseline", str(cfg)], ["exec", str(cfg), str(db)]]
    if recheck and db.is_file():
        _recheck(target, work, db, tests)
        steps = []
    for step in steps:
        out = subprocess.run(
            [sys.executable, "-m", "cosmic_ray.cli", *step],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode != 0:
            raise SystemExit(
                f"cosmic-ray {step[0]} failed for {target.name}:\n{out.stdout[-3000:]}{out.stderr[-3000:]}"
            )
    report = ModuleReport(target.name, target.module)
    equivalents = load_equivalents()
    lines = (ROOT / target.module).read_text(encoding="utf-8").splitlines()
    with use_db(str(db), WorkDB.Mode.open) as wdb:
        for item, result in wdb.completed_work_items:
            report.total += 1
            (mutation,) = item.mutations
            m = {
                "module": target.module,
                "operator": mutation.operator_name,
                "line": mutation.start_pos[0],
                "occurrence": mutation.occurrence,
                "source": lines[mutation.start_pos[0] - 1],
                "diff": result.diff,
            }
            if result.test_outcome == TestOutcome.KILLED:
                report.killed += 1
            elif result.test_outcome == TestOutcome.INCOMPETENT:
                report.incompetent += 1
            elif any(_matches(e, m) for e in equivalents):
                report.equivalent.append(m)
            else:
                report.survivors.append(m)
    report.elapsed_sec = time.monotonic() - started
    return report


def main(argv: list[str] | None = None) -> int:
    """Run the chosen modules' mutants and print the report; 1 when a survivor is unexplained."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("modules", nargs="*", help=f"some of: {', '.join(t.name for t in TARGETS)}")
    ap.add_argument("--json", type=Path, help="also write the report here")
    ap.add_argument("--timeout-sec", type=float, default=60.0, help="per mutant's test run")
    ap.add_argument(
        "--recheck",
        action="store_true",
        help="with --keep: rerun only the kept sessions' survivors against "
        "today's tests (after adding tests that kill them)",
    )
    ap.add_argument(
        "--keep",
        type=Path,
        help="work in this folder and keep its sessions (default: a temporary folder, removed at the end)",
    )
    args = ap.parse_args(argv)
    chosen = [t for t in TARGETS if not args.modules or t.name in args.modules]
    unknown = set(args.modules) - {t.name for t in TARGETS}
    if unknown:
        ap.error(f"unknown module(s): {', '.join(sorted(unknown))}")
    reports = []
    with tempfile.TemporaryDirectory(prefix="cairn-mutation-") as tmp:
        work = args.keep or Path(tmp)
        if args.keep is None or not (work / "src").is_dir():
            work.mkdir(parents=True, exist_ok=True)
            _copy_tree(work)
        for t in chosen:
            r = run_target(t, work, args.timeout_sec, recheck=args.recheck)
            reports.append(r)
            print(
                f"{r.name:10} {r.module:36} mutants {r.total:4}  killed {r.killed:4}  "
                f"equivalent {len(r.equivalent):3}  incompetent {r.incompetent:3}  "
                f"survived {len(r.survivors):3}  score {r.score:6.1%}  ({r.elapsed_sec:.0f} s)",
                flush=True,
            )
            for s in r.survivors:
                print(
                    f"  SURVIVED {s['module']}:{s['line']} {s['operator']} "
                    f"#{s['occurrence']}\n"
                    + "".join(f"    {x}\n" for x in (s["diff"] or "").splitlines()[2:])
                )
    if args.json:
        args.json.write_text(json.dumps([{**r.__dict__, "score": r.score} for r in reports], indent=2) + "\n")
    return 1 if any(r.survivors for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
