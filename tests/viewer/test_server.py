"""The viewer's HTTP surface over a real job folder: only files under the served folder are
reachable (``..``, absolute paths, symlinks → 404), stored files come as text/plain or
downloads under a sandboxing CSP, pages under a CSP without inline script, and a non-loopback
bind warns.
"""

from __future__ import annotations

import http.client
import os
import re
import shutil
from urllib.parse import urlsplit

import pytest

from cairncli import run_cairn, start_cairn
from viewer_job import env, trial_dir, view_server

pytestmark = [pytest.mark.local, pytest.mark.slow]


def _get(base: str, path: str) -> tuple[int, dict[str, str], bytes]:
    """GET ``path`` exactly as written (no client-side ``..`` normalisation)."""
    u = urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


@pytest.fixture
def planted(example_job, tmp_path):
    """A copy of the example job with symlinks planted inside it, pointing in and out."""
    job = tmp_path / "example"
    shutil.copytree(example_job, job, symlinks=True)
    t = trial_dir(job, "hello")
    art = t / "steps" / "01-main" / "artifacts"
    (art / "passwd").symlink_to("/etc/passwd")
    (art / "up").symlink_to("../../../../..")
    (art / "inside").symlink_to(t / "result.json")
    (tmp_path / "secret.txt").write_text("outside the job folder\n")
    return job, t


def test_traversal_and_symlinks_are_404(planted):
    job, t = planted
    rel = f"trials/{t.name}/steps/01-main/artifacts"
    with view_server(job) as base:
        ok, headers, body = _get(base, f"/jobs/example/files/{rel}/app/out.txt")
        assert ok == 200 and body == b"hi\n"
        for path in (
            "/jobs/example/files/../secret.txt",
            "/jobs/example/files/trials/../../secret.txt",
            "/jobs/example/files/%2e%2e/secret.txt",
            "/jobs/example/files/trials/%2E%2E/..%2fsecret.txt",
            "/jobs/example/files//etc/passwd",
            "/jobs/example/files/%2Fetc%2Fpasswd",
            f"/jobs/example/files/{rel}/passwd",
            f"/jobs/example/files/{rel}/up/secret.txt",
            f"/jobs/example/files/{rel}/up/etc/passwd",
            f"/jobs/example/files/{rel}/inside",
            f"/jobs/example/files/{rel}",
            "/jobs/../files/etc/passwd",
            "/jobs/example/trials/../../secret.txt/",
            f"/jobs/example/trials/{t.name}%2F..%2F..%2F/",
        ):
            status, _, body = _get(base, path)
            assert status == 404, path
            assert b"root:" not in body and b"outside the job folder" not in body, path


def test_security_headers(example_job):
    t = trial_dir(example_job, "hello")
    with view_server(example_job) as base:
        status, h, _ = _get(base, f"/jobs/example/trials/{t.name}/")
        assert status == 200
        csp = h["content-security-policy"]
        assert "default-src 'self'" in csp and "script-src 'self'" in csp
        assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
        assert h["x-content-type-options"] == "nosniff"
        art = f"/jobs/example/files/trials/{t.name}/steps/01-main/artifacts/app/evil.html"
        status, h, body = _get(base, art)
        assert status == 200 and body.startswith(b"<html>")
        assert h["content-type"] == "text/plain; charset=utf-8"
        assert h["content-security-policy"] == "default-src 'none'; sandbox"
        assert h["x-content-type-options"] == "nosniff"
        status, h, _ = _get(base, art + "?download=1")
        assert h["content-type"] == "application/octet-stream"
        assert h["content-disposition"] == 'attachment; filename="evil.html"'


def test_non_loopback_bind_warns(example_job):
    proc = start_cairn("view", str(example_job), "--host", "0.0.0.0", "--port", "0", env=env())
    try:
        line = proc.stdout.readline()
        assert re.search(r"http://0\.0\.0\.0:\d+/", line), line
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    err = proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()
    assert "warning: listening on 0.0.0.0, not loopback" in err


def test_default_bind_is_loopback_and_quiet(example_job):
    with view_server(example_job) as base:
        assert urlsplit(base).hostname == "127.0.0.1"


def test_report_html_writes_the_bundle(example_job, tmp_path):
    out = tmp_path / "report"
    p = run_cairn(
        "report", str(example_job), "--format", "html", "-o", str(out), env=env(), timeout=120, cwd=tmp_path
    )
    assert p.returncode == 0, p.stderr
    index = (out / "index.html").read_text()
    assert 'http-equiv="Content-Security-Policy"' in index and "<script" not in index
    assert os.path.isfile(
        out / "jobs" / "example" / "trials" / trial_dir(example_job, "chain").name / "index.html"
    )
    p = run_cairn(
        "report",
        str(example_job),
        "--format",
        "html",
        "-o",
        str(example_job / "inside"),
        env=env(),
        timeout=60,
    )
    assert p.returncode == 2 and "must not be inside" in p.stderr
