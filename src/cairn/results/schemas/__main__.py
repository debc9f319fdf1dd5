"""``python -m cairn.results.schemas [--check]``: regenerate (or check) the shipped JSON Schemas."""

from __future__ import annotations

import sys

from cairn.results.schemas import stale_schemas, write_schemas


def main(argv: list[str]) -> int:
    """Rewrite the schema files, or with ``--check`` report stale ones.

    Args:
        argv: command-line arguments (only ``--check`` is understood).

    Returns:
        The exit code: 0, or 1 when ``--check`` finds a stale file, 2 on bad usage.
    """
    if argv not in ([], ["--check"]):
        print("usage: python -m cairn.results.schemas [--check]", file=sys.stderr)
        return 2
    if argv == ["--check"]:
        stale = stale_schemas()
        for name in stale:
            print(f"{name}.schema.json is out of date; run: python -m cairn.results.schemas", file=sys.stderr)
        return 1 if stale else 0
    for path in write_schemas():
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
