"""Fetching task folders from git repositories through the ``git`` client.

Any URL git takes works: ``https://``, ``ssh://`` and ``user@host:path``, ``git://``,
``file://`` and local paths. A ref is resolved to a commit once (:func:`resolve_ref`, one
``git ls-remote``); from then on only that commit is fetched (:func:`checkout_commit`):

1. ``git fetch --depth 1 --filter=blob:none origin <commit>`` into an empty repository with a
   sparse checkout of the wanted folders, so only their files are transferred. Servers that
   speak protocol v2 (git ≥ 2.18 with default settings) or set
   ``uploadpack.allowReachableSHA1InWant`` / ``allowAnySHA1InWant`` allow it; a server that
   does not filter sends whole trees (git says so and goes on).
2. the same without the blob filter (servers that take a commit but not lazy blob requests);
3. a full ``git fetch origin`` of every branch and tag, then the commit is looked up.

``GIT_TERMINAL_PROMPT=0`` is set so that a private repository fails instead of waiting for a
password on a terminal nobody watches.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import TypeGuard

from cairn.errors import DatasetError

FETCH_TIMEOUT_SEC = 900.0
"""Bound on one ``git fetch`` or ``checkout``, seconds."""

LS_REMOTE_TIMEOUT_SEC = 120.0
"""Bound on one ``git ls-remote``, seconds."""

_HEX40 = re.compile(r"[0-9a-f]{40}")
_SHORT_HEX = re.compile(r"[0-9a-f]{4,39}")


def is_full_commit(ref: object) -> TypeGuard[str]:
    """Whether ``ref`` is a full 40-hex commit id (a string)."""
    return isinstance(ref, str) and bool(_HEX40.fullmatch(ref.lower()))


def split_repo_spec(spec: str) -> tuple[str, str | None]:
    """Split ``GIT_URL[@REF]``.

    The ref is what follows the last ``@`` when that ``@`` comes after the URL's last ``/``
    and ``:`` (so ``git@host:org/repo.git`` has no ref, ``git@host:org/repo.git@v1`` has
    ``v1``).

    Raises:
        DatasetError: an empty URL or an empty ref after ``@``.
    """
    spec = spec.strip()
    at = spec.rfind("@")
    if at > max(spec.rfind("/"), spec.rfind(":")):
        url, ref = spec[:at], spec[at + 1 :]
        if not url or not ref:
            raise DatasetError(f"bad repository {spec!r}: expected GIT_URL or GIT_URL@REF")
        return url, ref
    if not spec:
        raise DatasetError("empty repository URL")
    return spec, None


def normalize_url(url: str) -> str:
    """An existing local folder becomes an absolute path (so a resumed job finds it from any
    folder); every other URL is returned as given."""
    if "://" in url or re.match(r"^[^/]+@[^/]+:", url) or re.match(r"^[A-Za-z0-9.-]+:", url):
        return url
    p = Path(url).expanduser()
    return str(p.absolute()) if p.exists() else url


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "GIT_LFS_SKIP_SMUDGE": "1"})
    return env


def _tail(text: str, lines: int = 6) -> str:
    kept = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return " / ".join(kept[-lines:]) or "no message"


def run_git(
    args: Sequence[str], *, cwd: Path | None = None, timeout_sec: float, what: str
) -> subprocess.CompletedProcess:
    """Run ``git ARGS``; the completed process is returned whatever its exit code.

    Args:
        args: the arguments after ``git``.
        cwd: the working folder.
        timeout_sec: bound on the whole call, seconds.
        what: a description for messages (``fetching git://…``).

    Raises:
        DatasetError: git is not installed, or the call timed out.
    """
    try:
        return subprocess.run(
            ["git", *args],
            cwd=cwd,
            env=_env(),
            capture_output=True,
            encoding="utf-8",
            errors="replace",
            timeout=timeout_sec,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise DatasetError(
            "the git client is not installed (needed for datasets and --repo); install git"
        ) from None
    except subprocess.TimeoutExpired:
        raise DatasetError(f"{what}: git did not finish within {timeout_sec:g} s") from None


def ls_remote(url: str) -> dict[str, str]:
    """The refs a repository advertises: ref name → commit (annotated tags peeled).

    Raises:
        DatasetError: the repository cannot be reached (the URL and git's message).
    """
    p = run_git(["ls-remote", "--", url], timeout_sec=LS_REMOTE_TIMEOUT_SEC, what=f"reading refs of {url}")
    if p.returncode != 0:
        raise DatasetError(f"repository {url} is unreachable: {_tail(p.stderr)}")
    refs: dict[str, str] = {}
    for line in p.stdout.splitlines():
        sha, _, name = line.partition("\t")
        if not _HEX40.fullmatch(sha):
            continue
        if name.endswith("^{}"):
            refs[name[:-3]] = sha  # a peeled annotated tag wins over the tag object
        else:
            refs.setdefault(name, sha)
    return refs


def resolve_ref(url: str, ref: str | None) -> str | None:
    """The commit a ref names now (one ``git ls-remote``).

    Args:
        url: the repository.
        ref: a branch, a tag, ``HEAD``, a full ref name, a full commit id, or ``None`` for the
            default branch (``HEAD``).

    Returns:
        The 40-hex commit; ``None`` for an abbreviated commit id that is no ref name (it is
        resolved after a full fetch, :func:`checkout_commit`).

    Raises:
        DatasetError: the repository is unreachable, or has no such branch or tag.
    """
    if ref is not None and is_full_commit(ref):
        return ref.lower()
    refs = ls_remote(url)
    want = ref or "HEAD"
    for name in (want, f"refs/heads/{want}", f"refs/tags/{want}"):
        if name in refs:
            return refs[name]
    if ref is not None and _SHORT_HEX.fullmatch(ref.lower()):
        return None
    if ref is None:
        raise DatasetError(
            f"repository {url} has no HEAD (an empty repository?); give a branch, tag or commit"
        )
    heads = sorted(n.removeprefix("refs/heads/") for n in refs if n.startswith("refs/heads/"))
    raise DatasetError(
        f"repository {url} has no branch or tag {ref!r}"
        + (f"; branches: {', '.join(heads[:10])}" if heads else "")
    )


def _sparse_dirs(paths: Sequence[str]) -> list[str] | None:
    """The cone-mode sparse folders for ``paths``; ``None`` when the whole tree is wanted."""
    dirs = []
    for p in paths:
        norm = PurePosixPath(p.strip("/")).as_posix() if p.strip("/") else ""
        if norm in ("", "."):
            return None
        dirs.append(norm)
    return sorted(set(dirs))


def _init(dest: Path, url: str, sparse: list[str] | None, *, lazy_blobs: bool) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    steps = [["init", "-q"], ["remote", "add", "origin", url], ["config", "advice.detachedHead", "false"]]
    if lazy_blobs:
        steps += [
            ["config", "remote.origin.promisor", "true"],
            ["config", "remote.origin.partialclonefilter", "blob:none"],
        ]
    if sparse is not None:
        steps += [["sparse-checkout", "set", "--cone", *sparse]]
    for args in steps:
        p = run_git(args, cwd=dest, timeout_sec=60, what=f"preparing a checkout of {url}")
        if p.returncode != 0:
            raise DatasetError(f"git {' '.join(args[:2])} failed: {_tail(p.stderr)}")


def _checkout(dest: Path, commit: str, url: str) -> subprocess.CompletedProcess:
    return run_git(
        ["checkout", "-q", "--detach", commit],
        cwd=dest,
        timeout_sec=FETCH_TIMEOUT_SEC,
        what=f"checking out {commit} of {url}",
    )


def checkout_commit(url: str, commit: str, paths: Sequence[str], dest: Path) -> tuple[str, str]:
    """Check out ``commit`` of ``url`` into the empty folder ``dest``, the given folders only
    where the server allows it.

    Args:
        url: the repository.
        commit: a full commit id, or an abbreviated one (then only step 3 applies).
        paths: folders inside the repository that must be checked out (``""`` for all).
        dest: the folder to create the checkout in (removed and re-created).

    Returns:
        (the full commit checked out, how it was fetched: ``shallow+sparse`` (only the wanted
        folders' files were transferred), ``shallow`` (the whole commit, no history) or
        ``full`` (every branch and tag)).

    Raises:
        DatasetError: the repository cannot be reached (URL and git's message), or it has no
            such commit.
    """
    sparse = _sparse_dirs(paths)
    first_error = ""
    if is_full_commit(commit):
        for lazy, how in ((True, "shallow+sparse" if sparse else "shallow"), (False, "shallow")):
            _init(dest, url, sparse, lazy_blobs=lazy)
            args = ["fetch", "-q", "--no-tags", "--depth", "1"]
            if lazy:
                args.append("--filter=blob:none")
            p = run_git(
                [*args, "origin", commit],
                cwd=dest,
                timeout_sec=FETCH_TIMEOUT_SEC,
                what=f"fetching {commit} from {url}",
            )
            if p.returncode == 0:
                if "filtering not recognized" in p.stderr:
                    how = "shallow"  # the server sent every file of the commit
                c = _checkout(dest, commit, url)
                if c.returncode == 0:
                    return commit.lower(), how
                first_error = first_error or _tail(c.stderr)
            else:
                first_error = first_error or _tail(p.stderr)
    _init(dest, url, sparse, lazy_blobs=False)
    p = run_git(
        ["fetch", "-q", "--tags", "origin", "+refs/heads/*:refs/remotes/origin/*"],
        cwd=dest,
        timeout_sec=FETCH_TIMEOUT_SEC,
        what=f"fetching {url}",
    )
    if p.returncode != 0:
        raise DatasetError(f"repository {url} is unreachable: {_tail(p.stderr)}")
    r = run_git(
        ["rev-parse", "-q", "--verify", f"{commit}^{{commit}}"],
        cwd=dest,
        timeout_sec=60,
        what=f"looking up {commit} in {url}",
    )
    full = r.stdout.strip()
    if r.returncode != 0 or not _HEX40.fullmatch(full):
        raise DatasetError(
            f"commit {commit} does not exist in repository {url} (on no "
            "branch or tag it has)" + (f"; the server said: {first_error}" if first_error else "")
        )
    c = _checkout(dest, full, url)
    if c.returncode != 0:
        raise DatasetError(f"cannot check out commit {full} of {url}: {_tail(c.stderr)}")
    return full, "full"


def temp_checkout_dir(parent: Path) -> Path:
    """A fresh folder under ``parent`` for one checkout (the caller removes it)."""
    parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="checkout-", dir=parent))
