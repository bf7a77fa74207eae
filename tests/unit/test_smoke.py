from __future__ import annotations

from adk_mesh import Content, Event, codec


def test_event_new_has_id_and_content() -> None:
    event = Event.new(author="user", content=Content(role="user").with_text("hi"))
    assert event.id and event.content is not None and event.text == "hi"
    assert codec.event_from_proto(codec.event_to_proto(event)) == event
