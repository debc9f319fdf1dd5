"""Fixtures of the viewer tests: a real job folder made by ``cairn run`` (local backend, the
``llm`` agent against tests/helpers/fake_openai.py), a running ``cairn view`` server and a
headless Debian Chromium driven by Selenium.

The example job holds: ``hello`` (single step; its agent writes ``<script>`` tags and a
``javascript:`` link to stdout, and an HTML artifact with script), ``chain`` (three steps, all
pass), ``gated`` (two steps, stopped after the first by ``min_reward``), ``broken`` (its verifier
writes no reward: errored, category task). Each task's instruction carries a ``CMD:`` line that
the scripted model runs with its ``bash`` tool, then it submits.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
SRC = TESTS.parent / "src"
sys.path.insert(0, str(TESTS / "helpers"))

from fake_openai import FakeOpenAI  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"

HOSTILE_OUT = ('<script>window.__pwned=1</script>'
               '<a id="evil" href="javascript:window.__pwned=2">click me</a>'
               '<img src=x onerror="window.__pwned=6">')
HOSTILE_HTML = ('<html><body><script>window.__pwned=3</script>'
                '<img src=x onerror="window.__pwned=4"><h1>evil artifact</h1></body></html>')


from viewer_job import (  # noqa: E402,F401
    cairn,
    console_errors,
    env,
    local_ready,
    model_reply,
    report_json,
    trial_dir,
    view_server,
    wait_for,
    write_example_tasks,
)


@pytest.fixture(scope="session")
def example_job(tmp_path_factory) -> Path:
    """A real job folder (see the module docstring), built once per session."""
    if not local_ready():
        pytest.skip("local backend not available")
    root = tmp_path_factory.mktemp("viewer-example")
    tasks = write_example_tasks(root)
    with FakeOpenAI(default=model_reply) as server:
        p = cairn("run", "-p", str(tasks), "-a", "llm", "-m", "openai/gpt-4o-mini",
                  "--ak", f"api_base={server.url}", "-e", "local", "-n", "2",
                  "--jobs-dir", str(root / "jobs"), "--job-name", "example", cwd=root)
    job = root / "jobs" / "example"
    assert (job / "summary.json").is_file(), p.stdout + p.stderr
    assert "Traceback" not in p.stderr, p.stderr
    return job


@pytest.fixture(scope="session")
def browser():
    """A headless Debian Chromium under Selenium (console messages are kept for the tests)."""
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("chromium / chromium-driver not installed (.ci/setup-browser.sh)")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1280,1000", "--disable-extensions", "--no-first-run"):
        opts.add_argument(a)
    opts.binary_location = CHROMIUM
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    prefs = {"download.default_directory": str(Path("/tmp") / f"cairn-viewer-dl-{os.getpid()}"),
             "download.prompt_for_download": False}
    opts.add_experimental_option("prefs", prefs)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()
    shutil.rmtree(prefs["download.default_directory"], ignore_errors=True)
