"""Exec plumbing of the docker backend: streamed output with bounded tails, and the small shell
scripts run inside containers (the keeper under the init, process-tree kill, process listing).

Every exec carries a unique ``CAIRN_EXEC_ID`` in its environment. Children inherit it through
``setsid``, ``nohup`` and double forks, so a timed-out exec's whole tree is found by reading
``/proc/<pid>/environ`` inside the container (as the exec's own user: without CAP_SYS_PTRACE,
root in a container cannot read another user's environ) and killed — a process that clears its
environment escapes this, a documented limit.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

from docker.utils.socket import frames_iter

from cairn._util.tail import TailBuffer
from cairn.sandbox.base import ProcessInfo

EXEC_ID_VAR = "CAIRN_EXEC_ID"
KEEPER_MARKER = "cairn-keeper"

SERVICE_EXIT_FILE = "/tmp/.cairn-service-exit"
"""Where the keeper writes the exit status of the image ENTRYPOINT when it ends."""

KEEPER_SCRIPT = (
    'trap "exit 0" TERM INT HUP; '
    f"rm -f {SERVICE_EXIT_FILE} 2>/dev/null; "
    'if [ "$#" -gt 0 ]; then '
    'command -v "$1" >/dev/null 2>&1 || { echo "cairn: the image ENTRYPOINT $1 is not an '
    'executable in the image" >&2; exit 127; }; '
    f'( "$@"; echo $? > {SERVICE_EXIT_FILE} ) & fi; '
    "k=/tmp/.cairn-keeper.$$; "
    'if mkfifo "$k" 2>/dev/null && exec 3<>"$k"; then rm -f "$k"; while :; do read -r _ <&3; done; fi; '
    "while :; do sleep 2147483647 & wait $!; done"
)
"""The container's main process under the init: starts the image ENTRYPOINT (+CMD) in the
background (exit 127 at once when the ENTRYPOINT program does not exist: the container would not
start under Harbor either; the service's exit status is recorded in :data:`SERVICE_EXIT_FILE`
when it ends), then idles; exits at once on SIGTERM. Run as ``sh -c KEEPER_SCRIPT cairn-keeper
[entrypoint…]``.

It idles on the shell's own ``read`` of a FIFO it holds open (and unlinked), running no program
after its start: a keeper that ran ``sleep`` in a loop ran whatever an agent put at
``/usr/bin/sleep`` after every kill of the agent's processes, since the keeper is the one
process they spare (a fresh-clone attack on ``--hardened-verify``). Without ``mkfifo`` it falls
back to that loop."""

_KEEP_ALIVE = (("sleep", "infinity"), ("sleep", "inf"), ("tail", "-f", "/dev/null"))


def is_keep_alive(argv: list[str] | tuple[str, ...]) -> bool:
    """Whether an ENTRYPOINT+CMD only keeps a container alive (``sleep infinity``,
    ``tail -f /dev/null``, also under ``sh -c``): the keeper already idles, so it starts nothing.
    """
    words = list(argv)
    if len(words) == 3 and words[0].rsplit("/", 1)[-1] in ("sh", "bash") and words[1] == "-c":
        words = words[2].split()
        if words[:1] == ["exec"]:
            words = words[1:]
    if words:
        words[0] = words[0].rsplit("/", 1)[-1]
    return tuple(words) in _KEEP_ALIVE


KILL_BY_ENV_SCRIPT = r"""
id="$1"; me=$$; n=0
while [ $n -lt 20 ]; do
  found=""
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = "$me" ] && continue
    e=$(tr '\0' '\n' 2>/dev/null < "$d/environ") || continue
    case "$e" in *"CAIRN_EXEC_ID=$id"*) found="$found $p";; esac
  done
  [ -z "$found" ] && exit 0
  kill -STOP $found 2>/dev/null
  kill -KILL $found 2>/dev/null
  n=$((n+1))
  sleep 0.05 2>/dev/null || sleep 1
done
exit 1
"""
"""Kills every process whose environment holds ``CAIRN_EXEC_ID=$1`` (stop first, so a fork
storm cannot outrun it); repeats until none is left."""

PS_SCRIPT = r"""
printf '%s' "$$"
for d in /proc/[0-9]*; do
  read -r s 2>/dev/null < "$d/stat" || continue
  s=${s##*) }
  u=""
  while read -r k v _; do [ "$k" = Uid: ] && { u=$v; break; }; done 2>/dev/null < "$d/status"
  c=$(tr '\0\035\036\037' '    ' 2>/dev/null < "$d/cmdline")
  printf '\036%s\035%s) %s\037%s' "$u" "${d#/proc/}" "$s" "$c"
done
"""
"""Prints its own pid, then one record per process: ``\x1e<uid>\x1d<pid>) <stat after the
name>\x1f<cmdline>`` (the process name, which a process sets itself, left out; separators in
the command line blanked: no process can forge a record)."""

KILL_SINCE_SCRIPT = r"""
t="$1"; k="$2"; shift 2
spare=" $* "; me=$$; seen=" "; all=""; n=0
f22() { shift 19; st=$1; }
while [ $n -lt 200 ]; do
  new=""
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    case "$p" in 1|"$me"|"$k") continue;; esac
    read -r s 2>/dev/null < "$d/stat" || continue
    r=${s##*) }
    st=""; f22 $r
    [ -n "$st" ] || continue
    if [ "$t" = - ]; then
      case "$spare" in *" $p:$st "*) continue;; esac
    else
      [ "$st" -gt "$t" ] 2>/dev/null || continue
    fi
    case "$seen" in *" $p:$st "*) continue;; esac
    case "$r" in Z*) continue;; esac
    new="$new $p"; seen="$seen$p:$st "; all="$all $p"
  done
  [ -z "$new" ] && break
  kill -STOP $new 2>/dev/null
  n=$((n+1))
done
[ -n "$all" ] && kill -KILL $all 2>/dev/null
printf 'killed%s\n' "$seen"
left=""
for d in /proc/[0-9]*; do
  p=${d#/proc/}
  case "$p" in 1|"$me"|"$k") continue;; esac
  read -r s 2>/dev/null < "$d/stat" || continue
  r=${s##*) }
  case "$r" in Z*) continue;; esac
  st=""; f22 $r
  if [ "$t" = - ]; then
    case "$spare" in *" $p:$st "*) continue;; esac
  else
    [ "$st" -gt "$t" ] 2>/dev/null || continue
  fi
  case "$seen" in *" $p:$st "*) ;; *) left="$left $p:$st";; esac
done
printf 'left%s\n' "$left"
"""
"""Kills every process started after boot-clock tick ``$1`` (or, with ``$1`` ``-``, every process
whose ``pid:start`` key is not among ``$3…``), never PID 1, the keeper (pid ``$2``) nor itself.
It stops each such process (SIGSTOP: it cannot fork again) and scans again until a scan finds
no new one, then SIGKILLs them all, so neither a fork chain nor a process renamed after the
keeper escapes. Builtins only in the loop (no fork of its own). Prints ``killed <pid:start>…``
and ``left <pid:start>…`` (a new process that still runs: only one that appeared after the
last scan)."""

KILL_KEYS_SCRIPT = r"""
f22() { shift 19; st=$1; }
m=""
for pt in "$@"; do
  p=${pt%%:*}; t=${pt#*:}
  [ "$p" = 1 ] && continue
  read -r s 2>/dev/null < "/proc/$p/stat" || continue
  st=""
  f22 ${s##*) }
  [ "$st" = "$t" ] && m="$m $p"
done
[ -n "$m" ] && { kill -STOP $m 2>/dev/null; kill -KILL $m 2>/dev/null; }
exit 0
"""
"""SIGKILLs each ``pid:start_ticks`` argument whose start time still matches; never pid 1."""


def parse_processes(out: str) -> list[ProcessInfo]:
    """Parse :data:`PS_SCRIPT` output, leaving out the listing's own processes."""
    head, *records = out.split("\x1e")
    own = int(head.strip()) if head.strip().isdigit() else -1
    procs: list[ProcessInfo] = []
    for rec in records:
        uid_text, _, rec = rec.partition("\x1d")
        stat, _, cmd = rec.partition("\x1f")
        try:
            pid_text, _, rest = stat.partition(") ")
            pid = int(pid_text)
            fields = rest.split()
            ppid, start = int(fields[1]), int(fields[19])
        except (ValueError, IndexError):
            continue
        if pid == own or ppid == own:
            continue
        procs.append(
            ProcessInfo(
                pid=pid,
                ppid=ppid,
                start_ticks=start,
                cmdline=cmd.replace("\n", " ").strip(),
                uid=int(uid_text) if uid_text.isdigit() else None,
            )
        )
    return procs


def open_exec(api: Any, exec_id: str) -> tuple[Any, Any, Any]:
    """Start an exec with its output attached: ``POST /exec/{id}/start`` with the connection
    upgraded, as ``APIClient.exec_start(socket=True)`` does.

    Returns ``(reader, sock, response)``: ``reader`` is the HTTP response's own buffered reader
    over the upgraded connection, to be read with ``read1``; ``sock`` is the socket under it
    (for :func:`socket.socket.shutdown`); ``response`` keeps the connection alive. docker-py
    hands out the raw socket and reads from it (docker-py #425, #3332), but ``http.client``
    may already hold the first frames of the stream in its buffer when it parses the response
    headers — under load the engine sends them in one segment — and a read from the raw socket
    skips them: an exec's first output was lost (seen: the verifier fold's start line, so a
    reward read as missing). For an SSH or named-pipe engine (no such reader) ``reader`` is
    ``None`` and ``sock`` is docker-py's socket, read as before. Close ``sock`` when done, never
    ``response`` (that would hand the upgraded connection back to the client's pool).

    Raises:
        docker.errors.APIError: the engine refused the start.
    """
    base = str(getattr(api, "base_url", ""))
    if base.startswith("http+docker://ssh") or base == "http+docker://localnpipe":
        return None, api.exec_start(exec_id, socket=True), None
    res = api._post_json(
        api._url("/exec/{0}/start", exec_id),
        headers={"Connection": "Upgrade", "Upgrade": "tcp"},
        data={"Tty": False, "Detach": False},
        stream=True,
    )
    api._raise_for_status(res)
    reader = res.raw._fp.fp
    raw = getattr(reader, "raw", None)
    sock = getattr(raw, "_sock", raw)
    return reader, sock, res


def read_frames(reader: Any) -> Iterator[tuple[int, bytes]]:
    """Docker's multiplexed stream (8-byte frame headers: stream 1 stdout, 2 stderr, then the
    big-endian length) read from a buffered reader with ``read1``, so bytes it already holds
    come first. Ends at end of stream (a cut frame ends it too)."""
    while True:
        header = b""
        while len(header) < 8:
            more = reader.read1(8 - len(header))
            if not more:
                return
            header += more
        stream, n = header[0], int.from_bytes(header[4:8], "big")
        while n > 0:
            data = reader.read1(min(n, 1 << 16))
            if not data:
                return
            n -= len(data)
            yield stream, data


def exec_output(api: Any, exec_id: str) -> tuple[bytes, bytes]:
    """An exec's whole (stdout, stderr), read as :class:`ExecStream` reads it (not through
    ``exec_start(demux=True)``, which loses first frames the same way: :func:`open_exec`)."""
    reader, sock, res = open_exec(api, exec_id)
    out: list[bytes] = []
    err: list[bytes] = []
    try:  # the client's own timeout bounds each read here (an internal exec is short)
        frames = read_frames(reader) if reader is not None else frames_iter(sock, tty=False)
        for stream, data in frames:
            (err if stream == 2 else out).append(data)
    finally:
        if reader is not None:
            with contextlib.suppress(Exception):
                reader.close()  # the socket's file closes only once the reader lets it go
        with contextlib.suppress(Exception):
            sock.close()
        del res  # held until here, never closed: its close would hand the upgraded connection
        # back to the client's pool (docker-py leaves the response alone too)
    return b"".join(out), b"".join(err)


class ExecStream:
    """Reads one started exec's multiplexed output on a thread; abortable from another.

    Args:
        api: the SDK's low-level ``APIClient``.
        exec_id: the exec instance id.
        cap: tail bytes kept per stream.
        stdout_cap: tail bytes kept of stdout when it differs from ``cap`` (a folded exec
            carries an archive after the command's own output, :mod:`.fold`).
    """

    def __init__(self, api: Any, exec_id: str, cap: int, stdout_cap: int | None = None) -> None:
        self.api, self.exec_id = api, exec_id
        self.stdout = TailBuffer(cap if stdout_cap is None else stdout_cap)
        self.stderr = TailBuffer(cap)
        self._sock: Any = None
        self._aborted = threading.Event()

    def run(self) -> None:
        """Start the exec and read until its output closes (or :meth:`abort`)."""
        reader, sock, res = open_exec(self.api, self.exec_id)
        self._sock = sock
        for s in (sock, getattr(sock, "_sock", None)):
            if s is not None and hasattr(s, "settimeout"):
                s.settimeout(None)
        try:
            if self._aborted.is_set():
                return
            frames = read_frames(reader) if reader is not None else frames_iter(sock, tty=False)
            for stream, data in frames:
                (self.stderr if stream == 2 else self.stdout).append(data)
        except (OSError, ValueError):  # ValueError: the reader closed under an abort
            if not self._aborted.is_set():
                raise
        finally:
            if reader is not None:
                with contextlib.suppress(Exception):
                    reader.close()
            with contextlib.suppress(Exception):
                sock.close()
            del res  # held while reading, never closed (see exec_output)

    def abort(self) -> None:
        """Stop reading: shut the connection down so the reading thread returns."""
        self._aborted.set()
        raw = getattr(self._sock, "_sock", self._sock)
        if raw is not None:
            with contextlib.suppress(OSError):
                raw.shutdown(socket.SHUT_RDWR)

    def exit_code(self, wait_sec: float = 5.0) -> int | None:
        """The exec's exit code once the engine reports it ended (None if it never does)."""
        deadline = time.monotonic() + wait_sec
        while True:
            info = self.api.exec_inspect(self.exec_id)
            if not info.get("Running") and info.get("ExitCode") is not None:
                return int(info["ExitCode"])
            if time.monotonic() > deadline:
                return None
            time.sleep(0.02)
