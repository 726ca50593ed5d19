"""The event log and the Custodian's summary memory, behind one small interface."""
from .base import (
    ConcurrencyConflict,
    CorruptStore,
    EventStore,
    Fenced,
    Lease,
    MemoryEntry,
    NotAStore,
    RunInfo,
    StoreError,
    UnknownRun,
)

__all__ = [
    "ConcurrencyConflict",
    "CorruptStore",
    "EventStore",
    "Fenced",
    "Lease",
    "MemoryEntry",
    "NotAStore",
    "RunInfo",
    "StoreError",
    "UnknownRun",
    "open_store",
]


def open_store(path: str, create: bool = False) -> EventStore:
    """Open the SQLite store at `path` (a folder such as `.magis/`, or a database file)."""
    from .sqlite import SQLiteStore

    return SQLiteStore.open(path, create=create)
