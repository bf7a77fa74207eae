"""The session service of a delegated run: the throwaway sessions it works in, in memory."""

from __future__ import annotations

import math
import time
from datetime import datetime
from typing import Any

from adk_mesh.errors import AlreadyExistsError, SessionConflictError, SessionNotFoundError
from adk_mesh.ids import check_id
from adk_mesh.sessions._common import check_num_recent_events, new_session_id, to_micros
from adk_mesh.sessions.base import Session, SessionService
from adk_mesh.state import TEMP_PREFIX
from adk_mesh.types import Event, new_event_id

__all__ = ["ViewSessions"]


class ViewSessions(SessionService):
    """The sessions of one delegated run — the view its caller sent — held for the length of
    the run in the objects the run uses: nothing is persisted and nothing outlives the run.

    It keeps the :class:`~adk_mesh.sessions.base.SessionService` contract for them (partial
    events are not kept; an event's state delta reaches the session's state, ``temp:`` keys
    included, and the event is kept without them; an id is held once; each append moves the
    version forward and an append through a stale object is refused; reads return copies)
    without what a store does for later readers, who do not exist here: no JSON round trip of
    each event and state value, no second copy of the state by scope. The run's events are
    encoded once, on their way to the caller, which stores them.
    """

    def __init__(self) -> None:
        self._sessions: dict[tuple[str, str, str], tuple[Session, set[str]]] = {}

    def hold(self, session: Session) -> Session:
        """Take ``session`` (the caller's view, already decoded) as one of the run's."""
        session.last_update_time = _next_update_time(session.last_update_time)
        self._sessions[(session.app_name, session.user_id, session.id)] = (session, set())
        return session

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str | None = None,
        state: dict[str, Any] | None = None,
    ) -> Session:
        _check_ids(app_name, user_id, session_id)
        session_id = new_session_id(session_id)
        if (app_name, user_id, session_id) in self._sessions:
            raise AlreadyExistsError(
                f"session {session_id!r} already exists", metadata={"session_id": session_id}
            )
        kept = {key: value for key, value in (state or {}).items() if not _is_temp(key)}
        session = Session(id=session_id, app_name=app_name, user_id=user_id, state=kept)
        self.hold(session)
        return _copy(session)

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        num_recent_events: int | None = None,
        after: datetime | None = None,
    ) -> Session | None:
        _check_ids(app_name, user_id, session_id)
        check_num_recent_events(num_recent_events)
        held = self._sessions.get((app_name, user_id, session_id))
        if held is None:
            return None
        events = held[0].events
        if after is not None:
            # As the stores compare: in microseconds, a naive datetime taken as UTC.
            threshold = to_micros(after)
            events = [event for event in events if to_micros(event.timestamp) > threshold]
        if num_recent_events is not None:
            # More than the session holds is all of them (``len - N`` would slice from the end).
            events = events[-num_recent_events:] if num_recent_events else []
        return _copy(held[0], events)

    async def list_sessions(self, *, app_name: str, user_id: str) -> list[Session]:
        _check_ids(app_name, user_id)
        return [
            _copy(session, [])
            for (app, user, _), (session, _) in self._sessions.items()
            if app == app_name and user == user_id
        ]

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        _check_ids(app_name, user_id, session_id)
        self._sessions.pop((app_name, user_id, session_id), None)

    async def append_event(self, session: Session, event: Event) -> Event:
        if event.partial:
            return event
        held = self._sessions.get((session.app_name, session.user_id, session.id))
        if held is None:
            raise SessionNotFoundError(f"session {session.id!r} does not exist")
        kept, ids = held
        if event.id and event.id in ids:
            raise AlreadyExistsError(
                f"session {session.id!r} already holds event {event.id!r}",
                metadata={"session_id": session.id, "event_id": event.id},
            )
        if session is not kept and session.last_update_time != kept.last_update_time:
            raise SessionConflictError(
                f"session {session.id!r} changed since it was loaded; load it again",
                metadata={"session_id": session.id},
            )
        delta = event.actions.state_delta
        stored = event
        if not event.id or any(_is_temp(key) for key in delta):
            update: dict[str, Any] = {"id": event.id or new_event_id()}
            if delta:
                without_temp = {k: v for k, v in delta.items() if not _is_temp(k)}
                update["actions"] = event.actions.model_copy(update={"state_delta": without_temp})
            stored = event.model_copy(update=update)
        ids.add(stored.id)
        version = _next_update_time(kept.last_update_time)
        for target in (kept, session) if session is not kept else (kept,):
            if delta:
                target.state.update(delta)
            target.events.append(stored)
            target.last_update_time = version
        return stored


def _is_temp(key: str) -> bool:
    return key.startswith(TEMP_PREFIX)


def _check_ids(app_name: str, user_id: str, session_id: str | None = None) -> None:
    check_id("app_name", app_name)
    check_id("user_id", user_id)
    if session_id is not None:
        check_id("session_id", session_id)


def _next_update_time(previous: float) -> float:
    return max(time.time(), math.nextafter(previous, math.inf))


def _copy(session: Session, events: list[Event] | None = None) -> Session:
    return Session(
        id=session.id,
        app_name=session.app_name,
        user_id=session.user_id,
        state=dict(session.state),
        events=list(session.events if events is None else events),
        last_update_time=session.last_update_time,
    )
