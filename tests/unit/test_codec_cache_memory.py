"""The caches of events are bounded by the memory they hold, not by a count or encoded bytes.

A short event encodes to ~100 bytes and takes ~4 KiB of Python objects decoded (a JSON value
~6 bytes of memory per byte of its text): a bound in encoded bytes let ``codec.DECODED_EVENTS``
and ``codec.ENCODED_EVENTS`` hold ~40 times their bound (a served agent grew by ~4 KiB per
hop, towards ~0.5 GiB). Here the estimate (``adk_mesh._memory.event_bytes``) is checked
against what ``tracemalloc`` measures.
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from adk_mesh import codec
from adk_mesh._memory import event_bytes
from adk_mesh.sessions.base import Session
from adk_mesh.types import Content, Event, EventActions, Part
from adk_mesh.v1 import agent_pb2

MiB = 1024 * 1024


def _text(size: int) -> Callable[[int], Event]:
    return lambda i: Event.new(
        author="echo",
        invocation_id=f"i{i}",
        content=Content.from_text("model", f"{i} " + "x" * size),
    )


def _call(i: int) -> Event:
    part = Part.from_function_call("get_weather", {"city": "Paris", "n": i})
    return Event.new(
        author="echo", invocation_id=f"i{i}", content=Content(role="model", parts=[part])
    )


def _records(count: int) -> Callable[[int], Event]:
    def make(i: int) -> Event:
        items = [
            {"id": j, "name": f"name {j}", "score": j * 1.5, "tags": ["a"]} for j in range(count)
        ]
        part = Part.from_function_response("search", {"items": items, "n": i})
        return Event.new(
            author="search", invocation_id=f"i{i}", content=Content(role="user", parts=[part])
        )

    return make


def _state(i: int) -> Event:
    return Event.new(
        author="echo",
        invocation_id=f"i{i}",
        content=Content.from_text("model", "ok"),
        actions=EventActions(state_delta={f"key{j}": j for j in range(10)}),
    )


SHAPES: dict[str, Callable[[int], Event]] = {
    "short text": _text(20),
    "2 KB of text": _text(2000),
    "20 KB of text": _text(20_000),
    "a function call": _call,
    "10 records": _records(10),
    "200 records": _records(200),
    "a state delta": _state,
}


@contextmanager
def traced() -> Iterator[list[int]]:
    """The Python memory allocated inside the block and still held after it (collected)."""
    grown: list[int] = []
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        yield grown
        gc.collect()
        grown.append(tracemalloc.get_traced_memory()[0] - base)
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("shape", list(SHAPES))
def test_the_estimate_of_a_decoded_event_covers_what_it_holds(shape: str) -> None:
    make = SHAPES[shape]
    messages = [codec.event_to_proto(make(i)) for i in range(300)]
    cache = codec.DecodedEvents(1 << 40)
    with traced() as grown:
        for message in messages:
            cache.decode(message)
    # Never below what the cache holds, and not far above it (a bound that wastes little).
    assert grown[0] <= cache.held_bytes <= 1.5 * grown[0]


def test_decoded_events_past_the_bound_hold_no_more_than_the_bound() -> None:
    messages = [codec.event_to_proto(_text(20)(i)) for i in range(3000)]  # ~13 MiB decoded
    cache = codec.DecodedEvents(2 * MiB)
    with traced() as grown:
        for message in messages:
            cache.decode(message)
    assert grown[0] <= 2 * MiB
    assert 300 <= len(cache) < 3000


def test_encoded_events_past_the_bound_hold_no_more_than_the_bound() -> None:
    cache = codec.EncodedEvents(2 * MiB)
    with traced() as grown:
        for i in range(2000):  # each event is held by the cache alone, as after its session went
            event = _call(i)
            cache.put(codec.EncodedEvent(event, codec.event_to_proto(event)))
    # What tracemalloc sees is the events and the entries; the protobuf messages (allocated by
    # upb, out of its sight) are in the estimate too, so it sees less than the bound.
    assert grown[0] <= 2 * MiB
    assert 150 <= len(cache) < 2000
    assert cache.held_bytes <= 2 * MiB


def test_a_named_window_is_weighed_by_its_events() -> None:
    codec.DECODED_EVENTS.clear()
    codec.NAMED_WINDOWS.clear()
    events = [_records(20)(i) for i in range(6)]
    session = Session(id="s", app_name="app", user_id="u", events=events)
    first = codec.session_view_to_proto(session)
    received = codec.session_view_from_proto(first)
    key = ("app", "u", "s")
    _, held, weights = codec.NAMED_WINDOWS._entries[key][0]
    assert held == received.events
    expected = [event_bytes(event) for event in received.events]
    assert weights == expected
    assert codec.NAMED_WINDOWS._total == sum(expected)
    # The next view names the first four by digest: their weights come with them.
    named = agent_pb2.SessionView(
        app_name="app",
        user_id="u",
        session_id="s",
        history_digests=codec.NAMED_WINDOWS._entries[key][0][0][: 4 * codec.DIGEST_BYTES],
        omitted_events=4,
    )
    found, found_weights = codec.named_events_weighed(named)
    assert found == received.events[:4]
    assert found_weights == expected[:4]
    codec.DECODED_EVENTS.clear()
    codec.NAMED_WINDOWS.clear()


def test_a_kept_window_weighs_what_its_entries_weigh_as_it_grows_and_steps() -> None:
    codec.VIEW_MEMOS.clear()
    codec.ENCODED_EVENTS.clear()
    events = [_call(i) if i % 3 else _text(30)(i) for i in range(10)]
    session = Session(id="s", app_name="app", user_id="u", events=events)
    for grown in range(30):  # past max_events: the window steps every 2 events
        codec.session_view_to_proto(session, max_events=8, digests_for="svc", memo="m")
        (window, weight) = next(iter(codec.VIEW_MEMOS._entries.values()))
        assert weight == window.weight() == sum(entry.weight for entry in window.entries)
        assert codec.VIEW_MEMOS._total == weight
        session.events.append(_records(3)(100 + grown) if grown % 2 else _text(10)(100 + grown))
    codec.VIEW_MEMOS.clear()
    codec.ENCODED_EVENTS.clear()
