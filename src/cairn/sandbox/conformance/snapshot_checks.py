"""Conformance checks of step snapshots (:meth:`~cairn.sandbox.base.Sandbox.snapshot`).

A snapshot holds the files as they were when it was taken — written, changed, deleted (also
files of the image), modes, owners, symlinks and hard links — and nothing written afterwards;
a sandbox started from it (``SandboxSpec(snapshot=ref)``) sees exactly those files, with fresh
``/logs`` folders, and can be snapshotted again.
"""

from __future__ import annotations

import contextlib

from cairn.sandbox.conformance.context import CheckContext, expect, run_ok

_WRITE = (
    "mkdir -p /app/deep/er /usr/local/share/cairn-conf && echo one > /app/deep/er/one.txt && "
    "echo sys > /usr/local/share/cairn-conf/sys.txt && printf 'secret' > /app/private && "
    "chmod 600 /app/private && chown agent /app/private && ln -s deep/er/one.txt /app/link && "
    "echo linked > /app/h1 && ln /app/h1 /app/h2 && rm /app/present.txt && "
    "echo scratch > /app/scratch && rm /app/scratch && echo planted > /logs/artifacts/a.txt"
)


async def check_snapshot_roundtrip(ctx: CheckContext) -> None:
    """A sandbox from a snapshot has the files as they were then, not later writes."""
    cls = type(ctx.make_sandbox(ctx.spec()))
    if not cls.capabilities.snapshot:
        raise AssertionError(f"backend {cls.name!r} declares no snapshot capability")
    refs: list[str] = []
    try:
        async with ctx.sandbox() as a:
            await run_ok(a, _WRITE, user="root")
            ref = await a.snapshot(
                {"cairn.job": "cairn-conformance", "cairn.trial": "snap", "cairn.step": "one"}
            )
            refs.append(ref.ref)
            expect(ref.backend == cls.name, f"snapshot backend {ref.backend!r}")
            expect(ref.seconds >= 0, "negative snapshot time")
            # later writes, in place and new, must not reach the snapshot
            await run_ok(
                a,
                "echo changed >> /app/deep/er/one.txt; echo later > /app/later.txt; echo more >> /app/h1",
                user="root",
            )
            expect(
                (await run_ok(a, "cat /app/deep/er/one.txt")) == "one\nchanged\n",
                "the sandbox did not keep running after its snapshot",
            )
        async with ctx.sandbox(snapshot=ref.ref) as b:
            out = await run_ok(
                b,
                "cat /app/deep/er/one.txt /usr/local/share/cairn-conf/sys.txt "
                "/app/link; stat -c '%a %U' /app/private; "
                "test ! -e /app/present.txt && echo deleted; "
                "test ! -e /app/scratch && echo no-scratch; "
                "test ! -e /app/later.txt && echo no-later; "
                "[ /app/h1 -ef /app/h2 ] && echo hardlinked; cat /app/h1; "
                "find /logs/artifacts /logs/verifier -mindepth 1 | wc -l; pwd",
                user="root",
            )
            expect(
                out == "one\nsys\none\n600 agent\ndeleted\nno-scratch\nno-later\n"
                "hardlinked\nlinked\n0\n/app\n",
                f"files from the snapshot differ: {out!r}",
            )
            await run_ok(b, "echo two > /app/two.txt", user="root")
            ref2 = await b.snapshot(
                {"cairn.job": "cairn-conformance", "cairn.trial": "snap", "cairn.step": "two"}
            )
            refs.append(ref2.ref)
        async with ctx.sandbox(snapshot=ref2.ref) as c:
            out = await run_ok(c, "cat /app/deep/er/one.txt /app/two.txt", user="root")
            expect(out == "one\ntwo\n", f"a snapshot of a restored sandbox differs: {out!r}")
    finally:
        for r in refs:
            with contextlib.suppress(Exception):
                await cls.remove_snapshot(r)
    for r in refs:  # removed, and starting from a removed snapshot fails clearly
        try:
            async with ctx.sandbox(snapshot=r):
                pass
        except Exception as exc:  # noqa: BLE001 - any clear start failure is right
            expect("snapshot" in str(exc), f"unclear error for a removed snapshot: {exc}")
        else:
            raise AssertionError(f"a sandbox started from the removed snapshot {r}")
