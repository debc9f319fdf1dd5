"""Line numbers of keys in task.toml and YAML front-matter (for findings, design §2).

``tomllib`` returns plain dicts without positions, so :func:`toml_key_lines` re-scans the
source text (already known to be valid TOML) and records the line where every key path is
written: table headers (``[environment]``), array-of-tables entries (each ``[[steps]]``
occurrence gets its index), ``key = value`` lines, dotted keys, keys inside inline tables and
the elements of arrays. Paths are tuples of keys (str) and array indices (int), the same shape
as the parsed document, e.g. ``("steps", 1, "min_reward")``.
"""

from __future__ import annotations

import bisect
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field

KeyPath = tuple[str | int, ...]

_BARE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


@dataclass(frozen=True)
class KeyLines:
    """Where each key path of a document is written.

    Attributes:
        lines: key path → 1-based line number.
    """

    lines: Mapping[KeyPath, int] = field(default_factory=dict)

    def line(self, path: KeyPath) -> int | None:
        """The line of ``path``, else of its longest recorded prefix.

        Args:
            path: a key path such as ``("environment", "memroy_mb")``.

        Returns:
            A 1-based line number, or ``None`` when no prefix of the path is recorded
            (a finding about the root of the document).
        """
        for n in range(len(path), 0, -1):
            hit = self.lines.get(tuple(path[:n]))
            if hit is not None:
                return hit
        return None


def toml_key_lines(text: str, *, line_offset: int = 0) -> KeyLines:
    """Record the line of every key path in a TOML document.

    Args:
        text: the TOML source; must already parse with :mod:`tomllib`.
        line_offset: added to every line (for TOML front-matter inside task.md).

    Returns:
        The key lines.
    """
    scanner = _TomlScanner(text)
    scanner.run()
    return KeyLines({p: n + line_offset for p, n in scanner.lines.items()})


class _TomlScanner:
    """A position-tracking walk over valid TOML (TOML 1.0 grammar, as tomllib reads it)."""

    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0
        self.n = len(text)
        self.line_starts = [0] + [k + 1 for k, c in enumerate(text) if c == "\n"]
        self.lines: dict[KeyPath, int] = {}
        self.aot: dict[KeyPath, int] = {}  # array-of-tables path -> entries seen so far

    # -- helpers -------------------------------------------------------------------------
    def _line_at(self, pos: int) -> int:
        return bisect.bisect_right(self.line_starts, pos)

    def _record(self, path: KeyPath, pos: int, *, overwrite: bool = False) -> None:
        if overwrite or path not in self.lines:
            self.lines[path] = self._line_at(pos)

    def _peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.s[j] if j < self.n else ""

    def _skip_inline_ws(self) -> None:
        while self.i < self.n and self.s[self.i] in " \t":
            self.i += 1

    def _skip_ws_comments(self) -> None:
        """Skip spaces, newlines and comments."""
        while self.i < self.n:
            c = self.s[self.i]
            if c in " \t\r\n":
                self.i += 1
            elif c == "#":
                while self.i < self.n and self.s[self.i] != "\n":
                    self.i += 1
            else:
                return

    # -- grammar -------------------------------------------------------------------------
    def run(self) -> None:
        prefix: KeyPath = ()
        while True:
            self._skip_ws_comments()
            if self.i >= self.n:
                return
            start = self.i
            if self.s.startswith("[[", self.i):
                self.i += 2
                keys = self._key()
                self._skip_inline_ws()
                self.i += 2  # ]]
                prefix = self._resolve(keys, array=True)
                self._record(prefix, start, overwrite=True)
                self._record(prefix[:-1], start)
            elif self._peek() == "[":
                self.i += 1
                keys = self._key()
                self._skip_inline_ws()
                self.i += 1  # ]
                prefix = self._resolve(keys, array=False)
                self._record(prefix, start, overwrite=True)
            else:
                self._keyval(prefix)

    def _resolve(self, keys: list[str], *, array: bool) -> KeyPath:
        path: KeyPath = ()
        for j, key in enumerate(keys):
            path += (key,)
            if array and j == len(keys) - 1:
                count = self.aot.get(path, 0)
                self.aot[path] = count + 1
                path += (count,)
            elif path in self.aot:
                path += (self.aot[path] - 1,)
        return path

    def _key(self) -> list[str]:
        """A possibly dotted key; leaves the position after it (and trailing blanks)."""
        parts: list[str] = []
        while True:
            self._skip_inline_ws()
            c = self._peek()
            if c == '"':
                start = self.i
                self._basic_string()
                parts.append(tomllib.loads("k = " + self.s[start : self.i])["k"])
            elif c == "'":
                end = self.s.index("'", self.i + 1)
                parts.append(self.s[self.i + 1 : end])
                self.i = end + 1
            else:
                start = self.i
                while self.i < self.n and self.s[self.i] in _BARE:
                    self.i += 1
                parts.append(self.s[start : self.i])
            self._skip_inline_ws()
            if self._peek() == ".":
                self.i += 1
                continue
            return parts

    def _keyval(self, prefix: KeyPath) -> None:
        start = self.i
        keys = self._key()
        for j in range(1, len(keys)):
            self._record(prefix + tuple(keys[:j]), start)
        path = prefix + tuple(keys)
        self._record(path, start, overwrite=True)
        self._skip_inline_ws()
        self.i += 1  # =
        self._value(path)

    def _value(self, path: KeyPath) -> None:
        self._skip_inline_ws()
        s = self.s
        if s.startswith('"""', self.i):
            self._multiline('"""')
        elif s.startswith("'''", self.i):
            self._multiline("'''")
        elif self._peek() == '"':
            self._basic_string()
        elif self._peek() == "'":
            self.i = s.index("'", self.i + 1) + 1
        elif self._peek() == "{":
            self._inline_table(path)
        elif self._peek() == "[":
            self._array(path)
        else:
            while self.i < self.n and s[self.i] not in ",]}\n#":
                self.i += 1

    def _basic_string(self) -> None:
        self.i += 1
        while self.i < self.n:
            c = self.s[self.i]
            if c == "\\":
                self.i += 2
            elif c == '"':
                self.i += 1
                return
            else:
                self.i += 1

    def _multiline(self, quote: str) -> None:
        self.i += 3
        while self.i < self.n:
            if quote == '"""' and self.s[self.i] == "\\":
                self.i += 2
                continue
            if self.s.startswith(quote, self.i):
                self.i += 3
                extra = 0
                while extra < 2 and self._peek() == quote[0]:
                    self.i += 1
                    extra += 1
                return
            self.i += 1

    def _inline_table(self, path: KeyPath) -> None:
        self.i += 1
        while self.i < self.n:
            self._skip_ws_comments()
            if self._peek() == "}":
                self.i += 1
                return
            if self._peek() == ",":
                self.i += 1
                continue
            before = self.i
            self._keyval(path)
            if self.i == before:  # not valid TOML; never loop forever
                self.i += 1

    def _array(self, path: KeyPath) -> None:
        self.i += 1
        index = 0
        while self.i < self.n:
            self._skip_ws_comments()
            c = self._peek()
            if c == "]":
                self.i += 1
                return
            if c == ",":
                self.i += 1
                continue
            before = self.i
            self._record(path + (index,), self.i, overwrite=True)
            self._value(path + (index,))
            index += 1
            if self.i == before:  # not valid TOML; never loop forever
                self.i += 1


def yaml_key_lines(text: str, *, line_offset: int = 0) -> KeyLines:
    """Record the line of every key path in a YAML mapping document.

    Args:
        text: YAML source that :func:`yaml.safe_load` accepts.
        line_offset: added to every line (for YAML front-matter inside task.md).

    Returns:
        The key lines (empty when the document is not a mapping).
    """
    import yaml

    lines: dict[KeyPath, int] = {}
    root = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))

    def walk(node: object, path: KeyPath) -> None:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                key = getattr(key_node, "value", None)
                if not isinstance(key, str):
                    continue
                lines.setdefault(path + (key,), key_node.start_mark.line + 1 + line_offset)
                walk(value_node, path + (key,))
        elif isinstance(node, yaml.SequenceNode):
            for k, item in enumerate(node.value):
                lines.setdefault(path + (k,), item.start_mark.line + 1 + line_offset)
                walk(item, path + (k,))

    walk(root, ())
    return KeyLines(lines)
