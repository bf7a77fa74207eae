"""Adversarial checks of the caches that make a delegated hop cheap (ENCODED_EVENTS,
VIEW_MEMOS, history digests, ViewDelivery on the caller's side; DECODED_EVENTS,
NAMED_WINDOWS, NamedHistory on the service's): whatever the caches hold, the window a
service builds from a view is the one a view built with every cache empty gives — event by
event, the count left out and the state included."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adk_mesh import codec
from adk_mesh.mesh._caller_contexts import NamedHistory, answer_context_request
from adk_mesh.sessions.base import Session
from adk_mesh.types import Content, Event, EventActions, LlmResponse, Part
from adk_mesh.v1 import agent_pb2

APP, USER = "app", "u"


@pytest.fixture(autouse=True)
def empty_caches() -> Iterator[None]:
    caches = (codec.ENCODED_EVENTS, codec.DECODED_EVENTS, codec.VIEW_MEMOS, codec.NAMED_WINDOWS)
    for cache in caches:
        cache.clear()
    yield
    for cache in caches:
        cache.clear()


def text_event(name: str, text: str, *, partial: bool = False) -> Event:
    return Event(
        id=name,
        author="user",
        llm_response=LlmResponse(content=Content.from_text("user", text), partial=partial),
    )


def answer_event(name: str, value: int) -> Event:
    return Event(
        id=name,
        author="agent",
        llm_response=LlmResponse(
            content=Content(role="user", parts=[Part.from_function_response("t", {"n": value})])
        ),
    )


def state_event(name: str, value: object) -> Event:
    return Event(
        id=name,
        author="agent",
        llm_response=LlmResponse(content=Content.from_text("model", "set")),
        actions=EventActions(state_delta={"k": value}),
    )


def reference(session: Session, max_events: int, max_bytes: int) -> agent_pb2.SessionView:
    """The view built with every cache empty (and none touched)."""
    held = codec.ENCODED_EVENTS
    codec.ENCODED_EVENTS = codec.EncodedEvents(held.max_bytes)
    try:
        return codec.session_view_to_proto(session, max_events=max_events, max_bytes=max_bytes)
    finally:
        codec.ENCODED_EVENTS = held


def answer_loads(view: agent_pb2.SessionView, history: list[Event], max_bytes: int) -> NamedHistory:
    """The named events of ``view`` as a service resolves them on a RunDelegated call: from
    what it kept, and the rest loaded from the caller (``history``, whose views take at most
    ``max_bytes``)."""
    named = NamedHistory(view, can_ask=True)
    while (ask := named.next_request()) is not None:
        answer = asyncio.run(
            answer_context_request(
                ask,
                artifacts=None,
                memory=None,
                app_name=APP,
                user_id=USER,
                session_id=view.session_id,
                history=history,
                history_max_bytes=max_bytes,
            )
        )
        assert answer.WhichOneof("result") != "error", answer.error
        named.take(answer)
    return named


def serve(
    view: agent_pb2.SessionView,
    history: list[Event],
    max_bytes: int = codec.DEFAULT_HISTORY_MAX_BYTES,
) -> tuple[Session, int]:
    """The session a service runs in for ``view`` (sent over the wire by a caller whose views
    take at most ``max_bytes``), and how many events it sees as left out."""
    view = agent_pb2.SessionView.FromString(view.SerializeToString())
    named = answer_loads(view, history, max_bytes)
    events, weights = named.window()
    session = codec.session_view_from_proto(
        view, named=events, named_digests=named.digests(), named_weights=weights
    )
    return session, view.omitted_events - len(events)


def assert_served_as_reference(
    served: Session, left_out: int, session: Session, max_events: int, max_bytes: int
) -> None:
    expected = reference(session, max_events, max_bytes)
    got = [codec.event_to_proto(event) for event in served.events]
    assert [e.id for e in got] == [e.id for e in expected.events]
    assert got == list(expected.events)
    assert left_out == expected.omitted_events
    assert served.state == codec.session_view_from_proto(expected).state


# --- a differential test: a random life of a session --------------------------------------


@dataclass
class World:
    max_events: int
    max_bytes: int
    sessions: dict[str, Session] = field(default_factory=dict)
    counter: int = 0
    pending: list[tuple[codec.ViewDelivery, agent_pb2.SessionView, list[Event]]] = field(
        default_factory=list
    )

    def name(self) -> str:
        self.counter += 1
        return f"ev{self.counter:05d}"


OPS = st.sampled_from(
    [
        "text",
        "text",
        "text",
        "answer",
        "partial",
        "partial",
        "large",
        "state",
        "reread_tail",
        "reread_all",
        "turn",
        "turn",
        "turn",
        "turn_b",
        "failed_turn",
        "concurrent",
        "deliver_pending",
        "restart",
        "recreate",
        "recreate_same_ids",
        "other_session_same_ids",
    ]
)


def step(world: World, op: str, sid: str) -> None:
    session = world.sessions.setdefault(sid, Session(id=sid, app_name=APP, user_id=USER))
    events = session.events
    if op == "text":
        events.append(text_event(world.name(), f"t{world.counter}"))
    elif op == "answer":
        events.append(answer_event(world.name(), world.counter))
    elif op == "partial":
        events.append(text_event(world.name(), "streaming", partial=True))
    elif op == "large":
        events.append(text_event(world.name(), "L" * (world.max_bytes // 3)))
    elif op == "state":
        session.state["k"] = world.counter
        events.append(state_event(world.name(), world.counter))
    elif op == "reread_tail":  # a store hands out the newest events as equal copies
        session.events = [*events[:-3], *(e.model_copy(deep=True) for e in events[-3:])]
    elif op == "reread_all":
        session.events = [e.model_copy(deep=True) for e in events]
    elif op in ("turn", "turn_b", "failed_turn", "concurrent"):
        target = "svc-b" if op == "turn_b" else "svc-a"
        delivery = codec.ViewDelivery()
        view = codec.session_view_to_proto(
            session,
            max_events=world.max_events,
            max_bytes=world.max_bytes,
            digests_for=target,
            memo=(APP, USER, sid),
            delivery=delivery,
        )
        if op == "failed_turn":
            return  # the service never took it
        if op == "concurrent":
            world.pending.append((delivery, view, list(session.events)))
            return
        served, left_out = serve(view, list(session.events), world.max_bytes)
        assert_served_as_reference(served, left_out, session, world.max_events, world.max_bytes)
        delivery.delivered()
    elif op == "deliver_pending":
        for delivery, view, history in world.pending:
            served, _ = serve(view, history, world.max_bytes)
            assert [e.id for e in served.events][-1:] == [e.id for e in view.events][-1:]
            delivery.delivered()
        world.pending.clear()
    elif op == "restart":  # the service restarted: it kept nothing
        codec.DECODED_EVENTS.clear()
        codec.NAMED_WINDOWS.clear()
    elif op == "recreate":  # deleted, created again under the same id
        world.sessions[sid] = Session(id=sid, app_name=APP, user_id=USER)
    elif op == "recreate_same_ids":  # the same ids, other content
        world.sessions[sid] = Session(
            id=sid,
            app_name=APP,
            user_id=USER,
            events=[
                e.model_copy(
                    update={
                        "llm_response": LlmResponse(content=Content.from_text("user", "changed"))
                    }
                )
                for e in events
                if not e.partial
            ],
        )
    elif op == "other_session_same_ids":
        other = "s2" if sid == "s1" else "s1"
        world.sessions[other] = Session(
            id=other,
            app_name=APP,
            user_id=USER,
            events=[
                e.model_copy(
                    update={"llm_response": LlmResponse(content=Content.from_text("user", other))}
                )
                for e in events
                if not e.partial
            ],
        )
    else:  # pragma: no cover
        raise AssertionError(op)


@settings(
    max_examples=int(os.environ.get("VIEW_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    window=st.sampled_from(
        [(0, 1 << 20), (4, 1 << 20), (8, 1 << 20), (12, 3000), (1000, 1 << 20), (9, 1200)]
    ),
    ops=st.lists(st.tuples(OPS, st.sampled_from(["s1", "s1", "s2"])), min_size=10, max_size=120),
)
def test_a_served_window_is_the_one_a_view_built_afresh_gives(
    window: tuple[int, int], ops: list[tuple[str, str]]
) -> None:
    for cache in (codec.ENCODED_EVENTS, codec.DECODED_EVENTS, codec.VIEW_MEMOS):
        cache.clear()
    codec.NAMED_WINDOWS.clear()
    world = World(*window)
    for op, sid in ops:
        step(world, op, sid)
    # And a last turn of each session, after all that.
    for sid in list(world.sessions):
        step(world, "turn", sid)


@settings(
    max_examples=int(os.environ.get("VIEW_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    window=st.sampled_from([(0, 1 << 20), (4, 1 << 20), (8, 1 << 20), (12, 3000), (9, 1200)]),
    turns=st.lists(
        st.lists(st.sampled_from(["text", "text", "answer", "partial", "large"]), max_size=6),
        min_size=2,
        max_size=30,
    ),
)
def test_a_growing_session_is_served_the_window_a_view_built_afresh_gives(
    window: tuple[int, int], turns: list[list[str]]
) -> None:
    # One session, one service, turn after turn: the kept window (VIEW_MEMOS) against a
    # view built afresh, partial events included (the walk skips them).
    for cache in (codec.ENCODED_EVENTS, codec.DECODED_EVENTS, codec.VIEW_MEMOS):
        cache.clear()
    codec.NAMED_WINDOWS.clear()
    world = World(*window)
    for appended in turns:
        for op in appended:
            step(world, op, "s1")
        step(world, "turn", "s1")


# --- the cases the differential tests found, spelled out -----------------------------------


def memo_view(session: Session, max_events: int, target: str = "svc") -> agent_pb2.SessionView:
    """A RemoteAgent's view of ``session`` (its window kept), taken by the service."""
    delivery = codec.ViewDelivery()
    view = codec.session_view_to_proto(
        session,
        max_events=max_events,
        digests_for=target,
        memo=(APP, USER, session.id),
        delivery=delivery,
    )
    delivery.delivered()
    return view


def test_a_view_of_no_events_is_built_again_turn_after_turn() -> None:
    # history_max_events=0: the view only counts the events. Its kept window used to fail
    # the second turn (IndexError in _Window.grown).
    session = Session(id="s", app_name=APP, user_id=USER)
    for index in range(3):
        session.events.append(text_event(f"e{index}", "hello"))
        view = memo_view(session, max_events=0)
        assert list(view.events) == [] and not view.history_digests
        assert view.omitted_events == index + 1


def test_a_stepped_window_past_partial_events_starts_where_a_fresh_one_does() -> None:
    # max_events=8, steps of 2; a partial event at 10, just before the oldest event the walk
    # takes (11): the walk stops at 10, a step, so the window starts at 11, kept or not.
    session = Session(id="s", app_name=APP, user_id=USER)
    session.events.extend(text_event(f"e{i:02d}", "x", partial=i == 10) for i in range(18))
    memo_view(session, max_events=8)
    session.events.append(text_event("e18", "x"))
    view = memo_view(session, max_events=8)
    served, left_out = serve(view, session.events)
    assert [e.id for e in served.events] == [f"e{i:02d}" for i in range(11, 19)]
    assert left_out == 10
    assert_served_as_reference(served, left_out, session, 8, codec.DEFAULT_HISTORY_MAX_BYTES)


def test_a_window_of_partial_events_only_sees_them_replaced() -> None:
    # A session holding only a partial event, then another session under the same ids
    # holding as many events: the kept (empty) window compared none of them.
    session = Session(
        id="s", app_name=APP, user_id=USER, events=[text_event("p", "x", partial=True)]
    )
    memo_view(session, max_events=4)
    memo_view(session, max_events=4)
    again = Session(id="s", app_name=APP, user_id=USER, events=[text_event("e", "x")])
    view = memo_view(again, max_events=4)
    assert [e.id for e in view.events] == ["e"]


def test_named_events_loaded_again_come_whole_past_eight_mib() -> None:
    codec.ENCODED_EVENTS.max_bytes = 1 << 28
    try:
        session = Session(id="s", app_name=APP, user_id=USER)
        session.events.extend(text_event(f"e{i}", "L" * (3 << 20)) for i in range(4))
        max_bytes = 14 << 20
        delivery = codec.ViewDelivery()
        view = codec.session_view_to_proto(
            session, max_bytes=max_bytes, digests_for="svc", memo=("s",), delivery=delivery
        )
        assert not view.abridged_event_ids  # 12 MiB, whole
        serve(view, session.events, max_bytes)
        delivery.delivered()
        codec.DECODED_EVENTS.clear()  # the service restarted
        codec.NAMED_WINDOWS.clear()
        session.events.append(text_event("e4", "new"))
        view = codec.session_view_to_proto(
            session, max_bytes=max_bytes, digests_for="svc", memo=("s",), delivery=delivery
        )
        served, left_out = serve(view, session.events, max_bytes)
        assert_served_as_reference(
            served, left_out, session, codec.DEFAULT_HISTORY_MAX_EVENTS, max_bytes
        )
    finally:
        codec.ENCODED_EVENTS.max_bytes = 32 * 1024 * 1024
