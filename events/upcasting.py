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


Upcaster = Callable[[dict], dict]
# (version N, event type) -> the payload as version N + 1 writes it; a type not listed is unchanged
UPCASTERS: dict[tuple[int, str], Upcaster] = {
    (1, "RunStarted"): _v1_run_started,
    (1, "LLMExchanged"): _v1_llm_exchanged,
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
