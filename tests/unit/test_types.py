"""The pydantic API of the core types: builders, constructors, inspectors, validation."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from adk_mesh.types import (
    Blob,
    Content,
    Event,
    EventActions,
    FileData,
    FunctionCall,
    FunctionResponse,
    GroundingMetadata,
    LlmResponse,
    Part,
)

PNG = b"\x89PNG\r\n\x1a\n"

# --- Content builders ----------------------------------------------------------------------


def test_with_builders_return_new_contents_and_leave_the_original_unchanged() -> None:
    empty = Content(role="user")
    with_text = empty.with_text("a")
    with_image = with_text.with_inline_data("image/png", PNG)
    with_file = with_image.with_file_uri("application/pdf", "gs://bucket/doc.pdf")

    assert empty.parts == []
    assert [part.kind for part in with_text.parts] == ["text"]
    assert [part.kind for part in with_image.parts] == ["text", "inline_data"]
    assert [part.kind for part in with_file.parts] == ["text", "inline_data", "file_data"]
    assert len({id(empty), id(with_text), id(with_image), id(with_file)}) == 4
    assert with_file.role == "user"
    assert with_file.parts[1] == Part(inline_data=Blob(mime_type="image/png", data=PNG))
    assert with_file.parts[2] == Part(
        file_data=FileData(mime_type="application/pdf", file_uri="gs://bucket/doc.pdf")
    )


def test_with_part_does_not_share_the_parts_list() -> None:
    original = Content.from_text("user", "a")
    extended = original.with_part(Part(text="b"))
    extended.parts.append(Part(text="c"))
    assert [part.text for part in original.parts] == ["a"]


def test_content_constructors_and_text() -> None:
    assert Content.from_text("model", "hi") == Content(role="model", parts=[Part(text="hi")])
    call = Part.from_function_call("f")
    content = Content.from_parts("model", Part(text="a"), call, Part(text="b"))
    assert content.parts == [Part(text="a"), call, Part(text="b")]
    assert content.text == "ab"
    assert content.function_calls == [FunctionCall(name="f")]
    assert content.function_responses == []


def test_content_text_leaves_out_thoughts() -> None:
    content = Content(role="model", parts=[Part(text="plan", thought=True), Part(text="answer")])
    assert content.text == "answer"
    assert Content().text == ""


# --- Part constructors and inspectors --------------------------------------------------------


def test_text_part() -> None:
    part = Part.from_text("hello")
    assert part.kind == "text"
    assert part.text == "hello"
    assert part.mime_type is None
    assert part.file_uri is None
    assert part.is_media is False
    assert part.function_call is None
    assert part.function_response is None


def test_inline_data_part() -> None:
    part = Part.from_inline_data("image/png", PNG)
    assert part.kind == "inline_data"
    assert part.inline_data == Blob(mime_type="image/png", data=PNG)
    assert part.mime_type == "image/png"
    assert part.file_uri is None
    assert part.is_media is True
    assert part.text is None
    assert part.function_call is None


def test_file_data_part() -> None:
    part = Part.from_file_data("video/mp4", "https://example.com/v.mp4")
    assert part.kind == "file_data"
    assert part.mime_type == "video/mp4"
    assert part.file_uri == "https://example.com/v.mp4"
    assert part.is_media is True
    assert part.text is None
    assert part.inline_data is None


def test_function_call_part() -> None:
    part = Part.from_function_call("search", {"q": "x"}, id="call-1")
    assert part.kind == "function_call"
    assert part.function_call == FunctionCall(name="search", args={"q": "x"}, id="call-1")
    assert part.function_response is None
    assert part.text is None
    assert part.mime_type is None
    assert part.file_uri is None
    assert part.is_media is False
    assert Part.from_function_call("f").function_call == FunctionCall(name="f", args={})


def test_function_response_part() -> None:
    part = Part.from_function_response("search", {"hits": 3})
    assert part.kind == "function_response"
    assert part.function_response == FunctionResponse(name="search", response={"hits": 3})
    assert part.function_call is None
    assert part.text is None
    assert part.mime_type is None
    assert part.is_media is False
    assert Part.from_function_response("f").function_response == FunctionResponse(name="f")


def test_thought_defaults() -> None:
    part = Part.from_text("x")
    assert part.thought is False
    assert part.thought_signature is None


def test_part_with_no_kind_is_rejected() -> None:
    with pytest.raises(ValidationError, match="holds 0"):
        Part()
    with pytest.raises(ValidationError, match="holds 0"):
        Part(thought=True, thought_signature=b"sig")


@pytest.mark.parametrize(
    "kinds",
    [
        {"text": "a", "inline_data": Blob(mime_type="image/png", data=b"")},
        {"text": "a", "function_call": FunctionCall(name="f")},
        {
            "file_data": FileData(mime_type="a/b", file_uri="u"),
            "function_response": FunctionResponse(name="f"),
        },
    ],
)
def test_part_with_two_kinds_is_rejected(kinds: dict[str, object]) -> None:
    with pytest.raises(ValidationError, match="holds 2"):
        Part(**kinds)


def test_unknown_fields_are_rejected() -> None:
    with pytest.raises(ValidationError):
        Part(text="a", colour="red")


# --- Event ---------------------------------------------------------------------------------


def test_event_new_assigns_a_uuid_and_an_aware_utc_timestamp() -> None:
    before = datetime.now(UTC)
    first = Event.new(author="user", content=Content.from_text("user", "hi"))
    second = Event.new(author="user")
    after = datetime.now(UTC)

    assert uuid.UUID(first.id).version == 4
    assert first.id != second.id
    assert first.timestamp.tzinfo is not None
    assert first.timestamp.utcoffset() == timedelta(0)
    assert before <= first.timestamp <= after


def test_event_new_fills_its_fields() -> None:
    actions = EventActions(state_delta={"k": 1})
    content = Content.from_text("model", "hi")
    event = Event.new(
        author="agent",
        invocation_id="inv",
        content=content,
        actions=actions,
        branch="root.agent",
        partial=True,
        long_running_tool_ids=["call-1"],
    )
    assert event.author == "agent"
    assert event.invocation_id == "inv"
    assert event.branch == "root.agent"
    assert event.content == content
    assert event.llm_response.content == content
    assert event.partial is True
    assert event.actions == actions
    assert event.long_running_tool_ids == ["call-1"]
    assert event.text == "hi"


def test_event_without_content() -> None:
    event = Event.new(author="user")
    assert event.content is None
    assert event.text == ""
    assert event.function_calls() == []
    assert event.function_responses() == []
    assert event.actions == EventActions()
    assert event.long_running_tool_ids == []


def test_event_function_calls_and_responses() -> None:
    content = Content.from_parts(
        "model", Part.from_function_call("a"), Part.from_function_response("b")
    )
    event = Event.new(author="agent", content=content)
    assert event.function_calls() == [FunctionCall(name="a")]
    assert event.function_responses() == [FunctionResponse(name="b")]


def _event(
    *parts: Part,
    partial: bool = False,
    skip_summarization: bool = False,
    long_running_tool_ids: list[str] | None = None,
) -> Event:
    return Event.new(
        author="agent",
        content=Content.from_parts("model", *parts),
        partial=partial,
        actions=EventActions(skip_summarization=skip_summarization),
        long_running_tool_ids=long_running_tool_ids,
    )


@pytest.mark.parametrize(
    ("event", "final"),
    [
        pytest.param(_event(Part(text="done")), True, id="plain-text"),
        pytest.param(Event.new(author="agent"), True, id="no-content"),
        pytest.param(_event(Part(text="do"), partial=True), False, id="partial"),
        pytest.param(_event(Part.from_function_call("f")), False, id="function-call"),
        pytest.param(_event(Part.from_function_response("f")), False, id="function-response"),
        pytest.param(
            _event(Part.from_function_response("f"), skip_summarization=True),
            True,
            id="skip-summarization",
        ),
        pytest.param(
            _event(Part.from_function_call("f", id="c1"), long_running_tool_ids=["c1"]),
            True,
            id="long-running-tool",
        ),
        pytest.param(
            _event(Part(text="x"), partial=True, skip_summarization=True),
            True,
            id="skip-summarization-wins-over-partial",
        ),
    ],
)
def test_is_final_response(event: Event, final: bool) -> None:
    assert event.is_final_response() is final


# --- EventActions ----------------------------------------------------------------------------


def test_event_actions_is_empty() -> None:
    assert EventActions().is_empty()
    assert not EventActions(state_delta={"a": None}).is_empty()
    assert not EventActions(artifact_delta={"f": 0}).is_empty()
    assert not EventActions(skip_summarization=True).is_empty()
    assert not EventActions(transfer_to_agent="other").is_empty()
    assert not EventActions(escalate=True).is_empty()


def test_event_actions_merge_lets_the_other_win() -> None:
    first = EventActions(
        state_delta={"a": 1, "b": 1}, artifact_delta={"f": 1}, transfer_to_agent="x"
    )
    second = EventActions(state_delta={"b": 2}, artifact_delta={"g": 1}, escalate=True)
    merged = first.merge(second)
    assert merged == EventActions(
        state_delta={"a": 1, "b": 2},
        artifact_delta={"f": 1, "g": 1},
        transfer_to_agent="x",
        escalate=True,
    )
    assert first.state_delta == {"a": 1, "b": 1}
    assert first.merge(EventActions(transfer_to_agent="y")).transfer_to_agent == "y"


def test_llm_response_defaults() -> None:
    response = LlmResponse()
    assert response.content is None
    assert response.finish_reason is None
    assert response.partial is False
    assert response.error_code is None


def test_an_event_stored_with_gemini_grounding_verbatim_is_read_into_its_shape() -> None:
    # Events stored before grounding had its own shape kept genai's camelCase dict.
    stored = {
        "id": "e1",
        "author": "researcher",
        "llm_response": {
            "content": {"role": "model", "parts": [{"text": "Paris is in France."}]},
            "grounding_metadata": {
                "groundingChunks": [{"web": {"uri": "https://example.org/p", "title": "P"}}],
                "groundingSupports": [
                    {
                        "segment": {"startIndex": 0, "endIndex": 5, "text": "Paris"},
                        "groundingChunkIndices": [0],
                    }
                ],
                "webSearchQueries": ["paris"],
            },
        },
    }
    for event in (Event.model_validate_json(json.dumps(stored)), Event.model_validate(stored)):
        grounding = event.llm_response.grounding_metadata
        assert grounding is not None
        assert grounding.queries == ["paris"]
        assert [(s.uri, s.title) for s in grounding.sources] == [("https://example.org/p", "P")]
        # Placed on the answer's text, which the validator reads as the content decoded.
        assert [(c.start_index, c.end_index, c.source_indices) for c in grounding.citations] == [
            (0, 5, [0])
        ]
    # The current shape is read as it is; a value of neither shape is refused.
    current = LlmResponse(grounding_metadata=GroundingMetadata(queries=["q"]))
    assert LlmResponse.model_validate_json(current.model_dump_json()) == current
    with pytest.raises(ValidationError):
        LlmResponse.model_validate({"grounding_metadata": "not grounding"})
