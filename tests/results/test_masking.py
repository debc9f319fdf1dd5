"""Secret masking (design §7, §11): values of 4+ characters become *** in what cairn writes."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from cairn.results.masking import MASK, Masker, find_secrets, mask_tree


def test_masks_every_occurrence_and_ignores_short_values() -> None:
    m = Masker(["hunter22", "abc", "", "xyz9"])
    assert m.secrets == ("hunter22", "xyz9")
    assert m.mask("a hunter22 b hunter22 abc xyz9") == "a *** b *** abc ***"
    assert bool(m) and not Masker(["abc"]) and not Masker([])


def test_longer_secret_wins_over_a_contained_one() -> None:
    m = Masker(["token", "token-extended"])
    assert m.mask("x token-extended y token") == "x *** y ***"


def test_regex_characters_are_literal() -> None:
    m = Masker(["a.b*c", "(x|y)"])
    assert m.mask("a.b*c aXbbc (x|y) x") == "*** aXbbc *** x"


def test_json_escaped_spellings_are_masked() -> None:
    secret = 'pa"ss\\wörd'
    m = Masker([secret])
    for text in (json.dumps({"k": secret}), json.dumps({"k": secret}, ensure_ascii=False)):
        assert m.mask(text) == '{"k": "***"}'
    assert m.mask_bytes(json.dumps({"k": secret}).encode()) == b'{"k": "***"}'


def test_mask_bytes_and_contains() -> None:
    m = Masker(["s3cr3t"])
    assert m.mask_bytes(b"\x00\xffs3cr3t\x00") == b"\x00\xff***\x00"
    assert m.contains(b"xx s3cr3t") and m.contains("s3cr3t") and not m.contains(b"s3cr3")
    assert Masker([]).mask_bytes(b"s3cr3t") == b"s3cr3t"
    assert not Masker([]).contains("anything")


def test_mask_json_masks_keys_and_values_only_in_strings() -> None:
    m = Masker(["1234", "key-secret"])
    tree = {"key-secret": ["1234", 1234, {"a": "x1234y"}], "n": None, "b": True}
    assert m.mask_json(tree) == {MASK: [MASK, 1234, {"a": "x***y"}], "n": None, "b": True}


@given(
    st.text(min_size=4, max_size=12).filter(lambda s: s.strip() == s and "*" not in s),
    st.lists(st.text(max_size=10), max_size=5),
)
def test_masked_text_never_contains_the_secret(secret: str, parts: list[str]) -> None:
    text = secret.join(parts) + secret
    masked = Masker([secret]).mask(text)
    # the secret can only reappear if it straddles a *** boundary, which needs a '*' in it
    assert secret not in masked


def test_mask_tree_rewrites_text_files_keeps_mode_and_skips(tmp_path: Path) -> None:
    m = Masker(["SECRETVALUE"])
    (tmp_path / "agent").mkdir()
    (tmp_path / "artifacts").mkdir()
    log = tmp_path / "agent" / "log.txt"
    log.write_text("echo SECRETVALUE\n")
    os.chmod(log, 0o750)
    clean = tmp_path / "agent" / "clean.txt"
    clean.write_text("nothing here\n")
    binary = tmp_path / "agent" / "blob.bin"
    binary.write_bytes(b"\x00\x01SECRETVALUE")
    artifact = tmp_path / "artifacts" / "out.txt"
    artifact.write_text("SECRETVALUE")
    outside = tmp_path.parent / f"{tmp_path.name}-outside.txt"
    outside.write_text("SECRETVALUE")
    (tmp_path / "agent" / "link.txt").symlink_to(outside)

    changed = mask_tree(tmp_path, m, skip=[tmp_path / "artifacts"])

    assert changed == [log]
    assert log.read_text() == "echo ***\n"
    assert stat.S_IMODE(log.stat().st_mode) == 0o750
    assert clean.read_text() == "nothing here\n"
    assert binary.read_bytes() == b"\x00\x01SECRETVALUE"  # binary: left alone
    assert artifact.read_text() == "SECRETVALUE"  # skipped folder
    assert outside.read_text() == "SECRETVALUE"  # symlink not followed
    assert [p.name for p in tmp_path.rglob("*.tmp")] == []
    outside.unlink()


def test_mask_tree_without_secrets_or_folder(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("abcd")
    assert mask_tree(tmp_path, Masker([])) == []
    assert mask_tree(tmp_path / "missing", Masker(["abcd"])) == []
    assert (tmp_path / "a.txt").read_text() == "abcd"


def test_find_secrets_reports_without_modifying(tmp_path: Path) -> None:
    m = Masker(["SECRETVALUE"])
    (tmp_path / "sub").mkdir()
    hit = tmp_path / "sub" / "a.bin"
    hit.write_bytes(b"\x00SECRETVALUE\x00")
    (tmp_path / "b.txt").write_text("clean")
    assert find_secrets(tmp_path, m) == [hit]
    assert hit.read_bytes() == b"\x00SECRETVALUE\x00"
    assert find_secrets(tmp_path, Masker([])) == []
