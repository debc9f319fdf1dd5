"""The viewer in a real browser (Debian's headless Chromium through Selenium) over a real job
folder made by ``cairn run`` (see conftest.py): pages load without console errors, the funnel
equals ``cairn report --format json``, agent-written markup never runs, the static bundle works
from ``file://``, and an open job page follows a running job without a reload.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from cairncli import run_cairn, start_cairn
from taskgen import StepSpec, reward_if, write_task
from viewer_job import console_errors, env, report_json, trial_dir, view_server, wait_for

pytestmark = [pytest.mark.local, pytest.mark.slow]


def _by_css(driver, sel):
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, sel)


def _pwned(driver):
    return driver.execute_script("return window.__pwned === undefined ? null : window.__pwned")


def test_pages_load_without_console_errors_and_funnel_matches_report(example_job, browser):
    report = report_json(example_job)
    with view_server(example_job.parent) as base:
        console_errors(browser)
        pages = [base, f"{base}jobs/example/"]
        pages += [f"{base}jobs/example/trials/{p.name}/" for p in sorted((example_job / "trials").iterdir())]
        pages += [f"{base}jobs/example/?outcome=stopped", f"{base}jobs/example/?sort=reward&desc=1"]
        for url in pages:
            browser.get(url)
            wait_for(lambda: browser.execute_script("return document.readyState") == "complete")
            assert _by_css(browser, "main#content h1"), url
            errs = console_errors(browser)
            assert errs == [], (url, errs)
            assert _pwned(browser) is None, url

        browser.get(f"{base}jobs/example/")
        shown = {
            (g.get_attribute("data-task"), g.get_attribute("data-step")): (
                int(g.get_attribute("data-reached")),
                int(g.get_attribute("data-passed")),
                g.get_attribute("data-mean"),
            )
            for g in _by_css(browser, "g.funnel-step")
        }
        expected = {
            (t["name"], s["name"]): (
                s["n_reached"],
                s["n_passed"],
                "" if s["mean_reward"] is None else str(s["mean_reward"]),
            )
            for t in report["tasks"]
            for s in t["steps"]
        }
        assert shown == expected
        assert expected[("test/gated", "first")] == (1, 0, "0.5")
        assert expected[("test/gated", "second")] == (0, 0, "")
        assert expected[("test/chain", "ship")] == (1, 1, "1.0")
        outcomes = {
            td.get_attribute("data-outcome"): int(td.text)
            for td in _by_css(browser, "#outcomes td[data-outcome]")
        }
        assert outcomes == report["outcomes"] == {"completed": 2, "stopped": 1, "errored": 1, "cancelled": 0}

        # server-side filter: the step a trial stopped at
        browser.get(f"{base}jobs/example/?step=first")
        rows = [r.get_attribute("data-trial") for r in _by_css(browser, "#trial-table tbody tr[data-trial]")]
        assert rows == [trial_dir(example_job, "gated").name]
        browser.get(f"{base}jobs/example/?error=reward_missing")
        rows = [r.get_attribute("data-trial") for r in _by_css(browser, "#trial-table tbody tr[data-trial]")]
        assert rows == [trial_dir(example_job, "broken").name]

        # the llm trajectory is rendered: the tool call, its output and tokens per turn
        browser.get(f"{base}jobs/example/trials/{trial_dir(example_job, 'chain').name}/#step-2")
        step2 = _by_css(browser, "#step-2")[0]
        assert "echo 2 > /app/b.txt" in step2.find_element("css selector", "pre.args").text
        assert "100 in / 20 out" in step2.find_element("css selector", ".tokens").text
        segs = [
            (s.get_attribute("data-step"), s.get_attribute("data-phase"))
            for s in _by_css(browser, "g.seg")
            if s.get_attribute("data-step")
        ]
        assert [p for st, p in segs if st == "fix"] == ["setup", "agent", "artifacts", "verifier"]


def test_agent_markup_cannot_run_script(example_job, browser):
    t = trial_dir(example_job, "hello")
    with view_server(example_job) as base:
        browser.get(f"{base}jobs/example/trials/{t.name}/")
        page = browser.page_source
        assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in page  # shown, escaped
        assert _pwned(browser) is None
        # no element the agent wrote exists as markup: no javascript: link, no injected img
        links = "return document.querySelectorAll('a[href^=\"javascript:\"]').length"
        assert browser.execute_script(links) == 0
        assert browser.execute_script("return document.getElementById('evil')") is None
        assert browser.execute_script("return document.querySelectorAll('img').length") == 0
        # the HTML artifact is served as text, under a sandboxing CSP
        art = f"{base}jobs/example/files/trials/{t.name}/steps/01-main/artifacts/app/evil.html"
        browser.get(art)
        assert browser.execute_script("return document.contentType") == "text/plain"
        assert "<script>window.__pwned=3</script>" in browser.find_element("css selector", "body").text
        assert _pwned(browser) is None
        assert browser.execute_script("return document.querySelectorAll('script, img').length") == 0
        errs = [e for e in console_errors(browser) if "favicon" not in e["message"]]
        assert errs == []


def test_static_bundle_opens_from_file_url(example_job, browser, tmp_path):
    out = tmp_path / "site"
    p = run_cairn("view", str(example_job), "--bundle", str(out), env=env(), timeout=120)
    assert p.returncode == 0, p.stderr
    hello = trial_dir(example_job, "hello").name
    console_errors(browser)
    browser.get((out / "index.html").as_uri())
    assert [g.get_attribute("data-step") for g in _by_css(browser, "g.funnel-step")] == [
        "main",
        "fetch",
        "fix",
        "ship",
        "first",
        "second",
        "main",
    ]
    link = next(a for a in _by_css(browser, "#trial-table a") if a.text == hello)
    link.click()
    wait_for(lambda: browser.current_url.endswith(f"trials/{hello}/index.html"))
    assert browser.find_element("css selector", "#trial-reward").text == "1.00"
    assert "<script>window.__pwned=5</script>" in browser.find_element("css selector", "pre.instruction").text
    assert _pwned(browser) is None
    assert console_errors(browser) == []
    # the stored files are copies a browser shows as text (an .html artifact is never a page)
    raw = next(
        a
        for a in _by_css(browser, "details.file a")
        if a.text == "raw" and "evil.html" in a.get_attribute("href")
    )
    assert raw.get_attribute("href").endswith("evil.html.txt")
    browser.get(raw.get_attribute("href"))
    assert browser.execute_script("return document.contentType") == "text/plain"
    assert _pwned(browser) is None
    # the bundle is the same trial page: same steps table as the live server
    with view_server(example_job) as base:
        browser.get(f"{base}jobs/example/trials/{hello}/")
        live = [r.text for r in _by_css(browser, "#steps tbody tr")]
    browser.get((out / "jobs" / "example" / "trials" / hello / "index.html").as_uri())
    assert [r.text for r in _by_css(browser, "#steps tbody tr")] == live


def test_open_job_page_follows_a_running_job(tmp_path, browser):
    """`cairn run -n 2` on a 3-step task (4 attempts); the job page, opened once, shows the
    running trials' step and phase, then all four finished — with no reload."""
    tasks = tmp_path / "tasks"
    write_task(
        tasks,
        "slow3",
        steps=[
            StepSpec(n, solve=f"sleep 1; echo {i} > /app/{n}.txt\n", test=reward_if(f"test -f /app/{n}.txt"))
            for i, n in enumerate(("one", "two", "three"), start=1)
        ],
    )
    jobs = tmp_path / "jobs"
    run = start_cairn(
        "run",
        "-p",
        str(tasks / "slow3"),
        "-a",
        "oracle",
        "-e",
        "local",
        "-n",
        "2",
        "-k",
        "4",
        "--jobs-dir",
        str(jobs),
        "--job-name",
        "live",
        env=env(),
    )
    try:
        wait_for(lambda: (jobs / "live" / "job.json").is_file(), timeout=60)
        with view_server(jobs) as base:
            browser.get(f"{base}jobs/live/")
            browser.execute_script("window.__sameDocument = 'yes'")
            seen_running: set[str] = set()

            def finished():
                # one atomic read of the table (the live update replaces it while we look)
                rows = browser.execute_script(
                    "return Array.from(document.querySelectorAll('#trial-table tbody tr[data-trial]'))"
                    ".map(r => [r.getAttribute('data-outcome'), r.innerText])"
                )
                seen_running.update(text for outcome, text in rows if outcome == "running")
                return sum(o == "completed" for o, _ in rows) == 4 and len(rows) == 4

            wait_for(finished, timeout=180, interval=0.1)
            assert browser.execute_script("return window.__sameDocument") == "yes"  # no reload
            assert any("agent" in t or "verifier" in t or "setup" in t for t in seen_running), seen_running
            assert any("/3 " in t for t in seen_running), seen_running  # "2/3 two" …
            figures = browser.find_element("css selector", "#summary").text
            assert "4\ntrials" in figures
            assert console_errors(browser) == []
        assert run.wait(timeout=120) == 0
    finally:
        if run.poll() is None:
            run.terminate()
            run.wait(timeout=30)
        run.stdout.close()
        run.stderr.close()


def _laid_out(browser):
    """A condition for :func:`wait_for`: the page loaded and its fonts are ready (the
    document's ``fonts.status`` is ``loaded``)."""
    return lambda: browser.execute_script(
        "return document.readyState === 'complete' && document.fonts.status === 'loaded'"
    )


def test_screenshots_for_the_docs(example_job, browser):
    """Writes docs/img/viewer-job.png and viewer-trial.png when CAIRN_VIEWER_SCREENSHOTS is set."""
    import os

    target = os.environ.get("CAIRN_VIEWER_SCREENSHOTS")
    if not target:
        pytest.skip("set CAIRN_VIEWER_SCREENSHOTS=docs/img to refresh the doc screenshots")
    out = Path(target)
    out.mkdir(parents=True, exist_ok=True)
    with view_server(example_job) as base:
        browser.set_window_size(1200, 1350)
        browser.get(f"{base}jobs/example/")
        wait_for(_laid_out(browser))  # fonts loaded and laid out before the picture
        browser.save_screenshot(str(out / "viewer-job.png"))
        browser.set_window_size(1200, 1500)
        browser.get(f"{base}jobs/example/trials/{trial_dir(example_job, 'chain').name}/")
        wait_for(_laid_out(browser))
        browser.save_screenshot(str(out / "viewer-trial.png"))
    browser.set_window_size(1280, 1000)
    for name in ("viewer-job.png", "viewer-trial.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_live_updates_follow_a_job_whose_name_holds_percent_space_and_hash(tmp_path, browser):
    """A job named ``a b%2e #1``: its pages poll version URLs that reach the server
    (``/api/jobs/a%20b%252e%20%231/...``; no 404 in the console) and follow the running trial
    without a reload: into its hanging second step, then, after SIGINT, to its cancelled end."""
    name = "a b%2e #1"
    enc = "a%20b%252e%20%231"
    tasks = tmp_path / "tasks"
    write_task(
        tasks,
        "hang2",
        steps=[
            StepSpec("one", solve="echo 1 > /app/one.txt\n", test=reward_if("test -f /app/one.txt")),
            StepSpec("two", solve="sleep 300\n", test=reward_if("true")),
        ],
    )
    jobs = tmp_path / "jobs"
    job = jobs / name
    run = start_cairn(
        "run",
        "-p",
        str(tasks / "hang2"),
        "-a",
        "oracle",
        "-e",
        "local",
        "--jobs-dir",
        str(jobs),
        "--job-name",
        name,
        env=env(),
    )
    try:
        wait_for(lambda: (job / "trials").is_dir() and any((job / "trials").iterdir()), timeout=60)
        trial = next((job / "trials").iterdir()).name
        with view_server(jobs) as base:
            console_errors(browser)
            browser.get(base)
            link = next(a for a in _by_css(browser, "#content a") if a.text == name)
            assert link.get_attribute("href") == f"{base}jobs/{enc}/"
            link.click()
            wait_for(lambda: browser.current_url == f"{base}jobs/{enc}/")
            assert (
                browser.find_element("css selector", "body").get_attribute("data-poll")
                == f"/api/jobs/{enc}/version"
            )
            # the first poll was answered: the page holds the version it got
            wait_for(lambda: browser.execute_script("return document.body.getAttribute('data-version')"))

            browser.get(f"{base}jobs/{enc}/trials/{trial}/")
            assert (
                browser.find_element("css selector", "body").get_attribute("data-poll")
                == f"/api/jobs/{enc}/trials/{trial}/version"
            )
            browser.execute_script("window.__sameDocument = 'yes'")
            wait_for(lambda: [e.text for e in _by_css(browser, "#current-step")] == ["2 two"], timeout=120)
            run.send_signal(signal.SIGINT)  # the trial ends cancelled while the page is open
            wait_for(lambda: _by_css(browser, "#trial-reward"), timeout=120)
            assert "cancelled" in browser.find_element("css selector", "main#content p").text
            assert browser.execute_script("return window.__sameDocument") == "yes"  # no reload
            assert console_errors(browser) == []
        assert run.wait(timeout=120) == 1
    finally:
        if run.poll() is None:
            run.terminate()
            run.wait(timeout=30)
        run.stdout.close()
        run.stderr.close()
