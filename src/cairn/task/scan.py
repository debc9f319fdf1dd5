"""Static readers for the task lint (docs/lint.md): shell scripts, Dockerfiles, PEP 723 blocks.

Pure text functions, no I/O: :mod:`cairn.task.lint` feeds them file contents and turns what
they find into findings with file and line.

- :func:`shell_commands` — the simple commands of a shell script with the line each starts on
  (continuations joined, comments and heredoc bodies skipped, ``sudo``/``env``/``timeout``
  wrappers and ``bash -c '…'`` unwrapped);
- :func:`fetch_of` — whether a command downloads or installs something (``pip install``,
  ``uv run --with``, ``apt-get install``, ``curl https://…``, ``git clone``, ``npx``, …);
- :func:`command_python_requirements` — the Python requirements a command installs;
- :func:`dockerfile_instructions` — a Dockerfile's instructions with their first line;
- :func:`script_metadata` — the ``# /// script`` block of a Python file (PEP 723) with the line
  of every ``dependencies`` entry;
- :func:`requirement_pinned` — whether a PEP 508 requirement pins one exact version.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from cairn.task.keylines import toml_key_lines

# -- shell -----------------------------------------------------------------------------------

_HEREDOC_RE = re.compile(r"""(?<!<)<<(-?)(?!<)\s*(['"]?)([A-Za-z_][A-Za-z0-9_]*)\2""")
_PUNCT = frozenset(";&|()")
_KEYWORDS = frozenset(
    {
        "if",
        "then",
        "else",
        "elif",
        "fi",
        "do",
        "done",
        "while",
        "until",
        "case",
        "esac",
        "{",
        "}",
        "!",
        "time",
        "[[",
        "]]",
    }
)
_ASSIGN_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ash"})


@dataclass(frozen=True)
class Command:
    """One simple command of a script.

    Attributes:
        line: 1-based line where the command's logical line starts.
        argv: the words after assignments and wrappers (``sudo``, ``env``, ``timeout`` …),
            quotes removed; ``argv[0]`` is the program as written.
        env: ``NAME=value`` assignments written before the command (and through ``env``).
    """

    line: int
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def program(self) -> str:
        """``argv[0]``'s base name without a version suffix: ``/usr/bin/pip3.12`` → ``pip``."""
        name = posixpath.basename(self.argv[0]) if self.argv else ""
        return re.sub(r"^(pip|python|pypy)[0-9.]*$", r"\1", name)


def shell_lines(text: str) -> Iterator[tuple[int, str]]:
    """The logical lines of a shell script.

    Args:
        text: the script.

    Yields:
        ``(line, text)``: backslash continuations joined, blank and comment-only lines and
        heredoc bodies skipped; ``line`` is where the logical line starts (1-based).
    """
    pending: list[str] = []  # the parts of a continued line (joined once: linear time)
    start = 0
    heredocs: list[tuple[bool, str]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if heredocs:
            strip_tabs, word = heredocs[0]
            if (raw.lstrip("\t") if strip_tabs else raw).rstrip("\r") == word:
                heredocs.pop(0)
            continue
        if not pending:
            start = number
            if not raw.strip() or raw.lstrip().startswith("#"):
                continue
        stripped = raw.rstrip()
        if stripped.endswith("\\") and not stripped.endswith("\\\\"):
            pending.append(stripped[:-1] + " ")
            continue
        line = "".join(pending) + raw
        pending = []
        heredocs = [(m.group(1) == "-", m.group(3)) for m in _HEREDOC_RE.finditer(line)]
        yield start, line


def _split_words(text: str) -> list[list[str]] | None:
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|()")
    lexer.whitespace_split = True
    groups: list[list[str]] = [[]]
    try:
        for token in lexer:
            if token and set(token) <= _PUNCT:
                groups.append([])
            elif token != "$":  # the `$` of `$(…)`: the command inside is read as one
                groups[-1].append(token)
    except ValueError:  # an unterminated quote: nothing reliable to read
        return None
    return [g for g in groups if g]


def _wrapper_name(word: str) -> str:
    """A wrapper's name as written or by an absolute path: ``/usr/bin/env`` → ``env``."""
    return posixpath.basename(word) if word.startswith("/") else word


def unwrap_command(words: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """Drop shell keywords, ``NAME=value`` assignments and wrappers in front of a command.

    Wrappers are ``sudo``/``doas``, ``env`` (its options; ``-S``/``--split-string`` is split and
    read on), ``timeout`` (with its duration), ``nice``, ``nohup``, ``exec``, ``xargs`` … —
    also when named by path (``/usr/bin/env npx …`` is ``npx …``).

    Args:
        words: one simple command's words, quotes removed.

    Returns:
        ``(env, argv)``: the assignments made in front (and through ``env``), and the words
        from the program on (empty when nothing is left).
    """
    words = list(words)
    env: dict[str, str] = {}
    i = 0
    while i < len(words):
        w = words[i]
        name = _wrapper_name(w)
        if w in _KEYWORDS:
            i += 1
        elif _ASSIGN_RE.match(w):
            key, _, value = w.partition("=")
            env[key] = value
            i += 1
        elif name in ("sudo", "doas"):
            i += 1
            while i < len(words) and words[i].startswith("-"):
                i += 2 if words[i] in ("-u", "-g", "-C", "-D", "-h", "-p", "-U") else 1
        elif name == "env":
            i += 1
            while i < len(words) and (words[i].startswith("-") or _ASSIGN_RE.match(words[i])):
                a = words[i]
                if _ASSIGN_RE.match(a):
                    key, _, value = a.partition("=")
                    env[key] = value
                elif a == "--":
                    i += 1
                    break
                elif a in ("-S", "--split-string") or a.startswith(("-S", "--split-string=")):
                    inline = a != "-S" and a != "--split-string"
                    text = (
                        (a.partition("=")[2] if a.startswith("--") else a[2:])
                        if inline
                        else (words[i + 1] if i + 1 < len(words) else "")
                    )
                    try:
                        split = shlex.split(text)
                    except ValueError:  # an unterminated quote: nothing reliable to read
                        return env, []
                    inner_env, argv = unwrap_command(split + words[i + (1 if inline else 2) :])
                    return {**env, **inner_env}, argv
                i += 2 if a in ("-u", "-C", "--unset", "--chdir") else 1
        elif name in (
            "timeout",
            "nice",
            "ionice",
            "stdbuf",
            "nohup",
            "command",
            "exec",
            "xargs",
            "chronic",
            "retry",
        ):
            i += 1
            while i < len(words) and words[i].startswith("-"):
                i += 2 if words[i] in ("-n", "-s", "-k", "-c", "-I", "-L", "-P") else 1
            if name == "timeout" and i < len(words):
                i += 1  # the duration
        else:
            break
    return env, words[i:]


def shell_commands(text: str, *, _depth: int = 0) -> list[Command]:
    """The simple commands of a shell script, in order.

    Pipelines, lists (``;``, ``&&``, ``||``, ``&``) and sub-shells are split into their
    commands; ``bash -c 'CMD'`` (and ``sh -c``) yields the commands of ``CMD`` too. The reading
    is static: no expansion, no functions followed.

    Args:
        text: the script.

    Returns:
        The commands with their line.
    """
    out: list[Command] = []
    for line, logical in shell_lines(text):
        for words in _split_words(logical) or []:
            env, argv = unwrap_command(words)
            if not argv:
                continue
            cmd = Command(line, tuple(argv), env)
            out.append(cmd)
            if cmd.program in _SHELLS and _depth < 3:
                for k, arg in enumerate(argv[1:-1], start=1):
                    if arg.startswith("-") and "c" in arg[1:] and not arg.startswith("--"):
                        for inner in shell_commands(argv[k + 1], _depth=_depth + 1):
                            out.append(Command(line, inner.argv, {**env, **inner.env}))
                        break
    return out


# -- what a command fetches --------------------------------------------------------------------

_LOCAL_HOSTS = frozenset({"localhost", "0.0.0.0", "::1", "host.cairn.internal"})
_PIP_VALUE_FLAGS = frozenset(
    {
        "-r",
        "--requirement",
        "-c",
        "--constraint",
        "-i",
        "--index-url",
        "--extra-index-url",
        "-t",
        "--target",
        "--prefix",
        "--root",
        "--cache-dir",
        "--python",
        "-p",
        "--log",
        "--src",
        "-f",
        "--find-links",
        "--platform",
        "--config-settings",
        "-C",
        "--index",
        "--default-index",
        "--from",
        "--python-version",
        "--implementation",
        "--abi",
        "--upgrade-strategy",
        "--progress-bar",
        "--report",
        "--trusted-host",
        "--proxy",
        "--timeout",
        "--retries",
        "--exists-action",
        "--only-binary",
        "--no-binary",
        "--group",
        "--extra",
        "--directory",
        "--project",
        "--package",
        "--env-file",
        "--python-platform",
        "--with",
        "--with-requirements",
        "--with-editable",
        "-w",
    }
)
"""Options of pip/uv/uvx that take a value (the next word is not a package)."""
_UV_FETCH_SUBCOMMANDS = frozenset({"add", "sync", "lock", "export"})
_OS_INSTALLERS = {
    "apt-get": {
        "install",
        "update",
        "upgrade",
        "dist-upgrade",
        "full-upgrade",
        "source",
        "download",
        "build-dep",
    },
    "apt": {"install", "update", "upgrade", "full-upgrade", "reinstall", "source", "download"},
    "aptitude": {"install", "update", "upgrade"},
    "apk": {"add", "update", "upgrade", "fetch"},
    "yum": {"install", "update", "upgrade", "makecache", "groupinstall"},
    "dnf": {"install", "update", "upgrade", "makecache", "groupinstall"},
    "microdnf": {"install", "update", "upgrade"},
    "zypper": {"install", "in", "update", "up", "refresh", "ref"},
    "conda": {"install", "create", "update", "upgrade"},
    "mamba": {"install", "create", "update", "upgrade"},
    "micromamba": {"install", "create", "update"},
    "npm": {"install", "i", "ci", "add", "update", "exec", "x", "init"},
    "pnpm": {"add", "install", "i", "dlx", "update", "up"},
    "yarn": {"add", "install", "dlx", "up", "upgrade"},
    "bun": {"add", "install", "i", "x"},
    "gem": {"install", "update"},
    "cargo": {"install", "fetch"},
    "go": {"install", "get"},
    "pipx": {"install", "run", "inject", "upgrade", "reinstall"},
    "brew": {"install", "upgrade", "update"},
}
_ALWAYS_FETCH = frozenset({"npx", "bunx", "pnpx"})


def _positionals(args: tuple[str, ...] | list[str], value_flags: frozenset[str]) -> list[str]:
    out: list[str] = []
    it = iter(args)
    for a in it:
        if a.startswith("-"):
            if "=" not in a and a in value_flags:
                next(it, None)
            continue
        out.append(a)
    return out


def _flag_values(args: tuple[str, ...], names: tuple[str, ...]) -> list[str]:
    out: list[str] = []
    for k, a in enumerate(args):
        for name in names:
            if a == name and k + 1 < len(args):
                out.append(args[k + 1])
            elif a.startswith(name + "=") and name.startswith("--"):
                out.append(a.split("=", 1)[1])
    return out


def external_host(arg: str) -> str | None:
    """The host of a URL argument when it is outside the sandbox and its own services.

    Args:
        arg: one word (``https://pypi.org/simple``, ``git@github.com:o/r.git``, ``-o``).

    Returns:
        The host name, or ``None`` for a non-URL, a variable, loopback, ``*.localhost`` or a
        single-label name (a compose service or container).
    """
    m = re.match(r"^git@([^:/\s]+):", arg)
    if m:
        host = m.group(1)
    else:
        if not re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", arg.removeprefix("--url=")):
            return None
        try:
            host = urlsplit(arg.removeprefix("--url=")).hostname or ""
        except ValueError:
            return None
    if not host or "$" in arg.split("/")[2 if "://" in arg else 0] or "{" in host:
        return None
    host = host.lower().rstrip(".")
    if (
        host in _LOCAL_HOSTS
        or host.endswith(".localhost")
        or host.startswith("127.")
        or "." not in host
        and ":" not in host
    ):
        return None
    return host


def _offline_env(env: Mapping[str, str]) -> bool:
    return any(
        env.get(k, "").lower() in ("1", "true", "yes")
        for k in ("UV_OFFLINE", "PIP_NO_INDEX", "NPM_CONFIG_OFFLINE", "UV_NO_INDEX")
    )


def fetch_of(
    cmd: Command,
    script_env: Mapping[str, str] | None = None,
    script_deps: Mapping[str, list[str]] | None = None,
) -> str | None:
    """What a command downloads or installs at run time, if anything.

    Args:
        cmd: the command.
        script_env: variables the script exported before it (``UV_OFFLINE=1``, …).
        script_deps: Python file name (base name) → its PEP 723 dependencies, for
            ``uv run FILE.py``.

    Returns:
        A short description (``"pip install"``, ``"curl https://example.org"`` …), or
        ``None`` when the command fetches nothing (or says it works offline:
        ``--offline``, ``--no-index``, ``UV_OFFLINE=1``, ``PIP_NO_INDEX=1``).
    """
    env = {**(script_env or {}), **cmd.env}
    argv, prog = cmd.argv, cmd.program
    args = argv[1:]
    offline = _offline_env(env) or "--offline" in args or "--no-index" in args
    if prog == "python" and args[:2] == ("-m", "pip"):
        prog, args = "pip", args[2:]
    elif prog == "python" and args[:2] == ("-m", "uv"):
        prog, args = "uv", args[2:]
    sub = _positionals(args, _PIP_VALUE_FLAGS)[:1]
    first = sub[0] if sub else ""
    if prog == "pip":
        if first in ("install", "download", "wheel") and not offline:
            return f"pip {first}"
        return None
    if prog == "uv":
        if offline:
            return None
        rest = args[args.index(first) + 1 :] if first in args else ()
        if first == "pip":
            inner = _positionals(rest, _PIP_VALUE_FLAGS)[:1]
            if inner and inner[0] in ("install", "sync", "compile"):
                return f"uv pip {inner[0]}"
            return None
        if first == "tool":
            inner = _positionals(rest, _PIP_VALUE_FLAGS)[:1]
            if inner and inner[0] in ("install", "run", "upgrade"):
                return f"uv tool {inner[0]}"
            return None
        if first == "python" and _positionals(rest, _PIP_VALUE_FLAGS)[:1] == ["install"]:
            return "uv python install"
        if first in _UV_FETCH_SUBCOMMANDS:
            return f"uv {first}"
        if first == "run":
            if _flag_values(tuple(rest), ("--with", "-w", "--with-requirements", "--with-editable")):
                return "uv run --with"
            target = _positionals(rest, _PIP_VALUE_FLAGS)[:1]
            if target and target[0].endswith(".py") and script_deps is not None:
                deps = script_deps.get(posixpath.basename(target[0]))
                if deps:
                    return f"uv run {target[0]} (its inline dependencies)"
        return None
    if prog in ("uvx",):
        return None if offline else "uvx"
    if prog in _ALWAYS_FETCH:
        if offline or "--no-install" in args or "--no" in args:
            return None
        return prog
    if prog == "pacman":
        return "pacman -S" if any(a.startswith("-S") for a in args) else None
    if prog in _OS_INSTALLERS:
        if offline or (prog == "apk" and "--no-network" in args):
            return None
        if first in _OS_INSTALLERS[prog] or (prog == "yarn" and not sub):
            return f"{prog} {first}".strip()
        return None
    if prog in ("curl", "wget"):
        for a in args:
            host = external_host(a)
            if host:
                return f"{prog} {host}"
        return None
    if prog == "git" and first in ("clone", "fetch", "pull", "submodule", "ls-remote"):
        for a in args:
            host = external_host(a)
            if host:
                return f"git {first} {host}"
        return None
    return None


def command_python_requirements(cmd: Command) -> list[str]:
    """The Python requirements a command installs by name (``pip install X``, ``uvx X``,
    ``uv run --with X``, ``uv tool install X``, ``uv pip install X``, ``pipx install X``).

    Args:
        cmd: the command.

    Returns:
        Requirement strings as written (local paths and wheel files excluded); ``[]`` when the
        install is constrained (``-c FILE``) or reads a requirements file only.
    """
    argv, prog = cmd.argv, cmd.program
    args = list(argv[1:])
    if prog == "python" and args[:2] == ["-m", "pip"]:
        prog, args = "pip", args[2:]
    if "-c" in args or "--constraint" in args or any(a.startswith("--constraint=") for a in args):
        return []
    pos = _positionals(args, _PIP_VALUE_FLAGS)
    out: list[str] = []
    if prog == "pip" and pos[:1] == ["install"]:
        out = pos[1:]
    elif prog == "uv" and pos[:2] == ["pip", "install"]:
        out = pos[2:]
    elif prog == "uv" and pos[:2] == ["tool", "install"]:
        out = pos[2:3]
    elif prog == "pipx" and pos[:1] == ["install"]:
        out = pos[1:]
    elif prog == "uvx" or (prog == "uv" and pos[:2] == ["tool", "run"]):
        src = _flag_values(tuple(args), ("--from",))
        tool = pos[:1] if prog == "uvx" else pos[2:3]
        out = src or tool
    if prog in ("uv", "uvx"):
        for value in _flag_values(tuple(args), ("--with", "-w")):
            out += [v.strip() for v in value.split(",") if v.strip()]
    return [r for r in out if not _is_local_requirement(r)]


def _is_local_requirement(req: str) -> bool:
    return (
        not req
        or "$" in req
        or req.startswith((".", "/", "~", "file:"))
        or req.endswith((".whl", ".tar.gz", ".zip", ".txt"))
        and "://" not in req
    )


_REQ_RE = re.compile(
    r"^\s*(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*"
    r"(?:\[[^\]]*\])?\s*(?P<rest>[^;]*)"
)
_EXACT_RE = re.compile(r"^(===\s*\S+|==\s*[^*\s,]+)$")


def requirement_pinned(req: str) -> bool | None:
    """Whether a PEP 508 requirement pins one exact version.

    Args:
        req: a requirement as written (``pytest==8.3.4``, ``requests>=2``,
            ``pkg @ git+https://…@<commit>``).

    Returns:
        ``True`` for ``==X`` (no ``*``) or ``===X``, or a URL pinned to a 40-hex commit or a
        ``#sha256=`` hash; ``False`` for anything looser; ``None`` when it is not a named
        requirement (a local path, a variable) and the question does not apply.
    """
    if _is_local_requirement(req.strip()):
        return None
    m = _REQ_RE.match(req)
    if not m:
        return None
    rest = m.group("rest").strip()
    if rest.startswith("@"):
        url = rest[1:].strip()
        if url.startswith("file:"):
            return None
        return bool(re.search(r"@[0-9a-fA-F]{40}(?:[#&].*)?$|#sha256=[0-9a-fA-F]{64}$", url))
    rest = rest.strip("()").strip()
    clauses = [c.strip() for c in rest.split(",") if c.strip()]
    return any(_EXACT_RE.match(c) for c in clauses)


# -- Dockerfiles -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    """One Dockerfile instruction.

    Attributes:
        line: 1-based line where it starts.
        keyword: upper-case instruction (``FROM``, ``COPY`` …).
        flags: leading ``--name[=value]`` options, in order.
        args: the arguments after the flags: the JSON array's items for the exec form, else
            the words (shell-split; the raw text when it cannot be split).
    """

    line: int
    keyword: str
    flags: tuple[str, ...]
    args: tuple[str, ...]

    def flag(self, name: str) -> str | None:
        """The value of ``--name=value`` (``""`` for a bare ``--name``), or ``None``."""
        for f in self.flags:
            key, eq, value = f[2:].partition("=")
            if key == name:
                return value if eq else ""
        return None


def dockerfile_instructions(text: str) -> list[Instruction]:
    """Read a Dockerfile's instructions (continuations joined, comments and heredoc bodies
    skipped; the ``# escape=`` parser directive honoured).

    Args:
        text: the Dockerfile.

    Returns:
        The instructions in order.
    """
    escape = "\\"
    lines = text.splitlines()
    for raw in lines:
        m = re.match(r"^#\s*([a-zA-Z]+)\s*=\s*(\S+)\s*$", raw)
        if not m:
            break
        if m.group(1).lower() == "escape" and m.group(2) in ("`", "\\"):
            escape = m.group(2)
    out: list[Instruction] = []
    pending: list[str] = []  # the parts of a continued instruction (joined once)
    start = 0
    heredocs: list[tuple[bool, str]] = []
    for number, raw in enumerate(lines, start=1):
        if heredocs:
            strip_tabs, word = heredocs[0]
            if (raw.lstrip("\t") if strip_tabs else raw).strip() == word:
                heredocs.pop(0)
            continue
        if raw.lstrip().startswith("#"):
            continue  # comments, also inside a continued instruction
        if not pending:
            if not raw.strip():
                continue
            start = number
        stripped = raw.rstrip()
        if stripped.endswith(escape):
            pending.append(stripped[:-1] + " ")
            continue
        logical = "".join(pending) + raw
        pending = []
        inst = _instruction(start, logical)
        if inst is None:
            continue
        if inst.keyword in ("RUN", "COPY", "ADD"):
            heredocs = [(m.group(1) == "-", m.group(3)) for m in _HEREDOC_RE.finditer(logical)]
        out.append(inst)
    return out


def _instruction(line: int, text: str) -> Instruction | None:
    parts = text.strip().split(None, 1)
    if not parts:
        return None
    keyword, rest = parts[0].upper(), parts[1] if len(parts) > 1 else ""
    flags: list[str] = []
    while True:
        m = re.match(r"^(--[A-Za-z-]+(?:=(?:\"[^\"]*\"|\S*))?)\s*", rest)
        if not m:
            break
        flags.append(m.group(1))
        rest = rest[m.end() :]
    args: tuple[str, ...]
    if rest.lstrip().startswith("["):
        try:
            value = json.loads(rest)
            args = (
                tuple(value)
                if isinstance(value, list) and all(isinstance(v, str) for v in value)
                else (rest,)
            )
        except ValueError:
            args = (rest,)
    else:
        try:
            args = tuple(shlex.split(rest, posix=True))
        except ValueError:
            args = tuple(rest.split())
    return Instruction(line, keyword, tuple(flags), args)


# -- PEP 723 inline script metadata -----------------------------------------------------------

_PEP723_RE = re.compile(r"(?m)^# /// (?P<type>[a-zA-Z0-9-]+)$\s(?P<content>(^#(| .*)$\s)+)^# ///$")
"""The reference regular expression of PEP 723 (packaging.python.org, "Inline script
metadata")."""


@dataclass(frozen=True)
class ScriptMetadata:
    """A ``# /// script`` block.

    Attributes:
        line: 1-based line of the ``# /// script`` opener.
        dependencies: ``(requirement, line)`` for every string in ``dependencies``.
        error: why the block is not valid TOML (then ``dependencies`` is empty).
    """

    line: int
    dependencies: tuple[tuple[str, int], ...] = ()
    error: str | None = None


def script_metadata(text: str) -> ScriptMetadata | None:
    """The first ``script`` block of a Python file (PEP 723), with lines.

    Args:
        text: the Python source.

    Returns:
        The block, or ``None`` when the file has none.
    """
    text = text.replace("\r\n", "\n")
    for m in _PEP723_RE.finditer(text):
        if m.group("type") != "script":
            continue
        opener = text.count("\n", 0, m.start()) + 1
        content = "".join(
            line[2:] if line.startswith("# ") else line[1:]
            for line in m.group("content").splitlines(keepends=True)
        )
        try:
            doc = tomllib.loads(content)
        except (tomllib.TOMLDecodeError, RecursionError) as exc:
            return ScriptMetadata(opener, (), str(exc))
        deps = doc.get("dependencies")
        if not isinstance(deps, list):
            return ScriptMetadata(opener)
        lines = toml_key_lines(content, line_offset=opener)
        return ScriptMetadata(
            opener,
            tuple(
                (d, lines.line(("dependencies", k)) or opener)
                for k, d in enumerate(deps)
                if isinstance(d, str)
            ),
        )
    return None


__all__ = [
    "Command",
    "Instruction",
    "ScriptMetadata",
    "command_python_requirements",
    "dockerfile_instructions",
    "external_host",
    "fetch_of",
    "requirement_pinned",
    "script_metadata",
    "shell_commands",
    "shell_lines",
    "unwrap_command",
]
