"""Session listing, as google-adk 2.13 lists: each session with its state, and in one order.

* google-adk's session services (in memory, SQLite, database) list each session without its
  events but with its state as a turn sees it: the session's own keys merged with the app's
  ("app:") and the user's ("user:") keys. Every store here lists so, a page at a time too;
  ``ListSessions`` carries the state (deep values as JSON text), in responses kept below the
  message limit by bytes as well as by count; the gateway's session list returns it.
* The PostgreSQL store, which replicas share, orders the listing by the database's clock:
  a replica whose clock is behind cannot put a new session before a listing's position.

Real parts: every store (memory, a SQLite file, a PostgreSQL database of the test's own),
AgentServers on 127.0.0.1:0, the gateway on a real uvicorn server.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from adk_mesh import codec
from adk_mesh.mesh import _session_service
from adk_mesh.sessions import InMemorySessionService, SessionService, SqliteSessionService, _common
from adk_mesh.sessions.base import Session
from adk_mesh.v1 import session_pb2
from gateway import GatewaySettings
from tests.gateway.conftest import serve_gateway
from tests.integration.mesh.test_session_service import APP, Served, serve, state_of, stop


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


async def listed(served: Served, **fields: Any) -> list[session_pb2.ListSessionsResponse]:
    return [
        response
        async for response in served.stub.ListSessions(
            session_pb2.ListSessionsRequest(user_id="ada", **fields), timeout=60
        )
    ]


def _deep(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = {"in": value}
    return value


async def _three_sessions(store: SessionService) -> dict[str, dict[str, Any]]:
    """s-0..s-2 of ada (own keys, shared "app:" and "user:" keys, a "temp:" key that is
    never stored), one of bob's with his own "user:" key; ada's expected listed states."""
    for index in range(3):
        await store.create_session(
            app_name=APP,
            user_id="ada",
            session_id=f"s-{index}",
            state={"k": index, "temp:scratch": 1, "app:motd": "hi", "user:lang": "en"},
        )
    await store.create_session(
        app_name=APP, user_id="bob", session_id="b-0", state={"user:lang": "fr", "mine": True}
    )
    return {f"s-{index}": {"k": index, "app:motd": "hi", "user:lang": "en"} for index in range(3)}


# --- defect 1: each session is listed with its merged state ------------------------------------


async def test_every_store_lists_each_session_with_its_merged_state(
    store: SessionService,
) -> None:
    expected = await _three_sessions(store)

    whole = await store.list_sessions(app_name=APP, user_id="ada")
    assert {s.id: s.state for s in whole} == expected
    assert all(s.events == [] and s.last_update_time > 0 for s in whole)

    paged: list[Session] = []
    token: str | None = None
    while True:
        page = await store.list_sessions_page(
            app_name=APP, user_id="ada", page_size=2, page_token=token
        )
        paged.extend(page.sessions)
        token = page.next_page_token
        if token is None:
            break
    assert [s.id for s in paged] == sorted(expected)
    assert {s.id: s.state for s in paged} == expected
    assert all(s.events == [] for s in paged)

    # The listed state is the caller's own: changing it changes nothing stored.
    paged[0].state["app:motd"] = "changed"
    paged[0].state["k"] = "changed"
    again = await store.list_sessions_page(app_name=APP, user_id="ada", page_size=10)
    assert {s.id: s.state for s in again.sessions} == expected


async def test_list_sessions_rpc_carries_each_sessions_state(store: SessionService) -> None:
    expected = await _three_sessions(store)
    # A value too deep for a protobuf Value travels as JSON text, as in GetSession.
    deep = _deep(codec.STRUCT_MAX_DEPTH + 5)
    created = await store.create_session(
        app_name=APP, user_id="ada", session_id="s-3", state={"deep": deep}
    )
    expected["s-3"] = {"deep": deep, "app:motd": "hi", "user:lang": "en"}
    assert created.state == expected["s-3"]

    async with serving(store) as served:
        responses = await listed(served)
        sessions = [session for response in responses for session in response.sessions]
        assert [s.id for s in sessions] == ["s-0", "s-1", "s-2", "s-3"]
        assert {s.id: state_of(s) for s in sessions} == expected
        (with_deep,) = [s for s in sessions if s.id == "s-3"]
        assert "deep" in with_deep.state_json and "deep" not in with_deep.state

        # A page at a time too.
        first = await listed(served, page_size=3)
        rest = await listed(served, page_token=first[-1].next_page_token)
        paged = [s for response in [*first, *rest] for s in response.sessions]
        assert {s.id: state_of(s) for s in paged} == expected


async def test_list_sessions_batches_by_bytes_not_only_by_count(
    tmp_path: Path,
) -> None:
    """Sessions with large states: each response stays within the response budget (as
    GetSession's do), however few sessions that holds, and every session is listed whole."""
    store = SqliteSessionService(tmp_path / "sessions.db")
    blob = "x" * (1024 * 1024 + 512 * 1024)  # 1.5 MiB: two fit a 4 MiB response, not three
    try:
        for index in range(5):
            await store.create_session(
                app_name=APP,
                user_id="ada",
                session_id=f"s-{index}",
                state={"blob": blob, "n": index},
            )
        async with serving(store) as served:
            responses = await listed(served)
    finally:
        await store.close()
    assert len(responses) >= 3
    assert all(
        response.ByteSize() <= _session_service.EVENTS_BYTES_PER_RESPONSE for response in responses
    )
    sessions = [s for response in responses for s in response.sessions]
    assert [s.id for s in sessions] == [f"s-{index}" for index in range(5)]
    assert all(state_of(s) == {"blob": blob, "n": int(s.id[2:])} for s in sessions)
    assert not any(response.next_page_token for response in responses)


async def test_a_session_whose_state_no_message_can_carry_is_listed_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One huge state does not fail the whole listing: that session comes without its
    state, named as such, and the others come whole."""
    # The bound a listed session's encoding may reach, lowered so the test stays small.
    monkeypatch.setattr(_session_service, "MAX_LISTED_SESSION_BYTES", 64 * 1024)
    store = SqliteSessionService(tmp_path / "sessions.db")
    try:
        await store.create_session(app_name=APP, user_id="ada", session_id="small", state={"a": 1})
        await store.create_session(
            app_name=APP, user_id="ada", session_id="huge", state={"blob": "x" * 100_000}
        )
        await store.create_session(app_name=APP, user_id="ada", session_id="after", state={"b": 2})
        async with serving(store) as served:
            responses = await listed(served)
    finally:
        await store.close()
    sessions = [s for response in responses for s in response.sessions]
    assert [s.id for s in sessions] == ["small", "huge", "after"]
    stateless = [i for response in responses for i in response.stateless_session_ids]
    assert stateless == ["huge"]
    listed_states = {s.id: state_of(s) for s in sessions}
    assert listed_states == {"small": {"a": 1}, "huge": {}, "after": {"b": 2}}


async def test_the_gateway_lists_each_session_with_its_state(tmp_path: Path) -> None:
    store = SqliteSessionService(tmp_path / "sessions.db")
    try:
        expected = await _three_sessions(store)
        deep = _deep(codec.STRUCT_MAX_DEPTH + 5)
        await store.create_session(
            app_name=APP, user_id="ada", session_id="s-3", state={"deep": deep}
        )
        expected["s-3"] = {"deep": deep, "app:motd": "hi", "user:lang": "en"}
        async with (
            serving(store) as served,
            serve_gateway(GatewaySettings(apps={APP: served.target}, sse_ping_seconds=0)) as url,
            httpx.AsyncClient(base_url=url, timeout=30) as client,
        ):
            answer = await client.get(f"/apps/{APP}/users/ada/sessions")
    finally:
        await store.close()
    assert answer.status_code == 200
    body = answer.json()
    assert [session["id"] for session in body] == ["s-0", "s-1", "s-2", "s-3"]
    assert {session["id"]: session["state"] for session in body} == expected
    assert all(session["events"] == [] for session in body)


# --- defect 2: PostgreSQL orders the listing by one clock --------------------------------------


@pytest.mark.postgres
async def test_a_replica_whose_clock_is_behind_is_not_missed_by_a_listing(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from adk_mesh.sessions.postgres import PostgresSessionService

    ahead = PostgresSessionService(postgres_url)
    behind = PostgresSessionService(postgres_url)
    try:
        for index in range(3):
            await ahead.create_session(app_name=APP, user_id="ada", session_id=f"s-{index}")
        first = await ahead.list_sessions_page(app_name=APP, user_id="ada", page_size=3)
        assert [s.id for s in first.sessions] == ["s-0", "s-1", "s-2"]
        assert first.next_page_token is None
        # The listing continues from its last position (the token of a page of 2 names s-1;
        # the one of this page would name s-2, which a later page must continue after).
        two = await ahead.list_sessions_page(app_name=APP, user_id="ada", page_size=2)
        assert two.next_page_token is not None

        # Another replica, its clock an hour behind, creates a session now.
        real_now = _common.now
        monkeypatch.setattr(_common, "now", lambda: real_now() - 3600.0)
        await behind.create_session(app_name=APP, user_id="ada", session_id="late")
        monkeypatch.setattr(_common, "now", real_now)

        rest = await ahead.list_sessions_page(
            app_name=APP, user_id="ada", page_size=10, page_token=two.next_page_token
        )
        assert [s.id for s in rest.sessions] == ["s-2", "late"]
        whole = await ahead.list_sessions(app_name=APP, user_id="ada")
        assert [s.id for s in whole] == ["s-0", "s-1", "s-2", "late"]
    finally:
        await ahead.close()
        await behind.close()


@pytest.mark.postgres
async def test_a_creation_in_flight_is_not_overtaken_by_a_later_one(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Creations of one user commit in the order of their creation times: one that starts
    while another is in flight (on another replica) waits for it, so a listing never sees
    the later session and then, behind its position, the earlier one."""
    import asyncpg

    from adk_mesh.sessions import postgres
    from adk_mesh.sessions.postgres import PostgresSessionService

    first = PostgresSessionService(postgres_url)
    second = PostgresSessionService(postgres_url)
    observer = await asyncpg.connect(postgres_url)
    inside, release = asyncio.Event(), asyncio.Event()
    real_update_scoped = postgres._update_scoped
    armed = True

    async def held_once(*args: Any, **kwargs: Any) -> Any:
        # The first creation stops inside its transaction, its session row inserted.
        nonlocal armed
        if armed:
            armed = False
            inside.set()
            await release.wait()
        return await real_update_scoped(*args, **kwargs)

    try:
        await first.create_session(app_name=APP, user_id="ada", session_id="s-0")
        monkeypatch.setattr(postgres, "_update_scoped", held_once)
        slow = asyncio.create_task(
            first.create_session(app_name=APP, user_id="ada", session_id="slow")
        )
        await inside.wait()
        fast = asyncio.create_task(
            second.create_session(app_name=APP, user_id="ada", session_id="fast")
        )
        # Until the later creation is done, or waits for a lock: whichever comes first.
        while not fast.done():
            waiting = await observer.fetchval(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            )
            if waiting:
                break
            await asyncio.sleep(0.01)
        overtook = fast.done()
        seen = await second.list_sessions_page(app_name=APP, user_id="ada", page_size=10)
        release.set()
        await slow
        await fast
    finally:
        release.set()
        await observer.close()
        await first.close()
        await second.close()
    assert not overtook
    assert [s.id for s in seen.sessions] == ["s-0"]
    listing = PostgresSessionService(postgres_url)
    try:
        whole = await listing.list_sessions(app_name=APP, user_id="ada")
    finally:
        await listing.close()
    assert [s.id for s in whole] == ["s-0", "slow", "fast"]


@pytest.mark.postgres
async def test_a_database_clock_that_went_back_does_not_hide_a_new_session(
    postgres_url: str,
) -> None:
    """The database's own clock may step back (a time correction, a failover to a server
    whose clock is behind): a session created then still comes after the user's latest, so a
    listing that passed that one sees it (before: it got the earlier time and was skipped)."""
    import asyncpg

    from adk_mesh.sessions.postgres import PostgresSessionService

    store = PostgresSessionService(postgres_url)
    try:
        await store.create_session(app_name=APP, user_id="bea", session_id="early")
        await store.create_session(app_name=APP, user_id="bea", session_id="ahead")
        await store.create_session(app_name=APP, user_id="bea", session_id="last")
        # As if the clock had been an hour ahead when "ahead" and "last" were created, and was
        # then set right: every creation from now on reads an earlier time than theirs.
        connection = await asyncpg.connect(postgres_url)
        try:
            await connection.execute(
                "UPDATE adk_sessions SET create_time = create_time + 3600 "
                "WHERE app_name = $1 AND user_id = 'bea' AND id IN ('ahead', 'last')",
                APP,
            )
        finally:
            await connection.close()
        page = await store.list_sessions_page(app_name=APP, user_id="bea", page_size=2)
        assert [s.id for s in page.sessions] == ["early", "ahead"]
        token = page.next_page_token
        assert token is not None

        await store.create_session(app_name=APP, user_id="bea", session_id="after")

        rest = await store.list_sessions_page(
            app_name=APP, user_id="bea", page_size=10, page_token=token
        )
        assert [s.id for s in rest.sessions] == ["last", "after"]
        whole = await store.list_sessions(app_name=APP, user_id="bea")
        assert [s.id for s in whole] == ["early", "ahead", "last", "after"]
    finally:
        await store.close()
