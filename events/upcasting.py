"""Older records, brought up to the current schema as they are decoded (as the eventsourcing
library upcasts stored state): each upcaster takes a record of one schema version, as plain JSON
data, and returns it as the next version writes it. Only what an older log left out is filled in;
what it wrote stays as written, so upcasting a record twice changes nothing.

Records of the current version never come here: they decode in one step (codec.read_recorded)."""
from __future__ import annotations

import re
from typing import Callable

# Version 1 wrote a failed exchange's kind only as the start of its error text.
_V1_FAILURE = re.compile(r"^(?:(timeout|connection|api|empty|script):|http (\d{3}):)")


def _v1_to_v2(record: dict) -> dict:
    event = record.get("event") or {}
    kind = event.get("type")
    if kind == "RunStarted":
        settings = event.setdefault("settings", {})
        settings.setdefault("tests", False)  # version 1 ran no tests unless a run said so
        settings.setdefault("ranking", "previous")  # the ranking every version 1 log was ranked with
    elif kind == "LLMExchanged" and event.get("error") and "failure" not in event:
        match = _V1_FAILURE.match(event["error"])
        if match:
            event["failure"] = match.group(1) or "http"
            event["status"] = int(match.group(2) or 0)
    return record


# from version N to N + 1
UPCASTERS: dict[int, Callable[[dict], dict]] = {1: _v1_to_v2}


def upcast(record: dict, version: int, current: int) -> dict:
    """`record` (a Recorded as JSON data) written at schema `version`, as `current` writes it."""
    while version < current:
        record = UPCASTERS[version](record)
        version += 1
    return record
