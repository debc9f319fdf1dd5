"""One exec for a command, the copy of a folder it wrote and a root clean-up after it
(:meth:`cairn.sandbox.base.Sandbox.exec_collect` on docker; design §4.6).

The verifier's ``test.sh``, the download of ``/logs/verifier`` and the clean-up between steps
were three engine round trips. :data:`FOLD_SCRIPT` runs them as one exec, as the command's own
user, in its cwd and env, under its timeout:

1. It prints ``<token>:start`` (so the host knows it ran) and checks that ``cat``, ``tee``,
   ``wc`` and ``tar`` exist; without them it prints ``<token>:plain``, ``exec``\\ s the command
   as a plain exec would and folds nothing.
2. It runs the command with its stdout and stderr each relayed by a ``cat`` onto the exec's own
   stdout and stderr. The command and everything it starts never hold the exec's streams, so
   nothing they print can land after the relays end; and the relays end only once every
   process holding the command's stdout or stderr has closed it, which is when a plain exec
   ends too. The relays carry another ``CAIRN_EXEC_ID`` than the exec's, so a timeout's kill
   of the exec's tree leaves them to drain what the command printed before it was killed.
   Then it prints ``<token>:out <exit code>``: the command's output ends there, and the
   command has ended with that code (``<token>:out`` alone when the code cannot be read).
3. When the command's exit code is not one the caller excluded and the folder is a real folder
   whose tar fits :data:`FOLD_LIMIT_BYTES`, it writes a tar of the folder onto stdout (through
   ``tee`` and ``wc``, so it knows the archive's exact size) and then one footer line,
   ``<token>:tar <bytes> <tar status> <tee status> <exit code>``.
4. Only then, when the caller asked for a clean-up, the archive is whole (both statuses 0,
   within the limit), the exec runs as uid 0 and more than :data:`CLEAN_MARGIN_SEC` of the
   timeout is left, it runs the clean-up and prints ``<token>:clean``.
5. It exits with the command's exit code.

The host reads this from the end of stdout (:func:`parse_fold`): the footer must end the
stream, so nothing the command printed can stand for it, however it was worded; the archive is
the footer's ``<bytes>`` bytes before it, and what precedes the archive is the command's
stdout. A missing or malformed footer, a timeout, or an archive that does not parse leaves the
copy and the clean-up to the caller (a download and a root exec, as without the fold); only an
archive whose clean-up already ran and that then does not come back whole is an error, since the
folder is gone from the sandbox.

The engine can lose the last bytes of an exec's output (a known race of Docker's and
containerd's exec streams under load, when the process ends right after printing): then the
footer and the ``:clean`` line are gone although the script may have cleaned the folder up.
Such a fold is *uncertain* (:attr:`Fold.may_have_cleaned`): the caller downloads the folder,
and an empty one is not the command's doing but a lost copy (seen: a verifier's reward read as
``reward_missing`` after an engine restart, the machine loaded).

A timeout that strikes after the ``:out`` line (while the folder is sized or archived, or during
the clean-up after the footer) is no timeout of the command: it ended, with the line's code, and
only the fold's own work was cut (:attr:`Fold.ended`, :meth:`Fold.ended_by`). The line is read
where the command's output ends, at the first line of its form: the command's output all comes
before the script's line, so a line the command printed itself comes first, and it counts only
when what follows it is what the script writes after its own (nothing, or an archive's first tar
header); followed by more output, by the script's real line or by other bytes it gives no code,
and the result is a timeout, as it was before the line carried one. (A command that knows the
token, prints the line as its very last output, followed by nothing or a tar header, and then
outlives the timeout reads as one that ended: it could as well have ended, with whatever reward
it wrote.)
"""

from __future__ import annotations

import dataclasses
import io
import re
import tarfile

FOLD_LIMIT_BYTES = 4 * 1024 * 1024
"""The largest archive the fold carries on stdout, bytes (a bigger folder is downloaded)."""

CLEAN_MARGIN_SEC = 5.0
"""The clean-up runs in the fold only with more than this much of the timeout left, seconds:
a timeout that strikes during it would leave the folder half removed and its copy unread."""

FOLD_SCRIPT = r"""
t="$CAIRN_FOLD_TOKEN"; unset CAIRN_FOLD_TOKEN
lim="$1"; dir="$2"; clean="$3"; skip="$4"; left="$5"; shift 5
printf '%s:start\n' "$t"
for c in cat tee wc tar; do
  command -v "$c" >/dev/null 2>&1 || { printf '%s:plain\n' "$t"; exec "$@"; }
done
up() { read -r u _ < /proc/uptime 2>/dev/null || u=0.0; u="${u%.*}${u#*.}"; echo "${u#"${u%%[!0]*}"}"; }
t0=$(up)
r="r$CAIRN_EXEC_ID"
exec 3>&1 6>&2
code=$(
  {
    {
      { "$@" 3>&- 4>&- 5>&- 6>&-; echo "$?" >&4; } 2>&1 1>&5 | CAIRN_EXEC_ID="$r" cat >&6 3>&- 4>&- 5>&-
    } 5>&1 | CAIRN_EXEC_ID="$r" cat >&3 4>&- 6>&-
  } 4>&1
)
case "$code" in ''|*[!0-9]*) printf '%s:out\n' "$t"; exit 125;; esac
printf '%s:out %s\n' "$t" "$code"
case " $skip " in *" $code "*) exit "$code";; esac
p="${dir%/*}"; b="${dir##*/}"; [ -n "$p" ] || p=/
n=-; ts=-; es=-
if [ -d "$dir" ] && [ ! -L "$dir" ]; then
  s=$(tar -C "$p" -cf - "$b" 2>/dev/null | wc -c)
  for w in $s; do s=$w; done
  if [ "$s" -le "$lim" ] 2>/dev/null; then
    res=$( { { tar -C "$p" -cf - "$b" 2>/dev/null; echo "t$?" >&5; } \
      | { tee /dev/fd/3 2>/dev/null; echo "e$?" >&5; } | wc -c; } 5>&1 )
    for w in $res; do case "$w" in t*) ts="${w#t}";; e*) es="${w#e}";; *) n="$w";; esac; done
  fi
fi
printf '%s:tar %s %s %s %s\n' "$t" "$n" "$ts" "$es" "$code"
if [ -n "$clean" ] && [ "$ts" = 0 ] && [ "$es" = 0 ] && [ "$n" -le "$lim" ] 2>/dev/null; then
  uid=""
  while read -r k v _; do [ "$k" = Uid: ] && { uid=$v; break; }; done < /proc/self/status
  now=$(up)
  if [ "$uid" = 0 ] && { [ "$left" = - ] || [ $(( ${now:-0} - ${t0:-0} )) -lt "$left" ]; }; then
    ( eval "$clean" ) </dev/null >/dev/null 2>&1 3>&- 6>&-
    printf '%s:clean\n' "$t"
  fi
fi
exit "$code"
"""
"""Run as ``/bin/sh -c FOLD_SCRIPT cairn-fold LIMIT DIR CLEAN SKIP LEFT argv…`` with the token
that marks its lines in the environment (:data:`FOLD_TOKEN_VAR`, :func:`fold_env`), not on its
command line: any user of the sandbox can read a command line, only the exec's own user (and
root) its environment, and the script unsets it before the command runs (a program test.sh
runs as another user cannot learn it and forge the script's lines). ``LIMIT`` is
:data:`FOLD_LIMIT_BYTES`, ``DIR`` the absolute folder
to copy, ``CLEAN`` the clean-up shell command (empty: none), ``SKIP`` the space-separated exit
codes after which nothing is copied nor cleaned, ``LEFT`` the centiseconds of the timeout
within which the clean-up may start (``-``: no timeout)."""


FOLD_TOKEN_VAR = "CAIRN_FOLD_TOKEN"
"""The environment variable that hands :data:`FOLD_SCRIPT` its token."""


def fold_env(token: str) -> dict[str, str]:
    """The environment entry that gives a folded exec its token (merge it into the exec's env).

    Args:
        token: a fresh random hex token (marks the script's own lines).
    """
    return {FOLD_TOKEN_VAR: token}


def fold_argv(
    argv: list[str],
    *,
    collect: str,
    then_root: str | None,
    unless_exit: tuple[int, ...],
    timeout_sec: float | None,
    limit_bytes: int = FOLD_LIMIT_BYTES,
) -> list[str]:
    """The exec's argv that folds ``argv``, the copy of ``collect`` and ``then_root``.

    Args:
        argv: the command (never empty).
        collect: the absolute sandbox folder to copy (not ``/``).
        then_root: the clean-up shell command, or ``None``.
        unless_exit: exit codes of the command after which nothing is copied nor cleaned.
        timeout_sec: the exec's timeout, seconds (``None``: none).
        limit_bytes: the largest archive carried, bytes.

    Returns:
        ``["/bin/sh", "-c", FOLD_SCRIPT, "cairn-fold", …, *argv]``.
    """
    left = "-" if timeout_sec is None else str(max(0, int((timeout_sec - CLEAN_MARGIN_SEC) * 100)))
    return [
        "/bin/sh",
        "-c",
        FOLD_SCRIPT,
        "cairn-fold",
        str(limit_bytes),
        collect.rstrip("/") or "/",
        then_root or "",
        " ".join(str(c) for c in unless_exit),
        left,
        *argv,
    ]


@dataclasses.dataclass(frozen=True)
class Fold:
    """What :func:`parse_fold` read from a folded exec's stdout.

    Attributes:
        started: the script ran (its start line is there, or the stream was cut at the front).
        out: the command's own stdout (the tail the stream kept), bytes.
        tar: the archive of the folder, when the footer says a whole one was written and it
            parses; else ``None``.
        footer: a footer ended the stream (the script got past the command).
        code: the command's exit code from the footer (``None`` without one).
        cleaned: the clean-up ran (its line ends the stream).
        bad_tar: the footer announced a whole archive that does not parse.
        ended: without a footer, the exit code the script's ``:out`` line carries: the
            command ended with it, and what cut the stream (a timeout) struck after it, while
            the folder was being archived. ``None`` when no such line is there, or the first
            line that looks like it is not followed by what the script writes after it
            (nothing, or the archive's first header).
        plain: the script's ``:plain`` line came first: a tool it needs is missing, the
            command ran alone and nothing was archived or cleaned.
        whole: the footer announced a whole archive (size, tar and tee statuses all fine):
            what the clean-up waits for, so it may have run whether or not its line came.
        out_code: with a footer, the exit code the script's ``:out`` line before the archive
            carries (``None``: no such line where the command's output ends).
    """

    started: bool
    out: bytes
    tar: bytes | None = None
    footer: bool = False
    code: int | None = None
    cleaned: bool = False
    bad_tar: bool = False
    ended: int | None = None
    plain: bool = False
    whole: bool = False
    out_code: int | None = None

    def ended_by(self) -> int | None:
        """The command's exit code when the stream shows the command had ended, whatever cut
        the stream after it (a timeout's kill): :attr:`ended` (cut while the folder was
        archived) or, with a footer whose code the ``:out`` line before the archive agrees
        with, the footer's (cut during the clean-up, which runs after the footer). ``None``:
        nothing shows it ended. A command that knows the token and forges these lines as its
        last output before it hangs reads as one that ended with the code it chose, as for
        :attr:`ended`; the archive itself is never taken after a timeout (the caller
        downloads the folder)."""
        if self.ended is not None:
            return self.ended
        if self.footer and self.code is not None and self.out_code == self.code:
            return self.code
        return None

    def may_have_cleaned(self, skip: tuple[int, ...], code: int | None) -> bool:
        """Whether the script may have run its clean-up although no archive was taken: it ran
        folded (not :attr:`plain`) and either its footer announced a whole archive
        (:attr:`whole`, the clean-up's own condition) or the stream ended with no footer after a
        command whose exit ``code`` (the engine's) is none the script stops at (``skip``, 125:
        unreadable code). ``False`` when the clean-up line was read (:attr:`cleaned`)."""
        if not self.started or self.plain or self.cleaned:
            return False
        if self.footer:
            return self.whole
        # the script outlived the command (its ``:out`` line came): a test.sh that killed its
        # own process group, the script with it, leaves no such line and no doubt
        return self.ended is not None and code not in (*skip, 125)


def _whole_tar(data: bytes) -> bool:
    """Whether ``data`` is exactly one complete tar archive: every member's header and data
    inside it, then only zero blocks (at least the two of the end marker)."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tf:
            members = tf.getmembers()
            end = tf.offset
    except (tarfile.TarError, OSError, EOFError, ValueError):
        return False
    if not members or any(m.offset_data + (m.size if m.isreg() else 0) > end for m in members):
        return False
    rest = data[end:]
    return len(rest) >= 1024 and not rest.strip(b"\0")


def _tar_header(block: bytes) -> bool:
    """Whether ``block`` (512 bytes) is a tar member's header with a right checksum."""
    try:
        tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
    except (tarfile.HeaderError, ValueError):
        return False
    return True


def _end_of_out(body: bytes, token: str) -> tuple[int, int | None]:
    """Where the command's output ends in ``body`` (the first ``:out`` line; ``-1``: none)
    and, when that line is the script's, the exit code it carries (else ``None``).

    Everything the command printed comes before the script's line (the relays have ended
    when it is printed), so a line the command printed in its own words can only come first;
    it is taken as the script's only when what follows it is what the script writes after
    its line: nothing (a timeout during the first, sizing tar pass) or a tar header (a
    timeout while the archive streams). A forged line followed by more of the command's
    output, or by the script's real line, gives no code: the result stays a timeout."""
    m = re.compile(re.escape(token.encode()) + rb":out(?: (\d{1,3}))?\n").search(body)
    if m is None:
        return -1, None
    rest = body[m.end() :]
    code = int(m.group(1)) if m.group(1) is not None and int(m.group(1)) <= 255 else None
    if code is not None and (rest == b"" or (len(rest) >= 512 and _tar_header(rest[:512]))):
        return m.start(), code
    return m.start(), None


def parse_fold(raw: bytes, token: str, *, truncated: bool) -> Fold:
    """Read a folded exec's stdout (:data:`FOLD_SCRIPT`) from its end.

    Args:
        raw: the stdout tail the stream kept, bytes.
        token: the exec's token.
        truncated: whether the stream dropped bytes from the front of ``raw``.

    Returns:
        The :class:`Fold`.
    """
    start = f"{token}:start\n".encode()
    if raw.startswith(start):
        raw = raw[len(start) :]
    elif not truncated and f"{token}:tar ".encode() not in raw[-200:]:
        # no start line and no footer: the script did not run (a footer, which only the
        # script prints, says it did although the engine lost the first frames)
        return Fold(started=False, out=raw)
    plain = f"{token}:plain\n".encode()
    if raw.startswith(plain):  # a tool is missing: the command ran alone, nothing folded
        return Fold(started=True, out=raw[len(plain) :], plain=True)
    clean_line = f"{token}:clean\n".encode()
    cleaned = raw.endswith(clean_line)
    body = raw[: -len(clean_line)] if cleaned else raw
    at = body.rfind(f"{token}:tar ".encode())
    m = (
        re.fullmatch(rb"[^ ]+:tar (\d+|-) (\d+|-) (\d+|-) (\d+)\n", body[at:])
        if at >= 0 and body.endswith(b"\n")
        else None
    )
    if m is None:  # killed (a timeout), no archive, or the stream's end lost
        cut, ended = _end_of_out(body, token)
        return Fold(started=True, out=body[:cut] if cut >= 0 else body, ended=ended, cleaned=cleaned)
    n_text, tar_status, tee_status, code_text = (g.decode() for g in m.groups())
    code = int(code_text)
    # the bytes tee wrote onto stdout sit before the footer, whether or not tar succeeded
    n = int(n_text) if n_text.isdigit() and tee_status == "0" and int(n_text) <= at else 0
    # what the script's clean-up itself waits for (and the size within the limit, which the
    # script checked before writing the archive at all)
    # (a real folder's tar is at least 1024 bytes: a "tar" that printed nothing is the
    # sandbox's doing, e.g. an agent's own tar early on PATH, not a copy the engine lost)
    whole = n_text.isdigit() and int(n_text) >= 1024 and tar_status == "0" and tee_status == "0"
    tar, out = body[at - n : at], body[: at - n]
    # the command's output ends at the script's marker: after it come only archive bytes (all
    # of them when ``n`` is 0: a failed tee, a folder that grew, a stream cut at the front)
    cut, out_code = _end_of_out(out, token)
    out = out[:cut] if cut >= 0 else out
    fold = Fold(
        started=True, out=out, footer=True, code=code, cleaned=cleaned, whole=whole, out_code=out_code
    )
    if not n or tar_status != "0":
        return fold
    if not _whole_tar(tar):
        return dataclasses.replace(fold, bad_tar=True)
    return dataclasses.replace(fold, tar=tar)
