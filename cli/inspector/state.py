"""The inspector's view of one store: the catalog of runs, batches and gradings, kept current by
folding in the events appended since the last look, and the reads a page needs. Thread-safe;
no web framework here."""
from __future__ import annotations

import threading
import time
from typing import Protocol

from magis_ray.events.projections import RunView, fold
from magis_ray.events.projections.catalog import Catalog, RunSummary
from magis_ray.store import EventLog, EventSearch, Lease, Leases, UnknownRun

PAGE = 5000  # events read from the store at a time


class InspectedStore(EventLog, EventSearch, Leases, Protocol):
    """What the inspector reads: the log, search over it, and who drives each run."""


class Inspector:
    def __init__(self, store: InspectedStore) -> None:
        self.store = store
        self.catalog = Catalog()
        self._lock = threading.Lock()

    def refresh(self) -> set[str]:
        """Fold in what was appended since the last call; the streams that changed."""
        with self._lock:
            changed: set[str] = set()
            while True:
                events = self.store.read_all(self.catalog.position, limit=PAGE)
                changed |= self.catalog.apply_all(events)
                if len(events) < PAGE:
                    return changed

    def resolve(self, run: str) -> str:
        """A run id from an id or a unique prefix; UnknownRun otherwise."""
        if run in self.catalog.runs:
            return run
        found = [r for r in self.catalog.runs if r.startswith(run)] if run else []
        if len(found) == 1:
            return found[0]
        raise UnknownRun(f"no run {run} in the store" if not found else f"{run} names {len(found)} runs; give more of the id")

    def view(self, run_id: str) -> RunView:
        return fold(self.store.read(run_id))

    def summary(self, run_id: str) -> RunSummary:
        return self.catalog.runs[run_id]

    def stalled(self, now: float | None = None) -> set[str]:
        """Runs that have not ended and whose driver's lease ran out: nobody drives them now."""
        now = time.time() if now is None else now
        leases: dict[str, Lease] = {lease.key: lease for lease in self.store.leases()}
        return {run_id for run_id, summary in self.catalog.runs.items()
                if not summary.ended and run_id in leases and not leases[run_id].live(now)}
