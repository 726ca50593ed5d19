"""One live driver per run: the driver takes a lease on each run it drives (in the store, so every
process and every Ray cluster on that store sees it) and renews it from a heartbeat thread. A
resume of a live run is refused; a dead driver's lease expires; a driver that lost its lease is
fenced out by the store (its writes carry the lease's epoch)."""
from __future__ import annotations

import os
import socket
import threading
import time
import uuid

from magis_ray.store import Lease, open_store

# How long a lease lasts without a heartbeat: a driver killed with SIGKILL blocks its runs this
# long. Long enough that a busy machine's driver never misses it; MAGIS_LEASE_S shortens it (tests).
DEFAULT_LEASE_S = 30.0
HEARTBEATS_PER_LEASE = 3  # a lease is renewed three times before it could expire


class RunIsLive(Exception):
    """Another driver holds the run's lease; the message is the one line the user sees."""


def lease_seconds() -> float:
    value = os.environ.get("MAGIS_LEASE_S", "")
    try:
        return float(value) if value and float(value) > 0 else DEFAULT_LEASE_S
    except ValueError:
        return DEFAULT_LEASE_S


def describe_holder(lease: Lease, what: str, now: float | None = None) -> str:
    ago = max(0.0, (now or time.time()) - lease.renewed)
    return f"{what} is still running on {lease.host}, pid {lease.pid}, last seen {ago:.0f}s ago"


class Liveness:
    """This driver's leases in one store, renewed every ttl/3 seconds until released or closed."""

    def __init__(self, store_path: str, ttl_s: float | None = None):
        self.ttl_s = ttl_s or lease_seconds()
        self.owner = uuid.uuid4().hex
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self._store = open_store(store_path, create=True)
        self._lock = threading.Lock()
        self._held: dict[str, int] = {}  # key -> epoch
        self._lost: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="magis-heartbeat", daemon=True)
        self._thread.start()

    def try_take(self, key: str) -> Lease:
        """The lease on `key` after trying to take it: ours (owner == self.owner) or the live holder's."""
        lease = self._store.take_lease(key, self.owner, self.host, self.pid, self.ttl_s, time.time())
        if lease.owner == self.owner:
            with self._lock:
                self._held[key] = lease.epoch
                self._lost.discard(key)
        return lease

    def take(self, key: str, what: str | None = None) -> int:
        """Take the lease on `key`; its epoch (the fence of every write). RunIsLive if another
        driver holds it."""
        lease = self.try_take(key)
        if lease.owner != self.owner:
            raise RunIsLive(describe_holder(lease, what or f"run {key}"))
        return lease.epoch

    def lost(self, key: str) -> bool:
        with self._lock:
            return key in self._lost

    def release(self, key: str) -> None:
        with self._lock:
            held = self._held.pop(key, None) is not None
            self._lost.discard(key)
        if held:
            self._store.release_lease(key, self.owner)

    def _beat(self) -> None:
        while not self._stop.wait(self.ttl_s / HEARTBEATS_PER_LEASE):
            with self._lock:
                before = dict(self._held)  # only these can be judged by the renewal below
            try:
                kept = set(self._store.renew_leases(self.owner, self.ttl_s, time.time()))
            except Exception:  # noqa: BLE001 - a busy or vanished store: try again next beat
                continue
            with self._lock:
                for key, epoch in before.items():
                    # expired while we were stalled and taken over; not one released or taken anew meanwhile
                    if key not in kept and self._held.get(key) == epoch:
                        self._held.pop(key)
                        self._lost.add(key)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        with self._lock:
            keys = list(self._held)
            self._held.clear()
        for key in keys:
            self._store.release_lease(key, self.owner)
        self._store.close()

    def __enter__(self) -> Liveness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
