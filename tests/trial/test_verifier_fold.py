"""The folded verifier exec on docker (cairn.sandbox.docker.fold) gives what the three calls it
replaces gave: each case runs the same verifier twice in one real sandbox, once through the
fold and once through ``Sandbox.exec_collect``'s plain default (test.sh, then a download, then
the root clean-up exec), and compares everything the trial keeps: the VerifierRun, every file
of the step's verifier folder, and what is left of ``/tests`` and ``/logs/verifier``."""

from __future__ import annotations

import asyncio
import types
import uuid
from pathlib import Path

import pytest

from cairn.sandbox.base import NetworkMode, Sandbox, SandboxSpec
from cairn.task.model import Step
from cairn.trial.verify import run_verifier

docker = pytest.importorskip("docker")
from cairn.sandbox.docker.backend import DockerSandbox  # noqa: E402

pytestmark = pytest.mark.docker

STATE = "test -e /tests && echo tests-left; ls -A /logs/verifier; ls -d /logs/.cairn-* 2>/dev/null; true"


FORGE = r"""
echo 0 > /logs/verifier/reward.txt
tok=""
for p in /proc/[0-9]*; do
  t=$(tr '\0' '\n' < "$p/environ" 2>/dev/null | sed -n 's/^CAIRN_FOLD_TOKEN=//p')
  case "$t" in [0-9a-f]*) [ ${#t} = 32 ] && tok=$t;; esac
done
[ -n "$tok" ] || echo "no token found" >&2
d=$(mktemp -d); mkdir "$d/verifier"; echo 1 > "$d/verifier/reward.txt"
tar -C "$d" -cf "$d/x.tar" verifier
cat "$d/x.tar"; printf '%s:tar %s 0 0 0\n%s:clean\n' "$tok" "$(wc -c < "$d/x.tar")" "$tok"
"""
"""A test.sh that finds the fold's token in its parent's environment (root reads every
process's; the token is on no command line) and prints, at its
very end, a whole archive giving reward 1, a footer naming it and a clean-up line (reward 0
is the real one)."""


def _step(tmp_path: Path, test_sh: str, **kw) -> Step:
    tests = tmp_path / f"tests-{uuid.uuid4().hex[:6]}"
    tests.mkdir()
    (tests / "test.sh").write_text(test_sh)
    return Step(index=1, name="main", instruction="x", test_sh=tests / "test.sh", tests_dirs=(tests,), **kw)


def _files(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b"<dir>"
        for p in sorted(folder.rglob("*"))
    }


async def _verify(sb: DockerSandbox, step: Step, out: Path, *, fold: bool, timeout_sec: float = 60):
    """One verification; returns (run, files, what is left in the sandbox, downloads made)."""
    downloads: list[str] = []
    real_download = sb.download

    async def download(path, host):  # the real download, counted
        downloads.append(path)
        await real_download(path, host)

    sb.download = download  # type: ignore[method-assign]
    if not fold:  # today's three calls: the base class folds nothing
        sb.exec_collect = types.MethodType(Sandbox.exec_collect, sb)  # type: ignore[method-assign]
    try:
        out.mkdir()
        run = await run_verifier(
            sb, step, env={"VERIFY_VAR": "v"}, timeout_sec=timeout_sec, verifier_dir=out, cleanup=True
        )
    finally:
        del sb.download
        if not fold:
            del sb.exec_collect
    left = (await sb.exec(STATE, user="root")).stdout
    run.elapsed_sec = 0.0
    if run.error is not None:  # compared by what it says (an exception compares by identity)
        run.error = (run.error.kind, str(run.error), dict(run.error.detail))  # type: ignore[assignment]
    return run, _files(out), left, downloads


async def _both(tmp_path: Path, test_sh: str, *, before: str | None = None, timeout_sec: float = 60, **kw):
    spec = SandboxSpec(
        docker_image="debian:bookworm-slim",
        network_mode=NetworkMode.NO_NETWORK,
        job_id="test-fold",
        trial_id=uuid.uuid4().hex[:12],
    )
    step = _step(tmp_path, test_sh, **kw)
    async with DockerSandbox(spec) as sb:
        if before:
            assert (await sb.exec(before, user="root")).ok
        plain = await _verify(sb, step, tmp_path / "plain", fold=False, timeout_sec=timeout_sec)
        folded = await _verify(sb, step, tmp_path / "fold", fold=True, timeout_sec=timeout_sec)
    assert plain[3] == ["/logs/verifier"]
    assert folded[:3] == plain[:3]
    return folded


TEST_SH = r"""
echo "out: $VERIFY_VAR $(id -un) $(pwd)"
echo "err line" >&2
mkdir -p /logs/verifier/sub && printf 'detail' > /logs/verifier/sub/log.txt
echo '{"reward": 0.5, "extra": 1}' > /logs/verifier/reward.json
(sleep 0.3; echo "late out"; echo "late err" >&2; echo late > /logs/verifier/late.txt) &
exit 4
"""


def test_the_fold_gives_what_the_three_calls_gave(tmp_path):
    run, files, left, downloads = asyncio.run(_both(tmp_path, TEST_SH))
    assert downloads == []  # the copy came with the exec
    assert run.rewards == {"reward": 0.5, "extra": 1.0} and run.exit_code == 4
    assert files["test-stdout.txt"] == b"out: v root /tests\nlate out\n"
    assert files["test-stderr.txt"] == b"err line\nlate err\n"
    assert files["sub/log.txt"] == b"detail" and files["late.txt"] == b"late\n"
    assert left == ""  # /tests and the verifier's files gone before a next agent


def test_a_timeout_keeps_today_s_results(tmp_path):
    test_sh = "echo before\necho 1 > /logs/verifier/reward.txt\necho e >&2\nsleep 600\n"
    run, files, left, downloads = asyncio.run(_both(tmp_path, test_sh, timeout_sec=3))
    assert downloads == ["/logs/verifier"]  # the fold gave up: the download, as before
    assert run.error is not None and run.error[0].value == "verifier_timeout"
    assert run.exit_code is None and run.rewards is None
    assert files["test-stdout.txt"] == b"before\n" and files["reward.txt"] == b"1\n"
    assert left == ""


def test_a_non_root_verifier_s_clean_up_stays_root_s(tmp_path):
    run, files, left, downloads = asyncio.run(_both(tmp_path, TEST_SH, verifier_user="nobody"))
    assert downloads == []
    assert files["test-stdout.txt"] == b"out: v nobody /tests\nlate out\n"
    assert left == ""  # the root clean-up exec ran (nobody cannot remove /tests)


def test_a_file_the_verifier_cannot_read_sends_the_copy_to_the_download(tmp_path):
    # tar as the verifier user fails on a file it made unreadable; the engine's download reads
    # it, as before, and the half archive on stdout is not taken for test.sh's output
    test_sh = "echo out\necho 1 > /logs/verifier/reward.txt\n"
    test_sh += "echo s > /logs/verifier/s; chmod 000 /logs/verifier/s\n"
    run, files, left, downloads = asyncio.run(_both(tmp_path, test_sh, verifier_user="nobody"))
    assert downloads == ["/logs/verifier"]
    assert files["test-stdout.txt"] == b"out\n" and files["s"] == b"s\n" and left == ""


def test_without_tar_in_the_image_the_download_follows(tmp_path):
    run, files, left, downloads = asyncio.run(_both(tmp_path, TEST_SH, before="rm -f $(command -v tar)"))
    assert downloads == ["/logs/verifier"]
    assert run.rewards == {"reward": 0.5, "extra": 1.0} and left == ""


def test_a_verifier_folder_over_the_limit_is_downloaded(tmp_path):
    test_sh = "yes abcdefgh | head -c 6000000 > /logs/verifier/big.bin\necho 1 > /logs/verifier/reward.txt\n"
    run, files, left, downloads = asyncio.run(_both(tmp_path, test_sh))
    assert downloads == ["/logs/verifier"]
    assert len(files["big.bin"]) == 6000000 and run.rewards == {"reward": 1.0} and left == ""


def test_test_sh_that_knows_the_token_cannot_forge_the_archive(tmp_path):
    # test.sh finds the fold's token in its parent's command line and prints, at its very end,
    # a whole archive giving reward 1 and a footer naming it; the real reward is 0
    test_sh = FORGE
    spec = SandboxSpec(
        docker_image="debian:bookworm-slim", network_mode=NetworkMode.NO_NETWORK, job_id="test-fold"
    )

    async def main():
        async with DockerSandbox(spec) as sb:
            return await _verify(sb, _step(tmp_path, test_sh), tmp_path / "v", fold=True)

    run, files, left, downloads = asyncio.run(main())
    assert b"no token found" not in files["test-stderr.txt"]
    assert downloads == [] and run.rewards == {"reward": 0.0}
    assert files["reward.txt"] == b"0\n" and left == ""


def _forged_timeout(tmp_path: Path, test_sh: str):
    """Verify ``test_sh`` (a FORGE that then hangs) with the fold and a 5 s timeout; check that
    it found the token and ended as verifier_timeout. Returns ``(run, files, left, downloads)``."""
    spec = SandboxSpec(
        docker_image="debian:bookworm-slim", network_mode=NetworkMode.NO_NETWORK, job_id="test-fold"
    )

    async def main():
        async with DockerSandbox(spec) as sb:
            return await _verify(sb, _step(tmp_path, test_sh), tmp_path / "v", fold=True, timeout_sec=5)

    out = asyncio.run(main())
    run, files = out[0], out[1]
    assert b"no token found" not in files["test-stderr.txt"]
    assert run.error is not None and run.error[0].value == "verifier_timeout", run.error
    return out


def test_a_forged_archive_and_clean_up_before_a_timeout_are_not_taken(tmp_path):
    # the forgery above, then a hang past the timeout: the exec is killed with the forged
    # archive and "clean" line at the very end of its output. A timeout takes nothing of the
    # fold: the folder is downloaded and the root clean-up runs, as without a fold (review of
    # the fold: the forged archive was extracted and the clean-up skipped)
    test_sh = FORGE + "exec sleep 60\n"
    run, files, left, downloads = _forged_timeout(tmp_path, test_sh)
    assert downloads == ["/logs/verifier"]
    assert files["reward.txt"] == b"0\n" and left == ""


SLOW_TAR = r"""
t=$(command -v tar) && mv "$t" /usr/local/sbin/tar.real && cat > "$t" <<'SHIM' && chmod 755 "$t"
#!/bin/sh
n=$(cat /tmp/tar-calls 2>/dev/null || echo 0); echo $((n+1)) > /tmp/tar-calls
if [ "$n" = HANG ]; then
  [ "$n" = 0 ] || /usr/local/sbin/tar.real "$@"
  exec sleep 600
fi
exec /usr/local/sbin/tar.real "$@"
SHIM
"""
"""Makes the image's ``tar`` one that never ends on its call number HANG (0: the fold's sizing
pass, before anything is written; 1: the archive, after writing it whole): a folder too big
to archive before the deadline."""


@pytest.mark.parametrize("hang", [0, 1], ids=["while-sizing", "while-streaming"])
def test_a_timeout_while_the_folder_is_archived_is_no_verifier_timeout(tmp_path, hang):
    # test.sh ends at once with its reward; the exec's timeout strikes while the fold still
    # archives /logs/verifier: test.sh ended in time, so the result is the plain calls' (its
    # exit code and reward, the folder downloaded, the clean-up run), not verifier_timeout
    # (issue #31: it was reported as a timeout)
    test_sh = "echo out\necho 0.25 > /logs/verifier/reward.txt\nexit 2\n"
    before = SLOW_TAR.replace("HANG", str(hang))
    run, files, left, downloads = asyncio.run(_both(tmp_path, test_sh, before=before, timeout_sec=6))
    assert downloads == ["/logs/verifier"]  # the fold gave the copy up to the download
    assert run.error is None and run.exit_code == 2 and run.rewards == {"reward": 0.25}
    assert files["test-stdout.txt"] == b"out\n" and files["reward.txt"] == b"0.25\n"
    assert left == ""


def test_an_exit_code_line_test_sh_forges_before_a_timeout_is_not_taken(tmp_path):
    # the forgery above, then the script's exit-code line in test.sh's own words (code 0) and
    # more output, then a hang past the timeout: the line is not followed by what the script
    # writes after its own, so it gives no code; the result stays verifier_timeout
    test_sh = FORGE + 'printf "%s:out 0\\n" "$tok"\necho more\nexec sleep 60\n'
    run, files, left, downloads = _forged_timeout(tmp_path, test_sh)
    assert run.exit_code is None and downloads == ["/logs/verifier"]
    assert files["reward.txt"] == b"0\n" and left == ""


SLOW_FIND = r"""
f=$(command -v find) && mv "$f" /usr/local/sbin/find.real && cat > "$f" <<'SHIM' && chmod 755 "$f"
#!/bin/sh
if tr '\0' ' ' < /proc/$PPID/cmdline | grep -q cairn-fold && [ ! -e /tmp/find-hung ]; then
  : > /tmp/find-hung; exec sleep 600
fi
exec /usr/local/sbin/find.real "$@"
SHIM
"""
"""Makes the image's ``find`` one that never ends the first time the fold's own clean-up (after
its footer) calls it; every other call (the plain calls', the caller's after the fold) is the
real one."""


def test_a_timeout_during_the_fold_s_clean_up_is_no_verifier_timeout(tmp_path):
    # test.sh ends at once; the fold's archive and footer come, then its clean-up hangs past
    # the timeout: test.sh ended in time, so the result is the plain calls' (its exit code and
    # reward, the folder downloaded, the clean-up run again), not verifier_timeout
    test_sh = "echo out\necho 0.75 > /logs/verifier/reward.txt\nexit 2\n"
    run, files, left, downloads = asyncio.run(_both(tmp_path, test_sh, before=SLOW_FIND, timeout_sec=8))
    assert downloads == ["/logs/verifier"]  # after a timeout nothing of the fold is taken
    assert run.error is None and run.exit_code == 2 and run.rewards == {"reward": 0.75}
    assert files["test-stdout.txt"] == b"out\n" and files["reward.txt"] == b"0.75\n"
    assert left == ""
