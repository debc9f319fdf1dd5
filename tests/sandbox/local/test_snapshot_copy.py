"""The local backend's snapshot copy (cairn.sandbox.local.snapshot) on plain folders laid out
like a sandbox's overlay upper folders: merge order, hard links to the previous snapshot for
unchanged files only, whiteouts and metadata kept, a snapshot of a restored sandbox keeps the
files it started from."""

from __future__ import annotations

import os
import stat

import pytest

from cairn.sandbox.local import snapshot as snap


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("CAIRN_LOCAL_DIR", str(tmp_path / "state"))
    sb = tmp_path / "sandbox"
    (sb / "up" / "root" / "app").mkdir(parents=True)
    (sb / "up" / "usr" / "local" / "bin").mkdir(parents=True)
    (sb / "up" / "root" / "app" / "big.bin").write_bytes(b"x" * 100_000)
    (sb / "up" / "root" / "app" / "small.txt").write_text("one\n")
    os.chmod(sb / "up" / "root" / "app" / "small.txt", 0o640)
    (sb / "up" / "usr" / "local" / "bin" / "tool").write_text("#!/bin/sh\n")
    os.symlink("big.bin", sb / "up" / "root" / "app" / "link")
    return sb


RELS = ["root", "usr"]


def test_upper_folders_merge_into_one_tree_with_metadata(state):
    folder, copied = snap.make_snapshot(state, RELS, {"cairn.trial": "t1"})
    root = folder / "root"
    assert (root / "app" / "big.bin").read_bytes() == b"x" * 100_000
    assert (root / "usr" / "local" / "bin" / "tool").read_text() == "#!/bin/sh\n"
    assert os.readlink(root / "app" / "link") == "big.bin"
    assert stat.S_IMODE((root / "app" / "small.txt").stat().st_mode) == 0o640
    assert copied == 100_000 + 4 + 10
    assert snap.snapshot_root(str(folder)) == root
    (found,) = [m for f, m in snap.find_local_snapshots() if f == folder]
    assert found["labels"] == {"cairn.trial": "t1"} and "manifest" not in found


def test_unchanged_files_are_hard_linked_to_the_previous_snapshot_only(state):
    first, _ = snap.make_snapshot(state, RELS, {})
    with open(state / "up" / "root" / "app" / "small.txt", "a") as f:  # in place, as an agent
        f.write("two\n")
    second, copied = snap.make_snapshot(state, RELS, {}, prev=first)
    big1, big2 = (d / "root" / "app" / "big.bin" for d in (first, second))
    assert big1.stat().st_ino == big2.stat().st_ino  # unchanged: shared
    assert copied == len("one\ntwo\n")  # only the changed file was copied
    assert (first / "root" / "app" / "small.txt").read_text() == "one\n"
    assert (second / "root" / "app" / "small.txt").read_text() == "one\ntwo\n"
    # the sandbox's own upper file is never linked: writing it leaves both snapshots alone
    (state / "up" / "root" / "app" / "big.bin").write_bytes(b"changed")
    assert big2.read_bytes() == b"x" * 100_000


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a whiteout needs root")
def test_whiteouts_are_kept_and_a_restored_sandbox_keeps_its_base(state):
    os.mknod(state / "up" / "root" / "app" / "gone", stat.S_IFCHR | 0o000, os.makedev(0, 0))
    first, _ = snap.make_snapshot(state, RELS, {})
    wo = (first / "root" / "app" / "gone").lstat()
    assert stat.S_ISCHR(wo.st_mode) and wo.st_rdev == os.makedev(0, 0)
    # a sandbox started from `first`: its upper holds only what it changed since
    restored = state.parent / "restored"
    (restored / "up" / "root" / "app").mkdir(parents=True)
    (restored / "up" / "root" / "app" / "new.txt").write_text("new\n")
    os.mknod(restored / "up" / "root" / "app" / "small.txt", stat.S_IFCHR, os.makedev(0, 0))
    second, copied = snap.make_snapshot(restored, ["root"], {}, base=first / "root")
    app = second / "root" / "app"
    assert (app / "big.bin").stat().st_ino == (first / "root" / "app" / "big.bin").stat().st_ino
    assert (app / "new.txt").read_text() == "new\n" and copied == 4
    assert stat.S_ISCHR((app / "small.txt").lstat().st_mode)  # deleted since: a whiteout
    assert (second / "root" / "usr" / "local" / "bin" / "tool").is_file()


def test_remove_refuses_folders_outside_the_snapshots_folder(state, tmp_path):
    folder, _ = snap.make_snapshot(state, RELS, {})
    with pytest.raises(ValueError, match="is not a local snapshot folder"):
        snap.remove_local_snapshot(tmp_path)
    snap.remove_local_snapshot(folder)
    assert not folder.exists()
    with pytest.raises(FileNotFoundError, match=r"local snapshot .* not found"):
        snap.snapshot_root(str(folder))
