"""Full-text search over every run's events: the query language both backends share, and the
SQLite FTS5 index that answers it.

A query is words, "quoted phrases" and prefixes (`review*`); an event matches when it holds all
of them, compared as FTS5's unicode61 tokenizer sees text: letters and digits, case and accents
folded, everything else a separator. Nothing a user types is FTS5 syntax, so no query can fail.
Results come newest first.

The index is built off the writers' path: appending an event costs nothing more, and every
search first indexes the events appended since the last one (in short transactions, so runs
writing meanwhile wait milliseconds at most). A store made before search existed gets its index
on its first search.
"""
from __future__ import annotations

import re
import sqlite3
import unicodedata
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from magis_ray.events.schema import Recorded
from magis_ray.events.text import searchable_text

INDEX = "CREATE VIRTUAL TABLE IF NOT EXISTS events_fts USING fts5(body, content='', tokenize='unicode61 remove_diacritics 2')"
WATERMARK = "fulltext_position"  # meta key: every event up to this position is indexed, none after
CHUNK = 500  # events indexed per transaction

_TOKEN = re.compile(r"[^\W_]+")
_PART = re.compile(r'"([^"]*)"?|(\S+)')


def tokens(text: str) -> list[str]:
    """Words as FTS5's unicode61 tokenizer (remove_diacritics 2) makes them."""
    folded = "".join(c for c in unicodedata.normalize("NFKD", text.casefold()) if not unicodedata.combining(c))
    return _TOKEN.findall(folded)


@dataclass(frozen=True)
class Term:
    words: tuple[str, ...]  # consecutive tokens (one for a plain word)
    prefix: bool = False  # the last word is a prefix


def parse_query(text: str) -> list[Term]:
    """The terms of a query; [] when it has nothing to search for."""
    terms = []
    for match in _PART.finditer(text):
        phrase, word = match.groups()
        raw = phrase if phrase is not None else word
        words = tuple(tokens(raw))
        if words:
            terms.append(Term(words, prefix=phrase is None and raw.endswith("*")))
    return terms


def matches(terms: Sequence[Term], text: str) -> bool:
    """The reference semantics (the in-memory store): every term occurs, phrases in order."""
    words = tokens(text)
    return bool(terms) and all(_occurs(term, words) for term in terms)


def _occurs(term: Term, words: list[str]) -> bool:
    n = len(term.words)
    for i in range(len(words) - n + 1):
        window = words[i : i + n]
        if window[:-1] == list(term.words[:-1]) and (
            window[-1].startswith(term.words[-1]) if term.prefix else window[-1] == term.words[-1]
        ):
            return True
    return False


def fts5_query(terms: Sequence[Term]) -> str:
    """The terms as an FTS5 MATCH expression: each a quoted phrase (tokens hold no quotes)."""
    return " AND ".join('"' + " ".join(t.words) + '"' + ("*" if t.prefix else "") for t in terms)


# --- the SQLite index --------------------------------------------------------------------------


def available(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT 1 FROM pragma_compile_options WHERE compile_options = 'ENABLE_FTS5'").fetchone() is not None


def catch_up(conn: sqlite3.Connection, decode: Callable[[bytes], Recorded]) -> int:
    """Index the events appended since the last call (creating the index the first time); how
    many were indexed. `conn` is in autocommit mode and held by the caller alone."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'events_fts'").fetchone() is None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(INDEX)
        conn.execute("INSERT OR IGNORE INTO meta VALUES (?, '0')", (WATERMARK,))
        conn.execute("COMMIT")
    indexed = 0
    while True:
        done, last = _state(conn)
        if done >= last:
            return indexed
        conn.execute("BEGIN IMMEDIATE")
        done, _ = _state(conn)  # another process may have indexed meanwhile
        rows = conn.execute(
            "SELECT position, CAST(data AS BLOB) FROM events WHERE position > ? ORDER BY position LIMIT ?", (done, CHUNK)
        ).fetchall()
        if rows:
            conn.executemany("INSERT INTO events_fts (rowid, body) VALUES (?, ?)",
                             [(position, searchable_text(decode(data))) for position, data in rows])
            conn.execute("UPDATE meta SET value = ? WHERE key = ?", (str(rows[-1][0]), WATERMARK))
            indexed += len(rows)
        conn.execute("COMMIT")


def _state(conn: sqlite3.Connection) -> tuple[int, int]:
    row = conn.execute(
        "SELECT (SELECT CAST(value AS INTEGER) FROM meta WHERE key = ?), (SELECT coalesce(max(position), 0) FROM events)",
        (WATERMARK,),
    ).fetchone()
    return row[0] or 0, row[1]


def search_rows(conn: sqlite3.Connection, terms: Sequence[Term], types: Iterable[str], limit: int,
                before_position: int | None) -> list[tuple[int, bytes]]:
    kinds = list(types)
    kind_filter = f" AND e.type IN ({', '.join('?' * len(kinds))})" if kinds else ""
    return conn.execute(
        "SELECT e.position, CAST(e.data AS BLOB) FROM events_fts AS f JOIN events AS e ON e.position = f.rowid"
        f" WHERE f.events_fts MATCH ? AND f.rowid < ?{kind_filter} ORDER BY f.rowid DESC LIMIT ?",
        (fts5_query(terms), before_position or 2**63 - 1, *kinds, max(limit, 0)),
    ).fetchall()
