"""The after-agent script's report (cairn.trial.helper), run by the real POSIX sh of this
machine on folders the test makes: what it says it found, sized and measured."""

from __future__ import annotations

import subprocess

from cairn.trial.helper import AFTER_AGENT_SCRIPT, parse_after_agent


def test_report_lines_are_read_and_unknown_or_forged_ones_ignored():
    out = parse_after_agent(
        "\n".join(
            [
                "full /logs/agent",
                "full /etc",
                "odd /logs/artifacts",
                "planted /logs/.cairn-planted-ab",
                "planted /etc/shadow",
                "free 123",
                "free lots",
                "art 0 42 f",
                "art 1 - -",
                "art 9 1 f",
                "\x1b[31mnoise",
            ]
        ),
        2,
    )
    assert out.full == {"/logs/agent"}
    assert out.odd == {"/logs/artifacts"}
    assert out.planted == "/logs/.cairn-planted-ab"
    assert out.free_kb == 123
    assert out.artifacts == [(42, "f"), (None, "-")]


def test_no_free_line_means_unknown():
    assert parse_after_agent("full /logs/agent\n", 0).free_kb is None


def test_the_script_prints_the_free_space_df_reports_when_it_prepares_tests(tmp_path):
    # The script's paths are absolute (/logs/...); run its free-space line alone on a folder
    # here, the same pipeline it runs in the sandbox.
    line = next(x for x in AFTER_AGENT_SCRIPT.splitlines() if x.strip().startswith("df -Pk"))
    r = subprocess.run(
        ["/bin/sh", "-c", f'd="{tmp_path}"\n{line}'], capture_output=True, text=True, timeout=30, check=True
    )
    df = (
        subprocess.run(["df", "-Pk", str(tmp_path)], capture_output=True, text=True, timeout=30, check=True)
        .stdout.strip()
        .splitlines()[-1]
        .split()
    )
    report = parse_after_agent(r.stdout, 0)
    assert report.free_kb is not None
    assert abs(report.free_kb - int(df[3])) < 1024 * 64  # the same filesystem, a moment apart
