"""The folded verifier exec's script and its parser (cairn.sandbox.docker.fold), run with this
machine's own ``/bin/sh``, ``tar`` and ``cat`` on folders under tmp_path: what test.sh prints
can never stand for the archive or the footer, the relays wait for test.sh's last writer and
outlive the timeout's kill, and nothing is cleaned up unless the archive is whole."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import time
import uuid
from pathlib import Path

import pytest

from cairn.sandbox.docker.exec_stream import KILL_BY_ENV_SCRIPT
from cairn.sandbox.docker.fold import FOLD_LIMIT_BYTES, fold_argv, fold_env, parse_fold

ROOT = os.geteuid() == 0


class Box:
    """A verifier folder, a tests folder and a test.sh under tmp_path."""

    def __init__(self, tmp_path: Path, script: str) -> None:
        self.logs = tmp_path / "logs" / "verifier"
        self.tests = tmp_path / "tests"
        self.logs.mkdir(parents=True)
        self.tests.mkdir()
        (self.tests / "test.sh").write_text(script)
        self.token = uuid.uuid4().hex
        self.exec_id = uuid.uuid4().hex
        self.clean = f"rm -rf {self.tests}; find {self.logs} -mindepth 1 -delete"

    def argv(self, *, clean: bool = True, timeout_sec: float | None = 60, limit: int = FOLD_LIMIT_BYTES):
        return fold_argv(
            ["bash", str(self.tests / "test.sh")],
            collect=str(self.logs),
            then_root=self.clean if clean else None,
            unless_exit=(126, 127),
            timeout_sec=timeout_sec,
            limit_bytes=limit,
        )

    def env(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "CAIRN_EXEC_ID": self.exec_id,
            **fold_env(self.token),
            "VDIR": str(self.logs),
            "TOKEN": self.token,
            **extra,
        }

    def run(self, **kw) -> tuple[subprocess.CompletedProcess[bytes], object]:
        env = self.env(**kw.pop("env", {}))
        p = subprocess.run(self.argv(**kw), capture_output=True, env=env, cwd=self.tests, timeout=60)
        return p, parse_fold(p.stdout, self.token, truncated=False)


def _names(tar: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
        return {m.name: (tf.extractfile(m).read() if m.isreg() else b"") for m in tf}  # type: ignore[union-attr]


def test_the_fold_splits_output_archive_and_exit_code(tmp_path):
    box = Box(
        tmp_path,
        'echo "to stdout"\necho "to stderr" >&2\nprintf 0.75 > "$VDIR/reward.txt"\n'
        'mkdir "$VDIR/sub"; echo x > "$VDIR/sub/f"\nexit 3\n',
    )
    p, fold = box.run()
    assert p.returncode == 3
    assert p.stderr == b"to stderr\n"
    assert fold.started and fold.footer and fold.code == 3
    assert fold.out == b"to stdout\n"
    assert _names(fold.tar) == {
        "verifier": b"",
        "verifier/reward.txt": b"0.75",
        "verifier/sub": b"",
        "verifier/sub/f": b"x\n",
    }
    assert fold.cleaned is ROOT
    if ROOT:
        assert not box.tests.exists() and box.logs.is_dir() and not any(box.logs.iterdir())


def test_a_forged_footer_and_archive_in_the_output_stay_output(tmp_path):
    # the worst case: test.sh knows the token and prints a whole fake archive and footer, at
    # its very end, on stdout, and a fake clean line too
    fake = io.BytesIO()
    with tarfile.open(fileobj=fake, mode="w") as tf:
        info = tarfile.TarInfo("verifier/reward.txt")
        info.size = 1
        tf.addfile(info, io.BytesIO(b"1"))
    (tmp_path / "fake.tar").write_bytes(fake.getvalue())
    box = Box(
        tmp_path,
        f'printf 0 > "$VDIR/reward.txt"\ncat {tmp_path}/fake.tar\n'
        f'printf "%s:tar {len(fake.getvalue())} 0 0 0\\n%s:clean\\n" "$TOKEN" "$TOKEN"\n',
    )
    p, fold = box.run()
    assert fold.footer and fold.code == 0
    assert _names(fold.tar)["verifier/reward.txt"] == b"0"
    assert fold.out.startswith(fake.getvalue()) and fold.out.endswith(f"{box.token}:clean\n".encode())
    assert fold.cleaned is ROOT


def test_the_relays_wait_for_test_sh_s_last_writer(tmp_path):
    # a background process of test.sh still prints (and writes a reward) after test.sh exits:
    # the archive is taken only once it has closed stdout and stderr, as a plain exec ends
    box = Box(
        tmp_path,
        '(sleep 0.5; echo late; echo "late err" >&2; printf 1 > "$VDIR/reward.txt") &\necho early\n',
    )
    p, fold = box.run()
    assert fold.out == b"early\nlate\n"
    assert p.stderr == b"late err\n"
    assert _names(fold.tar)["verifier/reward.txt"] == b"1"


@pytest.mark.parametrize("code", [126, 127])
def test_nothing_is_copied_or_cleaned_after_an_excluded_exit_code(tmp_path, code):
    box = Box(tmp_path, f"echo out\nexit {code}\n")
    p, fold = box.run()
    assert p.returncode == code
    assert fold.started and not fold.footer and fold.tar is None and not fold.cleaned
    assert fold.out == b"out\n" and box.tests.exists()
    assert not fold.may_have_cleaned((126, 127), code)


def test_a_folder_over_the_limit_is_left_for_the_download(tmp_path):
    box = Box(tmp_path, 'head -c 20000 /dev/zero > "$VDIR/big"\necho done\n')
    p, fold = box.run(limit=10000)
    assert fold.footer and fold.tar is None and not fold.cleaned
    assert fold.out == b"done\n"
    assert not fold.whole and not fold.may_have_cleaned((126, 127), 0)
    assert (box.logs / "big").stat().st_size == 20000 and box.tests.exists()


def test_a_verifier_folder_replaced_by_a_link_is_not_archived(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    box = Box(tmp_path, f'rm -rf "$VDIR"; ln -s {elsewhere} "$VDIR"\necho hi\n')
    p, fold = box.run()
    assert fold.footer and fold.tar is None and not fold.cleaned and box.tests.exists()


def test_without_tar_the_command_runs_as_a_plain_exec(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("cat", "tee", "wc", "bash", "printf"):  # everything but tar
        if (found := shutil.which(tool)) is not None:
            (bindir / tool).symlink_to(found)
    box = Box(tmp_path, 'echo plain\nprintf 1 > "$VDIR/reward.txt"\n')
    p, fold = box.run(env={"PATH": str(bindir)})
    assert p.returncode == 0
    assert fold.started and not fold.footer and fold.out == b"plain\n"
    assert fold.plain and not fold.may_have_cleaned((126, 127), 0)
    assert (box.logs / "reward.txt").read_bytes() == b"1" and box.tests.exists()


def test_no_clean_up_with_too_little_of_the_timeout_left(tmp_path):
    box = Box(tmp_path, 'printf 1 > "$VDIR/reward.txt"\n')
    p, fold = box.run(timeout_sec=4.0)  # under the 5 s margin
    assert fold.tar is not None and not fold.cleaned and box.tests.exists()


def test_a_timeout_s_kill_leaves_the_relays_to_drain_the_output(tmp_path):
    # the exec's tree is killed by its CAIRN_EXEC_ID (as on a timeout); the relays carry
    # another one, so what test.sh printed before the kill all arrives, and no footer follows
    box = Box(tmp_path, "for i in $(seq 1 2000); do echo line-$i; done\necho ready >&2\nsleep 600\n")
    pipe = subprocess.PIPE
    proc = subprocess.Popen(box.argv(), stdout=pipe, stderr=pipe, env=box.env(), cwd=box.tests)
    assert proc.stderr is not None and proc.stdout is not None
    assert proc.stderr.readline() == b"ready\n"
    kill = subprocess.run(["/bin/sh", "-c", KILL_BY_ENV_SCRIPT, "cairn-kill", box.exec_id], timeout=60)
    assert kill.returncode == 0
    out, _ = proc.communicate(timeout=30)  # the relays end: every writer of theirs is dead
    fold = parse_fold(out, box.token, truncated=False)
    assert fold.started and not fold.footer and not fold.cleaned
    assert fold.out == b"".join(f"line-{i}\n".encode() for i in range(1, 2001))
    assert box.tests.exists()


def test_parse_reads_a_stream_cut_at_the_front(tmp_path):
    box = Box(tmp_path, 'head -c 5000 /dev/zero | tr "\\0" a\nprintf 1 > "$VDIR/reward.txt"\n')
    p, _ = box.run(clean=False)
    cut = p.stdout[3000:]
    fold = parse_fold(cut, box.token, truncated=True)
    assert fold.footer and _names(fold.tar)["verifier/reward.txt"] == b"1"
    assert fold.out == b"a" * (5000 - 3000 + len(f"{box.token}:start\n"))


def test_parse_refuses_an_archive_that_does_not_parse(tmp_path):
    box = Box(tmp_path, 'printf 1 > "$VDIR/reward.txt"\n')
    p, fold = box.run(clean=False)
    assert fold.tar is not None
    n = len(fold.tar)
    broken = p.stdout.replace(fold.tar, b"\x07" * n)
    bad = parse_fold(broken, box.token, truncated=False)
    assert bad.footer and bad.bad_tar and bad.tar is None
    assert parse_fold(p.stdout[:-1], box.token, truncated=False).footer is False
    assert parse_fold(p.stdout, "0" * 32, truncated=False).started is False


def test_a_stream_cut_inside_the_archive_keeps_only_the_output(tmp_path):
    # a timeout's kill while the archive streams: no footer, and what came after the
    # command's output is not output
    box = Box(tmp_path, 'echo out\nhead -c 3000 /dev/zero > "$VDIR/f"\n')
    p, fold = box.run(clean=False)
    assert fold.tar is not None
    cut = p.stdout[: p.stdout.index(fold.tar) + len(fold.tar) // 2]
    again = parse_fold(cut, box.token, truncated=False)
    assert again.started and not again.footer and again.tar is None and again.out == b"out\n"


def test_archive_bytes_after_the_marker_are_never_the_commands_output():
    # a footer whose count cannot be (more bytes than came before it: a stream cut at the
    # front, a folder that grew between the two tar passes): no archive, and the output
    # still ends at the script's marker (review of the fold: the bytes went to test-stdout)
    tok = uuid.uuid4().hex
    raw = f"{tok}:start\nhello\n{tok}:out\n".encode() + b"PARTIALARCHIVE" + f"{tok}:tar 999 0 0 0\n".encode()
    fold = parse_fold(raw, tok, truncated=False)
    assert (fold.out, fold.tar, fold.footer, fold.code) == (b"hello\n", None, True, 0)


@pytest.mark.parametrize(
    ("user", "root"),
    [(None, True), ("root", True), (0, True), ("0", True), ("0:0", True), ("root:root", True),
     ("nobody", False), (1000, False), ("1000:0", False), ("rootless", False)],
)  # fmt: skip
def test_only_an_exec_that_may_run_as_root_can_have_cleaned_up(user, root):
    from cairn.sandbox.docker.backend import _may_be_root

    assert _may_be_root(user) is root


def _slow_tar_path(tmp_path: Path) -> str:
    """A PATH whose ``tar`` never ends (a folder so big its sizing pass outlives the timeout)
    and which tells, by a file, that it started; the rest is this machine's."""
    bindir = tmp_path / "slowbin"
    bindir.mkdir()
    shim = bindir / "tar"
    shim.write_text(f"#!/bin/sh\n: > {tmp_path}/tar-started\nexec sleep 600\n")
    shim.chmod(0o755)
    return f"{bindir}:{os.environ['PATH']}"


def test_a_timeout_while_archiving_keeps_the_command_s_exit_code(tmp_path):
    # test.sh ended (exit 3); the timeout's kill strikes while the script sizes the folder: the
    # ":out" line carries test.sh's code, so the host knows it ended in time (issue #31)
    box = Box(tmp_path, 'echo out\nprintf 1 > "$VDIR/reward.txt"\nexit 3\n')
    pipe = subprocess.PIPE
    env = box.env(PATH=_slow_tar_path(tmp_path))
    proc = subprocess.Popen(box.argv(), stdout=pipe, stderr=pipe, env=env, cwd=box.tests)
    assert proc.stdout is not None
    lines = [proc.stdout.readline() for _ in range(3)]  # start, test.sh's line, the script's
    assert lines == [f"{box.token}:start\n".encode(), b"out\n", f"{box.token}:out 3\n".encode()]
    deadline = time.monotonic() + 30
    while not (tmp_path / "tar-started").exists():  # the kill strikes while tar runs
        assert time.monotonic() < deadline, "the script never started tar"
        time.sleep(0.02)
    kill = subprocess.run(["/bin/sh", "-c", KILL_BY_ENV_SCRIPT, "cairn-kill", box.exec_id], timeout=60)
    assert kill.returncode == 0
    out, _ = proc.communicate(timeout=30)
    fold = parse_fold(b"".join(lines) + out, box.token, truncated=False)
    assert (fold.started, fold.footer, fold.tar, fold.cleaned) == (True, False, None, False)
    assert fold.ended == 3 and fold.out == b"out\n"
    assert (box.logs / "reward.txt").read_bytes() == b"1" and box.tests.exists()


@pytest.mark.skipif(not ROOT, reason="the fold cleans up only as root")
def test_a_timeout_during_the_clean_up_keeps_the_command_s_exit_code(tmp_path):
    # test.sh ended (exit 3) and its folder's archive and footer came; the timeout's kill
    # strikes while the clean-up after the footer runs: the command had ended, with the code
    # both the ":out" line and the footer carry (it read as verifier_timeout before)
    box = Box(tmp_path, 'echo out\nprintf 1 > "$VDIR/reward.txt"\nexit 3\n')
    box.clean = f": > {tmp_path}/clean-started; exec sleep 600"
    pipe = subprocess.PIPE
    proc = subprocess.Popen(box.argv(), stdout=pipe, stderr=pipe, env=box.env(), cwd=box.tests)
    deadline = time.monotonic() + 30
    while not (tmp_path / "clean-started").exists():
        assert time.monotonic() < deadline, "the script never started the clean-up"
        time.sleep(0.02)
    kill = subprocess.run(["/bin/sh", "-c", KILL_BY_ENV_SCRIPT, "cairn-kill", box.exec_id], timeout=60)
    assert kill.returncode == 0
    out, _ = proc.communicate(timeout=30)
    fold = parse_fold(out, box.token, truncated=False)
    assert (fold.footer, fold.code, fold.out_code, fold.cleaned, fold.whole) == (True, 3, 3, False, True)
    assert fold.ended is None and fold.ended_by() == 3 and fold.out == b"out\n"


def test_a_footer_with_no_exit_code_line_before_it_shows_no_end():
    # a footer at the end of a cut stream whose ":out" line is missing or disagrees (test.sh
    # forged the footer, then hung): nothing shows the command ended
    tok = uuid.uuid4().hex
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w") as tf:
        tf.addfile(tarfile.TarInfo("verifier"))
    body = tar.getvalue()
    footer = f"{tok}:tar {len(body)} 0 0 0\n".encode()
    for before, shows in ((b"", None), (f"{tok}:out 4\n".encode(), None), (f"{tok}:out 0\n".encode(), 0)):
        fold = parse_fold(f"{tok}:start\nhi\n".encode() + before + body + footer, tok, truncated=False)
        assert fold.footer and fold.code == 0 and fold.ended_by() == shows, before


def test_a_stream_cut_inside_the_archive_keeps_the_exit_code(tmp_path):
    box = Box(tmp_path, 'echo out\nhead -c 3000 /dev/zero > "$VDIR/f"\nexit 5\n')
    p, fold = box.run(clean=False)
    assert fold.tar is not None and fold.code == 5
    at = p.stdout.index(fold.tar)
    for cut in (at, at + 512, at + len(fold.tar) // 2, at + len(fold.tar)):  # no footer
        again = parse_fold(p.stdout[:cut], box.token, truncated=False)
        assert (again.footer, again.tar, again.ended, again.out) == (False, None, 5, b"out\n")
    # under one whole header after the line: what follows cannot be told from test.sh's
    # own bytes, so no code (the result stays a timeout)
    assert parse_fold(p.stdout[: at + 100], box.token, truncated=False).ended is None
    assert fold.ended is None  # with a footer, its code is the one


@pytest.mark.parametrize(
    "forged",
    [
        'printf "%s:out 0\\n" "$TOKEN"; echo more',  # more of test.sh's output follows it
        'printf "%s:out 0\\n" "$TOKEN"',  # the script's own line follows it
        'printf "%s:out 0\\n" "$TOKEN"; head -c 1024 /dev/zero',  # no tar header follows
    ],
)
def test_an_out_line_test_sh_prints_gives_no_exit_code(tmp_path, forged):
    # test.sh knows the token and prints the script's line itself, then exits 7; the stream is
    # cut inside the archive (a timeout): its line is the first, so it is the one read, and
    # it is not followed by what the script writes after its own: no code, the timeout stands
    box = Box(tmp_path, f'{forged}\nhead -c 3000 /dev/zero > "$VDIR/f"\nexit 7\n')
    p, fold = box.run(clean=False)
    assert fold.tar is not None and fold.code == 7
    cut = p.stdout[: p.stdout.index(fold.tar) + len(fold.tar) // 2]
    again = parse_fold(cut, box.token, truncated=False)
    assert (again.footer, again.tar, again.ended, again.out) == (False, None, None, b"")


def test_an_out_line_without_a_code_gives_none():
    tok = uuid.uuid4().hex
    for tail in (f"{tok}:out\n", f"{tok}:out 999\n", f"{tok}:out 3"):
        fold = parse_fold(f"{tok}:start\nhello\n{tail}".encode(), tok, truncated=False)
        assert fold.ended is None and fold.out.startswith(b"hello\n")
    fold = parse_fold(f"{tok}:start\nhello\n{tok}:out 0\n".encode(), tok, truncated=False)
    assert (fold.ended, fold.out) == (0, b"hello\n")


def test_the_token_is_in_neither_the_commands_environment_nor_a_command_line(tmp_path):
    """Review of #31 F2: a command line is readable by every user of the sandbox; the token is
    handed in the script's environment (readable by its own user only) and unset before the
    command runs, so a program test.sh runs as another user cannot forge the script's lines."""
    box = Box(
        tmp_path,
        'env | grep -c "^CAIRN_FOLD_TOKEN=" || true\n'
        "for p in $$ $PPID; do tr '\\0' ' ' < /proc/$p/cmdline; echo; done\n",
    )
    env = {k: v for k, v in box.env().items() if k != "TOKEN"}
    p = subprocess.run(box.argv(), capture_output=True, env=env, cwd=box.tests, timeout=60)
    fold = parse_fold(p.stdout, box.token, truncated=False)
    assert fold.started and fold.footer and fold.code == 0, p.stdout[-500:]
    out = fold.out.decode()
    assert out.splitlines()[0] == "0", out  # not in test.sh's environment
    assert "cairn-fold" in out and box.token not in out  # nor on the script's command line


@pytest.mark.skipif(not ROOT, reason="the fold cleans up only as uid 0")
def test_a_stream_whose_end_the_engine_lost_leaves_the_fold_uncertain(tmp_path):
    """Docker and containerd can drop an exec's last output bytes (moby#20951, moby#45689,
    concourse#6775: output lost when the process ends right after printing). The script had
    cleaned the folder up, but the footer and its clean line never came: the fold may have
    cleaned (the caller treats an empty download as a lost copy); with the whole stream, or
    only the clean line lost, it is certain."""
    box = Box(tmp_path, 'echo out\nprintf 1 > "$VDIR/reward.txt"\n')
    p, fold = box.run()
    assert fold.cleaned and fold.tar is not None and not fold.may_have_cleaned((126, 127), 0)
    assert not any(box.logs.iterdir())  # the script did clean up
    clean_line = len(f"{box.token}:clean\n")
    only_clean = parse_fold(p.stdout[:-clean_line], box.token, truncated=False)
    assert only_clean.tar is not None and only_clean.whole and not only_clean.cleaned  # copy kept
    footer = p.stdout.rindex(f"{box.token}:tar ".encode())
    for cut in (footer, footer - 100, p.stdout.index(fold.tar) + 512):
        lost = parse_fold(p.stdout[:cut], box.token, truncated=False)
        assert lost.started and not lost.footer and lost.tar is None and not lost.cleaned
        assert lost.out == b"out\n" and lost.ended == 0
        assert lost.may_have_cleaned((126, 127), 0)
        assert not lost.may_have_cleaned((126, 127), 127)  # the script stops at an excluded code


def test_a_footer_that_announced_a_whole_archive_may_have_cleaned():
    # the footer came, the clean line and the archive's bytes before it did not add up (a
    # stream cut at the front): the script's clean-up condition held
    tok = uuid.uuid4().hex
    raw = f"{tok}:start\nhello\n{tok}:out 0\n".encode() + b"PART" + f"{tok}:tar 10240 0 0 0\n".encode()
    fold = parse_fold(raw, tok, truncated=False)
    assert fold.footer and fold.whole and fold.tar is None and fold.may_have_cleaned((126, 127), 0)
    failed = parse_fold(raw.replace(b":tar 10240 0 0 0", b":tar 10240 2 0 0"), tok, truncated=False)
    assert not failed.whole and not failed.may_have_cleaned((126, 127), 0)


def test_a_tar_that_printed_nothing_is_the_sandboxs_doing_not_a_lost_copy():
    # review: an agent's own "tar" early on PATH prints nothing and exits 0; the script cleans
    # up; that is no copy the engine lost (no infra retry), the download finds what is left
    tok = uuid.uuid4().hex
    raw = f"{tok}:start\n{tok}:out 0\n{tok}:tar 0 0 0 0\n{tok}:clean\n".encode()
    fold = parse_fold(raw, tok, truncated=False)
    assert fold.footer and fold.cleaned and fold.tar is None and not fold.whole


def test_no_out_line_means_the_script_died_with_the_command_not_a_lost_end():
    # review: a test.sh that kills its own process group takes the script along: no :out line,
    # no doubt about a clean-up that never ran
    tok = uuid.uuid4().hex
    fold = parse_fold(f"{tok}:start\nsome output\n".encode(), tok, truncated=False)
    assert fold.started and not fold.footer and fold.ended is None
    assert not fold.may_have_cleaned((126, 127), 137)


def test_a_stream_that_lost_its_start_line_still_folds(tmp_path):
    # an engine that lost the exec's first frames (cairn.sandbox.docker.exec_stream.open_exec):
    # the footer, which only the script prints, says the script ran; the archive is taken
    box = Box(tmp_path, 'echo out\nprintf 1 > "$VDIR/reward.txt"\n')
    p, fold = box.run(clean=False)
    start = f"{box.token}:start\n".encode()
    assert p.stdout.startswith(start)
    again = parse_fold(p.stdout[len(start) :], box.token, truncated=False)
    assert again.started and again.footer and again.tar == fold.tar and again.out == b"out\n"
    assert parse_fold(b"out\n", box.token, truncated=False).started is False
