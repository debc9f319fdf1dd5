"""Strict UTF-8 text for the files cairn reads from a task (instruction.md, task.toml, task.md).

A task's text is what the agent is graded against, so it is never decoded lossily: a file that
is not valid UTF-8 is reported with its byte offset and line. A UTF-8 byte-order mark is
accepted and dropped; CRLF line ends are accepted (callers that hand text on normalise them).
"""

from __future__ import annotations

import re

BOM = "\ufeff"


class NotUtf8Error(ValueError):
    """A file's bytes are not valid UTF-8.

    Attributes:
        offset: the 0-based byte offset of the first invalid byte in the file.
        line: the 1-based line holding it.
    """

    def __init__(self, offset: int, line: int, bad: bytes) -> None:
        self.offset, self.line = offset, line
        super().__init__(
            f"not valid UTF-8: byte {offset} (line {line}) is 0x{bad.hex()}; save the file as UTF-8"
        )


def decode_utf8(data: bytes) -> str:
    """Decode ``data`` as strict UTF-8, a leading byte-order mark dropped.

    Args:
        data: the file's bytes.

    Returns:
        The text (line ends as in the file).

    Raises:
        NotUtf8Error: with the byte offset and line of the first invalid byte.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotUtf8Error(
            exc.start, data.count(b"\n", 0, exc.start) + 1, data[exc.start : exc.start + 1]
        ) from None
    return text[1:] if text.startswith(BOM) else text


_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def printable(text: str, limit: int = 512) -> str:
    """Text safe to show on a terminal or a page: control characters (terminal escapes,
    newlines, bidirectional overrides) written as ``\\xNN``/``\\uNNNN``, at most ``limit``
    characters (a longer text ends with ``…``). For agent output such as a command line.

    Args:
        text: the raw text (hostile).
        limit: the bound, characters.

    Returns:
        The escaped, bounded text.
    """

    def esc(m: re.Match[str]) -> str:
        c = ord(m.group(0))
        return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"

    out = _UNPRINTABLE.sub(esc, text)
    return out if len(out) <= limit else out[: limit - 1] + "\u2026"
