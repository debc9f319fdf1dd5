"""Fixtures of the viewer tests: the example job (see tests/helpers/viewer_job.py for what it
holds), a running ``cairn view`` server and a headless Debian Chromium driven by Selenium."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "helpers"))

from fake_openai import FakeOpenAI  # noqa: E402
from testbed import backend_missing  # noqa: E402
from viewer_job import (  # noqa: E402
    CHROMEDRIVER,
    CHROMIUM,
    cairn,
    local_ready,
    model_reply,
    write_example_tasks,
)


@pytest.fixture(scope="session")
def example_job(tmp_path_factory) -> Path:
    """A real job folder (see the module docstring), built once per session."""
    if not local_ready():
        pytest.skip(f"local backend: {backend_missing('local')}")
    root = tmp_path_factory.mktemp("viewer-example")
    tasks = write_example_tasks(root)
    with FakeOpenAI(default=model_reply) as server:
        p = cairn(
            "run",
            "-p",
            str(tasks),
            "-a",
            "llm",
            "-m",
            "openai/gpt-4o-mini",
            "--ak",
            f"api_base={server.url}",
            "-e",
            "local",
            "-n",
            "2",
            "--jobs-dir",
            str(root / "jobs"),
            "--job-name",
            "example",
            cwd=root,
        )
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
    for a in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,1000",
        "--disable-extensions",
        "--no-first-run",
    ):
        opts.add_argument(a)
    opts.binary_location = CHROMIUM
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    prefs = {
        "download.default_directory": str(Path("/tmp") / f"cairn-viewer-dl-{os.getpid()}"),
        "download.prompt_for_download": False,
    }
    opts.add_experimental_option("prefs", prefs)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()
    shutil.rmtree(prefs["download.default_directory"], ignore_errors=True)
