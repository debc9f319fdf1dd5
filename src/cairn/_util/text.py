"""Strict UTF-8 text for the files cairn reads from a task (instruction.md, task.toml, task.md).

A task's text is what the agent is graded against, so it is never decoded lossily: a file that
is not valid UTF-8 is reported with its byte offset and line. A UTF-8 byte-order mark is
accepted and dropped; CRLF line ends are accepted (callers that hand text on normalise them).
"""

from __future__ import annotations

BOM = "\ufeff"


class NotUtf8Error(ValueError):
    """A file's bytes are not valid UTF-8.

    Attributes:
        offset: the 0-based byte offset of the first invalid byte in the file.
        line: the 1-based line holding it.
    """

    def __init__(self, offset: int, line: int, bad: bytes) -> None:
        self.offset, self.line = offset, line
        super().__init__(f"not valid UTF-8: byte {offset} (line {line}) is 0x{bad.hex()}; "
                         "save the file as UTF-8")


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
        raise NotUtf8Error(exc.start, data.count(b"\n", 0, exc.start) + 1,
                           data[exc.start:exc.start + 1]) from None
    return text[1:] if text.startswith(BOM) else text
