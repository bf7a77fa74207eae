"""The embedded default memory store: full-text search (SQLite FTS5) in one file.

* Each event of an ingested session that has text becomes one entry: its content, author,
  time and session, in ``memory_entries``, and its text in the FTS5 table ``memory_index``.
* **Tokens**: ``porter unicode61 remove_diacritics 2``. Words are Unicode letters and digits,
  compared without case and without diacritics (``Café`` finds ``cafe``), and reduced to
  their English stem (``hiking`` finds ``hike``; other languages are stemmed the same way on
  both sides, so an exact word still finds itself). Scripts written without spaces (Chinese,
  Japanese) index each unbroken run of characters as one word.
* **Search**: the query's words (at most :data:`MAX_QUERY_WORDS` distinct ones), each quoted,
  joined with ``OR``: an entry that shares any word with the query is found, and FTS5's
  ``bm25`` ranks them, best first (ties: the order entries were added); a ``limit`` is the
  query's own ``LIMIT``. The query is never read as FTS5 syntax, so quotes,
  ``AND``/``OR``/``NEAR``, ``*``, ``:`` or parentheses in what a user or a model wrote are
  words like any other, never a syntax error.
* **Scope**: every entry carries a token derived from its app and user in a column of the
  index, and every search asks for that token too, so FTS5 only visits the user's entries;
  the app and user are checked again on the entries themselves.
* Adding a session again replaces its entries, in one ``BEGIN IMMEDIATE`` transaction:
  processes sharing the file never see a session half-replaced. Entries are kept by event
  id (an id names one immutable event of a session): only the events not indexed yet are
  added, and the entries of events no longer in the session are dropped, so the Runner's
  add after every turn indexes that turn, not the whole history again.
* The file may be shared with the SQLite session store (its tables start with ``memory_``
  and its schema version is kept in ``memory_schema``, not in ``PRAGMA user_version``). WAL,
  the busy timeout and the worker thread are those of :mod:`adk_mesh._sqlite`.
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
from datetime import datetime

from adk_mesh import _sqlite
from adk_mesh.errors import AdkIOError
from adk_mesh.memory._incremental import changed_entries, text_events
from adk_mesh.memory.base import MemoryEntry, MemoryService, check_limit
from adk_mesh.sessions.base import Session
from adk_mesh.types import Content

__all__ = ["MAX_QUERY_WORDS", "MIGRATIONS", "SCHEMA_VERSION", "SqliteMemoryService"]

#: The schema, as ordered steps: step ``i`` takes a file from version ``i`` to ``i + 1``.
#: Append new steps; never edit a released one.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 1: entries and their full-text index (rowid = memory_entries.id).
    (
        """CREATE TABLE memory_entries (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            app_name TEXT NOT NULL,
            user_id TEXT NOT NULL,
            session_id TEXT NOT NULL,
            author TEXT,
            timestamp TEXT,
            content TEXT NOT NULL
        )""",
        "CREATE INDEX memory_entries_by_session ON memory_entries (app_name, user_id, session_id)",
        """CREATE VIRTUAL TABLE memory_index USING fts5(
            scope, text, tokenize = 'porter unicode61 remove_diacritics 2'
        )""",
    ),
    # 2: the event each entry comes from, so adding a session again adds only new events.
    # Entries of older files have none: the next add of their session replaces them.
    (
        "ALTER TABLE memory_entries ADD COLUMN event_id TEXT",
        """CREATE INDEX memory_entries_by_event
            ON memory_entries (app_name, user_id, session_id, event_id)""",
    ),
)

#: The schema version this code writes.
SCHEMA_VERSION = len(MIGRATIONS)

#: Distinct words of a query that are searched for; the rest are left out.
MAX_QUERY_WORDS = 64

_WORD = re.compile(r"\w+")
# The largest LIMIT the database takes (a larger limit is no limit).
_INT64_MAX = 2**63 - 1


def _apply_migrations(connection: sqlite3.Connection) -> None:
    """Bring the file's memory tables to :data:`SCHEMA_VERSION` in one transaction."""
    with _sqlite.write_transaction(connection):
        connection.execute("CREATE TABLE IF NOT EXISTS memory_schema (version INTEGER NOT NULL)")
        row = connection.execute("SELECT version FROM memory_schema").fetchone()
        version: int = row[0] if row is not None else 0
        if version > SCHEMA_VERSION:
            raise AdkIOError(
                f"the memory tables have schema version {version}, newer than the "
                f"{SCHEMA_VERSION} this adk-mesh knows; upgrade adk-mesh"
            )
        for step in MIGRATIONS[version:]:
            for statement in step:
                connection.execute(statement)
        if row is None:
            connection.execute("INSERT INTO memory_schema (version) VALUES (?)", (SCHEMA_VERSION,))
        elif version != SCHEMA_VERSION:
            connection.execute("UPDATE memory_schema SET version = ?", (SCHEMA_VERSION,))


def _scope(app_name: str, user_id: str) -> str:
    """One token naming an app and user: letters and digits only, so the tokenizer keeps it
    whole, and the same on both sides of a search."""
    digest = hashlib.sha256(f"{app_name}\x00{user_id}".encode()).hexdigest()
    return f"scope{digest[:40]}"


def _phrase(text: str) -> str:
    """``text`` as an FTS5 string: in double quotes, its own double quotes doubled."""
    return '"' + text.replace('"', '""') + '"'


def _match_expression(app_name: str, user_id: str, query: str) -> str | None:
    """The FTS5 ``MATCH`` expression of a search, or ``None`` when the query has no word.

    Only words reach it, each as a quoted string, so nothing a user or model writes is read
    as FTS5 syntax.
    """
    words = list(dict.fromkeys(word.lower() for word in _WORD.findall(query)))
    if not words:
        return None
    terms = " OR ".join(_phrase(word) for word in words[:MAX_QUERY_WORDS])
    return f"scope : {_phrase(_scope(app_name, user_id))} AND text : ({terms})"


class SqliteMemoryService(MemoryService):
    """Memory in one SQLite file, searched with FTS5 (see the module doc).

    Args:
        path: the database file (its parent directories are created), or ``":memory:"`` for
            a private in-memory database.

    The file is opened, and its memory tables created or migrated, by the first call. Many
    tasks may use one service at once (their calls queue on its worker thread), and many
    services, in one process or several, may share one file. Cancelling a call does not stop
    its transaction: a cancelled ``add_session_to_memory`` may still land, whole.
    :meth:`close` closes the connection.

    Raises:
        AdkIOError: the file cannot be used (from any call), or the service is closed.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._file = _sqlite.SqliteFile(
            path, prepare=_apply_migrations, error=AdkIOError, kind="memory"
        )

    @property
    def path(self) -> str:
        return self._file.path

    async def close(self) -> None:
        await self._file.close()

    async def add_session_to_memory(self, session: Session) -> None:
        app_name, user_id, session_id = session.app_name, session.user_id, session.id
        key = (app_name, user_id, session_id)
        scope = _scope(app_name, user_id)
        texts = text_events(session)

        def add(connection: sqlite3.Connection) -> None:
            with _sqlite.write_transaction(connection):
                held = connection.execute(
                    "SELECT id, event_id FROM memory_entries "
                    "WHERE app_name = ? AND user_id = ? AND session_id = ?",
                    key,
                ).fetchall()
                stale, new = changed_entries(held, texts)
                connection.executemany(
                    "DELETE FROM memory_index WHERE rowid = ?", [(id_,) for id_ in stale]
                )
                connection.executemany(
                    "DELETE FROM memory_entries WHERE id = ?", [(id_,) for id_ in stale]
                )
                for event in new:
                    assert event.content is not None  # a text event
                    cursor = connection.execute(
                        "INSERT INTO memory_entries "
                        "(app_name, user_id, session_id, event_id, author, timestamp, content) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (
                            *key,
                            event.id,
                            event.author or None,
                            event.timestamp.isoformat(),
                            event.content.model_dump_json(),
                        ),
                    )
                    connection.execute(
                        "INSERT INTO memory_index (rowid, scope, text) VALUES (?, ?, ?)",
                        (cursor.lastrowid, scope, event.text),
                    )

        await self._file.run(add)

    async def search_memory(
        self, *, app_name: str, user_id: str, query: str, limit: int | None = None
    ) -> list[MemoryEntry]:
        check_limit(limit)
        expression = _match_expression(app_name, user_id, query)
        if expression is None:
            self._file.check_open()
            return []

        def search(connection: sqlite3.Connection) -> list[tuple[str, str | None, str | None, str]]:
            # bm25's weights: the scope column counts for nothing, the text for everything.
            # The limit is the query's (-1: none), so only that many entries are read back
            # and decoded, however many match.
            rows: list[tuple[str, str | None, str | None, str]] = connection.execute(
                "SELECT entry.session_id, entry.author, entry.timestamp, entry.content "
                "FROM memory_index JOIN memory_entries AS entry "
                "ON entry.id = memory_index.rowid "
                "WHERE memory_index MATCH ? AND entry.app_name = ? AND entry.user_id = ? "
                "ORDER BY bm25(memory_index, 0.0, 1.0), entry.id LIMIT ?",
                (expression, app_name, user_id, -1 if limit is None else min(limit, _INT64_MAX)),
            ).fetchall()
            return rows

        return [
            MemoryEntry(
                content=Content.model_validate_json(content),
                author=author,
                timestamp=datetime.fromisoformat(timestamp) if timestamp is not None else None,
                session_id=session_id,
            )
            for session_id, author, timestamp, content in await self._file.run(search)
        ]
