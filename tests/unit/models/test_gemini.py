"""Gemini specifics: URLs and headers, grounding, thought signatures, generationConfig."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from adk_mesh.errors import ModelError
from adk_mesh.models import BuiltinTool, GeminiModel, GenerateContentConfig, LlmRequest, RetryPolicy
from adk_mesh.testing.fake_providers import FakeGemini, RawReply, ScriptedToolCall, ScriptedTurn
from adk_mesh.types import (
    Citation,
    Content,
    FinishReason,
    GroundingMetadata,
    GroundingSource,
    LlmResponse,
    Part,
    ToolDeclaration,
)

GROUNDING = {
    "webSearchQueries": ["capital of France"],
    "groundingChunks": [{"web": {"uri": "https://example.org/paris", "title": "Paris"}}],
    "groundingSupports": [
        {"segment": {"startIndex": 0, "endIndex": 5, "text": "Paris"}, "groundingChunkIndices": [0]}
    ],
}


async def run(
    server: FakeGemini, request: LlmRequest, *, stream: bool, **kwargs: Any
) -> list[LlmResponse]:
    async with server.make_model(**kwargs) as model:
        return [r async for r in model.generate_content(request, stream=stream)]


def user(text: str) -> LlmRequest:
    return LlmRequest(contents=[Content.from_text("user", text)])


async def test_endpoints_key_header_and_no_key_in_the_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", "gemini-env-key")
    async with FakeGemini(ScriptedTurn(text="a"), ScriptedTurn(text="b")) as server:
        await run(server, user("hi"), stream=False, api_key=None)
        await run(server, user("hi"), stream=True, api_key=None)

    plain, streamed = server.requests
    assert plain.path == "/v1beta/models/gemini-2.5-flash:generateContent" and plain.query == {}
    assert streamed.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    assert streamed.query == {"alt": "sse"}
    assert plain.headers["x-goog-api-key"] == "gemini-env-key"
    assert all("key" not in r.query for r in server.requests)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_google_search_is_declared_and_grounding_metadata_kept(stream: bool) -> None:
    async with FakeGemini(ScriptedTurn(text=["Par", "is"], grounding=GROUNDING)) as server:
        request = LlmRequest(
            contents=[Content.from_text("user", "Capital of France?")],
            builtin_tools=[BuiltinTool.GOOGLE_SEARCH],
        )
        responses = await run(server, request, stream=stream)

    assert server.requests[0].json()["tools"] == [{"google_search": {}}]
    assert responses[-1].grounding_metadata == GroundingMetadata(
        sources=[GroundingSource(uri="https://example.org/paris", title="Paris")],
        queries=["capital of France"],
        citations=[Citation(start_index=0, end_index=5, text="Paris", source_indices=[0])],
    )
    assert responses[-1].content is not None and responses[-1].content.text == "Paris"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_thought_signature_round_trips_byte_for_byte(stream: bool) -> None:
    signature = b"\x00\x01opaque\xfe\xff-signature"
    turn = ScriptedTurn(
        thoughts=["Need the ", "weather."],
        tool_calls=[ScriptedToolCall("get_weather", {"city": "Oslo"}, id="fc-1")],
        thought_signature=signature,
    )
    async with FakeGemini(turn, ScriptedTurn(text="Cold.")) as server:
        first = await run(server, user("Weather in Oslo?"), stream=stream)
        final = first[-1]
        assert final.content is not None
        thought, call = final.content.parts
        assert thought.thought and thought.text == "Need the weather."
        assert call.function_call is not None and call.function_call.id == "fc-1"
        assert call.thought_signature == signature
        if stream:
            assert [r.content.parts[0].thought for r in first[:-1] if r.content] == [True, True]

        history = LlmRequest(
            contents=[
                Content.from_text("user", "Weather in Oslo?"),
                final.content,
                Content.from_parts(
                    "tool", Part.from_function_response("get_weather", {"c": -3}, id="fc-1")
                ),
            ]
        )
        await run(server, history, stream=stream)

    sent = server.requests[1].json()["contents"][1]
    assert sent["role"] == "model"
    assert sent["parts"][0] == {"text": "Need the weather.", "thought": True}
    assert sent["parts"][1]["functionCall"] == {
        "name": "get_weather",
        "args": {"city": "Oslo"},
        "id": "fc-1",
    }
    assert base64.b64decode(sent["parts"][1]["thoughtSignature"]) == signature


async def test_request_mapping_of_system_tools_config_and_media() -> None:
    tool = ToolDeclaration(
        name="lookup",
        description="Look up.",
        parameters_schema={"type": "object", "properties": {"q": {"type": "string"}}},
        response_schema={"type": "object"},
    )
    request = LlmRequest(
        system_instruction="Be terse.",
        tools=[tool],
        config=GenerateContentConfig(
            temperature=0.2,
            max_output_tokens=64,
            top_p=0.9,
            top_k=40,
            stop_sequences=["END"],
            seed=7,
            response_schema={"type": "object", "properties": {"a": {"type": "integer"}}},
        ),
        contents=[
            Content(role="user")
            .with_text("Describe:")
            .with_inline_data("image/png", b"\x89PNG")
            .with_file_uri("application/pdf", "gs://bucket/doc.pdf"),
        ],
    )
    async with FakeGemini(ScriptedTurn(text="{}")) as server:
        await run(server, request, stream=False)

    body = server.requests[0].json()
    assert body["systemInstruction"] == {"parts": [{"text": "Be terse."}]}
    assert body["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "lookup",
                    "description": "Look up.",
                    "parametersJsonSchema": tool.parameters_schema,
                    "responseJsonSchema": {"type": "object"},
                }
            ]
        }
    ]
    assert body["generationConfig"] == {
        "temperature": 0.2,
        "maxOutputTokens": 64,
        "topP": 0.9,
        "topK": 40,
        "stopSequences": ["END"],
        "seed": 7,
        "responseMimeType": "application/json",
        "responseJsonSchema": {"type": "object", "properties": {"a": {"type": "integer"}}},
    }
    assert body["contents"][0]["parts"] == [
        {"text": "Describe:"},
        {"inlineData": {"mimeType": "image/png", "data": base64.b64encode(b"\x89PNG").decode()}},
        {"fileData": {"mimeType": "application/pdf", "fileUri": "gs://bucket/doc.pdf"}},
    ]


async def test_openapi_dialect_uses_parameters_and_response_schema() -> None:
    request = LlmRequest(
        contents=[Content.from_text("user", "x")],
        tools=[ToolDeclaration(name="t", parameters_schema={"type": "object"})],
        config=GenerateContentConfig(response_schema={"type": "string"}),
    )
    async with FakeGemini(ScriptedTurn(text="{}")) as server:
        await run(server, request, stream=False, schema_dialect="openapi")

    body = server.requests[0].json()
    assert body["tools"][0]["functionDeclarations"][0]["parameters"] == {"type": "object"}
    assert body["generationConfig"]["responseSchema"] == {"type": "string"}


async def test_parallel_function_responses_are_merged_into_one_turn() -> None:
    request = LlmRequest(
        contents=[
            Content.from_text("user", "both"),
            Content.from_parts(
                "model",
                Part.from_function_call("a", {}, id="1"),
                Part.from_function_call("b", {}, id="2"),
            ),
            Content.from_parts("tool", Part.from_function_response("a", {"r": 1}, id="1")),
            Content.from_parts("tool", Part.from_function_response("b", {"r": 2}, id="2")),
        ]
    )
    async with FakeGemini(ScriptedTurn(text="done")) as server:
        await run(server, request, stream=False)

    contents = server.requests[0].json()["contents"]
    assert [c["role"] for c in contents] == ["user", "model", "user"]
    assert [p["functionResponse"]["name"] for p in contents[2]["parts"]] == ["a", "b"]


@pytest.mark.parametrize(
    ("finish", "expected"),
    [("length", FinishReason.MAX_TOKENS), ("safety", FinishReason.SAFETY)],
)
async def test_finish_reason_mapping(finish: Any, expected: FinishReason) -> None:
    async with FakeGemini(ScriptedTurn(text="cut", finish=finish)) as server:
        (response,) = await run(server, user("x"), stream=False)

    assert response.finish_reason is expected


async def test_blocked_prompt_yields_an_error_response_not_an_exception() -> None:
    blocked = RawReply(
        body=b'{"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": '
        b'{"promptTokenCount": 4, "totalTokenCount": 4}}'
    )
    async with FakeGemini(blocked) as server:
        (response,) = await run(server, user("bad"), stream=False)

    assert response.turn_complete and response.content is None
    assert response.error_code == "SAFETY" and response.finish_reason is FinishReason.SAFETY


async def test_local_file_uri_is_refused_before_any_request(retry: RetryPolicy) -> None:
    request = LlmRequest(
        contents=[Content(role="user").with_file_uri("text/plain", "/etc/hostname")]
    )
    async with FakeGemini() as server:
        with pytest.raises(ModelError, match="part 0 of content 0"):
            await run(server, request, stream=False, retry=retry)

    assert server.requests == []


def test_model_repr_shows_no_key() -> None:
    model = GeminiModel("models/gemini-2.5-pro", api_key="AIza-secret")

    assert model.name == "gemini-2.5-pro"
    assert "AIza-secret" not in repr(model)
