"""The fake provider servers against each provider's real API: what the real one refuses, the
fake refuses (with the API's status and message), and what it sends has the real shape.

Each request goes to the fake as raw HTTP (httpx), so the fake itself is under test, not the
adapters; the last tests run the adapters against the stricter fakes."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from adk_mesh.models import LlmRequest
from adk_mesh.testing.fake_providers import (
    FakeAnthropic,
    FakeGemini,
    FakeOllama,
    FakeOpenAI,
    FakeProviderServer,
    ScriptedToolCall,
    ScriptedTurn,
)
from adk_mesh.types import Content, Part

GEMINI_PLAIN = "/v1beta/models/gemini-2.5-flash:generateContent"
GEMINI_STREAM = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"


async def post(
    server: FakeProviderServer,
    path: str,
    body: Any,
    *,
    params: dict[str, str] | None = None,
) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with httpx.AsyncClient(base_url=server.url) as client:
        return await client.post(
            path, content=content, params=params, headers={"content-type": "application/json"}
        )


def call_turn(*names: str) -> dict[str, Any]:
    return {
        "role": "model",
        "parts": [{"functionCall": {"name": name, "args": {}}} for name in names],
    }


def response_turn(*names: str) -> dict[str, Any]:
    return {
        "role": "user",
        "parts": [{"functionResponse": {"name": name, "response": {"ok": 1}}} for name in names],
    }


def ask(text: str = "hi") -> dict[str, Any]:
    return {"role": "user", "parts": [{"text": text}]}


# --- Gemini: the contents it refuses --------------------------------------------------------


@pytest.mark.parametrize(
    ("contents", "message"),
    [
        pytest.param(
            [response_turn("f")],
            "function response turn comes immediately after a function call turn",
            id="response-first",
        ),
        pytest.param(
            [ask(), response_turn("f")],
            "function response turn comes immediately after a function call turn",
            id="response-after-text",
        ),
        pytest.param(
            [ask(), call_turn("f", "g"), response_turn("f")],
            "number of function response parts is equal to the number of function call parts",
            id="one-of-two-answered",
        ),
        pytest.param(
            [call_turn("f"), response_turn("f")],
            "function call turn comes immediately after a user turn or after a function "
            "response turn",
            id="call-first",
        ),
        pytest.param(
            [ask(), {"role": "model", "parts": [{"text": "ok"}]}, call_turn("f")],
            "function call turn comes immediately after a user turn or after a function "
            "response turn",
            id="call-after-model",
        ),
        pytest.param(
            [
                ask(),
                {
                    "role": "model",
                    "parts": [
                        {"functionCall": {"name": "f", "args": {}}},
                        {"functionResponse": {"name": "f", "response": {}}},
                    ],
                },
            ],
            "function call turn contains at least one function_call part which can not be "
            "mixed with function_response parts",
            id="call-and-response-mixed",
        ),
        pytest.param([], "contents is not specified", id="no-contents"),
        pytest.param(
            [ask(), {"role": "model", "parts": []}, ask()],
            "GenerateContentRequest.contents[1].parts: contents.parts must not be empty",
            id="empty-parts",
        ),
        pytest.param(
            [ask(), {"role": "model", "parts": [{"text": ""}]}, ask()],
            "GenerateContentRequest.contents[1].parts[0].data: required oneof field 'data' "
            "must have one initialized field",
            id="empty-text",
        ),
    ],
)
async def test_gemini_refuses_the_contents_the_api_refuses(
    contents: list[dict[str, Any]], message: str
) -> None:
    # Each is a 400 INVALID_ARGUMENT from generateContent. A fake that answered them hid the
    # adapters' and the history's bugs until a real key met them.
    async with FakeGemini(ScriptedTurn(text="answer")) as server:
        response = await post(server, GEMINI_PLAIN, {"contents": contents})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    assert message in error["message"]
    assert len(server.refused) == 1


async def test_gemini_takes_well_formed_tool_rounds_and_signed_empty_text() -> None:
    # What the API takes stays taken: parallel calls answered in one turn, a follow-up text
    # turn after the responses, and an empty text part that carries a thought signature.
    contents = [
        ask(),
        call_turn("f", "g"),
        response_turn("f", "g"),
        {"role": "model", "parts": [{"text": "done"}, {"text": "", "thoughtSignature": "c2ln"}]},
        ask("again"),
    ]
    async with FakeGemini(ScriptedTurn(text="answer")) as server:
        response = await post(server, GEMINI_PLAIN, {"contents": contents})
    assert response.status_code == 200, response.text
    assert server.refused == []


async def test_gemini_history_checks_are_off_with_check_history_false() -> None:
    async with FakeGemini(ScriptedTurn(text="answer"), check_history=False) as server:
        response = await post(server, GEMINI_PLAIN, {"contents": [response_turn("f")]})
    assert response.status_code == 200


# --- Gemini: streaming is SSE only with alt=sse ---------------------------------------------


async def test_gemini_stream_without_alt_sse_is_a_json_array() -> None:
    # streamGenerateContent without ?alt=sse answers a JSON array of the chunks
    # (application/json), not SSE: a client that forgot the parameter must fail here too.
    async with FakeGemini(ScriptedTurn(text=["Hel", "lo"])) as server:
        response = await post(server, GEMINI_STREAM, {"contents": [ask()]})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    chunks = response.json()
    assert isinstance(chunks, list)
    texts = [
        part["text"] for chunk in chunks for part in chunk["candidates"][0]["content"]["parts"]
    ]
    assert "".join(texts) == "Hello"
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"


async def test_gemini_stream_with_alt_sse_is_sse() -> None:
    async with FakeGemini(ScriptedTurn(text=["Hel", "lo"])) as server:
        response = await post(server, GEMINI_STREAM, {"contents": [ask()]}, params={"alt": "sse"})
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.text.startswith("data: ")


# --- Anthropic: max_tokens is required ------------------------------------------------------


async def test_anthropic_refuses_a_request_without_max_tokens() -> None:
    # The Messages API has no default for max_tokens: 400 "max_tokens: Field required".
    async with FakeAnthropic(ScriptedTurn(text="answer")) as server:
        response = await post(
            server,
            "/v1/messages",
            {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hi"}]},
        )
    assert response.status_code == 400, response.text
    assert response.json()["error"] == {
        "type": "invalid_request_error",
        "message": "max_tokens: Field required",
    }


# --- every fake: a body that is not JSON is a 400, not a dropped connection -----------------


@pytest.mark.parametrize(
    ("server_type", "path"),
    [
        (FakeGemini, GEMINI_PLAIN),
        (FakeOpenAI, "/v1/chat/completions"),
        (FakeAnthropic, "/v1/messages"),
        (FakeOllama, "/api/chat"),
    ],
)
async def test_a_body_that_is_not_json_is_the_providers_400(
    server_type: type[FakeProviderServer], path: str
) -> None:
    # The fake used to raise inside its connection handler: the client saw the connection
    # drop (a retryable transport error), and the scripted reply was used up.
    async with server_type(ScriptedTurn(text="answer")) as server:
        response = await post(server, path, b'{"messages": [')
        assert response.status_code == 400, response.text
        assert "error" in response.json()
        assert len(server.refused) == 1
        # The scripted reply is still there for the next, well-formed request.
        body: dict[str, Any] = (
            {"contents": [ask()]}
            if server_type is FakeGemini
            else {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
        )
        if server_type is FakeOllama:
            body["stream"] = False
        second = await post(server, path, body)
    assert second.status_code == 200, second.text


# --- OpenAI: with include_usage every chunk carries "usage": null ---------------------------


async def test_openai_stream_chunks_carry_null_usage_when_usage_is_included() -> None:
    turn = ScriptedTurn(text=["Hel", "lo"], tool_calls=[ScriptedToolCall("f", {"a": 1})])
    async with FakeOpenAI(turn) as server:
        response = await post(
            server,
            "/v1/chat/completions",
            {
                "model": "gpt-4o-mini",
                "messages": [{"role": "user", "content": "hi"}],
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        )
    records = [
        json.loads(line.removeprefix("data: "))
        for line in response.text.split("\n\n")
        if line.startswith("data: {")
    ]
    assert all("usage" in record for record in records)
    assert [record["usage"] is None for record in records] == [True] * (len(records) - 1) + [False]


# --- the adapters against the stricter fakes ------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_gemini_adapter_tool_round_passes_the_stricter_fake(stream: bool) -> None:
    request = LlmRequest(
        contents=[
            Content.from_text("user", "weather?"),
            Content(
                role="model",
                parts=[
                    Part.from_function_call("weather", {"city": "Paris"}, id="a"),
                    Part.from_function_call("weather", {"city": "Rome"}, id="b"),
                ],
            ),
            Content(role="user", parts=[Part.from_function_response("weather", {"t": 1}, id="a")]),
            Content(role="user", parts=[Part.from_function_response("weather", {"t": 2}, id="b")]),
        ]
    )
    async with FakeGemini(ScriptedTurn(text="sunny")) as server, server.make_model() as model:
        responses = [r async for r in model.generate_content(request, stream=stream)]
    assert server.refused == []
    assert responses[-1].content is not None


# --- Gemini 3: the current turn's function calls carry their thought signatures -------------

GEMINI_3_PLAIN = "/v1beta/models/gemini-3-flash-preview:generateContent"


def signed(content: dict[str, Any]) -> dict[str, Any]:
    first = content["parts"][0]
    return {**content, "parts": [{**first, "thoughtSignature": "c2ln"}, *content["parts"][1:]]}


async def test_gemini_3_refuses_an_unsigned_function_call_of_the_current_turn() -> None:
    # Gemini 3 validates the signatures of the current turn's calls (since the last user
    # message that is not function responses): 400 "Function call is missing a
    # thought_signature in functionCall parts". A client that drops them fails only there.
    contents = [
        ask(),
        signed(call_turn("f")),
        response_turn("f"),
        call_turn("g"),
        response_turn("g"),
    ]
    async with FakeGemini(ScriptedTurn(text="answer")) as server:
        response = await post(server, GEMINI_3_PLAIN, {"contents": contents})
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert message.startswith("Function call is missing a thought_signature in functionCall parts")
    assert "`default_api:g`" in message


async def test_gemini_3_takes_unsigned_calls_of_earlier_turns_and_unsigned_parallel_calls() -> None:
    # Only the first call of each step carries a signature (parallel calls do not), and the
    # turns before the current one are not checked; nor are models before Gemini 3.
    contents = [
        ask(),
        call_turn("old"),
        response_turn("old"),
        ask("next"),
        signed(call_turn("f", "g")),
        response_turn("f", "g"),
    ]
    async with FakeGemini(ScriptedTurn(text="a"), ScriptedTurn(text="b")) as server:
        gemini_3 = await post(server, GEMINI_3_PLAIN, {"contents": contents})
        unsigned = [ask(), call_turn("f"), response_turn("f")]
        gemini_2 = await post(server, GEMINI_PLAIN, {"contents": unsigned})
    assert gemini_3.status_code == 200, gemini_3.text
    assert gemini_2.status_code == 200, gemini_2.text


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_gemini_3_signs_its_function_calls_and_the_adapter_sends_them_back(
    stream: bool,
) -> None:
    # Gemini 3 always signs a step's first function call; the fake did only when the script
    # gave a signature, so a client dropping signatures went unnoticed.
    async with (
        FakeGemini(
            ScriptedTurn(tool_calls=[ScriptedToolCall("f", {"x": 1}), ScriptedToolCall("g")]),
            ScriptedTurn(text="done"),
            model="gemini-3-flash-preview",
        ) as server,
        server.make_model() as model,
    ):
        question = Content.from_text("user", "go")
        first = [
            r async for r in model.generate_content(LlmRequest(contents=[question]), stream=stream)
        ]
        answer = first[-1].content
        assert answer is not None
        assert answer.parts[0].thought_signature is not None
        responses = Content(
            role="user",
            parts=[
                Part.from_function_response(call.name, {"ok": True}, id=call.id)
                for call in answer.function_calls
            ],
        )
        request = LlmRequest(contents=[question, answer, responses])
        second = [r async for r in model.generate_content(request, stream=stream)]
    assert server.refused == []
    assert second[-1].content is not None and second[-1].content.text == "done"


# --- Anthropic: tool_use ids are [a-zA-Z0-9_-]+ ---------------------------------------------


def tool_round(call_id: str) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "look it up"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": call_id, "name": "lookup", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call_id, "content": "{}"}],
        },
    ]


async def test_anthropic_refuses_a_tool_use_id_outside_its_pattern() -> None:
    # Ids from other providers (Kimi's "functions.lookup:0", Ollama's compat layer) are
    # refused: "messages.1.content.0.tool_use.id: String should match pattern ...".
    async with FakeAnthropic(ScriptedTurn(text="answer")) as server:
        response = await post(
            server,
            "/v1/messages",
            {"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": tool_round("a.b:0")},
        )
        good = await post(
            server,
            "/v1/messages",
            {"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": tool_round("toolu_A-1")},
        )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["message"] == (
        "messages.1.content.0.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'"
    )
    assert good.status_code == 200, good.text


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_anthropic_adapter_sends_another_providers_call_ids_in_claudes_pattern(
    stream: bool,
) -> None:
    # A session whose earlier calls came from another model (an OpenAI-compatible server
    # whose ids hold "." and ":") then goes to Claude: every later turn was a 400.
    request = LlmRequest(
        contents=[
            Content.from_text("user", "look both up"),
            Content(
                role="model",
                parts=[
                    Part.from_function_call("lookup", {"q": 1}, id="functions.lookup:0"),
                    Part.from_function_call("lookup", {"q": 2}, id="functions.lookup:1"),
                ],
            ),
            Content(
                role="user",
                parts=[
                    Part.from_function_response("lookup", {"r": 1}, id="functions.lookup:0"),
                    Part.from_function_response("lookup", {"r": 2}, id="functions.lookup:1"),
                ],
            ),
        ]
    )
    async with FakeAnthropic(ScriptedTurn(text="both")) as server, server.make_model() as model:
        responses = [r async for r in model.generate_content(request, stream=stream)]
    assert server.refused == [], server.refused[0][1].body
    assert responses[-1].content is not None and responses[-1].content.text == "both"
    messages = server.requests[0].json()["messages"]
    uses = [block["id"] for block in messages[1]["content"]]
    results = [block["tool_use_id"] for block in messages[2]["content"]]
    assert uses == results and len(set(uses)) == 2


# --- every fake: a request to a path the API does not serve is its 404 ----------------------


@pytest.mark.parametrize(
    ("server_type", "path"),
    [
        (FakeGemini, "/v1beta/models/models/gemini-2.5-flash:generateContent"),
        (FakeGemini, "/v1beta/gemini-2.5-flash:generateContent"),
        (FakeOpenAI, "/chat/completions"),
        (FakeOpenAI, "/v1/completions"),
        (FakeAnthropic, "/messages"),
        (FakeOllama, "/api/generate"),
    ],
)
async def test_a_path_the_api_does_not_serve_is_a_404(
    server_type: type[FakeProviderServer], path: str
) -> None:
    # The fakes answered any path: a client that built a wrong URL (a doubled "models/", a
    # base URL without /v1) passed every test and failed against the real endpoint.
    async with server_type(ScriptedTurn(text="answer")) as server:
        response = await post(server, path, {"model": "m", "max_tokens": 1, "messages": []})
    assert response.status_code == 404, response.text
    assert "error" in response.json()
