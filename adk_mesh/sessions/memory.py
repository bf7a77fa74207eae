"""A session store in the process's memory: for tests, development and single-process runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from adk_mesh.errors import AlreadyExistsError, SessionNotFoundError
from adk_mesh.sessions import _common
from adk_mesh.sessions.base import Session, SessionService
from adk_mesh.state import merge_scoped_state, split_by_scope
from adk_mesh.types import Event

__all__ = ["InMemorySessionService"]

_SessionKey = tuple[str, str, str]


@dataclass
class _StoredSession:
    state: dict[str, Any]
    last_update_time: float
    # (timestamp, event JSON): the serialized form makes stored events immutable without a
    # deep copy of the whole session on every read or append.
    events: list[tuple[datetime, str]] = field(default_factory=list)
    event_ids: set[str] = field(default_factory=set)


class InMemorySessionService(SessionService):
    """Keeps sessions, app state and user state in dictionaries; nothing survives the process.

    Every method runs without awaiting anything, so each call is atomic with respect to the
    other tasks of the event loop: the stale-append check and the write it guards cannot be
    split by another task. Events are stored as JSON and parsed afresh by
    :meth:`get_session`, so neither the objects passed in nor the ones returned share anything
    with the store. ``append_event`` returns the event passed in when it has an id and no
    ``temp:`` keys (only its JSON is kept), else a shallow copy with an id and without them.
    """

    def __init__(self) -> None:
        self._sessions: dict[_SessionKey, _StoredSession] = {}
        self._app_states: dict[str, dict[str, Any]] = {}
        self._user_states: dict[tuple[str, str], dict[str, Any]] = {}

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
        if key in self._sessions:
            raise AlreadyExistsError(
                f"session {session_id!r} of user {user_id!r} in app {app_name!r} already exists"
            )
        scoped = split_by_scope(_common.json_copy(state)) if state else None
        stored = _StoredSession(state={}, last_update_time=_common.now())
        if scoped is not None:
            stored.state.update(scoped.session)
            if scoped.app:
                self._app_states.setdefault(app_name, {}).update(scoped.app)
            if scoped.user:
                self._user_states.setdefault((app_name, user_id), {}).update(scoped.user)
        self._sessions[key] = stored
        return self._build_session(key, stored, [])

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
        key = (app_name, user_id, session_id)
        stored = self._sessions.get(key)
        if stored is None:
            return None
        selected = _common.select_events(stored.events, num_recent_events, after)
        return self._build_session(
            key, stored, [_common.decode_event(data) for _, data in selected]
        )

    async def list_sessions(self, *, app_name: str, user_id: str) -> list[Session]:
        _common.check_ids(app_name, user_id)
        return [
            self._build_session(key, stored, [])
            for key, stored in self._sessions.items()
            if key[0] == app_name and key[1] == user_id
        ]

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        _common.check_ids(app_name, user_id, session_id)
        self._sessions.pop((app_name, user_id, session_id), None)

    async def append_event(self, session: Session, event: Event) -> Event:
        if event.partial:
            return event
        _common.check_ids(session.app_name, session.user_id, session.id)
        key = (session.app_name, session.user_id, session.id)
        stored = self._sessions.get(key)
        if stored is None:
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
        update_time = _common.next_update_time(stored.last_update_time)

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

        if event.actions.state_delta:
            session.state.update(event.actions.state_delta)
        session.events.append(stored_event)
        session.last_update_time = update_time
        return stored_event

    def _build_session(
        self, key: _SessionKey, stored: _StoredSession, events: list[Event]
    ) -> Session:
        app_name, user_id, session_id = key
        state = merge_scoped_state(
            self._app_states.get(app_name, {}),
            self._user_states.get((app_name, user_id), {}),
            stored.state,
        )
        # The fields are built here and already valid: skip validation on this hot path.
        return Session.model_construct(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=_common.copy_state(state),
            events=events,
            last_update_time=stored.last_update_time,
        )
