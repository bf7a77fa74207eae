"""Gemini's built-in tools beside function tools, as the real API takes them.

Before Gemini 3 the API refuses the mix (400 "Tool use with function calling is unsupported
by the model."), so the adapter refuses it before sending anything, saying how to fix it.
Gemini 3+ takes it with ``toolConfig.includeServerSideToolInvocations`` and then returns the
built-in tools' calls and responses (``toolCall`` / ``toolResponse`` parts) which must go
back in the model's turn on later requests: they become ``Part.server_tool_call`` /
``server_tool_response``, carried by the codec, the session stores, a RemoteAgent hop and the
gateway's JSON, and left out by every other provider. All against the fake Gemini server
(which refuses as the API does) and real gRPC servers on 127.0.0.1.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from adk_mesh._memory import event_bytes
from adk_mesh.agents.history import build_contents
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.codec import abridged_event, part_from_proto, part_to_proto
from adk_mesh.contexts import RunConfig, StreamingMode
from adk_mesh.errors import ModelRequestError
from adk_mesh.mesh import AgentServer, RemoteAgent
from adk_mesh.models import LlmRequest
from adk_mesh.models.gemini import mixes_builtin_and_function_tools
from adk_mesh.runner import Runner
from adk_mesh.sessions._common import decodes_to_itself
from adk_mesh.sessions.base import SessionService
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.sessions.sqlite import SqliteSessionService
from adk_mesh.telemetry._spans import _messages_json
from adk_mesh.testing.fake_providers import (
    FakeAnthropic,
    FakeGemini,
    FakeOllama,
    FakeOpenAI,
    FakeProviderServer,
    ScriptedSource,
    ScriptedToolCall,
    ScriptedTurn,
    ScriptedUrlFetch,
    ScriptedWebSearch,
)
from adk_mesh.testing.fake_responses import FakeOpenAIResponses
from adk_mesh.tools import CodeExecutionTool, GoogleSearchTool, UrlContextTool, WebSearchTool
from adk_mesh.types import Content, Event, LlmResponse, Part
from gateway._json import part_from_json, part_to_json

APP, USER = "mix", "ada"
GEMINI_3 = "gemini-3-flash-preview"
SEARCH = ScriptedWebSearch("population of Oslo", [ScriptedSource("https://ssb.example/oslo")])
FUNCTION_SIGNATURE = b"function-call-signature"


def population(city: str) -> dict[str, Any]:
    """The population of a city from the local register."""
    return {"city": city, "population": 717_710}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def search_then_call() -> ScriptedTurn:
    """Gemini searches (server side), then asks for the function tool, signing the call."""
    return ScriptedTurn(
        native=[SEARCH],
        tool_calls=[ScriptedToolCall("population", {"city": "Oslo"}, id="call-1")],
        thought_signature=FUNCTION_SIGNATURE,
    )


def circulated_model_turn(call_id: str) -> dict[str, Any]:
    """The model turn of :func:`search_then_call` as the next request must carry it back."""
    tool = {"id": call_id, "toolType": "GOOGLE_SEARCH_WEB"}
    return {
        "role": "model",
        "parts": [
            {
                "toolCall": {**tool, "args": {"queries": ["population of Oslo"]}},
                "thoughtSignature": b64(f"server-tool-signature:{call_id}".encode()),
            },
            {
                "toolResponse": {
                    **tool,
                    "response": {"results": [{"uri": "https://ssb.example/oslo", "title": ""}]},
                }
            },
            {
                "functionCall": {"name": "population", "args": {"city": "Oslo"}, "id": "call-1"},
                "thoughtSignature": b64(FUNCTION_SIGNATURE),
            },
        ],
    }


async def run_turn(
    agent: Any, sessions: SessionService, session_id: str, text: str, *, stream: bool = False
) -> list[Event]:
    runner = Runner(agent=agent, app_name=APP, session_service=sessions)
    mode = StreamingMode.SSE if stream else StreamingMode.NONE
    return [
        event
        async for event in runner.run(
            user_id=USER,
            session_id=session_id,
            new_message=Content.from_text("user", text),
            run_config=RunConfig(streaming_mode=mode),
        )
    ]


# --- the model-name rule and the refusal ---------------------------------------------------


@pytest.mark.parametrize(
    ("model", "mixes"),
    [
        ("gemini-3-pro-preview", True),
        ("gemini-3.1-flash", True),
        ("models/gemini-3-flash-preview", True),
        ("gemini-10-ultra", True),
        ("gemini-2.5-flash", False),
        ("gemini-2.0-flash-001", False),
        ("gemini-1.5-pro", False),
        ("gemini-flash-latest", False),
        ("gemini-exp-1206", False),
        ("gemma-3-27b-it", False),
    ],
)
def test_only_gemini_3_and_later_take_built_in_tools_beside_functions(
    model: str, mixes: bool
) -> None:
    assert mixes_builtin_and_function_tools(model) is mixes


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_a_gemini_2_mix_is_refused_before_any_request_with_the_fix(stream: bool) -> None:
    async with FakeGemini(ScriptedTurn(text="never"), model="gemini-2.5-flash") as server:
        async with server.make_model() as model:
            agent = LlmAgent(
                name="researcher",
                model=model,
                tools=[WebSearchTool(), UrlContextTool(), population],
            )
            sessions = InMemorySessionService()
            session = await sessions.create_session(app_name=APP, user_id=USER)
            with pytest.raises(ModelRequestError) as raised:
                await run_turn(agent, sessions, session.id, "Oslo?", stream=stream)
    assert server.requests == []
    message = raised.value.message
    assert "gemini model 'gemini-2.5-flash'" in message
    assert "google_search, url_context" in message
    assert "Use a Gemini 3 model, or give the built-in tool its own LlmAgent" in message
    assert "offer that agent through AgentTool" in message
    assert raised.value.metadata["provider"] == "gemini"


@pytest.mark.parametrize("model", ["gemini-2.5-flash", GEMINI_3])
@pytest.mark.parametrize(
    ("tools", "wire_tools"),
    [
        (
            [GoogleSearchTool(), CodeExecutionTool()],
            [{"google_search": {}}, {"code_execution": {}}],
        ),
        ([population], None),
    ],
    ids=["built-in only", "functions only"],
)
async def test_built_in_only_or_functions_only_is_sent_as_before(
    model: str, tools: list[Any], wire_tools: list[dict[str, Any]] | None
) -> None:
    async with FakeGemini(ScriptedTurn(text="Oslo."), model=model) as server:
        async with server.make_model() as gemini:
            agent = LlmAgent(name="researcher", model=gemini, tools=tools)
            sessions = InMemorySessionService()
            session = await sessions.create_session(app_name=APP, user_id=USER)
            events = await run_turn(agent, sessions, session.id, "Oslo?")
    assert events[-1].text == "Oslo."
    body = server.requests[0].json()
    assert "toolConfig" not in body
    if wire_tools is None:
        assert [list(tool) for tool in body["tools"]] == [["functionDeclarations"]]
    else:
        assert body["tools"] == wire_tools
    # Without the flag no toolCall parts come back: the content is the answer alone.
    assert [part.kind for part in events[-1].content.parts] == ["text"]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("model", "flag", "error"),
    [
        ("gemini-2.5-flash", True, "Tool use with function calling is unsupported by the model."),
        (
            GEMINI_3,
            False,
            "Please enable tool_config.include_server_side_tool_invocations to use Built-in "
            "tools with Function calling.",
        ),
    ],
)
async def test_the_fake_refuses_the_mix_as_the_api_does(model: str, flag: bool, error: str) -> None:
    body: dict[str, Any] = {
        "contents": [{"role": "user", "parts": [{"text": "Oslo?"}]}],
        "tools": [{"functionDeclarations": [{"name": "population"}]}, {"google_search": {}}],
    }
    if flag:
        body["toolConfig"] = {"includeServerSideToolInvocations": True}
    async with FakeGemini(ScriptedTurn(text="never")) as server:
        async with httpx.AsyncClient(base_url=server.url) as client:
            answer = await client.post(f"/v1beta/models/{model}:generateContent", json=body)
    assert answer.status_code == 400
    assert answer.json() == {"error": {"code": 400, "message": error, "status": "INVALID_ARGUMENT"}}


# --- Gemini 3: the flag, and the server-side parts' circulation --------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_gemini_3_mix_sends_the_flag_and_circulates_the_server_side_parts(
    stream: bool,
) -> None:
    turns = [search_then_call(), ScriptedTurn(text="Oslo has 717,710 people.")]
    async with FakeGemini(*turns, model=GEMINI_3) as server:
        async with server.make_model() as model:
            agent = LlmAgent(name="researcher", model=model, tools=[WebSearchTool(), population])
            sessions = InMemorySessionService()
            session = await sessions.create_session(app_name=APP, user_id=USER)
            events = await run_turn(agent, sessions, session.id, "Oslo?", stream=stream)

    assert server.refused == []
    first, second = (request.json() for request in server.requests)
    for body in (first, second):
        assert body["toolConfig"] == {"includeServerSideToolInvocations": True}
        assert [list(tool) for tool in body["tools"]] == [
            ["functionDeclarations"],
            ["google_search"],
        ]
    finals = [event for event in events if not event.partial]
    call_event = finals[0]
    assert call_event.content is not None
    assert [part.kind for part in call_event.content.parts] == [
        "server_tool_call",
        "server_tool_response",
        "function_call",
    ]
    server_call = call_event.content.parts[0]
    assert server_call.server_tool_call is not None
    assert server_call.server_tool_call.tool_type == "GOOGLE_SEARCH_WEB"
    assert server_call.thought_signature == b"server-tool-signature:server-1-0"
    # Only the function call ran: the search was Gemini's own.
    assert [call.name for call in call_event.function_calls()] == ["population"]
    assert finals[1].function_responses()[0].response["population"] == 717_710
    assert finals[-1].text == "Oslo has 717,710 people."
    assert second["contents"][1] == circulated_model_turn("server-1-0")
    assert second["contents"][2]["parts"][0]["functionResponse"]["id"] == "call-1"


async def test_a_url_fetch_comes_back_as_its_own_server_side_parts() -> None:
    fetch = ScriptedUrlFetch("https://kommune.example/orsta", "Ørsta kommune")
    turns = [
        ScriptedTurn(native=[fetch], text="Ørsta is small."),
        ScriptedTurn(text="Yes."),
    ]
    async with FakeGemini(*turns, model=GEMINI_3) as server:
        async with server.make_model() as model:
            agent = LlmAgent(name="reader", model=model, tools=[UrlContextTool(), population])
            sessions = InMemorySessionService()
            session = await sessions.create_session(app_name=APP, user_id=USER)
            first = await run_turn(agent, sessions, session.id, "Read the page.")
            await run_turn(agent, sessions, session.id, "Sure?")

    parts = first[-1].content.parts  # type: ignore[union-attr]
    assert [part.kind for part in parts] == ["server_tool_call", "server_tool_response", "text"]
    assert first[-1].text == "Ørsta is small."
    assert first[-1].grounding_metadata is not None
    assert [s.uri for s in first[-1].grounding_metadata.sources] == [fetch.url]
    sent_back = server.requests[1].json()["contents"][1]["parts"]
    assert sent_back[0]["toolCall"] == {
        "id": "server-1-0",
        "toolType": "URL_CONTEXT",
        "args": {"urls": [fetch.url]},
    }
    assert sent_back[1]["toolResponse"]["toolType"] == "URL_CONTEXT"
    assert sent_back[2] == {"text": "Ørsta is small."}


async def test_through_a_remote_agent_and_a_reloaded_sqlite_session(tmp_path: Path) -> None:
    """The served agent's server-side parts cross the hop, are stored in SQLite, and go back
    to Gemini unchanged from the session a new Runner reloads for the next turn."""
    turns = [search_then_call(), ScriptedTurn(text="717,710."), ScriptedTurn(text="Bergen: ?")]
    database = tmp_path / "sessions.db"
    async with FakeGemini(*turns, model=GEMINI_3) as fake, fake.make_model() as model:
        served = LlmAgent(name="researcher", model=model, tools=[WebSearchTool(), population])
        server = AgentServer(served)
        port = await server.start("127.0.0.1:0")
        remote = RemoteAgent("researcher", f"127.0.0.1:{port}")
        try:
            sessions = SqliteSessionService(str(database))
            session = await sessions.create_session(app_name=APP, user_id=USER)
            await run_turn(remote, sessions, session.id, "Oslo?")
            await sessions.close()
            reopened = SqliteSessionService(str(database))
            try:
                await run_turn(remote, reopened, session.id, "And Bergen?")
                stored = await reopened.get_session(
                    app_name=APP, user_id=USER, session_id=session.id
                )
            finally:
                await reopened.close()
        finally:
            await remote.close()
            await server.stop(None)

    assert fake.refused == []
    assert stored is not None
    kinds = [
        [part.kind for part in event.content.parts]
        for event in stored.events
        if event.content is not None
    ]
    assert ["server_tool_call", "server_tool_response", "function_call"] in kinds
    third = fake.requests[2].json()["contents"]
    assert third[1] == circulated_model_turn("server-1-0")
    assert third[-1] == {"role": "user", "parts": [{"text": "And Bergen?"}]}


# --- the new part kinds elsewhere ---------------------------------------------------------------


def deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": True}
    for _ in range(levels - 1):
        value = {"next": value}
    return value


def server_parts(args: dict[str, Any] | None = None) -> list[Part]:
    call = Part.from_server_tool_call("GOOGLE_SEARCH_WEB", args or {"queries": ["q"]}, id="s-1")
    return [
        call.model_copy(update={"thought_signature": b"sig"}),
        Part.from_server_tool_response("GOOGLE_SEARCH_WEB", {"results": []}, id="s-1"),
    ]


@pytest.mark.parametrize("levels", [1, 30], ids=["struct", "too deep for a struct"])
def test_the_codec_round_trips_server_side_parts(levels: int) -> None:
    for part in [*server_parts(deep(levels)), Part.from_server_tool_response("", None)]:
        message = part_to_proto(part)
        assert message.WhichOneof("data") == part.kind
        assert part_from_proto(message) == part
    deep_call = part_to_proto(server_parts(deep(30))[0]).server_tool_call
    if levels == 30:
        assert deep_call.args_json and not deep_call.HasField("args")


def test_a_part_holds_one_kind_and_is_not_a_function_call() -> None:
    with pytest.raises(ValueError, match="exactly one of"):
        Part(text="x", server_tool_call=server_parts()[0].server_tool_call)
    content = Content(role="model", parts=server_parts())
    assert content.function_calls == [] and content.function_responses == []
    event = Event(author="a", llm_response=LlmResponse(content=content))
    assert event.is_final_response()
    assert all(part.is_server_tool for part in content.parts)


def test_abridging_sizes_and_json_checks_know_the_server_side_parts() -> None:
    big = {"text": "x" * 5000}
    content = Content(role="model", parts=server_parts(big))
    event = Event(author="a", llm_response=LlmResponse(content=content))
    abridged = abridged_event(event, max_part_bytes=100).content
    assert abridged is not None
    # The provider reads them verbatim: a pair too large is left out whole, no placeholder.
    assert abridged.parts == []
    assert abridged_event(event, max_part_bytes=10_000).content == content
    small = Event(author="a", llm_response=LlmResponse(content=Content(parts=server_parts())))
    # The estimate counts the 5,000 characters of the call's args (less a small-args event).
    assert event_bytes(event) - event_bytes(small) > 4000
    assert decodes_to_itself(event)
    odd = Content(role="model", parts=server_parts({"pair": (1, 2)}))
    assert not decodes_to_itself(Event(author="a", llm_response=LlmResponse(content=odd)))


def test_spans_record_server_side_parts_apart_from_function_calls() -> None:
    messages = json.loads(_messages_json([Content(role="model", parts=server_parts())]))
    kinds = [part["type"] for part in messages[0]["parts"]]
    assert kinds == ["server_tool_call", "server_tool_call_response"]
    assert messages[0]["parts"][0]["name"] == "GOOGLE_SEARCH_WEB"


def test_another_agents_server_side_parts_are_not_its_context() -> None:
    said = Content(role="model", parts=[*server_parts(), Part.from_text("Oslo.")])
    events = [
        Event(author="user", llm_response=LlmResponse(content=Content.from_text("user", "Q"))),
        Event(author="searcher", llm_response=LlmResponse(content=said)),
    ]
    own = build_contents(events, agent_name="searcher")
    assert own[1] == said
    other = build_contents(events, agent_name="writer")
    assert [part.text for part in other[1].parts] == ["For context:", "[searcher] said: Oslo."]


def test_the_gateway_writes_and_reads_genai_tool_call_and_tool_response() -> None:
    call, response = server_parts()
    written = part_to_json(call)
    assert written == {
        "toolCall": {"id": "s-1", "toolType": "GOOGLE_SEARCH_WEB", "args": {"queries": ["q"]}},
        "thoughtSignature": base64.urlsafe_b64encode(b"sig").decode(),
    }
    assert part_to_json(response) == {
        "toolResponse": {"id": "s-1", "toolType": "GOOGLE_SEARCH_WEB", "response": {"results": []}}
    }
    assert part_from_json(written) == call
    assert part_from_json(part_to_json(response)) == response
    assert part_from_json(
        {"tool_call": {"tool_type": "URL_CONTEXT"}}
    ) == Part.from_server_tool_call("URL_CONTEXT")


# --- other providers leave Gemini's context out -----------------------------------------------


def history_with_server_parts() -> list[Content]:
    model_turn = Content(
        role="model",
        parts=[
            *server_parts(),
            Part.from_text("Let me count."),
            Part.from_function_call("population", {"city": "Oslo"}, id="call-1"),
        ],
    )
    return [
        Content.from_text("user", "Oslo?"),
        model_turn,
        Content.from_parts("user", Part.from_function_response("population", {"n": 1}, "call-1")),
    ]


@pytest.mark.parametrize(
    "fake",
    [FakeOpenAI, FakeOpenAIResponses, FakeAnthropic, FakeOllama],
    ids=["openai", "openai-responses", "anthropic", "ollama"],
)
async def test_other_providers_leave_server_side_parts_out(fake: type[FakeProviderServer]) -> None:
    async with fake(ScriptedTurn(text="717,710.")) as server, server.make_model() as model:
        request = LlmRequest(contents=history_with_server_parts())
        responses = [response async for response in model.generate_content(request)]
    assert responses[-1].content is not None
    assert responses[-1].content.text == "717,710."
    assert server.refused == []
    sent = server.requests[0].body.decode()
    assert "Let me count." in sent and "population" in sent
    assert "GOOGLE_SEARCH_WEB" not in sent and "s-1" not in sent
