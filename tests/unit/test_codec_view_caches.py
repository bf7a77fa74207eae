"""Session views whose cost does not grow with the history (issue 16, target 1 across a hop):
encodings reused on the caller's side, decodings on the callee's, a window that steps."""

from __future__ import annotations

from adk_mesh import codec
from adk_mesh.sessions.base import Session
from adk_mesh.types import Content, Event, LlmResponse
from adk_mesh.v1 import agent_pb2


def text_event(index: int, size: int = 0) -> Event:
    text = f"message {index}" + "x" * size
    return Event(
        id=f"e{index:05d}",
        author="user",
        llm_response=LlmResponse(content=Content.from_text("user", text)),
    )


def session_of(events: list[Event]) -> Session:
    return Session(id="s", app_name="app", user_id="u", events=events)


def ids(view: agent_pb2.SessionView) -> list[str]:
    return [event.id for event in view.events]


def test_an_event_object_sent_before_is_not_encoded_again() -> None:
    cache = codec.EncodedEvents(1 << 20)
    event = text_event(1)
    encoded = codec.event_to_proto(event)
    cache.put(event, encoded, encoded.ByteSize())
    assert cache.get(event) == (encoded, encoded.ByteSize())
    # Another object with the same id (a copy read again, or a different event claiming the
    # id) is encoded afresh: the entry serves the very object it was made from.
    assert cache.get(event.model_copy()) is None
    assert cache.get(text_event(1)) is None


def test_the_encoding_cache_keeps_its_bound_dropping_the_least_recently_used() -> None:
    events = [text_event(i) for i in range(10)]
    sizes = [codec.event_to_proto(e).ByteSize() for e in events]
    cache = codec.EncodedEvents(sum(sizes[:4]))
    for event, size in zip(events[:4], sizes[:4], strict=True):
        cache.put(event, codec.event_to_proto(event), size)
    assert cache.get(events[0]) is not None  # now the most recently used
    cache.put(events[4], codec.event_to_proto(events[4]), sizes[4])
    assert cache.get(events[1]) is None
    assert cache.get(events[0]) is not None
    assert cache.get(events[4]) is not None


def test_the_same_bytes_decode_to_the_same_shared_object() -> None:
    cache = codec.DecodedEvents(1 << 20)
    event = text_event(1)
    message = codec.event_to_proto(event)
    first = cache.decode(message)
    assert first == event
    assert cache.decode(agent_pb2.SessionView(events=[message]).events[0]) is first


def test_a_different_event_under_a_known_id_is_decoded_as_sent() -> None:
    # The key is the whole encoding: no caller can make another's id decode to its content.
    cache = codec.DecodedEvents(1 << 20)
    original = cache.decode(codec.event_to_proto(text_event(1)))
    forged = text_event(1).model_copy(update={"author": "someone-else"})
    decoded = cache.decode(codec.event_to_proto(forged))
    assert decoded.author == "someone-else"
    assert original.author == "user"


def test_the_decoding_cache_keeps_its_bound() -> None:
    messages = [codec.event_to_proto(text_event(i)) for i in range(10)]
    cache = codec.DecodedEvents(sum(len(m.SerializeToString()) for m in messages[:3]))
    decoded = [cache.decode(m) for m in messages]
    assert cache.decode(messages[9]) is decoded[9]
    assert cache.decode(messages[0]) is not decoded[0]  # dropped, decoded again (and equal)
    assert cache.decode(messages[0]) == decoded[0]


def test_a_view_decoded_twice_shares_its_events() -> None:
    view = codec.session_view_to_proto(session_of([text_event(i) for i in range(5)]))
    first = codec.session_view_from_proto(view)
    again = codec.session_view_from_proto(
        agent_pb2.SessionView.FromString(view.SerializeToString())
    )
    assert all(a is b for a, b in zip(first.events, again.events, strict=True))
    assert first.events is not again.events  # the lists are each run's own


def test_a_view_is_filled_in_place() -> None:
    request = agent_pb2.RunRequest()
    codec.session_view_to_proto(
        session_of([text_event(i) for i in range(3)]), into=request.delegated.session
    )
    assert ids(request.delegated.session) == ["e00000", "e00001", "e00002"]
    assert request.delegated.session.session_id == "s"


def test_a_window_cut_by_max_events_starts_at_a_step_and_stays_there() -> None:
    events = [text_event(i) for i in range(40)]
    # max_events=8: steps of 2 events. 21 events: the newest 8 would start at 13; the window
    # starts at the next step, 14 (7 events).
    view = codec.session_view_to_proto(session_of(events[:21]), max_events=8)
    assert ids(view) == [e.id for e in events[14:21]]
    assert view.omitted_events == 14
    # One more event: the same start, so what the other side built from it still holds.
    view = codec.session_view_to_proto(session_of(events[:22]), max_events=8)
    assert ids(view) == [e.id for e in events[14:22]]
    # Then it steps.
    view = codec.session_view_to_proto(session_of(events[:23]), max_events=8)
    assert ids(view) == [e.id for e in events[16:23]]
    assert view.omitted_events == 16


def test_the_default_window_steps_a_quarter_at_a_time() -> None:
    events = [text_event(i) for i in range(1300)]
    for length, start in ((1000, 0), (1001, 250), (1250, 250), (1251, 500)):
        view = codec.session_view_to_proto(session_of(events[:length]))
        assert len(view.events) == length - start, length
        assert view.omitted_events == start


def test_a_window_cut_by_bytes_is_not_stepped() -> None:
    events = [text_event(i, size=1000) for i in range(50)]
    view = codec.session_view_to_proto(session_of(events), max_events=100, max_bytes=10_500)
    assert len(view.events) == 9
    assert ids(view) == [e.id for e in events[-9:]]
