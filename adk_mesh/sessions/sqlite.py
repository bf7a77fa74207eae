"""The embedded default session store: one SQLite file, safe for several processes.

* The file runs in WAL mode with a busy timeout, so readers never block the writer and
  processes that collide wait for each other instead of failing (:mod:`adk_mesh._sqlite`,
  shared with the SQLite memory store).
* Every write is one ``BEGIN IMMEDIATE`` transaction that reads the current app, user and
  session state, applies the delta and writes it back: two processes appending at once
  serialize on the write lock and never lose each other's keys.
* The schema is versioned with ``PRAGMA user_version``; :data:`MIGRATIONS` are applied in
  order, in one transaction, when a service first touches the file.
* All SQLite work runs on one worker thread per service (the ``sqlite3`` connection lives
  there), never on the event loop.
* ``append_event`` checks the session's version (``last_update_time``) and the event id in
  the same ``BEGIN IMMEDIATE`` transaction as its write: of two processes appending through
  one version, exactly one wins; the other gets ``SessionConflictError`` and writes nothing.
  Its transaction cannot be cut short on the worker thread, so a cancelled ``append_event``
  waits for it: the event is then both stored and in the session object, and the
  cancellation goes on.
* ``create_session`` reads its create time inside its write transaction, and makes it later
  than every create time the user's sessions ever had, deleted ones included (a mark per app
  and user, ``session_creation_marks``, that triggers raise on every insert and nothing
  lowers): sessions commit in the order of the time a listing pages by, so a paged listing
  never skips one that commits after it passed its position, even one the clock (stepped
  back) would put behind a session the listing saw and that was deleted since.
* ``claim_session`` takes an exclusive lock on a file of its own in ``<path>-claims/``
  (see :mod:`adk_mesh.sessions._claims`): a turn another process holds is refused before it
  writes anything, and a process that dies leaves no claim behind.
* ``get_session_shared`` keeps the histories it decoded in a bounded cache
  (:mod:`adk_mesh.sessions._history`) and reads only the events after the last one it holds,
  having checked that one is still the session's (another process may have appended to the
  session, or deleted and re-created it).
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any, TypeVar

from adk_mesh import _sqlite
from adk_mesh._tasks import to_the_end
from adk_mesh.errors import (
    AlreadyExistsError,
    SessionError,
    SessionNotFoundError,
)
from adk_mesh.sessions import _claims, _common, _history
from adk_mesh.sessions.base import Session, SessionService, SessionsPage
from adk_mesh.state import ScopedDelta, merge_scoped_state, split_by_scope
from adk_mesh.types import Event

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "SqliteSessionService"]

_T = TypeVar("_T")

#: The schema, as ordered steps: step ``i`` takes a file from version ``i`` to ``i + 1``.
#: Append new steps; never edit a released one.
# The body of the triggers of migration 5: a session's create time raises its user's mark.
_RAISE_MARK = """BEGIN
            INSERT INTO session_creation_marks (app_name, user_id, latest_create_time)
            VALUES (new.app_name, new.user_id, new.create_time)
            ON CONFLICT (app_name, user_id) DO UPDATE SET
                latest_create_time = max(latest_create_time, excluded.latest_create_time);
        END"""

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 1: sessions, scoped state and the event log.
    (
        """CREATE TABLE sessions (
            app_name TEXT NOT NULL,
            user_id TEXT NOT NULL,
            id TEXT NOT NULL,
            state TEXT NOT NULL,
            create_time REAL NOT NULL,
            update_time REAL NOT NULL,
            PRIMARY KEY (app_name, user_id, id)
        )""",
        """CREATE TABLE app_states (
            app_name TEXT NOT NULL PRIMARY KEY,
            state TEXT NOT NULL,
            update_time REAL NOT NULL
        )""",
        """CREATE TABLE user_states (
            app_name TEXT NOT NULL,
            user_id TEXT NOT NULL,
            state TEXT NOT NULL,
            update_time REAL NOT NULL,
            PRIMARY KEY (app_name, user_id)
        )""",
        """CREATE TABLE events (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            app_name TEXT NOT NULL,
            user_id TEXT NOT NULL,
            session_id TEXT NOT NULL,
            id TEXT NOT NULL,
            timestamp_us INTEGER NOT NULL,
            event TEXT NOT NULL
        )""",
        "CREATE INDEX events_by_session ON events (app_name, user_id, session_id, seq)",
    ),
    # 2: answer ``get_session(after=...)`` from an index instead of a scan of the session.
    (
        """CREATE INDEX events_by_session_time
            ON events (app_name, user_id, session_id, timestamp_us)""",
    ),
    # 3: one event id per session. Files written before could hold events stored with id ""
    # and events appended twice. An empty id becomes "migrated-<seq>"; a later copy of an
    # event that is byte for byte the first is dropped (it was the same event appended
    # twice); a later event that only reuses an id keeps its data under "<id>~<seq>".
    (
        """UPDATE events SET
            id = 'migrated-' || seq,
            event = json_set(event, '$.id', 'migrated-' || seq)
        WHERE id = ''""",
        """DELETE FROM events WHERE EXISTS (
            SELECT 1 FROM events AS first
            WHERE first.app_name = events.app_name AND first.user_id = events.user_id
                AND first.session_id = events.session_id AND first.id = events.id
                AND first.seq < events.seq AND first.event = events.event
        )""",
        """UPDATE events SET
            id = id || '~' || seq,
            event = json_set(event, '$.id', id || '~' || seq)
        WHERE EXISTS (
            SELECT 1 FROM events AS first
            WHERE first.app_name = events.app_name AND first.user_id = events.user_id
                AND first.session_id = events.session_id AND first.id = events.id
                AND first.seq < events.seq
        )""",
        """CREATE UNIQUE INDEX events_by_id ON events (app_name, user_id, session_id, id)""",
    ),
    # 4: list a user's sessions a page at a time in creation order from an index (keyset
    # pagination), rather than sorting every session of the user for each page. The key
    # never changes after the insert, so appends do not rewrite the index.
    ("CREATE INDEX sessions_by_creation ON sessions (app_name, user_id, create_time, id)",),
    # 5: per app and user, the latest create time ever stored, which deleting sessions does
    # not lower: a new session must come after every position a listing may have passed,
    # also that of a deleted session. Triggers keep it on every insert (and any change of a
    # create time), so a process of the previous version that opened the file before this
    # step keeps it too; it starts at each user's latest existing session.
    (
        """CREATE TABLE session_creation_marks (
            app_name TEXT NOT NULL,
            user_id TEXT NOT NULL,
            latest_create_time REAL NOT NULL,
            PRIMARY KEY (app_name, user_id)
        ) WITHOUT ROWID""",
        """INSERT INTO session_creation_marks (app_name, user_id, latest_create_time)
            SELECT app_name, user_id, MAX(create_time) FROM sessions
            GROUP BY app_name, user_id""",
        # The mark is raised to the new row's create time, never lowered (SQLite takes one
        # event per trigger: the same body for both).
        f"CREATE TRIGGER sessions_mark_creation AFTER INSERT ON sessions {_RAISE_MARK}",
        "CREATE TRIGGER sessions_mark_create_time_change AFTER UPDATE OF create_time ON "
        f"sessions {_RAISE_MARK}",
    ),
)

#: The schema version this code writes.
SCHEMA_VERSION = len(MIGRATIONS)


# A page of a user's sessions in creation order, with their own state (merged with the
# scoped state, read once per page): the first, and the one after a position
# (create_time, id) a page token names. One more row than the page is read, to tell
# whether another page follows.
_LIST_PAGE_FIRST = (
    "SELECT id, create_time, update_time, state FROM sessions "
    "WHERE app_name = ? AND user_id = ? ORDER BY create_time, id LIMIT ?"
)
_LIST_PAGE_AFTER = (
    "SELECT id, create_time, update_time, state FROM sessions "
    "WHERE app_name = ? AND user_id = ? "
    "AND (create_time, id) > (?, ?) ORDER BY create_time, id LIMIT ?"
)


def _apply_migrations(connection: sqlite3.Connection) -> None:
    """Bring the file to :data:`SCHEMA_VERSION` in one transaction (a no-op when it is)."""
    with _sqlite.write_transaction(connection):
        (version,) = connection.execute("PRAGMA user_version").fetchone()
        if version > SCHEMA_VERSION:
            raise SessionError(
                f"the session database has schema version {version}, newer than the "
                f"{SCHEMA_VERSION} this adk-mesh knows; upgrade adk-mesh"
            )
        for step in MIGRATIONS[version:]:
            for statement in step:
                connection.execute(statement)
        if version != SCHEMA_VERSION:
            connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


class SqliteSessionService(SessionService):
    """Sessions in one SQLite file.

    Args:
        path: the database file (its parent directories are created), or ``":memory:"`` for
            a private in-memory database.
        history_cache_bytes: the bound of the cache of decoded histories that
            :meth:`get_session_shared` reads incrementally, in bytes of the events' JSON
            (decoded events take ~10 times that; default 2.5 MiB); 0 turns the cache off.

    The file is opened, and migrated to the current schema, by the first call. Many tasks may
    use one service at once (their calls queue on its worker thread), and many services, in
    one process or several, may share one file. :meth:`close` closes the connection.

    Cancelling a call does not stop its transaction, which runs to its end on the worker
    thread: a cancelled ``append_event`` may still be stored (whole, never in part) while the
    in-memory ``session`` passed to it is left as it was (and so is stale: a next append
    through it is refused; appending the same event again says it is already stored).

    :meth:`claim_session` works across processes on one file (lock files in
    ``<path>-claims/``, on platforms with ``fcntl``); a private ``":memory:"`` database has
    no other process to guard against and claims nothing.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        history_cache_bytes: int = _history.DEFAULT_HISTORY_CACHE_BYTES,
    ) -> None:
        self._path = os.fspath(path)
        # Used on the worker thread only, like the connection.
        self._histories = _history.HistoryCache(history_cache_bytes, _common.decode_event)
        self._claims = (
            _claims.FileClaims(f"{self._path}-claims")
            if self._path != ":memory:" and _claims.SUPPORTED
            else None
        )
        self._file = _sqlite.SqliteFile(
            self._path, prepare=_apply_migrations, error=SessionError, kind="session"
        )

    @property
    def path(self) -> str:
        return self._path

    async def _run(self, function: Callable[[sqlite3.Connection], _T]) -> _T:
        return await self._file.run(function)

    async def migrate(self) -> int:
        """Create the file, or upgrade its schema, now rather than at the first call (as
        ``adk-mesh migrate sqlite:///...`` does); the schema version. Idempotent."""

        def version(connection: sqlite3.Connection) -> int:
            (current,) = connection.execute("PRAGMA user_version").fetchone()
            return int(current)

        return await self._run(version)

    async def close(self) -> None:
        await self._file.close()
        self._histories.clear()

    # --- the contract --------------------------------------------------------------------

    def claim_session(
        self, *, app_name: str, user_id: str, session_id: str
    ) -> AbstractAsyncContextManager[None]:
        if self._claims is None:
            return super().claim_session(app_name=app_name, user_id=user_id, session_id=session_id)
        _common.check_ids(app_name, user_id, session_id)
        self._file.check_open()
        return self._claims.claim(app_name, user_id, session_id)

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str | None = None,
        state: dict[str, Any] | None = None,
    ) -> Session:
        _common.check_ids(app_name, user_id, session_id)
        session_id = _common.new_session_id(session_id)
        scoped = split_by_scope(_common.json_copy(state)) if state else ScopedDelta()
        session_state_json = _common.dump_state(scoped.session)

        def create(connection: sqlite3.Connection) -> Session:
            with _sqlite.write_transaction(connection):
                # The listing pages in create_time order, so a session must not commit with a
                # time before one a listing may already have passed. Under the write lock no
                # other creation commits between this clock read and this commit, and the time
                # stays after every session the user ever had, deleted ones too, even when the
                # wall clock went back (a listing may have passed a deleted one).
                create_time = _next_create_time(connection, app_name, user_id)
                try:
                    connection.execute(
                        "INSERT INTO sessions (app_name, user_id, id, state, create_time, "
                        "update_time) VALUES (?, ?, ?, ?, ?, ?)",
                        (
                            app_name,
                            user_id,
                            session_id,
                            session_state_json,
                            create_time,
                            create_time,
                        ),
                    )
                except sqlite3.IntegrityError:
                    raise AlreadyExistsError(
                        f"session {session_id!r} of user {user_id!r} in app {app_name!r} "
                        "already exists"
                    ) from None
                # A history held under this id is that of a deleted session.
                self._histories.discard((app_name, user_id, session_id))
                app_state = _update_app_state(connection, app_name, scoped.app, create_time)
                user_state = _update_user_state(
                    connection, app_name, user_id, scoped.user, create_time
                )
            return Session(
                id=session_id,
                app_name=app_name,
                user_id=user_id,
                state=merge_scoped_state(app_state, user_state, scoped.session),
                last_update_time=create_time,
            )

        return await self._run(create)

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        num_recent_events: int | None = None,
        after: datetime | None = None,
    ) -> Session | None:
        _common.check_ids(app_name, user_id, session_id)
        _common.check_num_recent_events(num_recent_events)
        after_us = _common.to_micros(after) if after is not None else None

        def get(connection: sqlite3.Connection) -> Session | None:
            with _sqlite.read_transaction(connection):
                row = connection.execute(
                    "SELECT state, update_time FROM sessions "
                    "WHERE app_name = ? AND user_id = ? AND id = ?",
                    (app_name, user_id, session_id),
                ).fetchone()
                if row is None:
                    return None
                app_state, user_state = _scoped_states(connection, app_name, user_id)
                rows = _select_event_rows(
                    connection, app_name, user_id, session_id, num_recent_events, after_us
                )
            return Session(
                id=session_id,
                app_name=app_name,
                user_id=user_id,
                state=merge_scoped_state(app_state, user_state, json.loads(row[0])),
                events=[_common.decode_event(data) for (data,) in rows],
                last_update_time=row[1],
            )

        return await self._run(get)

    async def get_session_shared(
        self, *, app_name: str, user_id: str, session_id: str
    ) -> Session | None:
        _common.check_ids(app_name, user_id, session_id)
        key = (app_name, user_id, session_id)

        def get(connection: sqlite3.Connection) -> Session | None:
            with _sqlite.read_transaction(connection):
                row = connection.execute(
                    "SELECT state, update_time FROM sessions "
                    "WHERE app_name = ? AND user_id = ? AND id = ?",
                    key,
                ).fetchone()
                if row is None:
                    self._histories.discard(key)
                    return None
                app_state, user_state = _scoped_states(connection, app_name, user_id)
                held = self._histories.held(key)
                if (
                    held is not None
                    and held.last_seq
                    and not _holds_event_at(connection, key, held.last_seq)
                ):
                    # Deleted and created again since: the history held is another's.
                    self._histories.discard(key)
                    held = None
                new_rows: list[tuple[int, str]] = connection.execute(
                    "SELECT seq, event FROM events "
                    "WHERE app_name = ? AND user_id = ? AND session_id = ? AND seq > ? "
                    "ORDER BY seq",
                    (*key, held.last_seq if held is not None else 0),
                ).fetchall()
            events = self._histories.store(key, held, version=row[1], new_events=new_rows)
            # Every field is built here and valid: no validation of the shared events.
            return Session.model_construct(
                id=session_id,
                app_name=app_name,
                user_id=user_id,
                state=merge_scoped_state(app_state, user_state, json.loads(row[0])),
                events=events,
                last_update_time=row[1],
            )

        return await self._run(get)

    async def list_sessions(self, *, app_name: str, user_id: str) -> list[Session]:
        _common.check_ids(app_name, user_id)

        def list_(connection: sqlite3.Connection) -> list[Session]:
            with _sqlite.read_transaction(connection):
                rows = connection.execute(
                    "SELECT id, state, update_time FROM sessions "
                    "WHERE app_name = ? AND user_id = ? ORDER BY create_time, id",
                    (app_name, user_id),
                ).fetchall()
                app_state, user_state = _scoped_states(connection, app_name, user_id)
            return [
                Session(
                    id=session_id,
                    app_name=app_name,
                    user_id=user_id,
                    state=merge_scoped_state(app_state, user_state, json.loads(state)),
                    last_update_time=update_time,
                )
                for session_id, state, update_time in rows
            ]

        return await self._run(list_)

    async def list_sessions_page(
        self, *, app_name: str, user_id: str, page_size: int, page_token: str | None = None
    ) -> SessionsPage:
        _common.check_ids(app_name, user_id)
        _common.check_page_size(page_size)
        # One more row than the page tells whether another follows.
        limit = min(page_size + 1, _common.MAX_SQL_LIMIT)
        statement, parameters = (
            (_LIST_PAGE_FIRST, (app_name, user_id, limit))
            if page_token is None
            else (
                _LIST_PAGE_AFTER,
                (app_name, user_id, *_common.decode_page_token(page_token, (float, str)), limit),
            )
        )

        def page(
            connection: sqlite3.Connection,
        ) -> tuple[list[tuple[str, float, float, str]], dict[str, Any], dict[str, Any]]:
            # The sessions and the scoped state in one snapshot, as list_sessions reads them.
            with _sqlite.read_transaction(connection):
                rows: list[tuple[str, float, float, str]] = connection.execute(
                    statement, parameters
                ).fetchall()
                app_state, user_state = _scoped_states(connection, app_name, user_id)
            return rows, app_state, user_state

        rows, app_state, user_state = await self._run(page)
        sessions = [
            Session.model_construct(
                id=session_id,
                app_name=app_name,
                user_id=user_id,
                state=merge_scoped_state(app_state, user_state, json.loads(state)),
                events=[],
                last_update_time=update_time,
            )
            for session_id, _, update_time, state in rows[:page_size]
        ]
        next_page_token = None
        if len(rows) > page_size:
            last_id, last_create_time, _, _ = rows[page_size - 1]
            next_page_token = _common.encode_page_token(last_create_time, last_id)
        return SessionsPage(sessions, next_page_token)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        _common.check_ids(app_name, user_id, session_id)

        def delete(connection: sqlite3.Connection) -> None:
            key = (app_name, user_id, session_id)
            with _sqlite.write_transaction(connection):
                connection.execute(
                    "DELETE FROM events WHERE app_name = ? AND user_id = ? AND session_id = ?",
                    key,
                )
                connection.execute(
                    "DELETE FROM sessions WHERE app_name = ? AND user_id = ? AND id = ?", key
                )
            self._histories.discard(key)

        await self._run(delete)

    async def append_event(self, session: Session, event: Event) -> Event:
        if event.partial:
            return event
        _common.check_ids(session.app_name, session.user_id, session.id)
        _common.check_event_id(event.id)
        # Everything that can fail on the values (JSON checks, serialization) fails here,
        # before the transaction.
        scoped = _common.scoped_delta(event)
        stored_event = _common.event_to_store(event, scoped)
        encoded = _common.encode_event(stored_event)
        timestamp_us = _common.to_micros(event.timestamp)
        app_name, user_id, session_id = session.app_name, session.user_id, session.id

        held_update_time = session.last_update_time

        def append(connection: sqlite3.Connection) -> float:
            # One write transaction: the version check, the id check and the write cannot be
            # split by another connection (BEGIN IMMEDIATE takes the file's write lock first).
            with _sqlite.write_transaction(connection):
                row = connection.execute(
                    "SELECT state, update_time FROM sessions "
                    "WHERE app_name = ? AND user_id = ? AND id = ?",
                    (app_name, user_id, session_id),
                ).fetchone()
                if row is None:
                    raise SessionNotFoundError(
                        f"session {session_id!r} of user {user_id!r} in app {app_name!r} "
                        "does not exist"
                    )
                if event.id and _has_event(connection, app_name, user_id, session_id, event.id):
                    raise _common.duplicate_event(session_id, event.id)
                _common.check_fresh(app_name, user_id, session_id, held_update_time, row[1])
                update_time = _common.next_update_time(row[1])
                if scoped.session:
                    state = json.loads(row[0])
                    state.update(scoped.session)
                    connection.execute(
                        "UPDATE sessions SET state = ?, update_time = ? "
                        "WHERE app_name = ? AND user_id = ? AND id = ?",
                        (_common.dump_state(state), update_time, app_name, user_id, session_id),
                    )
                else:
                    connection.execute(
                        "UPDATE sessions SET update_time = ? "
                        "WHERE app_name = ? AND user_id = ? AND id = ?",
                        (update_time, app_name, user_id, session_id),
                    )
                _update_app_state(connection, app_name, scoped.app, update_time)
                _update_user_state(connection, app_name, user_id, scoped.user, update_time)
                try:
                    cursor = connection.execute(
                        "INSERT INTO events "
                        "(app_name, user_id, session_id, id, timestamp_us, event) "
                        "VALUES (?, ?, ?, ?, ?, ?)",
                        (app_name, user_id, session_id, stored_event.id, timestamp_us, encoded),
                    )
                except sqlite3.IntegrityError:
                    # Only a fresh UUID that collides: the checked ids were refused above.
                    raise _common.duplicate_event(session_id, stored_event.id) from None
            # Committed: a history held at the version appended through takes the event.
            seq = cursor.lastrowid
            if seq is not None:
                self._histories.appended(
                    (app_name, user_id, session_id),
                    held_version=held_update_time,
                    version=update_time,
                    seq=seq,
                    data=encoded,
                    event=stored_event,
                )
            return update_time

        # The transaction runs to its end on the worker thread even when this call is
        # cancelled, so the session object follows it before the cancellation goes on: else
        # it would miss a stored event (its caller, the Runner, would not answer its calls)
        # and be stale (the turn's next append, its record of the interruption, refused).
        update_time, cancelled = await to_the_end(self._run(append))
        if event.actions.state_delta:
            session.state.update(event.actions.state_delta)
        session.events.append(stored_event)
        session.last_update_time = update_time
        if cancelled:
            raise asyncio.CancelledError
        return stored_event


# --- SQL helpers (worker thread only) --------------------------------------------------------


def _next_create_time(connection: sqlite3.Connection, app_name: str, user_id: str) -> float:
    """The create time of the user's next session, inside the caller's write transaction: now,
    but strictly after every create time the user's sessions ever had, deleted ones included
    (the user's mark: one primary-key lookup)."""
    row = connection.execute(
        "SELECT latest_create_time FROM session_creation_marks WHERE app_name = ? AND user_id = ?",
        (app_name, user_id),
    ).fetchone()
    if row is None:
        return _common.now()
    (latest,) = row
    # The same rule as an update time, strictly after the previous one: a tie would order the
    # two by id, which may put the new one before a listing's position too.
    return _common.next_update_time(float(latest))


def _has_event(
    connection: sqlite3.Connection, app_name: str, user_id: str, session_id: str, event_id: str
) -> bool:
    row = connection.execute(
        "SELECT 1 FROM events WHERE app_name = ? AND user_id = ? AND session_id = ? AND id = ?",
        (app_name, user_id, session_id, event_id),
    ).fetchone()
    return row is not None


def _holds_event_at(connection: sqlite3.Connection, key: tuple[str, str, str], seq: int) -> bool:
    """Whether the event at log position ``seq`` is the session's (it is gone once the
    session was deleted: positions are never reused)."""
    row = connection.execute(
        "SELECT 1 FROM events WHERE seq = ? AND app_name = ? AND user_id = ? AND session_id = ?",
        (seq, *key),
    ).fetchone()
    return row is not None


def _scoped_states(
    connection: sqlite3.Connection, app_name: str, user_id: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    app_row = connection.execute(
        "SELECT state FROM app_states WHERE app_name = ?", (app_name,)
    ).fetchone()
    user_row = connection.execute(
        "SELECT state FROM user_states WHERE app_name = ? AND user_id = ?", (app_name, user_id)
    ).fetchone()
    return (
        json.loads(app_row[0]) if app_row is not None else {},
        json.loads(user_row[0]) if user_row is not None else {},
    )


def _update_app_state(
    connection: sqlite3.Connection, app_name: str, delta: dict[str, Any], update_time: float
) -> dict[str, Any]:
    """Read-modify-write of the app state inside the caller's write transaction."""
    row = connection.execute(
        "SELECT state FROM app_states WHERE app_name = ?", (app_name,)
    ).fetchone()
    state: dict[str, Any] = json.loads(row[0]) if row is not None else {}
    if delta:
        state.update(delta)
        connection.execute(
            "INSERT INTO app_states (app_name, state, update_time) VALUES (?, ?, ?) "
            "ON CONFLICT (app_name) DO UPDATE SET state = excluded.state, "
            "update_time = excluded.update_time",
            (app_name, _common.dump_state(state), update_time),
        )
    return state


def _update_user_state(
    connection: sqlite3.Connection,
    app_name: str,
    user_id: str,
    delta: dict[str, Any],
    update_time: float,
) -> dict[str, Any]:
    """Read-modify-write of the user state inside the caller's write transaction."""
    row = connection.execute(
        "SELECT state FROM user_states WHERE app_name = ? AND user_id = ?", (app_name, user_id)
    ).fetchone()
    state: dict[str, Any] = json.loads(row[0]) if row is not None else {}
    if delta:
        state.update(delta)
        connection.execute(
            "INSERT INTO user_states (app_name, user_id, state, update_time) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (app_name, user_id) DO UPDATE SET "
            "state = excluded.state, update_time = excluded.update_time",
            (app_name, user_id, _common.dump_state(state), update_time),
        )
    return state


def _select_event_rows(
    connection: sqlite3.Connection,
    app_name: str,
    user_id: str,
    session_id: str,
    num_recent_events: int | None,
    after_us: int | None,
) -> Sequence[tuple[str]]:
    if num_recent_events == 0:
        return []
    where = "app_name = ? AND user_id = ? AND session_id = ?"
    parameters: list[Any] = [app_name, user_id, session_id]
    if after_us is not None:
        where += " AND timestamp_us > ?"
        parameters.append(after_us)
    if num_recent_events is None:
        return connection.execute(
            f"SELECT event FROM events WHERE {where} ORDER BY seq", parameters
        ).fetchall()
    # A count past what LIMIT holds keeps every event, as the other stores do.
    parameters.append(min(num_recent_events, _common.MAX_SQL_LIMIT))
    rows = connection.execute(
        f"SELECT event FROM events WHERE {where} ORDER BY seq DESC LIMIT ?", parameters
    ).fetchall()
    rows.reverse()
    return rows
