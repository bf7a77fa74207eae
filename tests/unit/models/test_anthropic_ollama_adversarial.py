"""Adversarial checks of the Anthropic and Ollama adapters against their fake servers: what the
real APIs refuse in a history, usage counts spread over stream events, tool calls cut by the
output token limit, and streams cut at odd byte boundaries."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from adk_mesh.errors import ModelError
from adk_mesh.models import LlmRequest
from adk_mesh.models.openai_responses import reasoning_signature
from adk_mesh.testing.fake_providers import (
    FakeAnthropic,
    FakeOllama,
    RawReply,
    ScriptedToolCall,
    ScriptedTurn,
)
from adk_mesh.types import Content, FinishReason, LlmResponse, Part


async def run(
    server: FakeAnthropic | FakeOllama, request: LlmRequest, *, stream: bool
) -> list[LlmResponse]:
    async with server.make_model() as model:
        return [r async for r in model.generate_content(request, stream=stream)]


def user(text: str) -> LlmRequest:
    return LlmRequest(contents=[Content.from_text("user", text)])


def event(kind: str, **data: Any) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def sse(records: list[bytes], write_size: int | None = None) -> RawReply:
    """``records`` as one SSE body, in writes of ``write_size`` bytes (cutting anywhere)."""
    body = b"".join(records)
    chunks = (
        [body]
        if write_size is None
        else [body[i : i + write_size] for i in range(0, len(body), write_size)]
    )
    return RawReply(chunks=chunks, content_type="text/event-stream")


def message_start(**usage: Any) -> bytes:
    return event("message_start", message={"id": "m", "model": "claude", "usage": usage})


# --------------------------------------------------------------------------- Anthropic: requests


async def test_whitespace_only_text_is_left_out_of_both_roles() -> None:
    """The API refuses a whitespace-only text block anywhere in the history (a model often
    writes "\\n\\n" before a tool call; a voice client can send a blank message)."""
    request = LlmRequest(
        contents=[
            Content.from_text("user", "weather?"),
            Content.from_parts(
                "model",
                Part.from_text("\n\n"),
                Part.from_function_call("get_weather", {"city": "Lima"}, id="toolu_1"),
            ),
            Content.from_parts(
                "tool", Part.from_function_response("get_weather", {"t": 21}, id="toolu_1")
            ),
            Content.from_parts("user", Part.from_text("  "), Part.from_text("thanks")),
        ]
    )
    async with FakeAnthropic(ScriptedTurn(text="ok")) as server:
        (response,) = await run(server, request, stream=False)

    assert response.content is not None and response.content.text == "ok"
    messages = server.requests[0].json()["messages"]
    assert messages[1]["content"] == [
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Lima"}}
    ]
    assert messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": '{"t":21}'},
        {"type": "text", "text": "thanks"},
    ]


async def test_another_providers_signed_thought_is_not_sent_as_a_thinking_block() -> None:
    """A session first served by an OpenAI Responses model holds thoughts signed by that
    adapter (ASCII, but not a signature Claude issued): sent as a ``thinking`` block, the
    API refuses the whole request ("Invalid `signature` in `thinking` block")."""
    signature = reasoning_signature({"id": "rs_1", "encrypted_content": "gAAAAB..."})
    assert signature is not None
    request = LlmRequest(
        contents=[
            Content.from_text("user", "weather?"),
            Content.from_parts(
                "model",
                Part(text="Look it up.", thought=True, thought_signature=signature),
                Part.from_function_call("get_weather", {}, id="call_1"),
            ),
            Content.from_parts(
                "tool", Part.from_function_response("get_weather", {"t": 21}, id="call_1")
            ),
        ]
    )
    async with FakeAnthropic(ScriptedTurn(text="21")) as server:
        await run(server, request, stream=False)

    assert server.requests[0].json()["messages"][1]["content"] == [
        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {}}
    ]


@pytest.mark.parametrize(
    ("messages", "refused"),
    [
        ([{"role": "user", "content": [{"type": "text", "text": " \n"}]}], "non-whitespace"),
        ([{"role": "user", "content": [{"type": "text", "text": ""}]}], "non-empty"),
        (
            [{"role": "user", "content": []}, {"role": "user", "content": "hi"}],
            "messages.0: all messages must have non-empty content",
        ),
        (
            [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "x", "signature": "not:base64{}"},
                        {"type": "text", "text": "a"},
                    ],
                },
                {"role": "user", "content": "more"},
            ],
            "messages.1.content.0: Invalid `signature`",
        ),
        (
            [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "first"},
                        {"type": "tool_result", "tool_use_id": "t1", "content": "{}"},
                    ],
                },
            ],
            "messages.1: `tool_use` ids were found without `tool_result` blocks",
        ),
    ],
    ids=["whitespace-text", "empty-text", "empty-content", "foreign-signature", "result-not-first"],
)
async def test_the_fake_refuses_what_the_messages_api_refuses(
    messages: list[dict[str, Any]], refused: str
) -> None:
    body = {"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": messages}
    async with FakeAnthropic(ScriptedTurn(text="never")) as server, httpx.AsyncClient() as client:
        reply = await client.post(f"{server.url}/v1/messages", json=body)

    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error" and refused in error["message"]


async def test_the_fake_takes_consecutive_turns_of_one_role_as_the_api_does() -> None:
    """The Messages API joins consecutive same-role messages: no refusal."""
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
    }
    async with FakeAnthropic(ScriptedTurn(text="ok")) as server, httpx.AsyncClient() as client:
        reply = await client.post(f"{server.url}/v1/messages", json=body)

    assert reply.status_code == 200 and not server.refused


# --------------------------------------------------------------------------- Anthropic: responses


async def test_cached_prompt_tokens_stay_counted_when_message_delta_repeats_input_tokens() -> None:
    """``message_delta`` usage is cumulative and may carry ``input_tokens`` with the cache
    fields null: the prompt still counts the tokens read from and written to the cache."""
    records = [
        message_start(
            input_tokens=3,
            cache_creation_input_tokens=100,
            cache_read_input_tokens=50,
            output_tokens=1,
        ),
        event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        event("content_block_delta", index=0, delta={"type": "text_delta", "text": "ok"}),
        event("content_block_stop", index=0),
        event(
            "message_delta",
            delta={"stop_reason": "end_turn"},
            usage={
                "input_tokens": 3,
                "cache_creation_input_tokens": None,
                "cache_read_input_tokens": None,
                "output_tokens": 9,
            },
        ),
        event("message_stop"),
    ]
    async with FakeAnthropic(sse(records)) as server:
        final = (await run(server, user("hi"), stream=True))[-1]

    usage = final.usage_metadata
    assert usage is not None
    assert (usage.prompt_token_count, usage.cached_content_token_count) == (153, 50)
    assert (usage.candidates_token_count, usage.total_token_count) == (9, 162)


def _cut_message(tool_input: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "msg",
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "t1", "name": "get_weather", "input": tool_input},
        ],
        "stop_reason": "max_tokens",
        "usage": {"input_tokens": 5, "output_tokens": 8},
    }


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_a_tool_call_ended_by_max_tokens_is_never_run(stream: bool) -> None:
    """Under ``max_tokens`` the last ``tool_use`` block is the one being written: a plain
    response carries whatever of its input parsed (here ``{}``), a stream may have sent no
    ``input_json_delta`` yet. Either way it is the same error as a stream's broken JSON, not a
    call of ``get_weather`` with arguments the model never wrote."""
    if stream:
        reply = sse(
            [
                message_start(input_tokens=5),
                event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
                event(
                    "content_block_delta",
                    index=0,
                    delta={"type": "text_delta", "text": "Checking."},
                ),
                event("content_block_stop", index=0),
                event(
                    "content_block_start",
                    index=1,
                    content_block={
                        "type": "tool_use",
                        "id": "t1",
                        "name": "get_weather",
                        "input": {},
                    },
                ),
                event("content_block_stop", index=1),
                event(
                    "message_delta", delta={"stop_reason": "max_tokens"}, usage={"output_tokens": 8}
                ),
                event("message_stop"),
            ]
        )
    else:
        reply = RawReply(body=json.dumps(_cut_message({})).encode())
    async with FakeAnthropic(reply) as server:
        with pytest.raises(ModelError, match=r"'get_weather' was cut at the output token limit"):
            await run(server, user("weather?"), stream=stream)


async def test_an_empty_tool_input_with_no_deltas_is_a_call_without_arguments() -> None:
    records = [
        message_start(input_tokens=5),
        event(
            "content_block_start",
            index=0,
            content_block={"type": "tool_use", "id": "t1", "name": "now", "input": {}},
        ),
        event("content_block_stop", index=0),
        event("message_delta", delta={"stop_reason": "tool_use"}, usage={"output_tokens": 8}),
        event("message_stop"),
    ]
    async with FakeAnthropic(sse(records)) as server:
        final = (await run(server, user("time?"), stream=True))[-1]

    assert final.content is not None
    (call,) = final.content.function_calls
    assert (call.name, call.args, call.id) == ("now", {}, "t1")
    assert final.finish_reason is FinishReason.TOOL_CALLS


async def test_tool_calls_interleaved_with_text_survive_writes_cut_inside_characters() -> None:
    """Two tool calls between text blocks, non-ASCII arguments split across deltas, the body
    written three bytes at a time (cutting UTF-8 characters and SSE lines)."""
    records = [
        message_start(input_tokens=5),
        event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        event("content_block_delta", index=0, delta={"type": "text_delta", "text": "Für "}),
        event("content_block_stop", index=0),
        event(
            "content_block_start",
            index=1,
            content_block={"type": "tool_use", "id": "t1", "name": "find", "input": {}},
        ),
        event(
            "content_block_delta", index=1, delta={"type": "input_json_delta", "partial_json": ""}
        ),
        event(
            "content_block_delta",
            index=1,
            delta={"type": "input_json_delta", "partial_json": '{"q": "na'},
        ),
        event(
            "content_block_delta",
            index=1,
            delta={"type": "input_json_delta", "partial_json": 'ïve 🐍"}'},
        ),
        event("content_block_stop", index=1),
        event("content_block_start", index=2, content_block={"type": "text", "text": "und "}),
        event("content_block_stop", index=2),
        event(
            "content_block_start",
            index=3,
            content_block={"type": "tool_use", "id": "t2", "name": "find", "input": {}},
        ),
        event(
            "content_block_delta",
            index=3,
            delta={"type": "input_json_delta", "partial_json": '{"q":"日本"}'},
        ),
        event("content_block_stop", index=3),
        event("message_delta", delta={"stop_reason": "tool_use"}, usage={"output_tokens": 20}),
        event("message_stop"),
    ]
    async with FakeAnthropic(sse(records, write_size=3)) as server:
        *partials, final = await run(server, user("find"), stream=True)

    assert "".join(r.content.text for r in partials if r.content) == "Für und "
    assert final.content is not None
    assert [(c.id, c.args) for c in final.content.function_calls] == [
        ("t1", {"q": "naïve 🐍"}),
        ("t2", {"q": "日本"}),
    ]


# --------------------------------------------------------------------------- Ollama


async def test_ollama_tool_calls_in_the_done_line_and_thinking_beside_text() -> None:
    lines = [
        {"model": "m", "message": {"role": "assistant", "content": "", "thinking": "Hm."}},
        {"model": "m", "message": {"role": "assistant", "content": "Çа", "thinking": " ok"}},
        {
            "model": "m",
            "message": {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"function": {"name": "f", "arguments": {"x": "ü"}}}],
            },
            "done": True,
            "done_reason": "stop",
            "prompt_eval_count": 4,
            "eval_count": 6,
        },
    ]
    body = b"".join(json.dumps(line, ensure_ascii=False).encode() + b"\n" for line in lines)
    chunks = [body[i : i + 5] for i in range(0, len(body), 5)]
    reply = RawReply(chunks=chunks, content_type="application/x-ndjson")
    async with FakeOllama(reply) as server:
        final = (await run(server, user("go"), stream=True))[-1]

    assert final.content is not None
    thought, text, call = final.content.parts
    assert (thought.thought, thought.text, text.text) == (True, "Hm. ok", "Çа")
    assert call.function_call is not None and call.function_call.args == {"x": "ü"}
    assert final.usage_metadata is not None and final.usage_metadata.total_token_count == 10


async def test_ollama_error_line_after_text_is_a_model_error_with_its_message() -> None:
    turn = ScriptedTurn(
        text=["par", "tial"], tool_calls=[ScriptedToolCall("f")], stream_error="model crashed"
    )
    async with FakeOllama(turn) as server:
        with pytest.raises(ModelError, match="ollama error: model crashed"):
            await run(server, user("go"), stream=True)
