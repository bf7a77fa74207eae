"""google-adk's JSON for adk-mesh's types, without a mesh."""

from __future__ import annotations

import pytest

from adk_mesh.errors import InvalidArgumentError
from adk_mesh.types import Content, Event, FinishReason, Part, ToolProgress
from gateway._json import content_from_json, event_from_json, event_to_json, part_to_json


def test_a_tool_progress_update_goes_in_custom_metadata() -> None:
    progress = ToolProgress(tool_name="check", message="SkyLark", fraction=0.25, data={"n": 1})
    body = event_to_json(Event.for_tool_progress(progress, author="desk", invocation_id="e-1"))
    assert body["partial"] is True
    assert body["customMetadata"] == {
        "adkMesh": {
            "toolProgress": {
                "toolName": "check",
                "message": "SkyLark",
                "fraction": 0.25,
                "data": {"n": 1},
            }
        }
    }
    assert "content" not in body


def test_tool_calls_finish_as_stop_and_false_flags_are_left_out() -> None:
    event = Event.new(author="a", content=Content.from_text("model", "x"))
    event.llm_response.finish_reason = FinishReason.TOOL_CALLS
    body = event_to_json(event)
    assert body["finishReason"] == "STOP"
    for absent in ("partial", "turnComplete", "interrupted", "branch", "longRunningToolIds"):
        assert absent not in body


def test_bytes_are_url_safe_base64_and_both_spellings_are_read() -> None:
    part = Part.from_inline_data("image/png", b"\xfb\xff\xfe")
    assert part_to_json(part) == {"inlineData": {"data": "-__-", "mimeType": "image/png"}}
    for spelled in (
        {"inlineData": {"data": "-__-", "mimeType": "image/png"}},
        {"inline_data": {"data": "+//+", "mime_type": "image/png"}},
    ):
        assert content_from_json({"parts": [spelled]}).parts == [part]


def test_parts_adk_mesh_cannot_carry_are_refused_by_name() -> None:
    with pytest.raises(InvalidArgumentError, match="codeExecutionResult"):
        content_from_json({"parts": [{"codeExecutionResult": {"output": "1"}}]})
    with pytest.raises(InvalidArgumentError, match="exactly one"):
        content_from_json({"parts": [{"text": "a", "functionCall": {"name": "f"}}]})
    with pytest.raises(InvalidArgumentError, match="base64"):
        content_from_json({"parts": [{"inlineData": {"data": "***", "mimeType": "x"}}]})


def test_an_event_reads_back_what_it_wrote() -> None:
    event = Event.new(
        author="desk",
        invocation_id="e-1",
        branch="desk.helper",
        content=Content(role="model", parts=[Part.from_function_call("f", {"a": [1]}, id="c1")]),
        long_running_tool_ids=["c1"],
    )
    event.actions.state_delta["k"] = {"deep": True}
    event.actions.artifact_delta["x.md"] = 2
    again = event_from_json(event_to_json(event))
    assert again.model_dump() == event.model_dump()
