"""A session store in PostgreSQL, shared by every replica of a service (asyncpg pool).

* **Tables** (prefixed ``adk_``, so the store can share a database with others):
  ``adk_sessions`` (the session's own state and its version), ``adk_app_states`` and
  ``adk_user_states`` (the scoped state), ``adk_events`` (the log, one row per event in
  append order, ``UNIQUE`` on the session and event id). The schema is versioned (see
  :mod:`adk_mesh._migrations`) and migrated at first use unless ``migrate=False``.
* **JSON as text.** Events are their pydantic JSON and states their compact JSON, in
  ``text`` columns, exactly as the SQLite store keeps them: no JSON is parsed on the server,
  values of any depth and size round-trip byte for byte (``jsonb`` would renumber ``1e300``
  as an integer and reorder keys), and a write costs no server-side parse.
* **Appends are one transaction** at READ COMMITTED: ``SELECT ... FOR UPDATE`` locks the
  session's row, then the event id and the version (``update_time``, a ``float8`` that
  round-trips exactly) are checked, the session, app and user states are read, merged and
  written back, and the event is inserted. Two writers holding one version serialise on the
  row lock; the second then sees the new version and gets
  :class:`~adk_mesh.errors.SessionConflictError`, having written nothing. Rows are always
  locked in the order session, app state, user state, so writers never deadlock.
  A cancelled ``append_event`` waits for its transaction once begun: the event is then
  both stored and in the session object, or in neither, and the cancellation goes on.
* **Creating** is ``INSERT ... ON CONFLICT DO NOTHING``: a session id taken by a concurrent
  creator is :class:`~adk_mesh.errors.AlreadyExistsError` without an aborted transaction,
  and :meth:`~adk_mesh.sessions.SessionService.get_or_create_session` then reads theirs.
  The creation time that orders a listing is the database's clock, read under a
  transaction-scoped advisory lock on the user (its creations commit in that order), so a
  replica whose clock is behind never puts a session where a listing has already been; and
  it is later than every create time the user's sessions ever had, deleted ones included
  (``adk_session_creation_marks``, raised by a trigger on every insert, never lowered), so
  neither does a database clock that stepped back after the user's latest sessions were
  deleted.
* **Reads** take one statement (the session, its scoped state and its events, in one
  snapshot). ``get_session_shared`` keeps the histories it decoded in a bounded cache
  (:mod:`adk_mesh.sessions._history`): its statement reads only the events after the last
  one held, and whether that one is still the session's (another replica may have deleted
  and re-created it); a session's events are inserted under its row lock, so their log
  positions grow in commit order and none is skipped.
* **Claims** across processes and replicas are session-level advisory locks
  (``pg_try_advisory_lock`` on a 64-bit hash of the ids) held on one connection per service,
  outside the pool (see :class:`_AdvisoryClaims`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from adk_mesh import _postgres  # first: a ConfigError when asyncpg is not installed
from adk_mesh._migrations import Migration
from adk_mesh._postgres import Connection, DedicatedConnection
from adk_mesh._tasks import to_the_end
from adk_mesh.errors import AlreadyExistsError, SessionError, SessionNotFoundError
from adk_mesh.sessions import _common, _history
from adk_mesh.sessions.base import Session, SessionService, SessionsPage
from adk_mesh.state import ScopedDelta, merge_scoped_state, split_by_scope
from adk_mesh.types import Event

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "PostgresSessionService"]

#: The schema, as ordered steps (see :mod:`adk_mesh._migrations`). Append; never edit.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        "sessions, scoped state and the event log",
        (
            """CREATE TABLE adk_sessions (
                app_name text NOT NULL,
                user_id text NOT NULL,
                id text NOT NULL,
                state text NOT NULL,
                create_time float8 NOT NULL,
                update_time float8 NOT NULL,
                PRIMARY KEY (app_name, user_id, id)
            )""",
            """CREATE TABLE adk_app_states (
                app_name text NOT NULL PRIMARY KEY,
                state text NOT NULL,
                update_time float8 NOT NULL
            )""",
            """CREATE TABLE adk_user_states (
                app_name text NOT NULL,
                user_id text NOT NULL,
                state text NOT NULL,
                update_time float8 NOT NULL,
                PRIMARY KEY (app_name, user_id)
            )""",
            """CREATE TABLE adk_events (
                seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                app_name text NOT NULL,
                user_id text NOT NULL,
                session_id text NOT NULL,
                id text NOT NULL,
                timestamp_us bigint NOT NULL,
                event text NOT NULL,
                CONSTRAINT adk_events_one_id UNIQUE (app_name, user_id, session_id, id)
            )""",
            """CREATE INDEX adk_events_by_session
                ON adk_events (app_name, user_id, session_id, seq)""",
            """CREATE INDEX adk_events_by_session_time
                ON adk_events (app_name, user_id, session_id, timestamp_us)""",
        ),
    ),
    Migration(
        # Keyset pagination: a page of a user's sessions is read from this index in creation
        # order, not sorted from all of them. The key never changes after the insert.
        "list a user's sessions a page at a time, in creation order",
        (
            """CREATE INDEX adk_sessions_by_creation
                ON adk_sessions (app_name, user_id, create_time, id)""",
        ),
    ),
    Migration(
        # A new session must come after every position a listing may have passed, also that
        # of a session deleted since: per app and user, the latest create time ever stored,
        # which deletions do not lower. A trigger keeps it on every insert (and any change of
        # a create time), so a replica of the previous version, whose pool was opened before
        # this step and which never reads the table, keeps it too.
        "the latest create time of each user's sessions, which deletions do not lower",
        (
            """CREATE TABLE adk_session_creation_marks (
                app_name text NOT NULL,
                user_id text NOT NULL,
                latest_create_time float8 NOT NULL,
                PRIMARY KEY (app_name, user_id)
            )""",
            # Raises the mark, never lowers it. The search path is the migration's, so the
            # trigger finds the table the migration made whatever a writer's search path is.
            """CREATE FUNCTION adk_sessions_mark_creation() RETURNS trigger
                LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
            BEGIN
                INSERT INTO adk_session_creation_marks AS mark
                    (app_name, user_id, latest_create_time)
                VALUES (NEW.app_name, NEW.user_id, NEW.create_time)
                ON CONFLICT (app_name, user_id) DO UPDATE SET
                    latest_create_time = GREATEST(mark.latest_create_time,
                        EXCLUDED.latest_create_time);
                RETURN NULL;
            END
            $$""",
            # Before the marks are filled: CREATE TRIGGER waits for the inserts in flight and
            # holds off new ones until the migration commits, so the statement below sees
            # every session, and every later one goes through the trigger.
            """CREATE TRIGGER adk_sessions_mark_creation
                AFTER INSERT OR UPDATE OF create_time ON adk_sessions
                FOR EACH ROW EXECUTE FUNCTION adk_sessions_mark_creation()""",
            """INSERT INTO adk_session_creation_marks (app_name, user_id, latest_create_time)
                SELECT app_name, user_id, MAX(create_time) FROM adk_sessions
                GROUP BY app_name, user_id""",
        ),
    ),
)

#: The schema version this code writes.
SCHEMA_VERSION = len(MIGRATIONS)

_STORE = "sessions"
_WHAT = "session store"

# The session, its scoped state and its events, in one statement (one snapshot). $4: only
# events strictly later (NULL: all); $5: only the last N of those (NULL: no limit).
_GET_SESSION = """
SELECT s.state, s.update_time, a.state AS app_state, u.state AS user_state,
    ARRAY(
        SELECT recent.event FROM (
            SELECT e.event, e.seq FROM adk_events AS e
            WHERE e.app_name = s.app_name AND e.user_id = s.user_id AND e.session_id = s.id
                AND ($4::bigint IS NULL OR e.timestamp_us > $4::bigint)
            ORDER BY e.seq DESC
            LIMIT $5::bigint
        ) AS recent
        ORDER BY recent.seq
    ) AS events
FROM adk_sessions AS s
LEFT JOIN adk_app_states AS a ON a.app_name = s.app_name
LEFT JOIN adk_user_states AS u ON u.app_name = s.app_name AND u.user_id = s.user_id
WHERE s.app_name = $1 AND s.user_id = $2 AND s.id = $3
"""

# The session, its scoped state, whether it still holds the event at log position $4 (0:
# nothing held) and its events after $4 with their positions, in one statement.
_GET_SESSION_SINCE = """
SELECT s.state, s.update_time, a.state AS app_state, u.state AS user_state,
    ($4::bigint = 0 OR EXISTS (
        SELECT 1 FROM adk_events AS held
        WHERE held.seq = $4::bigint AND held.app_name = s.app_name
            AND held.user_id = s.user_id AND held.session_id = s.id
    )) AS holds_position,
    ARRAY(
        SELECT e.seq FROM adk_events AS e
        WHERE e.app_name = s.app_name AND e.user_id = s.user_id AND e.session_id = s.id
            AND e.seq > $4::bigint
        ORDER BY e.seq
    ) AS seqs,
    ARRAY(
        SELECT e.event FROM adk_events AS e
        WHERE e.app_name = s.app_name AND e.user_id = s.user_id AND e.session_id = s.id
            AND e.seq > $4::bigint
        ORDER BY e.seq
    ) AS events
FROM adk_sessions AS s
LEFT JOIN adk_app_states AS a ON a.app_name = s.app_name
LEFT JOIN adk_user_states AS u ON u.app_name = s.app_name AND u.user_id = s.user_id
WHERE s.app_name = $1 AND s.user_id = $2 AND s.id = $3
"""

_LIST_SESSIONS = """
SELECT s.id, s.state, s.update_time,
    (SELECT a.state FROM adk_app_states AS a WHERE a.app_name = $1) AS app_state,
    (SELECT u.state FROM adk_user_states AS u WHERE u.app_name = $1 AND u.user_id = $2)
        AS user_state
FROM adk_sessions AS s
WHERE s.app_name = $1 AND s.user_id = $2
ORDER BY s.create_time, s.id
"""

# A page of a user's sessions in creation order, with their own state, after the position
# ($3, $4) a page token names (NULL: from the first); $5 rows at most (the caller asks for
# one more than the page, to tell whether another page follows). The scoped state they are
# merged with is read once per page (_SCOPED_STATES), in the same snapshot.
_LIST_PAGE = """
SELECT id, create_time, update_time, state FROM adk_sessions
WHERE app_name = $1 AND user_id = $2
    AND ($3::float8 IS NULL OR (create_time, id) > ($3::float8, $4::text))
ORDER BY create_time, id
LIMIT $5::bigint
"""

_SCOPED_STATES = """
SELECT (SELECT a.state FROM adk_app_states AS a WHERE a.app_name = $1) AS app_state,
    (SELECT u.state FROM adk_user_states AS u WHERE u.app_name = $1 AND u.user_id = $2)
        AS user_state
"""

# Locks the session's row for the append's transaction; says whether it holds the event id.
_LOCK_SESSION = """
SELECT s.state, s.update_time, EXISTS (
    SELECT 1 FROM adk_events AS e
    WHERE e.app_name = s.app_name AND e.user_id = s.user_id AND e.session_id = s.id
        AND e.id = $4
) AS has_event
FROM adk_sessions AS s
WHERE s.app_name = $1 AND s.user_id = $2 AND s.id = $3
FOR UPDATE
"""


@dataclass(frozen=True)
class _ScopedTable:
    """How to read-modify-write one scope's state row (app or user)."""

    read: str
    lock: str
    insert: str
    update: str


_APP_STATE = _ScopedTable(
    read="SELECT state FROM adk_app_states WHERE app_name = $1",
    lock="SELECT state FROM adk_app_states WHERE app_name = $1 FOR UPDATE",
    insert="INSERT INTO adk_app_states (app_name, state, update_time) VALUES ($1, $2, $3) "
    "ON CONFLICT (app_name) DO NOTHING RETURNING 1",
    update="UPDATE adk_app_states SET state = $2, update_time = $3 WHERE app_name = $1",
)
_USER_STATE = _ScopedTable(
    read="SELECT state FROM adk_user_states WHERE app_name = $1 AND user_id = $2",
    lock="SELECT state FROM adk_user_states WHERE app_name = $1 AND user_id = $2 FOR UPDATE",
    insert="INSERT INTO adk_user_states (app_name, user_id, state, update_time) "
    "VALUES ($1, $2, $3, $4) ON CONFLICT (app_name, user_id) DO NOTHING RETURNING 1",
    update="UPDATE adk_user_states SET state = $3, update_time = $4 "
    "WHERE app_name = $1 AND user_id = $2",
)


class PostgresSessionService(SessionService):
    """Sessions in a PostgreSQL database, through a pool of asyncpg connections.

    Args:
        url: ``postgresql://user:password@host:port/database`` (or ``postgres://``); query
            parameters such as ``sslmode`` are asyncpg's (see :mod:`adk_mesh._postgres`).
        min_size: connections kept open (default 1; 0 opens them only when needed).
        max_size: connections at most (default 10); calls beyond wait for one.
        migrate: migrate the schema at first use (default). With False the store only
            checks that the schema is current, and refuses to run otherwise: run
            ``adk-mesh migrate URL`` first.
        connect_timeout: seconds to open one connection.
        pool_options: more keyword arguments for ``asyncpg.create_pool`` (``ssl``,
            ``statement_cache_size=0`` behind PgBouncer in transaction mode, ...).
        history_cache_bytes: the bound of the cache of decoded histories that
            :meth:`get_session_shared` reads incrementally, in bytes of the events' JSON
            (decoded events take ~10 times that; default 2.5 MiB); 0 turns the cache off.

    Nothing connects until the first call, so the service can be built outside an event
    loop. Many tasks may use one service at once (each call takes a pooled connection), and
    any number of services, in any processes, may share one database. A call cancelled
    mid-transaction is rolled back whole, never left in part. :meth:`close` closes the pool
    and the claims' connection.

    Raises:
        ConfigError: a URL that is not a PostgreSQL URL, or pool sizes that make no sense.
    """

    def __init__(
        self,
        url: str,
        *,
        min_size: int = _postgres.DEFAULT_MIN_SIZE,
        max_size: int = _postgres.DEFAULT_MAX_SIZE,
        migrate: bool = True,
        connect_timeout: float = _postgres.DEFAULT_CONNECT_TIMEOUT,
        pool_options: Mapping[str, Any] | None = None,
        history_cache_bytes: int = _history.DEFAULT_HISTORY_CACHE_BYTES,
    ) -> None:
        # Used on the event loop only, in steps that do not await.
        self._histories = _history.HistoryCache(history_cache_bytes, _common.decode_event)
        self._database = _postgres.PostgresDatabase(
            url,
            store=_STORE,
            migrations=MIGRATIONS,
            error=SessionError,
            what=_WHAT,
            min_size=min_size,
            max_size=max_size,
            migrate=migrate,
            connect_timeout=connect_timeout,
            pool_options=pool_options,
        )
        self._claims = _AdvisoryClaims(self._database)

    @property
    def url(self) -> str:
        """The database URL, its password replaced by ``***``."""
        return self._database.url

    async def migrate(self) -> int:
        """Create or upgrade the schema now (as ``adk-mesh migrate`` does); its version."""
        return await self._database.migrate()

    async def close(self) -> None:
        """Close the claims' connection (letting go of its claims) and the pool. Idempotent."""
        await self._claims.close()
        await self._database.close()
        self._histories.clear()

    # --- the contract --------------------------------------------------------------------

    def claim_session(
        self, *, app_name: str, user_id: str, session_id: str
    ) -> AbstractAsyncContextManager[None]:
        _common.check_ids(app_name, user_id, session_id)
        if self._database.closed:
            raise SessionError(f"the PostgreSQL {_WHAT} is closed")
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
        create_time = _common.now()
        async with (
            self._database.connection("creating a session") as connection,
            connection.transaction(),
        ):
            # The listing's order (create_time) comes from one clock, the database's, not
            # this replica's, which may be behind another's: a session created now must
            # come after every session a listing may already be past. Creations of one
            # user are serialised until commit, so that they also commit in that order (a
            # listing never sees a later one before an earlier one in flight).
            await connection.execute(
                "SELECT pg_advisory_xact_lock($1)",
                _postgres.advisory_key("session-creations", app_name, user_id),
            )
            # And after every create time the user's sessions ever had, deleted ones too (a
            # listing may have passed a deleted one), even when the database's clock went
            # back (a time step, a failover to a server whose clock is behind): the user's
            # mark, one primary-key lookup; the insert's trigger raises it.
            created = await connection.fetchval(
                "INSERT INTO adk_sessions (app_name, user_id, id, state, create_time, "
                "update_time) VALUES ($1, $2, $3, $4, GREATEST("
                "extract(epoch FROM clock_timestamp()), "
                "(SELECT latest_create_time FROM adk_session_creation_marks "
                "WHERE app_name = $1 AND user_id = $2) + 1e-6), $5) "
                "ON CONFLICT (app_name, user_id, id) DO NOTHING RETURNING 1",
                app_name,
                user_id,
                session_id,
                session_state_json,
                create_time,
            )
            if created is None:
                raise AlreadyExistsError(
                    f"session {session_id!r} of user {user_id!r} in app {app_name!r} already exists"
                )
            # A history held under this id is that of a deleted session.
            self._histories.discard((app_name, user_id, session_id))
            app_state = await _update_scoped(
                connection, _APP_STATE, (app_name,), scoped.app, create_time
            )
            user_state = await _update_scoped(
                connection, _USER_STATE, (app_name, user_id), scoped.user, create_time
            )
        return Session(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=merge_scoped_state(app_state, user_state, scoped.session),
            last_update_time=create_time,
        )

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
        # A count past what LIMIT holds keeps every event, as the other stores do.
        recent = (
            None if num_recent_events is None else min(num_recent_events, _common.MAX_SQL_LIMIT)
        )
        async with self._database.connection("reading a session") as connection:
            row = await connection.fetchrow(
                _GET_SESSION, app_name, user_id, session_id, after_us, recent
            )
        if row is None:
            return None
        return Session(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=merge_scoped_state(
                _load_state(row["app_state"]),
                _load_state(row["user_state"]),
                json.loads(row["state"]),
            ),
            events=[_common.decode_event(data) for data in row["events"]],
            last_update_time=row["update_time"],
        )

    async def get_session_shared(
        self, *, app_name: str, user_id: str, session_id: str
    ) -> Session | None:
        _common.check_ids(app_name, user_id, session_id)
        key = (app_name, user_id, session_id)
        held = self._histories.held(key)
        async with self._database.connection("reading a session") as connection:
            row = await connection.fetchrow(
                _GET_SESSION_SINCE, *key, held.last_seq if held is not None else 0
            )
            if row is not None and not row["holds_position"]:
                # Deleted and created again since: the history held is another's.
                self._histories.discard(key)
                held = None
                row = await connection.fetchrow(_GET_SESSION_SINCE, *key, 0)
        if row is None:
            self._histories.discard(key)
            return None
        events = self._histories.store(
            key,
            held,
            version=row["update_time"],
            new_events=list(zip(row["seqs"], row["events"], strict=True)),
        )
        # Every field is built here and valid: no validation of the shared events.
        return Session.model_construct(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=merge_scoped_state(
                _load_state(row["app_state"]),
                _load_state(row["user_state"]),
                json.loads(row["state"]),
            ),
            events=events,
            last_update_time=row["update_time"],
        )

    async def list_sessions(self, *, app_name: str, user_id: str) -> list[Session]:
        _common.check_ids(app_name, user_id)
        async with self._database.connection("listing sessions") as connection:
            rows = await connection.fetch(_LIST_SESSIONS, app_name, user_id)
        return [
            Session(
                id=row["id"],
                app_name=app_name,
                user_id=user_id,
                state=merge_scoped_state(
                    _load_state(row["app_state"]),
                    _load_state(row["user_state"]),
                    json.loads(row["state"]),
                ),
                last_update_time=row["update_time"],
            )
            for row in rows
        ]

    async def list_sessions_page(
        self, *, app_name: str, user_id: str, page_size: int, page_token: str | None = None
    ) -> SessionsPage:
        _common.check_ids(app_name, user_id)
        _common.check_page_size(page_size)
        after: tuple[Any, ...] = (None, None)
        if page_token is not None:
            after = _common.decode_page_token(page_token, (float, str))
        async with (
            self._database.connection("listing sessions") as connection,
            # One snapshot for the page and the scoped state it is merged with, as
            # list_sessions' single statement reads them; the scoped state once, not per row.
            connection.transaction(isolation="repeatable_read", readonly=True),
        ):
            rows = await connection.fetch(
                _LIST_PAGE,
                app_name,
                user_id,
                *after,
                min(page_size + 1, _common.MAX_SQL_LIMIT),
            )
            scoped = await connection.fetchrow(_SCOPED_STATES, app_name, user_id)
        app_state = _load_state(scoped["app_state"] if scoped is not None else None)
        user_state = _load_state(scoped["user_state"] if scoped is not None else None)
        sessions = [
            Session.model_construct(
                id=row["id"],
                app_name=app_name,
                user_id=user_id,
                state=merge_scoped_state(app_state, user_state, json.loads(row["state"])),
                events=[],
                last_update_time=row["update_time"],
            )
            for row in rows[:page_size]
        ]
        next_page_token = None
        if len(rows) > page_size:
            last = rows[page_size - 1]
            next_page_token = _common.encode_page_token(last["create_time"], last["id"])
        return SessionsPage(sessions, next_page_token)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        _common.check_ids(app_name, user_id, session_id)
        async with (
            self._database.connection("deleting a session") as connection,
            connection.transaction(),
        ):
            # The session's row first: its lock waits for an append in flight, whose event
            # the second statement (a fresh snapshot at READ COMMITTED) then sees and deletes.
            await connection.execute(
                "DELETE FROM adk_sessions WHERE app_name = $1 AND user_id = $2 AND id = $3",
                app_name,
                user_id,
                session_id,
            )
            await connection.execute(
                "DELETE FROM adk_events WHERE app_name = $1 AND user_id = $2 AND session_id = $3",
                app_name,
                user_id,
                session_id,
            )
        self._histories.discard((app_name, user_id, session_id))

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

        async def transact(connection: Connection) -> tuple[float, int]:
            try:
                async with connection.transaction():
                    return await _append(
                        connection,
                        (app_name, user_id, session_id),
                        held_update_time,
                        event.id,
                        scoped,
                        stored_event.id,
                        timestamp_us,
                        encoded,
                    )
            except _postgres.UniqueViolationError:
                # Only a fresh UUID that collides: a given id was checked in the transaction.
                raise _common.duplicate_event(session_id, stored_event.id) from None

        async with self._database.connection("appending an event") as connection:
            # Once begun, the transaction runs to its end even when this call is cancelled:
            # cancelled, asyncpg asks the server to cancel the statement, and one that lands
            # while COMMIT runs leaves unknown whether the event is stored. So the session
            # object follows the database before the cancellation goes on (as on SQLite):
            # else it would miss a stored event (its caller, the Runner, would not answer its
            # calls) and be stale (the turn's next append, its record of the interruption,
            # refused).
            (update_time, seq), cancelled = await to_the_end(transact(connection))
        # Committed: a history held at the version appended through takes the event.
        self._histories.appended(
            (app_name, user_id, session_id),
            held_version=held_update_time,
            version=update_time,
            seq=seq,
            data=encoded,
            event=stored_event,
        )
        if event.actions.state_delta:
            session.state.update(event.actions.state_delta)
        session.events.append(stored_event)
        session.last_update_time = update_time
        if cancelled:
            raise asyncio.CancelledError
        return stored_event


# --- SQL helpers ------------------------------------------------------------------------------


async def _append(
    connection: Connection,
    key: tuple[str, str, str],
    held_update_time: float,
    given_id: str,
    scoped: ScopedDelta,
    event_id: str,
    timestamp_us: int,
    encoded: str,
) -> tuple[float, int]:
    """The append's transaction (see the module doc); the session's new version and the
    event's log position."""
    app_name, user_id, session_id = key
    row = await connection.fetchrow(_LOCK_SESSION, app_name, user_id, session_id, given_id)
    if row is None:
        raise SessionNotFoundError(
            f"session {session_id!r} of user {user_id!r} in app {app_name!r} does not exist"
        )
    if row["has_event"]:
        raise _common.duplicate_event(session_id, given_id)
    stored_update_time: float = row["update_time"]
    _common.check_fresh(app_name, user_id, session_id, held_update_time, stored_update_time)
    update_time = _common.next_update_time(stored_update_time)
    if scoped.session:
        state = json.loads(row["state"])
        state.update(scoped.session)
        await connection.execute(
            "UPDATE adk_sessions SET state = $4, update_time = $5 "
            "WHERE app_name = $1 AND user_id = $2 AND id = $3",
            app_name,
            user_id,
            session_id,
            _common.dump_state(state),
            update_time,
        )
    else:
        await connection.execute(
            "UPDATE adk_sessions SET update_time = $4 "
            "WHERE app_name = $1 AND user_id = $2 AND id = $3",
            app_name,
            user_id,
            session_id,
            update_time,
        )
    await _update_scoped(connection, _APP_STATE, (app_name,), scoped.app, update_time)
    await _update_scoped(connection, _USER_STATE, (app_name, user_id), scoped.user, update_time)
    seq: int = await connection.fetchval(
        "INSERT INTO adk_events (app_name, user_id, session_id, id, timestamp_us, event) "
        "VALUES ($1, $2, $3, $4, $5, $6) RETURNING seq",
        app_name,
        user_id,
        session_id,
        event_id,
        timestamp_us,
        encoded,
    )
    return update_time, seq


def _load_state(data: str | None) -> dict[str, Any]:
    return json.loads(data) if data is not None else {}


async def _update_scoped(
    connection: Connection,
    table: _ScopedTable,
    key: tuple[str, ...],
    delta: dict[str, Any],
    update_time: float,
) -> dict[str, Any]:
    """The scope's state after ``delta``, read (and, for a delta, written) in the caller's
    transaction. Writing locks the row first, so concurrent writers merge, never overwrite."""
    if not delta:
        data = await connection.fetchval(table.read, *key)
        return _load_state(data)
    while True:
        data = await connection.fetchval(table.lock, *key)
        if data is not None:
            state = _load_state(data)
            state.update(delta)
            await connection.execute(table.update, *key, _common.dump_state(state), update_time)
            return state
        # No row yet: insert one; a concurrent first writer makes ours a no-op (it waited
        # for theirs to commit), and the next round locks and merges into theirs.
        state = dict(delta)
        inserted = await connection.fetchval(
            table.insert, *key, _common.dump_state(state), update_time
        )
        if inserted is not None:
            return state


# --- claims -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Request:
    """Lock (the answer: whether it was taken) or unlock (the answer: True once let go)."""

    lock: bool
    key: int
    answer: asyncio.Future[bool]


class _AdvisoryClaims:
    """Claims on sessions as session-level advisory locks on one connection of their own.

    A claim is ``pg_try_advisory_lock`` on a 64-bit hash of the ids: it never waits, and the
    server lets go of every lock of a connection that ends, so a process that dies (kill -9
    included) leaves no claim behind once the server notices the connection is gone.

    One connection, outside the pool, holds every claim of the service: a claim lasts a
    whole turn (model calls included), and claims holding pooled connections would starve
    the appends of the very turns they guard. Advisory locks nest on one connection, so a
    second claim on a session this process holds is refused here, before the server is
    asked. The connection's queries run one at a time on a worker task, fed by a queue:
    letting go of a claim enqueues its unlock and waits for it (so the next holder, in any
    process, finds the session free), and a cancellation cannot lose the unlock, already
    queued; a lock whose claimant was cancelled while waiting is let go as soon as taken.

    If the connection fails, its locks are gone with it: claims in flight then guard
    nothing, and the stale-append check is the only guard of their turns (as for a store
    without claims). The next claim opens a new connection.
    """

    def __init__(self, database: _postgres.PostgresDatabase) -> None:
        self._database = database
        self._held: set[int] = set()  # claimed by this process (being locked, or locked)
        self._requests: asyncio.Queue[_Request] = asyncio.Queue()
        self._worker: asyncio.Task[None] | None = None
        self._connection: DedicatedConnection | None = None
        self._locked: set[int] = set()  # locked on the current connection
        self._closed = False

    @contextlib.asynccontextmanager
    async def claim(self, app_name: str, user_id: str, session_id: str) -> AsyncIterator[None]:
        key = _postgres.advisory_key("session-claim", app_name, user_id, session_id)
        if key in self._held:
            raise _common.busy_session(app_name, user_id, session_id)
        self._held.add(key)
        loop = asyncio.get_running_loop()
        try:
            answer: asyncio.Future[bool] = loop.create_future()
            self._submit(_Request(lock=True, key=key, answer=answer))
            acquired = await answer
        except BaseException:
            self._held.discard(key)
            if answer.done() and not answer.cancelled() and answer.exception() is None:
                # Cancelled after the lock was taken, before this task resumed: let it go.
                if answer.result() and not self._closed:
                    self._submit(_Request(lock=False, key=key, answer=loop.create_future()))
            raise
        if not acquired:
            self._held.discard(key)
            raise _common.busy_session(app_name, user_id, session_id)
        try:
            yield
        finally:
            self._held.discard(key)
            if not self._closed:
                released: asyncio.Future[bool] = loop.create_future()
                self._submit(_Request(lock=False, key=key, answer=released))
                # Shielded: a cancellation here leaves the queued unlock to the worker.
                await asyncio.shield(released)

    def _submit(self, request: _Request) -> None:
        if self._closed:
            raise SessionError(f"the PostgreSQL {_WHAT} is closed")
        self._requests.put_nowait(request)
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(
                self._work(), name="adk-mesh-postgres-claims"
            )

    async def _work(self) -> None:
        while True:
            request = await self._requests.get()
            try:
                await self._serve(request)
            except asyncio.CancelledError:
                _closed_under(request)
                raise
            except Exception as error:
                # The connection failed (or could not be opened): drop it, and with it every
                # lock it held (an unlock is then done); a claim that asked is told why.
                await self._drop_connection()
                if request.answer.done():
                    continue
                if not request.lock:
                    request.answer.set_result(True)
                else:
                    if not isinstance(error, SessionError):
                        error = self._database.failure("claiming a session", error)
                    request.answer.set_exception(error)

    async def _serve(self, request: _Request) -> None:
        if not request.lock:
            if request.key in self._locked and self._connection is not None:
                self._locked.discard(request.key)
                await self._connection.execute("SELECT pg_advisory_unlock($1)", request.key)
            if not request.answer.done():
                request.answer.set_result(True)
            return
        if request.answer.cancelled():
            return  # nobody waits for this claim any more: do not take it
        connection = self._connection
        if connection is None or connection.is_closed():
            self._locked.clear()
            connection = self._connection = await self._database.connect()
        acquired = bool(await connection.fetchval("SELECT pg_try_advisory_lock($1)", request.key))
        if acquired:
            self._locked.add(request.key)
        if request.answer.cancelled():
            if acquired:  # the claimant went away while we asked: let go at once
                self._locked.discard(request.key)
                await connection.execute("SELECT pg_advisory_unlock($1)", request.key)
            return
        request.answer.set_result(acquired)

    async def _drop_connection(self) -> None:
        connection, self._connection = self._connection, None
        self._locked.clear()
        if connection is not None:
            connection.terminate()

    async def close(self) -> None:
        """Stop the worker and close the connection (the server lets go of every claim)."""
        if self._closed:
            return
        self._closed = True
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
        while not self._requests.empty():
            _closed_under(self._requests.get_nowait())
        connection, self._connection = self._connection, None
        self._locked.clear()
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.close(timeout=5)


def _closed_under(request: _Request) -> None:
    """Answer a request the closing service will not serve: a lock is refused, an unlock is
    done (closing the connection lets go of every lock)."""
    if request.answer.done():
        return
    if request.lock:
        request.answer.set_exception(SessionError(f"the PostgreSQL {_WHAT} is closed"))
    else:
        request.answer.set_result(True)
