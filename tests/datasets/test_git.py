"""Fetching task folders through the git client from servers on 127.0.0.1: refs resolved to
commits, shallow + sparse fetches where the server allows, the full-fetch fallback, and the
errors a user sees (issue 16)."""

from __future__ import annotations

import os

import pytest

from cairn.datasets.git import checkout_commit, resolve_ref
from cairn.errors import DatasetError
from gitserve import GitDaemon, SmartHTTP, bare_clone, commit_all, git, init_repo, push


def _pack_bytes(checkout) -> int:
    return sum(p.stat().st_size for p in (checkout / ".git").rglob("*.pack"))


@pytest.fixture
def served(tmp_path):
    """A repository with two folders and a tag; (work tree, bare repos folder, c1, c2)."""
    work = init_repo(tmp_path / "work")
    (work / "a").mkdir()
    (work / "a" / "task.toml").write_text("# a\n")
    (work / "b").mkdir()
    (work / "b" / "big.bin").write_bytes(os.urandom(200_000))  # does not compress
    c1 = commit_all(work, "one")
    git("tag", "-a", "v1", "-m", "v1", cwd=work)
    (work / "a" / "task.toml").write_text("# a, second\n")
    c2 = commit_all(work, "two")
    srv = tmp_path / "srv"
    srv.mkdir()
    bare_clone(work, srv / "r.git")
    return work, srv, c1, c2


def test_refs_resolve_to_commits_once(served):
    work, srv, c1, c2 = served
    url = f"file://{srv / 'r.git'}"
    assert resolve_ref(url, None) == c2
    assert resolve_ref(url, "main") == c2
    assert resolve_ref(url, "v1") == c1  # an annotated tag: the commit it points to
    assert resolve_ref(url, c1.upper()) == c1  # a full id is taken as it is
    with pytest.raises(
        DatasetError,
        match=r"repository .* has no branch or tag 'nope'; "
        "branches: main",
    ):
        resolve_ref(url, "nope")


def test_shallow_sparse_fetch_over_git_daemon_transfers_only_the_wanted_folder(served, tmp_path):
    _work, srv, c1, _c2 = served
    with GitDaemon(srv, config={"uploadpack.allowFilter": "true"}) as d:
        full, how = checkout_commit(d.url("r.git"), c1, ["a"], tmp_path / "co")
    assert (full, how) == (c1, "shallow+sparse")
    assert (tmp_path / "co" / "a" / "task.toml").read_text() == "# a\n"
    assert not (tmp_path / "co" / "b").exists()
    assert _pack_bytes(tmp_path / "co") < 20_000  # b/big.bin (200 kB) was not transferred
    shallow = (tmp_path / "co" / ".git" / "shallow").read_text().split()
    assert shallow == [c1]


def test_smart_http_server_without_filter_still_gives_the_commit(served, tmp_path):
    _work, srv, c1, _c2 = served
    with SmartHTTP(srv, tmp_path) as h:
        full, how = checkout_commit(h.url("r.git"), c1, ["a"], tmp_path / "co")
    assert (full, how) == (c1, "shallow")  # the server ignored the blob filter
    assert _pack_bytes(tmp_path / "co") > 200_000  # so b/big.bin came too (not checked out)
    assert not (tmp_path / "co" / "b").exists()
    assert (tmp_path / "co" / "a" / "task.toml").read_text() == "# a\n"
    assert any(r.endswith("/git-upload-pack") for r in h.requests)


def test_a_server_refusing_commit_wants_gets_a_full_fetch(served, tmp_path, monkeypatch):
    """Protocol v0 and no allow*SHA1InWant: `fetch <sha>` is refused, every ref is fetched."""
    _work, srv, c1, _c2 = served
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "protocol.version")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "0")
    with GitDaemon(
        srv, config={"uploadpack.allowReachableSHA1InWant": "false", "uploadpack.allowAnySHA1InWant": "false"}
    ) as d:
        full, how = checkout_commit(d.url("r.git"), c1, ["a"], tmp_path / "co")
    assert (full, how) == (c1, "full")
    assert (tmp_path / "co" / "a" / "task.toml").read_text() == "# a\n"


def test_abbreviated_commit_is_found_by_a_full_fetch(served, tmp_path):
    _work, srv, c1, _c2 = served
    full, how = checkout_commit(f"file://{srv / 'r.git'}", c1[:10], ["a"], tmp_path / "co")
    assert (full, how) == (c1, "full")


def test_a_commit_that_does_not_exist_is_named(served, tmp_path):
    _work, srv, _c1, _c2 = served
    url = f"file://{srv / 'r.git'}"
    with pytest.raises(DatasetError, match=f"commit {'f' * 40} does not exist in repository {url}"):
        checkout_commit(url, "f" * 40, ["a"], tmp_path / "co")


def test_an_unreachable_repository_is_named_with_gits_message(tmp_path):
    from gitserve import free_port

    url = f"git://127.0.0.1:{free_port()}/r.git"
    with pytest.raises(DatasetError) as exc:
        resolve_ref(url, "main")
    assert str(exc.value).startswith(f"repository {url} is unreachable: ")
    assert "unable to connect" in str(exc.value) or "Connection refused" in str(exc.value)


def test_force_push_moves_the_branch_but_not_a_resolved_commit(served, tmp_path):
    work, srv, c1, c2 = served
    url = f"file://{srv / 'r.git'}"
    assert resolve_ref(url, "main") == c2
    git("reset", "-q", "--hard", c1, cwd=work)
    (work / "a" / "task.toml").write_text("# a, rewritten\n")
    c3 = commit_all(work, "rewritten")
    push(work, srv / "r.git", force=True)
    assert resolve_ref(url, "main") == c3
    full, _ = checkout_commit(url, c2, ["a"], tmp_path / "co")  # unreachable now, still there
    assert (full, (tmp_path / "co" / "a" / "task.toml").read_text()) == (c2, "# a, second\n")
