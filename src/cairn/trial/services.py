"""Start-up services: the image ENTRYPOINT a sandbox starts before the agent (design §4.1).

A service that has exited non-zero by the time the agent would start fails the trial as the
task's error ``service_exited`` (not retried), with its exit code and log tail. The same check
runs again at the end of every step's agent phase, before the verifier: a service that died
while the agent worked (a database that crashed under it) fails the trial the same way,
with the step named, instead of a verifier scoring the agent against a broken environment.
A service that exited 0 (a one-shot init script) or is still running is fine; a declared
healthcheck still decides readiness. In a compose project every other service counts too: one
that was up after ``docker compose up --wait`` and has since exited non-zero (its database
crashed) fails the trial the same way, with the service named in ``detail["service"]``.
"""

from __future__ import annotations

from cairn.errors import ErrorKind, TrialFailure
from cairn.sandbox.base import Sandbox


async def check_services(sandbox: Sandbox, *, when: str = "before the agent started") -> None:
    """Raise when the sandbox's start-up service has exited non-zero.

    Args:
        sandbox: a started sandbox.
        when: words for the message ("before the agent started").

    Raises:
        TrialFailure: ``service_exited`` with ``detail`` ``exit_code`` and ``log_tail``.
    """
    ended = await sandbox.service_exit()
    if ended is None or ended.exit_code == 0:
        return
    what = (
        f"compose service {ended.service!r}" if ended.service else "the image's start-up service (ENTRYPOINT)"
    )
    detail: dict[str, object] = {"exit_code": ended.exit_code, "log_tail": ended.log_tail[-4000:]}
    if ended.service:
        detail["service"] = ended.service
    raise TrialFailure(ErrorKind.SERVICE_EXITED, f"{what} exited {ended.exit_code} {when}", detail=detail)
