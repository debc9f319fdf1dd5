"""Folder names that fit every filesystem (issue #29): bounded, readable, unique per name."""

from __future__ import annotations

import io
import tarfile

import pytest

from cairn._util.names import bounded_part
from cairn._util.tar import extract_tar_stream
from cairn.results.store import TRIAL_SLUG_MAX_BYTES, step_dir_name, trial_dir_group, trial_dir_name
from cairn.task.model import STEP_DIR_MAX_BYTES

ID = "3fa85f64" + "0" * 56


def test_short_names_are_unchanged():
    assert trial_dir_name("org/two steps", 1, ID) == "org-two-steps__1__3fa85f64"
    assert step_dir_name(1, "main") == "01-main"


def test_a_250_character_task_name_gives_a_bounded_readable_unique_folder():
    a, b = "test/" + "a" * 245, "test/" + "a" * 244 + "b"
    na, nb = trial_dir_name(a, 1, ID), trial_dir_name(b, 1, ID)
    assert len(na.encode()) <= TRIAL_SLUG_MAX_BYTES + 20 < 255
    assert na.startswith("test-aaaa") and na.endswith("__1__3fa85f64")
    assert na != nb and trial_dir_group(na) != trial_dir_group(nb)  # never taken for another
    assert trial_dir_name(a, 1, ID) == na  # deterministic: resume finds it again


def test_long_step_names_are_bounded():
    name = "s" * 250
    folder = step_dir_name(3, name)
    assert len(folder.encode()) <= STEP_DIR_MAX_BYTES and folder.startswith("03-sss")
    assert folder != step_dir_name(3, "s" * 249 + "t")


def test_bounded_part_never_cuts_a_character():
    out = bounded_part("é" * 100, 50, key="k")
    assert len(out.encode()) <= 50
    out.encode("utf-8").decode("utf-8")
    with pytest.raises(ValueError, match="^a name bound of 8 bytes leaves no room for the digest$"):
        bounded_part("x", 8, key="k")


def test_tar_members_too_long_for_the_host_are_skipped_and_the_rest_written(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, data in (
            ("root/ok.txt", b"ok"),
            ("root/" + "n" * 300 + "/x.txt", b"x"),
            ("root/after.txt", b"after"),
        ):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    report = extract_tar_stream([buf.getvalue()], tmp_path / "out", root_name="root")
    assert report.too_long_count == 1 and report.too_long[0].endswith("/x.txt")
    assert (tmp_path / "out" / "ok.txt").read_bytes() == b"ok"
    assert (tmp_path / "out" / "after.txt").read_bytes() == b"after"
