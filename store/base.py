"""The store's ports: the event log, search over it, the Custodian's summary memory (its port is
stated in events/summaries.py, beside the events both ends know) and leases. Each caller depends
on the smallest port it uses; a backend implements all four (EventStore)."""
from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import msgspec

from magis_ray.events.errors import MagisError
from magis_ray.events.schema import NewEvent, Recorded
from magis_ray.events.summaries import MemoryEntry, SummaryMemory  # noqa: F401 - the store's callers find every port here


class StoreError(MagisError):
    """Any failure of the store that the user should see as one line."""


class ConcurrencyConflict(StoreError):
    """The run's stream is not at the version the writer expected; nothing was written."""


class UnknownRun(StoreError):
    pass


class NotAStore(StoreError):
    """The path exists but holds no magis store."""


class CorruptStore(StoreError):
    """The database file or one of its events cannot be read."""


class Fenced(StoreError):
    """The writer no longer holds the run's lease: another driver took the run over."""


class Lease(msgspec.Struct, frozen=True):
    """Who drives a run (or holds any other key) and until when, unless renewed.

    `epoch` grows with every new holder; a writer appends with the epoch it was given, so the
    store refuses a driver that lost the lease (fencing)."""

    key: str
    owner: str
    host: str
    pid: int
    epoch: int
    renewed: float  # unix seconds of the last heartbeat
    expires: float  # 0 once released
    # Who the holder is on its host, so that a driver on the same host can tell a dead holder
    # from a live one: its process's start time (clock ticks since boot, /proc/PID/stat field 22)
    # and the pid space its pid is a number in (boot id and pid namespace). Empty in a lease
    # taken before these were recorded: such a holder is only known dead when its lease runs out.
    started: int = 0
    pid_space: str = ""

    def live(self, now: float) -> bool:
        return self.expires > now


class RunInfo(msgspec.Struct, frozen=True):
    run_id: str
    version: int  # number of events in the stream
    first_time: float
    last_time: float


@runtime_checkable
class EventLog(Protocol):
    """Runs' event streams: appended in batches under optimistic concurrency, read back whole."""

    def append(self, run_id: str, expected_version: int, events: Sequence[NewEvent], fence: int = 0) -> list[Recorded]:
        """Append a batch atomically after `expected_version` (0 for a new run).

        Raises ConcurrencyConflict, writing nothing, when the stream is at another version, and
        Fenced when `fence` (the epoch of the run's lease the writer was given; 0: none) is no
        longer the lease's epoch.
        """

    def read(self, run_id: str, after_version: int = 0) -> list[Recorded]:
        """The run's events in version order; UnknownRun when the run has none."""

    def read_all(self, after_position: int = 0, limit: int | None = None) -> list[Recorded]:
        """Every run's events after a global position, in position order."""

    def version(self, run_id: str) -> int:
        """The run's current version (0 when it has no events)."""

    def list_runs(self) -> list[RunInfo]:
        """All runs, oldest first."""


@runtime_checkable
class EventSearch(Protocol):
    """Full-text search over every run's events."""

    def search(self, query: str, types: Sequence[str] = (), limit: int = 50,
               before_position: int | None = None) -> list[Recorded]:
        """Every run's events that hold all the query's words, "phrases" and prefix* (store.fulltext),
        of the given event types (all when none), newest first; `before_position` pages on."""


@runtime_checkable
class Leases(Protocol):
    """Who holds a key (a run, a batch's instance) until when: one live driver per run."""

    def take_lease(self, key: str, owner: str, host: str, pid: int, ttl_s: float, now: float, *,
                   started: int = 0, pid_space: str = "", replacing: str = "") -> Lease:
        """Take (or renew) the lease on `key` if it is free, expired or already `owner`'s; the lease
        as it stands afterwards (someone else's when it was live). `replacing`: the owner of a
        live lease whose holder the caller knows to be dead; taken over as if it had run out, if
        that owner still holds it. `started` and `pid_space` say who the new holder is (see Lease)."""

    def renew_leases(self, owner: str, ttl_s: float, now: float) -> list[str]:
        """Extend every lease `owner` still holds; their keys."""

    def release_lease(self, key: str, owner: str) -> None:
        """Give the lease up now, if `owner` holds it (its epoch stays, so old writers stay fenced)."""

    def leases(self, prefix: str = "") -> list[Lease]:
        """The leases whose key starts with `prefix`, live or not."""


@runtime_checkable
class EventStore(EventLog, EventSearch, SummaryMemory, Leases, Protocol):
    """A whole store, as `open_store` gives it: the four ports on one file, closed when done."""

    def close(self) -> None: ...

    def __enter__(self) -> EventStore: ...

    def __exit__(self, *exc: object) -> None: ...
