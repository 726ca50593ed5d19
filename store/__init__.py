"""The event log, search over it, the Custodian's summary memory and leases: four small ports,
implemented by a SQLite backend (the default) and an in-memory one."""
from .base import (
    ConcurrencyConflict,
    CorruptStore,
    EventLog,
    EventSearch,
    EventStore,
    Fenced,
    Lease,
    Leases,
    MemoryEntry,
    NotAStore,
    RunInfo,
    StoreError,
    SummaryMemory,
    UnknownRun,
)

__all__ = [
    "ConcurrencyConflict",
    "CorruptStore",
    "EventLog",
    "EventSearch",
    "EventStore",
    "Fenced",
    "Lease",
    "Leases",
    "MemoryEntry",
    "NotAStore",
    "RunInfo",
    "StoreError",
    "SummaryMemory",
    "UnknownRun",
    "open_store",
]


def open_store(path: str, create: bool = False) -> EventStore:
    """Open the SQLite store at `path` (a folder such as `.magis/`, or a database file)."""
    from .sqlite import SQLiteStore

    return SQLiteStore.open(path, create=create)
