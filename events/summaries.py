"""The Custodian's summary memory, stated once: the entry it keeps and the port it is read and
written through. It sits with the events because both ends use it and neither may know the
other: the store keeps the entries (positioned on the event log), the Custodian (a role, which
knows no store) reads and writes them, and the runtime forwards this port between the two."""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import msgspec


class MemoryEntry(msgspec.Struct, frozen=True):
    """A file summary remembered for (repo, path, blob_id); `position` orders entries in time."""

    repo: str
    path: str
    blob_id: str
    summary: str
    position: int
    model: str = ""  # the model that wrote it ("": a store from before models were recorded, attributed on opening)


@runtime_checkable
class SummaryMemory(Protocol):
    """File summaries keyed by path and git blob id, reusable across issues, runs and versions."""

    def put_summary(self, repo: str, path: str, blob_id: str, summary: str, model: str = "") -> None:
        """Remember a file summary written by `model` (the last one written for a key and model wins)."""

    def get_summary(self, repo: str, path: str, blob_id: str, before_position: int | None = None,
                    model: str | None = None) -> MemoryEntry | None:
        """The summary of exactly this version of the file, by `model` (None: by any model, the latest)."""

    def latest_summary(self, repo: str, path: str, before_position: int | None = None,
                       model: str | None = None) -> MemoryEntry | None:
        """The most recent summary of any version of the file.

        `before_position` limits the answer to entries written before that global event
        position, so a replay sees the memory as it was when the run started.
        """
