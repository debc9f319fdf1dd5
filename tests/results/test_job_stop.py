"""job.json's ``stopped_by`` is the closed :class:`JobStop` vocabulary: a recorded value reads
back as the enum, written as its plain string, and a value outside it is refused."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from cairn.results.model import JobMeta, JobStop
from cairn.results.store import read_job_json, write_job_json


def _meta(**kw: object) -> JobMeta:
    return JobMeta(
        job_name="j",
        cairn_version="0",
        backend="local",
        config={},
        started_at=datetime(2026, 12, 2, tzinfo=UTC),
        **kw,
    )


def test_a_recorded_stop_reads_back_as_its_enum_value(tmp_path):
    write_job_json(tmp_path, _meta(stopped_by=JobStop.MAX_COST))
    assert json.loads((tmp_path / "job.json").read_text())["stopped_by"] == "max_cost"
    meta = read_job_json(tmp_path)
    assert meta.stopped_by is JobStop.MAX_COST and meta.stopped_by == "max_cost"


def test_a_stop_outside_the_vocabulary_is_refused(tmp_path):
    data = _meta().model_dump(mode="json")
    data["stopped_by"] = "tired"
    (tmp_path / "job.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="stopped_by"):
        read_job_json(tmp_path)
