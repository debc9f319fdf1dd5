"""The static bundle (``cairn view --bundle OUT_DIR``, ``cairn report --format html``): the same
pages as the live viewer written as files that open from ``file://`` with no server.

Layout::

    OUT_DIR/index.html                         the job page (one job) or the jobs page
    OUT_DIR/jobs/<job>/index.html              a job page (every trial on one page)
    OUT_DIR/jobs/<job>/trials/<trial>/index.html
    OUT_DIR/jobs/<job>/files/<path>.txt|.bin   copies of the files the trial pages show

Pages carry a ``<meta>`` Content-Security-Policy that allows no script at all and only their
one inlined stylesheet (by hash). Stored files are copied under a ``.txt`` (text) or ``.bin``
name, so a browser shows an HTML artifact as text or downloads it, never renders it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from cairn.viewer.data import Library, TrialQuery, load_trial
from cairn.viewer.pages import render_job, render_jobs, render_trial
from cairn.viewer.render import Urls


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def write_bundle(root: Path, out_dir: Path) -> Path:
    """Write the static site of a job folder (or of every job in a jobs folder).

    Args:
        root: a job folder or a jobs folder.
        out_dir: the output folder (created; existing files with the same names are replaced).

    Returns:
        The path of the site's ``index.html``.

    Raises:
        FileNotFoundError: ``root`` is not a folder.
        ValueError: ``out_dir`` is inside ``root`` (the bundle would copy itself).
    """
    lib = Library(root)
    out = Path(out_dir).resolve()
    if out == lib.root or lib.root in out.parents:
        raise ValueError(f"the bundle folder {out_dir} must not be inside {root}")
    out.mkdir(parents=True, exist_ok=True)
    everything = TrialQuery(per_page=10**9)
    for d in lib.job_dirs():
        job = lib.job(d.name)
        if job is None:
            continue
        rows = job.refresh()
        _write(
            out / "jobs" / job.name / "index.html",
            render_job(job, everything, Urls(bundle=True, depth=2), single=lib.single, bundle=True),
        )
        if lib.single:
            _write(
                out / "index.html",
                render_job(job, everything, Urls(bundle=True, depth=0), single=True, bundle=True),
            )
        for r in rows:
            t = load_trial(job, r.name)
            if t is None:
                continue
            _write(
                out / "jobs" / job.name / "trials" / t.name / "index.html",
                render_trial(t, Urls(bundle=True, depth=4), single=lib.single, bundle=True),
            )
            files = [
                f
                for s in t.steps
                for f in (
                    *s.agent_files,
                    *s.verifier_files,
                    *([s.reward_file] if s.reward_file else []),
                    *s.artifacts,
                )
            ]
            if t.trial_log is not None:
                files.append(t.trial_log)
            for f in files:
                dest = (
                    out / "jobs" / job.name / "files" / (f.rel + (".txt" if f.text is not None else ".bin"))
                )
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(job.root / f.rel, dest, follow_symlinks=False)
    if not lib.single:
        _write(out / "index.html", render_jobs(lib, Urls(bundle=True, depth=0), bundle=True))
    return out / "index.html"
