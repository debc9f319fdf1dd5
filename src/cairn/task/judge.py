"""LLM-judge verifiers: recognised judge credentials in ``[verifier.env]`` (issue 22).

A verifier that grades with a model asks for its credential through a template,
``ANTHROPIC_API_KEY = "${ANTHROPIC_API_KEY}"`` or ``OPENAI_API_KEY = "${OPENAI_API_KEY}"``,
optionally with a base-URL companion (``ANTHROPIC_BASE_URL``/``ANTHROPIC_API_BASE``,
``OPENAI_BASE_URL``/``OPENAI_API_BASE``). Such a task gets a verifier-phase opening to that
provider's API host (or the companion's host) through the egress gateway, for the verifier only
(docs/network.md). Other templates follow the usual rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cairn.netpolicy import host_of_url
from cairn.task.envvars import parse_template


@dataclass(frozen=True)
class JudgeProvider:
    """One recognised judge credential.

    Attributes:
        credential: the env name of the API key.
        default_host: the provider's API host.
        base_url_vars: the env names that may give another base URL, in precedence order.
    """

    credential: str
    default_host: str
    base_url_vars: tuple[str, ...]


JUDGE_PROVIDERS: tuple[JudgeProvider, ...] = (
    JudgeProvider("ANTHROPIC_API_KEY", "api.anthropic.com", ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_BASE")),
    JudgeProvider("OPENAI_API_KEY", "api.openai.com", ("OPENAI_BASE_URL", "OPENAI_API_BASE")),
)


def judge_credentials(templates: Mapping[str, str]) -> list[JudgeProvider]:
    """The providers whose credential the verifier env asks for through a ``${VAR}`` template.

    Args:
        templates: a step's verifier env as written (``Step.verifier_env``).

    Returns:
        The recognised providers, in :data:`JUDGE_PROVIDERS` order.
    """
    return [
        p
        for p in JUDGE_PROVIDERS
        if p.credential in templates and parse_template(templates[p.credential]) is not None
    ]


def judge_hosts(templates: Mapping[str, str], resolved: Mapping[str, str]) -> list[str]:
    """The hosts a judge verifier needs: per recognised credential, the host of its first
    base-URL companion that has a value (after ``--ve``), else the provider's API host.

    Args:
        templates: the verifier env as written.
        resolved: the same env resolved for the run (templates filled, ``--ve`` applied).

    Returns:
        Host names (duplicates dropped); empty for a task without a judge credential.
    """
    hosts: list[str] = []
    for provider in judge_credentials(templates):
        url = next((resolved[v] for v in provider.base_url_vars if resolved.get(v)), None)
        host = host_of_url(url) if url else provider.default_host
        if host and host not in hosts:
            hosts.append(host)
    return hosts
