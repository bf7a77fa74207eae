"""Anthropic specifics: headers, input_json_delta, error events, blocks and server tools."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from adk_mesh.errors import ModelError, ModelRequestError
from adk_mesh.models import BuiltinTool, GenerateContentConfig, LlmRequest
from adk_mesh.testing.fake_providers import (
    FakeAnthropic,
    RawReply,
    ScriptedToolCall,
    ScriptedTurn,
)
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
    server: FakeAnthropic, request: LlmRequest, *, stream: bool, **kwargs: Any
) -> list[LlmResponse]:
    async with server.make_model(**kwargs) as model:
        return [r async for r in model.generate_content(request, stream=stream)]


def user(text: str, **kwargs: Any) -> LlmRequest:
    return LlmRequest(contents=[Content.from_text("user", text)], **kwargs)


def event(kind: str, **data: Any) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


async def test_headers_and_default_max_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env")
    async with FakeAnthropic(ScriptedTurn(text="a"), ScriptedTurn(text="b")) as server:
        await run(server, user("hi"), stream=False, api_key=None)
        config = GenerateContentConfig(max_output_tokens=100, seed=3, top_k=5)
        await run(server, user("hi", config=config), stream=True, api_key=None)

    first, second = server.requests
    assert first.path == "/v1/messages"
    assert first.headers["x-api-key"] == "sk-ant-env"
    assert first.headers["anthropic-version"] == "2023-06-01"
    assert first.json()["max_tokens"] == 4096
    body = second.json()
    assert body["max_tokens"] == 100 and body["top_k"] == 5 and body["stream"] is True
    assert "seed" not in body


async def test_input_json_delta_is_assembled_across_many_deltas() -> None:
    args = {"query": "naïve Bayes", "filters": {"year": [2023, 2024]}, "limit": 5}
    turn = ScriptedTurn(
        text=["Searching."],
        tool_calls=[ScriptedToolCall("search", args, id="toolu_01")],
        argument_chunks=25,
        write_size=4,
    )
    async with FakeAnthropic(turn) as server:
        responses = await run(server, user("find"), stream=True)

    final = responses[-1]
    assert final.content is not None
    (call,) = final.content.function_calls
    assert (call.id, call.name, call.args) == ("toolu_01", "search", args)
    assert final.finish_reason is FinishReason.TOOL_CALLS


async def test_error_event_mid_stream_raises_model_error_with_its_type() -> None:
    records = [
        event(
            "message_start", message={"id": "m", "model": "claude", "usage": {"input_tokens": 3}}
        ),
        event("ping"),
        event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        event("content_block_delta", index=0, delta={"type": "text_delta", "text": "Hel"}),
        event("error", error={"type": "overloaded_error", "message": "Overloaded"}),
    ]
    async with FakeAnthropic(RawReply(chunks=records, content_type="text/event-stream")) as server:
        seen: list[LlmResponse] = []
        with pytest.raises(ModelError) as caught:
            async with server.make_model() as model:
                async for response in model.generate_content(user("hi"), stream=True):
                    seen.append(response)

    assert [r.content.text for r in seen if r.content] == ["Hel"]
    assert caught.value.status_code == 529
    assert "Overloaded" in caught.value.message and "overloaded_error" in caught.value.message


async def test_unknown_events_and_pings_are_ignored() -> None:
    records = [
        event(
            "message_start",
            message={
                "id": "m",
                "model": "claude",
                "usage": {"input_tokens": 3, "output_tokens": 1},
            },
        ),
        event("ping"),
        event("some_future_event", payload={"x": 1}),
        event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        event("content_block_delta", index=0, delta={"type": "text_delta", "text": "ok"}),
        event("content_block_delta", index=0, delta={"type": "future_delta", "x": 1}),
        event("content_block_stop", index=0),
        event("message_delta", delta={"stop_reason": "max_tokens"}, usage={"output_tokens": 9}),
        event("message_stop"),
    ]
    async with FakeAnthropic(RawReply(chunks=records, content_type="text/event-stream")) as server:
        responses = await run(server, user("hi"), stream=True)

    final = responses[-1]
    assert final.content is not None and final.content.text == "ok"
    assert final.finish_reason is FinishReason.MAX_TOKENS
    assert final.usage_metadata is not None
    assert (
        final.usage_metadata.prompt_token_count,
        final.usage_metadata.candidates_token_count,
    ) == (3, 9)


async def test_media_blocks_system_and_tool_results_lead_the_user_turn() -> None:
    png, pdf = b"\x89PNG", b"%PDF-1.7"
    request = LlmRequest(
        system_instruction="You are careful.",
        config=GenerateContentConfig(response_mime_type="application/json"),
        contents=[
            Content(role="user")
            .with_text("Look")
            .with_inline_data("image/png", png)
            .with_inline_data("application/pdf", pdf)
            .with_file_uri("image/jpeg", "https://example.org/a.jpg")
            .with_file_uri("application/pdf", "https://example.org/a.pdf")
            .with_inline_data("text/plain", b"notes"),
            Content.from_parts("model", Part.from_function_call("f", {"x": 1}, id="toolu_9")),
            Content.from_parts(
                "tool", Part.from_function_response("f", {"ok": True}, id="toolu_9")
            ),
            Content.from_text("user", "and now?"),
        ],
    )
    async with FakeAnthropic(ScriptedTurn(text="{}")) as server:
        await run(server, request, stream=False)

    body = server.requests[0].json()
    assert body["system"].startswith("You are careful.\n\n") and "JSON" in body["system"]
    blocks = body["messages"][0]["content"]
    assert blocks[0] == {"type": "text", "text": "Look"}
    assert blocks[1] == {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": "image/png",
            "data": base64.b64encode(png).decode(),
        },
    }
    assert blocks[2]["type"] == "document" and blocks[2]["source"]["type"] == "base64"
    assert blocks[3] == {
        "type": "image",
        "source": {"type": "url", "url": "https://example.org/a.jpg"},
    }
    assert blocks[4] == {
        "type": "document",
        "source": {"type": "url", "url": "https://example.org/a.pdf"},
    }
    assert blocks[5] == {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": "notes"},
    }
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    last = body["messages"][2]["content"]
    assert last[0] == {"type": "tool_result", "tool_use_id": "toolu_9", "content": '{"ok":true}'}
    assert last[1] == {"type": "text", "text": "and now?"}


async def test_web_search_server_tool_results_go_to_grounding_not_function_calls() -> None:
    message = {
        "id": "msg",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [
            {
                "type": "server_tool_use",
                "id": "srvtoolu_1",
                "name": "web_search",
                "input": {"query": "adk"},
            },
            {
                "type": "web_search_tool_result",
                "tool_use_id": "srvtoolu_1",
                "content": [
                    {"type": "web_search_result", "url": "https://example.org", "title": "ADK"}
                ],
            },
            {
                "type": "text",
                "text": "ADK is a toolkit.",
                "citations": [{"type": "web_search_result_location", "url": "https://example.org"}],
            },
        ],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }
    async with FakeAnthropic(RawReply(body=json.dumps(message).encode())) as server:
        (response,) = await run(
            server, user("what is adk?", builtin_tools=[BuiltinTool.WEB_SEARCH]), stream=False
        )

    assert server.requests[0].json()["tools"] == [
        {"type": "web_search_20250305", "name": "web_search"}
    ]
    assert response.content is not None and response.content.function_calls == []
    assert response.content.text == "ADK is a toolkit."
    grounding = response.grounding_metadata
    assert grounding == GroundingMetadata(
        sources=[GroundingSource(uri="https://example.org", title="ADK")],
        queries=["adk"],
        citations=[
            Citation(start_index=0, end_index=17, text="ADK is a toolkit.", source_indices=[0])
        ],
    )


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_thinking_blocks_round_trip_with_their_signature(stream: bool) -> None:
    turn = ScriptedTurn(
        thoughts=["Let me ", "think."],
        tool_calls=[ScriptedToolCall("f", {}, id="toolu_1")],
        thought_signature=b"EqQBCkYIBxgCKkA",
    )
    async with FakeAnthropic(turn, ScriptedTurn(text="done")) as server:
        first = await run(server, user("q"), stream=stream)
        content = first[-1].content
        assert content is not None
        thought = content.parts[0]
        assert thought.thought and thought.text == "Let me think."
        assert thought.thought_signature == b"EqQBCkYIBxgCKkA"
        history = LlmRequest(
            contents=[
                Content.from_text("user", "q"),
                content,
                Content.from_parts("tool", Part.from_function_response("f", {}, id="toolu_1")),
            ]
        )
        await run(server, history, stream=False)

    assistant = server.requests[1].json()["messages"][1]["content"]
    assert assistant[0] == {
        "type": "thinking",
        "thinking": "Let me think.",
        "signature": "EqQBCkYIBxgCKkA",
    }
    assert assistant[1] == {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}


async def test_video_is_refused_naming_the_part() -> None:
    request = LlmRequest(contents=[Content(role="user").with_inline_data("video/mp4", b"...")])
    async with FakeAnthropic() as server:
        # Before sending, and not as an outage to retry: the request can never be sent.
        with pytest.raises(ModelRequestError, match=r"part 0 of content 0 .*video/mp4"):
            await run(server, request, stream=False)
        assert server.requests == []
