"""The SQLite store's layout migrations (store/migrations.py), on real files written in each older
format from that format's own DDL, as the magis-ray of the day left them. The DDL below is
history, copied once and never derived from the migrations, so that a changed migration shows."""
from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from commands import in_process
from waiting import wait_until

from magis_ray.events.codec import encode, new_event
from magis_ray.events.schema import FileSummarized, MeetingUtterance, RunSettings, RunStarted
from magis_ray.store import StoreError, open_store
from magis_ray.store.migrations import FORMAT, MIGRATIONS, Migration, migrate

# --- the layouts magis-ray wrote before user_version was kept (all with user_version 0) ---------

LOG_AND_MEMORY = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE events (
    position INTEGER PRIMARY KEY, run_id TEXT NOT NULL, version INTEGER NOT NULL, type TEXT NOT NULL,
    time REAL NOT NULL, data TEXT NOT NULL, UNIQUE (run_id, version)
);
CREATE TABLE runs (run_id TEXT PRIMARY KEY, version INTEGER NOT NULL, first_time REAL NOT NULL, last_time REAL NOT NULL);
CREATE TABLE summaries (
    repo TEXT NOT NULL, path TEXT NOT NULL, blob_id TEXT NOT NULL, summary TEXT NOT NULL, position INTEGER NOT NULL,
    PRIMARY KEY (repo, path, blob_id)
);
CREATE INDEX summaries_by_file ON summaries (repo, path, position);
INSERT INTO meta VALUES ('magis_store', '1'), ('event_schema_version', '1');
"""
LEASES = """
CREATE TABLE leases (
    key TEXT PRIMARY KEY, owner TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL, epoch INTEGER NOT NULL,
    renewed REAL NOT NULL, expires REAL NOT NULL
);
"""
SUMMARIES_WITH_MODEL = """
DROP INDEX summaries_by_file;
DROP TABLE summaries;
CREATE TABLE summaries (
    repo TEXT NOT NULL, path TEXT NOT NULL, blob_id TEXT NOT NULL, summary TEXT NOT NULL, position INTEGER NOT NULL,
    model TEXT NOT NULL DEFAULT '', PRIMARY KEY (repo, path, blob_id, model)
);
CREATE INDEX summaries_by_file ON summaries (repo, path, position);
"""
LEASE_HOLDERS = "CREATE TABLE lease_holders (owner TEXT PRIMARY KEY, started INTEGER NOT NULL, pid_space TEXT NOT NULL);"
# format N: the first N steps, in the order magis-ray took them
LAYOUTS = [LOG_AND_MEMORY, LEASES, SUMMARIES_WITH_MODEL, LEASE_HOLDERS]


def old_store(folder: Path, format_: int, *, versioned: bool = False) -> Path:
    """A store of `format_` holding one run that summarized a.py (its model: "m-old"), that
    summary in the memory, and a lease when the format has leases. `versioned`: the format kept in
    user_version, as this magis-ray keeps it; else 0, as the stores before it were left."""
    folder.mkdir(parents=True)
    db = folder / "events.sqlite3"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.executescript("".join(LAYOUTS[:format_]))
    events = [new_event(RunStarted("i1", "o/r", "abc", "fix it", settings=RunSettings(model="m-old")), "cli"),
              new_event(FileSummarized(path="a.py", blob_id="b1", summary="reads the config"), "custodian")]
    for version, event in enumerate(events, 1):
        rec = event.recorded("r1", version, version)
        conn.execute("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?)",
                     (version, "r1", version, type(rec.event).__name__, rec.time, encode(rec).decode()))
    conn.execute("INSERT INTO runs VALUES ('r1', 2, ?, ?)", (events[0].time, events[1].time))
    conn.execute("INSERT INTO summaries (repo, path, blob_id, summary, position) VALUES ('o/r', 'a.py', 'b1', 'reads the config', 2)")
    if format_ >= 2:
        conn.execute("INSERT INTO leases VALUES ('r1', 'old-driver', 'h', 42, 3, 100.0, 130.0)")
    if versioned:
        conn.execute(f"PRAGMA user_version = {format_}")
    conn.close()
    return folder


def user_version(folder: Path) -> int:
    conn = sqlite3.connect(folder / "events.sqlite3")
    try:
        return conn.execute("PRAGMA user_version").fetchone()[0]
    finally:
        conn.close()


def test_a_new_store_is_made_by_every_migration_in_order(tmp_path):
    open_store(str(tmp_path / "new"), create=True).close()
    assert user_version(tmp_path / "new") == FORMAT == len(MIGRATIONS) == len(LAYOUTS)


@pytest.mark.parametrize("format_,versioned", [(1, False), (2, False), (3, False), (4, False), (2, True)],
                         ids=["format 1", "format 2", "format 3", "format 4 unversioned", "format 2 versioned"])
def test_a_store_of_any_earlier_format_opens_migrated_with_nothing_lost(tmp_path, format_, versioned):
    folder = old_store(tmp_path / "old", format_, versioned=versioned)
    with open_store(str(folder)) as store:
        assert [type(r.event).__name__ for r in store.read("r1")] == ["RunStarted", "FileSummarized"]
        entry = store.get_summary("o/r", "a.py", "b1")
        # a store from before summaries recorded their model attributes each to its run's model
        assert (entry.summary, entry.position, entry.model) == ("reads the config", 2, "m-old" if format_ < 3 else "")
        if format_ >= 2:
            [lease] = store.leases("r1")
            assert (lease.owner, lease.epoch, lease.started, lease.pid_space) == ("old-driver", 3, 0, "")
        taken = store.take_lease("r1", "new-driver", "h", 43, ttl_s=30, now=200.0, started=9, pid_space="p")
        assert store.leases("r1") == [taken] and taken.epoch == (4 if format_ >= 2 else 1)
        store.append("r1", 2, [new_event(MeetingUtterance(0, "manager", "after the migration"), "manager")])
        store.put_summary("o/r", "b.py", "b2", "new", model="m-new")
        assert [r.version for r in store.search("migration")] == [3]
    assert user_version(folder) == FORMAT
    with open_store(str(folder)) as store:  # opened again: no step runs twice, nothing changes
        assert store.version("r1") == 3 and store.get_summary("o/r", "b.py", "b2", model="m-new").summary == "new"
    assert user_version(folder) == FORMAT


# Waits for the go file, then opens the store and reads what the migration attributed.
OPENER = """
import pathlib, sys, time
from magis_ray.store import open_store
folder, ready, go = sys.argv[1:]
pathlib.Path(ready).touch()
while not pathlib.Path(go).exists():
    time.sleep(0.001)
with open_store(folder) as store:
    print(store.get_summary("o/r", "a.py", "b1").model)
"""


def test_processes_racing_to_open_an_old_store_migrate_it_once(tmp_path):
    folder = old_store(tmp_path / "old", 1)
    go, ready = tmp_path / "go", [tmp_path / f"ready{n}" for n in range(4)]
    openers = [subprocess.Popen([sys.executable, "-c", OPENER, str(folder), str(flag), str(go)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for flag in ready]
    try:
        wait_until(lambda: all(flag.exists() for flag in ready), "every opener has started")
        go.touch()
        outputs = [opener.communicate(timeout=120) for opener in openers]
    finally:
        for opener in openers:
            if opener.poll() is None:
                opener.kill()
    for opener, (out, err) in zip(openers, outputs):
        assert (opener.returncode, out.strip()) == (0, "m-old"), err  # the whole traceback when one is refused
    assert user_version(folder) == FORMAT
    conn = sqlite3.connect(folder / "events.sqlite3")
    assert conn.execute("SELECT count(*) FROM summaries").fetchone()[0] == 1
    conn.close()


def test_a_store_newer_than_this_magis_ray_is_refused_in_one_line(tmp_path, capsys):
    folder = tmp_path / "future"
    open_store(str(folder), create=True).close()
    conn = sqlite3.connect(folder / "events.sqlite3")
    conn.execute(f"PRAGMA user_version = {FORMAT + 1}")
    conn.close()
    with pytest.raises(StoreError) as refused:
        open_store(str(folder))
    assert str(refused.value) == (f"{folder / 'events.sqlite3'} is a magis store of format {FORMAT + 1}; "
                                  f"this magis-ray reads formats up to {FORMAT}: upgrade magis-ray")
    done = in_process(capsys, "runs", "--store", folder)
    assert done.code == 2 and done.err.strip().count("\n") == 0 and f"format {FORMAT + 1}" in done.err
    assert user_version(folder) == FORMAT + 1  # refused, untouched


def test_a_failing_step_is_undone_whole_and_the_store_stays_at_the_format_before(tmp_path):
    folder = tmp_path / "store"
    open_store(str(folder), create=True).close()
    broken = Migration("a table, then a mistake", "CREATE TABLE half_done (x); INSERT INTO no_such_table VALUES (1)")
    conn = sqlite3.connect(folder / "events.sqlite3", isolation_level=None)
    with pytest.raises(sqlite3.OperationalError, match="no_such_table"):
        migrate(conn, [*MIGRATIONS, broken])
    assert conn.execute("PRAGMA user_version").fetchone()[0] == FORMAT
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'half_done'").fetchone()[0] == 0
    fixed = Migration("a table", "CREATE TABLE half_done (x)")
    assert migrate(conn, [*MIGRATIONS, fixed]) == FORMAT + 1
    assert migrate(conn, [*MIGRATIONS, fixed]) == FORMAT + 1  # once: a second CREATE TABLE would fail
    conn.close()


def test_a_store_marked_by_another_layout_is_refused(tmp_path):
    folder = tmp_path / "other"
    open_store(str(folder), create=True).close()
    conn = sqlite3.connect(folder / "events.sqlite3", isolation_level=None)
    conn.execute("UPDATE meta SET value = '2' WHERE key = 'magis_store'")
    conn.close()
    with pytest.raises(StoreError, match="marked '2'"):
        open_store(str(folder))
