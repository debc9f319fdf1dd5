"""Streaming tar helpers: round trips, and hostile archives that must not escape the target."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

from cairn._util.tar import IterReader, extract_tar_stream, tar_stream


def _archive(members: list[tuple[str, str, bytes | str]]) -> bytes:
    """members: (name, kind 'file'|'dir'|'sym'|'hard', data or link target)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, kind, data in members:
            ti = tarfile.TarInfo(name)
            if kind == "file":
                assert isinstance(data, bytes)
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
                continue
            ti.type = {"dir": tarfile.DIRTYPE, "sym": tarfile.SYMTYPE, "hard": tarfile.LNKTYPE}[kind]
            if kind in ("sym", "hard"):
                ti.linkname = str(data)
            if kind == "dir":
                ti.mode = 0o755
            tf.addfile(ti)
    return buf.getvalue()


def _chunks(data: bytes, n: int = 7) -> list[bytes]:
    return [data[i : i + n] for i in range(0, len(data), n)]


def test_roundtrip_preserves_names_modes_links(tmp_path):
    src = tmp_path / "src"
    (src / "d i r").mkdir(parents=True)
    (src / "d i r" / 'it\'s "q".txt').write_text("q\n")
    (src / "run.sh").write_text("#!/bin/sh\n")
    (src / "run.sh").chmod(0o750)
    (src / ("long" + "x" * 120)).write_bytes(b"\0" * 1000)
    os.symlink("/etc/passwd", src / "pw")
    os.symlink("d i r", src / "dirlink")
    out = tmp_path / "out"
    rep = extract_tar_stream(tar_stream(src, "root"), out, root_name="root")
    assert rep.refused == [] and rep.files == 3
    assert (out / "d i r" / 'it\'s "q".txt').read_text() == "q\n"
    assert (out / "run.sh").stat().st_mode & 0o777 == 0o750
    assert (out / ("long" + "x" * 120)).read_bytes() == b"\0" * 1000
    assert os.readlink(out / "pw") == "/etc/passwd"
    assert os.readlink(out / "dirlink") == "d i r"


def test_contents_only_stream_has_no_root_entry(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a").write_text("a")
    with tarfile.open(fileobj=IterReader(tar_stream(src, "x/y", include_root=False)), mode="r|") as names:
        assert [m.name for m in names] == ["x/y/a"]


def test_single_file_and_link_roots(tmp_path):
    f = tmp_path / "f.txt"
    f.write_text("hello")
    out = tmp_path / "o" / "deep" / "copy.txt"
    extract_tar_stream(_chunks(b"".join(tar_stream(f, "f.txt"))), out, root_name="f.txt")
    assert out.read_text() == "hello"
    link_out = tmp_path / "link-copy"
    data = _archive([("pw", "sym", "/etc/passwd")])
    extract_tar_stream([data], link_out, root_name="pw")
    assert link_out.is_symlink() and os.readlink(link_out) == "/etc/passwd"


def test_hostile_members_are_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    target = tmp_path / "target"
    data = _archive(
        [
            ("r", "dir", ""),
            ("r/../../outside/dotdot.txt", "file", b"x"),
            ("/abs.txt", "file", b"x"),
            ("r/esc", "sym", str(outside)),
            ("r/esc/through-link.txt", "file", b"x"),
            ("r/up", "sym", ".."),
            ("r/up/up-link.txt", "file", b"x"),
            ("r/hard", "hard", "/etc/passwd"),
            ("r/hard2", "hard", "r/../../outside/x"),
            ("other/not-under-root.txt", "file", b"x"),
            ("r/ok.txt", "file", b"fine"),
        ]
    )
    rep = extract_tar_stream(_chunks(data, 100), target, root_name="r")
    assert (target / "ok.txt").read_bytes() == b"fine"
    assert os.listdir(outside) == []
    assert not (tmp_path / "abs.txt").exists() and not Path("/abs.txt").exists()
    assert not (tmp_path / "up-link.txt").exists()
    assert len(rep.refused) == 7, rep.refused
    assert os.readlink(target / "esc") == str(outside)  # the link itself is kept, as a link


def test_existing_host_links_are_replaced_not_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim"
    victim.write_text("safe")
    target = tmp_path / "target"
    target.mkdir()
    os.symlink(outside, target / "sub")
    os.symlink(victim, target / "file")
    data = _archive(
        [("r", "dir", ""), ("r/sub", "dir", ""), ("r/sub/new", "file", b"x"), ("r/file", "file", b"evil")]
    )
    rep = extract_tar_stream([data], target, root_name="r")
    assert rep.refused == []
    assert victim.read_text() == "safe" and os.listdir(outside) == ["victim"]
    assert (target / "sub").is_dir() and not (target / "sub").is_symlink()
    assert (target / "file").read_bytes() == b"evil" and not (target / "file").is_symlink()
    # a target path that is itself a link to a file outside is replaced too
    link_target = tmp_path / "lt"
    os.symlink(victim, link_target)
    extract_tar_stream([_archive([("f", "file", b"new")])], link_target, root_name="f")
    assert victim.read_text() == "safe" and link_target.read_bytes() == b"new"


def test_big_stream_memory_is_bounded(tmp_path):
    """A 64 MiB file is streamed in ~1 MiB pieces; no piece is larger."""
    big = tmp_path / "big"
    with open(big, "wb") as f:
        f.truncate(64 << 20)
    sizes = [len(c) for c in tar_stream(big, "big")]
    assert max(sizes) <= 1 << 20 and sum(sizes) >= 64 << 20
    out = tmp_path / "out"
    rep = extract_tar_stream(tar_stream(big, "big"), out, root_name="big")
    assert rep.bytes == 64 << 20 and out.stat().st_size == 64 << 20
