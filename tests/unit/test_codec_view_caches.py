"""Session views whose cost does not grow with the history (issue 16, target 1 across a hop):
encodings reused on the caller's side, decodings on the callee's, a window that steps."""

from __future__ import annotations

import pytest

from adk_mesh import codec
from adk_mesh._memory import event_bytes
from adk_mesh.sessions.base import Session
from adk_mesh.types import Content, Event, LlmResponse, Part
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
    encoded = codec.EncodedEvent(event, codec.event_to_proto(event))
    cache.put(encoded)
    assert cache.get(event) is encoded
    assert encoded.size == encoded.message.ByteSize()
    # Another object with the same id (a copy read again, or a different event claiming the
    # id) is encoded afresh: the entry serves the very object it was made from.
    assert cache.get(event.model_copy()) is None
    assert cache.get(text_event(1)) is None


def test_the_encoding_cache_keeps_its_bound_dropping_the_least_recently_used() -> None:
    events = [text_event(i) for i in range(10)]
    encoded = [codec.EncodedEvent(e, codec.event_to_proto(e)) for e in events]
    # Bounded by the memory its entries hold, estimated: room for four.
    cache = codec.EncodedEvents(sum(e.weight for e in encoded[:4]))
    for entry in encoded[:4]:
        cache.put(entry)
    assert cache.get(events[0]) is not None  # now the most recently used
    cache.put(encoded[4])
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
    # Bounded by the memory its entries hold, estimated: room for three.
    cache = codec.DecodedEvents(sum(event_bytes(text_event(i)) for i in range(3)))
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


# --- history digests: events sent before are named, not sent ------------------------------


def _resolved(view: agent_pb2.SessionView, sent: dict[bytes, str]) -> list[str]:
    """The ids of a view's window: the named events (by the digests of the events sent
    before), then the events sent."""
    digests = codec.history_digests(view)
    return [sent[d] for d in digests] + ids(view)


def _remember(view: agent_pb2.SessionView, sent: dict[bytes, str]) -> None:
    import hashlib

    for event in view.events:
        sent[hashlib.sha256(event.SerializeToString(deterministic=True)).digest()] = event.id


def test_events_sent_to_a_service_before_are_named_by_digest_next_time() -> None:
    codec.VIEW_MEMOS.clear()
    events = [text_event(i) for i in range(12)]
    sent: dict[bytes, str] = {}
    first = codec.session_view_to_proto(session_of(events[:10]), digests_for="svc-a")
    assert not first.history_digests and first.omitted_events == 0
    _remember(first, sent)
    second = codec.session_view_to_proto(session_of(events), digests_for="svc-a")
    assert len(codec.history_digests(second)) == 10
    assert ids(second) == ["e00010", "e00011"]
    assert second.omitted_events == 10  # an older service sees them as omitted
    assert _resolved(second, sent) == [e.id for e in events]
    # Another service was sent nothing: everything goes whole.
    other = codec.session_view_to_proto(session_of(events), digests_for="svc-b")
    assert not other.history_digests and len(other.events) == 12


def test_a_kept_window_gives_the_view_a_fresh_build_gives() -> None:
    # The same session grown turn by turn (a few events each, the newest read back as equal
    # copies, as a store does), its view built from the kept window and afresh: the same
    # window, the same omitted count, at every turn, across window steps.
    import random

    rng = random.Random(7)
    for max_events, max_bytes in ((8, 1 << 20), (20, 1 << 20), (1000, 1 << 20), (50, 2000)):
        codec.VIEW_MEMOS.clear()
        codec.ENCODED_EVENTS.clear()
        history: list[Event] = []
        sent: dict[bytes, str] = {}
        target = f"svc-{max_events}-{max_bytes}"
        for turn in range(60):
            # The last turn's events come back as copies.
            history = [*history[:-3], *(e.model_copy() for e in history[-3:])]
            for _ in range(rng.randint(1, 5)):
                index = len(history)
                if rng.random() < 0.3:  # an answer to a call, at which no window may start
                    history.append(
                        Event(
                            id=f"e{index:05d}",
                            author="agent",
                            llm_response=LlmResponse(
                                content=Content(
                                    role="user",
                                    parts=[Part.from_function_response("t", {"n": index})],
                                )
                            ),
                        )
                    )
                else:
                    history.append(text_event(index))
            memo_view = codec.session_view_to_proto(
                session_of(history),
                max_events=max_events,
                max_bytes=max_bytes,
                digests_for=target,
                memo=("app", "u", "s"),
            )
            fresh = codec.session_view_to_proto(
                session_of(history), max_events=max_events, max_bytes=max_bytes
            )
            _remember(memo_view, sent)
            assert _resolved(memo_view, sent) == ids(fresh), (max_events, turn)
            assert (
                memo_view.omitted_events - len(codec.history_digests(memo_view))
                == fresh.omitted_events
            )


def test_malformed_digests_are_refused() -> None:
    import pytest

    from adk_mesh.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="32 bytes each"):
        codec.history_digests(agent_pb2.SessionView(history_digests=b"x" * 33, omitted_events=2))
    with pytest.raises(InvalidArgumentError, match="among the omitted"):
        codec.history_digests(agent_pb2.SessionView(history_digests=b"x" * 64, omitted_events=1))
    with pytest.raises(InvalidArgumentError, match="at most"):
        codec.history_digests(
            agent_pb2.SessionView(
                history_digests=b"x" * 32 * (codec.MAX_HISTORY_DIGESTS + 1),
                omitted_events=codec.MAX_HISTORY_DIGESTS + 1,
            )
        )


def test_a_service_takes_named_events_only_from_what_it_decoded_itself() -> None:
    codec.DECODED_EVENTS.clear()
    codec.NAMED_WINDOWS.clear()
    events = [text_event(i) for i in range(4)]
    full = codec.session_view_to_proto(session_of(events))
    codec.session_view_from_proto(full)  # decoded and kept here
    import hashlib

    digests = b"".join(
        hashlib.sha256(m.SerializeToString(deterministic=True)).digest() for m in full.events
    )
    named = agent_pb2.SessionView(history_digests=digests[:96], omitted_events=3)
    named.events.append(full.events[3])
    found = codec.named_events(named)
    assert [e.id for e in found if e is not None] == ["e00000", "e00001", "e00002"]
    # A digest of nothing decoded here names nothing.
    unknown = agent_pb2.SessionView(history_digests=b"\0" * 32 + digests[32:64], omitted_events=2)
    assert [e is None for e in codec.named_events(unknown)] == [True, False]


def test_a_service_resolves_a_stepped_window_from_the_window_it_kept() -> None:
    import hashlib

    codec.DECODED_EVENTS.clear()
    codec.NAMED_WINDOWS.clear()
    events = [text_event(i) for i in range(10)]
    full = codec.session_view_to_proto(session_of(events))
    codec.session_view_from_proto(full, named_digests=b"")
    digests = [
        hashlib.sha256(m.SerializeToString(deterministic=True)).digest() for m in full.events
    ]
    codec.DECODED_EVENTS.clear()  # only the kept window can answer now
    stepped = agent_pb2.SessionView(
        app_name="app", user_id="u", session_id="s", history_digests=b"".join(digests[4:])
    )
    stepped.omitted_events = 10
    assert [e.id if e else None for e in codec.named_events(stepped)] == [e.id for e in events[4:]]
    # Digests that only look like part of it (not at a digest's boundary) are not matched.
    odd = agent_pb2.SessionView(
        app_name="app", user_id="u", session_id="s", history_digests=digests[4][1:] + b"\0" * 1
    )
    odd.omitted_events = 1
    assert codec.named_events(odd) == [None]


def test_kept_windows_are_bounded_in_entries_and_weight() -> None:
    kept: codec.LruDict[str, list[int]] = codec.LruDict(3, 10, len)
    kept.put("a", [1] * 4)
    kept.put("b", [1] * 4)
    kept.put("c", [1] * 4)  # 12 > 10: the least recently put goes
    assert kept.get("a") is None and kept.get("b") is not None
    for key in "def":
        kept.put(key, [1])
    assert [kept.get(k) is not None for k in "bcdef"] == [False, False, True, True, True]
    kept.put("huge", [1] * 11)  # heavier than the whole bound: not kept, nothing dropped
    assert kept.get("huge") is None and kept.get("d") is not None
    kept.put("d", [1] * 9)  # replacing an entry counts its new weight only
    assert kept.get("d") == [1] * 9 and kept.get("e") is None


def test_events_count_as_the_services_once_it_took_the_view() -> None:
    # Concurrent calls to one service (a ParallelAgent's children) name nothing the service
    # has not decoded yet: until the first call is answered, the others send the events.
    codec.VIEW_MEMOS.clear()
    events = [text_event(i) for i in range(100, 106)]
    session = session_of(events)
    first_delivery = codec.ViewDelivery()
    first = codec.session_view_to_proto(
        session, digests_for="svc-c", memo=("a", "u", "s"), delivery=first_delivery
    )
    second = codec.session_view_to_proto(
        session, digests_for="svc-c", memo=("a", "u", "s"), delivery=codec.ViewDelivery()
    )
    assert len(first.events) == len(second.events) == 6
    assert not second.history_digests
    first_delivery.delivered()
    first_delivery.delivered()  # idempotent
    third = codec.session_view_to_proto(
        session_of([*events, text_event(106)]),
        digests_for="svc-c",
        memo=("a", "u", "s"),
        delivery=codec.ViewDelivery(),
    )
    assert len(codec.history_digests(third)) == 6 and ids(third) == ["e00106"]


def test_a_service_loads_no_more_named_events_than_one_message_could_carry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from adk_mesh.mesh import _caller_contexts
    from adk_mesh.v1 import tool_pb2

    codec.DECODED_EVENTS.clear()
    codec.NAMED_WINDOWS.clear()
    monkeypatch.setattr(_caller_contexts, "MAX_NAMED_LOAD_BYTES", 1500)
    events = [text_event(i, size=300) for i in range(6)]
    view = agent_pb2.SessionView(history_digests=b"\0" * 32 * 6, omitted_events=6)
    view.events.append(codec.event_to_proto(text_event(6)))
    named = _caller_contexts.NamedHistory(view, can_ask=True)
    pages = [events[3:], events[:3]]
    while named.next_request() is not None:
        response = tool_pb2.ContextResponse()
        response.loaded_events.events.extend(codec.event_to_proto(e) for e in pages.pop(0))
        named.take(response)
    # The first page (the newest three, ~1 KB) spent the budget: the window is those.
    assert [e.id for e in named.events()] == [e.id for e in events[3:]]
    assert pages == []  # the second was asked for, and refused


def test_the_newest_event_always_goes_whole() -> None:
    # So the service can load the named ones as "before events[0]", whatever the session
    # gained meanwhile.
    codec.VIEW_MEMOS.clear()
    events = [text_event(i) for i in range(200, 205)]
    for memo in (None, ("a", "u", "newest")):
        first = codec.session_view_to_proto(session_of(events), digests_for="svc-n", memo=memo)
        again = codec.session_view_to_proto(session_of(events), digests_for="svc-n", memo=memo)
        assert len(first.events) == 5 or memo is not None
        assert len(codec.history_digests(again)) == 4 and ids(again) == ["e00204"]
