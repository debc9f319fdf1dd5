"""A trial whose network policy its backend cannot enforce fails before anything starts
(issue 14): a config_error naming the policy and the way out, never a relaxed run."""

from __future__ import annotations

import time

from cairn.errors import ErrorKind
from taskgen import write_task
from testbed import run_trial_sync


def _allowlist_task(tmp_path):
    task = write_task(tmp_path, "allow", network="allowlist")
    toml = task / "task.toml"
    toml.write_text(
        toml.read_text().replace(
            'network_mode = "allowlist"\n', 'network_mode = "allowlist"\nallowed_hosts = ["pypi.org"]\n'
        )
    )
    return task


def test_local_refuses_an_allowlist_in_a_second(tmp_path):
    t0 = time.monotonic()
    result = run_trial_sync(_allowlist_task(tmp_path), "nop", "local", tmp_path / "jobs")
    assert time.monotonic() - t0 < 10
    assert result.error is not None and result.error.kind is ErrorKind.CONFIG_ERROR
    assert "allowlist" in result.error.message and "-e docker" in result.error.message


def test_local_refuses_per_phase_modes(tmp_path):
    task = write_task(
        tmp_path, "phases", network="public", toml_extra='[verifier]\nnetwork_mode = "no-network"\n'
    )
    result = run_trial_sync(task, "nop", "local", tmp_path / "jobs")
    assert result.error is not None and result.error.kind is ErrorKind.CONFIG_ERROR
    assert "cannot switch the network between phases" in result.error.message


def test_local_refuses_an_agent_model_host_under_no_network(tmp_path):
    task = write_task(tmp_path, "sealed", network="no-network")
    result = run_trial_sync(task, "nop", "local", tmp_path / "jobs", agent_hosts=("api.example.com",))
    assert result.error is not None and result.error.kind is ErrorKind.CONFIG_ERROR
    assert "api.example.com" in result.error.message
