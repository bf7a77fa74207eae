"""The Session model and the SessionService contract."""

from __future__ import annotations

import abc
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from adk_mesh.types import Content, Event

__all__ = ["Session", "SessionService"]


class Session(BaseModel):
    """One conversation of one user with one app: its state and its event history.

    ``state`` holds the session's own keys plus the app's (``app:``-prefixed) and the user's
    (``user:``-prefixed) keys, as the service merged them when it loaded the session.
    ``last_update_time`` is seconds since the epoch of the last append.
    """

    model_config = ConfigDict(extra="forbid")

    id: str
    app_name: str
    user_id: str
    state: dict[str, Any] = Field(default_factory=dict)
    events: list[Event] = Field(default_factory=list)
    last_update_time: float = 0.0

    def conversation_history(self) -> list[Content]:
        """The content of every event, oldest first (events without content left out)."""
        return [event.content for event in self.events if event.content is not None]


class SessionService(abc.ABC):
    """Stores sessions, their events and their scoped state.

    Contract, which every backend passes (``tests/unit/sessions/test_contract.py``):

    * every call checks the app, user and session ids it is given with
      :func:`adk_mesh.ids.check_id` (the rule the artifact stores apply too) and raises
      :class:`~adk_mesh.errors.InvalidArgumentError` before reading or writing anything.
    * ``create_session`` makes a session (a UUID when ``session_id`` is None) and raises
      :class:`~adk_mesh.errors.AlreadyExistsError` for an id that exists. Initial ``state`` is
      split by scope like a delta; ``temp:`` keys are dropped.
    * ``get_session`` returns ``None`` for an unknown session. Its events come back in the order
      they were appended. ``after`` keeps only events whose timestamp is strictly later than
      it; then ``num_recent_events`` keeps the last N of those (0 keeps none). Either may be
      used alone.
    * ``append_event`` never stores a partial event (it returns it untouched). Otherwise it
      applies ``state_delta`` by scope — ``app:`` for all users of the app, ``user:`` for all
      sessions of the user, unprefixed for the session, ``temp:`` only to the in-memory
      ``session`` passed in, never persisted — stores the event without its ``temp:`` keys,
      updates ``session`` (its events, state and ``last_update_time``) and returns the stored
      event. Stored events are immutable: later changes to the passed objects do not reach
      the store. The append and its state changes are atomic.
    * ``list_sessions`` returns the user's sessions in the app, without events.
    * ``delete_session`` removes a session and its events; deleting an unknown one is a no-op.

    Implementations are safe to use from many tasks of one event loop at once.
    """

    @abc.abstractmethod
    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str | None = None,
        state: dict[str, Any] | None = None,
    ) -> Session: ...

    @abc.abstractmethod
    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        num_recent_events: int | None = None,
        after: datetime | None = None,
    ) -> Session | None: ...

    @abc.abstractmethod
    async def list_sessions(self, *, app_name: str, user_id: str) -> list[Session]: ...

    @abc.abstractmethod
    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None: ...

    @abc.abstractmethod
    async def append_event(self, session: Session, event: Event) -> Event: ...

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections and files. Idempotent."""
