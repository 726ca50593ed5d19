"""An in-memory EventStore for tests and throwaway runs; same contract as the SQLite store."""
from __future__ import annotations

import threading
from typing import Sequence

import msgspec

from magis_ray.events.codec import encode, read_recorded
from magis_ray.events.schema import NewEvent, Recorded
from magis_ray.events.text import searchable_text

from .fulltext import parse_query, matches
from .base import ConcurrencyConflict, Fenced, Lease, MemoryEntry, RunInfo, UnknownRun

_decoder = read_recorded  # older records upcast (events/upcasting.py)


def _tag(event: object) -> str:
    return type(event).__struct_config__.tag


class InMemoryStore:
    """Keeps every event as its encoded JSON, like the SQLite store.

    Encoding on append rejects what the SQLite store would reject, and decoding on read
    hands every caller fresh objects, so nobody can change the log through a returned list.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._log: list[tuple[str, int, bytes]] = []  # (run_id, version, data); position = index + 1
        self._runs: dict[str, list[int]] = {}  # run_id -> indexes into _log, in version order
        self._times: dict[str, tuple[float, float]] = {}  # run_id -> (first_time, last_time)
        self._summaries: dict[tuple[str, str, str, str], tuple[MemoryEntry, int]] = {}  # key, model -> (entry, write seq)
        self._seq = 0
        self._leases: dict[str, Lease] = {}

    def append(self, run_id: str, expected_version: int, events: Sequence[NewEvent], fence: int = 0) -> list[Recorded]:
        if not events:
            return []
        with self._lock:
            lease = self._leases.get(run_id)
            if fence and (lease is None or lease.epoch != fence):
                holder = f" (now driven on {lease.host}, pid {lease.pid})" if lease else ""
                raise Fenced(f"run {run_id} was taken over by another driver{holder}")
            current = len(self._runs.get(run_id, ()))
            if current != expected_version:
                raise ConcurrencyConflict(f"run {run_id} is at version {current}, not {expected_version}")
            base = len(self._log)
            recorded = [
                e.recorded(run_id, current + i, base + i)
                for i, e in enumerate(events, 1)
            ]
            rows = [(run_id, r.version, encode(r)) for r in recorded]  # may raise: then nothing is kept
            self._log.extend(rows)
            self._runs.setdefault(run_id, []).extend(range(base, base + len(rows)))
            first = self._times.get(run_id, (recorded[0].time, 0.0))[0]
            self._times[run_id] = (first, recorded[-1].time)
            return recorded

    def read(self, run_id: str, after_version: int = 0) -> list[Recorded]:
        with self._lock:
            indexes = self._runs.get(run_id)
            if not indexes:
                raise UnknownRun(f"no run {run_id} in the store")
            rows = [self._log[i][2] for i in indexes[max(after_version, 0):]]
        return [_decoder(data) for data in rows]

    def read_all(self, after_position: int = 0, limit: int | None = None) -> list[Recorded]:
        start = max(after_position, 0)
        with self._lock:
            rows = self._log[start:] if limit is None else self._log[start : start + max(limit, 0)]
        return [_decoder(data) for _, _, data in rows]

    def search(self, query: str, types: Sequence[str] = (), limit: int = 50,
               before_position: int | None = None) -> list[Recorded]:
        terms = parse_query(query)
        with self._lock:
            end = len(self._log) if before_position is None else min(max(before_position - 1, 0), len(self._log))
            rows = [data for _, _, data in reversed(self._log[:end])]
        found: list[Recorded] = []
        for data in rows:  # newest first, as the SQLite index answers
            if len(found) >= limit or not terms:
                break
            rec = _decoder(data)
            if (not types or _tag(rec.event) in types) and matches(terms, searchable_text(rec)):
                found.append(rec)
        return found

    def version(self, run_id: str) -> int:
        with self._lock:
            return len(self._runs.get(run_id, ()))

    def list_runs(self) -> list[RunInfo]:
        with self._lock:  # dicts keep insertion order: the order of each run's first append
            return [RunInfo(r, len(ix), *self._times[r]) for r, ix in self._runs.items()]

    def put_summary(self, repo: str, path: str, blob_id: str, summary: str, model: str = "") -> None:
        with self._lock:
            self._seq += 1
            entry = MemoryEntry(repo, path, blob_id, summary, len(self._log), model)
            self._summaries[(repo, path, blob_id, model)] = (entry, self._seq)

    def _latest(self, repo: str, path: str, blob_id: str | None, before_position: int | None, model: str | None):
        with self._lock:
            candidates = [
                (entry.position, seq, entry)
                for (r, p, b, m), (entry, seq) in self._summaries.items()
                if r == repo and p == path and (blob_id is None or b == blob_id) and (model is None or m == model)
                and (before_position is None or entry.position < before_position)
            ]
        # Ties on position (no event between two writes) go to the later write, as in SQLite.
        return max(candidates, key=lambda c: c[:2])[2] if candidates else None

    def get_summary(self, repo: str, path: str, blob_id: str, before_position: int | None = None,
                    model: str | None = None) -> MemoryEntry | None:
        return self._latest(repo, path, blob_id, before_position, model)

    def latest_summary(self, repo: str, path: str, before_position: int | None = None,
                       model: str | None = None) -> MemoryEntry | None:
        return self._latest(repo, path, None, before_position, model)

    def take_lease(self, key: str, owner: str, host: str, pid: int, ttl_s: float, now: float, *,
                   started: int = 0, pid_space: str = "", replacing: str = "") -> Lease:
        with self._lock:
            current = self._leases.get(key)
            if current is not None and current.owner not in (owner, replacing) and current.live(now):
                return current
            epoch = current.epoch if current is not None and current.owner == owner else (current.epoch + 1 if current else 1)
            taken = self._leases[key] = Lease(key, owner, host, pid, epoch, now, now + ttl_s, started, pid_space)
            return taken

    def renew_leases(self, owner: str, ttl_s: float, now: float) -> list[str]:
        with self._lock:
            held = [k for k, lease in self._leases.items() if lease.owner == owner and lease.expires > 0]
            for k in held:
                self._leases[k] = msgspec.structs.replace(self._leases[k], renewed=now, expires=now + ttl_s)
            return held

    def release_lease(self, key: str, owner: str) -> None:
        with self._lock:
            lease = self._leases.get(key)
            if lease is not None and lease.owner == owner:
                self._leases[key] = msgspec.structs.replace(lease, expires=0.0)

    def leases(self, prefix: str = "") -> list[Lease]:
        with self._lock:
            return sorted((lease for k, lease in self._leases.items() if k.startswith(prefix)), key=lambda lease: lease.key)

    def __enter__(self) -> InMemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        pass
