"""The job's model relay service exists only when a plan's agent can use it (#31's relay
guard: an oracle or nop job imports nothing of cairn.relay and pays nothing for it)."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

from cairn.job.runner import job_relay
from cairn.plan import JobConfig


def _plans(*agents: str) -> list:
    return [SimpleNamespace(agent_name=a) for a in agents]


def test_no_relay_service_for_agents_that_use_no_model():
    cfg = JobConfig()
    assert cfg.relay
    assert job_relay(cfg, _plans("oracle", "nop")) is None
    assert job_relay(cfg, []) is None


def test_a_model_driven_agent_gets_the_service_unless_no_relay():
    from cairn.relay.service import RelayService

    cfg = JobConfig()
    assert isinstance(job_relay(cfg, _plans("oracle", "llm")), RelayService)
    assert isinstance(job_relay(cfg, _plans("claude-code")), RelayService)
    assert job_relay(cfg.model_copy(update={"relay": False}), _plans("llm")) is None


def test_an_oracle_job_imports_nothing_of_the_relay():
    code = (
        "import sys\n"
        "from types import SimpleNamespace\n"
        "from cairn.job.runner import job_relay\n"
        "from cairn.plan import JobConfig\n"
        "assert job_relay(JobConfig(), [SimpleNamespace(agent_name='oracle')]) is None\n"
        "print(sorted(m for m in sys.modules if m.startswith('cairn.relay') or m == 'aiohttp'))\n"
    )
    argv = [sys.executable, "-c", code]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
