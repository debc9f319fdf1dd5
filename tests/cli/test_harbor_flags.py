"""The table of every ``harbor run`` flag in docs/cli.md holds (issue 19): each flag it says cairn
takes is an option of ``cairn run``, each it says is refused is refused with its reason, and —
where Harbor 0.26 is installed in a separate environment (``$CAIRN_HARBOR``, set by .ci/run
from .ci/setup-harbor.sh; tests/helpers/harbor_env.py) — the table lists exactly the flags of
``harbor run --help`` and the job-file reader knows every top-level key of Harbor's
``JobConfig``.

No sandbox: the refusals are checked in process with Typer's runner.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from typer.testing import CliRunner

from harbor_env import require_harbor, require_harbor_python

ROOT = Path(__file__).resolve().parents[2]


def table() -> dict[str, str]:
    """flag → its status column (``same``, ``accepted``, ``different``, ``refused``)."""
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    section = text.split("### Harbor's `harbor run` flags", 1)[1].split("\n## ", 1)[0]
    out: dict[str, str] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[1] not in ("same", "accepted", "different", "refused"):
            continue
        for span in re.findall(r"`([^`]+)`", cells[0]):
            for flag in span.split(", "):
                out[flag.strip()] = cells[1]
    return out


def cairn_run_options() -> set[str]:
    import click
    import typer.main

    from cairn.cli import _register, app

    _register()
    run = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]
    opts: set[str] = set(run.get_help_option_names(click.Context(run, **run.context_settings)))
    for param in run.params:
        opts.update(param.opts)
        opts.update(param.secondary_opts)
    return opts


def test_every_flag_the_table_says_cairn_takes_is_an_option():
    rows = table()
    assert len(rows) > 80
    taken = {f for f, status in rows.items() if status in ("same", "accepted", "different")}
    assert taken - cairn_run_options() == set()


def test_every_flag_the_table_says_is_refused_is_refused_with_its_reason(tmp_path):
    from cairn.cli import _register, app
    from cairn.cli.run import HARBOR_REFUSED

    _register()
    rows = table()
    refused = {f for f, status in rows.items() if status == "refused"}
    assert refused == set(HARBOR_REFUSED)
    assert refused & cairn_run_options() == set()  # never also a real option
    runner = CliRunner()
    for flag in sorted(refused):
        r = runner.invoke(app, ["run", "-p", str(tmp_path), flag, "--jobs-dir", str(tmp_path / "jobs")])
        assert r.exit_code == 2, (flag, r.output)
        assert f"{flag} is a harbor run flag cairn does not take: {HARBOR_REFUSED[flag]}" in r.output, (
            flag,
            r.output,
        )
    assert not (tmp_path / "jobs").exists()


def harbor_help_flags() -> set[str]:
    """The flags of ``harbor run --help``: the option names that open each row of its
    option boxes."""
    p = subprocess.run(
        [str(require_harbor()), "run", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"},
        timeout=120,
        check=True,
    )
    flags: set[str] = set()
    for line in p.stdout.splitlines():
        if not line.startswith("│ -"):
            continue
        for token in line[2:].split():
            parts = token.split(",")
            if not all(re.fullmatch(r"--?[a-zA-Z][\w-]*", x) for x in parts):
                break
            flags.update(parts)
    return flags


def test_the_table_lists_exactly_harbors_flags():
    flags = harbor_help_flags()
    assert len(flags) > 80
    assert flags == set(table())


def test_the_job_file_reader_knows_every_top_level_key_of_harbors_job_config():
    from cairn.job import configfile as cf

    python = require_harbor_python()
    code = "from harbor.models.job.config import JobConfig;print(' '.join(JobConfig.model_fields))"
    p = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120, check=True)
    fields = set(p.stdout.split())
    assert {"agents", "tasks", "datasets", "n_attempts", "retry"} <= fields
    handled = (
        set(cf._SAME_KEYS)
        | set(cf._IGNORED_TOP)
        | set(cf._REFUSED_TOP)
        | {k.removeprefix("_k_") for k in vars(cf._HarborReader) if k.startswith("_k_")}
    )
    assert fields - handled == set()
    assert fields <= cf.HARBOR_ONLY_KEYS | {
        "job_name",
        "jobs_dir",
        "timeout_multiplier",
        "agent_timeout_multiplier",
        "quiet",
        "verifier_timeout_multiplier",
        "datasets",
        "agent_setup_timeout_multiplier",
        "artifacts",
        "extra_instruction_paths",
        "extra_instructions",
    }
