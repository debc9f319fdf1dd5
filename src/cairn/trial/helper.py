"""The sandbox-side work between a step's agent and its verifier, in one exec (design §4.2, §11).

After an agent phase the engine has to: remove ``/solution``; find which of ``/logs/agent``,
``/logs/verifier`` and ``/logs/artifacts`` hold files; move what the agent planted in
``/logs/verifier`` out of the verifier's way; give the verifier a fresh ``/tests`` and an empty,
world-writable ``/logs/verifier``; and size every artifact entry. Done as one call each, that
was up to a dozen engine round trips per step; :data:`AFTER_AGENT_SCRIPT` does all of it in one
exec and prints a small report that :func:`parse_after_agent` reads.

When the agent left logs in ``/logs/agent`` or planted files, one more exec
(:data:`CLEAR_EVIDENCE_CMD`) removes them once they are on the host.

Why an inline POSIX ``sh`` script (``sh -c SCRIPT``) and not a program copied into the sandbox
at start: it costs no upload; it needs nothing the task's image may lack (no python3 — base
images have it, tasks' own images need not); and nothing stored in the sandbox can be altered
by an agent running as root to fake what the engine sees. It uses only POSIX ``sh``, ``ls``,
``mv``, ``mkdir``, ``chmod``, ``rm`` and ``du`` (GNU's ``-sb --apparent-size``, as before).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from cairn.layout import AGENT_LOGS_DIR, ARTIFACTS_DIR, SOLUTION_DIR, TESTS_DIR, VERIFIER_LOGS_DIR
from cairn.sandbox.base import ProcessInfo

PLANTED_PREFIX = "/logs/.cairn-planted-"
"""Where files the agent wrote into ``/logs/verifier`` are moved (a random suffix per step);
downloaded as evidence, then removed (:data:`CLEAR_EVIDENCE_CMD`)."""

AFTER_AGENT_SCRIPT = rf"""
planted="$1"; prep="$2"; ps="$3"; shift 3
rm -rf {SOLUTION_DIR} {PLANTED_PREFIX}*
for d in {AGENT_LOGS_DIR} {ARTIFACTS_DIR}; do
  if [ -L "$d" ] || [ ! -d "$d" ]; then rm -rf "$d"; mkdir -p "$d"; chmod 777 "$d"; echo "odd $d"
  elif [ -n "$(ls -A "$d" 2>/dev/null)" ]; then echo "full $d"; fi
done
d={VERIFIER_LOGS_DIR}
if [ -L "$d" ] || [ -e "$d" -a ! -d "$d" ] || [ -n "$(ls -A "$d" 2>/dev/null)" ]; then
  mv "$d" "$planted" && echo "planted $planted"
fi
mkdir -p "$d"; chmod 777 "$d"
if [ "$prep" = 1 ]; then
  rm -rf {TESTS_DIR}
  df -Pk "$d" 2>/dev/null | tail -n 1 | {{ read -r _f _b _u a _r && echo "free $a"; }}
fi
i=0
for a in "$@"; do
  s=$(du -sb --apparent-size "$a" 2>/dev/null | tail -n1)
  s=${{s%%[!0-9]*}}
  k=-; [ -L "$a" ] && k=l; [ -f "$a" ] && k=f; [ -d "$a" ] && k=d
  printf 'art %s %s %s\n' "$i" "${{s:--}}" "$k"
  i=$((i+1))
done
if [ "$ps" = 1 ]; then
  printf '\036PS%s' "$$"
  for d in /proc/[0-9]*; do
    read -r s 2>/dev/null < "$d/stat" || continue
    s=${{s##*) }}
    u=""
    while read -r k v _; do [ "$k" = Uid: ] && {{ u=$v; break; }}; done 2>/dev/null < "$d/status"
    c=$(tr '\0\035\036\037' '    ' 2>/dev/null < "$d/cmdline")
    printf '\036%s\035%s) %s\037%s' "$u" "${{d#/proc/}}" "$s" "$c"
  done
  printf '\036PW'; head -c 65536 /etc/passwd 2>/dev/null
fi
true
"""
"""Run as root: ``sh -c AFTER_AGENT_SCRIPT cairn-after-agent PLANTED PREP PS [artifact…]``.
``PS=1`` also lists the sandbox's processes and its ``/etc/passwd`` after the report (issue
#29: what the agent phase left running, without an exec of its own): ``\x1ePS<own pid>``,
one ``\x1e<uid>\x1d<pid>) <stat after the name>\x1f<cmdline>`` record per process (the
process name, which a process sets itself, is left out and separators in the command line are
blanked, so no process can forge a record), ``\x1ePW<passwd>``.
``PREP=1`` also removes ``/tests`` (a shared verifier follows) and prints ``free <kB>``, the
space left on ``/logs/verifier`` (``df -Pk``; no line without ``df``). Prints ``full <dir>``,
``odd <dir>`` (a log folder the agent replaced by a link or file: recreated empty),
``planted <path>`` and one ``art <i> <bytes|-> <d|f|l|->`` per artifact argument (``d``
as ``test -d`` says, so a link to a folder counts as a folder; ``l`` a link to no folder or
file)."""


@dataclass
class AfterAgent:
    """What :data:`AFTER_AGENT_SCRIPT` reported.

    Attributes:
        full: log folders that hold files (``/logs/agent``, ``/logs/artifacts``).
        odd: log folders the agent had replaced by a link or a file (now empty folders).
        planted: where the agent's files in ``/logs/verifier`` were moved, or ``None``.
        artifacts: per artifact argument, ``(bytes or None when absent, kind)`` with kind
            ``d`` folder, ``f`` file, ``l`` link, ``-`` absent.
        free_kb: kB free on ``/logs/verifier`` when ``/tests`` was prepared, else ``None``.
        processes: the sandbox's processes (the exec's own left out) when they were listed
            (``PS=1``), else ``None``.
        users: uid → user name from the sandbox's ``/etc/passwd`` (``PS=1``).
    """

    full: set[str] = field(default_factory=set)
    odd: set[str] = field(default_factory=set)
    planted: str | None = None
    artifacts: list[tuple[int | None, str]] = field(default_factory=list)
    free_kb: int | None = None
    processes: list[ProcessInfo] | None = None
    users: dict[int, str] = field(default_factory=dict)


def after_agent_argv(
    artifact_sources: list[str], *, prepare_tests: bool, list_processes: bool = False
) -> list[str]:
    """The exec's argv (run it as root).

    Args:
        artifact_sources: artifact entry sources to size, in order (``/logs/artifacts`` too).
        prepare_tests: remove ``/tests`` for the shared verifier that follows.
        list_processes: also list the sandbox's processes and users (``PS=1``).
    """
    planted = f"{PLANTED_PREFIX}{uuid.uuid4().hex[:12]}"
    return [
        "/bin/sh",
        "-c",
        AFTER_AGENT_SCRIPT,
        "cairn-after-agent",
        planted,
        "1" if prepare_tests else "0",
        "1" if list_processes else "0",
        *artifact_sources,
    ]


def _parse_processes(text: str) -> list[ProcessInfo]:
    """The ``PS`` part: ``<own pid>`` then ``\x1e``-separated records; the listing's own
    processes (its shell and that shell's children) are left out."""
    head, *records = text.split("\x1e")
    own = int(head) if head.isdigit() else -1
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
        if pid == own or ppid == own or fields[0] in ("Z", "X"):
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


def _parse_passwd(text: str) -> dict[int, str]:
    users: dict[int, str] = {}
    for line in text.splitlines():
        parts = line.split(":")
        if len(parts) > 2 and parts[2].isdigit():
            users.setdefault(int(parts[2]), parts[0])
    return users


def parse_after_agent(stdout: str, n_artifacts: int) -> AfterAgent:
    """Read the script's report; lines it does not know are ignored (never trusted blindly:
    the paths it may name are checked against the ones the engine asked about).

    Args:
        stdout: the exec's stdout.
        n_artifacts: how many artifact arguments were passed.
    """
    out = AfterAgent(artifacts=[(None, "-")] * n_artifacts)
    stdout, ps_mark, listing = stdout.partition("\x1ePS")
    if ps_mark:
        table, _, passwd = listing.partition("\x1ePW")
        out.processes = _parse_processes(table)
        out.users = _parse_passwd(passwd)
    for line in stdout.splitlines():
        parts = line.split(" ")
        if len(parts) == 2 and parts[0] in ("full", "odd") and parts[1] in (AGENT_LOGS_DIR, ARTIFACTS_DIR):
            getattr(out, parts[0]).add(parts[1])
        elif len(parts) == 2 and parts[0] == "free" and parts[1].isdigit():
            out.free_kb = int(parts[1])
        elif len(parts) == 2 and parts[0] == "planted" and parts[1].startswith(PLANTED_PREFIX):
            out.planted = parts[1]
        elif len(parts) == 4 and parts[0] == "art" and parts[1].isdigit():
            i = int(parts[1])
            if i < n_artifacts:
                size = int(parts[2]) if parts[2].isdigit() else None
                out.artifacts[i] = (size if parts[3] != "-" else None, parts[3])
    return out


def reset_dirs_cmd(*dirs: str) -> str:
    """The shell fragment that leaves each of ``dirs`` an empty, world-writable folder (made
    when missing): the one spelling of "empty and open a folder" the engine runs as root.

    Args:
        dirs: absolute sandbox paths (engine constants, never agent input).

    Returns:
        ``mkdir -p D && find D -mindepth 1 -delete; chmod 777 D`` for each, joined by ``; ``.
    """
    return "; ".join(f"mkdir -p {d} && find {d} -mindepth 1 -delete; chmod 777 {d}" for d in dirs)


CLEAR_EVIDENCE_CMD = (
    f"find {AGENT_LOGS_DIR} -mindepth 1 -delete; rm -rf {PLANTED_PREFIX}*; chmod 777 {AGENT_LOGS_DIR}"
)
"""After the agent's logs and planted verifier files were downloaded (one exec, root): both
leave the sandbox, so neither the verifier nor a later agent sees them (design §11)."""

VERIFIER_CLEANUP_CMD = (
    f"rm -rf {TESTS_DIR} {PLANTED_PREFIX}*; d={VERIFIER_LOGS_DIR}; "
    'if [ -L "$d" ] || [ ! -d "$d" ]; then rm -rf "$d"; mkdir -p "$d"; chmod 777 "$d"; fi; '
    'find "$d" -mindepth 1 -delete'
)
"""After a shared verifier (one exec, root): ``/tests`` goes, and so does what the verifier left
in ``/logs/verifier`` (on the host already): the next step's agent must not read them, nor be
blamed for them (design §4.6 item 5)."""
