"""JobConfig's network options (issue 14): --allow-agent-host and --add-host are checked when
the config is made, and reach every trial's RunOptions."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from cairn.plan import JobConfig
from cairncli import run_cairn


def test_network_options_reach_run_options():
    cfg = JobConfig(
        agent_hosts=("api.model.test", "10.0.0.0/24"),
        add_hosts={"model.test": "192.0.2.5", "v6.test": "2001:db8::5"},
    )
    opts = cfg.run_options()
    assert opts.agent_hosts == ("api.model.test", "10.0.0.0/24")
    assert opts.add_hosts == (("model.test", "192.0.2.5"), ("v6.test", "2001:db8::5"))


@pytest.mark.parametrize(
    "kw, needle",
    [
        ({"agent_hosts": ("https://api.x.test/v1",)}, "is not a host"),
        ({"add_hosts": {"model.test": "not-an-ip"}}, "must be an IP address"),
    ],
)
def test_bad_network_options_are_refused(kw, needle):
    with pytest.raises(ValidationError, match=needle):
        JobConfig(**kw)


def test_cli_refuses_a_bad_add_host(tmp_path):
    import os
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    r = run_cairn(
        "run", "-p", str(tmp_path), "-e", "local", "--add-host", "x.test=nope", env=env, timeout=120
    )
    assert r.returncode == 2, r.stderr
    assert "must be an IP address" in r.stderr and "Traceback" not in r.stderr
