"""The after-agent exec's process listing (issue #29: the survivors of an agent phase without
an exec of their own): run for real with ``sh`` on this machine's ``/proc``, and not fooled by
a process whose name or command line holds the record separators."""

from __future__ import annotations

import subprocess

from cairn.trial.helper import AFTER_AGENT_SCRIPT, parse_after_agent


def test_the_listing_finds_a_process_and_cannot_be_forged(tmp_path):
    forged = "x\x1e0\x1d999) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0\x1fFAKE"
    proc = subprocess.Popen(["python3", "-c", "import sys, time; time.sleep(30)", forged])
    try:  # Popen returns once the child has exec'd: its command line is python3's
        script = AFTER_AGENT_SCRIPT.replace("/logs/", f"{tmp_path}/logs/").replace(
            "rm -rf /solution", f"rm -rf {tmp_path}/solution"
        )
        r = subprocess.run(
            ["/bin/sh", "-c", script, "cairn-after-agent", f"{tmp_path}/planted", "0", "1"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        report = parse_after_agent(r.stdout, 0)
        assert report.processes is not None
        mine = [p for p in report.processes if p.pid == proc.pid]
        assert len(mine) == 1 and "time.sleep(30)" in mine[0].cmdline
        assert mine[0].uid is not None and mine[0].start_ticks > 0
        assert not any(p.pid == 999 for p in report.processes)  # the forged record
        assert "\x1e" not in mine[0].cmdline and "\x1f" not in mine[0].cmdline
        assert report.users.get(0) == "root"
    finally:
        proc.kill()
        proc.wait()
