"""A stream's kind is read from its id, and ids are spelled as the store has always held them:
a run's id alone, a grading's "grading:NAME" (tests/golden/v2_grading_run.jsonl)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from magis_ray.events.streams import StreamKind

GOLDEN = Path(__file__).parent / "golden"


def test_a_grading_s_stream_id_is_spelled_as_stored_and_read_back():
    stored = json.loads((GOLDEN / "v2_grading_run.jsonl").read_text().splitlines()[0])["run_id"]
    assert StreamKind.GRADING.stream_id("gold@calc") == stored == "grading:gold@calc"
    assert StreamKind.of(stored) is StreamKind.GRADING
    assert StreamKind.GRADING.name_in(stored) == "gold@calc"
    assert StreamKind.GRADING.name_in("grading:a:b") == "a:b"  # a name may hold the separator


def test_a_run_s_stream_is_its_run_id():
    run_id = json.loads((GOLDEN / "v1_run.jsonl").read_text().splitlines()[0])["run_id"]
    assert StreamKind.of(run_id) is StreamKind.RUN
    assert StreamKind.RUN.stream_id(run_id) == run_id and StreamKind.RUN.name_in(run_id) == run_id
    assert StreamKind.of("gradings:x") is StreamKind.RUN and StreamKind.of("grading") is StreamKind.RUN
    with pytest.raises(ValueError, match="not a grading stream"):
        StreamKind.GRADING.name_in(run_id)


def test_a_validation_s_stream_is_neither_a_run_nor_a_grading():
    from magis_ray.events.projections.catalog import Catalog
    from magis_ray.events.schema import Recorded, ValidationStarted

    stream = StreamKind.VALIDATION.stream_id("candidates")
    assert stream == "validation:candidates" and StreamKind.of(stream) is StreamKind.VALIDATION
    catalog = Catalog()
    catalog.apply(Recorded(run_id=stream, version=1, position=1, time=0.0, actor="validator", event_id="e1",
                           event=ValidationStarted(name="candidates", records="candidates.jsonl")))
    assert (catalog.runs, catalog.gradings, catalog.position) == ({}, {}, 1)
