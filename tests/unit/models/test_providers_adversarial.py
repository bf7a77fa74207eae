"""Provider streams in legitimate shapes the other provider tests do not send: tool-call deltas
without an ``index`` (Gemini's OpenAI-compatible endpoint), reasoning summaries in several
parts, a tool call cut by the token limit."""

from __future__ import annotations

import json
from typing import Any

import pytest

from adk_mesh.errors import ModelError
from adk_mesh.models import LlmRequest
from adk_mesh.testing.fake_providers import (
    FakeAnthropic,
    FakeOpenAI,
    FakeProviderServer,
    RawReply,
)
from adk_mesh.testing.fake_responses import FakeOpenAIResponses
from adk_mesh.types import Content, FinishReason, LlmResponse
from tests.unit.models.test_openai import chunk


async def stream(server_type: type[FakeProviderServer], records: list[bytes]) -> list[LlmResponse]:
    reply = RawReply(chunks=records, content_type="text/event-stream")
    async with server_type(reply) as server, server.make_model() as model:
        request = LlmRequest(contents=[Content.from_text("user", "hi")])
        return [r async for r in model.generate_content(request, stream=True)]


def chat_chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    """A chunk record of Gemini's OpenAI-compatible endpoint."""
    return chunk(delta, finish, model="gemini-2.5-flash")


def event(kind: str, **data: Any) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


# --------------------------------------------------------------------------- OpenAI


async def test_tool_calls_without_an_index_each_in_its_own_chunk_stay_apart() -> None:
    """Gemini's OpenAI-compatible endpoint streams each call whole, with its id, without
    ``index``: two calls must not be glued into one (``{..}{..}`` is not JSON)."""
    records = [
        chat_chunk(
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "function-call-1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Lima"}'},
                    }
                ],
            }
        ),
        chat_chunk(
            {
                "tool_calls": [
                    {
                        "id": "function-call-2",
                        "type": "function",
                        "function": {"name": "get_time", "arguments": '{"tz":"America/Lima"}'},
                    }
                ]
            }
        ),
        # That endpoint says "stop", not "tool_calls", when it streams calls.
        chat_chunk({}, "stop"),
        b"data: [DONE]\n\n",
    ]

    responses = await stream(FakeOpenAI, records)

    final = responses[-1]
    assert final.content is not None
    calls = [(c.id, c.name, c.args) for c in final.content.function_calls]
    assert calls == [
        ("function-call-1", "get_weather", {"city": "Lima"}),
        ("function-call-2", "get_time", {"tz": "America/Lima"}),
    ]


async def test_an_indexless_call_whose_id_comes_later_stays_one_call() -> None:
    records = [
        chat_chunk({"tool_calls": [{"function": {"name": "get_weather", "arguments": '{"ci'}}]}),
        chat_chunk({"tool_calls": [{"id": "call_1", "function": {"arguments": 'ty":"Lima"}'}}]}),
        chat_chunk({"tool_calls": [{"id": "call_1", "function": {"arguments": ""}}]}),
        chat_chunk({}, "tool_calls"),
        b"data: [DONE]\n\n",
    ]

    responses = await stream(FakeOpenAI, records)

    final = responses[-1]
    assert final.content is not None
    calls = [(c.id, c.name, c.args) for c in final.content.function_calls]
    assert calls == [("call_1", "get_weather", {"city": "Lima"})]
    assert final.finish_reason is FinishReason.TOOL_CALLS


# --------------------------------------------------------------------------- Responses API


async def test_reasoning_summary_parts_stream_as_the_final_thought_reads() -> None:
    """A reasoning item's summary comes in several parts; the final thought joins them with a
    blank line, so the partial thoughts put together must read the same."""
    summary = [
        {"type": "summary_text", "text": "**Planning**\n\nLook it up."},
        {"type": "summary_text", "text": "**Answering**\n\nSay it."},
    ]
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": summary}
    message = {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Done.", "annotations": []}],
    }
    response = {"id": "resp_1", "model": "o4-mini", "status": "completed"}
    where = {"output_index": 0, "item_id": "rs_1"}
    records = [
        event("response.created", response={**response, "status": "in_progress", "output": []}),
        event("response.output_item.added", output_index=0, item={**reasoning, "summary": []}),
    ]
    for number, part in enumerate(summary):
        text = part["text"]
        records += [
            event("response.reasoning_summary_part.added", **where, summary_index=number),
            event(
                "response.reasoning_summary_text.delta",
                **where,
                summary_index=number,
                delta=text[:5],
            ),
            event(
                "response.reasoning_summary_text.delta",
                **where,
                summary_index=number,
                delta=text[5:],
            ),
            event("response.reasoning_summary_text.done", **where, summary_index=number, text=text),
        ]
    records += [
        event("response.output_item.done", output_index=0, item=reasoning),
        event("response.output_item.added", output_index=1, item={**message, "content": []}),
        event("response.output_text.delta", output_index=1, item_id="msg_1", delta="Done."),
        event("response.output_item.done", output_index=1, item=message),
        event("response.completed", response={**response, "output": [reasoning, message]}),
    ]

    responses = await stream(FakeOpenAIResponses, records)

    *partials, final = responses
    streamed = "".join(
        part.text or ""
        for r in partials
        if r.content is not None
        for part in r.content.parts
        if part.thought
    )
    assert final.content is not None
    (thought,) = [part for part in final.content.parts if part.thought]
    assert thought.text == "**Planning**\n\nLook it up.\n\n**Answering**\n\nSay it."
    assert streamed == thought.text
    assert final.content.text == "Done."


# --------------------------------------------------------------------------- Anthropic


async def test_a_tool_call_cut_by_the_token_limit_is_a_model_error_naming_the_tool() -> None:
    """``max_tokens`` can end a ``tool_use`` block inside its JSON: that is no call to run."""
    records = [
        event("message_start", message={"id": "m", "model": "claude", "usage": {}}),
        event(
            "content_block_start",
            index=0,
            content_block={"type": "tool_use", "id": "t1", "name": "get_weather", "input": {}},
        ),
        event(
            "content_block_delta",
            index=0,
            delta={"type": "input_json_delta", "partial_json": '{"city": "Li'},
        ),
        event("content_block_stop", index=0),
        event("message_delta", delta={"stop_reason": "max_tokens"}, usage={"output_tokens": 8}),
        event("message_stop"),
    ]

    with pytest.raises(ModelError, match=r"get_weather.*output token limit"):
        await stream(FakeAnthropic, records)
