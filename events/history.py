"""A run's effective history: a resumed run supersedes what followed the failure it retried."""
from __future__ import annotations

from typing import Iterable

from .schema import Recorded, RunResumed


def effective(events: Iterable[Recorded], keep_markers: bool = False) -> list[Recorded]:
    """The events that count, in version order: each RunResumed(kept_version=v) drops the events
    after v that came before it. The markers themselves are kept only when asked."""
    kept: list[Recorded] = []
    for rec in events:
        if isinstance(rec.event, RunResumed):
            kept = [r for r in kept if r.version <= rec.event.kept_version or isinstance(r.event, RunResumed)]
            if keep_markers:
                kept.append(rec)
            continue
        kept.append(rec)
    return kept
