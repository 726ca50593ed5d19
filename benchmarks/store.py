"""How close SQLiteStore comes to raw sqlite3 and raw msgspec on the same data.

    python benchmarks/store.py [--events N] [--batch B] [--run-length L] [--text-kb K] [--rounds R]

(a) append: SQLiteStore.append of batches of LLMExchanged events (a few KB of prompt each)
    against raw sqlite3 executemany of the very same JSON rows into the same table with the
    same pragmas, one transaction per batch on both sides.
(b) read: SQLiteStore.read of every run (query + decode) against msgspec decoding the same
    bytes already in memory.
Each side takes the best of R rounds, with the sides alternating, on fresh files every round.
"""
from __future__ import annotations

import argparse
import contextlib
import random
import shutil
import sqlite3
import string
import tempfile
import time
from pathlib import Path

import msgspec

from magis_ray.events.codec import new_event
from magis_ray.events.schema import LLMExchanged, Message, NewEvent, Recorded
from magis_ray.store.migrations import migrate
from magis_ray.store.sqlite import PRAGMAS, SQLiteStore

GOAL = 0.5


def make_events(count: int, text_kb: float, seed: int = 1) -> list[NewEvent]:
    rng = random.Random(seed)
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9))) for _ in range(2000)]

    def text(chars: int) -> str:
        lines, size = [], 0
        while size < chars:
            line = "    " * rng.randint(0, 3) + " ".join(rng.choices(words, k=rng.randint(3, 12)))
            lines.append(line)
            size += len(line) + 1
        return "\n".join(lines)

    system = text(400)
    return [
        new_event(
            LLMExchanged(
                purpose="locate_lines",
                model="gpt-4o-2024-08-06",
                messages=[Message("system", system), Message("user", text(int(text_kb * 1024)))],
                answer=text(300),
                prompt_tokens=rng.randint(500, 3000),
                completion_tokens=rng.randint(20, 400),
                latency_s=rng.random() * 10,
                cost_usd=rng.random() / 100,
                task_id=f"T{i % 7}",
            ),
            f"developer:T{i % 7}",
        )
        for i in range(count)
    ]


def store_append(folder: Path, batches: list[tuple[str, int, list[NewEvent]]]) -> tuple[float, SQLiteStore]:
    store = SQLiteStore.open(folder, create=True)
    start = time.perf_counter()
    for run_id, version, batch in batches:
        store.append(run_id, version, batch)
    return time.perf_counter() - start, store


def raw_append(db: Path, batches: list[list[tuple]]) -> float:
    conn = sqlite3.connect(db, isolation_level=None)
    for pragma in PRAGMAS:
        conn.execute(pragma)
    migrate(conn)  # the store's own tables
    start = time.perf_counter()
    for rows in batches:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?)", rows)
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed


def store_read(store: SQLiteStore, run_ids: list[str]) -> float:
    start = time.perf_counter()
    for run_id in run_ids:
        store.read(run_id)
    return time.perf_counter() - start


def raw_decode(payloads: list[list[bytes]]) -> float:
    decode = msgspec.json.Decoder(Recorded).decode
    start = time.perf_counter()
    for run in payloads:
        [decode(p) for p in run]
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=100, help="events per append")
    parser.add_argument("--run-length", type=int, default=1_000, help="events per run")
    parser.add_argument("--text-kb", type=float, default=3.0, help="prompt text per event")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where to put the databases (default: a temp folder)")
    args = parser.parse_args()

    events = make_events(args.events, args.text_kb)
    batches = []
    for run_start in range(0, len(events), args.run_length):
        run = events[run_start : run_start + args.run_length]
        batches += [(f"run{run_start}", i, run[i : i + args.batch]) for i in range(0, len(run), args.batch)]
    run_ids = list(dict.fromkeys(run_id for run_id, _, _ in batches))

    work = Path(tempfile.mkdtemp(prefix="magis-bench-", dir=args.dir))
    try:
        # The raw side inserts exactly the rows the store wrote: same positions, columns and JSON.
        store_append(work / "seed", batches)[1].close()
        with contextlib.closing(sqlite3.connect(work / "seed" / "events.sqlite3")) as conn:
            rows = conn.execute("SELECT position, run_id, version, type, time, data FROM events ORDER BY position").fetchall()
        payloads = [[row[5].encode() for row in rows if row[1] == run_id] for run_id in run_ids]
        raw_batches, i = [], 0
        for _, _, batch in batches:
            raw_batches.append(rows[i : i + len(batch)])
            i += len(batch)
        mb = sum(len(r[5]) for r in rows) / 1e6

        best = {"store_append": 1e9, "raw_append": 1e9, "store_read": 1e9, "raw_decode": 1e9}
        for n in range(args.rounds):
            best["raw_append"] = min(best["raw_append"], raw_append(work / f"raw{n}.sqlite3", raw_batches))
            elapsed, store = store_append(work / f"store{n}", batches)
            best["store_append"] = min(best["store_append"], elapsed)
            best["store_read"] = min(best["store_read"], store_read(store, run_ids))
            best["raw_decode"] = min(best["raw_decode"], raw_decode(payloads))
            store.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    rate = {k: len(events) / v for k, v in best.items()}
    append_ratio = rate["store_append"] / rate["raw_append"]
    read_ratio = rate["store_read"] / rate["raw_decode"]
    print(f"{len(events)} LLMExchanged events, {mb:.1f} MB of JSON, batches of {args.batch}, "
          f"runs of {args.run_length}, {'; '.join(PRAGMAS[1:3])}, best of {args.rounds} rounds")
    print(f"append: SQLiteStore {rate['store_append']:,.0f} events/s, raw sqlite3 executemany {rate['raw_append']:,.0f} events/s")
    print(f"read:   SQLiteStore.read {rate['store_read']:,.0f} events/s, raw msgspec decode {rate['raw_decode']:,.0f} events/s")
    print(f"append_ratio={append_ratio:.2f} (goal >= {GOAL})" + ("" if append_ratio >= GOAL else "  MISSED"))
    print(f"read_ratio={read_ratio:.2f} (goal >= {GOAL})" + ("" if read_ratio >= GOAL else "  MISSED"))


if __name__ == "__main__":
    main()
