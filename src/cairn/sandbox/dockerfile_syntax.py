"""Which Dockerfile features need BuildKit, and the rewrite cairn applies before a build.

Pure text functions (no Docker). The docker backend builds a Dockerfile that uses BuildKit-only
syntax with BuildKit (design §3.1); the check (``cairn tasks check``, and the capability check
before a trial starts) uses :func:`buildkit_features` to refuse, with the reason, a Dockerfile
the engine at hand cannot build.

Features, by name:

- ``copy-chmod``: ``COPY --chmod`` / ``ADD --chmod``;
- ``copy-link``: ``COPY --link`` / ``ADD --link``;
- ``run-mount``: ``RUN --mount=…``; ``run-network``, ``run-security``: ``RUN --network``,
  ``RUN --security``;
- ``heredoc``: ``RUN <<EOF`` / ``COPY <<EOF`` (heredoc bodies);
- ``syntax``: a ``# syntax=`` parser directive (BuildKit would pull that frontend image).

:func:`rewrite_for_builtin_frontend` drops what only changes *how* the image is made, never
*what* is in it, so the engine's built-in frontend can build it without a registry: a
``# syntax=`` line naming the stock ``docker/dockerfile`` frontend, and ``--link`` (which only
makes a COPY layer independent of the ones below it for cache reuse).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_DIRECTIVE_RE = re.compile(r"^\s*#\s*(?P<key>[A-Za-z]+)\s*=\s*(?P<value>\S.*?)\s*$")
_STOCK_FRONTEND_RE = re.compile(
    r"^(docker\.io/)?docker/dockerfile(-upstream)?(:[0-9][0-9A-Za-z.\-]*)?(@sha256:[0-9a-f]{64})?$"
)
_INSTR_RE = re.compile(r"^\s*(?P<instr>[A-Za-z]+)\s+(?P<rest>.*)$", re.DOTALL)
_HEREDOC_RE = re.compile(r"<<-?\s*(?P<q>[\"']?)(?P<word>[A-Za-z_][A-Za-z0-9_]*)(?P=q)")
_LINK_RE = re.compile(r"(?<=\s)--link(?:=(?:true|false))?(?:[ \t]+|(?=\s))", re.IGNORECASE)


@dataclass(frozen=True)
class Feature:
    """One BuildKit-only feature a Dockerfile uses.

    Attributes:
        name: the feature (see the module docstring).
        line: 1-based line of the instruction (or directive) that uses it.
        text: the instruction as written (first line, stripped).
    """

    name: str
    line: int
    text: str


def _instructions(text: str) -> list[tuple[int, str, str]]:
    """``(line, logical instruction text, first physical line)`` with continuations joined and
    heredoc bodies skipped (a heredoc instruction is reported with its marker line)."""
    out: list[tuple[int, str, str]] = []
    lines = text.splitlines()
    i = 0
    in_directives = True
    while i < len(lines):
        raw = lines[i]
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            if stripped and in_directives and _DIRECTIVE_RE.match(stripped):
                out.append((i + 1, stripped, stripped))
            elif stripped:
                in_directives = False
            i += 1
            continue
        in_directives = False
        start, first = i + 1, raw.strip()
        logical = raw
        while logical.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            nxt = lines[i]
            if nxt.strip().startswith("#"):
                continue
            logical = logical.rstrip()[:-1] + " " + nxt
        out.append((start, logical.strip(), first))
        words = [m.group("word") for m in _HEREDOC_RE.finditer(logical)]
        m = _INSTR_RE.match(logical.strip())
        if words and m and m.group("instr").upper() in ("RUN", "COPY", "ADD"):
            for word in words:  # skip each body up to its terminator
                i += 1
                while i < len(lines) and lines[i].strip() != word:
                    i += 1
        i += 1
    return out


def buildkit_features(text: str) -> list[Feature]:
    """The BuildKit-only features a Dockerfile uses, in order.

    Args:
        text: the Dockerfile's text.

    Returns:
        One :class:`Feature` per use (an instruction using two features gives two).
    """
    found: list[Feature] = []
    for line, logical, first in _instructions(text):
        d = _DIRECTIVE_RE.match(logical)
        if logical.startswith("#"):
            if d and d.group("key").lower() == "syntax":
                found.append(Feature("syntax", line, first))
            continue
        m = _INSTR_RE.match(logical)
        if not m:
            continue
        instr, rest = m.group("instr").upper(), " " + m.group("rest") + " "
        flags = re.findall(r"(?<=\s)--([a-z-]+)", rest.split("<<")[0] if "<<" in rest else rest)
        if instr in ("COPY", "ADD"):
            if "chmod" in flags:
                found.append(Feature("copy-chmod", line, first))
            if "link" in flags:
                found.append(Feature("copy-link", line, first))
        if instr == "RUN":
            for flag in ("mount", "network", "security"):
                if flag in flags:
                    found.append(Feature(f"run-{flag}", line, first))
        if instr in ("RUN", "COPY", "ADD") and _HEREDOC_RE.search(rest):
            found.append(Feature("heredoc", line, first))
    return found


def syntax_frontend(text: str) -> str | None:
    """The image a ``# syntax=`` directive names, or ``None`` without one."""
    for f in buildkit_features(text):
        if f.name == "syntax":
            m = _DIRECTIVE_RE.match(f.text)
            return m.group("value") if m else None
    return None


def is_stock_frontend(image: str) -> bool:
    """Whether a ``# syntax=`` image is the stock Dockerfile frontend (``docker/dockerfile:1``,
    ``docker.io/docker/dockerfile:1.4``, ``docker/dockerfile-upstream:master`` excluded)."""
    m = _STOCK_FRONTEND_RE.match(image.strip())
    return m is not None and not m.group(2)


def rewrite_for_builtin_frontend(text: str) -> tuple[str, list[str]]:
    """The Dockerfile the engine's built-in BuildKit frontend builds without a registry.

    Drops a ``# syntax=`` line naming the stock frontend (BuildKit would pull that image; the
    built-in frontend reads the same language) and ``--link`` flags of COPY/ADD (they change
    layer reuse, not the files). Everything else is kept byte for byte.

    Args:
        text: the Dockerfile's text.

    Returns:
        ``(new text, notes)``: one human note per change made (empty when unchanged).
    """
    notes: list[str] = []
    lines = text.splitlines(keepends=True)
    features = buildkit_features(text)
    for f in features:
        if f.name == "syntax":
            m = _DIRECTIVE_RE.match(f.text)
            image = m.group("value") if m else ""
            if is_stock_frontend(image):
                lines[f.line - 1] = "\n"
                notes.append(
                    f"line {f.line}: `# syntax={image}` ignored: the engine's "
                    "built-in Dockerfile frontend builds it (no registry to pull from)"
                )
    link_lines = {f.line for f in features if f.name == "copy-link"}
    for n in sorted(link_lines):
        i = n - 1
        while i < len(lines):  # the flag may sit on a continuation line
            new = _LINK_RE.sub("", " " + lines[i])[1:]
            changed = new != lines[i]
            lines[i] = new
            if changed or not lines[i].rstrip().endswith("\\"):
                break
            i += 1
        notes.append(f"line {n}: `--link` dropped (same files; only layer reuse differs)")
    return "".join(lines), notes


def unsupported_by(features: list[Feature], supported: frozenset[str]) -> list[Feature]:
    """The features not in ``supported`` (after the rewrite, stock ``syntax`` and ``copy-link``
    are always buildable)."""
    out = []
    for f in features:
        if f.name == "copy-link":
            continue
        if f.name == "syntax":
            m = _DIRECTIVE_RE.match(f.text)
            if m and is_stock_frontend(m.group("value")):
                continue
        if f.name not in supported:
            out.append(f)
    return out


__all__ = [
    "Feature",
    "buildkit_features",
    "is_stock_frontend",
    "rewrite_for_builtin_frontend",
    "syntax_frontend",
    "unsupported_by",
]
