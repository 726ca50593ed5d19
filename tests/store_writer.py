"""A separate OS process that appends batches to a SQLite store, for tests/test_store_sqlite.py.

    python tests/store_writer.py STORE NAME BATCHES BATCH_SIZE [--shared RUN] [--ready FILE] [--go FILE] [--think S]

Appends BATCHES batches (0: until killed) of BATCH_SIZE MeetingUtterance events to its own run
NAME, and with --shared also each batch to RUN, reading the version and retrying on conflict.
--ready names a file it creates once the store is open; --go one it waits for before writing.
--think sleeps between reading the version and appending, as an agent would work, so that two
writers really interleave (SQLite's busy wait otherwise lets one writer run far ahead).
Each event's text is "NAME/batch/index", so a checker can tell every batch apart. After each
committed batch of its own run it prints "committed N" and flushes; at the end "done conflicts=K".
"""
from __future__ import annotations

import argparse
import os
import time

from waiting import wait_until

from magis_ray.events.codec import new_event
from magis_ray.events.schema import MeetingUtterance
from magis_ray.store import ConcurrencyConflict
from magis_ray.store.sqlite import SQLiteStore


def batch(name: str, number: int, size: int) -> list:
    return [new_event(MeetingUtterance(turn=i, speaker=name, text=f"{name}/{number}/{i}"), name) for i in range(size)]


def append_with_retry(store: SQLiteStore, run_id: str, events: list, think: float) -> int:
    """Append at whatever version the run is at now; return how many conflicts it took."""
    conflicts = 0
    while True:
        version = store.version(run_id)
        time.sleep(think)
        try:
            store.append(run_id, version, events)
            return conflicts
        except ConcurrencyConflict:
            conflicts += 1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("store")
    parser.add_argument("name")
    parser.add_argument("batches", type=int)
    parser.add_argument("batch_size", type=int)
    parser.add_argument("--shared", default="")
    parser.add_argument("--ready", default="", help="create this file once the store is open")
    parser.add_argument("--go", default="", help="wait for this file to exist before writing")
    parser.add_argument("--think", type=float, default=0.0, help="seconds between reading a version and appending")
    args = parser.parse_args()

    store = SQLiteStore.open(args.store)
    if args.ready:
        open(args.ready, "x").close()
    if args.go:
        wait_until(lambda: os.path.exists(args.go), f"{args.go} appears", poll_s=0.001)
    conflicts, number = 0, 0
    while args.batches == 0 or number < args.batches:
        store.append(args.name, number * args.batch_size, batch(args.name, number, args.batch_size))
        number += 1
        print(f"committed {number}", flush=True)
        if args.shared:
            conflicts += append_with_retry(store, args.shared, batch(args.name, number - 1, args.batch_size), args.think)
    print(f"done conflicts={conflicts}", flush=True)
    store.close()


if __name__ == "__main__":
    main()
