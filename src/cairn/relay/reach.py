"""How a sandbox reaches the job's model relay, per backend and network mode (docs/relay.md,
"Reaching the relay from a sandbox").

- **docker and compose** (a local engine): the relay also listens on the default bridge's
  host address (``docker0``'s, e.g. ``172.17.0.1``), never on all interfaces. A sandbox on
  its trial's own bridge network (``public``) connects to it directly (the engine host's
  address is routed from every bridge); a sandbox behind the egress gateway (``allowlist``,
  ``no-network``, phases that differ) sends its request through the gateway, whose policy
  admits exactly that ``address:port`` in agent phases (``NetworkPolicy.model_endpoints``): the
  relay is then the one model opening, recorded in ``network.jsonl`` like any connection.
- **local**: ``public`` shares the host network: ``127.0.0.1:PORT``. ``no-network`` has an empty
  network namespace: a listening socket is made *inside* it, on ``127.0.0.1:PORT``, and handed
  to the relay (:func:`listen_in_netns`), so the sandbox reaches the relay on its own loopback
  and nothing else.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys

_NETNS_HELPER = r"""
import os, socket, sys
fd_out = int(sys.argv[1]); port = int(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port))
s.listen(128)
out = socket.socket(fileno=fd_out)
socket.send_fds(out, [b"ok"], [s.fileno()])
"""


def _netns_socket(pid: int, port: int) -> socket.socket:
    """A socket listening on ``127.0.0.1:port`` inside the network namespace of ``pid``.

    ``nsenter`` enters the namespace (with its user namespace when this process lacks the
    privilege over it); a short Python there binds the socket and passes it back over a
    socket pair, so no process of the relay lives inside the sandbox.

    Raises:
        OSError: the namespace cannot be entered or the port bound there.
    """
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        attempts = [["-n"], ["-U", "--preserve-credentials", "-n"]]
        last = ""
        for flags in attempts:
            cmd = ["nsenter", "-t", str(pid), *flags, "--", sys.executable, "-c", _NETNS_HELPER]
            cmd += [str(child.fileno()), str(port)]
            proc = subprocess.run(
                cmd, pass_fds=(child.fileno(),), capture_output=True, timeout=30, check=False
            )
            if proc.returncode == 0:
                parent.settimeout(10)
                _msg, fds, _flags, _addr = socket.recv_fds(parent, 16, 1)
                if fds:
                    return socket.socket(fileno=fds[0])
            last = proc.stderr.decode("utf-8", "replace").strip()[-300:]
        raise OSError(f"cannot listen inside the sandbox's network namespace: {last}")
    finally:
        parent.close()
        child.close()


async def listen_in_netns(pid: int, port: int) -> socket.socket:
    """:func:`_netns_socket` off the event loop.

    Args:
        pid: a process of the sandbox (its init), as this machine numbers it.
        port: the port to listen on there (the relay's own, so the URL is the same).

    Returns:
        The listening socket (non-blocking), to give to ``ModelRelay.serve_socket``.

    Raises:
        OSError: the namespace cannot be entered or the port bound there.
    """
    sock = await asyncio.to_thread(_netns_socket, pid, port)
    sock.setblocking(False)
    return sock


def same_netns(pid: int) -> bool:
    """Whether process ``pid`` shares this process's network namespace (a ``public`` local
    sandbox) — then the relay's loopback address already reaches it."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat("/proc/self/ns/net").st_ino
    except OSError:
        return False


__all__ = ["listen_in_netns", "same_netns"]
