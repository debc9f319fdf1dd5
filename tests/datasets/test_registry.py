"""Harbor registry.json parsing and NAME@VERSION resolution (issue 16)."""

from __future__ import annotations

import json

import pytest

from cairn.datasets.git import split_repo_spec
from cairn.datasets.registry import (
    DEFAULT_REGISTRY_URL,
    load_registry,
    parse_registry,
    parse_spec,
    resolve_dataset,
    version_order,
)
from cairn.errors import DatasetError, UsageError

SHA = "a" * 40


def reg(*datasets):
    return parse_registry(list(datasets), "mem://registry.json")


def ds(name, version, tasks=None, **kw):
    return {
        "name": name,
        "version": version,
        "description": f"{name} {version}",
        "tasks": tasks
        if tasks is not None
        else [
            {"name": "t", "git_url": "https://example.invalid/r.git", "git_commit_id": SHA, "path": "tasks/t"}
        ],
        **kw,
    }


def test_default_registry_is_harbors_public_one():
    # harbor 0.26, harbor/constants.py DEFAULT_REGISTRY_URL
    assert (
        DEFAULT_REGISTRY_URL == "https://raw.githubusercontent.com/laude-institute/harbor/main/registry.json"
    )


def test_parse_keeps_order_fields_and_ignores_unknown_keys():
    r = reg(
        ds("demo", "1.0", metrics=[{"type": "mean"}]),
        ds("demo", 2, tasks=[{"name": "local", "path": "here/local"}]),
    )
    assert [d.spec for d in r.datasets] == ["demo@1.0", "demo@2"]
    t = r.datasets[0].tasks[0]
    assert (t.name, t.git_url, t.git_commit_id, t.path, t.pinned) == (
        "t",
        "https://example.invalid/r.git",
        SHA,
        "tasks/t",
        True,
    )
    local = r.datasets[1].tasks[0]
    assert (local.git_url, local.path, local.pinned) == (None, "here/local", False)


@pytest.mark.parametrize(
    "data,message",
    [
        ({"name": "x"}, "expected a JSON list"),
        ([{"version": "1", "tasks": []}], "'name' must be a non-empty string"),
        ([ds("a", "1"), ds("a", "1")], "dataset a@1 is listed twice"),
        ([ds("a", "1", tasks={"x": 1})], "'tasks' must be a list"),
        ([ds("a", "1", tasks=[{"name": "t"}])], "task t: has neither 'git_url' nor 'path'"),
        ([ds("a", "1", tasks=[{"name": "t", "path": 3}])], "task t: 'path' must be"),
    ],
)
def test_malformed_registries_are_dataset_errors(data, message):
    with pytest.raises(DatasetError, match=message) as exc:
        parse_registry(data, "mem://r")
    assert isinstance(exc.value, UsageError)  # exit 2


def test_version_order_prefers_head_then_highest_number():
    assert version_order({"1.0", "2.0", "2.10", "2.9", "head"}) == ["head", "2.10", "2.9", "2.0", "1.0"]
    assert version_order({"1.0", "beta", "alpha"}) == ["1.0", "beta", "alpha"]


def test_name_alone_takes_the_highest_version_and_says_which():
    r = reg(ds("demo", "1.0"), ds("demo", "2.0"), ds("other", "1"))
    chosen, note = resolve_dataset(r, "demo")
    assert chosen.spec == "demo@2.0"
    assert note == "dataset demo: no version given, using the highest, demo@2.0 (also: 1.0)"
    chosen, note = resolve_dataset(r, "demo@1.0")
    assert chosen.spec == "demo@1.0" and note is None


def test_unknown_name_lists_the_closest_names():
    r = reg(ds("terminal-bench", "2.0"), ds("swebench-verified", "1.0"))
    with pytest.raises(DatasetError) as exc:
        resolve_dataset(r, "terminal-bnch@2.0")
    assert str(exc.value) == (
        "unknown dataset 'terminal-bnch' in registry mem://registry.json; did you mean terminal-bench?"
    )


def test_unknown_version_lists_the_versions():
    r = reg(ds("demo", "1.0"), ds("demo", "2.0"))
    with pytest.raises(
        DatasetError,
        match=r"unknown version demo@3\.0 in registry "
        r"mem://registry\.json; versions: 2\.0, 1\.0",
    ):
        resolve_dataset(r, "demo@3.0")


@pytest.mark.parametrize("spec", ["", "@1.0", "demo@"])
def test_bad_specs(spec):
    with pytest.raises(DatasetError, match="expected NAME or NAME@VERSION"):
        parse_spec(spec)


@pytest.mark.parametrize(
    "spec,expected",
    [
        ("https://h.invalid/org/r.git", ("https://h.invalid/org/r.git", None)),
        ("https://h.invalid/org/r.git@v1.2", ("https://h.invalid/org/r.git", "v1.2")),
        ("git@h.invalid:org/r.git", ("git@h.invalid:org/r.git", None)),
        ("git@h.invalid:org/r.git@main", ("git@h.invalid:org/r.git", "main")),
        ("https://user@h.invalid/r", ("https://user@h.invalid/r", None)),
        ("/srv/repo@" + SHA, ("/srv/repo", SHA)),
    ],
)
def test_split_repo_spec(spec, expected):
    assert split_repo_spec(spec) == expected


def test_registry_file_tasks_are_relative_to_it(tmp_path):
    f = tmp_path / "sub" / "registry.json"
    f.parent.mkdir()
    f.write_text(json.dumps([ds("demo", "1.0", tasks=[{"name": "a", "path": "tasks/a"}])]))
    r = load_registry(path=f)
    assert r.base_dir == f.parent and r.source == str(f)


def test_unreadable_registry_file_names_it(tmp_path):
    with pytest.raises(DatasetError, match=f"cannot read registry file {tmp_path}/nope.json"):
        load_registry(path=tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("[{")
    with pytest.raises(DatasetError, match=f"registry file {bad} is not valid JSON"):
        load_registry(path=bad)
