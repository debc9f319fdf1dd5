"""A bounded output tail: what every backend keeps of an exec's stdout and stderr (design §3)."""

from __future__ import annotations


class TailBuffer:
    """Keeps the last ``cap`` bytes appended to it; memory stays below about ``2 * cap``.

    Attributes:
        cap: bytes kept.
        truncated: whether bytes were dropped from the front.
        discard: set to drop everything appended from now on (a reader draining a pipe that
            nobody will read).
    """

    def __init__(self, cap: int) -> None:
        self.cap = max(0, cap)
        self.buf = bytearray()
        self.truncated = False
        self.discard = False

    def append(self, data: bytes) -> None:
        """Add bytes, dropping the oldest beyond the cap (trimming is amortised)."""
        if self.discard:
            return
        self.buf += data
        if len(self.buf) > 2 * self.cap + 65536:
            self._trim()

    def _trim(self) -> None:
        if len(self.buf) > self.cap:
            del self.buf[: len(self.buf) - self.cap]
            self.truncated = True

    def data(self) -> bytes:
        """The kept tail as bytes (at most ``cap``)."""
        self._trim()
        return bytes(self.buf)

    def text(self) -> str:
        """The kept tail decoded as UTF-8 with replacement; a character cut at the front of a
        truncated tail is dropped rather than shown as a replacement character."""
        self._trim()
        data = bytes(self.buf)
        if self.truncated:
            i = 0
            while i < min(3, len(data)) and (data[i] & 0xC0) == 0x80:
                i += 1
            data = data[i:]
        return data.decode("utf-8", "replace")
