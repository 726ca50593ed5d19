"""One live driver per run: the driver takes a lease on each run it drives (in the store, so every
process and every Ray cluster on that store sees it) and renews it from a heartbeat thread. A
resume of a live run is refused; a dead driver's lease expires; a driver that lost its lease is
fenced out by the store (its writes carry the lease's epoch). A driver killed on this host is
known dead at once (its pid is gone, or is another process now): its runs are free without
waiting for the lease to run out; a holder on another host is waited for."""
from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from functools import cache
from pathlib import Path

from magis_ray.events.errors import BadInput
from magis_ray.actors.execution.sandbox.processes import pid_namespace
from magis_ray.store import Lease, open_store
from magis_ray.events.settings import node_settings

# How long a lease lasts without a heartbeat: a driver that dies where this host cannot see it
# (another host, another container) blocks its runs this long; one that dies on this host is known
# dead at once. Long enough that a busy machine's driver never misses it; MAGIS_LEASE_S changes it.
HEARTBEATS_PER_LEASE = 3  # a lease is renewed three times before it could expire


class RunIsLive(BadInput):
    """Another driver holds the run's lease; the message is the one line the user sees."""


def lease_seconds() -> float:
    return node_settings().lease_s


# --- who holds a lease: a process on this host can be asked about -----------------------------


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (which may hold spaces and parentheses):
    [0] is field 3 (the state), [19] field 22 (the start time in clock ticks since boot)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_ticks(pid: int) -> int:
    """When the process started, in clock ticks since boot; 0 when that cannot be read."""
    fields = _stat(pid)
    try:
        return int(fields[19]) if fields else 0
    except (IndexError, ValueError):
        return 0


@cache
def pid_space() -> str:
    """Where this process's pids are numbers: this boot of this machine (a pid and its start time
    mean nothing after a reboot) and this pid namespace (a container's pid 30419 is not the
    host's). "" where that cannot be read (not Linux): then no holder is ever judged dead early."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""
    namespace = pid_namespace()
    return f"{boot}/{namespace}" if boot and namespace else ""


def holder_state(lease: Lease) -> str:
    """"dead": the holder was a process of this host's pid space, and its pid is gone, a zombie,
    or now another process (another start time). "alive": that process still runs. "unknown":
    it runs elsewhere (another host or container), or its lease predates the start times; only
    the lease running out tells then."""
    if not lease.pid_space or not lease.started or lease.pid_space != pid_space() or lease.host != socket.gethostname():
        return "unknown"
    try:
        os.kill(lease.pid, 0)  # no signal: only whether the pid exists (even where /proc hides other users' processes)
    except ProcessLookupError:
        return "dead"
    except PermissionError:
        pass  # another user's process
    fields = _stat(lease.pid)
    if fields is None:
        return "unknown"  # it exists, but its start time cannot be read here (or it just ended: asked again later)
    if fields[0] in ("Z", "X"):
        return "dead"
    try:
        return "alive" if int(fields[19]) == lease.started else "dead"
    except (IndexError, ValueError):
        return "unknown"


def driver_gone(lease: Lease | None, now: float | None = None) -> bool:
    """Whether a run without an ending has no live driver: nobody holds its lease, the lease ran
    out, or this host sees its holder dead (killed -9, crashed): it is cut off, and resumable."""
    if lease is None or not lease.live(now or time.time()):
        return True
    return holder_state(lease) == "dead"


def describe_holder(lease: Lease, what: str, now: float | None = None) -> str:
    """The one line that says who holds `what`; "running" only when this host sees it run."""
    now = now or time.time()
    ago = max(0.0, now - lease.renewed)
    if holder_state(lease) == "alive":
        return f"{what} is still running on {lease.host}, pid {lease.pid}, last seen {ago:.0f}s ago"
    left = max(0.0, lease.expires - now)
    return (f"{what} is held by a driver on {lease.host}, pid {lease.pid}, last seen {ago:.0f}s ago; "
            f"if that driver is gone, its lease runs out in {left:.0f}s")


class Liveness:
    """This driver's leases in one store, renewed every ttl/3 seconds until released or closed."""

    def __init__(self, store_path: str, ttl_s: float | None = None):
        self.ttl_s = ttl_s or lease_seconds()
        self.owner = uuid.uuid4().hex
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.started = start_ticks(self.pid)
        self._store = open_store(store_path, create=True)
        self._lock = threading.Lock()
        self._held: dict[str, int] = {}  # key -> epoch
        self._lost: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="magis-heartbeat", daemon=True)
        self._thread.start()

    def try_take(self, key: str) -> Lease:
        """The lease on `key` after trying to take it: ours (owner == self.owner) or the live holder's.
        A holder this host knows to be dead (killed, crashed) is taken over at once; one it cannot
        see (another host) keeps its lease until it runs out."""
        lease = self._take(key)
        if lease.owner != self.owner and holder_state(lease) == "dead":
            lease = self._take(key, replacing=lease.owner)
        if lease.owner == self.owner:
            with self._lock:
                self._held[key] = lease.epoch
                self._lost.discard(key)
        return lease

    def _take(self, key: str, replacing: str = "") -> Lease:
        return self._store.take_lease(key, self.owner, self.host, self.pid, self.ttl_s, time.time(),
                                      started=self.started, pid_space=pid_space(), replacing=replacing)

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
