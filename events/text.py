"""The words full-text search finds an event by: its type and lane, every text it carries (an
exchange's prompt and answer, a review's comment, a diff, a test's output), and the verdicts its
flags state, so that "rejected" finds a review that sent a patch back."""
from __future__ import annotations

import msgspec

from . import schema as ev


def verdicts(event: ev.AnyEvent) -> list[str]:
    """Words for what an event's booleans decided (its strings already say the rest)."""
    match event:
        case ev.ReviewIssued():
            return ["approved"] if event.approved else ["rejected", "sent back"]
        case ev.FileJudged():
            return ["relevant"] if event.relevant else ["irrelevant", "not relevant"]
        case ev.InstanceGraded():
            return ["resolved"] if event.resolved else ["unresolved"]
        case ev.LLMExchanged() if event.error:
            return ["error"]
    return []


def searchable_text(rec: ev.Recorded) -> str:
    """One document per event: the type tag, the actor, then every string in the event."""
    parts = [rec.actor]
    _strings(msgspec.to_builtins(rec.event), parts)  # the first is the "type" tag
    parts += verdicts(rec.event)
    return "\n".join(p for p in parts if p)


def _strings(value: object, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for v in value.values():
            _strings(v, out)
    elif isinstance(value, list):
        for v in value:
            _strings(v, out)
