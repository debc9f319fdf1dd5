"""``cairn agents prepare`` refuses a version that is not exact before it touches the cache, and
an install whose package or CLI reports another version than the one asked for (issue 15).

npm is replaced by a small offline script on ``PATH`` that lays out what ``npm install`` would
(``node_modules/<package>/package.json`` and the platform executable), at a version chosen by
the test; the cache is a temporary ``CAIRN_CACHE_DIR``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cairn.agents.runtime import reported_mismatch, version_problem
from cairncli import run_cairn

FAKE_NPM = r"""#!/bin/sh
# offline stand-in for `npm install --prefix DIR ... @anthropic-ai/claude-code@V`
echo "$@" >> "$FAKE_NPM_CALLS"
prefix=""
while [ $# -gt 0 ]; do
  case "$1" in --prefix) prefix="$2"; shift;; esac
  shift
done
pkg="$prefix/node_modules/@anthropic-ai/claude-code"
exe="$prefix/node_modules/@anthropic-ai/claude-code-linux-x64/claude"
mkdir -p "$pkg" "$(dirname "$exe")"
printf '{"name": "@anthropic-ai/claude-code", "version": "%s"}\n' "$FAKE_PKG_VERSION" \
  > "$pkg/package.json"
printf '#!/bin/sh\necho "%s (Claude Code)"\n' "$FAKE_CLI_VERSION" > "$exe"
"""


def _prepare(tmp_path: Path, spec: str, pkg_version: str, cli_version: str):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    npm = bin_dir / "npm"
    npm.write_text(FAKE_NPM)
    npm.chmod(0o755)
    env = {
        **os.environ,
        "CAIRN_CACHE_DIR": str(tmp_path / "cache"),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "FAKE_NPM_CALLS": str(tmp_path / "npm-calls.txt"),
        "FAKE_PKG_VERSION": pkg_version,
        "FAKE_CLI_VERSION": cli_version,
    }
    return run_cairn("agents", "prepare", spec, env=env, timeout=120)


def _cached(tmp_path: Path) -> list[str]:
    root = tmp_path / "cache" / "agents" / "claude-code"
    return sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) if root.is_dir() else []


def test_a_version_with_shell_characters_is_refused_before_the_cache(tmp_path):
    p = _prepare(tmp_path, "claude-code@1.0.0;rm -rf x", "2.1.197", "2.1.197")
    assert p.returncode == 2, p.stderr
    assert "'1.0.0;rm -rf x' is not an exact version" in p.stderr
    assert not (tmp_path / "cache").exists()
    assert not (tmp_path / "npm-calls.txt").exists()


def test_an_install_of_another_version_is_refused_and_not_cached(tmp_path):
    p = _prepare(tmp_path, "claude-code@1.0.0", "2.1.197", "2.1.197")
    assert p.returncode == 1, p.stderr
    assert (
        "asked for @anthropic-ai/claude-code@1.0.0 but npm installed '2.1.197'; nothing was cached"
    ) in p.stderr
    assert _cached(tmp_path) == []


def test_a_cli_reporting_another_version_is_refused_and_not_cached(tmp_path):
    p = _prepare(tmp_path, "claude-code@1.0.0", "1.0.0", "2.1.197")
    assert p.returncode == 1, p.stderr
    assert "asked for version 1.0.0 but the installed CLI reports '2.1.197 (Claude Code)'" in p.stderr
    assert _cached(tmp_path) == []


def test_the_asked_version_is_cached_and_recorded(tmp_path):
    p = _prepare(tmp_path, "claude-code@1.0.0", "1.0.0", "1.0.0")
    assert p.returncode == 0, p.stderr
    assert _cached(tmp_path) == ["1.0.0-linux-x64"]
    manifest = json.loads(
        (tmp_path / "cache" / "agents" / "claude-code" / "1.0.0-linux-x64" / "cairn-runtime.json").read_text()
    )
    assert (manifest["version"], manifest["version_output"]) == ("1.0.0", "1.0.0 (Claude Code)")


@pytest.mark.parametrize("version", ["1.0.0", "2.1.332", "1.0.0-beta.1", "2.0.0rc1", "1.0+build.5", "0.86.2"])
def test_exact_versions_are_accepted(version):
    assert version_problem(version) is None


@pytest.mark.parametrize(
    "version",
    [
        "",
        "latest",
        "^1.0.0",
        "1.0.0;rm -rf x",
        "1.0.0 ",
        "1..0",
        "1.0.",
        "../1.0.0",
        "1.0.0/x",
        "v1.0.0",
        "1" * 65,
        "1.0.0\n",
    ],
)
def test_other_versions_are_refused(version):
    assert version_problem(version) is not None


def test_reported_version_comparison():
    assert not reported_mismatch("2.1.332", "2.1.332 (Claude Code)")
    assert not reported_mismatch("0.171.0", "codex-cli 0.171.0")
    assert not reported_mismatch("0.86.2", "main 0.86.2")
    assert not reported_mismatch("2.4.6", "Usage: mini [OPTIONS]")  # names no version
    assert reported_mismatch("1.0.0", "2.1.197 (Claude Code)")
    assert reported_mismatch("1.0.0", "v1.0.01")
