"""This machine's address as docker sandboxes reach it (the job's model relay listens there,
docs/relay.md "Reaching the relay from a sandbox")."""

from __future__ import annotations

import ipaddress
from typing import Any

from cairn.errors import UsageError


def bridge_address(client: Any) -> str:
    """This machine's address on the Docker engine's default bridge (``docker0``).

    Args:
        client: a ``docker.DockerClient``.

    Returns:
        The IPv4 address, e.g. ``172.17.0.1``.

    Raises:
        UsageError: the engine is not on this machine, or no address of this machine lies on
            the bridge's subnet.
    """
    from cairn.sandbox.network import httpwire

    base = str(getattr(client.api, "base_url", ""))
    if not base.startswith(("http+unix://", "unix://", "http+docker://")):
        raise UsageError(
            f"the model relay needs a Docker engine on this machine to be reachable from its "
            f"sandboxes (the engine is {base}); use --no-relay"
        )
    net = client.api.inspect_network("bridge")
    mine = sorted(a for a in httpwire.local_addresses() if a.version == 4)
    for cfg in (net.get("IPAM") or {}).get("Config") or []:
        gw = str(cfg.get("Gateway") or "")
        if gw:
            return gw
        subnet = cfg.get("Subnet")
        if subnet:
            network = ipaddress.ip_network(str(subnet), strict=False)
            for addr in mine:
                if addr in network:
                    return str(addr)
    raise UsageError("no address of this machine is on the Docker bridge network; use --no-relay")
