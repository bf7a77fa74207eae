"""Adversarial tests of the cache of decoded histories behind ``get_session_shared``.

The cache must never change what a read returns: a shared read is what ``get_session``
returns, and what a store without the cache (``history_cache_bytes=0``) returns for the same
operations, whatever was appended (values JSON does not keep as they are included), whatever
failed, and whoever else (another service on the same SQLite file) wrote.
"""

from __future__ import annotations

import asyncio
import math
import tempfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adk_mesh.errors import AdkError
from adk_mesh.sessions import InMemorySessionService, Session, SessionService, SqliteSessionService
from adk_mesh.sessions._common import decode_event, decodes_to_itself, encode_event
from adk_mesh.types import (
    Content,
    Event,
    EventActions,
    FunctionCall,
    FunctionResponse,
    Part,
    ToolConfirmation,
)
from tests.strategies import events
from tests.unit.sessions.test_shared_history import (
    APP,
    USER,
    MakeService,
    make_one,
    shared,
    whole,
)

__all__ = ["make_one"]


def _not_json_as_is() -> list[Event]:
    """Events a caller may append whose JSON-valued fields hold values JSON changes: a tuple
    (a list once stored), an integer key (a string), infinity (null), a set (a list)."""
    call = FunctionCall(name="f", args={"pair": (1, 2), "ints": {1: "one"}})
    response = FunctionResponse(name="f", response={"big": math.inf, "tags": {"a"}})
    return [
        Event.new(author="agent", content=Content(role="model", parts=[Part(function_call=call)])),
        Event.new(
            author="tool", content=Content(role="tool", parts=[Part(function_response=response)])
        ),
        Event.new(author="agent", actions=EventActions(state_delta={"k": (1, [2, (3,)])})),
        Event.new(
            author="agent",
            actions=EventActions(
                requested_tool_confirmations={"c1": ToolConfirmation(payload={"at": (0, 1)})}
            ),
        ),
    ]


@pytest.mark.parametrize("number", range(len(_not_json_as_is())))
async def test_a_shared_read_after_an_append_holds_what_was_stored(
    make_one: MakeService, number: int
) -> None:
    """An appended event whose values JSON does not keep as they are is read back as stored
    (as ``get_session`` and any other process read it), not as the object appended."""
    service = make_one()
    session = await service.create_session(app_name=APP, user_id=USER)
    loaded = await shared(service, session.id)  # the cache now holds the session
    event = _not_json_as_is()[number]
    await service.append_event(loaded, event)
    after = await shared(service, session.id)
    assert after == await whole(service, session.id)
    assert after.events[-1] == decode_event(encode_event(event))
    assert not decodes_to_itself(event)
    if not isinstance(service, InMemorySessionService):
        # What another service on the store, which never held the session, reads.
        assert after.events == (await shared(make_one(), session.id)).events


# --- a differential test: the cache against no cache -----------------------------------------

_SESSION_IDS = ["s0", "s1"]


@dataclass
class _World:
    """Services on one store (two on one SQLite file: two processes), and the last session
    object each returned for each session (the one a caller would append through)."""

    services: list[SessionService]
    held: dict[tuple[int, str], Session] = field(default_factory=dict)


def _outcome(session: Session | None) -> Any:
    if session is None:
        return None
    return (session.state, [event.model_dump() for event in session.events])


async def _apply(world: _World, operation: tuple[Any, ...], step: int) -> Any:
    """Runs one operation, returning what the caller sees (an error by its type)."""
    kind, who, session_id = operation[:3]
    service = world.services[who % len(world.services)]
    key = (who % len(world.services), session_id)
    try:
        if kind == "create":
            created = await service.create_session(
                app_name=APP, user_id=USER, session_id=session_id, state=operation[3]
            )
            world.held[key] = created
            return ("created", created.state)
        if kind in ("delete", "recreate"):
            await service.delete_session(app_name=APP, user_id=USER, session_id=session_id)
            if kind == "delete":
                return ("deleted",)
            # Created again at once: no read of the other service sees it gone.
            world.held[key] = await service.create_session(
                app_name=APP, user_id=USER, session_id=session_id
            )
            return ("recreated",)
        if kind == "shared":
            loaded = await service.get_session_shared(
                app_name=APP, user_id=USER, session_id=session_id
            )
            if loaded is not None:
                world.held[key] = loaded
                assert loaded == await service.get_session(
                    app_name=APP, user_id=USER, session_id=session_id
                )
            return ("shared", _outcome(loaded))
        if kind == "read":
            num_recent_events, after = operation[3], operation[4]
            loaded = await service.get_session(
                app_name=APP,
                user_id=USER,
                session_id=session_id,
                num_recent_events=num_recent_events,
                after=after,
            )
            return ("read", _outcome(loaded))
        assert kind == "append"
        event: Event = operation[3]
        reuse_id = operation[4]
        held = world.held.get(key)
        if held is None:
            return ("nothing held",)
        # Ids are the step's (the same in every world), or an earlier step's (a duplicate).
        event = event.model_copy(deep=True, update={"id": f"e{reuse_id or step}"})
        stored = await service.append_event(held, event)
        return ("appended", stored.model_dump())
    except AdkError as error:
        return ("error", type(error).__name__)


_operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("create"),
            st.integers(0, 1),
            st.sampled_from(_SESSION_IDS),
            st.none() | st.just({"k": 0, "app:a": [1], "user:u": {"x": 1}, "temp:t": 1}),
        ),
        st.tuples(
            st.sampled_from(["delete", "recreate"]),
            st.integers(0, 1),
            st.sampled_from(_SESSION_IDS),
        ),
        st.tuples(st.just("shared"), st.integers(0, 1), st.sampled_from(_SESSION_IDS)),
        st.tuples(
            st.just("read"),
            st.integers(0, 1),
            st.sampled_from(_SESSION_IDS),
            st.none() | st.integers(0, 3),
            st.none() | st.just(datetime.fromisoformat("2000-01-01T00:00:00+00:00")),
        ),
        st.tuples(
            st.just("append"),
            st.integers(0, 1),
            st.sampled_from(_SESSION_IDS),
            events,
            st.none() | st.integers(1, 5),
        ),
        st.tuples(
            st.just("append"),
            st.integers(0, 1),
            st.sampled_from(_SESSION_IDS),
            events,
            st.none(),
        ),
    ),
    max_size=25,
)


async def _read_all(world: _World) -> list[Any]:
    """Every service's shared read of every session (the objects held left as they are)."""
    seen = []
    for service in world.services:
        for session_id in _SESSION_IDS:
            loaded = await service.get_session_shared(
                app_name=APP, user_id=USER, session_id=session_id
            )
            if loaded is not None:
                assert loaded == await service.get_session(
                    app_name=APP, user_id=USER, session_id=session_id
                )
            seen.append(_outcome(loaded))
    return seen


async def _run_worlds(
    store: str, operations: list[tuple[Any, ...]], cache_bytes: int, read_every_step: bool
) -> None:
    with tempfile.TemporaryDirectory() as directory:

        def services(name: str, history_cache_bytes: int) -> list[SessionService]:
            if store == "memory":
                return [InMemorySessionService(history_cache_bytes=history_cache_bytes)]
            path = Path(directory) / f"{name}.db"
            return [
                SqliteSessionService(path, history_cache_bytes=history_cache_bytes)
                for _ in range(2)
            ]

        cached = _World(services("cached", cache_bytes))
        plain = _World(services("plain", 0))
        try:
            # Both sessions exist at first (operations may delete and create them again).
            for world in (cached, plain):
                for session_id in _SESSION_IDS:
                    await _apply(world, ("create", 0, session_id, None), 0)
                    await _apply(world, ("shared", 1, session_id), 0)
            for step, operation in enumerate(operations, 1):
                seen = await _apply(cached, operation, step)
                expected = await _apply(plain, operation, step)
                assert seen == expected, (step, operation)
                if read_every_step:
                    assert await _read_all(cached) == await _read_all(plain), (step, operation)
            assert await _read_all(cached) == await _read_all(plain)
        finally:
            for service in [*cached.services, *plain.services]:
                await service.close()


@pytest.mark.parametrize("store", ["memory", "sqlite"])
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    operations=_operations,
    cache_bytes=st.sampled_from([1, 3_000, 2_500_000]),
    read_every_step=st.booleans(),
)
def test_the_cache_reads_what_no_cache_reads(
    store: str, operations: list[tuple[Any, ...]], cache_bytes: int, read_every_step: bool
) -> None:
    asyncio.run(_run_worlds(store, operations, cache_bytes, read_every_step))


async def test_concurrent_appends_to_sessions_keep_every_history(make_one: MakeService) -> None:
    """Tasks appending to sessions at once (each through its own object, as parallel turns
    do), with shared reads between: every history is read whole and in order."""
    service = make_one(history_cache_bytes=4_000)
    ids = [f"p{number}" for number in range(4)]
    for session_id in ids:
        await service.create_session(app_name=APP, user_id=USER, session_id=session_id)

    async def turn(session_id: str) -> None:
        for index in range(6):
            loaded = await shared(service, session_id)
            assert [event.author for event in loaded.events] == [
                f"{session_id}.{i}" for i in range(index)
            ]
            await service.append_event(loaded, Event.new(author=f"{session_id}.{index}"))

    await asyncio.gather(*(turn(session_id) for session_id in ids))
    for session_id in ids:
        loaded = await shared(service, session_id)
        assert loaded == await whole(service, session_id)
        assert [event.author for event in loaded.events] == [f"{session_id}.{i}" for i in range(6)]


@settings(max_examples=300, deadline=None)
@given(events)
def test_an_event_of_plain_json_stands_for_its_stored_json(event: Event) -> None:
    """Events of plain JSON (every event a model or a FunctionTool makes) are kept as the
    objects appended; whatever is kept so decodes back to itself."""
    assert decodes_to_itself(event)
    assert decode_event(encode_event(event)) == event


async def test_failed_appends_leave_a_held_history_as_stored(make_one: MakeService) -> None:
    """A stale, duplicate or unstorable append, with the history held, changes nothing: the
    next shared read is the stored session, and an append through the object still works."""
    service = make_one()
    session = await service.create_session(app_name=APP, user_id=USER, state={"k": 0})
    first = await service.append_event(session, Event.new(author="e0"))
    loaded = await shared(service, session.id)
    stale = await shared(service, session.id)
    await service.append_event(loaded, Event.new(author="e1"))
    failing = [
        (stale, Event.new(author="stale")),  # another object appended since
        (loaded, first.model_copy()),  # already stored
        (loaded, Event.new(author="bad", actions=EventActions(state_delta={"k": object()}))),
    ]
    for holder, event in failing:
        with pytest.raises(AdkError):
            await service.append_event(holder, event)
        after = await shared(service, session.id)
        assert after == await whole(service, session.id)
        assert [event.author for event in after.events] == ["e0", "e1"]
        assert after.state == {"k": 0}
    await service.append_event(
        loaded, Event.new(author="e2", actions=EventActions(state_delta={"k": 2}))
    )
    after = await shared(service, session.id)
    assert after == await whole(service, session.id)
    assert [event.author for event in after.events] == ["e0", "e1", "e2"]
    assert after.state == {"k": 2}
