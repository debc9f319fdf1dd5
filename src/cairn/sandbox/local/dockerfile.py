"""The Dockerfile subset the local backend runs (design §3.2), parsed and checked up front.

Supported: ``FROM`` (recorded; the host system stands in for the image, with a warning),
``ARG``, ``ENV``, ``WORKDIR``, ``USER``, ``SHELL``, ``VOLUME`` (the folder is created),
``COPY``/``ADD`` of files from the build context (``--chown``, ``--chmod``; ``ADD`` extracts
local tar archives) and ``RUN``. Harmless metadata (``LABEL``, ``MAINTAINER``, ``EXPOSE``,
``STOPSIGNAL``, ``CMD``) is recorded; ``HEALTHCHECK`` and ``ONBUILD`` are ignored with a
warning. Everything else — a second ``FROM`` (multi-stage), ``COPY --from``, ``ADD <url>``,
``RUN --mount``, heredocs, ``ENTRYPOINT`` (services it would start cannot run) — and compose
files are refused with :data:`NEEDS_DOCKER` in the message, before anything runs.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from cairn.errors import UnsupportedError
from cairn.layout import COMPOSE_FILE_NAMES

NEEDS_DOCKER = "this environment needs -e docker"
COMPOSE_FILES = COMPOSE_FILE_NAMES

SUPPORTED = {"FROM", "ARG", "ENV", "WORKDIR", "USER", "SHELL", "VOLUME", "COPY", "ADD", "RUN"}
RECORDED = {"LABEL", "MAINTAINER", "EXPOSE", "STOPSIGNAL", "CMD"}
IGNORED = {"HEALTHCHECK", "ONBUILD"}
_URL = re.compile(r"^(https?|git|ssh)://|^git@|\.git$", re.IGNORECASE)
_HEREDOC = re.compile(r"<<-?\s*['\"]?[A-Za-z_][A-Za-z0-9_]*['\"]?")
_FLAG = re.compile(r"^--([a-z-]+)(?:=(.*))?$")


class DockerfileError(ValueError):
    """The Dockerfile is malformed (a task error when building; docker would fail too)."""


@dataclass(frozen=True)
class Instruction:
    """One logical Dockerfile line.

    Attributes:
        keyword: the instruction, upper case (``RUN``).
        args: the raw text after the keyword and its flags.
        flags: ``--name=value`` options before the arguments (``{"chown": "1000"}``).
        json_args: the exec (JSON array) form, or ``None`` for the shell form.
        line: 1-based line number where it starts.
    """

    keyword: str
    args: str
    flags: dict[str, str]
    json_args: list[str] | None
    line: int


@dataclass
class ImageMeta:
    """What a layer records besides its files (kept in the layer's ``meta.json``).

    Attributes:
        from_image: the ``FROM`` image the host stood in for.
        workdir: the last ``WORKDIR`` (``None``: not set, i.e. ``/``).
        env: ``ENV`` variables, in order.
        user: the last ``USER`` (``None``: root).
        shell: the ``SHELL`` for shell-form ``RUN``.
        cmd: the recorded ``CMD`` (never run).
        labels: ``LABEL`` pairs.
        layer_id: the layer's identifier (``local:<hash>``), recorded as image id.
    """

    from_image: str | None = None
    workdir: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    user: str | None = None
    shell: list[str] = field(default_factory=lambda: ["/bin/sh", "-c"])
    cmd: list[str] | str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    layer_id: str | None = None

    def to_json(self) -> dict:
        """A JSON-able dict."""
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, data: dict) -> ImageMeta:
        """The inverse of :meth:`to_json` (unknown keys ignored)."""
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


# ---- parsing ------------------------------------------------------------------------------
def parse_dockerfile(text: str) -> list[Instruction]:
    """Split a Dockerfile into instructions (continuations joined, comments dropped).

    Raises:
        UnsupportedError: a parser directive other than ``syntax``/``escape=\\``.
        DockerfileError: a line that is not an instruction.
    """
    lines = text.splitlines()
    out: list[Instruction] = []
    i = 0
    in_directives = True
    while i < len(lines):
        raw = lines[i]
        stripped = raw.strip()
        if in_directives:
            m = re.match(r"^#\s*([a-zA-Z]+)\s*=\s*(.*?)\s*$", stripped)
            if m:
                name, value = m.group(1).lower(), m.group(2)
                if name == "escape" and value != "\\":
                    raise UnsupportedError(
                        f"Dockerfile line {i + 1}: escape={value} is not "
                        f"supported by the local backend; {NEEDS_DOCKER}"
                    )
                i += 1
                continue
            in_directives = False
        if not stripped or stripped.startswith("#"):
            i += 1
            continue
        start = i
        parts = [raw.rstrip()]
        while parts[-1].endswith("\\") and i + 1 < len(lines):
            parts[-1] = parts[-1][:-1]
            i += 1
            nxt = lines[i]
            if nxt.strip().startswith("#"):
                parts.append("\\")
                continue
            parts.append(nxt.rstrip())
        parts[-1] = parts[-1].removesuffix("\\")
        logical = "".join(p for p in parts if p != "\\").strip()
        i += 1
        m = re.match(r"^([A-Za-z]+)(?:\s+(.*))?$", logical, re.DOTALL)
        if not m:
            raise DockerfileError(f"Dockerfile line {start + 1}: not an instruction: {logical!r}")
        keyword, rest = m.group(1).upper(), (m.group(2) or "").strip()
        flags: dict[str, str] = {}
        if keyword in {"FROM", "COPY", "ADD", "RUN", "HEALTHCHECK"}:
            while rest.startswith("--"):
                token, _, remainder = rest.partition(" ")
                fm = _FLAG.match(token)
                if not fm:
                    break
                flags[fm.group(1)] = fm.group(2) if fm.group(2) is not None else "true"
                rest = remainder.strip()
        json_args = None
        if rest.startswith("[") and keyword in {"RUN", "CMD", "ENTRYPOINT", "SHELL", "COPY", "ADD", "VOLUME"}:
            try:
                parsed = json.loads(rest)
            except ValueError:
                parsed = None
            if isinstance(parsed, list) and all(isinstance(a, str) for a in parsed):
                json_args = parsed
        out.append(Instruction(keyword, rest, flags, json_args, start + 1))
    return out


def refusal(ins: Instruction) -> str | None:
    """Why the local backend cannot run ``ins``, or ``None`` when it can."""
    kw = ins.keyword
    where = f"Dockerfile line {ins.line}"
    if kw in IGNORED or kw in RECORDED:
        return None
    if kw == "ENTRYPOINT":
        return f"{where}: ENTRYPOINT (services an image entrypoint starts cannot run on the local backend)"
    if kw not in SUPPORTED:
        return f"{where}: instruction {kw} is not in the local backend's Dockerfile subset"
    if kw == "FROM" and set(ins.flags) - {"platform"}:
        return f"{where}: FROM with {sorted(ins.flags)}"
    if kw in {"COPY", "ADD"}:
        if "from" in ins.flags:
            return f"{where}: {kw} --from (multi-stage or image copies)"
        bad = set(ins.flags) - {"chown", "chmod", "link"}
        if bad:
            return f"{where}: {kw} --{min(bad)}"
        if _HEREDOC.search(ins.args) and ins.json_args is None:
            return f"{where}: {kw} with a heredoc"
        if kw == "ADD":
            srcs = (ins.json_args or ins.args.split())[:-1]
            if any(_URL.search(s) for s in srcs):
                return f"{where}: ADD of a URL or git repository"
    if kw == "RUN":
        if ins.flags:
            return f"{where}: RUN --{min(ins.flags)}"
        if ins.json_args is None and _HEREDOC.search(ins.args):
            return f"{where}: RUN with a heredoc"
    return None


def analyze(instructions: list[Instruction]) -> list[str]:
    """Check a parsed Dockerfile against the subset.

    Returns:
        Warnings (the host stands in for ``FROM``; ignored instructions).

    Raises:
        UnsupportedError: something outside the subset; the message ends with
            :data:`NEEDS_DOCKER`.
    """
    warnings: list[str] = []
    froms = [ins for ins in instructions if ins.keyword == "FROM"]
    if len(froms) > 1:
        raise UnsupportedError(
            f"multi-stage Dockerfile (a second FROM at line {froms[1].line}) is not supported "
            f"by the local backend; {NEEDS_DOCKER}"
        )
    for ins in instructions:
        why = refusal(ins)
        if why:
            raise UnsupportedError(f"{why}; {NEEDS_DOCKER}")
        if ins.keyword in IGNORED:
            warnings.append(f"Dockerfile line {ins.line}: {ins.keyword} is ignored by the local backend")
    if froms:
        image = froms[0].args.split()[0] if froms[0].args else "?"
        warnings.append(
            f"local backend: the host system stands in for the base image {image} "
            "(FROM is recorded, not pulled)"
        )
    return warnings


def check_env_dir(env_dir: Path | None, docker_image: str | None = None) -> list[str]:
    """Check an environment folder for the local backend, before anything runs.

    Returns:
        Warnings (see :func:`analyze`; a ``docker_image`` stood in for by the host).

    Raises:
        UnsupportedError: a compose file, or a Dockerfile outside the subset (the message
            contains :data:`NEEDS_DOCKER`).
    """
    if env_dir is None:
        return (
            [f"local backend: the host system stands in for docker_image {docker_image}"]
            if docker_image
            else []
        )
    for name in COMPOSE_FILES:
        if (env_dir / name).exists():
            raise UnsupportedError(
                f"{name}: multi-container (compose) environments are not "
                f"supported by the local backend; {NEEDS_DOCKER}"
            )
    dockerfile = env_dir / "Dockerfile"
    if not dockerfile.exists():
        return (
            [f"local backend: the host system stands in for docker_image {docker_image}"]
            if docker_image
            else []
        )
    try:
        instructions = parse_dockerfile(dockerfile.read_text(encoding="utf-8", errors="replace"))
    except DockerfileError:
        return []  # malformed: the build reports it as build_failed
    return analyze(instructions)


# ---- words and variables ------------------------------------------------------------------
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _expand_at(s: str, i: int, env: dict[str, str]) -> tuple[str, int]:
    """Expand the variable reference starting at ``s[i] == '$'``; returns (text, next i)."""
    if i + 1 < len(s) and s[i + 1] == "{":
        end = s.find("}", i + 2)
        if end < 0:
            raise DockerfileError(f"missing '}}' in {s!r}")
        body = s[i + 2 : end]
        m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)(?::([-+])(.*))?$", body, re.DOTALL)
        if not m:
            raise DockerfileError(f"bad substitution ${{{body}}}")
        name, op, word = m.group(1), m.group(2), m.group(3)
        value = env.get(name)
        if op == "-":
            value = value if value else expand(word or "", env)
        elif op == "+":
            value = expand(word or "", env) if value else ""
        return value or "", end + 1
    m = _NAME.match(s, i + 1)
    if not m:
        return "$", i + 1
    return env.get(m.group(0), ""), m.end()


def split_words(s: str, env: dict[str, str], *, expand_vars: bool = True) -> list[str]:
    """Split ``s`` into words the way Docker does for ``ENV``/``COPY``/…: quotes, backslash
    escapes and ``$VAR``/``${VAR}``/``${VAR:-w}``/``${VAR:+w}`` (not inside single quotes).

    Raises:
        DockerfileError: an unterminated quote or bad substitution.
    """
    words: list[str] = []
    cur: list[str] = []
    have = False
    i = 0
    while i < len(s):
        c = s[i]
        if c in " \t\n":
            if have:
                words.append("".join(cur))
                cur, have = [], False
            i += 1
            continue
        have = True
        if c == "\\" and i + 1 < len(s):
            cur.append(s[i + 1])
            i += 2
        elif c == "'":
            j = s.find("'", i + 1)
            if j < 0:
                raise DockerfileError(f"unterminated quote in {s!r}")
            cur.append(s[i + 1 : j])
            i = j + 1
        elif c == '"':
            i += 1
            while i < len(s) and s[i] != '"':
                if s[i] == "\\" and i + 1 < len(s) and s[i + 1] in '"\\$':
                    cur.append(s[i + 1])
                    i += 2
                elif s[i] == "$" and expand_vars:
                    text, i = _expand_at(s, i, env)
                    cur.append(text)
                else:
                    cur.append(s[i])
                    i += 1
            if i >= len(s):
                raise DockerfileError(f"unterminated quote in {s!r}")
            i += 1
        elif c == "$" and expand_vars:
            text, i = _expand_at(s, i, env)
            cur.append(text)
        else:
            cur.append(c)
            i += 1
    if have:
        words.append("".join(cur))
    return words


def expand(s: str, env: dict[str, str]) -> str:
    """Expand variables and remove quotes in ``s`` as one word (spaces kept)."""
    return " ".join(split_words(s, env)) if s.strip() else ""


def key_values(args: str, env: dict[str, str]) -> list[tuple[str, str]]:
    """Parse ``ENV``/``LABEL``/``ARG``-style arguments: ``k=v k2="v 2"`` or legacy ``k v``.

    Raises:
        DockerfileError: malformed arguments.
    """
    first = args.split(None, 1)
    if not first:
        raise DockerfileError("missing arguments")
    if "=" not in first[0]:
        if len(first) == 1:
            raise DockerfileError(f"{first[0]!r} has no value")
        return [(first[0], expand(first[1], env))]
    pairs = []
    for word in split_words(args, env):
        if "=" not in word:
            raise DockerfileError(f"{word!r} is not key=value")
        k, v = word.split("=", 1)
        pairs.append((k, v))
    return pairs


# ---- .dockerignore ------------------------------------------------------------------------
def _glob_regex(pattern: str) -> re.Pattern[str]:
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            if i < len(pattern) and pattern[i] == "/":
                out[-1] = "(?:.*/)?"
                i += 1
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = pattern.find("]", i + 1)
            if j < 0:
                out.append(re.escape(c))
            else:
                out.append("[" + pattern[i + 1 : j].replace("!", "^", 1) + "]")
                i = j
        elif c == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 1
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("^" + "".join(out) + "$")


class DockerIgnore:
    """``.dockerignore`` rules: later rules win, ``!`` re-includes, a matched folder excludes
    everything below it.

    Args:
        text: the file's content (``""`` for none).
    """

    def __init__(self, text: str = "") -> None:
        self.rules: list[tuple[bool, re.Pattern[str]]] = []
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            negate = line.startswith("!")
            pat = line[1:].strip() if negate else line
            pat = re.sub(r"/+", "/", pat).strip("/")
            pat = "/".join(p for p in pat.split("/") if p not in ("", "."))
            if pat:
                self.rules.append((negate, _glob_regex(pat)))

    def ignored(self, rel: str) -> bool:
        """Whether the context-relative POSIX path ``rel`` is excluded."""
        parts = rel.split("/")
        prefixes = ["/".join(parts[:k]) for k in range(1, len(parts) + 1)]
        result = False
        for negate, rx in self.rules:
            if any(rx.match(p) for p in prefixes):
                result = not negate
        return result
