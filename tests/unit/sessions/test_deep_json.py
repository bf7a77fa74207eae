"""Session stores keep and give back JSON of any depth the mesh carries (100, 200, 240 levels).

The stores write events as their pydantic JSON, whose parser stops at 200 levels:
``Event.model_validate_json`` reads deeper documents with the standard library instead.
"""

from __future__ import annotations

from typing import Any

import pytest

from adk_mesh import codec
from adk_mesh.sessions import SessionService
from adk_mesh.types import (
    Blob,
    Content,
    Event,
    EventActions,
    FunctionCall,
    FunctionResponse,
    LlmResponse,
    Part,
    ToolProgress,
)

DEPTHS = [100, 200, codec.MAX_JSON_DEPTH]


def nested(depth: int) -> dict[str, Any]:
    """A JSON object ``depth`` levels deep (the top object is level 1)."""
    value: Any = {"leaf": "x", "n": 2**60, "f": 0.1, "t": True, "none": None}
    for level in range(depth - 1, 0, -1):
        value = {"k": value} if level % 2 else [value, level]
    assert isinstance(value, dict)
    return value


def deep_event(depth: int) -> Event:
    value = nested(depth)
    return Event.new(
        author="agent",
        invocation_id="inv-1",
        content=Content(
            role="model",
            parts=[
                Part(function_call=FunctionCall(id="c1", name="dig", args=value)),
                Part(function_response=FunctionResponse(id="c1", name="dig", response=value)),
                Part(inline_data=Blob(mime_type="application/octet-stream", data=b"\x00\xff")),
            ],
        ),
        actions=EventActions(state_delta={"deep": value, "flat": 1}),
    )


@pytest.mark.parametrize("depth", [1, 60, 63, 64, 65, *DEPTHS])
def test_an_event_with_deep_json_reads_back_from_its_json(depth: int) -> None:
    event = deep_event(depth).model_copy(
        update={
            "llm_response": LlmResponse(content=deep_event(depth).content),
            "tool_progress": ToolProgress(tool_name="dig", data=nested(depth)),
        }
    )
    assert Event.model_validate_json(event.model_dump_json()) == event
    assert Event.model_validate_json(event.model_dump_json().encode()) == event


def test_json_that_is_not_an_event_is_still_refused() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        Event.model_validate_json('{"author": 3}')
    with pytest.raises(ValidationError):
        Event.model_validate_json("{not json")


@pytest.fixture
def service(session_store: SessionService) -> SessionService:
    """Each session backend (the shared ``session_store`` fixture)."""
    return session_store


@pytest.mark.parametrize("depth", DEPTHS)
async def test_a_store_keeps_deep_json_in_events_and_state(
    service: SessionService, depth: int
) -> None:
    session = await service.create_session(app_name="app", user_id="u1")
    event = deep_event(depth)
    await service.append_event(session, event)
    stored = await service.get_session(app_name="app", user_id="u1", session_id=session.id)
    assert stored is not None
    assert stored.events == [event]
    assert stored.state == {"deep": nested(depth), "flat": 1}
