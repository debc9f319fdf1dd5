"""What every backend refuses in a task's compose file, checked without a backend (design §3.1).

The docker compose backend (:func:`cairn.sandbox.docker.compose_files.check_compose_file`)
refuses these before anything starts, and the local backend refuses compose files
altogether; ``cairn tasks check -e none`` reports the same from :func:`compose_file_problem`,
so that "ok" without a backend does not hide a file no backend runs. What only ``docker
compose config`` finds (interpolation, the merged model, the no-network egress check on it) needs
the backend (``-e docker``).
"""

from __future__ import annotations

from pathlib import Path

MAIN_SERVICE = "main"
"""The compose service the agent runs in."""


def compose_file_problem(path: Path, *, main_supplied: bool) -> tuple[str, int | None] | None:
    """Why no backend can run this compose file, or ``None``.

    Read with the shared safe loader (size cap, no alias bombs, bounded nesting:
    :mod:`cairn._util.inputfiles`).

    Args:
        path: the task's compose file.
        main_supplied: ``environment/Dockerfile`` or ``[environment].docker_image`` exists, so
            cairn defines service ``main`` when the file does not (as Harbor 0.26 does).

    Returns:
        ``(reason, line)`` (line 1-based or ``None``): the file cannot be read or is not YAML,
        is not a mapping, has no ``services`` table, or has no ``main`` service and nothing to
        make one from.
    """
    import yaml

    from cairn._util.inputfiles import InputFileError, load_yaml_file

    try:
        doc = load_yaml_file(path)
    except InputFileError as exc:
        return exc.reason, exc.line
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        return (
            f"not readable as YAML: {exc}".replace("\n", " "),
            mark.line + 1 if mark is not None else None,
        )
    services = doc.get("services") if isinstance(doc, dict) else None
    if not isinstance(services, dict):
        return "a compose environment needs a `services` table", None
    if MAIN_SERVICE not in services and not main_supplied:
        return (
            f"no service named `{MAIN_SERVICE}` (the agent's container) and nothing to "
            "make it from: add one, or add environment/Dockerfile or "
            f"[environment].docker_image; found {sorted(map(str, services))}",
            None,
        )
    return None
