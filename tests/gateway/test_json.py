"""google-adk's JSON for adk-mesh's types, without a mesh."""

from __future__ import annotations

import pytest

from adk_mesh.errors import InvalidArgumentError
from adk_mesh.types import (
    Citation,
    CodeExecution,
    CodeExecutionOutcome,
    Content,
    Event,
    FinishReason,
    GroundingMetadata,
    GroundingSource,
    Part,
    ToolProgress,
)
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


GROUNDED = Content(role="model", parts=[Part(text="Ørsta grew. Oslo has 717,710 people.")])


def grounded_event() -> Event:
    event = Event.new(author="desk", invocation_id="e-1", content=GROUNDED)
    event.llm_response.grounding_metadata = GroundingMetadata(
        sources=[
            GroundingSource(uri="https://ssb.example/oslo", title="SSB"),
            GroundingSource(uri="https://kommune.example/orsta"),
        ],
        queries=["population of Oslo"],
        citations=[
            Citation(
                start_index=12, end_index=35, text="Oslo has 717,710 people", source_indices=[0]
            ),
            Citation(start_index=0, end_index=11, text="Ørsta grew.", source_indices=[1, 0]),
        ],
        code_executions=[
            CodeExecution(
                code="print(1)", language="python", outcome=CodeExecutionOutcome.OK, output="1\n"
            )
        ],
        search_suggestions_html="<div>suggestions</div>",
    )
    return event


def test_grounding_is_written_in_google_adks_shape_whichever_provider_answered() -> None:
    body = event_to_json(grounded_event())
    assert body["groundingMetadata"] == {
        "groundingChunks": [
            {"web": {"uri": "https://ssb.example/oslo", "title": "SSB"}},
            {"web": {"uri": "https://kommune.example/orsta"}},
        ],
        "groundingSupports": [
            # UTF-8 byte offsets, as Gemini's: "Ø" is two bytes.
            {
                "segment": {"startIndex": 13, "endIndex": 36, "text": "Oslo has 717,710 people"},
                "groundingChunkIndices": [0],
            },
            {
                "segment": {"startIndex": 0, "endIndex": 12, "text": "Ørsta grew."},
                "groundingChunkIndices": [1, 0],
            },
        ],
        "webSearchQueries": ["population of Oslo"],
        "searchEntryPoint": {"renderedContent": "<div>suggestions</div>"},
    }
    assert body["customMetadata"] == {
        "adkMesh": {
            "codeExecutions": [
                {"code": "print(1)", "output": "1\n", "language": "python", "outcome": "OK"}
            ]
        }
    }


def test_grounding_reads_back_from_the_gateways_json() -> None:
    event = grounded_event()
    again = event_from_json(event_to_json(event))
    assert again.grounding_metadata == event.grounding_metadata


def test_gemini_grounding_as_google_adk_clients_send_it_is_read() -> None:
    body = {
        "author": "desk",
        "content": {"role": "model", "parts": [{"text": "Ørsta grew."}]},
        "grounding_metadata": {
            "grounding_chunks": [{"web": {"uri": "https://kommune.example/orsta"}}],
            "grounding_supports": [
                {"segment": {"start_index": 0, "end_index": 12}, "grounding_chunk_indices": [0]}
            ],
            "retrieval_metadata": {},
        },
    }
    grounding = event_from_json(body).grounding_metadata
    assert grounding == GroundingMetadata(
        sources=[GroundingSource(uri="https://kommune.example/orsta")],
        citations=[Citation(start_index=0, end_index=11, text="Ørsta grew.", source_indices=[0])],
    )


def test_bad_grounding_json_is_refused_with_where_it_is() -> None:
    with pytest.raises(InvalidArgumentError, match=r"event\.groundingMetadata must be"):
        event_from_json({"author": "a", "groundingMetadata": ["x"]})
    bad = {"author": "a", "customMetadata": {"adkMesh": {"codeExecutions": [{"outcome": "??"}]}}}
    with pytest.raises(InvalidArgumentError, match="codeExecutions"):
        event_from_json(bad)
