"""Where a read command finds a run's events: a store (by run id or unique prefix) or a JSON-lines file."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Protocol

from magis_ray.events.codec import DecodeError, decode_recorded
from magis_ray.events.schema import Recorded
from magis_ray.store import EventLog, Leases, UnknownRun, open_store

from magis_ray.events.errors import BadInput


class RunsAndLeases(EventLog, Leases, Protocol):
    """What finding a run reads: the runs in the log, and the leases of runs not started yet."""


def resolve_run_id(store: RunsAndLeases, run: str) -> str:
    runs = [r.run_id for r in store.list_runs()]
    if run in runs:
        return run
    matches = [r for r in runs if r.startswith(run)]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise BadInput(f"run id prefix {run!r} is ambiguous ({len(matches)} runs)")
    # a driver takes the run's lease before it prints the id: a lease without events is a run
    # that was cut off before its first event
    unstarted = [lease for lease in store.leases(run) if ":" not in lease.key]
    if len(unstarted) == 1:
        from magis_ray.actors.runtime.liveness import describe_holder, holder_state

        lease = unstarted[0]
        if lease.live(time.time()) and holder_state(lease) != "dead":
            if holder_state(lease) == "alive":
                raise BadInput(f"run {lease.key} is starting on {lease.host}, pid {lease.pid}; it has no events yet")
            raise BadInput(f"{describe_holder(lease, f'run {lease.key}')}; it has no events yet")
        raise BadInput(f"run {lease.key} never started (it was stopped before its first event); submit the issue again")
    raise UnknownRun(f"unknown run: {run}")


def read_events_file(path: Path) -> list[Recorded]:
    events = []
    with path.open("rb") as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                try:
                    events.append(decode_recorded(line))
                except DecodeError as exc:
                    raise BadInput(f"{path}:{number}: {exc}") from None
    if not events:
        raise BadInput(f"{path}: no events")
    return events


def load_run(store_path: str, run: str) -> list[Recorded]:
    """The events of RUN: a run id (or prefix) in the store, or a .jsonl file of `magis-ray events`."""
    if run.endswith(".jsonl"):
        if not Path(run).is_file():
            raise BadInput(f"no such events file: {run}")
        return read_events_file(Path(run))
    store = open_store(store_path)
    try:
        return store.read(resolve_run_id(store, run))
    finally:
        store.close()


def repo_of(started, repo: str | None) -> str:
    """Where the run's repository is: the --repo given, else where the run found it."""
    from magis_ray.actors.code.repository import RepoError, RepoSnapshot

    path = repo or (started.repo_path if started else "")
    if not path:
        raise BadInput("the log does not say where the repository is; give --repo")
    try:
        RepoSnapshot.open(path, started.base_commit)
    except RepoError as exc:
        raise BadInput(str(exc)) from None
    return path
