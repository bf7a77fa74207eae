"""OpenAI Responses specifics, against the fake Responses API over real sockets: the request
shape, reasoning items carried to the next turn, web search with citations, code interpreter
runs, usage, errors, and the fake refusing what the real API refuses."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from adk_mesh import Content, Event, LlmAgent, RunConfig, Runner, StreamingMode
from adk_mesh.errors import ConfigError, ModelError, ModelRateLimitError, ModelRequestError
from adk_mesh.models import (
    BuiltinTool,
    GenerateContentConfig,
    LlmRequest,
    OpenAIResponsesModel,
    RetryPolicy,
    resolve_model,
)
from adk_mesh.models.openai_responses import (
    SIGNATURE_MARK,
    is_reasoning_model,
    reasoning_from_signature,
)
from adk_mesh.sessions import InMemorySessionService
from adk_mesh.testing.fake_providers import (
    ErrorReply,
    RawReply,
    RecordedRequest,
    ScriptedToolCall,
    ScriptedTurn,
)
from adk_mesh.testing.fake_responses import (
    FakeOpenAIResponses,
    ResponsesCodeRun,
    ResponsesTurn,
    ResponsesWebSearch,
    encrypt_reasoning,
)
from adk_mesh.types import (
    CodeExecution,
    CodeExecutionOutcome,
    FinishReason,
    GroundingMetadata,
    LlmResponse,
    Part,
    ToolDeclaration,
)

STREAMS = pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])

WEATHER = ToolDeclaration(
    name="get_weather",
    description="The weather in a city.",
    parameters_schema={"type": "object", "properties": {"city": {"type": "string"}}},
)


async def run(
    server: FakeOpenAIResponses, request: LlmRequest, *, stream: bool, **kwargs: Any
) -> list[LlmResponse]:
    async with server.make_model(**kwargs) as model:
        return [r async for r in model.generate_content(request, stream=stream)]


def user(text: str, **kwargs: Any) -> LlmRequest:
    return LlmRequest(contents=[Content.from_text("user", text)], **kwargs)


def grounding_of(response: LlmResponse) -> GroundingMetadata:
    assert response.grounding_metadata is not None
    return GroundingMetadata.model_validate(response.grounding_metadata)


# --------------------------------------------------------------------------- the request


async def test_a_streamed_text_turn_and_the_request_it_sends() -> None:
    async with FakeOpenAIResponses(ScriptedTurn(text=["Hel", "lo"], write_size=5)) as server:
        responses = await run(
            server,
            user("hi", system_instruction="Be brief."),
            stream=True,
            reasoning_effort="low",
        )

    *partials, final = responses
    assert [p.content.text for p in partials if p.content] == ["Hel", "lo"]
    assert all(p.partial for p in partials)
    assert final.turn_complete and final.content is not None
    assert final.content.text == "Hello"
    assert final.finish_reason is FinishReason.STOP
    assert final.model_version == "gpt-5-mini"
    (request,) = server.requests
    assert request.path == "/v1/responses"
    assert request.headers["authorization"] == "Bearer test-openai-key"
    assert request.json() == {
        "model": "gpt-5-mini",
        "input": [{"role": "user", "content": "hi"}],
        "store": False,
        "instructions": "Be brief.",
        "include": ["reasoning.encrypted_content"],
        "reasoning": {"effort": "low"},
        "stream": True,
    }


async def test_a_model_that_does_not_reason_is_not_asked_for_encrypted_reasoning() -> None:
    async with FakeOpenAIResponses(ScriptedTurn(text="ok"), ScriptedTurn(text="x")) as server:
        await run(server, user("hi"), stream=False, model="gpt-4.1")
        assert "include" not in server.requests[0].json()

        # Forced, it is asked for, and the API refuses it for that model.
        with pytest.raises(ModelRequestError) as caught:
            await run(server, user("hi"), stream=False, model="gpt-4.1", encrypted_reasoning=True)

    assert caught.value.status_code == 400
    assert "Encrypted content is not supported with this model." in caught.value.message


@pytest.mark.parametrize(
    ("model", "reasons"),
    [
        ("gpt-5-mini", True),
        ("gpt-5.1", True),
        ("o3", True),
        ("o4-mini", True),
        ("codex-mini-latest", True),
        ("gpt-5-chat-latest", False),
        ("gpt-4.1", False),
        ("gpt-4o-mini", False),
        ("gpt-oss-20b", False),
    ],
)
def test_which_models_are_reasoning_models(model: str, reasons: bool) -> None:
    assert is_reasoning_model(model) is reasons


async def test_config_maps_to_the_api_and_what_it_lacks_is_said() -> None:
    config = GenerateContentConfig(
        temperature=0.2, top_p=0.9, max_output_tokens=64, seed=7, top_k=3
    )
    async with FakeOpenAIResponses(ScriptedTurn(text="ok")) as server:
        await run(server, user("hi", config=config), stream=False)
        body = server.requests[0].json()
        assert (body["temperature"], body["top_p"], body["max_output_tokens"]) == (0.2, 0.9, 64)
        assert "seed" not in body and "top_k" not in body  # the API has neither

        stop = GenerateContentConfig(stop_sequences=["END"])
        with pytest.raises(ModelError, match="no stop sequences"):
            await run(server, user("hi", config=stop), stream=False)

    assert len(server.requests) == 1  # refused before anything was sent


async def test_a_value_the_api_refuses_comes_back_with_its_message() -> None:
    config = GenerateContentConfig(max_output_tokens=10)
    async with FakeOpenAIResponses() as server:
        with pytest.raises(ModelRequestError) as caught:
            await run(server, user("hi", config=config), stream=True)

    assert caught.value.status_code == 400
    assert "Expected a value >= 16, but got 10 instead." in caught.value.message


async def test_media_parts_become_input_images_and_files() -> None:
    request = LlmRequest(
        contents=[
            Content.from_parts(
                "user",
                Part.from_text("compare"),
                Part.from_inline_data("image/png", b"\x89PNG"),
                Part.from_file_data("image/jpeg", "https://example.com/a.jpg"),
                Part.from_inline_data("application/pdf", b"%PDF-1.7"),
                Part.from_file_data("application/pdf", "https://example.com/r.pdf"),
                Part.from_inline_data("text/csv", b"a,b\n1,2"),
            )
        ]
    )
    async with FakeOpenAIResponses(ScriptedTurn(text="ok")) as server:
        await run(server, request, stream=False)

    (item,) = server.requests[0].json()["input"]
    assert item["content"] == [
        {"type": "input_text", "text": "compare"},
        {"type": "input_image", "image_url": "data:image/png;base64,iVBORw==", "detail": "auto"},
        {"type": "input_image", "image_url": "https://example.com/a.jpg", "detail": "auto"},
        {
            "type": "input_file",
            "filename": "document-0-3.pdf",
            "file_data": "data:application/pdf;base64,JVBERi0xLjc=",
        },
        {"type": "input_file", "file_url": "https://example.com/r.pdf"},
        {"type": "input_text", "text": "a,b\n1,2"},
    ]


def test_openai_responses_resolves_with_the_openai_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)

    model = resolve_model("openai-responses/o4-mini")

    assert isinstance(model, OpenAIResponsesModel)
    assert model.base_url == "http://127.0.0.1:9/v1"
    assert model.supports_builtin_tool(BuiltinTool.WEB_SEARCH)
    assert not model.supports_builtin_tool(BuiltinTool.GOOGLE_SEARCH)


# --------------------------------------------------------------------------- function calls


@STREAMS
async def test_a_function_call_round_trip(stream: bool) -> None:
    args = {"city": "Zürich"}
    turns = [
        ScriptedTurn(
            text="Let me check.",
            tool_calls=[ScriptedToolCall("get_weather", args, id="call_zrh")],
            argument_chunks=4,
        ),
        ScriptedTurn(text="Sunny."),
    ]
    async with FakeOpenAIResponses(*turns) as server:
        first = await run(server, user("Weather?", tools=[WEATHER]), stream=stream)
        model_turn = first[-1].content
        assert model_turn is not None
        assert first[-1].finish_reason is FinishReason.TOOL_CALLS
        (call,) = model_turn.function_calls
        assert (call.name, call.args, call.id) == ("get_weather", args, "call_zrh")

        followup = LlmRequest(
            tools=[WEATHER],
            contents=[
                Content.from_text("user", "Weather?"),
                model_turn,
                Content.from_parts(
                    "user", Part.from_function_response("get_weather", {"sky": "sun"}, id=call.id)
                ),
            ],
        )
        second = await run(server, followup, stream=stream)

    assert second[-1].content is not None and second[-1].content.text == "Sunny."
    assert server.refused == []
    first_body, second_body = (request.json() for request in server.requests)
    assert first_body["tools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": WEATHER.parameters_schema,
            "strict": False,  # not closed: strict mode would refuse it
        }
    ]
    assert second_body["input"][1:] == [
        {"role": "assistant", "content": "Let me check."},
        {
            "type": "function_call",
            "call_id": "call_zrh",
            "name": "get_weather",
            "arguments": '{"city":"Zürich"}',
        },
        {"type": "function_call_output", "call_id": "call_zrh", "output": '{"sky":"sun"}'},
    ]


async def test_an_output_that_answers_no_call_is_refused_as_the_api_refuses_it() -> None:
    request = LlmRequest(
        contents=[
            Content.from_text("user", "hi"),
            Content.from_parts("tool", Part.from_function_response("f", {"ok": 1}, id="call_x")),
        ]
    )
    async with FakeOpenAIResponses(ScriptedTurn(text="never")) as server:
        with pytest.raises(ModelRequestError) as caught:
            await run(server, request, stream=False)

    assert caught.value.status_code == 400
    assert (
        "No tool call found for function call output with call_id call_x." in caught.value.message
    )


# --------------------------------------------------------------------------- reasoning


@STREAMS
async def test_reasoning_items_are_carried_to_the_next_turn(stream: bool) -> None:
    turns = [
        ScriptedTurn(
            thoughts=["The user wants ", "the weather."],
            tool_calls=[ScriptedToolCall("get_weather", {"city": "Lima"}, id="call_lima")],
        ),
        ScriptedTurn(text="Warm."),
    ]
    async with FakeOpenAIResponses(*turns) as server:
        first = await run(
            server,
            user("Weather in Lima?", tools=[WEATHER]),
            stream=stream,
            reasoning_summary="auto",
        )
        model_turn = first[-1].content
        assert model_turn is not None
        thought, call_part = model_turn.parts
        assert call_part.function_call is not None
        assert thought.thought and thought.text == "The user wants the weather."
        assert thought.thought_signature is not None
        assert thought.thought_signature.startswith(SIGNATURE_MARK)
        if stream:
            thoughts = [p.content.parts[0] for p in first[:-1] if p.content]
            assert [(t.text, t.thought) for t in thoughts] == [
                ("The user wants ", True),
                ("the weather.", True),
            ]

        followup = LlmRequest(
            tools=[WEATHER],
            contents=[
                Content.from_text("user", "Weather in Lima?"),
                model_turn,
                Content.from_parts(
                    "tool", Part.from_function_response("get_weather", {"t": 24}, id="call_lima")
                ),
            ],
        )
        await run(server, followup, stream=stream)

    assert server.refused == []  # the encrypted content came back as issued
    sent = server.requests[1].json()["input"]
    assert sent[1] == {
        "type": "reasoning",
        "id": "rs_fake_0",
        "summary": [{"type": "summary_text", "text": "The user wants the weather."}],
        "encrypted_content": encrypt_reasoning("rs_fake_0", "The user wants the weather."),
    }
    assert sent[2]["type"] == "function_call" and sent[3]["type"] == "function_call_output"


async def test_an_agent_carries_reasoning_items_across_its_tool_loop() -> None:
    """The LlmAgent keeps the thought part (with its signature) in the session: the second
    model call of the turn sends the reasoning item back before its call."""

    def get_weather(city: str) -> dict[str, Any]:
        """The weather in a city."""
        return {"city": city, "temp_c": 24}

    turns = [
        ResponsesTurn(
            reasoning_item=True,
            tool_calls=[ScriptedToolCall("get_weather", {"city": "Lima"}, id="call_lima")],
        ),
        ScriptedTurn(text="It is 24 °C in Lima."),
    ]
    async with FakeOpenAIResponses(*turns) as server, server.make_model() as model:
        agent = LlmAgent(name="weather", model=model, tools=[get_weather])
        sessions = InMemorySessionService()
        runner = Runner(agent=agent, app_name="app", session_service=sessions)
        session = await sessions.create_session(app_name="app", user_id="u")
        events: list[Event] = [
            event
            async for event in runner.run(
                user_id="u",
                session_id=session.id,
                new_message=Content.from_text("user", "Weather in Lima?"),
                run_config=RunConfig(streaming_mode=StreamingMode.SSE),
            )
        ]

    assert events[-1].text == "It is 24 °C in Lima."
    assert server.refused == []
    second = server.requests[1].json()["input"]
    assert [item.get("type", "message") for item in second] == [
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    assert second[1]["encrypted_content"] == encrypt_reasoning("rs_fake_0", "")
    assert second[1]["summary"] == []


def test_only_this_providers_reasoning_goes_back_and_only_with_what_followed_it() -> None:
    model = OpenAIResponsesModel("gpt-5-mini", api_key="sk-test")
    ours = Part(
        text="",
        thought=True,
        thought_signature=SIGNATURE_MARK + b'{"id":"rs_1","summary":[],"encrypted_content":"e"}',
    )
    gemini_thought = Part(text="hmm", thought=True, thought_signature=b"\x01gemini-signature")
    request = LlmRequest(
        contents=[
            Content.from_text("user", "a"),
            Content.from_parts("model", gemini_thought, ours, Part.from_text("answer")),
            Content.from_text("user", "b"),
            # A turn cut short after its reasoning: nothing followed it, so it cannot go back.
            Content.from_parts("model", ours),
            Content.from_text("user", "c"),
        ]
    )

    body = model._build_request(request, stream=False).body

    assert body["input"] == [
        {"role": "user", "content": "a"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e"},
        {"role": "assistant", "content": "answer"},
        {"role": "user", "content": "b"},
        {"role": "user", "content": "c"},
    ]
    assert reasoning_from_signature(b"\x01gemini-signature") is None


async def test_reasoning_content_that_was_tampered_with_is_refused() -> None:
    forged = (
        SIGNATURE_MARK
        + json.dumps(
            {"id": "rs_1", "summary": [], "encrypted_content": "gAAAAAnot-issued-here"}
        ).encode()
    )
    request = LlmRequest(
        contents=[
            Content.from_text("user", "a"),
            Content.from_parts(
                "model", Part(text="", thought=True, thought_signature=forged), Part(text="b")
            ),
            Content.from_text("user", "c"),
        ]
    )
    async with FakeOpenAIResponses(ScriptedTurn(text="never")) as server:
        with pytest.raises(ModelRequestError) as caught:
            await run(server, request, stream=True)

    assert "The encrypted content for item rs_1 could not be verified." in caught.value.message
    assert caught.value.metadata.get("error_type") == "invalid_request_error"


# --------------------------------------------------------------------------- web search


@STREAMS
async def test_web_search_with_citations_becomes_grounding(stream: bool) -> None:
    text = ["Café prices rose ", "in Lisbon (Público).", " Rents too."]
    whole = "".join(text)
    first_cite = whole.index("in Lisbon")
    turn = ResponsesTurn(
        text=text,
        web_searches=[
            ResponsesWebSearch(
                "lisbon cafe prices",
                [("https://publico.pt/a", "Público"), ("https://example.org/b", "B")],
            ),
            ResponsesWebSearch("lisbon rents"),
        ],
        url_citations=[
            {
                "url": "https://publico.pt/a",
                "title": "Público",
                "start_index": first_cite,
                "end_index": first_cite + len("in Lisbon (Público)."),
            },
            {
                "url": "https://news.example/rents",
                "title": "Rents",
                "start_index": whole.index("Rents"),
                "end_index": len(whole),
            },
        ],
    )
    search_request = LlmRequest(
        contents=[
            # An earlier model turn: only its text goes back.
            Content.from_text("user", "News?"),
            Content.from_text("model", "Here is the news."),
            Content.from_text("user", "Prices in Lisbon?"),
        ],
        tools=[WEATHER],
        builtin_tools=[BuiltinTool.WEB_SEARCH],
    )
    async with FakeOpenAIResponses(turn) as server:
        responses = await run(
            server, search_request, stream=stream, web_search_options={"search_context_size": "low"}
        )

    body = server.requests[0].json()
    assert body["tools"][1] == {"type": "web_search", "search_context_size": "low"}
    assert body["include"] == ["web_search_call.action.sources", "reasoning.encrypted_content"]
    assert body["input"][1] == {"role": "assistant", "content": "Here is the news."}
    final = responses[-1]
    assert final.content is not None and final.content.text == whole
    assert final.content.function_calls == []
    grounding = grounding_of(final)
    assert grounding.queries == ["lisbon cafe prices", "lisbon rents"]
    assert [(s.uri, s.title) for s in grounding.sources] == [
        ("https://publico.pt/a", "Público"),
        ("https://example.org/b", None),
        ("https://news.example/rents", "Rents"),
    ]
    cited, rents = grounding.citations
    assert cited.source_indices == [0] and rents.source_indices == [2]
    assert cited.text == "in Lisbon (Público)."
    assert whole[cited.start_index : cited.end_index] == cited.text
    assert rents.text == "Rents too."


async def test_citation_offsets_follow_the_answer_text_across_output_texts() -> None:
    """A citation's offsets are within its own output_text; in the response they are
    offsets into the whole answer (``content.text``), reasoning left out."""
    response = {
        "id": "resp_1",
        "object": "response",
        "status": "completed",
        "model": "gpt-5-mini",
        "output": [
            {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "e"},
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [
                    {"type": "output_text", "text": "Añejo. ", "annotations": []},
                    {
                        "type": "output_text",
                        "text": "See 🌍 here.",
                        "annotations": [
                            {
                                "type": "url_citation",
                                "url": "https://w.example",
                                "title": "W",
                                "start_index": 4,
                                "end_index": 5,
                            },
                            {"type": "url_citation", "url": "https://w.example", "start_index": 99},
                            {"type": "file_citation", "file_id": "f", "index": 0},
                        ],
                    },
                ],
            },
        ],
        "usage": {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7},
    }
    async with FakeOpenAIResponses(RawReply(body=json.dumps(response).encode())) as server:
        (final,) = await run(server, user("hi"), stream=False)

    assert final.content is not None and final.content.text == "Añejo. See 🌍 here."
    placed, unplaced = grounding_of(final).citations
    assert final.content.text[placed.start_index : placed.end_index] == "🌍"
    assert (placed.start_index, placed.end_index, placed.source_indices) == (11, 12, [0])
    assert unplaced.start_index is None and unplaced.source_indices == [0]


# --------------------------------------------------------------------------- code interpreter

CHART = "data:image/png;base64,iVBORw0KGgo="


@STREAMS
async def test_code_interpreter_runs_become_grounding(stream: bool) -> None:
    turn = ResponsesTurn(
        text=["The mean is ", "4.5."],
        code_runs=[
            ResponsesCodeRun(
                "import statistics\nprint(statistics.mean([3, 6]))\nplot()",
                "4.5\n",
                images=[CHART],
            ),
            ResponsesCodeRun("1 / 0", "ZeroDivisionError: division by zero\n", status="failed"),
            ResponsesCodeRun("while True: pass", status="incomplete"),
        ],
    )
    request = user(
        "Mean of 3 and 6?",
        tools=[WEATHER],
        builtin_tools=[BuiltinTool.CODE_EXECUTION, BuiltinTool.WEB_SEARCH],
    )
    async with FakeOpenAIResponses(turn) as server:
        responses = await run(
            server, request, stream=stream, code_interpreter_container={"memory_limit": "4g"}
        )

    body = server.requests[0].json()
    assert body["tools"][1:] == [
        {"type": "code_interpreter", "container": {"type": "auto", "memory_limit": "4g"}},
        {"type": "web_search"},
    ]
    assert body["include"] == [
        "code_interpreter_call.outputs",
        "web_search_call.action.sources",
        "reasoning.encrypted_content",
    ]
    *partials, final = responses
    assert final.content is not None and final.content.text == "The mean is 4.5."
    assert final.content.function_calls == []
    assert final.finish_reason is FinishReason.STOP
    # The logs are the output; the chart (an image output) is not carried.
    assert grounding_of(final) == GroundingMetadata(
        code_executions=[
            CodeExecution(
                code="import statistics\nprint(statistics.mean([3, 6]))\nplot()",
                language="python",
                outcome=CodeExecutionOutcome.OK,
                output="4.5\n",
            ),
            CodeExecution(
                code="1 / 0",
                language="python",
                outcome=CodeExecutionOutcome.FAILED,
                output="ZeroDivisionError: division by zero\n",
            ),
            CodeExecution(code="while True: pass", language="python"),
        ]
    )
    if stream:
        assert [p.content.text for p in partials if p.content] == ["The mean is ", "4.5."]
        assert all(p.grounding_metadata is None for p in partials)


async def test_the_fake_sends_code_interpreter_outputs_only_when_included() -> None:
    run_ = ResponsesCodeRun("print(2)", "2\n", images=[CHART])
    tools = [{"type": "code_interpreter", "container": {"type": "auto"}}]
    async with FakeOpenAIResponses(ResponsesTurn(code_runs=[run_], text="2")) as server:
        server.enqueue(ResponsesTurn(code_runs=[run_], text="2"))
        bare = await post(server, {"model": "gpt-5", "input": "hi", "tools": tools})
        included = await post(
            server,
            {
                "model": "gpt-5",
                "input": "hi",
                "tools": tools,
                "include": ["code_interpreter_call.outputs"],
            },
        )

    assert bare.json()["output"][0]["outputs"] is None
    call = included.json()["output"][0]
    assert call == {
        "id": "ci_fake_0",
        "type": "code_interpreter_call",
        "status": "completed",
        "container_id": "cntr_fake_0",
        "code": "print(2)",
        "outputs": [{"type": "logs", "logs": "2\n"}, {"type": "image", "url": CHART}],
    }


def test_the_code_interpreter_container_is_always_auto() -> None:
    with pytest.raises(ConfigError, match="code_interpreter_container must not set 'type'"):
        OpenAIResponsesModel("gpt-5", api_key="k", code_interpreter_container={"type": "x"})


# --------------------------------------------------------------------------- usage, finish


@STREAMS
async def test_usage_counts_reasoning_and_cached_tokens(stream: bool) -> None:
    turn = ResponsesTurn(
        text="ok", input_tokens=120, output_tokens=40, reasoning_tokens=32, cached_tokens=64
    )
    async with FakeOpenAIResponses(turn) as server:
        responses = await run(server, user("hi"), stream=stream)

    usage = responses[-1].usage_metadata
    assert usage is not None
    assert (
        usage.prompt_token_count,
        usage.candidates_token_count,
        usage.total_token_count,
        usage.cached_content_token_count,
        usage.thoughts_token_count,
    ) == (120, 40, 160, 64, 32)


@STREAMS
@pytest.mark.parametrize(
    ("finish", "reason"),
    [("length", FinishReason.MAX_TOKENS), ("safety", FinishReason.SAFETY)],
)
async def test_an_incomplete_response_says_why(
    stream: bool, finish: Any, reason: FinishReason
) -> None:
    async with FakeOpenAIResponses(ScriptedTurn(text=["cut ", "off"], finish=finish)) as server:
        responses = await run(server, user("hi"), stream=stream)

    assert responses[-1].finish_reason is reason
    assert responses[-1].content is not None and responses[-1].content.text == "cut off"


async def test_a_stream_whose_completed_response_has_no_output_is_built_from_its_events() -> None:
    """Some compatible servers send ``response.completed`` without the output: the items the
    events built are the answer."""
    async with FakeOpenAIResponses() as server:
        turn = ResponsesTurn(
            text=["a", "b"],
            tool_calls=[ScriptedToolCall("f", {"x": 1}, id="call_1")],
            code_runs=[ResponsesCodeRun("print('a' + 'b')")],
        )
        records = server.render_stream(turn, _recorded(server, {"model": "m", "stream": True}))
        last = json.loads(records[-1].split(b"data: ", 1)[1])
        last["response"]["output"] = []
        records[-1] = b"event: response.completed\ndata: " + json.dumps(last).encode() + b"\n\n"
        # ... nor the items' done events: the deltas are all there is.
        records = [r for r in records if b"response.output_item.done" not in r]
        server.enqueue(RawReply(chunks=records, content_type="text/event-stream"))
        responses = await run(server, user("hi"), stream=True)

    final = responses[-1]
    assert final.content is not None and final.content.text == "ab"
    assert final.content.function_calls[0].args == {"x": 1}
    assert final.finish_reason is FinishReason.TOOL_CALLS
    # The code came in deltas; the call never said how it ended.
    assert grounding_of(final).code_executions == [
        CodeExecution(code="print('a' + 'b')", language="python")
    ]


def _recorded(server: FakeOpenAIResponses, body: dict[str, Any]) -> RecordedRequest:
    return RecordedRequest("POST", "/v1/responses", {}, {}, json.dumps(body).encode())


# --------------------------------------------------------------------------- errors


@STREAMS
@pytest.mark.parametrize(
    ("status", "cls"),
    [(429, ModelRateLimitError), (500, ModelError), (400, ModelRequestError)],
)
async def test_http_errors_map_to_the_model_errors(
    stream: bool, status: int, cls: type[ModelError], retry: RetryPolicy, sleeps: list[float]
) -> None:
    replies = [ErrorReply(status, f"failed with {status}")] * retry.max_attempts
    async with FakeOpenAIResponses(*replies) as server:
        with pytest.raises(ModelError) as caught:
            await run(server, user("hi"), stream=stream, retry=retry)

    assert type(caught.value) is cls
    assert caught.value.status_code == status
    assert f"failed with {status}" in caught.value.message
    assert len(server.requests) == (1 if status == 400 else retry.max_attempts)


@STREAMS
async def test_a_failed_response_is_the_error_its_code_stands_for(stream: bool) -> None:
    turn = ResponsesTurn(failure=("rate_limit_exceeded", "Rate limit reached for gpt-5-mini"))
    async with FakeOpenAIResponses(turn) as server:
        with pytest.raises(ModelRateLimitError) as caught:
            await run(server, user("hi"), stream=stream)

    assert caught.value.status_code == 429
    assert "Rate limit reached for gpt-5-mini" in caught.value.message
    assert caught.value.metadata["error_type"] == "rate_limit_exceeded"


async def test_an_error_event_mid_stream_is_a_model_error_after_the_partials() -> None:
    async with FakeOpenAIResponses() as server:
        request = _recorded(server, {"model": "m", "stream": True})
        records = server.render_stream(ScriptedTurn(text=["one ", "two"]), request)
        deltas = [r for r in records if b"output_text.delta" in r]
        chunks = [*records[:2], *deltas, server.render_stream_error("The server had an error")]
        server.enqueue(RawReply(chunks=chunks, content_type="text/event-stream"))
        seen: list[LlmResponse] = []
        with pytest.raises(ModelError) as caught:
            async with server.make_model() as model:
                async for response in model.generate_content(user("hi"), stream=True):
                    seen.append(response)

    assert [r.content.text for r in seen if r.content] == ["one ", "two"]
    assert type(caught.value) is ModelError  # server_error: retryable
    assert caught.value.status_code == 500
    assert "The server had an error (server_error)" in caught.value.message


# --------------------------------------------------------------------------- the fake itself


async def post(server: FakeOpenAIResponses, body: Any) -> httpx.Response:
    async with httpx.AsyncClient(base_url=server.url) as client:
        return await client.post("/v1/responses", json=body)


@pytest.mark.parametrize(
    ("body", "status", "message", "param"),
    [
        (
            {"model": "gpt-5", "input": "hi", "seed": 1},
            400,
            "Unknown parameter: 'seed'.",
            "seed",
        ),
        (
            {
                "model": "gpt-5",
                "store": False,
                "input": [
                    {"role": "user", "content": "hi"},
                    {
                        "type": "reasoning",
                        "id": "rs_1",
                        "summary": [],
                        "encrypted_content": encrypt_reasoning("rs_1", ""),
                        "status": "completed",
                    },
                    {"role": "assistant", "content": "ok"},
                ],
            },
            400,
            "Unknown parameter: 'input[1].status'.",
            "input[1].status",
        ),
        (
            {
                "model": "gpt-5",
                "store": False,
                "input": [{"type": "reasoning", "id": "rs_2", "summary": []}],
            },
            404,
            "Item with id 'rs_2' not found. Items are not persisted when `store` is set to false.",
            "input",
        ),
        (
            {
                "model": "gpt-5",
                "store": False,
                "input": [{"id": "msg_1", "role": "assistant", "content": "hi"}],
            },
            404,
            "Item with id 'msg_1' not found.",
            "input",
        ),
        (
            {
                "model": "gpt-5",
                "input": [
                    {
                        "type": "reasoning",
                        "id": "rs_3",
                        "summary": [],
                        "encrypted_content": encrypt_reasoning("rs_3", ""),
                    },
                    {"role": "user", "content": "hi"},
                ],
            },
            400,
            "Item 'rs_3' of type 'reasoning' was provided without its required following item.",
            "input",
        ),
        (
            {
                "model": "gpt-5",
                "input": [
                    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                    {"role": "user", "content": "hi"},
                ],
            },
            400,
            "No tool output found for function call c1.",
            "input",
        ),
        (
            {
                "model": "gpt-5",
                "input": [{"type": "function_call", "call_id": "c1", "name": "f", "arguments": {}}],
            },
            400,
            "Invalid type for 'input[0].arguments': expected a string, but got an object instead.",
            "input[0].arguments",
        ),
        (
            {"model": "gpt-5", "input": [{"role": "tool", "content": "x"}]},
            400,
            "Invalid value: 'tool'. Supported values are: 'assistant', 'system', 'developer', "
            "and 'user'.",
            "input[0].role",
        ),
        (
            {
                "model": "gpt-5",
                "input": "hi",
                "tools": [
                    {
                        "type": "function",
                        "name": "f",
                        "parameters": {"type": "object", "properties": {"a": {}}},
                    }
                ],
            },
            400,
            "Invalid schema for function 'f'",
            "tools[0].parameters",
        ),
        (
            {"model": "gpt-5", "input": "hi", "tools": [{"type": "google_search"}]},
            400,
            "Invalid value: 'google_search'.",
            "tools[0].type",
        ),
        (
            {"model": "gpt-5", "input": "hi", "tools": [{"type": "code_interpreter"}]},
            400,
            "Missing required parameter: 'tools[0].container'.",
            "tools[0].container",
        ),
        (
            {
                "model": "gpt-5",
                "input": "hi",
                "tools": [{"type": "code_interpreter", "container": {"type": "fresh"}}],
            },
            400,
            "Invalid value: 'fresh'. Supported values are: 'auto'.",
            "tools[0].container.type",
        ),
        (
            {
                "model": "gpt-5",
                "input": "hi",
                "tools": [
                    {"type": "code_interpreter", "container": {"type": "auto", "memory_limit": 4}}
                ],
            },
            400,
            "Invalid value: '4'.",
            "tools[0].container.memory_limit",
        ),
        (
            {
                "model": "gpt-5",
                "store": False,
                "input": [
                    {"role": "user", "content": "hi"},
                    {
                        "type": "code_interpreter_call",
                        "id": "ci_1",
                        "status": "completed",
                        "container_id": "cntr_1",
                        "code": "print(1)",
                        "outputs": None,
                    },
                    {"role": "assistant", "content": "1"},
                ],
            },
            404,
            "Item with id 'ci_1' not found.",
            "input",
        ),
        (
            {
                "model": "gpt-5",
                "input": [{"type": "code_interpreter_call", "id": "ci_1", "code": "print(1)"}],
            },
            400,
            "Missing required parameter: 'input[0].status'.",
            "input[0].status",
        ),
    ],
    ids=[
        "unknown-parameter",
        "output-only-status",
        "reasoning-without-encrypted-content",
        "stored-item-by-id",
        "reasoning-without-following-item",
        "unanswered-call",
        "arguments-not-a-string",
        "tool-role",
        "strict-by-default",
        "unknown-tool",
        "code-interpreter-without-container",
        "code-interpreter-container-type",
        "code-interpreter-memory-limit",
        "code-interpreter-call-not-stored",
        "code-interpreter-call-incomplete",
    ],
)
async def test_the_fake_refuses_what_the_api_refuses(
    body: dict[str, Any], status: int, message: str, param: str
) -> None:
    async with FakeOpenAIResponses(ScriptedTurn(text="never sent")) as server:
        response = await post(server, body)

    assert response.status_code == status
    error = response.json()["error"]
    assert message in error["message"]
    assert error["param"] == param
    assert error["type"] == "invalid_request_error"
    assert len(server.refused) == 1


async def test_the_fake_takes_a_well_formed_stateless_conversation() -> None:
    body = {
        "model": "gpt-5",
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [],
                "encrypted_content": encrypt_reasoning("rs_1", ""),
            },
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "{}"},
        ],
        "tools": [
            {
                "type": "function",
                "name": "f",
                "parameters": {"type": "object", "properties": {}},
                "strict": False,
            },
            {"type": "web_search"},
            {"type": "code_interpreter", "container": {"type": "auto", "memory_limit": "1g"}},
        ],
    }
    async with FakeOpenAIResponses(ScriptedTurn(text="fine")) as server:
        response = await post(server, body)

    assert response.status_code == 200
    answer = response.json()
    assert answer["status"] == "completed"
    assert answer["output"][0]["content"][0]["text"] == "fine"
    assert server.refused == []
