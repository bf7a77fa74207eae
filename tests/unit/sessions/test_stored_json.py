"""The JSON the session stores keep an event as: without its ``None`` fields, lossless."""

from __future__ import annotations

import json

from hypothesis import given, settings

from adk_mesh.sessions._common import decode_event, encode_event
from adk_mesh.types import Content, Event, EventActions, LlmResponse, Part
from tests.strategies import assert_strictly_equal, events


@settings(max_examples=500, deadline=None)
@given(events)
def test_a_stored_event_decodes_to_the_event_that_was_stored(event: Event) -> None:
    stored = encode_event(event)
    back = decode_event(stored)
    assert back == event
    assert_strictly_equal(back.model_dump(), event.model_dump())
    # A row an earlier version wrote, every field spelled out, reads the same.
    assert decode_event(event.model_dump_json()) == event


def test_none_inside_values_is_kept_and_none_fields_are_left_out() -> None:
    response = Part.from_function_response("lookup", {"found": None, "items": [None, 1]}, id="c1")
    event = Event(
        author="agent",
        llm_response=LlmResponse(content=Content(role="tool", parts=[response])),
        actions=EventActions(state_delta={"cleared": None, "nested": {"gone": None}}),
    )
    stored = encode_event(event)
    written = json.loads(stored)
    assert written["actions"]["state_delta"] == {"cleared": None, "nested": {"gone": None}}
    part = written["llm_response"]["content"]["parts"][0]
    assert part["function_response"]["response"] == {"found": None, "items": [None, 1]}
    # The fields that hold None are not written: the part has no text, data or call.
    assert set(part) == {"function_response", "thought"}
    assert "tool_progress" not in written
    assert "usage_metadata" not in written["llm_response"]
    assert decode_event(stored) == event
    assert len(stored) < 0.75 * len(event.model_dump_json())
