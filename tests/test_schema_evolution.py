"""Schema version 2: older records are upcast as they are decoded (events/upcasting.py). A version
1 run meant "no tests" and the previous ranking by leaving those settings out, and named a failed
exchange's kind only in its error's words; a version 2 record means the current defaults."""
from __future__ import annotations

import json
from pathlib import Path

import msgspec

from magis_ray.events import schema as ev
from magis_ray.events.codec import decode_recorded, encode

from magis_ray.actors.model.failures import unanswered

GOLDEN = Path(__file__).parent / "golden"


def record(event: dict, version: int) -> bytes:
    return json.dumps({"run_id": "r", "version": 1, "position": 1, "time": 1.0, "actor": "supervisor", "event_id": "e",
                       "event": event, "schema_version": version}).encode()


STARTED = {"type": "RunStarted", "instance_id": "i", "repo": "o/r", "base_commit": "c", "problem_statement": "p",
           "settings": {"top_k": 3, "model": "m"}}


def test_a_version_1_run_keeps_what_it_meant_by_leaving_settings_out():
    old = decode_recorded(record(STARTED, 1)).event
    assert (old.settings.tests, old.settings.ranking, old.settings.top_k) == (False, "previous", 3)
    new = decode_recorded(record(STARTED, 2)).event
    assert (new.settings.tests, new.settings.ranking) == (True, "symbols") == (ev.RunSettings().tests, ev.RunSettings().ranking)


def test_what_a_version_1_record_wrote_stays_as_written_and_upcasting_twice_changes_nothing():
    written = {**STARTED, "settings": {"tests": True, "ranking": "symbols"}}
    assert decode_recorded(record(written, 1)).event.settings.ranking == "symbols"
    once = decode_recorded(record(STARTED, 1))
    assert decode_recorded(encode(once)) == once  # the envelope still says version 1: upcast again, the same


def exchange(error: str, version: int = 1) -> ev.LLMExchanged:
    return decode_recorded(record({"type": "LLMExchanged", "purpose": "p", "model": "m", "messages": [], "error": error},
                                  version)).event


def test_a_version_1_exchange_gets_its_failure_kind_from_its_words_once():
    assert (exchange("http 429: slow down").failure, exchange("http 429: slow down").status) == ("http", 429)
    assert exchange("timeout: no answer within 60 s").failure == "timeout"
    assert exchange("empty: the model returned no content").failure == "empty"
    assert exchange("script: no rule answers purpose='x'").failure == "script"
    assert exchange("answer is not the JSON asked for").failure == ""  # no kind: the step's own failure
    assert exchange("http 429: slow down", version=2).failure == ""  # version 2 writes its kind itself


def test_the_kind_decides_whether_a_resume_asks_again():
    assert unanswered(exchange("http 429: slow down")) and unanswered(exchange("http 503: down"))
    assert unanswered(exchange("connection: refused")) and unanswered(exchange("script: no rule"))
    assert not unanswered(exchange("http 400: context too long")) and not unanswered(exchange("empty: nothing"))
    assert not unanswered(exchange("answer is not the JSON asked for"))


def test_the_committed_version_1_logs_decode_as_version_1_runs():
    for name in ("v1_run.jsonl", "v1_example_run.jsonl"):
        records = [decode_recorded(line) for line in (GOLDEN / name).read_bytes().splitlines()]
        started = records[0].event
        assert records[0].schema_version == 1 and (started.settings.tests, started.settings.ranking) == (False, "previous")
        timeouts = [r.event for r in records if isinstance(r.event, ev.LLMExchanged) and r.event.error.startswith("timeout:")]
        assert all(x.failure == "timeout" for x in timeouts)


def test_a_version_2_run_s_model_settings_moved_and_changed_shape_and_are_upcast_before_they_are_typed():
    """tests/golden/v2_model_run.jsonl (tests/make_golden_v2_model.py) was written by schema
    version 2: `settings.llm` an object of its own names (`kind`, `timeout_s`, ...) and
    `settings.roles` beside it. Version 3 keeps them in `settings.endpoint` under the settings'
    names, `settings.llm` being no field at all now: typed as today's struct without its upcaster,
    the record would lose every one of them."""
    lines = (GOLDEN / "v2_model_run.jsonl").read_bytes().splitlines()
    raw = json.loads(lines[0])
    assert raw["schema_version"] == 2 and raw["event"]["settings"]["llm"]["timeout_s"] == 7
    records = [decode_recorded(line) for line in lines]
    settings = records[0].event.settings
    assert settings.endpoint.llm.startswith("scripted:") and settings.endpoint.llm.endswith("examples/calc/script.json")
    assert (settings.endpoint.timeout, settings.endpoint.concurrency, settings.endpoint.rpm, settings.endpoint.tpm) == (7, 3, 600, 0)
    assert settings.endpoint.models == (ev.RoleModel("developer", "scripted-developer"),)
    assert (settings.model, settings.model_of("developer"), settings.model_of("qa")) == ("scripted", "scripted-developer", "scripted")
    assert settings.tests is False and settings.ranking == "symbols"
    typed_as_today = msgspec.convert(raw["event"]["settings"], ev.RunSettings)  # what decoding before upcasting gave
    assert typed_as_today.endpoint == ev.EndpointSettings() and typed_as_today.endpoint != settings.endpoint


def test_a_version_2_run_that_recorded_no_endpoint_keeps_the_defaults_and_names_no_endpoint():
    old = decode_recorded(record({**STARTED, "settings": {"model": "m", "llm": {"kind": "", "timeout_s": 0.0}}}, 2)).event
    assert old.settings.endpoint == ev.EndpointSettings() and old.settings.endpoint.llm == "auto"
    once = decode_recorded(record({**STARTED, "settings": {"llm": {"kind": "openai", "timeout_s": 9.0}}}, 2))
    assert once.event.settings.endpoint.timeout == 9 and decode_recorded(encode(once)) == once  # upcast again: the same


GRADED = {"type": "InstanceGraded", "instance_id": "o__r-1", "patch_sha": "s", "resolved": True}


def test_a_version_3_grading_named_its_node_by_host_name_which_is_upcast_to_host():
    """Version 4 names a node by its Ray node id (two nodes on one host differ) and its host name
    beside it; version 3 wrote the host name as `node`."""
    old = decode_recorded(record({**GRADED, "node": "gpu-box-7"}, 3))
    assert (old.event.node, old.event.host) == ("", "gpu-box-7")
    assert decode_recorded(encode(old)) == old  # upcast again: the same
    new = decode_recorded(record({**GRADED, "node": "ab" * 28, "host": "gpu-box-7"}, 4)).event
    assert (new.node, new.host) == ("ab" * 28, "gpu-box-7")
    ran = decode_recorded(record({"type": "TestsRan", "purpose": "check", "command": "pytest", "outcome": "passed"}, 3)).event
    assert (ran.node, ran.host) == ("", "")


def test_the_committed_version_2_grading_decodes_with_no_node_named():
    records = [decode_recorded(line) for line in (GOLDEN / "v2_grading_run.jsonl").read_bytes().splitlines()]
    graded = [r.event for r in records if isinstance(r.event, ev.InstanceGraded)]
    assert graded and all(g.node == "" for g in graded)
