"""Review of the Chat Completions, Responses and Ollama adapters against shapes their real (and
OpenAI-compatible) servers send: Ollama's ``/v1`` endpoint numbering every parallel call 0,
a reasoning field a server sends empty beside the one it fills, refusals."""

from __future__ import annotations

import json
from typing import Any

from adk_mesh.models import LlmRequest
from adk_mesh.testing.fake_providers import FakeOpenAI, RawReply
from adk_mesh.testing.fake_responses import FakeOpenAIResponses
from adk_mesh.types import Content, FinishReason, LlmResponse
from tests.unit.models.test_openai import chunk


async def chat_stream(records: list[bytes]) -> list[LlmResponse]:
    reply = RawReply(chunks=records, content_type="text/event-stream")
    async with FakeOpenAI(reply) as server, server.make_model() as model:
        request = LlmRequest(contents=[Content.from_text("user", "hi")])
        return [r async for r in model.generate_content(request, stream=True)]


async def chat_body(body: dict[str, Any]) -> LlmResponse:
    reply = RawReply(body=json.dumps(body).encode())
    async with FakeOpenAI(reply) as server, server.make_model() as model:
        request = LlmRequest(contents=[Content.from_text("user", "hi")])
        (response,) = [r async for r in model.generate_content(request, stream=False)]
        return response


def call(index: int, arguments: str, **first: Any) -> dict[str, Any]:
    function: dict[str, Any] = {"arguments": arguments}
    if "name" in first:
        function["name"] = first["name"]
    delta: dict[str, Any] = {"index": index, "function": function}
    if "id" in first:
        delta.update(id=first["id"], type="function")
    return {"tool_calls": [delta]}


# --------------------------------------------------------------------------- Chat Completions


async def test_parallel_calls_that_all_say_index_0_stay_apart() -> None:
    """Ollama's OpenAI-compatible endpoint (ollama/ollama#15457) and some proxies number every
    call of a parallel batch 0: each new call comes with its own id and name, and must not be
    glued onto the first (``{..}{..}`` is not JSON, and the second call would be lost)."""
    records = [
        chunk(call(0, '{"path":"a.py"}', id="call_a", name="write_file")),
        chunk(call(0, '{"path":"b.py"}', id="call_b", name="write_file")),
        chunk(call(0, "", id="call_c", name="read_file")),
        chunk(call(0, '{"path":')),  # continues the call started last at that index
        chunk(call(0, '"c.py"}')),
        chunk({}, "tool_calls"),
        b"data: [DONE]\n\n",
    ]

    final = (await chat_stream(records))[-1]

    assert final.content is not None
    assert [(c.id, c.name, c.args) for c in final.content.function_calls] == [
        ("call_a", "write_file", {"path": "a.py"}),
        ("call_b", "write_file", {"path": "b.py"}),
        ("call_c", "read_file", {"path": "c.py"}),
    ]


async def test_a_call_whose_later_deltas_carry_another_id_stays_one_call() -> None:
    """Some servers send a different id on a call's later deltas (no name there): those are
    still the same call's arguments, not new calls."""
    records = [
        chunk(call(0, "", id="call_first", name="get_weather")),
        chunk(call(0, '{"city":', id="call_other")),
        chunk(call(0, '"Lima"}', id="call_other")),
        chunk({}, "tool_calls"),
        b"data: [DONE]\n\n",
    ]

    final = (await chat_stream(records))[-1]

    assert final.content is not None
    assert [(c.id, c.name, c.args) for c in final.content.function_calls] == [
        ("call_first", "get_weather", {"city": "Lima"})
    ]


async def test_reasoning_is_read_when_the_other_reasoning_field_is_null() -> None:
    """A server whose deltas hold both field names (``reasoning_content`` and vLLM's newer
    ``reasoning``) fills one and sends the other as null: the thought must not be lost."""
    records = [
        chunk({"role": "assistant", "reasoning_content": None, "reasoning": "Think"}),
        chunk({"reasoning_content": None, "reasoning": "ing."}),
        chunk({"reasoning_content": None, "reasoning": None, "content": "Answer"}, "stop"),
        b"data: [DONE]\n\n",
    ]

    responses = await chat_stream(records)

    assert [
        (r.content.parts[0].text, r.content.parts[0].thought) for r in responses[:-1] if r.content
    ] == [
        ("Think", True),
        ("ing.", True),
        ("Answer", False),
    ]
    final = responses[-1]
    assert final.content is not None
    assert [(p.text, p.thought) for p in final.content.parts] == [
        ("Thinking.", True),
        ("Answer", False),
    ]

    response = await chat_body(
        {
            "model": "qwen3",
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "reasoning_content": None,
                        "reasoning": "Thinking.",
                        "content": "Answer",
                    },
                    "finish_reason": "stop",
                }
            ],
        }
    )
    assert response.content is not None
    assert [(p.text, p.thought) for p in response.content.parts] == [
        ("Thinking.", True),
        ("Answer", False),
    ]


async def test_a_refusal_finishes_for_safety() -> None:
    """The model's ``refusal`` (its safety refusal, sent apart from content because it does
    not follow a requested schema) is the answer's text, and the finish reason says SAFETY,
    as Anthropic's ``refusal`` stop and Gemini's safety block do: not STOP, which would pass
    the refusal off as an answer."""
    records = [
        chunk({"role": "assistant", "content": None, "refusal": ""}),
        chunk({"refusal": "I can't help "}),
        chunk({"refusal": "with that."}),
        chunk({}, "stop"),
        b"data: [DONE]\n\n",
    ]

    final = (await chat_stream(records))[-1]

    assert final.content is not None and final.content.text == "I can't help with that."
    assert final.finish_reason is FinishReason.SAFETY

    response = await chat_body(
        {
            "model": "gpt-4o-mini",
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "refusal": "I can't help with that.",
                    },
                    "finish_reason": "stop",
                }
            ],
        }
    )
    assert response.content is not None and response.content.text == "I can't help with that."
    assert response.finish_reason is FinishReason.SAFETY


def responses_event(kind: str, **data: Any) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


REFUSED_RESPONSE: dict[str, Any] = {
    "id": "resp_1",
    "object": "response",
    "model": "gpt-5-mini",
    "status": "completed",
    "output": [
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "refusal", "refusal": "I can't help with that."}],
        }
    ],
    "usage": {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7},
}


async def test_a_responses_refusal_finishes_for_safety() -> None:
    request = LlmRequest(contents=[Content.from_text("user", "hi")])
    async with FakeOpenAIResponses(RawReply(body=json.dumps(REFUSED_RESPONSE).encode())) as server:
        async with server.make_model() as model:
            (response,) = [r async for r in model.generate_content(request, stream=False)]
    assert response.content is not None and response.content.text == "I can't help with that."
    assert response.finish_reason is FinishReason.SAFETY

    records = [
        responses_event(
            "response.created", response={**REFUSED_RESPONSE, "status": "in_progress", "output": []}
        ),
        responses_event(
            "response.output_item.added",
            output_index=0,
            item={"type": "message", "id": "msg_1", "role": "assistant", "content": []},
        ),
        responses_event(
            "response.refusal.delta", output_index=0, content_index=0, delta="I can't help "
        ),
        responses_event(
            "response.refusal.delta", output_index=0, content_index=0, delta="with that."
        ),
        responses_event("response.completed", response=REFUSED_RESPONSE),
    ]
    reply = RawReply(chunks=records, content_type="text/event-stream")
    async with FakeOpenAIResponses(reply) as server, server.make_model() as model:
        responses = [r async for r in model.generate_content(request, stream=True)]
    assert [r.content.text for r in responses[:-1] if r.content] == ["I can't help ", "with that."]
    assert responses[-1].finish_reason is FinishReason.SAFETY


async def test_reasoning_sent_under_both_names_counts_once() -> None:
    """vLLM keeps ``reasoning_content`` in sync with ``reasoning``: the same delta twice is
    one thought, not two."""
    records = [
        chunk({"reasoning_content": "Hmm.", "reasoning": "Hmm."}),
        chunk({"content": "Yes."}, "stop"),
        b"data: [DONE]\n\n",
    ]

    final = (await chat_stream(records))[-1]

    assert final.content is not None
    assert [(p.text, p.thought) for p in final.content.parts] == [("Hmm.", True), ("Yes.", False)]
