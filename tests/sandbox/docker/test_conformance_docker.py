"""The conformance suite (design §3.4) on the docker backend: one test per check."""

from __future__ import annotations

import pytest

from cairn.sandbox import conformance
from cairn.sandbox.base import SandboxSpec

docker_mod = pytest.importorskip("cairn.sandbox.docker")
DockerSandbox = docker_mod.DockerSandbox

pytestmark = pytest.mark.docker


async def _leftovers(spec: SandboxSpec) -> list[str]:
    """Containers and networks still labelled with the spec's trial id."""
    import docker

    client = docker.from_env()
    try:
        flt = {"label": [f"cairn.trial={spec.trial_id}"]}
        names = [c.name for c in client.containers.list(all=True, filters=flt)]
        names += [n.name for n in client.networks.list(filters=flt)]
        return names
    finally:
        client.close()


@pytest.mark.parametrize("check", conformance.pytest_params(DockerSandbox))
def test_conformance(check: str, tmp_path) -> None:
    conformance.run_check_sync(check, DockerSandbox, tmp_path, leftovers=_leftovers)


def test_gaps_are_declared_and_printed(capsys) -> None:
    conformance.print_gaps(DockerSandbox)
    out = capsys.readouterr().out
    assert "backend 'docker'" in out
    assert conformance.gaps_of(DockerSandbox) <= set(conformance.CHECK_NAMES)
