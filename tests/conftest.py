"""Shared fixtures: real sandbox backends and a one-call trial runner."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent / "helpers"))

from testbed import backend_available, local_available, run_trial_sync, validate_result_files  # noqa: E402,F401


@pytest.fixture(params=["docker", "local"])
def backend(request) -> str:
    """Each trial-engine test runs on every backend that exists in this checkout."""
    name = request.param
    if not backend_available(name):
        pytest.skip(f"backend {name} not available")
    request.node.add_marker(pytest.mark.docker if name == "docker" else pytest.mark.local)
    return name


def _refuse_constant(name: str):
    raise ValueError(f"non-finite JSON constant {name}")


@functools.cache
def _validator(schema: str):
    """One checked validator per shipped schema (``jsonschema.validate`` re-checks the schema
    itself on every call: most of a fast test's time)."""
    import jsonschema

    from cairn.results.schemas import load_schema

    loaded = load_schema(schema)
    cls = jsonschema.validators.validator_for(loaded)
    cls.check_schema(loaded)
    return cls(loaded)


@pytest.fixture(autouse=True)
def _results_match_schemas(request):
    """Every result.json / steps.json / config.json / summary.json / job.json a test leaves
    under its tmp_path validates
    against the shipped JSON Schemas (issue 5: every result the suite produces)."""
    yield
    if request.node.get_closest_marker("writes_invalid_results"):
        return
    tmp = request.node.funcargs.get("tmp_path")
    if tmp is None or not Path(tmp).is_dir():
        return
    names = {"result.json": "result", "steps.json": "steps", "summary.json": "summary",
             "config.json": "config", "job.json": "job"}
    for fname, schema in names.items():
        for p in Path(tmp).rglob(fname):
            if fname in ("summary.json", "job.json"):
                if not (p.parent / "trials").is_dir() and not (p.parent / "lock").exists():
                    continue  # only a job folder's own files
            elif "trials" not in p.parts:
                continue  # only files cairn's store wrote under a job folder
            try:
                data = json.loads(p.read_text(), parse_constant=_refuse_constant)
            except (OSError, ValueError):
                continue  # tests that plant broken files check that themselves
            _validator(schema).validate(data)
