"""A session store in the process's memory: for tests, development and single-process runs."""

from __future__ import annotations

import contextlib
import itertools
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from adk_mesh._bounds import check_bounds
from adk_mesh.errors import AlreadyExistsError, SessionNotFoundError
from adk_mesh.sessions import _common, _history
from adk_mesh.sessions.base import Session, SessionService, SessionsPage
from adk_mesh.state import merge_scoped_state, split_by_scope
from adk_mesh.types import Event

__all__ = ["DEFAULT_MAX_SESSIONS", "InMemorySessionService"]

#: How many sessions an :class:`InMemorySessionService` keeps by default (the least recently
#: used that are not in use go first). A one-turn session with a tool call takes ~6 KiB.
DEFAULT_MAX_SESSIONS = 1_000

_SessionKey = tuple[str, str, str]
_UserKey = tuple[str, str]

# The clock of last uses (a module attribute so tests can move time).
_monotonic = time.monotonic


@dataclass
class _StoredSession:
    state: dict[str, Any]
    last_update_time: float
    # When the session was last created, read or appended to (``_monotonic``).
    last_used: float
    # The session's rank in creation order (``list_sessions`` lists in that order; the
    # store's own order is the least recently used first).
    created: int = 0
    # (timestamp, event JSON): the serialized form makes stored events immutable without a
    # deep copy of the whole session on every read or append.
    events: list[tuple[datetime, str]] = field(default_factory=list)
    event_ids: set[str] = field(default_factory=set)
    # The Session objects handed out for this session (or appended through) that are alive,
    # by id(): while one is, a caller (a running turn) holds the session, and it is not
    # evicted. A view that dies is reported by its weakref's callback (see ``_Released``).
    views: dict[int, weakref.ref[Session]] = field(default_factory=dict)


# A view that died: the session's key, the view's id(), its weakref, and when it died.
_Released = tuple[_SessionKey, int, "weakref.ref[Session]", float]


class InMemorySessionService(SessionService):
    """Keeps sessions, app state and user state in dictionaries; nothing survives the process.

    Every method runs without awaiting anything, so each call is atomic with respect to the
    other tasks of the event loop: the stale-append check and the write it guards cannot be
    split by another task. Events are stored as JSON and parsed afresh by
    :meth:`get_session`, so neither the objects passed in nor the ones returned share anything
    with the store. ``append_event`` returns the event passed in when it has an id and no
    ``temp:`` keys (only its JSON is kept), else a shallow copy with an id and without them.

    **Bounded.** The store keeps at most ``max_sessions`` sessions (default
    :data:`DEFAULT_MAX_SESSIONS`; ``None``: no bound), least recently used first out: creating
    a session past the bound evicts the sessions least recently created, read, appended to or
    let go (the last of its objects dropped, or its claim ended). With ``ttl`` (seconds;
    default ``None``, no expiry) a session unused for that long is dropped too. Eviction
    never breaks a running turn: a session is *in use*, and never evicted or expired, while a
    :class:`~adk_mesh.sessions.Session` object this store returned for it (or that was
    appended through) is still alive — a turn holds one from its first read to its last
    append — or while :meth:`claim_session` holds it. So the store may hold more than
    ``max_sessions`` when more than that are in use at once; eviction never looks at them
    (it keeps the idle sessions apart), so creating a session costs the same with 5,000 in
    use as with none. An evicted or expired session is gone as if deleted:
    :meth:`get_session` returns ``None``.

    **Shared reads.** :meth:`get_session_shared` (the Runner's read) keeps the events it
    decoded and the ones appended since (the objects ``append_event`` returned), as the SQL
    stores do, so a turn decodes none of the history: its cost does not grow with it. Kept
    for the sessions read most recently, up to ``history_cache_bytes`` of the events' JSON
    (default 2.5 MiB; decoded events take ~10 times that; 0 turns it off).

    A user's state (``user:`` keys) outlives the user's sessions, so that a new session sees
    it, for the ``max_sessions`` users who most recently lost their last session (and, with
    ``ttl``, for ``ttl`` seconds); then it goes too. App state (``app:`` keys) is kept, one
    dictionary per app.

    Raises:
        ConfigError: ``max_sessions`` is below 1 or ``ttl`` is not positive.
    """

    def __init__(
        self,
        *,
        max_sessions: int | None = DEFAULT_MAX_SESSIONS,
        ttl: float | None = None,
        history_cache_bytes: int = _history.DEFAULT_HISTORY_CACHE_BYTES,
    ) -> None:
        check_bounds(ttl, max_sessions=max_sessions)
        self.max_sessions = max_sessions
        self.ttl = ttl
        # Decoded histories for get_session_shared; a session's log position is the count
        # of its events, its version its last_update_time.
        self._histories = _history.HistoryCache(history_cache_bytes, _common.decode_event)
        # Least recently used first.
        self._sessions: OrderedDict[_SessionKey, _StoredSession] = OrderedDict()
        # The sessions not in use (the only ones eviction and expiry may drop), least recently
        # used or released first: finding the next victim never walks past sessions in use.
        self._idle: OrderedDict[_SessionKey, None] = OrderedDict()
        # Views that died since the last call; weakref callbacks only append here (they may
        # run at any point, even inside another method), each call settles them first.
        self._released: deque[_Released] = deque()
        self._app_states: dict[str, dict[str, Any]] = {}
        self._user_states: dict[_UserKey, dict[str, Any]] = {}
        # Each user's sessions (id to creation rank) in creation order, so that listing a
        # user walks their sessions only; and users without sessions whose state is still
        # kept (with the time they lost their last one), oldest first.
        self._user_sessions: dict[_UserKey, dict[str, int]] = {}
        self._orphans: OrderedDict[_UserKey, float] = OrderedDict()
        # Sessions held by claim_session, with how many claims hold each.
        self._claims: dict[_SessionKey, int] = {}
        self._creations = itertools.count()

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
        key = (app_name, user_id, session_id)
        self._settle()
        self._expire()
        if key in self._sessions:
            raise AlreadyExistsError(
                f"session {session_id!r} of user {user_id!r} in app {app_name!r} already exists"
            )
        scoped = split_by_scope(_common.json_copy(state)) if state else None
        stored = _StoredSession(
            state={},
            last_update_time=_common.now(),
            last_used=_monotonic(),
            created=next(self._creations),
        )
        user = (app_name, user_id)
        self._orphans.pop(user, None)
        self._user_sessions.setdefault(user, {})[session_id] = stored.created
        if scoped is not None:
            stored.state.update(scoped.session)
            if scoped.app:
                self._app_states.setdefault(app_name, {}).update(scoped.app)
            if scoped.user:
                self._user_states.setdefault(user, {}).update(scoped.user)
        self._sessions[key] = stored
        session = self._build_session(key, stored, [])
        self._evict()
        return session

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        num_recent_events: int | None = None,
        after: datetime | None = None,
    ) -> Session | None:
        _common.check_num_recent_events(num_recent_events)
        key = (app_name, user_id, session_id)
        stored = self._read(key)
        if stored is None:
            return None
        selected = _common.select_events(stored.events, num_recent_events, after)
        return self._build_session(
            key, stored, [_common.decode_event(data) for _, data in selected]
        )

    async def get_session_shared(
        self, *, app_name: str, user_id: str, session_id: str
    ) -> Session | None:
        """The whole session; its events are decoded once and shared between shared reads
        (see the class doc), so a read decodes only the events appended since the last."""
        key = (app_name, user_id, session_id)
        stored = self._read(key)
        if stored is None:
            return None
        # The store drops a session's history when it drops the session, so what it holds
        # is this session's, a prefix of its events.
        held = self._histories.held(key)
        start = held.last_seq if held is not None else 0
        events = self._histories.store(
            key,
            held,
            version=stored.last_update_time,
            new_events=[
                (position, data)
                for position, (_, data) in enumerate(stored.events[start:], start + 1)
            ],
        )
        return self._build_session(key, stored, events)

    def _read(self, key: _SessionKey) -> _StoredSession | None:
        """The stored session a read is of, counted as used; ``None`` when there is none."""
        self._settle()
        self._expire()
        stored = self._sessions.get(key)
        if stored is None:
            _common.check_ids(*key)
            return None
        # A stored session's ids were checked when it was created: no need to check again.
        self._touch(key, stored)
        return stored

    async def list_sessions(self, *, app_name: str, user_id: str) -> list[Session]:
        _common.check_ids(app_name, user_id)
        self._settle()
        self._expire()
        # Listing is not a use: it neither refreshes the sessions nor holds them. In creation
        # order, as the SQL stores list them (``_sessions`` is in order of last use).
        listed = []
        for session_id in self._user_sessions.get((app_name, user_id), {}):
            key = (app_name, user_id, session_id)
            listed.append(self._build_session(key, self._sessions[key], [], held=False))
        return listed

    async def list_sessions_page(
        self, *, app_name: str, user_id: str, page_size: int, page_token: str | None = None
    ) -> SessionsPage:
        _common.check_ids(app_name, user_id)
        _common.check_page_size(page_size)
        after = -1
        if page_token is not None:
            (after,) = _common.decode_page_token(page_token, (int,))
        self._settle()
        self._expire()
        # The token is the creation rank of the last session listed: ranks are never
        # reused, so a session deleted since shifts nothing. Walks the user's sessions (in
        # creation order) up to the page's end; builds only the page, each session with its
        # merged state (as list_sessions), not held: listing is not a use.
        page: list[Session] = []
        more = False
        for session_id, created in self._user_sessions.get((app_name, user_id), {}).items():
            if created <= after:
                continue
            if len(page) == page_size:
                more = True
                break
            after = created
            key = (app_name, user_id, session_id)
            page.append(self._build_session(key, self._sessions[key], [], held=False))
        return SessionsPage(page, _common.encode_page_token(after) if more else None)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        _common.check_ids(app_name, user_id, session_id)
        key = (app_name, user_id, session_id)
        self._settle()
        if key in self._sessions:
            self._drop(key)

    async def append_event(self, session: Session, event: Event) -> Event:
        if event.partial:
            return event
        _common.check_event_id(event.id)
        key = (session.app_name, session.user_id, session.id)
        stored = self._sessions.get(key)
        if stored is None:
            _common.check_ids(session.app_name, session.user_id, session.id)
            raise SessionNotFoundError(
                f"session {session.id!r} of user {session.user_id!r} in app "
                f"{session.app_name!r} does not exist"
            )
        # Everything that can fail (the checks, JSON, serialization) happens before any change.
        if event.id in stored.event_ids:
            raise _common.duplicate_event(session.id, event.id)
        _common.check_fresh(
            session.app_name,
            session.user_id,
            session.id,
            session.last_update_time,
            stored.last_update_time,
        )
        scoped = _common.scoped_delta(event)
        stored_event = _common.event_to_store(event, scoped)
        encoded = _common.encode_event(stored_event)
        held_version = stored.last_update_time
        update_time = _common.next_update_time(held_version)

        stored.state.update(scoped.session)
        if scoped.app:
            self._app_states.setdefault(session.app_name, {}).update(scoped.app)
        if scoped.user:
            self._user_states.setdefault((session.app_name, session.user_id), {}).update(
                scoped.user
            )
        stored.events.append((event.timestamp, encoded))
        stored.event_ids.add(stored_event.id)
        stored.last_update_time = update_time
        self._histories.appended(
            key,
            held_version=held_version,
            version=update_time,
            seq=len(stored.events),
            data=encoded,
            event=stored_event,
        )
        self._touch(key, stored)
        view = stored.views.get(id(session))
        if view is None or view() is not session:
            self._hold(key, stored, session)

        if event.actions.state_delta:
            session.state.update(event.actions.state_delta)
        session.events.append(stored_event)
        session.last_update_time = update_time
        return stored_event

    def claim_session(
        self, *, app_name: str, user_id: str, session_id: str
    ) -> AbstractAsyncContextManager[None]:
        """Hold the session against eviction and expiry for the ``async with`` block.

        This store lives in one process, so a claim excludes nobody (turns in this process
        are serialised by their caller): claims only pin the session, which need not exist yet.
        """
        _common.check_ids(app_name, user_id, session_id)
        return self._claimed((app_name, user_id, session_id))

    @contextlib.asynccontextmanager
    async def _claimed(self, key: _SessionKey) -> AsyncIterator[None]:
        self._settle()
        self._claims[key] = self._claims.get(key, 0) + 1
        self._idle.pop(key, None)
        try:
            yield
        finally:
            self._settle()
            remaining = self._claims.pop(key) - 1
            if remaining:
                self._claims[key] = remaining
            stored = self._sessions.get(key)
            if stored is not None:
                # The turn just ended: the session counts as used now, not at its start.
                self._touch(key, stored)
                if not remaining and not stored.views:
                    self._idle[key] = None

    # --- bounds -------------------------------------------------------------------------------

    def _touch(self, key: _SessionKey, stored: _StoredSession) -> None:
        stored.last_used = _monotonic()
        self._sessions.move_to_end(key)
        if key in self._idle:
            self._idle.move_to_end(key)

    def _hold(self, key: _SessionKey, stored: _StoredSession, session: Session) -> None:
        """Count ``session`` as a live view of ``stored``: the session is in use until it dies."""
        released = self._released
        view_id = id(session)

        def died(view: weakref.ref[Session]) -> None:
            released.append((key, view_id, view, _monotonic()))

        stored.views[view_id] = weakref.ref(session, died)
        self._idle.pop(key, None)

    def _settle(self) -> None:
        """Forget the views that died; a session left without views or claims becomes idle.

        Releasing counts as a use (a turn holds its session until it ends), dated when the
        view died.
        """
        released = self._released
        while released:
            key, view_id, view, died_at = released.popleft()
            stored = self._sessions.get(key)
            # A view of a deleted session, or one whose id a newer view took: nothing to do.
            if stored is None or stored.views.get(view_id) is not view:
                continue
            del stored.views[view_id]
            if stored.views or key in self._claims:
                continue
            stored.last_used = max(stored.last_used, died_at)
            self._sessions.move_to_end(key)
            self._idle[key] = None

    def _evict(self) -> None:
        """Evict the least recently used sessions not in use, down to ``max_sessions``."""
        limit = self.max_sessions
        if limit is None:
            return
        while len(self._sessions) > limit and self._idle:
            self._drop(next(iter(self._idle)))

    def _expire(self) -> None:
        """Drop the sessions (and orphaned user states) unused for longer than ``ttl``."""
        if self.ttl is None:
            return
        cutoff = _monotonic() - self.ttl
        # Least recently used first: the first one used since the cutoff ends the scan.
        while self._idle:
            key = next(iter(self._idle))
            if self._sessions[key].last_used > cutoff:
                break
            self._drop(key)
        while self._orphans:
            user, orphaned_at = next(iter(self._orphans.items()))
            if orphaned_at > cutoff:
                break
            self._forget_user(user)

    def _drop(self, key: _SessionKey) -> None:
        """Remove a session; a user left without sessions keeps their state for a while."""
        del self._sessions[key]
        self._idle.pop(key, None)
        self._histories.discard(key)
        user = (key[0], key[1])
        remaining = self._user_sessions[user]
        del remaining[key[2]]
        if remaining:
            return
        del self._user_sessions[user]
        if user not in self._user_states:
            return
        self._orphans[user] = _monotonic()
        if self.max_sessions is not None and len(self._orphans) > self.max_sessions:
            self._forget_user(next(iter(self._orphans)))

    def _forget_user(self, user: _UserKey) -> None:
        del self._orphans[user]
        self._user_states.pop(user, None)

    def _build_session(
        self, key: _SessionKey, stored: _StoredSession, events: list[Event], *, held: bool = True
    ) -> Session:
        app_name, user_id, session_id = key
        state = merge_scoped_state(
            self._app_states.get(app_name, {}),
            self._user_states.get((app_name, user_id), {}),
            stored.state,
        )
        # The fields are built here and already valid: skip validation on this hot path.
        session = Session.model_construct(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=_common.copy_state(state),
            events=events,
            last_update_time=stored.last_update_time,
        )
        if held:
            self._hold(key, stored, session)
        return session
