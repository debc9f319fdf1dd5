"""JSON Schemas of the files cairn writes (design §7), shipped as package data.

``result.schema.json`` (result.json), ``steps.schema.json`` (steps.json) and
``summary.schema.json`` (summary.json), ``job.schema.json`` (job.json) and
``config.schema.json`` (a trial's config.json) and ``rollout.schema.json`` (one line of
``cairn export --format rollouts``) and ``network.schema.json`` (one line of a step's
``network.jsonl``) are generated from the pydantic models in
:mod:`cairn.results`, ``check.schema.json`` (``cairn tasks check --json``) from
:mod:`cairn.task.report`; regenerate them after changing a model with::

    python -m cairn.results.schemas          # rewrite the files
    python -m cairn.results.schemas --check  # exit 1 when a committed file is out of date

A test compares the committed files with freshly generated ones, so they cannot drift.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from cairn.results.model import (
    ConnectionRecord,
    JobMeta,
    JobSummary,
    StepsFile,
    TrialConfigFile,
    TrialResult,
)
from cairn.results.rollouts import RolloutStep
from cairn.task.report import CheckReport

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

SCHEMA_MODELS: dict[str, type[BaseModel]] = {
    "result": TrialResult,
    "steps": StepsFile,
    "summary": JobSummary,
    "job": JobMeta,
    "config": TrialConfigFile,
    "check": CheckReport,
    "rollout": RolloutStep,
    "network": ConnectionRecord,
}
"""Schema name → the model it is generated from; the file is ``<name>.schema.json``."""

SCHEMA_DIR = Path(__file__).parent
"""Where the schema files live in a source checkout."""


def schema_file_name(name: str) -> str:
    """The file name of schema ``name``: ``<name>.schema.json``.

    Raises:
        KeyError: for an unknown schema name.
    """
    if name not in SCHEMA_MODELS:
        raise KeyError(f"unknown schema {name!r}; known: {', '.join(SCHEMA_MODELS)}")
    return f"{name}.schema.json"


def generate_schema(name: str) -> dict[str, Any]:
    """Generate schema ``name`` from its model (serialization mode: the shape on disk).

    Args:
        name: ``result``, ``steps`` or ``summary``.

    Returns:
        The JSON Schema (draft 2020-12) as a dict.

    Raises:
        KeyError: for an unknown schema name.
    """
    file_name = schema_file_name(name)
    schema = SCHEMA_MODELS[name].model_json_schema(mode="serialization")
    return {"$schema": JSON_SCHEMA_DIALECT, "$id": f"https://cairn.dev/schemas/{file_name}", **schema}


def schema_text(name: str) -> str:
    """The exact text of ``<name>.schema.json`` as generated (2-space indent, final newline)."""
    return json.dumps(generate_schema(name), indent=2, ensure_ascii=False) + "\n"


def load_schema(name: str) -> dict[str, Any]:
    """Load a shipped schema.

    Args:
        name: ``result``, ``steps`` or ``summary``.

    Returns:
        The JSON Schema as a dict.

    Raises:
        KeyError: for an unknown schema name.
        FileNotFoundError: when the package was installed without its schema files.
    """
    text = resources.files(__name__).joinpath(schema_file_name(name)).read_text("utf-8")
    return json.loads(text)


def validate(name: str, instance: Any) -> None:
    """Validate a JSON value against a shipped schema (needs the ``jsonschema`` package).

    Args:
        name: ``result``, ``steps`` or ``summary``.
        instance: the parsed JSON document.

    Raises:
        jsonschema.ValidationError: when the document does not match.
        ModuleNotFoundError: when ``jsonschema`` is not installed (it is a test extra).
    """
    import jsonschema

    schema = load_schema(name)
    jsonschema.Draft202012Validator(
        schema,
        format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER,
    ).validate(instance)


def write_schemas(folder: Path = SCHEMA_DIR) -> list[Path]:
    """Regenerate every schema file.

    Args:
        folder: where to write (default: this package's folder).

    Returns:
        The files written.
    """
    out = []
    for name in SCHEMA_MODELS:
        path = Path(folder) / schema_file_name(name)
        path.write_text(schema_text(name), encoding="utf-8")
        out.append(path)
    return out


def stale_schemas(folder: Path = SCHEMA_DIR) -> list[str]:
    """The schema names whose file in ``folder`` differs from a fresh generation (or is missing)."""
    stale = []
    for name in SCHEMA_MODELS:
        path = Path(folder) / schema_file_name(name)
        if not path.is_file() or path.read_text(encoding="utf-8") != schema_text(name):
            stale.append(name)
    return stale
