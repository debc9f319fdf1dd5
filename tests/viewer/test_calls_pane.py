"""The trial page's model calls pane, beside each step's trajectory: the relay's record of the
step's calls (time, endpoint, model, status, latency, TTFB, tokens by kind, cost, retry of) and,
when recorded, their bodies — over job folders made by ``cairn run`` (tests/helpers/calls_job.py),
in data, in the rendered HTML and in Debian's headless Chromium. Agent- and model-written
strings (a ``<script>`` model name, markup echoed into a body) are shown as text, never run."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest

from cairn.viewer.bundle import write_bundle
from cairn.viewer.data import JobIndex, load_trial, trial_version
from cairn.viewer.pages import render_trial
from cairn.viewer.render import Urls
from calls_job import ECHOED, HOSTILE_MODEL, calls_jobs, trials_of
from testbed import local_available
from viewer_job import console_errors, view_server, wait_for

pytestmark = [
    pytest.mark.local,
    pytest.mark.slow,
    pytest.mark.skipif(not local_available(), reason="no local sandbox support"),
    pytest.mark.skipif(
        importlib.util.find_spec("litellm") is None or importlib.util.find_spec("aiohttp") is None,
        reason="needs the llm and relay extras",
    ),
]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    return calls_jobs(tmp_path_factory.mktemp("calls-jobs"))


def _trial(job: Path, i: int = 0):
    t = trials_of(job)[i]
    return t, load_trial(JobIndex(job), t.name)


def _html(view) -> str:
    return render_trial(view, Urls(), single=False)


def test_the_pane_holds_each_steps_calls_as_the_relay_recorded_them(jobs):
    trial, view = _trial(jobs.relay)
    res = json.loads((trial / "result.json").read_text())
    one, two = (s.calls for s in view.steps)
    assert one is not None and two is not None
    assert [v.call.seq for v in one.rows] == [1, 2, 3] and [v.call.seq for v in two.rows] == [4, 5]
    assert [v.call.status for v in one.rows] == [500, 200, 200]
    assert [v.call.retry_of for v in one.rows] == [None, 1, None]
    assert all(v.call.model == "gpt-4o-mini" and v.call.endpoint == "/v1/chat/completions" for v in one.rows)
    assert all(v.call.latency_sec is not None and v.call.ttfb_sec is not None for v in one.rows)
    assert one.sums.input_tokens == res["steps"][0]["tokens"]["prompt"] == 280
    assert one.sums.cost_usd == pytest.approx(res["steps"][0]["cost_usd"])
    assert (one.sums.errors, one.sums.retries, one.unreadable) == (1, 1, 0)
    # bodies were recorded (--record-model-bodies): the request that carried the tool's output
    assert one.bodies_recorded and two.bodies_recorded
    assert ECHOED in (two.rows[1].request_text or "")
    assert "scripted outage" in (one.rows[0].response_text or "")
    assert one.file is not None and (jobs.relay / one.file.rel).is_file()


def test_rendered_calls_are_text_and_sit_beside_the_trajectory(jobs):
    _, view = _trial(jobs.hostile)
    html = _html(view)
    assert "&lt;script&gt;window.__pwned=9&lt;/script&gt;" in html  # the model name, escaped
    assert "&lt;script&gt;window.__pwned=8&lt;/script&gt;" in html  # echoed into a body, escaped
    assert "<script>window.__pwned" not in html
    pane = html[html.index('id="calls-1"') :]
    assert html.index('<div class="trajcol">') < html.index('id="calls-1"')
    rows = re.findall(r'<tr id="call-1-\d+" class="call', pane)
    assert len(rows) == 2
    assert '<td class="n">?</td><td class="n"></td>' in pane  # unpriced model: cost unknown, not $0


def test_a_no_relay_trial_says_where_its_spend_came_from(jobs):
    _, view = _trial(jobs.direct)
    assert all(s.calls is None for s in view.steps)
    html = _html(view)
    assert html.count("the agent called its model directly (<code>spend_source: agent</code>)") == 2


def test_hostile_lines_are_counted_and_shown_as_text(jobs, tmp_path):
    job = tmp_path / "copy"
    shutil.copytree(jobs.relay, job, symlinks=True)
    trial = trials_of(job)[0]
    f = next(trial.glob("steps/01-*/agent/model_calls.jsonl"))
    before = trial_version(JobIndex(job), trial.name)
    first = json.loads(f.read_text().splitlines()[0])
    evil = {
        **first,
        "seq": 99,
        "model": '<img src=x onerror="window.__pwned=10">',
        "error": "provider: <script>window.__pwned=11</script>",
        "request_body": {
            "messages": [{"role": "user", "content": "</pre><script>window.__pwned=12</script>"}]
        },
        "response_body": "data: <b>bold</b>\n\n",
    }
    with open(f, "a", encoding="utf-8") as fh:
        fh.write("not json\n" + json.dumps({**first, "status": "200"}) + "\n" + json.dumps(evil) + "\n")
        fh.write('{"seq": 100, "time": "cut sho')  # a write cut short
    assert trial_version(JobIndex(job), trial.name) != before  # a growing record refreshes the page
    view = load_trial(JobIndex(job), trial.name)
    pane = view.steps[0].calls
    assert pane is not None and pane.unreadable == 3
    assert [v.call.seq for v in pane.rows] == [1, 2, 3, 99]
    html = _html(view)
    assert "3 line(s) of model_calls.jsonl are not call records and were skipped." in html
    assert "&lt;img src=x onerror=&#34;window.__pwned=10&#34;&gt;" in html
    assert "provider: &lt;script&gt;window.__pwned=11&lt;/script&gt;" in html
    assert "&lt;/pre&gt;&lt;script&gt;window.__pwned=12&lt;/script&gt;" in html
    assert "<img" not in html and "<script>window" not in html and "<b>bold" not in html


def test_the_static_bundle_links_the_raw_record(jobs, tmp_path):
    trial, view = _trial(jobs.relay)
    index = write_bundle(jobs.relay, tmp_path / "site")
    page = index.parent / "jobs" / "relay" / "trials" / trial.name / "index.html"
    html = page.read_text()
    hrefs = re.findall(r'href="([^"]+model_calls\.jsonl[^"]*)"', html)
    assert hrefs
    for h in hrefs:
        assert (page.parent / h).resolve().is_file(), h


def _by_css(driver, sel):
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, sel)


def _open(browser, url: str) -> None:
    browser.get(url)
    wait_for(lambda: browser.execute_script("return document.readyState") == "complete")


def test_the_pane_in_a_browser(jobs, browser):
    relay_trial = trials_of(jobs.relay)[0].name
    hostile_trial = trials_of(jobs.hostile)[0].name
    direct_trial = trials_of(jobs.direct)[0].name
    with view_server(jobs.relay.parent) as base:
        console_errors(browser)
        _open(browser, f"{base}jobs/relay/trials/{relay_trial}/")
        rows = _by_css(browser, "#calls-1 tr.call")
        assert [r.get_attribute("data-status") for r in rows] == ["500", "200", "200"]
        assert [r.get_attribute("data-retry-of") for r in rows] == ["", "1", ""]
        cells = [td.text for td in rows[1].find_elements("css selector", "td")]
        assert cells[2:5] == ["/v1/chat/completions", "gpt-4o-mini", "200"]
        assert cells[7:10] == ["120", "30", "20"] and cells[10:12] == ["?", "?"]
        rec = json.loads(
            next((jobs.relay / "trials" / relay_trial).glob("steps/01-*/agent/model_calls.jsonl"))
            .read_text()
            .splitlines()[1]
        )
        assert rec["cost_usd"] == pytest.approx(100 * 1.5e-07 + 20 * 7.5e-08 + 30 * 6e-07)  # gpt-4o-mini
        assert cells[12] == f"${rec['cost_usd']:.6f}" and cells[13] == "#1"
        sums = _by_css(browser, "#calls-1 .callsums")[0]
        assert (sums.get_attribute("data-calls"), sums.get_attribute("data-input")) == ("3", "280")
        # beside the trajectory on a wide window (1280 px), not under it
        traj = _by_css(browser, "#step-1 .trajcol")[0].rect
        pane = _by_css(browser, "#calls-1")[0].rect
        assert pane["x"] >= traj["x"] + traj["width"] - 1 and abs(pane["y"] - traj["y"]) < 5
        rows[1].find_element("css selector", "td:last-child a").click()
        wait_for(lambda: browser.execute_script("return location.hash") == "#call-1-1")
        assert console_errors(browser) == []

        _open(browser, f"{base}jobs/hostile/trials/{hostile_trial}/")
        models = [td.text for td in _by_css(browser, "#calls-1 td.model")]
        assert models == [HOSTILE_MODEL, HOSTILE_MODEL]
        body = _by_css(browser, "#calls-2 tr.bodies details")[1]
        body.find_element("css selector", "summary").click()
        assert ECHOED in body.find_element("css selector", "pre.request").text
        assert browser.execute_script("return window.__pwned === undefined ? null : window.__pwned") is None
        srcs = browser.execute_script("return Array.from(document.scripts).map(s => s.src)")
        assert len(srcs) == 1 and srcs[0].endswith("/static/viewer.js")
        assert console_errors(browser) == []

        _open(browser, f"{base}jobs/direct/trials/{direct_trial}/")
        notes = [p.text for p in _by_css(browser, ".calls .nocalls")]
        assert len(notes) == 2 and all("spend_source: agent" in n for n in notes)
        assert _by_css(browser, "table.calltable") == []
        assert console_errors(browser) == []
