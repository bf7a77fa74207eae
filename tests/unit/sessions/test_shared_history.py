"""``get_session_shared``: incremental reads from a cache of decoded histories, and its
invalidation when another process (another service on the same file or database) writes.

"Another process" is another service instance on the same SQLite file or PostgreSQL
database: it has a cache of its own and shares nothing with the first but the store.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from adk_mesh.errors import SessionConflictError
from adk_mesh.sessions import InMemorySessionService, Session, SessionService, SqliteSessionService
from adk_mesh.sessions._history import HistoryCache
from adk_mesh.types import Content, Event, EventActions

APP = "app"
USER = "alice"

MakeService = Callable[..., SessionService]


_SQL_STORES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


async def _makes(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MakeService]:
    made: list[SessionService] = []

    def make(**options: Any) -> SessionService:
        service: SessionService
        if request.param == "memory":
            service = InMemorySessionService(**options)
        elif request.param == "sqlite":
            service = SqliteSessionService(tmp_path / "sessions.db", **options)
        else:
            from adk_mesh.sessions.postgres import PostgresSessionService

            service = PostgresSessionService(request.getfixturevalue("postgres_url"), **options)
        made.append(service)
        return service

    try:
        yield make
    finally:
        for service in made:
            await service.close()


@pytest.fixture(params=_SQL_STORES)
async def make_service(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[MakeService]:
    """Makes services on one store (each with a cache of its own), closed after."""
    async for make in _makes(request, tmp_path):
        yield make


@pytest.fixture(params=["memory", *_SQL_STORES])
async def make_one(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MakeService]:
    """Makes a service of each store with a cache of decoded histories, the in-memory one
    too (a store no other process shares: for tests of one service alone)."""
    async for make in _makes(request, tmp_path):
        yield make


def text_event(text: str, **state_delta: Any) -> Event:
    return Event.new(
        author="agent",
        content=Content.from_text("model", text),
        actions=EventActions(state_delta=state_delta),
    )


def texts(session: Session) -> list[str]:
    return [event.text for event in session.events]


async def shared(service: SessionService, session_id: str) -> Session:
    loaded = await service.get_session_shared(app_name=APP, user_id=USER, session_id=session_id)
    assert loaded is not None
    return loaded


async def whole(service: SessionService, session_id: str) -> Session:
    loaded = await service.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert loaded is not None
    return loaded


async def test_a_shared_read_is_the_whole_session(make_one: MakeService) -> None:
    service = make_one()
    session = await service.create_session(app_name=APP, user_id=USER, state={"app:a": 1})
    for index in range(3):
        await service.append_event(session, text_event(f"e{index}", k=index))
    first = await shared(service, session.id)
    assert first == await whole(service, session.id)
    await service.append_event(first, text_event("e3", k=3))
    second = await shared(service, session.id)
    assert second == await whole(service, session.id)
    assert texts(second) == ["e0", "e1", "e2", "e3"]
    assert second.state == {"app:a": 1, "k": 3}
    assert second.last_update_time == first.last_update_time


async def test_shared_reads_share_the_decoded_events_and_nothing_else(
    make_one: MakeService,
) -> None:
    service = make_one()
    session = await service.create_session(app_name=APP, user_id=USER, state={"list": [1]})
    await service.append_event(session, text_event("e0"))
    first = await shared(service, session.id)
    first.events.append(text_event("not stored"))
    first.state["list"].append(2)
    second = await shared(service, session.id)
    assert texts(second) == ["e0"]
    assert second.state == {"list": [1]}
    assert second.events[0] is first.events[0]  # decoded once
    assert second.events is not first.events


async def test_events_appended_by_another_process_are_read(make_service: MakeService) -> None:
    here, there = make_service(), make_service()
    session = await here.create_session(app_name=APP, user_id=USER)
    await here.append_event(session, text_event("here 1"))
    assert texts(await shared(here, session.id)) == ["here 1"]

    theirs = await whole(there, session.id)
    await there.append_event(theirs, text_event("there 1", k="there"))
    loaded = await shared(here, session.id)
    assert texts(loaded) == ["here 1", "there 1"]
    assert loaded.state == {"k": "there"}
    assert loaded.last_update_time == theirs.last_update_time
    # And back: an append through the fresh read is accepted, and read by both.
    await here.append_event(loaded, text_event("here 2"))
    assert texts(await shared(here, session.id)) == ["here 1", "there 1", "here 2"]
    assert texts(await shared(there, session.id)) == ["here 1", "there 1", "here 2"]


async def test_a_stale_append_after_another_processs_append_is_refused(
    make_service: MakeService,
) -> None:
    here, there = make_service(), make_service()
    session = await here.create_session(app_name=APP, user_id=USER)
    mine = await shared(here, session.id)
    await there.append_event(await whole(there, session.id), text_event("there"))
    with pytest.raises(SessionConflictError):
        await here.append_event(mine, text_event("stale"))
    assert texts(await shared(here, session.id)) == ["there"]


async def test_a_session_deleted_and_created_again_elsewhere_is_read_afresh(
    make_service: MakeService,
) -> None:
    here, there = make_service(), make_service()
    session = await here.create_session(app_name=APP, user_id=USER, session_id="s")
    for index in range(3):
        await here.append_event(session, text_event(f"old {index}"))
    assert texts(await shared(here, "s")) == ["old 0", "old 1", "old 2"]

    await there.delete_session(app_name=APP, user_id=USER, session_id="s")
    assert await here.get_session_shared(app_name=APP, user_id=USER, session_id="s") is None
    again = await there.create_session(app_name=APP, user_id=USER, session_id="s")
    assert texts(await shared(here, "s")) == []
    await there.append_event(again, text_event("new 0"))
    assert texts(await shared(here, "s")) == ["new 0"]

    # Deleted and created again between two reads, with more events than before.
    await there.delete_session(app_name=APP, user_id=USER, session_id="s")
    again = await there.create_session(app_name=APP, user_id=USER, session_id="s")
    for index in range(4):
        await there.append_event(again, text_event(f"newer {index}"))
    assert texts(await shared(here, "s")) == [f"newer {index}" for index in range(4)]


async def test_a_read_after_the_own_delete_and_create_is_afresh(make_one: MakeService) -> None:
    service = make_one()
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    await service.append_event(session, text_event("old"))
    assert texts(await shared(service, "s")) == ["old"]
    await service.delete_session(app_name=APP, user_id=USER, session_id="s")
    await service.create_session(app_name=APP, user_id=USER, session_id="s")
    assert texts(await shared(service, "s")) == []


async def test_appends_through_an_older_object_do_not_reach_a_newer_history(
    make_one: MakeService,
) -> None:
    """Two objects of one session in one process: the second append is refused (stale), and
    the cache stays what the store holds."""
    service = make_one()
    session = await service.create_session(app_name=APP, user_id=USER)
    first = await shared(service, session.id)
    second = await shared(service, session.id)
    await service.append_event(first, text_event("first"))
    with pytest.raises(SessionConflictError):
        await service.append_event(second, text_event("second"))
    assert texts(await shared(service, session.id)) == ["first"]


@pytest.mark.parametrize("cache_bytes", [0, 1, 2_000])
async def test_a_small_or_no_cache_reads_the_same(make_one: MakeService, cache_bytes: int) -> None:
    service = make_one(history_cache_bytes=cache_bytes)
    sessions = [await service.create_session(app_name=APP, user_id=USER) for _ in range(3)]
    for round_ in range(4):
        for number, session in enumerate(sessions):
            loaded = await shared(service, session.id)
            assert texts(loaded) == [f"{number}.{r}" for r in range(round_)]
            await service.append_event(loaded, text_event(f"{number}.{round_}"))


async def test_the_default_reads_get_session() -> None:
    service = InMemorySessionService()
    session = await service.create_session(app_name=APP, user_id=USER)
    await service.append_event(session, text_event("e0"))
    # SessionService's own get_session_shared, which a store without a cache inherits.
    loaded = await SessionService.get_session_shared(
        service, app_name=APP, user_id=USER, session_id=session.id
    )
    assert loaded == await whole(service, session.id)
    created = await service.get_or_create_session(
        app_name=APP, user_id=USER, session_id="new", shared_events=True
    )
    assert created.events == []


def test_the_cache_is_bounded_by_the_json_it_holds() -> None:
    cache = HistoryCache(1_000, Event.model_validate_json)
    data = text_event("x" * 100).model_dump_json()
    for number in range(10):
        cache.store(("a", "u", str(number)), None, version=1.0, new_events=[(number + 1, data)])
    assert cache.size <= 1_000
    assert len(cache) == 1_000 // len(data)
    assert cache.held(("a", "u", "9")) is not None
    assert cache.held(("a", "u", "0")) is None
    # One history larger than the bound is not kept (it would push out every other one).
    big = [(100 + index, data) for index in range(20)]
    cache.store(("a", "u", "big"), None, version=1.0, new_events=big)
    assert cache.held(("a", "u", "big")) is None
    assert cache.held(("a", "u", "9")) is not None


def test_the_bound_counts_utf8_bytes_not_characters() -> None:
    """Stored JSON keeps non-ASCII text as it is: 300 CJK characters are 900 bytes."""
    cache = HistoryCache(10_000, Event.model_validate_json)
    data = text_event("語" * 300).model_dump_json()
    cache.store(("a", "u", "read"), None, version=1.0, new_events=[(1, data)])
    assert cache.size == len(data.encode())
    cache.appended(("a", "u", "read"), held_version=1.0, version=2.0, seq=2, data=data)
    assert cache.size == 2 * len(data.encode()) > 2 * len(data) + 1_000


async def test_what_a_turn_appended_is_what_the_next_shared_read_hands_undecoded(
    make_one: MakeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = make_one()
    histories: HistoryCache = service._histories  # type: ignore[attr-defined]
    decoded: list[str] = []
    decode = histories._decode

    def counting(data: str) -> Event:
        decoded.append(data)
        return decode(data)

    monkeypatch.setattr(histories, "_decode", counting)
    session = await service.create_session(app_name=APP, user_id=USER)
    for index in range(50):
        await service.append_event(session, text_event(f"e{index}"))
    loaded = await shared(service, session.id)
    del session
    assert len(decoded) == 50  # the first read decodes the history once
    for turn in range(3):
        appended = await service.append_event(loaded, text_event(f"turn {turn}"))
        loaded = await shared(service, loaded.id)
        assert loaded.events[-1] is appended  # the object stored, not its JSON again
    assert len(decoded) == 50
    assert texts(loaded) == [*(f"e{index}" for index in range(50)), "turn 0", "turn 1", "turn 2"]
    assert loaded == await whole(service, loaded.id)


async def test_an_evicted_in_memory_session_leaves_no_history_behind() -> None:
    service = InMemorySessionService(max_sessions=1)
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    await service.append_event(session, text_event("old"))
    del session
    assert texts(await shared(service, "s")) == ["old"]
    await service.create_session(app_name=APP, user_id=USER, session_id="other")
    assert await service.get_session(app_name=APP, user_id=USER, session_id="s") is None
    assert len(service._histories) == 0
    await service.create_session(app_name=APP, user_id=USER, session_id="s")
    assert texts(await shared(service, "s")) == []


def _only_session(service: InMemorySessionService) -> str:
    (key,) = service._sessions
    return key[2]
