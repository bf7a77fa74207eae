"""RequestHistory builds, from the events appended since its last build, exactly the
contents request_contents builds from the whole history."""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from adk_mesh._memory import event_bytes
from adk_mesh.agents.history import RequestHistory, request_contents
from adk_mesh.types import Content, Event, EventActions, LlmResponse, Part

SESSION = ("app", "user", "s1")


def assert_weighed(history: RequestHistory) -> None:
    """The history's total is the estimated memory of the events its prefixes hold."""
    held = sum(event_bytes(event) for p in history._prefixes.values() for event in p.events)
    assert history.held_bytes == held


CALL_IDS = ["c1", "c2", "c3", "c4"]


@st.composite
def history_events(draw: st.DrawFn) -> Event:
    """Events of every kind the rules treat apart: texts, calls, responses (to calls made or
    not), long-running calls, other agents, branches, skipped summaries, partial and empty."""
    author = draw(st.sampled_from(["user", "me", "other"]))
    kind = draw(st.sampled_from(["text", "text", "call", "response", "empty", "thought"]))
    parts: list[Part]
    long_running: list[str] = []
    if kind == "text":
        parts = [Part(text=draw(st.sampled_from(["hi", "ok", " "])))]
    elif kind == "thought":
        parts = [Part(text="hmm", thought=True), Part(text="so")]
    elif kind == "call":
        ids = draw(st.lists(st.sampled_from(CALL_IDS), min_size=1, max_size=2, unique=True))
        parts = [Part.from_function_call("tool", {"n": 1}, id=call_id) for call_id in ids]
        if draw(st.booleans()) and draw(st.booleans()):
            long_running = ids[:1]
    elif kind == "response":
        ids = draw(st.lists(st.sampled_from(CALL_IDS), min_size=1, max_size=2, unique=True))
        parts = [Part.from_function_response("tool", {"r": 1}, id=call_id) for call_id in ids]
    else:
        parts = []
    role = "user" if author == "user" or kind == "response" else "model"
    return Event(
        author=author,
        invocation_id=draw(st.sampled_from(["i1", "i2"])),
        branch=draw(st.sampled_from(["", "", "", "me", "me.sub", "elsewhere"])),
        llm_response=LlmResponse(
            content=Content(role=role, parts=parts)
            if kind != "empty" or draw(st.booleans())
            else None,
            partial=draw(st.integers(0, 9)) == 0,
        ),
        actions=EventActions(skip_summarization=draw(st.integers(0, 9)) == 0),
        long_running_tool_ids=long_running,
    )


def conversation_events(turns: int) -> list[Event]:
    """A plain conversation: each turn a question, a tool call, its response, an answer."""
    events: list[Event] = []
    for turn in range(turns):
        call_id = f"call-{turn}"
        events += [
            Event(author="user", llm_response=LlmResponse(content=Content.from_text("user", "q"))),
            Event(
                author="me",
                llm_response=LlmResponse(
                    content=Content(
                        role="model", parts=[Part.from_function_call("tool", {}, id=call_id)]
                    )
                ),
            ),
            Event(
                author="me",
                llm_response=LlmResponse(
                    content=Content(
                        role="user", parts=[Part.from_function_response("tool", {}, id=call_id)]
                    )
                ),
            ),
            Event(author="me", llm_response=LlmResponse(content=Content.from_text("model", "a"))),
        ]
    return events


def check_growing(
    history: RequestHistory, events: list[Event], branch: str, steps: list[int]
) -> None:
    for end in steps:
        seen = events[:end]
        expected = request_contents(seen, agent_name="me", branch=branch)
        built = history.contents(SESSION, seen, agent_name="me", branch=branch)
        assert built == expected, (end, built, expected)
        assert_weighed(history)


@settings(max_examples=300, deadline=None)
@given(
    events=st.lists(history_events(), max_size=30),
    branch=st.sampled_from(["", "me", "me.sub"]),
    data=st.data(),
)
def test_incremental_builds_equal_whole_builds(events: list[Event], branch: str, data: Any) -> None:
    steps = sorted(data.draw(st.lists(st.integers(0, len(events)), max_size=12)))
    history = RequestHistory()
    check_growing(history, events, branch, [*steps, len(events)])
    # And every length one after another (each build extends the previous).
    history = RequestHistory()
    check_growing(history, events, branch, list(range(len(events) + 1)))


@settings(max_examples=100, deadline=None)
@given(events=st.lists(history_events(), min_size=2, max_size=20), data=st.data())
def test_another_view_of_the_session_is_built_whole(events: list[Event], data: Any) -> None:
    history = RequestHistory()
    check_growing(history, events, "", list(range(len(events) + 1)))
    # A view without some events (a delegated child's, a filtered one), then the whole again.
    dropped = data.draw(st.integers(0, len(events) - 1))
    view = events[:dropped] + events[dropped + 1 :]
    assert history.contents(SESSION, view, agent_name="me") == request_contents(
        view, agent_name="me"
    )
    check_growing(history, events, "", [len(events)])


def test_a_long_conversation_keeps_a_prefix_and_builds_only_the_turn() -> None:
    events = conversation_events(250)
    history = RequestHistory()
    check_growing(history, events, "", list(range(0, len(events) + 1, 4)))
    prefix = history._prefixes[(*SESSION, "me", "")]
    # Up to the last turn's question or later: only the last turn is built again.
    assert len(prefix.events) >= len(events) - 4


def test_a_long_running_call_answered_turns_later_joins_its_response() -> None:
    events = conversation_events(3)
    call = Event(
        author="me",
        long_running_tool_ids=["late"],
        llm_response=LlmResponse(
            content=Content(role="model", parts=[Part.from_function_call("wait", {}, id="late")])
        ),
    )
    pending = Event(
        author="me",
        llm_response=LlmResponse(
            content=Content(
                role="user",
                parts=[Part.from_function_response("wait", {"s": "pending"}, id="late")],
            )
        ),
    )
    answer = Event(
        author="user",
        llm_response=LlmResponse(
            content=Content(
                role="user", parts=[Part.from_function_response("wait", {"s": "done"}, id="late")]
            )
        ),
    )
    events += [call, pending, *conversation_events(2), answer]
    history = RequestHistory()
    check_growing(history, events, "", list(range(len(events) + 1)))
    final = history.contents(SESSION, events, agent_name="me")
    assert final[-2:] == [call.content, answer.content]


@settings(max_examples=200, deadline=None)
@given(events=st.lists(history_events(), min_size=1, max_size=30), data=st.data())
def test_copies_of_the_newest_events_are_built_as_the_originals(
    events: list[Event], data: Any
) -> None:
    """A turn holds the objects its agents made, the next one the store's copies of them."""
    history = RequestHistory()
    seen = data.draw(st.integers(1, len(events)))
    check_growing(history, events, "", [seen])
    copied_from = data.draw(st.integers(0, seen))
    later = [
        *events[:copied_from],
        *(event.model_copy(deep=True) for event in events[copied_from:]),
    ]
    check_growing(history, later, "", list(range(seen, len(later) + 1)))


def test_contents_of_the_last_turn_are_made_again_from_the_stores_copies() -> None:
    events = conversation_events(20)
    history = RequestHistory()
    check_growing(history, events, "", [len(events) - 3, len(events)])
    copies = [*events[:-4], *(event.model_copy(deep=True) for event in events[-4:])]
    later = copies + conversation_events(1)[:1]
    built = history.contents(SESSION, later, agent_name="me")
    assert built == request_contents(later, agent_name="me")
    handed_out = {id(event.content) for event in events[-4:]}
    assert not any(id(content) in handed_out for content in built)
    prefix = history._prefixes[(*SESSION, "me", "")]
    assert len(prefix.events) >= len(events) and prefix.events[-1] is later[len(prefix.events) - 1]


@settings(max_examples=300, deadline=None)
@given(events=st.lists(history_events(), min_size=1, max_size=40), data=st.data())
def test_a_window_moving_forward_is_built_as_a_whole_build(events: list[Event], data: Any) -> None:
    # A delegated run's view: a window of the session whose end grows and whose start steps
    # forward now and then; each build equals a whole build of the window.
    history = RequestHistory()
    start = 0
    for end in range(1, len(events) + 1):
        if data.draw(st.integers(0, 3)) == 0:
            start = data.draw(st.integers(start, end - 1))
        window = events[start:end]
        assert history.contents(SESSION, window, agent_name="me") == request_contents(
            window, agent_name="me"
        ), (start, end)
        assert_weighed(history)


def test_a_stepping_window_of_a_long_conversation_keeps_its_prefix() -> None:
    events = conversation_events(300)
    history = RequestHistory()
    for end in range(4, len(events) + 1, 4):
        # As a delegated view's window: the newest 1,000 at most, starting at a multiple
        # of 250 and past any answers to calls it left out.
        start = max(0, -(-(end - 1000) // 250) * 250)
        while events[start].function_responses():
            start += 1
        window = events[start:end]
        assert history.contents(SESSION, window, agent_name="me") == request_contents(
            window, agent_name="me"
        )
        prefix = history._prefixes.get((*SESSION, "me", ""))
        held = len(prefix.events) if prefix is not None else 0  # none yet after one turn
        assert held >= len(window) - 4  # only the last turn built again
        assert_weighed(history)


def test_the_sessions_kept_hold_no_more_than_the_memory_bound() -> None:
    # 40 sessions of 200 events (~1 MB each, estimated) through a history bounded to 8 MiB.
    bound = 8 * 1024 * 1024
    history = RequestHistory(max_bytes=bound)
    gc.collect()
    tracemalloc.start()
    try:
        sessions = {f"s{index}": conversation_events(50) for index in range(40)}
        for session_id, events in sessions.items():
            key = ("app", "user", session_id)
            assert history.contents(key, events, agent_name="me") == request_contents(
                events, agent_name="me"
            )
            assert history.held_bytes <= bound
        assert_weighed(history)
        assert 4 <= len(history._prefixes) < 40
        history_estimate = history.held_bytes
        # What the history keeps alive once the sessions are gone: within its bound.
        base = tracemalloc.get_traced_memory()[0]
        sessions.clear()
        gc.collect()
        freed = base - tracemalloc.get_traced_memory()[0]
        history._prefixes.clear()
        gc.collect()
        held = base - freed - tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    # Never more than estimated, and not far below (the estimate errs on the large side).
    assert history_estimate / 2 <= held <= history_estimate <= bound


def test_a_session_heavier_than_the_bound_is_built_whole_and_not_kept() -> None:
    events = conversation_events(50)
    history = RequestHistory(max_bytes=sum(event_bytes(event) for event in events) // 2)
    for end in range(4, len(events) + 1, 4):
        assert history.contents(SESSION, events[:end], agent_name="me") == request_contents(
            events[:end], agent_name="me"
        )
        assert history.held_bytes <= history._max_bytes
        assert_weighed(history)
    assert not history._prefixes
