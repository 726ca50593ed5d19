"""The SQLite store's layout as an ordered list of migrations, versioned with `PRAGMA user_version`.

A store's format is the number of migrations it has had. Opening a store runs the ones it lacks,
each once, in order, in a transaction of its own that also sets the new format: a store is always
at one format, never between two, and openers racing on one file run each step once. A new store
is made by running them all. A store of a format newer than this magis-ray knows is refused.

Stores from before the format was kept (user_version 0, with the `magis_store` marker) took the
same steps by probing their tables on each open; their format is read off what they have.
"""
from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Sequence

from magis_ray.events.errors import MagisError
from magis_ray.events.schema import SCHEMA_VERSION

MARKER = "magis_store"  # meta key: this SQLite file is a magis store
MARKER_VALUE = "1"  # kept as it was: magis-rays from before the versioned format check it


@dataclass(frozen=True)
class Migration:
    """One step of the layout: SQL statements separated by `;`."""

    name: str
    sql: str

    def apply(self, conn: sqlite3.Connection) -> None:
        for statement in self.sql.split(";"):
            if statement.strip():
                conn.execute(statement)


LOG_AND_MEMORY = Migration("the event log, its runs and the summary memory", f"""
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta VALUES ('{MARKER}', '{MARKER_VALUE}'), ('event_schema_version', '{SCHEMA_VERSION}');
CREATE TABLE events (
    position INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    type TEXT NOT NULL,
    time REAL NOT NULL,
    data TEXT NOT NULL,
    UNIQUE (run_id, version)
);
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    first_time REAL NOT NULL,
    last_time REAL NOT NULL
);
CREATE TABLE summaries (repo TEXT NOT NULL, path TEXT NOT NULL, blob_id TEXT NOT NULL, summary TEXT NOT NULL,
                        position INTEGER NOT NULL, PRIMARY KEY (repo, path, blob_id));
CREATE INDEX summaries_by_file ON summaries (repo, path, position)
""")

LEASES = Migration("leases: one live driver per run", """
CREATE TABLE leases (
    key TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    renewed REAL NOT NULL,
    expires REAL NOT NULL
)
""")

# The table is rebuilt with the column in its key; each earlier summary is attributed to the
# model of the run that logged it ("" when no run did).
SUMMARIES_BY_MODEL = Migration("summaries record the model that wrote them", """
ALTER TABLE summaries RENAME TO summaries_before_models;
DROP INDEX summaries_by_file;
CREATE TABLE summaries (
    repo TEXT NOT NULL,
    path TEXT NOT NULL,
    blob_id TEXT NOT NULL,
    summary TEXT NOT NULL,
    position INTEGER NOT NULL,
    model TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (repo, path, blob_id, model)
);
CREATE INDEX summaries_by_file ON summaries (repo, path, position);
INSERT INTO summaries (repo, path, blob_id, summary, position, model)
SELECT s.repo, s.path, s.blob_id, s.summary, s.position, coalesce((
    SELECT json_extract(started.data, '$.event.settings.model')
    FROM events AS said JOIN events AS started ON started.run_id = said.run_id AND started.version = 1
    WHERE said.type = 'FileSummarized' AND json_extract(said.data, '$.event.path') = s.path
      AND json_extract(said.data, '$.event.blob_id') = s.blob_id AND json_extract(said.data, '$.event.summary') = s.summary
    ORDER BY said.position LIMIT 1), '')
FROM summaries_before_models AS s;
DROP TABLE summaries_before_models
""")

# Who each lease's holder is on its host (see Lease.started): a table of its own rather than
# columns of leases, so that a magis-ray from before it, which writes a lease as seven values,
# keeps working on the store. One row per driver that holds a lease.
LEASE_HOLDERS = Migration("who holds each lease on its host", """
CREATE TABLE lease_holders (
    owner TEXT PRIMARY KEY,
    started INTEGER NOT NULL,
    pid_space TEXT NOT NULL
)
""")

MIGRATIONS: tuple[Migration, ...] = (LOG_AND_MEMORY, LEASES, SUMMARIES_BY_MODEL, LEASE_HOLDERS)
FORMAT = len(MIGRATIONS)  # the format this magis-ray makes and reads


class NewerFormat(MagisError):
    def __init__(self, found: int):
        super().__init__(f"a magis store of format {found}; this magis-ray reads formats up to {FORMAT}: upgrade magis-ray")
        self.found = found


def format_of(conn: sqlite3.Connection) -> int:
    return conn.execute("PRAGMA user_version").fetchone()[0]


def marker_of(conn: sqlite3.Connection) -> str | None:
    """The value of the magis marker (MARKER_VALUE in every store so far); None: no magis store."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone() is None:
        return None
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (MARKER,)).fetchone()
    return row[0] if row else None


def is_empty(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table'").fetchone() is None


def unversioned_format(conn: sqlite3.Connection) -> int:
    """The format of a store from before user_version was kept: each of its opens ran every step
    its magis-ray knew, in this order, so it has the first N steps; N is read off its tables."""
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    columns = {row[1] for row in conn.execute("PRAGMA table_info(summaries)")}
    steps = ("leases" in tables, "model" in columns, "lease_holders" in tables)
    format_ = 1
    for present in steps:
        if not present:
            break
        format_ += 1
    return format_


def migrate(conn: sqlite3.Connection, migrations: Sequence[Migration] = MIGRATIONS) -> int:
    """Bring the store on `conn` (autocommit mode, used by the caller alone) to the last of
    `migrations`, each step once, in its own transaction; the format it is at afterwards.

    The caller has checked that the database is empty or a magis store. Raises NewerFormat for a
    store newer than `migrations` know, and sqlite3.Error when a step fails (that step is undone;
    the store stays at the format before it)."""
    target = len(migrations)
    while True:
        current = format_of(conn)
        if current > target:
            raise NewerFormat(current)
        if current == target:
            return current
        conn.execute("BEGIN IMMEDIATE")
        try:
            current = format_of(conn)  # another opener may have taken steps meanwhile
            if current == 0 and not is_empty(conn):
                current = unversioned_format(conn)
            if current > target:
                raise NewerFormat(current)
            if current < target:
                migrations[current].apply(conn)
                current += 1
            conn.execute(f"PRAGMA user_version = {current}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
