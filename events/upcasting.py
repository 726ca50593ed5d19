"""Older records, brought up to the current schema BEFORE they are typed (as the eventsourcing
library's mapper upcasts stored state): a record of an older schema version is decoded as plain
JSON data, each upcaster takes one event type's payload at one version and returns it as the next
version writes it, and the result is typed once. A field may so change its name, its place or its
type between versions: nothing decodes an old record as today's type.

Only what an older log left out or wrote elsewhere is changed; what it wrote stays as written, so
upcasting a record twice changes nothing. Records of the current version never come here: they
decode in one step (codec.read_recorded)."""
from __future__ import annotations

import re
from typing import Callable

# Version 1 wrote a failed exchange's kind only as the start of its error text.
_V1_FAILURE = re.compile(r"^(?:(timeout|connection|api|empty|script):|http (\d{3}):)")


def _v1_run_started(event: dict) -> dict:
    settings = event.setdefault("settings", {})
    settings.setdefault("tests", False)  # version 1 ran no tests unless a run said so
    settings.setdefault("ranking", "previous")  # the ranking every version 1 log was ranked with
    return event


def _v1_llm_exchanged(event: dict) -> dict:
    if event.get("error") and "failure" not in event:
        match = _V1_FAILURE.match(event["error"])
        if match:
            event["failure"] = match.group(1) or "http"
            event["status"] = int(match.group(2) or 0)
    return event


# Version 2's settings.llm fields, by the names the endpoint section gives them. A 0 or "" was
# version 2's "not recorded" (a run from before the endpoint was kept): left out, so the field
# keeps its default.
_V2_ENDPOINT = {"kind": "llm", "base_url": "base_url", "response_format": "response_format", "timeout_s": "timeout",
                "concurrency": "concurrency", "requests_per_minute": "rpm", "tokens_per_minute": "tpm"}


def _v2_run_started(event: dict) -> dict:
    settings = event.get("settings")
    if not isinstance(settings, dict) or "endpoint" in settings:
        return event
    recorded = settings.pop("llm", None) or {}
    endpoint = {new: recorded[old] for old, new in _V2_ENDPOINT.items() if recorded.get(old) not in (None, "", 0)}
    roles = settings.pop("roles", None)
    if roles:
        endpoint["models"] = roles
    settings["endpoint"] = endpoint
    return event


def _v3_instance_graded(event: dict) -> dict:
    """Version 3 named the grading's node by its host name, in `node`: it is the host."""
    if "node" in event and "host" not in event:
        event["host"] = event.pop("node")
    return event


_V4_STATUS = ("fail_to_pass", "pass_to_pass", "fail_to_fail", "pass_to_fail")
_V4_PARTS = {"environment": ("env_key", "env_label", "env_build_seconds", "env_built_now", "env_obtained"),
             "testbed": ("testbed_key", None, "testbed_build_seconds", "testbed_built_now", "testbed_obtained")}
_V4_RUN = {"test_seconds": "seconds", "test_exit_code": "exit_code", "timed_out": "timed_out", "tests_parsed": "tests_parsed"}


def _v4_instance_graded(event: dict) -> dict:
    """Version 4 wrote InstanceGraded's parts as flat fields, left `completed` out of results
    logged before it was kept (they count by the rule of their time) and each part's `obtained`
    out before it was said (a part built now was built, else cached)."""
    if "tests_status" in event:
        return event
    status = {}
    for name in _V4_STATUS:
        lists = {outcome: event.pop(f"{name}_{outcome}") for outcome in ("success", "failure") if f"{name}_{outcome}" in event}
        if lists:
            status[name] = lists
    event["tests_status"] = status
    for part, (key, label, seconds, built_now, obtained) in _V4_PARTS.items():
        fields = {"key": event.pop(key, ""), "label": event.pop(label, "") if label else "",
                  "build_seconds": event.pop(seconds, 0.0), "built_now": event.pop(built_now, False),
                  "obtained": event.pop(obtained, "")}
        fields["obtained"] = fields["obtained"] or ("built" if fields["built_now"] else "cached")
        event[part] = fields
    event["run"] = {new: event.pop(old) for old, new in _V4_RUN.items() if old in event}
    event["memory"] = {"control": event.pop("memory_control", ""), "peak_mb": event.pop("peak_memory_mb", 0)}
    if event.get("completed") is None:
        tests_ran = event.get("error_step", "") in ("", "tests") and event["run"].get("tests_parsed", 0) > 0
        event["completed"] = bool(event.get("patch_successfully_applied")) and tests_ran
    return event


Upcaster = Callable[[dict], dict]
# (version N, event type) -> the payload as version N + 1 writes it; a type not listed is unchanged
UPCASTERS: dict[tuple[int, str], Upcaster] = {
    (1, "RunStarted"): _v1_run_started,
    (1, "LLMExchanged"): _v1_llm_exchanged,
    (2, "RunStarted"): _v2_run_started,
    (3, "InstanceGraded"): _v3_instance_graded,
    (4, "InstanceGraded"): _v4_instance_graded,
}


def upcast(record: dict, version: int, current: int) -> dict:
    """`record` (a Recorded as JSON data) written at schema `version`, as `current` writes it."""
    event = record.get("event")
    if not isinstance(event, dict):
        return record  # not an event at all: typing it says what is wrong
    tag = event.get("type", "")
    while version < current:
        step = UPCASTERS.get((version, tag))
        if step is not None:
            event = step(event)
        version += 1
    record["event"] = event
    return record
