"""The Gemini and Anthropic adapters under review, against the fake provider servers: usage
that means the same whichever provider answered, a Gemini answer that stopped with nothing
to show (an error event, as google-adk makes it), and thought signatures sent back only to
the provider that issued them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from adk_mesh.models import LlmRequest, RetryPolicy
from adk_mesh.models.openai_responses import reasoning_signature
from adk_mesh.testing.fake_providers import (
    FakeAnthropic,
    FakeGemini,
    FakeOpenAI,
    FakeProviderServer,
    RawReply,
    ScriptedToolCall,
    ScriptedTurn,
)
from adk_mesh.types import Content, FinishReason, LlmResponse, Part

STREAM = pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])


async def run(
    server: FakeProviderServer, request: LlmRequest, *, stream: bool, **kwargs: Any
) -> list[LlmResponse]:
    async with server.make_model(**kwargs) as model:
        return [r async for r in model.generate_content(request, stream=stream)]


def user(text: str) -> LlmRequest:
    return LlmRequest(contents=[Content.from_text("user", text)])


def gemini_reply(body: dict[str, Any], *, stream: bool) -> RawReply:
    """``body`` as Gemini sends it: the JSON body, or one SSE chunk."""
    data = json.dumps(body).encode()
    if stream:
        return RawReply(chunks=[b"data: " + data + b"\r\n\r\n"], content_type="text/event-stream")
    return RawReply(body=data)


# --- usage: what candidates_token_count means, provider by provider -------------------------


@STREAM
@pytest.mark.parametrize("provider", [FakeGemini, FakeAnthropic, FakeOpenAI])
async def test_output_tokens_count_the_thinking_whichever_provider_answered(
    provider: type[FakeProviderServer], stream: bool
) -> None:
    # The same turn: 30 tokens written, 25 of them thinking. OpenAI and Anthropic report 30
    # output tokens; Gemini reports 5 candidates and 25 thoughts. Counted as Gemini's 5, a
    # thinking Gemini's calls looked six times cheaper than they were billed (spans, metrics).
    turn = ScriptedTurn(
        thoughts=["Let me think."],
        text="Hi",
        input_tokens=10,
        output_tokens=30,
        thought_tokens=25,
    )
    async with provider(turn) as server:
        responses = await run(server, user("hi"), stream=stream)

    usage = responses[-1].usage_metadata
    assert usage is not None
    assert usage.prompt_token_count == 10
    assert usage.candidates_token_count == 30
    assert usage.total_token_count == usage.prompt_token_count + usage.candidates_token_count
    if provider is FakeGemini:
        assert usage.thoughts_token_count == 25


@STREAM
async def test_gemini_tool_use_prompt_tokens_are_prompt_tokens(stream: bool) -> None:
    # Google Search results fed to the model are input Gemini bills (toolUsePromptTokenCount,
    # inside totalTokenCount): prompt + candidates must still add up to the total.
    body = {
        "candidates": [
            {"content": {"role": "model", "parts": [{"text": "Oslo."}]}, "finishReason": "STOP"}
        ],
        "usageMetadata": {
            "promptTokenCount": 10,
            "candidatesTokenCount": 4,
            "toolUsePromptTokenCount": 300,
            "thoughtsTokenCount": 6,
            "totalTokenCount": 320,
        },
    }
    async with FakeGemini(gemini_reply(body, stream=stream)) as server:
        responses = await run(server, user("Capital of Norway?"), stream=stream)

    usage = responses[-1].usage_metadata
    assert usage is not None
    assert (usage.prompt_token_count, usage.candidates_token_count) == (310, 10)
    assert usage.total_token_count == 320
    assert usage.thoughts_token_count == 6


# --- Gemini: an answer that stopped with nothing to show -----------------------------------


@STREAM
@pytest.mark.parametrize(
    ("reason", "finish", "message"),
    [
        (
            "MALFORMED_FUNCTION_CALL",
            FinishReason.MALFORMED_FUNCTION_CALL,
            "Malformed function call: print(default_api.lookup(q='x'",
        ),
        ("SAFETY", FinishReason.SAFETY, None),
        ("MAX_TOKENS", FinishReason.MAX_TOKENS, None),
    ],
)
async def test_gemini_candidate_without_content_is_an_error_response(
    reason: str, finish: FinishReason, message: str | None, stream: bool
) -> None:
    # google-adk's LlmResponse.create: a candidate with no parts that did not STOP is an error
    # (error_code the finish reason, error_message its finishMessage). Without it the agent's
    # turn ended on an empty event: no answer, and nothing saying why.
    candidate: dict[str, Any] = {"finishReason": reason, "index": 0}
    if message is not None:
        candidate["finishMessage"] = message
    body = {
        "candidates": [candidate],
        "usageMetadata": {"promptTokenCount": 5, "totalTokenCount": 5},
    }
    async with FakeGemini(gemini_reply(body, stream=stream)) as server:
        responses = await run(server, user("Look up x"), stream=stream)

    final = responses[-1]
    assert final.content is None
    assert final.finish_reason is finish
    assert final.error_code == reason
    assert final.error_message is not None and reason in final.error_message
    if message is not None:
        assert message in final.error_message


@STREAM
async def test_gemini_empty_stop_and_answers_are_not_errors(stream: bool) -> None:
    body = {"candidates": [{"finishReason": "STOP", "index": 0}]}
    async with FakeGemini(
        gemini_reply(body, stream=stream), ScriptedTurn(text="Partial", finish="length")
    ) as server:
        empty = (await run(server, user("Say nothing"), stream=stream))[-1]
        cut = (await run(server, user("Say a lot"), stream=stream))[-1]

    assert empty.error_code is None and empty.finish_reason is FinishReason.STOP
    # Text that was cut short is still an answer, as google-adk keeps it.
    assert cut.error_code is None and cut.finish_reason is FinishReason.MAX_TOKENS
    assert cut.content is not None and cut.content.text == "Partial"


@pytest.mark.parametrize(
    ("reason", "finish"),
    [
        ("IMAGE_PROHIBITED_CONTENT", FinishReason.SAFETY),
        ("IMAGE_RECITATION", FinishReason.RECITATION),
        ("UNEXPECTED_TOOL_CALL", FinishReason.MALFORMED_FUNCTION_CALL),
    ],
)
async def test_gemini_finish_reasons_map_to_their_kind(reason: str, finish: FinishReason) -> None:
    body = {
        "candidates": [
            {"content": {"role": "model", "parts": [{"text": "x"}]}, "finishReason": reason}
        ]
    }
    async with FakeGemini(gemini_reply(body, stream=False)) as server:
        responses = await run(server, user("hi"), stream=False)

    assert responses[-1].finish_reason is finish


# --- thought signatures go back only to the provider that issued them ----------------------


@STREAM
async def test_gemini_leaves_out_reasoning_the_openai_responses_adapter_signed(
    stream: bool,
) -> None:
    # A session whose agent answered with an OpenAI reasoning model, then with Gemini: the
    # reasoning item travels as a thought part signed by the Responses adapter. Sent to
    # Gemini as a thoughtSignature it is a 400 "Corrupted thought signature", on every later
    # turn of the session.
    openai_signature = reasoning_signature({"id": "rs_1", "encrypted_content": "gAAAAB..."})
    assert openai_signature is not None
    gemini_signature = b"\x12\x24gemini-issued\xff"
    history = LlmRequest(
        contents=[
            Content.from_text("user", "Weather in Oslo?"),
            Content(
                role="model",
                parts=[
                    Part(text="Thinking.", thought=True, thought_signature=openai_signature),
                    Part.from_function_call("get_weather", {"city": "Oslo"}, id="call_1"),
                ],
            ),
            Content.from_parts(
                "user", Part.from_function_response("get_weather", {"c": -3}, id="call_1")
            ),
            Content(
                role="model",
                parts=[
                    Part(text="Cold.", thought_signature=gemini_signature),
                ],
            ),
            Content.from_text("user", "And tomorrow?"),
        ]
    )
    async with FakeGemini(ScriptedTurn(text="Colder.")) as server:
        await run(server, history, stream=stream)

    contents = server.requests[0].json()["contents"]
    model_turns = [content["parts"] for content in contents if content["role"] == "model"]
    assert model_turns[0] == [
        {"functionCall": {"name": "get_weather", "args": {"city": "Oslo"}, "id": "call_1"}}
    ]
    # Gemini's own signature still goes back, byte for byte.
    assert model_turns[1] == [{"text": "Cold.", "thoughtSignature": "EiRnZW1pbmktaXNzdWVk/w=="}]


async def test_gemini_tool_loop_with_thinking_still_round_trips() -> None:
    turn = ScriptedTurn(
        thoughts=["Weather."],
        tool_calls=[ScriptedToolCall("get_weather", {"city": "Oslo"}, id="fc-1")],
        thought_signature=b"\x00gemini\xfe",
    )
    async with FakeGemini(turn, ScriptedTurn(text="Cold.")) as server:
        first = (await run(server, user("Weather?"), stream=True))[-1]
        assert first.content is not None
        history = LlmRequest(
            contents=[
                Content.from_text("user", "Weather?"),
                first.content,
                Content.from_parts(
                    "user", Part.from_function_response("get_weather", {"c": -3}, id="fc-1")
                ),
            ]
        )
        await run(server, history, stream=True)

    sent = server.requests[1].json()["contents"][1]["parts"]
    assert sent[0] == {"text": "Weather.", "thought": True}
    assert "thoughtSignature" in sent[1]


# --- Gemini: the wait a 429 asks for is in its body ---------------------------------------


def quota_exhausted(delay: str) -> RawReply:
    """Gemini's 429: no Retry-After header; the wait is a google.rpc.RetryInfo detail."""
    body = {
        "error": {
            "code": 429,
            "message": f"You exceeded your current quota. Please retry in {delay}.",
            "status": "RESOURCE_EXHAUSTED",
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                    "violations": [{"quotaId": "GenerateRequestsPerMinutePerProjectPerModel"}],
                },
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay},
            ],
        }
    }
    return RawReply(status=429, body=json.dumps(body).encode())


@STREAM
async def test_gemini_429_waits_the_retry_delay_its_body_names(
    stream: bool, retry: RetryPolicy, sleeps: list[float]
) -> None:
    # Retried after the jittered backoff instead (under a second), the next attempts hit the
    # same per-minute quota and the call failed, having spent two more requests of it.
    async with FakeGemini(quota_exhausted("7.5s"), ScriptedTurn(text="Hi")) as server:
        responses = await run(server, user("hi"), stream=stream, retry=retry)

    assert sleeps == [7.5]
    assert responses[-1].content is not None and responses[-1].content.text == "Hi"


async def test_gemini_retry_delay_is_capped_and_a_header_wins(
    retry: RetryPolicy, sleeps: list[float]
) -> None:
    with_header = quota_exhausted("30s")
    with_header.headers["retry-after"] = "2"
    async with FakeGemini(
        quota_exhausted("3600s"), with_header, ScriptedTurn(text="a"), ScriptedTurn(text="b")
    ) as server:
        await run(server, user("hi"), stream=False, retry=retry)
        await run(server, user("hi"), stream=False, retry=retry)

    assert sleeps == [retry.max_retry_after, 2.0]
