"""The EventStore on one SQLite file in WAL mode: safe for several threads and OS processes.

Layout: a store is a folder (by default `.magis/`) holding `events.sqlite3`, or a direct path
to that database file. Every event row keeps the full `Recorded` envelope as JSON in `data`,
so `sqlite3 .magis/events.sqlite3 "select data from events" | jq` shows the log.
"""
from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import urllib.parse
from pathlib import Path
from typing import Iterator, Sequence

import msgspec

from magis_ray.events.codec import encode, read_recorded
from magis_ray.events.schema import NewEvent, Recorded

from .fulltext import available, catch_up, parse_query, search_rows
from .migrations import MARKER_VALUE, NewerFormat, is_empty, marker_of, migrate
from .base import ConcurrencyConflict, CorruptStore, Fenced, Lease, MemoryEntry, NotAStore, RunInfo, StoreError, UnknownRun

DB_NAME = "events.sqlite3"
_FILE_SUFFIXES = (".sqlite3", ".sqlite", ".db")  # a new path with these names is a file, else a folder
_SQLITE_MAGIC = b"SQLite format 3\x00"
_BUSY_TIMEOUT_MS = 30_000  # how long a writer waits for another process's transaction

PRAGMAS = (
    f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}",
    # WAL lets readers run beside the one writer; FULL syncs the WAL on every commit, so a
    # committed batch survives a crash of the process and of the machine.
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = FULL",
    # Read pages straight from the OS's file cache instead of copying them in: reads run ~1.3x faster.
    "PRAGMA mmap_size = 268435456",
)

_decode_one = read_recorded  # older records upcast (events/upcasting.py)
_tags: dict[type, str] = {}


def _tag(event: object) -> str:
    cls = type(event)
    tag = _tags.get(cls)
    if tag is None:
        config = getattr(cls, "__struct_config__", None)
        if config is None or not isinstance(config.tag, str):
            raise TypeError(f"not an event: {cls.__name__}")
        tag = _tags[cls] = config.tag
    return tag


def _resolve(path: str | os.PathLike[str], create: bool) -> Path:
    """The database file for `path`: a folder's events.sqlite3, or the file itself."""
    p = Path(path)
    if p.is_dir():
        return p / DB_NAME
    if p.exists() or p.suffix in _FILE_SUFFIXES:
        return p
    if not create:
        raise NotAStore(f"no magis store at {path}")
    return p / DB_NAME


def _check_header(db: Path) -> None:
    """Tell a foreign file from a database whose first page was overwritten."""
    with open(db, "rb") as f:
        head = f.read(len(_SQLITE_MAGIC))
    if not head or head == _SQLITE_MAGIC:
        return  # an empty file is an empty database to SQLite
    size = db.stat().st_size
    if size % 512 == 0:  # SQLite files are whole pages (512 bytes or a power of two above)
        raise CorruptStore(f"{db} is damaged: its SQLite header is gone")
    raise NotAStore(f"{db} is not a magis store (not an SQLite database)")


def _wrap(exc: sqlite3.Error | UnicodeDecodeError, where: str) -> StoreError:
    """One line for any sqlite3 error, in the store's own terms."""
    if isinstance(exc, UnicodeDecodeError):  # sqlite3 met bytes that are not UTF-8 in a name, value or message
        return CorruptStore(f"{where} is damaged: text that is not UTF-8")
    name = getattr(exc, "sqlite_errorname", "")  # Python 3.11+
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if text.startswith("Could not decode to UTF-8"):  # keep the garbage itself out of the message
        return CorruptStore(f"{where} is damaged: text that is not UTF-8")
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "malformed" in text or "not a database" in text:
        return CorruptStore(f"{where} is damaged: {text}")
    if name.startswith("SQLITE_CONSTRAINT") and "events" in text:  # a racing writer took these versions
        return ConcurrencyConflict(f"{where}: {text}")
    return StoreError(f"{where}: {text}")


class SQLiteStore:
    """One connection per object, guarded by a lock so threads may share the object."""

    def __init__(self, conn: sqlite3.Connection, db: Path) -> None:
        self._conn = conn
        self._db = db
        self._lock = threading.Lock()
        self._closed = False

    @classmethod
    def open(cls, path: str | os.PathLike[str], create: bool = False) -> SQLiteStore:
        db = _resolve(path, create)
        if not db.exists() and not create:
            raise NotAStore(f"no magis store at {path}")
        try:
            if not db.exists():
                db.parent.mkdir(parents=True, exist_ok=True)
                _create_whole(db)
            _check_header(db)
        except OSError as exc:  # e.g. no permission, or a file where a folder should be
            raise StoreError(f"cannot open a store at {path}: {exc.strerror or exc}") from None
        uri = "file:" + urllib.parse.quote(str(db.resolve())) + ("?mode=rwc" if create else "?mode=rw")
        try:
            conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False, timeout=_BUSY_TIMEOUT_MS / 1000)
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            raise _wrap(exc, str(db)) from None
        try:
            _setup(conn, db, create)
        except BaseException:
            conn.close()
            raise
        return cls(conn, db)

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._closed:
                raise StoreError(f"{self._db} is closed")
            try:
                yield self._conn
            except BaseException as exc:
                if self._conn.in_transaction:  # e.g. an event that cannot be encoded: keep nothing of the batch
                    with contextlib.suppress(sqlite3.Error):
                        self._conn.execute("ROLLBACK")
                if isinstance(exc, (sqlite3.Error, UnicodeDecodeError)):
                    raise _wrap(exc, str(self._db)) from None
                raise

    # --- the log ------------------------------------------------------------------------

    def append(self, run_id: str, expected_version: int, events: Sequence[NewEvent], fence: int = 0) -> list[Recorded]:
        if not events:
            return []
        with self._locked() as conn:
            conn.execute("BEGIN IMMEDIATE")  # takes the write lock now, so max(position) stays ours
            if fence:
                row = conn.execute("SELECT epoch, host, pid FROM leases WHERE key = ?", (run_id,)).fetchone()
                if row is None or row[0] != fence:
                    conn.execute("ROLLBACK")
                    holder = f" (now driven on {row[1]}, pid {row[2]})" if row else ""
                    raise Fenced(f"run {run_id} was taken over by another driver{holder}")
            row = conn.execute("SELECT version FROM runs WHERE run_id = ?", (run_id,)).fetchone()
            current = row[0] if row else 0
            if current != expected_version:
                conn.execute("ROLLBACK")
                raise ConcurrencyConflict(f"run {run_id} is at version {current}, not {expected_version}")
            base = conn.execute("SELECT coalesce(max(position), 0) FROM events").fetchone()[0]
            recorded = [
                e.recorded(run_id, current + i, base + i)
                for i, e in enumerate(events, 1)
            ]
            rows = [(r.position, run_id, r.version, _tag(r.event), r.time, encode(r).decode()) for r in recorded]
            conn.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?)", rows)
            conn.execute(
                "INSERT INTO runs VALUES (?1, ?2, ?3, ?4) ON CONFLICT (run_id) DO UPDATE"
                " SET version = ?2, last_time = ?4",
                (run_id, recorded[-1].version, recorded[0].time, recorded[-1].time),
            )
            conn.execute("COMMIT")
            return recorded

    def read(self, run_id: str, after_version: int = 0) -> list[Recorded]:
        with self._locked() as conn:
            rows = conn.execute(
                "SELECT position, CAST(data AS BLOB) FROM events WHERE run_id = ? AND version > ? ORDER BY version",
                (run_id, after_version),
            ).fetchall()
            if not rows and conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone() is None:
                raise UnknownRun(f"no run {run_id} in the store")
        return self._decode(rows)

    def read_all(self, after_position: int = 0, limit: int | None = None) -> list[Recorded]:
        with self._locked() as conn:
            rows = conn.execute(
                "SELECT position, CAST(data AS BLOB) FROM events WHERE position > ? ORDER BY position LIMIT ?",
                (after_position, -1 if limit is None else max(limit, 0)),
            ).fetchall()
        return self._decode(rows)

    def _decode(self, rows: list[tuple[int, bytes]]) -> list[Recorded]:
        # Rows come as bytes (CAST AS BLOB): no UTF-8 decoding into str that msgspec would only read back.
        # A bare comprehension is the fast path; only on failure go row by row to name the bad event.
        try:
            return [_decode_one(data) for _, data in rows]
        except (msgspec.DecodeError, ValueError, TypeError):  # bad UTF-8; a NULL where the JSON should be
            pass
        for position, data in rows:
            try:
                _decode_one(data)
            except (msgspec.DecodeError, ValueError, TypeError) as exc:
                with self._locked() as conn:
                    row = conn.execute("SELECT run_id, version FROM events WHERE position = ?", (position,)).fetchone()
                where = f"event {row[1]} of run {row[0]}" if row else f"the event at position {position}"
                raise CorruptStore(f"{self._db}: {where} is undecodable: {exc}") from None
        return []  # not reached: some row failed above

    def version(self, run_id: str) -> int:
        with self._locked() as conn:
            row = conn.execute("SELECT version FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return row[0] if row else 0

    def list_runs(self) -> list[RunInfo]:
        with self._locked() as conn:  # rowid order is the order of each run's first append
            rows = conn.execute("SELECT run_id, version, first_time, last_time FROM runs ORDER BY rowid").fetchall()
        return [RunInfo(*row) for row in rows]

    def search(self, query: str, types: Sequence[str] = (), limit: int = 50,
               before_position: int | None = None) -> list[Recorded]:
        terms = parse_query(query)
        if not terms:
            return []
        with self._locked() as conn:
            if not available(conn):
                raise StoreError(f"{self._db}: full-text search needs an SQLite built with FTS5")
            catch_up(conn, _decode_one)  # the events appended since the last search
            rows = search_rows(conn, terms, types, limit, before_position)
        return self._decode(rows)

    # --- the summary memory -------------------------------------------------------------

    def put_summary(self, repo: str, path: str, blob_id: str, summary: str, model: str = "") -> None:
        with self._locked() as conn:
            # REPLACE gives the row a new rowid, which breaks ties on position in favour of the later write.
            conn.execute(
                "INSERT OR REPLACE INTO summaries (repo, path, blob_id, summary, position, model)"
                " SELECT ?, ?, ?, ?, coalesce(max(position), 0), ? FROM events",
                (repo, path, blob_id, summary, model),
            )

    def get_summary(self, repo: str, path: str, blob_id: str, before_position: int | None = None,
                    model: str | None = None) -> MemoryEntry | None:
        with self._locked() as conn:
            row = conn.execute(
                f"SELECT {_SUMMARY_COLUMNS} FROM summaries WHERE repo = :repo AND path = :path AND blob_id = :blob"
                " AND position < :before AND (:model IS NULL OR model = :model) ORDER BY position DESC, rowid DESC LIMIT 1",
                dict(repo=repo, path=path, blob=blob_id, before=_upper(before_position), model=model),
            ).fetchone()
        return MemoryEntry(*row) if row else None

    def latest_summary(self, repo: str, path: str, before_position: int | None = None,
                       model: str | None = None) -> MemoryEntry | None:
        with self._locked() as conn:
            row = conn.execute(
                f"SELECT {_SUMMARY_COLUMNS} FROM summaries WHERE repo = :repo AND path = :path"
                " AND position < :before AND (:model IS NULL OR model = :model) ORDER BY position DESC, rowid DESC LIMIT 1",
                dict(repo=repo, path=path, before=_upper(before_position), model=model),
            ).fetchone()
        return MemoryEntry(*row) if row else None

    # --- leases: one live driver per run --------------------------------------------------

    def take_lease(self, key: str, owner: str, host: str, pid: int, ttl_s: float, now: float, *,
                   started: int = 0, pid_space: str = "", replacing: str = "") -> Lease:
        with self._locked() as conn:
            conn.execute("BEGIN IMMEDIATE")
            row = conn.execute(f"SELECT {_LEASE_COLUMNS} FROM {_LEASES_WITH_HOLDERS} WHERE key = ?", (key,)).fetchone()
            current = Lease(*row) if row else None
            if current is not None and current.owner not in (owner, replacing) and current.live(now):
                conn.execute("ROLLBACK")
                return current
            epoch = current.epoch if current is not None and current.owner == owner else (current.epoch + 1 if current else 1)
            taken = Lease(key, owner, host, pid, epoch, now, now + ttl_s, started, pid_space)
            conn.execute("INSERT OR REPLACE INTO leases (key, owner, host, pid, epoch, renewed, expires)"
                         " VALUES (?, ?, ?, ?, ?, ?, ?)", msgspec.structs.astuple(taken)[:7])
            conn.execute("INSERT OR REPLACE INTO lease_holders VALUES (?, ?, ?)", (owner, started, pid_space))
            if current is not None and current.owner != owner:  # the last lease of a dead driver may have gone
                conn.execute("DELETE FROM lease_holders WHERE owner = ?1 AND NOT EXISTS"
                             " (SELECT 1 FROM leases WHERE owner = ?1)", (current.owner,))
            conn.execute("COMMIT")
            return taken

    def renew_leases(self, owner: str, ttl_s: float, now: float) -> list[str]:
        with self._locked() as conn:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("UPDATE leases SET renewed = ?, expires = ? WHERE owner = ? AND expires > 0", (now, now + ttl_s, owner))
            keys = [r[0] for r in conn.execute("SELECT key FROM leases WHERE owner = ? AND expires > 0", (owner,))]
            conn.execute("COMMIT")
            return keys

    def release_lease(self, key: str, owner: str) -> None:
        with self._locked() as conn:
            conn.execute("UPDATE leases SET expires = 0 WHERE key = ? AND owner = ?", (key, owner))

    def leases(self, prefix: str = "") -> list[Lease]:
        with self._locked() as conn:
            rows = conn.execute(
                f"SELECT {_LEASE_COLUMNS} FROM {_LEASES_WITH_HOLDERS} WHERE substr(key, 1, ?) = ? ORDER BY key",
                (len(prefix), prefix),
            ).fetchall()
        return [Lease(*row) for row in rows]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._conn.close()


_LEASE_COLUMNS = "key, owner, host, pid, epoch, renewed, expires, coalesce(started, 0), coalesce(pid_space, '')"
_LEASES_WITH_HOLDERS = "leases LEFT JOIN lease_holders USING (owner)"
_SUMMARY_COLUMNS = "repo, path, blob_id, summary, position, model"


def _create_whole(db: Path) -> None:
    """Make the store beside `db` and link it into place whole, so that no reader ever opens a
    store that is still being created (it would see an SQLite file without the magis tables).
    A racing creator that linked first wins; ours is dropped."""
    scratch = db.with_name(f".{db.name}.{os.getpid()}.{threading.get_ident()}.new")
    try:
        conn = sqlite3.connect(str(scratch), isolation_level=None)
        try:
            _setup(conn, scratch, create=True)
        finally:
            conn.close()  # the last connection checkpoints the WAL into the file
        try:
            os.link(scratch, db)
        except FileExistsError:
            pass
        except OSError:  # a filesystem without hard links: create in place as before
            return
    finally:
        for leftover in (scratch, scratch.with_name(scratch.name + "-wal"), scratch.with_name(scratch.name + "-shm")):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()


def _upper(before_position: int | None) -> int:
    return 2**63 - 1 if before_position is None else before_position


def _setup(conn: sqlite3.Connection, db: Path, create: bool) -> None:
    """Set the pragmas, check that the database is a magis store (or make an empty one into one,
    with `create`), and bring its layout to this magis-ray's format (store.migrations)."""
    try:
        for pragma in PRAGMAS:
            conn.execute(pragma)
        marker = marker_of(conn)
        if marker is None and not (create and is_empty(conn)):
            raise NotAStore(f"{db} is not a magis store (an SQLite database without the magis tables)")
        if marker not in (None, MARKER_VALUE):
            raise StoreError(f"{db} is a magis store marked {marker!r}, a layout this magis-ray cannot read: upgrade magis-ray")
        migrate(conn)
    except NewerFormat as exc:
        raise StoreError(f"{db} is {exc}") from None
    except (sqlite3.Error, UnicodeDecodeError) as exc:
        raise _wrap(exc, str(db)) from None
