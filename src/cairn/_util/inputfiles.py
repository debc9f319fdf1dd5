"""Reading task and job files that may be hostile: regular files only, size-capped, and one
safe YAML loader (docs/task-format.md "File limits").

- :func:`read_input` opens a file only when it is a regular file (a FIFO would block the
  reader forever, a device would never end) and refuses one over :data:`MAX_INPUT_BYTES`.
- :func:`load_yaml` is the only YAML loader for task and job files: PyYAML's safe loader after
  one streaming pass over the parser's events that refuses nesting deeper than
  :data:`MAX_YAML_DEPTH` (PyYAML's composer recurses once per level and raised
  ``RecursionError`` at a few thousand) and documents whose aliases expand to more than
  :data:`MAX_YAML_NODES` nodes ("billion laughs": nine anchors of nine aliases each are
  387 million nodes for whatever walks the document) or refer to themselves. Ordinary anchors
  and merge keys (``x-base: &base …`` / ``<<: *base``, common in compose files) load as usual.

Every refusal is an :class:`InputFileError` naming the file and saying why; nothing here
lets ``RecursionError`` out.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

MAX_INPUT_BYTES = 1 << 20
"""The largest task or job file cairn parses: 1 MiB (task.toml, task.md, compose files,
Dockerfiles, scripts, instructions, job YAML). Real ones are a few KiB; the parsers take
seconds per MiB on a loaded machine, so a bigger cap only lets a broken file stall a check."""

MAX_YAML_DEPTH = 100
"""The deepest nesting of mappings and sequences a YAML file may have (compose files use < 10)."""

MAX_YAML_NODES = 1_000_000
"""The most nodes a YAML document may have with every alias expanded."""


class InputFileError(ValueError):
    """A task or job file cairn refuses to read or parse.

    Attributes:
        path: the file, as the caller named it.
        reason: why, without the path (``"is a FIFO, not a regular file"``).
        line: the 1-based line the problem is on, when known.
    """

    def __init__(self, path: Path | str, reason: str, line: int | None = None) -> None:
        self.path = Path(path)
        self.reason = reason
        self.line = line
        super().__init__(f"{path}: {reason}")


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a folder"),
    ):
        if test(mode):
            return name
    return "a special file"


def special_kind(path: Path) -> str | None:
    """What a path is when it exists but is not a regular file (symlinks followed).

    Args:
        path: any path.

    Returns:
        ``"a FIFO"``, ``"a socket"``, ``"a character device"``, ``"a block device"``,
        ``"a folder"``, ``"a special file"``; ``None`` for a regular file, a missing path or a
        dangling symlink.
    """
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) else _kind(mode)


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def read_input(path: Path | str, *, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of a task or job file, refusing what cannot be read safely.

    The file is opened non-blocking and checked with ``fstat`` before a byte is read, so a
    FIFO, socket or device is refused without waiting for a writer; at most ``limit + 1``
    bytes are ever read.

    Args:
        path: the file (symlinks are followed; callers decide whether a link is allowed).
        limit: the largest size accepted, in bytes.

    Returns:
        The file's bytes.

    Raises:
        InputFileError: the file is not a regular file, is larger than ``limit``, or cannot be
            opened or read (missing, no permission).
    """
    kind = special_kind(Path(path))
    if kind is not None:  # refused before open(): opening a FIFO for reading blocks
        raise InputFileError(path, f"is {kind}, not a regular file; cairn does not read it")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InputFileError(path, f"cannot read: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped between the stat and the open
            raise InputFileError(path, f"is {_kind(st.st_mode)}, not a regular file; cairn does not read it")
        if st.st_size > limit:
            raise InputFileError(
                path, f"is {_mib(st.st_size)}, over cairn's limit of {_mib(limit)} for a task or job file"
            )
        try:
            data = fh.read(limit + 1)
        except OSError as exc:
            raise InputFileError(path, f"cannot read: {exc.strerror or exc}") from None
    if len(data) > limit:  # grew while read
        raise InputFileError(path, f"is over cairn's limit of {_mib(limit)} for a task or job file")
    return data


def read_input_text(path: Path | str, *, limit: int = MAX_INPUT_BYTES) -> str:
    """:func:`read_input` decoded as strict UTF-8 (a byte-order mark dropped).

    Args:
        path: the file.
        limit: the largest size accepted, in bytes.

    Returns:
        The text.

    Raises:
        InputFileError: as :func:`read_input`, or the bytes are not UTF-8 (with the line).
    """
    from cairn._util.text import NotUtf8Error, decode_utf8

    data = read_input(path, limit=limit)
    try:
        return decode_utf8(data)
    except NotUtf8Error as exc:
        raise InputFileError(path, str(exc), exc.line) from None


def _loader() -> Any:
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def check_yaml_shape(text: str, source: Path | str) -> None:
    """Refuse deep nesting and alias bombs in one streaming pass over the parser's events.

    The parser itself is a state machine (no recursion), so this is linear in the text and
    safe on any input. Each anchored node's expanded size is remembered; an alias adds it.

    Args:
        text: the YAML source.
        source: the file, for messages.

    Raises:
        InputFileError: nesting deeper than :data:`MAX_YAML_DEPTH`, aliases expanding to more
            than :data:`MAX_YAML_NODES` nodes, or an alias to an anchor that is not complete
            (a document that contains itself).
        yaml.YAMLError: the text is not YAML (the caller reports it with its position).
    """
    import yaml

    loader = _loader()
    try:
        _check_events(yaml.parse(text, Loader=loader), source)
    except yaml.YAMLError:
        if loader is yaml.SafeLoader:
            raise
        # libyaml 0.2.6 (in PyYAML 6.0.4's wheels) stops flow nesting past 1,000 levels in its
        # scanner, before it emits the first event, with its own message; 0.2.5 does not. Walk
        # the text again with the pure-Python parser (a state machine, no limit of its own) so
        # that every version gives cairn's own message, and the original error otherwise.
        _check_events(yaml.parse(text, Loader=yaml.SafeLoader), source)
        raise


def _check_events(events: Any, source: Path | str) -> None:
    """The streaming pass of :func:`check_yaml_shape` over one parser's events."""
    import yaml

    sizes: dict[str, int] = {}
    # one frame per open collection: [anchor, expanded node count so far]
    stack: list[list[Any]] = []
    total = 0
    open_anchors: set[str] = set()

    def line_of(event: Any) -> int | None:
        mark = getattr(event, "start_mark", None)
        return mark.line + 1 if mark is not None else None

    def close(anchor: str | None, size: int, event: Any) -> None:
        nonlocal total
        if anchor is not None:
            sizes[anchor] = size
            open_anchors.discard(anchor)
        if stack:
            stack[-1][1] += size
            reached = stack[-1][1]
        else:
            total += size
            reached = total
        if reached > MAX_YAML_NODES:
            raise InputFileError(
                source,
                f"aliases expand to more than {MAX_YAML_NODES:,} "
                "nodes (an alias bomb?); cairn refuses the file",
                line_of(event),
            )

    for event in events:
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            if len(stack) >= MAX_YAML_DEPTH:
                raise InputFileError(
                    source,
                    f"nested more than {MAX_YAML_DEPTH} levels deep; cairn refuses the file",
                    line_of(event),
                )
            if event.anchor is not None:
                open_anchors.add(event.anchor)
            stack.append([event.anchor, 1])
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            anchor, size = stack.pop()
            close(anchor, size, event)
        elif isinstance(event, yaml.ScalarEvent):
            close(event.anchor, 1, event)
        elif isinstance(event, yaml.AliasEvent):
            if event.anchor in open_anchors:
                raise InputFileError(
                    source,
                    f"alias *{event.anchor} refers to a node that "
                    "contains it (a recursive document); cairn refuses the "
                    "file",
                    line_of(event),
                )
            close(None, sizes.get(event.anchor, 1), event)
        elif isinstance(event, yaml.DocumentEndEvent):
            total = 0  # each document of a stream counts on its own
            sizes.clear()


def load_yaml(text: str, source: Path | str) -> Any:
    """Parse one YAML document safely (plain data only: PyYAML's safe loader).

    Args:
        text: the YAML source (read with :func:`read_input_text`, so already size-capped).
        source: the file, for messages.

    Returns:
        The document (``None`` for an empty one).

    Raises:
        InputFileError: see :func:`check_yaml_shape`; also a document nested too deeply for the
            constructor (``RecursionError``).
        yaml.YAMLError: not YAML; ``problem_mark`` holds the position.
    """
    import yaml

    check_yaml_shape(text, source)
    try:
        return yaml.load(text, Loader=_loader())  # noqa: S506 (a safe loader)
    except RecursionError:
        raise InputFileError(source, "nested too deeply; cairn refuses the file") from None


def load_yaml_file(path: Path | str, *, limit: int = MAX_INPUT_BYTES) -> Any:
    """Read and parse a YAML task or job file: :func:`read_input_text` then :func:`load_yaml`.

    Args:
        path: the file.
        limit: the largest size accepted, in bytes.

    Returns:
        The document.

    Raises:
        InputFileError: the file is refused (see :func:`read_input`, :func:`load_yaml`).
        yaml.YAMLError: not YAML.
    """
    return load_yaml(read_input_text(path, limit=limit), path)
