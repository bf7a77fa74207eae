"""Bounds of the session API's listing and state update, on real AgentServers on 127.0.0.1
over each store (memory, a SQLite file, a PostgreSQL database of the test's own).

* ``ListSessions`` reads the store a page at a time (keyset pagination: creation order, a
  cursor, a LIMIT) and streams each page before it reads the next; a client may ask for at
  most ``page_size`` sessions and continue from ``next_page_token``.
* ``UpdateSessionState`` refuses, before it writes anything, an update whose answer (the
  state after it plus the event) could not be sent: it never reports a failure for a write
  it made, which a client retrying would append twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import pytest

from adk_mesh import codec
from adk_mesh.errors import InvalidArgumentError
from adk_mesh.mesh import _session_service
from adk_mesh.mesh._channel import MAX_MESSAGE_BYTES
from adk_mesh.sessions import InMemorySessionService, SessionService, SqliteSessionService
from adk_mesh.sessions.base import Session
from adk_mesh.v1 import session_pb2
from tests.integration.mesh.test_session_service import (
    APP,
    Served,
    get_session,
    refusal,
    serve,
    state_of,
    stop,
)

if TYPE_CHECKING:
    from adk_mesh.sessions.base import SessionsPage


class _ListingOnly(InMemorySessionService):
    """A store written against google-adk's ``list_sessions`` alone: it pages through
    :class:`SessionService`'s default."""

    list_sessions_page = SessionService.list_sessions_page


@pytest.fixture(
    params=[
        "memory",
        "sqlite",
        "listing-only",
        pytest.param("postgres", marks=pytest.mark.postgres),
    ]
)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SessionService]:
    service: SessionService
    if request.param == "memory":
        service = InMemorySessionService()
    elif request.param == "listing-only":
        service = _ListingOnly()
    elif request.param == "sqlite":
        service = SqliteSessionService(tmp_path / "sessions.db")
    else:
        from adk_mesh.sessions.postgres import PostgresSessionService

        service = PostgresSessionService(request.getfixturevalue("postgres_url"))
    try:
        yield service
    finally:
        await service.close()


@contextlib.asynccontextmanager
async def serving(store: SessionService) -> AsyncIterator[Served]:
    served = await serve(store)
    try:
        yield served
    finally:
        await stop(served)


async def create(store: SessionService, *session_ids: str, user_id: str = "ada") -> None:
    for session_id in session_ids:
        await store.create_session(
            app_name=APP, user_id=user_id, session_id=session_id, state={"k": session_id}
        )


async def listed(served: Served, **fields: Any) -> list[session_pb2.ListSessionsResponse]:
    return [
        response
        async for response in served.stub.ListSessions(
            session_pb2.ListSessionsRequest(user_id="ada", **fields), timeout=30
        )
    ]


def ids(responses: list[session_pb2.ListSessionsResponse]) -> list[str]:
    return [session.id for response in responses for session in response.sessions]


# --- the stores list in pages -----------------------------------------------------------------


async def test_a_store_lists_in_pages_in_creation_order(store: SessionService) -> None:
    named = [f"s-{index}" for index in range(7)]
    await create(store, *named)
    await create(store, "bob-1", user_id="bob")

    pages: list[SessionsPage] = []
    token: str | None = None
    while True:
        page = await store.list_sessions_page(
            app_name=APP, user_id="ada", page_size=3, page_token=token
        )
        pages.append(page)
        token = page.next_page_token
        if token is None:
            break

    assert [[s.id for s in page.sessions] for page in pages] == [named[:3], named[3:6], named[6:]]
    # google-adk lists sessions without events, with their state; the version is there.
    assert all(
        s.events == [] and s.state == {"k": s.id} and s.last_update_time > 0
        for page in pages
        for s in page.sessions
    )
    # A page that ends the list says so (no token), even when it is full.
    exact = await store.list_sessions_page(app_name=APP, user_id="ada", page_size=7)
    assert [s.id for s in exact.sessions] == named and exact.next_page_token is None
    none = await store.list_sessions_page(app_name=APP, user_id="nobody", page_size=3)
    assert none.sessions == [] and none.next_page_token is None


async def test_a_cursor_survives_deletes_and_creates_between_pages(store: SessionService) -> None:
    """Keyset, not offset: deleting sessions already listed (or the one the cursor names)
    neither skips nor repeats any other; a session created since comes at the end (the
    listing-only default pages in id order: s-5 sorts last there too). The default paged by
    offset: with s-0 and s-1 gone, the second page began at s-4 and s-2, s-3 were never
    listed."""
    await create(store, "s-0", "s-1", "s-2", "s-3", "s-4")
    first = await store.list_sessions_page(app_name=APP, user_id="ada", page_size=2)
    assert [s.id for s in first.sessions] == ["s-0", "s-1"]

    for gone in ("s-0", "s-1"):
        await store.delete_session(app_name=APP, user_id="ada", session_id=gone)
    await create(store, "s-5")
    rest = await store.list_sessions_page(
        app_name=APP, user_id="ada", page_size=10, page_token=first.next_page_token
    )

    assert [s.id for s in rest.sessions] == ["s-2", "s-3", "s-4", "s-5"]
    assert rest.next_page_token is None


async def test_a_store_refuses_a_bad_page_size_or_token(store: SessionService) -> None:
    await create(store, "s-0")
    for page_size in (0, -1):
        with pytest.raises(InvalidArgumentError, match="page_size"):
            await store.list_sessions_page(app_name=APP, user_id="ada", page_size=page_size)
    for token in ("nonsense", "W10", "WzEsICJhIiwgM10", "WyJ4IiwgImEiXQ", "WzEuMCwgMl0"):
        with pytest.raises(InvalidArgumentError, match="page_token"):
            await store.list_sessions_page(
                app_name=APP, user_id="ada", page_size=2, page_token=token
            )


async def test_sqlite_pages_from_an_index_without_sorting_the_users_sessions(
    tmp_path: Path,
) -> None:
    path = tmp_path / "sessions.db"
    service = SqliteSessionService(path)
    try:
        await create(service, "s-0", "s-1", "s-2")
        page = await service.list_sessions_page(app_name=APP, user_id="ada", page_size=2)
        assert page.next_page_token is not None
    finally:
        await service.close()
    from adk_mesh.sessions import sqlite as sqlite_store

    with contextlib.closing(sqlite3.connect(path)) as connection:
        plan = " | ".join(
            row[-1]
            for row in connection.execute(
                f"EXPLAIN QUERY PLAN {sqlite_store._LIST_PAGE_AFTER}",
                (APP, "ada", 1.0, "s-0", 2),
            )
        )
    assert "sessions_by_creation" in plan and "TEMP B-TREE" not in plan, plan


class _PagedOnly(InMemorySessionService):
    """A store that records the pages the servicer reads and refuses the unbounded listing;
    it holds back the second page until told to."""

    def __init__(self) -> None:
        super().__init__()
        self.page_sizes: list[int] = []
        self.second_page = asyncio.Event()

    async def list_sessions(self, *, app_name: str, user_id: str) -> list[Session]:
        raise AssertionError("ListSessions loaded every session of the user at once")

    async def list_sessions_page(
        self, *, app_name: str, user_id: str, page_size: int, page_token: str | None = None
    ) -> SessionsPage:
        self.page_sizes.append(page_size)
        if len(self.page_sizes) == 2:
            await self.second_page.wait()
        return await super().list_sessions_page(
            app_name=app_name, user_id=user_id, page_size=page_size, page_token=page_token
        )


# --- the RPC streams page by page ---------------------------------------------------------------


async def test_list_sessions_streams_each_page_before_reading_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_session_service, "SESSIONS_PER_RESPONSE", 2)
    store = _PagedOnly()
    await create(store, *(f"s-{index}" for index in range(5)))
    async with serving(store) as served:
        call = served.stub.ListSessions(session_pb2.ListSessionsRequest(user_id="ada"), timeout=30)
        stream = call.__aiter__()
        first = await stream.__anext__()
        # The first page reached the client while the second was still being read.
        assert [s.id for s in first.sessions] == ["s-0", "s-1"]
        assert len(store.page_sizes) <= 2
        store.second_page.set()
        rest = [response async for response in stream]

    assert [[s.id for s in r.sessions] for r in rest] == [["s-2", "s-3"], ["s-4"]]
    assert all(size <= 2 for size in store.page_sizes)
    assert not any(r.next_page_token for r in [first, *rest])


async def test_list_sessions_takes_a_page_size_and_continues_from_its_token(
    store: SessionService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_session_service, "SESSIONS_PER_RESPONSE", 2)
    named = [f"s-{index}" for index in range(7)]
    await create(store, *named)
    async with serving(store) as served:
        # Everything, in full batches, when no page size is asked for (as before).
        whole = await listed(served)
        assert [len(r.sessions) for r in whole] == [2, 2, 2, 1]
        assert ids(whole) == named and not any(r.next_page_token for r in whole)
        assert all(state_of(s) == {"k": s.id} for r in whole for s in r.sessions)

        pages: list[list[str]] = []
        token = ""
        while True:
            responses = await listed(served, page_size=3, page_token=token)
            # Only the last response of a call carries the token.
            assert not any(r.next_page_token for r in responses[:-1])
            pages.append(ids(responses))
            token = responses[-1].next_page_token
            if not token:
                break
        assert pages == [named[:3], named[3:6], named[6:]]

        for bad in (
            session_pb2.ListSessionsRequest(user_id="ada", page_size=-1),
            session_pb2.ListSessionsRequest(user_id="ada", page_token="nonsense"),
        ):

            def listing(request: session_pb2.ListSessionsRequest = bad) -> Any:
                return served.stub.ListSessions(request, timeout=10)

            code, reason = await refusal(listing)
            assert code == grpc.StatusCode.INVALID_ARGUMENT, (bad, code, reason)


# --- UpdateSessionState answers or writes nothing --------------------------------------------


@pytest.mark.timeout(120)
async def test_an_update_whose_answer_cannot_be_sent_is_refused_before_it_is_written(
    store: SessionService,
) -> None:
    await create(store, "big")
    before = await store.get_session(app_name=APP, user_id="ada", session_id="big")
    assert before is not None
    # The request fits a message; its answer (the state holding it, and the event) does not.
    delta = {"blob": "x" * (MAX_MESSAGE_BYTES // 2 + 1024)}
    request = session_pb2.UpdateSessionStateRequest(user_id="ada", session_id="big")
    codec.state_to_map(request.state_delta, delta, request.state_delta_json)
    assert request.ByteSize() < MAX_MESSAGE_BYTES

    async with serving(store) as served:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await served.stub.UpdateSessionState(request, timeout=60)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        details = raised.value.details() or ""
        assert "bytes" in details and str(MAX_MESSAGE_BYTES - 64 * 1024) in details, details

        # Nothing was written: a retry would not append it twice.
        session, events, _ = await get_session(served.stub, user_id="ada", session_id="big")
        assert events == []
        assert state_of(session) == {"k": "big"}
        assert session.last_update_time == before.last_update_time

        # An update that fits is answered whole, as before.
        fits = {"blob": "y" * (MAX_MESSAGE_BYTES // 4)}
        request = session_pb2.UpdateSessionStateRequest(user_id="ada", session_id="big")
        codec.state_to_map(request.state_delta, fits, request.state_delta_json)
        response = await served.stub.UpdateSessionState(request, timeout=60)
        assert state_of(response.session) == {"k": "big", **fits}
        assert codec.event_from_proto(response.event).actions.state_delta == fits
        session, events, _ = await get_session(served.stub, user_id="ada", session_id="big")
        assert [event.id for event in events] == [response.event.id]
        assert session.last_update_time == response.session.last_update_time


async def test_an_update_to_a_state_already_near_the_limit_is_refused_unwritten(
    tmp_path: Path,
) -> None:
    """The answer carries the whole state: a small delta to a large state can be what
    tips it over."""
    store = SqliteSessionService(tmp_path / "sessions.db")
    try:
        await store.create_session(
            app_name=APP,
            user_id="ada",
            session_id="full",
            state={"user:big": "z" * (MAX_MESSAGE_BYTES - 100 * 1024)},
        )
        async with serving(store) as served:
            request = session_pb2.UpdateSessionStateRequest(
                user_id="ada",
                session_id="full",
                state_delta_json={"more": '"' + "m" * 40_000 + '"'},
            )
            request.state_delta_json["again"] = '"' + "n" * 40_000 + '"'
            code, _ = await refusal(lambda: served.stub.UpdateSessionState(request, timeout=60))
            assert code == grpc.StatusCode.INVALID_ARGUMENT
        stored = await store.get_session(app_name=APP, user_id="ada", session_id="full")
        assert stored is not None and stored.events == [] and "more" not in stored.state
    finally:
        await store.close()
