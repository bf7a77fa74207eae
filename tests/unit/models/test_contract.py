"""One contract suite for every provider, each against its fake server over real sockets."""

from __future__ import annotations

import asyncio
import json
import logging
import traceback
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from adk_mesh.errors import ModelError
from adk_mesh.models import GenerateContentConfig, LlmRequest, RetryPolicy
from adk_mesh.models._http import HttpLlm
from adk_mesh.testing.fake_providers import (
    ErrorReply,
    FakeAnthropic,
    FakeGemini,
    FakeOllama,
    FakeOpenAI,
    FakeProviderServer,
    RawReply,
    RecordedRequest,
    ScriptedToolCall,
    ScriptedTurn,
)
from adk_mesh.testing.fake_responses import FakeOpenAIResponses
from adk_mesh.types import Content, FinishReason, LlmResponse, Part, ToolDeclaration

WEATHER_TOOL = ToolDeclaration(
    name="get_weather",
    description="The weather in a city.",
    parameters_schema={
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "array"}},
        "required": ["city"],
    },
)


# --------------------------------------------------------------------------- per provider


def _gemini_round_trip(body: dict[str, Any]) -> None:
    assert body["contents"][1] == {
        "role": "model",
        "parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Paris"}, "id": "c1"}}],
    }
    assert body["contents"][2] == {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "get_weather", "response": {"temp": 21}, "id": "c1"}}
        ],
    }


def _openai_round_trip(body: dict[str, Any]) -> None:
    assistant, tool = body["messages"][2], body["messages"][3]
    assert assistant == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
            }
        ],
    }
    assert tool == {"role": "tool", "tool_call_id": "c1", "content": '{"temp":21}'}


def _openai_responses_round_trip(body: dict[str, Any]) -> None:
    assert body["input"][1:] == [
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "get_weather",
            "arguments": '{"city":"Paris"}',
        },
        {"type": "function_call_output", "call_id": "c1", "output": '{"temp":21}'},
    ]


def _anthropic_round_trip(body: dict[str, Any]) -> None:
    assert body["messages"][1] == {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "c1", "name": "get_weather", "input": {"city": "Paris"}}
        ],
    }
    assert body["messages"][2] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "c1", "content": '{"temp":21}'}],
    }


def _ollama_round_trip(body: dict[str, Any]) -> None:
    assert body["messages"][2] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
    }
    assert body["messages"][3] == {
        "role": "tool",
        "tool_name": "get_weather",
        "content": '{"temp":21}',
    }


def _openai_like_user_text(body: dict[str, Any]) -> str:
    return str(next(m["content"] for m in body["messages"] if m["role"] == "user"))


def _responses_user_text(body: dict[str, Any]) -> str:
    return str(next(item["content"] for item in body["input"] if item.get("role") == "user"))


@dataclass(frozen=True)
class Case:
    name: str
    server: type[FakeProviderServer]
    #: env var of the key (None: the key is a constructor argument) and the header it goes in.
    key_env: str | None
    key_header: str
    user_text: Callable[[dict[str, Any]], str]
    system: Callable[[dict[str, Any]], str]
    tool_names: Callable[[dict[str, Any]], list[str]]
    round_trip: Callable[[dict[str, Any]], None]
    uncarryable: Part
    #: whether the tool call id comes back as the server sent it (Ollama generates ids).
    keeps_call_ids: bool = True


CASES = [
    Case(
        name="gemini",
        server=FakeGemini,
        key_env="GOOGLE_API_KEY",
        key_header="x-goog-api-key",
        user_text=lambda b: b["contents"][0]["parts"][0]["text"],
        system=lambda b: b["systemInstruction"]["parts"][0]["text"],
        tool_names=lambda b: [d["name"] for d in b["tools"][0]["functionDeclarations"]],
        round_trip=_gemini_round_trip,
        uncarryable=Part.from_file_data("application/pdf", "file:///tmp/report.pdf"),
    ),
    Case(
        name="openai",
        server=FakeOpenAI,
        key_env="OPENAI_API_KEY",
        key_header="authorization",
        user_text=_openai_like_user_text,
        system=lambda b: b["messages"][0]["content"],
        tool_names=lambda b: [t["function"]["name"] for t in b["tools"]],
        round_trip=_openai_round_trip,
        uncarryable=Part.from_inline_data("video/mp4", b"\x00\x00\x00\x18ftypmp42"),
    ),
    Case(
        name="openai-responses",
        server=FakeOpenAIResponses,
        key_env="OPENAI_API_KEY",
        key_header="authorization",
        user_text=_responses_user_text,
        system=lambda b: b["instructions"],
        tool_names=lambda b: [t["name"] for t in b["tools"] if t["type"] == "function"],
        round_trip=_openai_responses_round_trip,
        uncarryable=Part.from_inline_data("video/mp4", b"\x00\x00\x00\x18ftypmp42"),
    ),
    Case(
        name="anthropic",
        server=FakeAnthropic,
        key_env="ANTHROPIC_API_KEY",
        key_header="x-api-key",
        user_text=lambda b: b["messages"][0]["content"][0]["text"],
        system=lambda b: b["system"],
        tool_names=lambda b: [t["name"] for t in b["tools"]],
        round_trip=_anthropic_round_trip,
        uncarryable=Part.from_inline_data("audio/wav", b"RIFF\x00\x00WAVE"),
    ),
    Case(
        name="ollama",
        server=FakeOllama,
        key_env=None,
        key_header="authorization",
        user_text=_openai_like_user_text,
        system=lambda b: b["messages"][0]["content"],
        tool_names=lambda b: [t["function"]["name"] for t in b["tools"]],
        round_trip=_ollama_round_trip,
        uncarryable=Part.from_inline_data("application/pdf", b"%PDF-1.7"),
        keeps_call_ids=False,
    ),
]


@pytest.fixture(params=CASES, ids=[case.name for case in CASES])
def case(request: pytest.FixtureRequest) -> Case:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
async def server(case: Case) -> AsyncIterator[FakeProviderServer]:
    async with case.server() as fake:
        yield fake


@pytest.fixture
async def model(server: FakeProviderServer, retry: RetryPolicy) -> AsyncIterator[HttpLlm]:
    async with server.make_model(retry=retry) as llm:
        yield llm


def hello_request(**kwargs: Any) -> LlmRequest:
    return LlmRequest(
        contents=[Content.from_text("user", "hi there")],
        system_instruction="Be brief.",
        **kwargs,
    )


async def collect(model: HttpLlm, request: LlmRequest, *, stream: bool) -> list[LlmResponse]:
    return [response async for response in model.generate_content(request, stream=stream)]


def body_of(server: FakeProviderServer, index: int = -1) -> dict[str, Any]:
    body = server.requests[index].json()
    assert isinstance(body, dict)
    return body


# --------------------------------------------------------------------------- text


async def test_text_without_streaming_yields_one_complete_response(
    case: Case, server: FakeProviderServer, model: HttpLlm
) -> None:
    server.enqueue(ScriptedTurn(text="Hello there", input_tokens=12, output_tokens=3))

    responses = await collect(model, hello_request(), stream=False)

    assert len(responses) == 1
    (response,) = responses
    assert response.turn_complete and not response.partial
    assert response.content is not None and response.content.role == "model"
    assert response.content.text == "Hello there"
    assert response.finish_reason is FinishReason.STOP
    assert response.usage_metadata is not None
    assert response.usage_metadata.prompt_token_count == 12
    assert response.usage_metadata.candidates_token_count == 3
    assert response.usage_metadata.total_token_count == 15
    assert response.model_version
    body = body_of(server)
    assert case.user_text(body) == "hi there"
    assert case.system(body) == "Be brief."


async def test_text_stream_yields_partials_then_one_final_aggregate(
    case: Case, server: FakeProviderServer, model: HttpLlm
) -> None:
    deltas = ["Hel", "lo, ", "wor", "ld!"]
    server.enqueue(ScriptedTurn(text=deltas, input_tokens=5, output_tokens=4))

    responses = await collect(model, hello_request(), stream=True)

    *partials, final = responses
    assert all(r.partial and not r.turn_complete for r in partials)
    assert [p.content.text for p in partials if p.content] == deltas
    assert final.turn_complete and not final.partial
    assert final.content is not None and final.content.text == "Hello, world!"
    assert len(final.content.parts) == 1
    assert final.finish_reason is FinishReason.STOP
    assert final.usage_metadata is not None
    assert (
        final.usage_metadata.prompt_token_count,
        final.usage_metadata.candidates_token_count,
    ) == (5, 4)


# --------------------------------------------------------------------------- tools


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_tool_call_is_declared_and_returned_with_whole_arguments(
    case: Case, server: FakeProviderServer, model: HttpLlm, stream: bool
) -> None:
    args = {"city": "São Paulo", "days": [1, 2, 3], "note": "naïve — ok"}
    server.enqueue(
        ScriptedTurn(
            text="Let me check.",
            tool_calls=[ScriptedToolCall("get_weather", args, id="call_abc")],
            argument_chunks=12,
            write_size=7,
        )
    )

    responses = await collect(model, hello_request(tools=[WEATHER_TOOL]), stream=stream)

    assert case.tool_names(body_of(server)) == ["get_weather"]
    final = responses[-1]
    assert all(r.content is None or not r.content.function_calls for r in responses[:-1])
    assert final.content is not None
    (call,) = final.content.function_calls
    assert (call.name, call.args) == ("get_weather", args)
    if case.keeps_call_ids:
        assert call.id == "call_abc"
    else:
        assert call.id  # generated, and new for the same call made again
        again = ScriptedTurn(tool_calls=[ScriptedToolCall("get_weather", args)])
        server.enqueue(again)
        (other,) = (await collect(model, hello_request(), stream=not stream))[
            -1
        ].content.function_calls  # type: ignore[union-attr]
        assert other.id and other.id != call.id
    assert final.content.text == "Let me check."


@pytest.mark.parametrize("response_role", ["tool", "user"])
async def test_function_response_is_sent_back_mapped_to_the_api(
    case: Case, server: FakeProviderServer, model: HttpLlm, response_role: str
) -> None:
    server.enqueue(ScriptedTurn(text="It is 21 degrees."))
    request = LlmRequest(
        system_instruction="Be brief.",
        tools=[WEATHER_TOOL],
        contents=[
            Content.from_text("user", "Weather in Paris?"),
            Content.from_parts(
                "model", Part.from_function_call("get_weather", {"city": "Paris"}, id="c1")
            ),
            Content.from_parts(
                response_role, Part.from_function_response("get_weather", {"temp": 21}, id="c1")
            ),
        ],
    )

    responses = await collect(model, request, stream=False)

    assert responses[-1].content is not None
    assert responses[-1].content.text == "It is 21 degrees."
    case.round_trip(body_of(server))


# --------------------------------------------------------------------------- stream framing


@pytest.mark.parametrize(
    "write_size",
    [1, 2, 3, (5, 1, 7, 2)],
    ids=["every-byte", "2-bytes", "3-bytes", "ragged"],
)
async def test_stream_split_inside_utf8_chars_and_sse_lines_reassembles_exactly(
    server: FakeProviderServer, model: HttpLlm, write_size: int | tuple[int, ...]
) -> None:
    # Multi-byte UTF-8 (2, 3 and 4 bytes), a JSON-legal U+2028 and a CR: split at every
    # byte, these land inside characters, inside "data:" lines and between "\r" and "\n".
    deltas = ["héllo wörld ", "日本語\u2028", "🎉🎉 ", "a\rb ", "ok"]
    server.enqueue(
        ScriptedTurn(
            text=deltas,
            tool_calls=[ScriptedToolCall("get_weather", {"city": "Zürich 🇨🇭"}, id="c9")],
            argument_chunks=5,
            write_size=write_size,
        )
    )

    responses = await collect(model, hello_request(tools=[WEATHER_TOOL]), stream=True)

    assert [r.content.text for r in responses[:-1] if r.content] == deltas
    final = responses[-1]
    assert final.content is not None and final.content.text == "".join(deltas)
    assert final.content.function_calls[0].args == {"city": "Zürich 🇨🇭"}


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_error_body_becomes_model_error_with_status_and_provider_message(
    server: FakeProviderServer, model: HttpLlm, sleeps: list[float], stream: bool
) -> None:
    server.enqueue(ErrorReply(400, "messages: field required (at index 0)"))

    with pytest.raises(ModelError) as caught:
        await collect(model, hello_request(), stream=stream)

    assert caught.value.status_code == 400
    assert "messages: field required (at index 0)" in caught.value.message
    assert len(server.requests) == 1 and sleeps == []


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_429_with_retry_after_is_retried_then_succeeds(
    server: FakeProviderServer, model: HttpLlm, sleeps: list[float], stream: bool
) -> None:
    server.enqueue(ErrorReply(429, "slow down", retry_after="2"), ScriptedTurn(text="ok"))

    responses = await collect(model, hello_request(), stream=stream)

    assert responses[-1].content is not None and responses[-1].content.text == "ok"
    assert sleeps == [2.0]
    assert len(server.requests) == 2
    assert server.requests[0].body == server.requests[1].body


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_5xx_is_retried_a_bounded_number_of_times_then_fails(
    server: FakeProviderServer, model: HttpLlm, sleeps: list[float], stream: bool
) -> None:
    server.enqueue(*[ErrorReply(503, "the service is unavailable")] * 4)

    with pytest.raises(ModelError) as caught:
        await collect(model, hello_request(), stream=stream)

    assert caught.value.status_code == 503
    assert "the service is unavailable" in caught.value.message
    assert len(server.requests) == 3
    assert len(sleeps) == 2 and all(0 <= s <= 0.02 for s in sleeps)


async def test_stream_cut_midway_raises_model_error(
    server: FakeProviderServer, model: HttpLlm, sleeps: list[float]
) -> None:
    server.enqueue(ScriptedTurn(text=["one ", "two ", "three ", "four"], cut_after=3))

    seen: list[LlmResponse] = []
    with pytest.raises(ModelError):
        async for response in model.generate_content(hello_request(), stream=True):
            seen.append(response)

    assert all(r.partial for r in seen)
    assert len(server.requests) == 1 and sleeps == []  # bytes were consumed: no retry


async def test_stream_that_ends_cleanly_but_incomplete_raises_model_error(
    server: FakeProviderServer, model: HttpLlm
) -> None:
    def truncated(request: RecordedRequest) -> RawReply:
        records = server.render_stream(ScriptedTurn(text=["a", "b", "c"]), request)
        return RawReply(chunks=records[:2], content_type=server.stream_content_type)

    server.handler = truncated

    with pytest.raises(ModelError, match="ended before"):
        await collect(model, hello_request(), stream=True)


async def test_in_stream_error_record_raises_model_error(
    server: FakeProviderServer, model: HttpLlm
) -> None:
    def error_mid_stream(request: RecordedRequest) -> RawReply:
        records = server.render_stream(ScriptedTurn(text=["partial", " more"]), request)
        return RawReply(
            chunks=[*records[:2], server.render_stream_error("Overloaded")],
            content_type=server.stream_content_type,
        )

    server.handler = error_mid_stream

    with pytest.raises(ModelError, match="Overloaded"):
        await collect(model, hello_request(), stream=True)


async def test_a_part_the_api_cannot_carry_raises_model_error_naming_it(
    case: Case, server: FakeProviderServer, model: HttpLlm
) -> None:
    request = LlmRequest(
        contents=[Content.from_parts("user", Part.from_text("look:"), case.uncarryable)]
    )

    with pytest.raises(ModelError) as caught:
        await collect(model, request, stream=False)

    message = caught.value.message
    assert "part 1 of content 0" in message
    assert case.uncarryable.kind in message
    assert str(case.uncarryable.mime_type) in message
    assert server.requests == []


# --------------------------------------------------------------------------- cancellation


async def test_aclose_of_the_stream_closes_the_http_connection(
    server: FakeProviderServer, model: HttpLlm
) -> None:
    server.enqueue(ScriptedTurn(text=["first ", "second ", "third"], hold_after=-1))
    stream = model.generate_content(hello_request(), stream=True)

    first = await anext(stream)
    assert first.partial
    await stream.aclose()  # type: ignore[attr-defined]

    await server.wait_for_abort()
    assert server.aborts == 1


async def test_cancelling_the_consumer_closes_the_http_connection(
    server: FakeProviderServer, model: HttpLlm
) -> None:
    server.enqueue(ScriptedTurn(text=["first ", "second ", "third"], hold_after=-1))
    got_first = asyncio.Event()

    async def consume() -> None:
        async for _ in model.generate_content(hello_request(), stream=True):
            got_first.set()

    task = asyncio.create_task(consume())
    await got_first.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    await server.wait_for_abort()


async def test_one_model_serves_concurrent_streams(
    server: FakeProviderServer, model: HttpLlm
) -> None:
    server.handler = lambda request: ScriptedTurn(text=[case_text(request), "!"], write_size=3)

    def request_for(text: str) -> LlmRequest:
        return LlmRequest(contents=[Content.from_text("user", text)])

    results = await asyncio.gather(
        *(collect(model, request_for(f"n{i}"), stream=True) for i in range(5))
    )

    assert sorted(r[-1].content.text for r in results if r[-1].content) == [
        f"echo:n{i}!" for i in range(5)
    ]


def case_text(request: RecordedRequest) -> str:
    """The last user text of any provider's request body (for echo handlers)."""
    body = request.json()
    if "contents" in body:
        return "echo:" + str(body["contents"][-1]["parts"][0]["text"])
    message = body["input"][-1] if "input" in body else body["messages"][-1]
    content = message["content"]
    return "echo:" + (content if isinstance(content, str) else content[0]["text"])


# --------------------------------------------------------------------------- secrets

SECRET_KEY = "sk-live-SECRET-0123456789abcdef"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_api_key_never_appears_in_errors_reprs_or_logs(
    case: Case,
    server: FakeProviderServer,
    retry: RetryPolicy,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    stream: bool,
) -> None:
    caplog.set_level(logging.DEBUG)
    if case.key_env is not None:
        monkeypatch.setenv(case.key_env, SECRET_KEY)
        llm = server.make_model(api_key=None, retry=retry)
    else:
        llm = server.make_model(api_key=SECRET_KEY, retry=retry)
    server.enqueue(
        ErrorReply(503, f"upstream said no to key {SECRET_KEY}"),
        ErrorReply(401, f"Incorrect API key provided: {SECRET_KEY}."),
    )

    async with llm:
        with pytest.raises(ModelError) as caught:
            await collect(llm, hello_request(), stream=stream)

    error = caught.value
    assert error.status_code == 401
    assert SECRET_KEY in server.requests[0].headers[case.key_header]  # it was really sent
    rendered = [
        str(error),
        repr(error),
        error.message,
        json.dumps(error.metadata),
        "".join(traceback.format_exception(error)),
        repr(llm),
        repr(llm._transport),
        caplog.text,
    ]
    for text in rendered:
        assert SECRET_KEY not in text
    assert "***" in error.message


# --------------------------------------------------------------------------- structured output

REPORT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "sky": {"type": "string", "enum": ["clear", "rain"]},
    },
    "required": ["city", "sky"],
    "additionalProperties": False,
}
REPORT = {"city": "Lisbon", "sky": "clear"}


def _structured_wire(case: str, body: dict[str, Any], *, with_tools: bool) -> None:
    """The request asks for REPORT_SCHEMA in the provider's own way."""
    if case == "gemini":
        config = body["generationConfig"]
        assert config["responseJsonSchema"] == REPORT_SCHEMA
        assert config["responseMimeType"] == "application/json"
        names = [d["name"] for d in body["tools"][0]["functionDeclarations"]] if with_tools else []
        assert names == (["get_weather"] if with_tools else [])
    elif case == "openai":
        assert body["response_format"] == {
            "type": "json_schema",
            "json_schema": {"name": "CityReport", "schema": REPORT_SCHEMA, "strict": True},
        }
        assert [t["function"]["name"] for t in body.get("tools", [])] == (
            ["get_weather"] if with_tools else []
        )
    elif case == "openai-responses":
        assert body["text"] == {
            "format": {
                "type": "json_schema",
                "name": "CityReport",
                "schema": REPORT_SCHEMA,
                "strict": True,
            }
        }
        assert [t["name"] for t in body.get("tools", [])] == (["get_weather"] if with_tools else [])
    elif case == "anthropic":
        assert body["tools"][-1] == {
            "name": "CityReport",
            "description": (
                "Give your final answer: call this tool with the answer as its input, in its "
                "schema."
            ),
            "input_schema": REPORT_SCHEMA,
        }
        if with_tools:
            assert [t["name"] for t in body["tools"]] == ["get_weather", "CityReport"]
            assert body["tool_choice"] == {"type": "any"}
            assert "calling the CityReport tool" in body["system"]
        else:
            assert body["tool_choice"] == {"type": "tool", "name": "CityReport"}
            assert body["system"] == "Be brief."
    else:
        assert body["format"] == REPORT_SCHEMA
        assert [t["function"]["name"] for t in body.get("tools", [])] == (
            ["get_weather"] if with_tools else []
        )


def _structured_turn(case: str) -> ScriptedTurn:
    """How the provider answers in the schema: Anthropic calls the schema's tool."""
    if case == "anthropic":
        return ScriptedTurn(tool_calls=[ScriptedToolCall("CityReport", REPORT, id="toolu_1")])
    return ScriptedTurn(text=json.dumps(REPORT))


@pytest.mark.parametrize("with_tools", [False, True], ids=["alone", "with-tools"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_a_response_schema_is_asked_natively_and_the_answer_is_its_json_text(
    case: Case, server: FakeProviderServer, model: HttpLlm, stream: bool, with_tools: bool
) -> None:
    server.enqueue(_structured_turn(case.name))
    request = hello_request(
        tools=[WEATHER_TOOL] if with_tools else [],
        config=GenerateContentConfig(
            response_schema=REPORT_SCHEMA,
            response_schema_name="CityReport",
            response_mime_type="application/json",
        ),
    )

    responses = await collect(model, request, stream=stream)

    _structured_wire(case.name, body_of(server), with_tools=with_tools)
    final = responses[-1]
    assert final.content is not None
    assert final.content.function_calls == []
    assert json.loads(final.content.text) == REPORT
    assert final.finish_reason is FinishReason.STOP


async def test_a_schema_name_that_is_not_an_api_name_is_made_one(
    case: Case, server: FakeProviderServer, model: HttpLlm
) -> None:
    server.enqueue(ScriptedTurn(text="{}"))
    config = GenerateContentConfig(response_schema={"type": "object"}, response_schema_name="a b")

    await collect(model, hello_request(config=config), stream=False)

    body = body_of(server)
    if case.name == "openai":
        assert body["response_format"]["json_schema"]["name"] == "a_b"
        assert body["response_format"]["json_schema"]["strict"] is False  # not closed
    elif case.name == "openai-responses":
        assert body["text"]["format"]["name"] == "a_b"
        assert body["text"]["format"]["strict"] is False  # not closed
    elif case.name == "anthropic":
        assert body["tool_choice"] == {"type": "tool", "name": "a_b"}
