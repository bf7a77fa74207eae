"""OpenAI specifics: compatible servers without a key, tool-call deltas per index, media parts."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from adk_mesh.errors import ModelError
from adk_mesh.models import BuiltinTool, GenerateContentConfig, LlmRequest, OpenAIModel
from adk_mesh.testing.fake_providers import FakeOpenAI, RawReply, ScriptedTurn
from adk_mesh.types import (
    Citation,
    Content,
    FinishReason,
    GroundingMetadata,
    GroundingSource,
    LlmResponse,
    Part,
)


async def run(
    server: FakeOpenAI, request: LlmRequest, *, stream: bool, **kwargs: Any
) -> list[LlmResponse]:
    async with server.make_model(**kwargs) as model:
        return [r async for r in model.generate_content(request, stream=stream)]


def user(text: str, **kwargs: Any) -> LlmRequest:
    return LlmRequest(contents=[Content.from_text("user", text)], **kwargs)


async def test_compatible_server_without_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    async with FakeOpenAI(ScriptedTurn(text=["local ", "model"])) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        async with OpenAIModel("qwen2.5-7b-instruct") as model:
            request = user("hi", config=GenerateContentConfig(max_output_tokens=32, top_k=20))
            responses = [r async for r in model.generate_content(request, stream=True)]

    assert responses[-1].content is not None and responses[-1].content.text == "local model"
    (received,) = server.requests
    assert received.path == "/v1/chat/completions"
    assert "authorization" not in received.headers
    body = received.json()
    assert body["model"] == "qwen2.5-7b-instruct"
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 32 and body["top_k"] == 20


def test_the_public_endpoint_uses_max_completion_tokens_and_no_top_k() -> None:
    model = OpenAIModel("gpt-4o-mini", api_key="sk-test")
    wire = model._build_request(
        user("hi", config=GenerateContentConfig(max_output_tokens=10, top_k=3)), stream=False
    )

    assert wire.body["max_completion_tokens"] == 10
    assert "max_tokens" not in wire.body and "top_k" not in wire.body


def chunk(delta: dict[str, Any], finish: str | None = None, model: str = "gpt-4o-mini") -> bytes:
    """One streamed ``chat.completion.chunk`` record of ``model``."""
    body = {
        "id": "chatcmpl-x",
        "object": "chat.completion.chunk",
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def call_delta(index: int, arguments: str, **first: Any) -> dict[str, Any]:
    function: dict[str, Any] = {"arguments": arguments}
    if "name" in first:
        function["name"] = first["name"]
    call: dict[str, Any] = {"index": index, "function": function}
    if "id" in first:
        call["id"] = first["id"]
        call["type"] = "function"
    return {"tool_calls": [call]}


async def test_parallel_tool_call_deltas_are_assembled_per_index() -> None:
    records = [
        chunk({"role": "assistant", "content": None}),
        chunk(call_delta(0, "", id="call_a", name="get_weather")),
        chunk(call_delta(1, "", id="call_b", name="get_time")),
        chunk(call_delta(0, '{"ci')),
        chunk(call_delta(1, '{"tz": "Europe/')),
        chunk(call_delta(0, 'ty": "Ber')),
        chunk(call_delta(1, 'Berlin"}')),
        chunk(call_delta(0, 'lin"}')),
        chunk({}, "tool_calls"),
        b'data: {"id":"chatcmpl-x","choices":[],"usage":{"prompt_tokens":9,'
        b'"completion_tokens":20,"total_tokens":29}}\n\n',
        b"data: [DONE]\n\n",
    ]
    async with FakeOpenAI(RawReply(chunks=records, content_type="text/event-stream")) as server:
        responses = await run(server, user("weather and time in Berlin"), stream=True)

    final = responses[-1]
    assert final.content is not None
    calls = [(c.id, c.name, c.args) for c in final.content.function_calls]
    assert calls == [
        ("call_a", "get_weather", {"city": "Berlin"}),
        ("call_b", "get_time", {"tz": "Europe/Berlin"}),
    ]
    assert final.finish_reason is FinishReason.TOOL_CALLS
    assert final.usage_metadata is not None and final.usage_metadata.total_token_count == 29


async def test_malformed_tool_arguments_raise_model_error_naming_the_tool() -> None:
    records = [
        chunk(call_delta(0, '{"city": ', id="c", name="get_weather")),
        chunk({}, "tool_calls"),
        b"data: [DONE]\n\n",
    ]
    async with FakeOpenAI(RawReply(chunks=records, content_type="text/event-stream")) as server:
        with pytest.raises(ModelError, match="get_weather"):
            await run(server, user("x"), stream=True)


async def test_media_parts_become_image_url_file_and_audio_parts() -> None:
    png, pdf, wav = b"\x89PNG\r\n", b"%PDF-1.7", b"RIFF....WAVE"
    content = (
        Content(role="user")
        .with_text("Compare these.")
        .with_inline_data("image/png", png)
        .with_file_uri("image/jpeg", "https://example.org/cat.jpg")
        .with_inline_data("application/pdf", pdf)
        .with_inline_data("audio/wav", wav)
        .with_inline_data("text/csv", b"a,b\n1,2")
    )
    async with FakeOpenAI(ScriptedTurn(text="ok")) as server:
        await run(server, LlmRequest(contents=[content]), stream=False)

    (message,) = server.requests[0].json()["messages"]
    parts = message["content"]
    assert parts[0] == {"type": "text", "text": "Compare these."}
    assert parts[1] == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()},
    }
    assert parts[2] == {"type": "image_url", "image_url": {"url": "https://example.org/cat.jpg"}}
    assert parts[3]["type"] == "file"
    assert (
        parts[3]["file"]["file_data"]
        == "data:application/pdf;base64," + base64.b64encode(pdf).decode()
    )
    assert parts[3]["file"]["filename"].endswith(".pdf")
    assert parts[4] == {
        "type": "input_audio",
        "input_audio": {"data": base64.b64encode(wav).decode(), "format": "wav"},
    }
    assert parts[5] == {"type": "text", "text": "a,b\n1,2"}


@pytest.mark.parametrize(
    "part",
    [
        Part.from_file_data("application/pdf", "https://example.org/doc.pdf"),
        Part.from_file_data("image/png", "gs://bucket/x.png"),
        Part.from_inline_data("application/zip", b"PK"),
    ],
    ids=["pdf-url", "gs-image", "zip"],
)
async def test_parts_chat_completions_cannot_carry_are_refused(part: Part) -> None:
    async with FakeOpenAI() as server:
        with pytest.raises(ModelError, match="part 0 of content 0"):
            await run(server, LlmRequest(contents=[Content.from_parts("user", part)]), stream=False)
    assert server.requests == []


async def test_media_in_an_assistant_turn_is_refused() -> None:
    content = Content.from_parts("model", Part.from_inline_data("image/png", b"x"))
    async with FakeOpenAI() as server:
        with pytest.raises(ModelError, match="assistant"):
            await run(server, LlmRequest(contents=[content]), stream=False)


async def test_web_search_options_and_url_citations() -> None:
    annotations = [
        {
            "type": "url_citation",
            "url_citation": {
                "url": "https://example.org",
                "title": "Ex",
                "start_index": 0,
                "end_index": 4,
            },
        }
    ]
    body = {
        "id": "chatcmpl-x",
        "object": "chat.completion",
        "model": "gpt-4o-search-preview",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "News", "annotations": annotations},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
    async with FakeOpenAI(RawReply(body=json.dumps(body).encode())) as server:
        (response,) = await run(
            server,
            user("news?", builtin_tools=[BuiltinTool.WEB_SEARCH]),
            stream=False,
            model="gpt-4o-search-preview",
        )

    assert server.requests[0].json()["web_search_options"] == {}
    assert response.grounding_metadata == GroundingMetadata(
        sources=[GroundingSource(uri="https://example.org", title="Ex")],
        citations=[Citation(start_index=0, end_index=4, text="News", source_indices=[0])],
    )


async def test_google_search_is_refused() -> None:
    async with FakeOpenAI() as server:
        with pytest.raises(ModelError, match="google_search"):
            await run(server, user("x", builtin_tools=[BuiltinTool.GOOGLE_SEARCH]), stream=False)


@pytest.mark.parametrize(
    ("finish", "expected"),
    [
        ("stop", FinishReason.STOP),
        ("length", FinishReason.MAX_TOKENS),
        ("tool_calls", FinishReason.TOOL_CALLS),
        ("safety", FinishReason.SAFETY),
    ],
)
async def test_finish_reason_mapping(finish: Any, expected: FinishReason) -> None:
    async with FakeOpenAI(ScriptedTurn(text="t", finish=finish)) as server:
        (response,) = await run(server, user("x"), stream=False)

    assert response.finish_reason is expected


async def test_response_format_and_reasoning_deltas() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    async with FakeOpenAI(ScriptedTurn(thoughts=["hmm"], text='{"n": 1}')) as server:
        responses = await run(
            server, user("n?", config=GenerateContentConfig(response_schema=schema)), stream=True
        )

    assert server.requests[0].json()["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "final_response", "schema": schema, "strict": False},
    }
    final = responses[-1]
    assert final.content is not None
    assert [(p.thought, p.text) for p in final.content.parts] == [
        (True, "hmm"),
        (False, '{"n": 1}'),
    ]


async def test_function_responses_without_ids_pair_with_their_calls() -> None:
    request = LlmRequest(
        contents=[
            Content.from_text("user", "go"),
            Content.from_parts(
                "model", Part.from_function_call("a", {}), Part.from_function_call("b", {})
            ),
            Content.from_parts(
                "tool",
                Part.from_function_response("b", {"r": 2}),
                Part.from_function_response("a", {"r": 1}),
            ),
        ]
    )
    async with FakeOpenAI(ScriptedTurn(text="ok")) as server:
        await run(server, request, stream=False)

    messages = server.requests[0].json()["messages"]
    ids = {call["function"]["name"]: call["id"] for call in messages[1]["tool_calls"]}
    assert [(m["tool_call_id"], m["content"]) for m in messages[2:]] == [
        (ids["b"], '{"r":2}'),
        (ids["a"], '{"r":1}'),
    ]
