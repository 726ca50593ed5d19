"""SQLite-only behaviour, on real files and with real OS processes (tests/store_writer.py)."""
from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
from waiting import wait_until

from magis_ray.events.codec import new_event
from magis_ray.events.schema import MeetingUtterance, Recorded, RunStarted
from magis_ray.store import CorruptStore, NotAStore, StoreError, open_store
from magis_ray.store.sqlite import SQLiteStore

WRITER = Path(__file__).with_name("store_writer.py")


def writer(store: Path, name: str, batches: int, size: int, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(WRITER), str(store), name, str(batches), str(size), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def batches_of(events: list[Recorded]) -> dict[tuple[str, int], list[Recorded]]:
    """Group a run's events by the batch that wrote them ("name/batch/index" in the text)."""
    groups: dict[tuple[str, int], list[Recorded]] = defaultdict(list)
    for r in events:
        name, number, _ = r.event.text.split("/")
        groups[(name, int(number))].append(r)
    return groups


def assert_whole_batches(events: list[Recorded], size: int) -> None:
    assert [r.version for r in events] == list(range(1, len(events) + 1))  # gap-free from 1
    for group in batches_of(events).values():
        assert [r.event.turn for r in group] == list(range(size))  # exactly once, all of it
        assert [r.version for r in group] == list(range(group[0].version, group[0].version + size))  # contiguous


def test_two_processes_append_to_their_own_runs_and_to_a_shared_run(tmp_path):
    path, go = tmp_path / ".magis", tmp_path / "go"
    SQLiteStore.open(path, create=True).close()
    ready = [tmp_path / f"{name}.ready" for name in ("w1", "w2")]
    procs = [writer(path, name, 40, 5, "--shared", "shared", "--go", str(go), "--ready", str(flag), "--think", "0.002")
             for name, flag in zip(("w1", "w2"), ready)]
    # both have started Python and opened the store; then let them race
    wait_until(lambda: all(flag.exists() for flag in ready), "both writers have opened the store")
    go.touch()
    outputs = [p.communicate(timeout=120) for p in procs]
    conflicts = 0
    for p, (out, err) in zip(procs, outputs):
        assert p.returncode == 0, err
        conflicts += int(out.splitlines()[-1].removeprefix("done conflicts="))
    assert conflicts > 0, "the writers never raced on the shared run"

    with SQLiteStore.open(path) as store:
        for name in ("w1", "w2"):
            own = store.read(name)
            assert len(own) == 200
            assert_whole_batches(own, 5)
        shared = store.read("shared")
        assert len(shared) == 400
        assert_whole_batches(shared, 5)
        assert sorted(batches_of(shared)) == [(n, b) for n in ("w1", "w2") for b in range(40)]
        positions = [r.position for r in store.read_all()]
        assert positions == list(range(1, 801))  # strictly increasing, no position taken twice
        assert {r.run_id: r.version for r in store.list_runs()} == {"w1": 200, "w2": 200, "shared": 400}


def test_sigkill_keeps_every_committed_batch_and_no_partial_one(tmp_path):
    path = tmp_path / ".magis"
    SQLiteStore.open(path, create=True).close()
    size = 50  # large batches, so the kill is likely to land inside a transaction
    proc = writer(path, "victim", 0, size)
    reported = 0
    while reported < 5:
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
        reported = int(line.split()[1])
    time.sleep(random.Random().uniform(0, 0.02))  # land the kill at some point of a later batch
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    for line in proc.stdout.read().splitlines():  # what it reported before it died
        reported = int(line.split()[1])

    with SQLiteStore.open(path) as store:
        events = store.read("victim")
        assert len(events) % size == 0
        # Every reported batch is there; at most one more, committed but killed before it could say so.
        assert reported * size <= len(events) <= (reported + 1) * size
        assert_whole_batches(events, size)
        assert store.version("victim") == len(events)
        # The store takes new writes after the crash.
        store.append("victim", len(events), [new_event(MeetingUtterance(0, "after", "after/0/0"), "t")])


# --- what is and is not a store ---------------------------------------------------------------


def test_create_makes_the_folder_and_the_database(tmp_path):
    path = tmp_path / "deep" / ".magis"
    with pytest.raises(NotAStore, match="no magis store at"):
        open_store(str(path))
    open_store(str(path), create=True).close()
    assert (path / "events.sqlite3").is_file()
    open_store(str(path)).close()  # and it opens again without create
    open_store(str(path / "events.sqlite3")).close()  # also by the file's own path


def test_create_with_a_file_path(tmp_path):
    path = tmp_path / "store.sqlite3"
    open_store(str(path), create=True).close()
    assert path.is_file()
    open_store(str(path)).close()


def test_not_a_store(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    text = tmp_path / "notes.txt"
    text.write_text("hello, this is not a database\n")
    foreign = tmp_path / "other.sqlite3"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE things (x)")
    conn.close()
    for path in (empty, text, foreign, tmp_path / "missing"):
        with pytest.raises(NotAStore) as info:
            open_store(str(path))
        assert "\n" not in str(info.value)
    for path in (text, foreign):  # create=True never takes over someone else's file
        with pytest.raises(NotAStore):
            open_store(str(path), create=True)


def fill(path: Path, runs: int = 20, per_run: int = 30) -> None:
    with SQLiteStore.open(path, create=True) as store:
        for n in range(runs):
            events = [new_event(RunStarted(f"i{n}", "repo", "abc", "x" * 500), "cli")]
            events += [new_event(MeetingUtterance(i, "m", f"m/{n}/{i} " + "y" * 300), "m") for i in range(per_run)]
            store.append(f"run{n}", 0, events)


def touch_everything(path: Path) -> None:
    with SQLiteStore.open(path) as store:
        for info in store.list_runs():
            store.read(info.run_id)
        store.read_all()
        store.append("new", 0, [new_event(MeetingUtterance(0, "m", "z"), "m")])


@pytest.mark.parametrize("start", [100, 4096 * 3, "middle"])
def test_garbage_in_the_file_is_corrupt_store_never_a_sqlite_error(tmp_path, start):
    path = tmp_path / ".magis"
    fill(path)
    db = path / "events.sqlite3"
    assert not (path / "events.sqlite3-wal").exists() or (path / "events.sqlite3-wal").stat().st_size == 0
    size = db.stat().st_size
    offset = size // 2 if start == "middle" else start
    data = bytearray(db.read_bytes())
    rng = random.Random(7)
    data[offset : offset + 3 * 4096] = rng.randbytes(len(data[offset : offset + 3 * 4096]))
    db.write_bytes(bytes(data))
    with pytest.raises(CorruptStore) as info:
        touch_everything(path)
    assert "\n" not in str(info.value)


def test_garbage_over_the_whole_file(tmp_path):
    path = tmp_path / ".magis"
    fill(path, runs=2)
    db = path / "events.sqlite3"
    db.write_bytes(random.Random(3).randbytes(db.stat().st_size))
    with pytest.raises((CorruptStore, NotAStore)):
        touch_everything(path)


def test_random_damage_anywhere_gives_only_store_errors(tmp_path):
    """Small runs of random bytes at random places: every call succeeds or raises a StoreError."""
    fill(tmp_path / "pristine")
    pristine = (tmp_path / "pristine" / "events.sqlite3").read_bytes()
    rng = random.Random(11)
    outcomes = set()
    for n in range(60):
        data = bytearray(pristine)
        length = rng.choice([1, 16, 300, 5000])
        offset = rng.randrange(len(data) - length)
        data[offset : offset + length] = rng.randbytes(length)
        path = tmp_path / f"damaged{n}"
        path.mkdir()
        (path / "events.sqlite3").write_bytes(bytes(data))
        try:
            touch_everything(path)
            outcomes.add("ok")  # the bytes fell on free space, or on text that still decodes
        except (CorruptStore, NotAStore) as exc:
            assert "\n" not in str(exc)
            outcomes.add(type(exc).__name__)
    assert "CorruptStore" in outcomes


def test_undecodable_row_names_the_run_and_version(tmp_path):
    path = tmp_path / ".magis"
    fill(path, runs=2, per_run=3)
    with sqlite3.connect(path / "events.sqlite3") as conn:
        conn.execute("UPDATE events SET data = '{\"run_id\": 1}' WHERE run_id = 'run1' AND version = 3")
    conn.close()
    with SQLiteStore.open(path) as store:
        assert len(store.read("run0")) == 4
        with pytest.raises(CorruptStore, match="event 3 of run run1"):
            store.read("run1")
        with pytest.raises(CorruptStore, match="event 3 of run run1"):
            store.read_all()


def test_events_are_json_in_the_data_column(tmp_path):
    path = tmp_path / ".magis"
    fill(path, runs=2, per_run=2)
    with sqlite3.connect(path / "events.sqlite3") as conn:
        rows = conn.execute("SELECT type, data FROM events ORDER BY position").fetchall()
        meta = dict(conn.execute("SELECT key, value FROM meta"))
    conn.close()
    assert meta["magis_store"] == "1"
    assert len(rows) == 6
    for column_type, data in rows:
        assert isinstance(data, str)
        envelope = json.loads(data)
        assert envelope["event"]["type"] == column_type
        assert {"run_id", "version", "position", "time", "actor", "event_id"} <= envelope.keys()
    assert [json.loads(d)["event"]["type"] for _, d in rows[:3]] == ["RunStarted", "MeetingUtterance", "MeetingUtterance"]


def test_a_closed_store_says_so(tmp_path):
    store = SQLiteStore.open(tmp_path / ".magis", create=True)
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.list_runs()


def test_a_store_being_created_by_another_process_is_never_half_there(tmp_path):
    """A reader that opens a store the moment its file appears finds a whole store (the creator
    links it into place only once its tables and marker are written), never "not a magis store"."""
    folders = [tmp_path / f"s{i}" for i in range(25)]
    creator = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom magis_ray.store import open_store\n"
         "for f in sys.argv[1:]:\n    open_store(f, create=True).close()\n", *map(str, folders)],
        stderr=subprocess.PIPE, text=True,
    )
    try:
        for folder in folders:
            db = folder / "events.sqlite3"
            wait_until(db.exists, lambda: f"{db} appears; the creator said: {creator.stderr.read()}", poll_s=0.001,
                       while_running=creator)
            with open_store(str(folder)) as store:
                assert store.list_runs() == []
    finally:
        creator.wait(timeout=60)
    assert creator.returncode == 0
    assert not [p for f in folders for p in f.iterdir() if p.name.startswith(".")]  # no scratch file left behind


def test_search_indexes_a_store_from_before_search_and_what_other_processes_append(tmp_path):
    """No index until the first search, which indexes the whole log in short transactions; a later
    search first indexes what other processes appended meanwhile (an appender pays nothing)."""
    from magis_ray.store import fulltext

    path = tmp_path / ".magis"
    with SQLiteStore.open(path, create=True) as s:
        s.append("old", 0, [new_event(RunStarted(instance_id="i", repo="r", base_commit="c", problem_statement="p"), "cli")])
        s.append("old", 1, [new_event(MeetingUtterance(turn=i, speaker="m", text=f"word{i % 7} filler"), "manager")
                            for i in range(fulltext.CHUNK * 2 + 5)])
    db = sqlite3.connect(path / "events.sqlite3")
    assert db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'events_fts'").fetchone() == (0,)
    with SQLiteStore.open(path) as s:
        found = s.search("word3", limit=1000)
        assert len(found) == len([i for i in range(fulltext.CHUNK * 2 + 5) if i % 7 == 3])
        assert [r.version for r in found] == sorted((r.version for r in found), reverse=True)
        assert db.execute("SELECT value FROM meta WHERE key = ?", (fulltext.WATERMARK,)).fetchone() == (str(fulltext.CHUNK * 2 + 6),)
        other = writer(path, "late", 1, 3)  # another process appends "late/0/i" texts
        assert other.wait(timeout=60) == 0, other.stderr.read()
        assert sorted(r.event.text for r in s.search("late")) == ["late/0/0", "late/0/1", "late/0/2"]


def test_a_store_from_before_lease_holders_keeps_its_leases_and_older_drivers_keep_taking_them(tmp_path):
    """A store whose leases predate the holders' start times opens with them read as unknown
    (started 0, no pid space: such a holder is only known dead when its lease runs out); a
    magis-ray from before, which writes a lease as seven values, still can after a new one opened it."""
    SQLiteStore.open(tmp_path, create=True).close()
    db = tmp_path / "events.sqlite3"
    with sqlite3.connect(db) as conn:  # the store as a magis-ray before lease_holders left it
        conn.execute("DROP TABLE lease_holders")
        conn.execute("PRAGMA user_version = 0")  # it kept no format: its tables said what it had
        conn.execute("INSERT INTO leases VALUES ('r1', 'old-driver', 'h', 42, 3, 100.0, 130.0)")
    with open_store(tmp_path) as store:
        [old] = store.leases("r1")
        assert (old.owner, old.pid, old.epoch, old.started, old.pid_space) == ("old-driver", 42, 3, 0, "")
        taken = store.take_lease("r1", "new-driver", "h", 43, ttl_s=30, now=200.0, started=9, pid_space="p")
        assert (taken.epoch, taken.started) == (4, 9) and store.leases("r1") == [taken]
    with sqlite3.connect(db) as conn:  # the older magis-ray again, after the new one added its table
        conn.execute("INSERT OR REPLACE INTO leases VALUES ('r2', 'old-driver', 'h', 42, 1, 300.0, 330.0)")
    with open_store(tmp_path) as store:
        assert [(lease.key, lease.owner, lease.started) for lease in store.leases("r")] == [("r1", "new-driver", 9), ("r2", "old-driver", 0)]
