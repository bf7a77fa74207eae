"""The Session model and the SessionService contract."""

from __future__ import annotations

import abc
import contextlib
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from adk_mesh.errors import AlreadyExistsError, SessionConflictError
from adk_mesh.ids import check_id
from adk_mesh.sessions._common import (
    check_page_size,
    decode_page_token,
    encode_page_token,
)
from adk_mesh.types import Content, Event

__all__ = ["GET_OR_CREATE_ATTEMPTS", "Session", "SessionService", "SessionsPage"]

#: Rounds of read-then-create :meth:`SessionService.get_or_create_session` makes before it
#: gives up: each lost round means another caller created the session and a third deleted it.
GET_OR_CREATE_ATTEMPTS = 5


class Session(BaseModel):
    """One conversation of one user with one app: its state and its event history.

    ``state`` holds the session's own keys plus the app's (``app:``-prefixed) and the user's
    (``user:``-prefixed) keys, as the service merged them when it loaded the session.
    ``last_update_time`` is seconds since the epoch of the session's last write (its creation
    or its last append). It is also the session's version: every append moves it strictly
    forward, and a store refuses an append through an object whose ``last_update_time`` is
    not the stored one (see :meth:`SessionService.append_event`).
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


@dataclass(frozen=True)
class SessionsPage:
    """One page of :meth:`SessionService.list_sessions_page`.

    ``sessions`` are in creation order, without events, each with its state as
    :meth:`SessionService.list_sessions` gives it (the session's own keys merged with the
    app's and the user's, as google-adk's ``list_sessions`` lists them) and its
    ``last_update_time``.
    ``next_page_token`` continues the listing after the last of them; ``None`` when this page
    ends it.
    """

    sessions: list[Session]
    next_page_token: str | None = None


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
    * ``get_session_shared`` returns what ``get_session`` returns without filters, except
      that the events may be objects the store keeps and hands out again (see the method).
    * ``get_or_create_session`` returns the session, creating it when it does not exist;
      callers racing to create one new id all get the one session (none sees
      :class:`~adk_mesh.errors.AlreadyExistsError`).
    * ``append_event`` never stores a partial event (it returns it untouched). Otherwise it
      applies ``state_delta`` by scope — ``app:`` for all users of the app, ``user:`` for all
      sessions of the user, unprefixed for the session, ``temp:`` only to the in-memory
      ``session`` passed in, never persisted — stores the event without its ``temp:`` keys,
      updates ``session`` (its events, state and ``last_update_time``) and returns the stored
      event. Stored events are immutable: later changes to the passed objects do not reach
      the store. The append and its state changes are atomic.
    * **Event ids.** An event without an id (``""``) is stored with a fresh UUID (the returned
      event carries it). A session holds each id once: appending an event whose id it already
      holds — the same event twice — raises :class:`~adk_mesh.errors.AlreadyExistsError`
      (metadata ``event_id``) and writes nothing. Refusing, rather than ignoring, the second
      append keeps a different event that reuses an id from vanishing silently. An id that
      not every backend can keep (longer than 512 characters, or holding NUL) raises
      :class:`~adk_mesh.errors.InvalidArgumentError` and writes nothing.
    * **Stale appends.** ``session.last_update_time`` is the version the caller holds; the
      store moves it strictly forward on every append. An append through an object that is
      not at the stored version — another writer (a concurrent turn, a replica, another
      process on the same file) appended since the object was loaded — raises
      :class:`~adk_mesh.errors.SessionConflictError` (gRPC ABORTED, reason
      ``SESSION_CONFLICT``) and writes nothing; the check and the write are one atomic step,
      so of two writers holding one version exactly one wins. Reload and retry. The checks
      come in this order: the session exists, the id is new, the version is current.
    * ``claim_session`` holds a session for one writer's turn against other processes
      sharing the store, where the store can: a claim another process (or another claim)
      holds is refused at once with :class:`~adk_mesh.errors.SessionConflictError`. The
      default claims nothing: the stale-append check above is then the only guard.
    * ``list_sessions`` returns the user's sessions in the app, without events, each with
      its state as a turn sees it (its own keys merged with the app's and the user's), as
      google-adk's session services list them. ``list_sessions_page`` returns them a page
      at a time, in creation order, the same way: at most ``page_size`` (1 or more) after
      the position ``page_token`` names,
      and a token for the next page (``None`` after the last). The token names a position,
      not an offset: sessions deleted or created between pages make no other session listed
      twice or skipped (one created since comes at the end). A token the store did not issue
      is :class:`~adk_mesh.errors.InvalidArgumentError`.
    * ``delete_session`` removes a session and its events; deleting an unknown one is a no-op.

    Implementations are safe to use from many tasks of one event loop at once; they do not
    serialise turns (two tasks appending through two objects of one session conflict as two
    processes do): that is the caller's job (:class:`~adk_mesh.mesh.AgentServer` does it).
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

    async def list_sessions_page(
        self, *, app_name: str, user_id: str, page_size: int, page_token: str | None = None
    ) -> SessionsPage:
        """The user's sessions in the app, a page at a time (see the class doc), so that a
        caller listing a user with any number of sessions holds one page at once.

        The stores of adk-mesh read only the page from their tables (keyset pagination on
        the creation order). This default, for a store written against google-adk's
        ``list_sessions`` alone, reads the whole listing for each page and cuts it, in the
        order of the session ids (a listing's own order need not be stable, and a position
        in it is not: a session deleted between two pages moved every later one, and one was
        never listed): each page continues after the last id the previous one listed, so
        deletes and creates between pages neither skip nor repeat any other session. The
        pages are right; only their cost is not bounded.

        Raises:
            InvalidArgumentError: ``page_size`` below 1, or a token this store did not issue.
        """
        check_page_size(page_size)
        listed = sorted(
            await self.list_sessions(app_name=app_name, user_id=user_id),
            key=lambda session: session.id,
        )
        if page_token is not None:
            (after,) = decode_page_token(page_token, (str,))
            listed = [session for session in listed if session.id > after]
        page = listed[:page_size]
        return SessionsPage(
            [session.model_copy(update={"events": []}) for session in page],
            encode_page_token(page[-1].id) if len(listed) > page_size else None,
        )

    @abc.abstractmethod
    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None: ...

    async def get_session_shared(
        self, *, app_name: str, user_id: str, session_id: str
    ) -> Session | None:
        """The whole session, as :meth:`get_session` returns it, for a caller that never
        changes stored events (the :class:`~adk_mesh.Runner`).

        The session object, its ``events`` list and its ``state`` are the caller's own, as
        from :meth:`get_session`; the events in the list may not be: a store may keep the
        events it decoded and hand the same objects to every ``get_session_shared`` of the
        session, so that a read decodes only the events appended since the last one (its
        cost then does not grow with the history), and the events appended through it as
        the very objects :meth:`append_event` returned (not decoded at all). Stored events
        are immutable: a caller must not change them in place (copy one to change it,
        ``event.model_copy(deep=True)``), or later reads in this process see the change.

        The default reads :meth:`get_session`. The SQL stores keep a bounded cache of
        decoded histories, read incrementally and checked against the database on every
        call, so a session another process appended to or re-created is read as stored.
        """
        return await self.get_session(app_name=app_name, user_id=user_id, session_id=session_id)

    async def get_or_create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        state: dict[str, Any] | None = None,
        shared_events: bool = False,
    ) -> Session:
        """The session ``session_id`` (whole), created with ``state`` when it does not exist.

        Race-free: when a concurrent caller (another task, replica or process) creates the
        session between this call's read and its create, the create's
        :class:`~adk_mesh.errors.AlreadyExistsError` is absorbed and the session read again.
        ``shared_events``: read it with :meth:`get_session_shared` (for a caller that never
        changes stored events) rather than :meth:`get_session`.

        Raises:
            SessionConflictError: the session kept appearing and disappearing (created and
                deleted by others) for :data:`GET_OR_CREATE_ATTEMPTS` rounds.
        """
        read = self.get_session_shared if shared_events else self.get_session
        for _ in range(GET_OR_CREATE_ATTEMPTS):
            existing = await read(app_name=app_name, user_id=user_id, session_id=session_id)
            if existing is not None:
                return existing
            try:
                return await self.create_session(
                    app_name=app_name, user_id=user_id, session_id=session_id, state=state
                )
            except AlreadyExistsError:
                continue  # created by someone else since our read: read theirs
        raise SessionConflictError(
            f"session {session_id!r} of user {user_id!r} in app {app_name!r} was created and "
            f"deleted by others {GET_OR_CREATE_ATTEMPTS} times while this call tried to read "
            "or create it; retry",
            metadata={"session_id": session_id},
        )

    @abc.abstractmethod
    async def append_event(self, session: Session, event: Event) -> Event: ...

    def claim_session(
        self, *, app_name: str, user_id: str, session_id: str
    ) -> AbstractAsyncContextManager[None]:
        """Hold the session for one turn against other processes, for the ``async with``
        block: ``async with service.claim_session(...): ...``.

        A store shared by processes may refuse, at once, a claim another holder has, with
        :class:`~adk_mesh.errors.SessionConflictError`; the holder's turn then never meets a
        stale append, and the refused one has written nothing. A claim never waits. The
        session need not exist yet (claim, then get or create it). This default claims
        nothing (a store in one process, or one that cannot): the stale-append check of
        :meth:`append_event` is then the only guard across writers.
        """
        check_id("app_name", app_name)
        check_id("user_id", user_id)
        check_id("session_id", session_id)
        return contextlib.nullcontext()

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections and files. Idempotent."""
