"""Event.tool_progress: a progress update travels the codec whole and is never model text."""

from __future__ import annotations

import io

from hypothesis import given
from hypothesis import strategies as st

from adk_mesh import codec
from adk_mesh.cli import EventPrinter, format_progress
from adk_mesh.types import Content, Event, ToolProgress
from tests.strategies import json_objects, texts

progress_updates = st.builds(
    ToolProgress,
    tool_name=texts,
    function_call_id=st.none() | texts,
    message=texts,
    fraction=st.none() | st.floats(min_value=0.0, max_value=1.0),
    data=st.none() | st.just({}) | json_objects,
)


@given(progress_updates)
def test_a_progress_event_round_trips_through_the_codec(progress: ToolProgress) -> None:
    event = Event.for_tool_progress(progress, author="desk", invocation_id="e-1", branch="desk")
    decoded = codec.event_from_proto(codec.event_to_proto(event))
    assert decoded == event
    assert (
        codec.tool_progress_update_from_proto(codec.tool_progress_update_to_proto(progress))
        == progress
    )


def test_a_progress_event_is_partial_without_content_so_it_is_never_stored() -> None:
    event = Event.for_tool_progress(ToolProgress(tool_name="t", message="m"), author="desk")
    assert event.partial and event.content is None and event.text == ""
    assert not event.is_final_response()
    message = codec.event_to_proto(event)
    assert message.HasField("tool_progress") and not message.llm_response.HasField("content")
    assert not codec.event_to_proto(Event.new(author="desk")).HasField("tool_progress")


def test_the_printer_shows_progress_on_a_line_of_its_own() -> None:
    out = io.StringIO()
    printer = EventPrinter(out)
    printer.print(
        Event.new(author="desk", content=Content.from_text("model", "Look"), partial=True)
    )
    printer.print(
        Event.for_tool_progress(
            ToolProgress(tool_name="check_fares", message="checking SkyLark", fraction=0.25),
            author="desk",
        )
    )
    printer.print(
        Event.for_tool_progress(
            ToolProgress(tool_name="check_fares", message="done"), author="desk"
        )
    )
    printer.finish()
    assert out.getvalue() == (
        "[desk] Look\n[desk] check_fares … checking SkyLark (25%)\n[desk] check_fares … done\n"
    )
    assert format_progress(ToolProgress(tool_name="t", message="", fraction=1.0)) == "t … (100%)"
