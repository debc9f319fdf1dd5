"""The content-addressed task cache: read-only entries by content hash, verification on
lookup, concurrent writers (issue 16)."""

from __future__ import annotations

import multiprocessing
import os
import stat
from pathlib import Path

from cairn.datasets.cache import CACHE_ENV, TaskCache, cache_root
from cairn.task.hashing import task_content_hash
from taskgen import write_task

URL = "git://127.0.0.1:9/tasks.git"
C1 = "1" * 40


def test_cache_root_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "c"))
    assert cache_root() == tmp_path / "c"
    monkeypatch.delenv(CACHE_ENV)
    assert cache_root() == Path.home() / ".cache" / "cairn" / "tasks"


def test_store_is_read_only_named_by_content_hash_and_found_again(tmp_path):
    src = write_task(tmp_path / "src", "hello")
    (src / "tests" / "test.sh").chmod(0o755)
    cache = TaskCache(tmp_path / "cache")
    assert cache.lookup(URL, C1, "tasks/hello") is None
    got = cache.store(URL, C1, "tasks/hello/", src, "hello")
    h = task_content_hash(src)
    assert got.path == tmp_path / "cache" / "objects" / h / "hello"
    assert got.content_hash == h == task_content_hash(got.path)
    mode = stat.S_IMODE((got.path / "tests" / "test.sh").stat().st_mode)
    assert mode == 0o555  # write bits gone, exec bit kept (it is part of the hash)
    assert stat.S_IMODE(got.path.stat().st_mode) == 0o555
    again = cache.lookup(URL, C1, "tasks/hello")  # the path is normalised
    assert again is not None and again.path == got.path and again.commit == C1
    assert cache.lookup(URL, "2" * 40, "tasks/hello") is None  # another commit is another entry


def test_identical_bytes_from_two_commits_share_one_folder(tmp_path):
    src = write_task(tmp_path / "src", "hello")
    cache = TaskCache(tmp_path / "cache")
    a = cache.store(URL, C1, "t/hello", src, "hello")
    b = cache.store(URL, "2" * 40, "t/hello", src, "hello")
    assert a.path == b.path
    assert len(list((tmp_path / "cache" / "objects").iterdir())) == 1


def test_a_tampered_entry_is_dropped_not_returned(tmp_path):
    src = write_task(tmp_path / "src", "hello")
    cache = TaskCache(tmp_path / "cache")
    got = cache.store(URL, C1, "t/hello", src, "hello")
    f = got.path / "instruction.md"
    f.chmod(0o644)
    f.write_text("something else")
    assert cache.lookup(URL, C1, "t/hello") is None
    assert cache.entries() == []  # the stale index entry is gone: the next run fetches again


def _store_many(root: str, src: str, n: int, q) -> None:
    cache = TaskCache(Path(root))
    paths = {str(cache.store(URL, C1, "t/hello", Path(src), "hello").path) for _ in range(n)}
    q.put(sorted(paths))


def test_concurrent_writers_end_with_one_whole_entry(tmp_path):
    src = write_task(tmp_path / "src", "hello", files={f"data/{i}.txt": "x" * 1000 for i in range(50)})
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_store_many, args=(str(tmp_path / "c"), str(src), 5, q)) for _ in range(3)]
    for p in procs:
        p.start()
    results = [q.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert len({tuple(r) for r in results}) == 1 and len(results[0]) == 1
    cache = TaskCache(tmp_path / "c")
    hit = cache.lookup(URL, C1, "t/hello")
    assert hit is not None and task_content_hash(hit.path) == task_content_hash(src)
    assert os.listdir(tmp_path / "c" / "tmp") == []  # every staging folder was removed


def _store_as_current_user(work: Path) -> None:
    src = write_task(work / "src", "hello")
    cache = TaskCache(work / "cache")
    got = cache.store(URL, C1, "tasks/hello", src, "hello")
    assert stat.S_IMODE(got.path.stat().st_mode) == 0o555
    again = cache.store(URL, "2" * 40, "tasks/hello", src, "hello")  # the same bytes again
    assert again.path == got.path


def test_a_user_who_is_not_root_can_store_tasks(tmp_path):
    """A read-only folder moves to another parent only as root (rename updates its ``..``):
    the store renames the staged task while it is still writable (bug: every store by a
    non-root user failed with EACCES). As root the check runs in a child that drops to
    ``nobody``."""
    import shutil
    import tempfile

    if os.geteuid() != 0:
        _store_as_current_user(tmp_path)
        return
    import pwd

    nobody = pwd.getpwnam("nobody")
    work = Path(tempfile.mkdtemp(prefix="cairn-cache-nonroot-"))
    try:
        os.chown(work, nobody.pw_uid, nobody.pw_gid)
        pid = os.fork()
        if pid == 0:  # the child: drop to nobody, store, report by exit code
            code = 1
            try:
                os.setgroups([])
                os.setgid(nobody.pw_gid)
                os.setuid(nobody.pw_uid)
                _store_as_current_user(work)
                code = 0
            except BaseException as exc:  # noqa: BLE001 - reported through the exit code
                (work / "error.txt").write_text(repr(exc))
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        err = (work / "error.txt").read_text() if (work / "error.txt").exists() else ""
        assert os.waitstatus_to_exitcode(status) == 0, err
    finally:
        shutil.rmtree(work, ignore_errors=True)  # root ignores the read-only bits
