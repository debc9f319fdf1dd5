"""Network keys of task.toml (design §1.1, issue 14): allowlist entries checked with their line,
and the per-phase ``[agent]`` / ``[verifier]`` policies (Harbor 0.26 semantics)."""

from __future__ import annotations

import pytest

from cairn.netpolicy import NetworkMode, NetworkPolicy
from cairn.task.load import check_task, load_task
from taskfiles import single_step_factory


@pytest.fixture
def single_step(tmp_path):
    return single_step_factory(tmp_path)


def test_bad_allowlist_entries_are_errors_on_their_own_line(single_step):
    task = single_step(
        toml='[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = [\n'
        '  "ok.test",\n  "https://bad.test/x",\n  "*.fine.test",\n'
        '  "10.0.0.0/33",\n]\n'
    )
    found = sorted((f.line, f.text) for f in check_task(task))
    assert [line for line, _ in found] == [5, 7]
    assert "entry 2" in found[0][1] and "https://bad.test/x" in found[0][1]
    assert "not a CIDR" in found[1][1]


def test_phase_tables_check_their_entries_and_need_allowlist(single_step):
    task = single_step(
        toml='[agent]\nallowed_hosts = ["a.test"]\n'
        '[verifier]\nnetwork_mode = "allowlist"\nallowed_hosts = ["a b"]\n'
    )
    found = sorted((f.line, f.text) for f in check_task(task))
    assert found[0][0] == 2 and 'needs `network_mode = "allowlist"`' in found[0][1]
    assert found[1][0] == 5 and "'a b' is not a host" in found[1][1]


def test_per_phase_keys_override_the_environment_and_warn_no_more(single_step):
    task_dir = single_step(
        toml='[agent]\nnetwork_mode = "allowlist"\n'
        'allowed_hosts = ["pypi.org", "*.npmjs.org"]\n'
        '[verifier]\nnetwork_mode = "no-network"\n'
        '[environment]\nnetwork_mode = "public"\n'
    )
    assert check_task(task_dir) == []  # no "unknown key" warning any more
    task = load_task(task_dir)
    step = task.steps[0]
    assert task.environment.network_policy == NetworkPolicy(NetworkMode.PUBLIC)
    assert task.agent_network(step) == NetworkPolicy(NetworkMode.ALLOWLIST, ("pypi.org", "*.npmjs.org"))
    assert task.verifier_network(step) == NetworkPolicy(NetworkMode.NO_NETWORK)


def test_phases_fall_back_to_the_environment_and_legacy_allow_internet(single_step):
    task = load_task(single_step(toml="[environment]\nallow_internet = false\n"))
    step = task.steps[0]
    assert task.agent_network(step) == task.verifier_network(step) == NetworkPolicy(NetworkMode.NO_NETWORK)
