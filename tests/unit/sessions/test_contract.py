"""The SessionService contract, run over every backend."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from adk_mesh.errors import (
    AdkJSONError,
    AlreadyExistsError,
    InvalidArgumentError,
    SessionConflictError,
    SessionNotFoundError,
    StateConflictError,
)
from adk_mesh.sessions import (
    Session,
    SessionService,
)
from adk_mesh.types import Content, Event, EventActions

APP = "app"
USER = "alice"
BASE_TIME = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)


@pytest.fixture
def service(session_store: SessionService) -> SessionService:
    """Each session backend: in memory, SQLite, PostgreSQL (the shared ``session_store``)."""
    return session_store


def text_event(
    text: str,
    *,
    author: str = "agent",
    state_delta: dict[str, Any] | None = None,
    seconds: float | None = None,
    partial: bool = False,
) -> Event:
    event = Event.new(
        author=author,
        invocation_id="inv-1",
        content=Content.from_text("model", text),
        actions=EventActions(state_delta=state_delta or {}),
        partial=partial,
    )
    if seconds is not None:
        event.timestamp = BASE_TIME + timedelta(seconds=seconds)
    return event


async def new_session(service: SessionService, **kwargs: Any) -> Session:
    kwargs.setdefault("app_name", APP)
    kwargs.setdefault("user_id", USER)
    return await service.create_session(**kwargs)


async def reload(service: SessionService, session: Session, **kwargs: Any) -> Session:
    loaded = await service.get_session(
        app_name=session.app_name, user_id=session.user_id, session_id=session.id, **kwargs
    )
    assert loaded is not None
    return loaded


def texts(session: Session) -> list[str]:
    return [event.text for event in session.events]


# --- create / get / list / delete -----------------------------------------------------------


async def test_create_then_get_returns_the_session(service: SessionService) -> None:
    created = await new_session(service, session_id="s1", state={"topic": "rust"})

    assert (created.app_name, created.user_id, created.id) == (APP, USER, "s1")
    assert created.state == {"topic": "rust"}
    assert created.events == []
    loaded = await reload(service, created)
    assert loaded.id == "s1"
    assert loaded.state == {"topic": "rust"}
    assert loaded.events == []
    assert loaded.last_update_time == pytest.approx(created.last_update_time)


async def test_create_without_id_makes_a_fresh_uuid(service: SessionService) -> None:
    first = await new_session(service)
    second = await new_session(service)

    assert first.id and second.id and first.id != second.id
    assert await reload(service, first) is not None


async def test_create_with_an_existing_id_raises_already_exists(service: SessionService) -> None:
    await new_session(service, session_id="s1")

    with pytest.raises(AlreadyExistsError):
        await new_session(service, session_id="s1")
    # The same id is free for another user and another app.
    await new_session(service, session_id="s1", user_id="bob")
    await new_session(service, session_id="s1", app_name="other")


@pytest.mark.parametrize(
    "kwargs",
    [{"app_name": ""}, {"user_id": ""}, {"session_id": ""}],
)
async def test_create_refuses_empty_ids(service: SessionService, kwargs: dict[str, str]) -> None:
    with pytest.raises(InvalidArgumentError):
        await new_session(service, **kwargs)


async def test_unknown_session_is_none(service: SessionService) -> None:
    await new_session(service, session_id="s1")

    assert await service.get_session(app_name=APP, user_id=USER, session_id="nope") is None
    assert await service.get_session(app_name=APP, user_id="bob", session_id="s1") is None
    assert await service.get_session(app_name="other", user_id=USER, session_id="s1") is None


async def test_list_sessions_lists_the_users_sessions_without_events(
    service: SessionService,
) -> None:
    first = await new_session(service, session_id="s1", state={"k": 1, "app:a": 2})
    await service.append_event(first, text_event("hello"))
    await new_session(service, session_id="s2")
    await new_session(service, session_id="s3", user_id="bob")
    await new_session(service, session_id="s4", app_name="other")

    listed = await service.list_sessions(app_name=APP, user_id=USER)

    assert sorted(session.id for session in listed) == ["s1", "s2"]
    assert all(session.events == [] for session in listed)
    by_id = {session.id: session for session in listed}
    assert by_id["s1"].state == {"k": 1, "app:a": 2}
    assert await service.list_sessions(app_name=APP, user_id="nobody") == []


async def test_delete_removes_the_session_and_its_events(service: SessionService) -> None:
    session = await new_session(service, session_id="s1", state={"user:name": "Alice"})
    await service.append_event(session, text_event("hello"))

    await service.delete_session(app_name=APP, user_id=USER, session_id="s1")

    assert await service.get_session(app_name=APP, user_id=USER, session_id="s1") is None
    assert await service.list_sessions(app_name=APP, user_id=USER) == []
    recreated = await new_session(service, session_id="s1")
    assert (await reload(service, recreated)).events == []
    # User and app state outlive the session.
    assert recreated.state == {"user:name": "Alice"}


async def test_delete_of_an_unknown_session_is_a_no_op(service: SessionService) -> None:
    await service.delete_session(app_name=APP, user_id=USER, session_id="nope")


# --- events -----------------------------------------------------------------------------------


async def test_events_come_back_in_append_order(service: SessionService) -> None:
    session = await new_session(service)
    # Timestamps out of order on purpose: order is the order of appends.
    returned = [
        await service.append_event(session, text_event(f"e{i}", seconds=10 - i)) for i in range(5)
    ]

    loaded = await reload(service, session)

    assert texts(loaded) == ["e0", "e1", "e2", "e3", "e4"]
    assert loaded.events == returned
    assert session.events == returned


async def test_append_updates_the_session_object(service: SessionService) -> None:
    session = await new_session(service)
    before = session.last_update_time

    stored = await service.append_event(session, text_event("hi", state_delta={"k": "v"}))

    assert session.events == [stored]
    assert session.state["k"] == "v"
    assert session.last_update_time >= before
    loaded = await reload(service, session)
    assert loaded.last_update_time == pytest.approx(session.last_update_time)


async def test_append_to_an_unknown_session_raises(service: SessionService) -> None:
    ghost = Session(id="ghost", app_name=APP, user_id=USER)

    with pytest.raises(SessionNotFoundError):
        await service.append_event(ghost, text_event("lost"))
    assert ghost.events == []


async def test_event_fields_round_trip(service: SessionService) -> None:
    session = await new_session(service)
    event = Event.new(
        author="coordinator",
        invocation_id="inv-7",
        branch="coordinator.researcher",
        content=Content(role="model").with_text("look").with_inline_data("image/png", b"\x89PNG"),
        actions=EventActions(
            state_delta={"big": 2**60, "nested": {"list": [1, 2.5, None, "x"]}},
            artifact_delta={"report.txt": 2},
            transfer_to_agent="helper",
        ),
        long_running_tool_ids=["call-1"],
    )

    await service.append_event(session, event)

    assert (await reload(service, session)).events == [event]


# --- state scopes -----------------------------------------------------------------------------


async def test_app_state_is_shared_by_every_user_of_the_app(service: SessionService) -> None:
    alice = await new_session(service, user_id="alice")
    bob = await new_session(service, user_id="bob")
    elsewhere = await new_session(service, app_name="other")

    await service.append_event(alice, text_event("set", state_delta={"app:theme": "dark"}))

    assert (await reload(service, bob)).state["app:theme"] == "dark"
    assert (await reload(service, alice)).state["app:theme"] == "dark"
    assert "app:theme" not in (await reload(service, elsewhere)).state
    assert "app:theme" in (await new_session(service, user_id="carol")).state


async def test_user_state_is_shared_by_the_users_sessions_only(service: SessionService) -> None:
    first = await new_session(service, user_id="alice")
    second = await new_session(service, user_id="alice")
    bob = await new_session(service, user_id="bob")

    await service.append_event(first, text_event("set", state_delta={"user:name": "Alice"}))

    assert (await reload(service, second)).state["user:name"] == "Alice"
    assert "user:name" not in (await reload(service, bob)).state
    assert (await new_session(service, user_id="alice")).state["user:name"] == "Alice"


async def test_session_keys_are_private_to_the_session(service: SessionService) -> None:
    first = await new_session(service)
    second = await new_session(service)

    await service.append_event(first, text_event("set", state_delta={"cart": ["apple"]}))

    assert (await reload(service, first)).state["cart"] == ["apple"]
    assert "cart" not in (await reload(service, second)).state


async def test_initial_state_is_split_by_scope_and_drops_temp(service: SessionService) -> None:
    created = await new_session(
        service,
        state={"k": 1, "app:a": 2, "user:u": 3, "temp:t": 4},
    )

    assert created.state == {"k": 1, "app:a": 2, "user:u": 3}
    assert (await reload(service, created)).state == {"k": 1, "app:a": 2, "user:u": 3}
    sibling = await new_session(service)
    assert sibling.state == {"app:a": 2, "user:u": 3}


async def test_temp_keys_reach_the_session_object_but_are_never_persisted(
    service: SessionService,
) -> None:
    session = await new_session(service)
    event = text_event("t", state_delta={"temp:scratch": [1, 2], "kept": True})

    stored = await service.append_event(session, event)

    assert session.state["temp:scratch"] == [1, 2]
    assert session.state["kept"] is True
    assert stored.actions.state_delta == {"kept": True}
    assert session.events[-1].actions.state_delta == {"kept": True}
    loaded = await reload(service, session)
    assert "temp:scratch" not in loaded.state
    assert loaded.events[0].actions.state_delta == {"kept": True}
    assert all(not key.startswith("temp:") for key in (await reload(service, session)).state)


async def test_none_values_are_stored_not_deleted(service: SessionService) -> None:
    session = await new_session(service, state={"k": "v", "app:a": 1, "user:u": 2})

    await service.append_event(
        session, text_event("clear", state_delta={"k": None, "app:a": None, "user:u": None})
    )

    loaded = await reload(service, session)
    assert loaded.state == {"k": None, "app:a": None, "user:u": None}
    assert session.state == {"k": None, "app:a": None, "user:u": None}
    assert loaded.events[0].actions.state_delta == {"k": None, "app:a": None, "user:u": None}


async def test_a_non_json_state_value_is_refused_and_nothing_changes(
    service: SessionService,
) -> None:
    session = await new_session(service, state={"k": 1})

    with pytest.raises(AdkJSONError):
        await service.append_event(
            session, text_event("bad", state_delta={"k": 2, "app:x": object()})
        )
    with pytest.raises(AdkJSONError):
        await service.append_event(session, text_event("nan", state_delta={"k": float("nan")}))

    loaded = await reload(service, session)
    assert loaded.state == {"k": 1}
    assert loaded.events == []
    assert session.events == []
    assert session.state == {"k": 1}


# --- partial events and immutability ----------------------------------------------------------


async def test_partial_events_are_returned_untouched_and_never_stored(
    service: SessionService,
) -> None:
    session = await new_session(service)
    partial = text_event("chunk", partial=True, state_delta={"k": 1, "temp:t": 2})

    returned = await service.append_event(session, partial)

    assert returned is partial
    assert partial.actions.state_delta == {"k": 1, "temp:t": 2}
    assert session.events == []
    assert session.state == {}
    loaded = await reload(service, session)
    assert loaded.events == []
    assert loaded.state == {}


async def test_stored_events_do_not_change_when_the_passed_objects_do(
    service: SessionService,
) -> None:
    session = await new_session(service)
    items = ["a"]
    event = text_event("original", state_delta={"items": items, "temp:t": 1})

    stored = await service.append_event(session, event)
    # Mutate everything the caller still holds.
    items.append("b")
    event.actions.state_delta["items"] = "replaced"
    assert event.llm_response.content is not None
    event.llm_response.content.parts[0].text = "changed"
    stored.actions.state_delta["extra"] = 1
    session.events.clear()
    session.state["items"] = "mutated"

    loaded = await reload(service, session)
    assert texts(loaded) == ["original"]
    assert loaded.events[0].actions.state_delta == {"items": ["a"]}
    assert loaded.state == {"items": ["a"]}


async def test_returned_sessions_share_nothing_with_the_store(service: SessionService) -> None:
    session = await new_session(service, state={"nested": {"list": [1]}, "app:shared": [1]})
    await service.append_event(session, text_event("original"))

    loaded = await reload(service, session)
    loaded.state["nested"]["list"].append(2)
    loaded.state["app:shared"].append(2)
    loaded.events[0].author = "someone else"
    listed = await service.list_sessions(app_name=APP, user_id=USER)
    listed[0].state["nested"]["list"].append(3)

    again = await reload(service, session)
    assert again.state == {"nested": {"list": [1]}, "app:shared": [1]}
    assert again.events[0].author == "agent"


# --- num_recent_events and after --------------------------------------------------------------


@pytest.fixture
async def five_events(service: SessionService) -> Session:
    """A session with events e0..e4 at BASE_TIME + 0..4 seconds."""
    session = await new_session(service)
    for i in range(5):
        await service.append_event(session, text_event(f"e{i}", seconds=i))
    return session


async def test_num_recent_events_keeps_the_last_n(
    service: SessionService, five_events: Session
) -> None:
    assert texts(await reload(service, five_events, num_recent_events=2)) == ["e3", "e4"]
    assert texts(await reload(service, five_events, num_recent_events=1)) == ["e4"]
    assert len((await reload(service, five_events, num_recent_events=50)).events) == 5


async def test_num_recent_events_zero_keeps_none(
    service: SessionService, five_events: Session
) -> None:
    loaded = await reload(service, five_events, num_recent_events=0)

    assert loaded.events == []
    assert loaded.id == five_events.id


async def test_negative_num_recent_events_is_refused(
    service: SessionService, five_events: Session
) -> None:
    with pytest.raises(InvalidArgumentError):
        await reload(service, five_events, num_recent_events=-1)


async def test_after_keeps_strictly_later_events(
    service: SessionService, five_events: Session
) -> None:
    after = BASE_TIME + timedelta(seconds=2)

    assert texts(await reload(service, five_events, after=after)) == ["e3", "e4"]
    assert texts(await reload(service, five_events, after=after - timedelta(microseconds=1))) == [
        "e2",
        "e3",
        "e4",
    ]
    assert texts(await reload(service, five_events, after=BASE_TIME + timedelta(hours=1))) == []


async def test_after_accepts_naive_datetimes_as_utc(
    service: SessionService, five_events: Session
) -> None:
    naive = (BASE_TIME + timedelta(seconds=3)).replace(tzinfo=None)

    assert texts(await reload(service, five_events, after=naive)) == ["e4"]


async def test_after_then_num_recent_events(service: SessionService, five_events: Session) -> None:
    after = BASE_TIME + timedelta(seconds=0)

    # after leaves e1..e4; of those the last 2 are kept.
    assert texts(await reload(service, five_events, after=after, num_recent_events=2)) == [
        "e3",
        "e4",
    ]
    # after leaves only e4: asking for 3 gives that one, not older events.
    late = BASE_TIME + timedelta(seconds=3)
    assert texts(await reload(service, five_events, after=late, num_recent_events=3)) == ["e4"]
    assert texts(await reload(service, five_events, after=after, num_recent_events=0)) == []


# --- concurrency --------------------------------------------------------------------------------


async def test_concurrent_appends_from_many_tasks_lose_nothing(service: SessionService) -> None:
    sessions = [await new_session(service, user_id=f"user{i % 2}") for i in range(4)]

    async def writer(index: int, session: Session) -> None:
        for step in range(10):
            await service.append_event(
                session,
                text_event(
                    f"{index}-{step}",
                    state_delta={f"app:w{index}": step, f"user:w{index}": step, "step": step},
                ),
            )

    await asyncio.gather(*(writer(index, session) for index, session in enumerate(sessions)))

    for index, session in enumerate(sessions):
        loaded = await reload(service, session)
        assert texts(loaded) == [f"{index}-{step}" for step in range(10)]
        assert loaded.state["step"] == 9
        assert {key: loaded.state[key] for key in loaded.state if key.startswith("app:")} == {
            f"app:w{i}": 9 for i in range(4)
        }
        assert {key for key in loaded.state if key.startswith("user:")} == {
            f"user:w{i}" for i in range(4) if i % 2 == index % 2
        }


# --- stale appends ------------------------------------------------------------------------------


async def test_every_append_moves_the_version_strictly_forward(service: SessionService) -> None:
    session = await new_session(service)
    versions = [session.last_update_time]

    for i in range(20):
        await service.append_event(session, text_event(f"e{i}"))
        versions.append(session.last_update_time)

    assert versions == sorted(set(versions))
    assert (await reload(service, session)).last_update_time == session.last_update_time


async def test_a_stale_append_is_refused_and_writes_nothing(service: SessionService) -> None:
    session = await new_session(service, state={"counter": 0})
    stale = await reload(service, session)
    await service.append_event(session, text_event("first", state_delta={"counter": 1}))

    with pytest.raises(SessionConflictError) as raised:
        await service.append_event(
            stale,
            text_event("late", state_delta={"counter": 1, "app:a": 1, "user:u": 1, "temp:t": 1}),
        )

    error = raised.value
    assert isinstance(error, StateConflictError)
    assert error.reason == "SESSION_CONFLICT"
    assert error.metadata == {"session_id": session.id}
    assert "changed since it was loaded" in error.message
    loaded = await reload(service, session)
    assert texts(loaded) == ["first"]
    assert loaded.state == {"counter": 1}
    assert (await new_session(service)).state == {}  # no app: or user: key leaked either
    # The refused object is left as it was.
    assert stale.events == []
    assert stale.state == {"counter": 0}
    # Reloaded, the same write goes through.
    fresh = await reload(service, session)
    await service.append_event(fresh, text_event("retried", state_delta={"counter": 2}))
    assert texts(await reload(service, session)) == ["first", "retried"]


async def test_of_two_writers_at_one_version_exactly_one_wins(service: SessionService) -> None:
    session = await new_session(service, state={"counter": 0})
    holders = [await reload(service, session) for _ in range(8)]

    async def increment(holder: Session) -> bool:
        try:
            await service.append_event(
                holder,
                text_event("inc", state_delta={"counter": holder.state["counter"] + 1}),
            )
        except SessionConflictError:
            return False
        return True

    results = await asyncio.gather(*(increment(holder) for holder in holders))

    assert results.count(True) == 1
    loaded = await reload(service, session)
    assert loaded.state["counter"] == 1
    assert len(loaded.events) == 1


async def test_a_session_object_from_before_a_delete_cannot_write_to_the_new_one(
    service: SessionService,
) -> None:
    old = await new_session(service, session_id="s1")
    await service.delete_session(app_name=APP, user_id=USER, session_id="s1")
    await new_session(service, session_id="s1")

    with pytest.raises(SessionConflictError):
        await service.append_event(old, text_event("from the old one"))


async def test_a_read_keeps_the_version(service: SessionService, five_events: Session) -> None:
    """Any read (partial events, a listing) hands out the current version: it can append."""
    partial = await reload(service, five_events, num_recent_events=0)
    await service.append_event(partial, text_event("via a partial read"))
    (listed,) = await service.list_sessions(app_name=APP, user_id=USER)
    await service.append_event(listed, text_event("via a listing"))

    assert texts(await reload(service, five_events))[-2:] == ["via a partial read", "via a listing"]


# --- event ids ------------------------------------------------------------------------------------


async def test_an_event_without_an_id_is_given_a_unique_one(service: SessionService) -> None:
    session = await new_session(service)
    first = text_event("a")
    first.id = ""
    second = text_event("b")
    second.id = ""

    stored = [await service.append_event(session, event) for event in (first, second)]

    assert all(event.id for event in stored)
    assert stored[0].id != stored[1].id
    assert [event.id for event in (await reload(service, session)).events] == [
        event.id for event in stored
    ]
    assert [event.id for event in session.events] == [event.id for event in stored]


async def test_an_event_appended_twice_is_stored_once(service: SessionService) -> None:
    session = await new_session(service, state={"counter": 0})
    event = text_event("once", state_delta={"counter": 1})
    await service.append_event(session, event)
    version = session.last_update_time

    with pytest.raises(AlreadyExistsError) as raised:
        await service.append_event(session, event)

    assert raised.value.metadata == {"session_id": session.id, "event_id": event.id}
    assert "already holds event" in raised.value.message
    assert texts(await reload(service, session)) == ["once"]
    assert session.last_update_time == version
    assert len(session.events) == 1
    # A different event under the same id is refused too.
    impostor = text_event("other", state_delta={"counter": 5})
    impostor.id = event.id
    with pytest.raises(AlreadyExistsError):
        await service.append_event(session, impostor)
    loaded = await reload(service, session)
    assert texts(loaded) == ["once"]
    assert loaded.state == {"counter": 1}


async def test_event_ids_are_per_session(service: SessionService) -> None:
    first = await new_session(service)
    second = await new_session(service)
    event = text_event("shared id")

    await service.append_event(first, event)
    await service.append_event(second, event)

    assert (await reload(service, second)).events[0].id == event.id


async def test_a_duplicate_is_reported_before_staleness(service: SessionService) -> None:
    """A caller that lost track of an append (cancelled, say) learns that its event is in."""
    session = await new_session(service)
    stale = await reload(service, session)
    event = text_event("made it")
    await service.append_event(session, event)

    with pytest.raises(AlreadyExistsError):
        await service.append_event(stale, event)


# --- get or create, claims ------------------------------------------------------------------------


async def test_get_or_create_creates_then_gets(service: SessionService) -> None:
    created = await service.get_or_create_session(
        app_name=APP, user_id=USER, session_id="s1", state={"k": 1}
    )
    await service.append_event(created, text_event("hi"))

    again = await service.get_or_create_session(
        app_name=APP, user_id=USER, session_id="s1", state={"k": 2}
    )

    assert again.state == {"k": 1}
    assert texts(again) == ["hi"]
    assert again.last_update_time == created.last_update_time


async def test_concurrent_get_or_create_on_one_new_id_all_get_the_one_session(
    service: SessionService,
) -> None:
    sessions = await asyncio.gather(
        *(
            service.get_or_create_session(app_name=APP, user_id=USER, session_id="new")
            for _ in range(20)
        )
    )

    assert {session.id for session in sessions} == {"new"}
    assert len(await service.list_sessions(app_name=APP, user_id=USER)) == 1


async def test_get_or_create_reads_a_session_created_after_its_read(
    service: SessionService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race itself: another writer creates the session between the read and the create."""
    real_get = service.get_session
    calls = 0

    async def get_then_lose_the_race(**kwargs: Any) -> Session | None:
        nonlocal calls
        calls += 1
        found = await real_get(**kwargs)
        if calls == 1:
            await service.create_session(
                app_name=APP, user_id=USER, session_id="s1", state={"by": "other"}
            )
        return found

    monkeypatch.setattr(service, "get_session", get_then_lose_the_race)

    session = await service.get_or_create_session(app_name=APP, user_id=USER, session_id="s1")

    assert session.state == {"by": "other"}
    assert calls == 2


async def test_claim_session_checks_ids_and_admits_one_holder(service: SessionService) -> None:
    with pytest.raises(InvalidArgumentError):
        service.claim_session(app_name=APP, user_id=USER, session_id="")

    async with service.claim_session(app_name=APP, user_id=USER, session_id="s1"):
        pass
    async with service.claim_session(app_name=APP, user_id=USER, session_id="s1"):
        pass
