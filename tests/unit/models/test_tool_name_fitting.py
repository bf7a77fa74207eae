"""Tool names a provider refuses are sent under a name that fits, and mapped back.

FunctionTool takes Gemini's names (``files.read``, ``ns:tool``); OpenAI (Chat Completions and
Responses) takes ``^[a-zA-Z0-9_-]{1,64}$`` and Anthropic ``^[a-zA-Z0-9_-]{1,128}$``, in the
declarations and in the history's calls. Each adapter sends such a tool under a portable name
(the one McpToolset would give it), the same in the history of earlier turns, and gives the
model's calls the real name back, so the tool runs and the session keeps its real name. The
fakes refuse what the real APIs refuse.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from adk_mesh import Content, Event, LlmAgent, RunConfig, Runner, StreamingMode
from adk_mesh._tool_names import fitted_name
from adk_mesh.agents.base import BaseAgent
from adk_mesh.errors import ModelRequestError
from adk_mesh.mesh import RemoteToolset, ToolServer
from adk_mesh.models.base import LlmRequest
from adk_mesh.sessions import InMemorySessionService
from adk_mesh.testing.fake_providers import (
    FakeAnthropic,
    FakeGemini,
    FakeOllama,
    FakeOpenAI,
    FakeProviderServer,
    ScriptedToolCall,
    ScriptedTurn,
)
from adk_mesh.testing.fake_responses import FakeOpenAIResponses
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import FunctionCall, FunctionResponse, LlmResponse, Part, ToolDeclaration

SERVERS: list[type[FakeProviderServer]] = [
    FakeGemini,
    FakeOpenAI,
    FakeOpenAIResponses,
    FakeAnthropic,
    FakeOllama,
]
#: The fakes of APIs that refuse ``.`` in a tool name.
STRICT: list[type[FakeProviderServer]] = [FakeOpenAI, FakeOpenAIResponses, FakeAnthropic]


def read_file(path: str) -> dict[str, Any]:
    """Read a file."""
    return {"path": path, "text": "hello"}


def files_read_tool() -> FunctionTool:
    return FunctionTool(read_file, name="files.read")


def wire_name(server: FakeProviderServer, real: str, fitted: str) -> str:
    return fitted if type(server) in STRICT else real


def declared_names(server: FakeProviderServer, body: dict[str, Any]) -> list[str]:
    """The function names a request body declares, in the provider's own format."""
    if isinstance(server, FakeGemini):
        return [d["name"] for tool in body["tools"] for d in tool.get("functionDeclarations", [])]
    if isinstance(server, FakeOpenAIResponses | FakeAnthropic):
        return [tool["name"] for tool in body["tools"]]
    return [tool["function"]["name"] for tool in body["tools"]]


def history_names(server: FakeProviderServer, body: dict[str, Any]) -> list[str]:
    """The names of the function calls of a request body's history."""
    if isinstance(server, FakeGemini):
        return [
            part["functionCall"]["name"]
            for content in body["contents"]
            for part in content["parts"]
            if "functionCall" in part
        ]
    if isinstance(server, FakeOpenAIResponses):
        return [item["name"] for item in body["input"] if item.get("type") == "function_call"]
    if isinstance(server, FakeAnthropic):
        return [
            block["name"]
            for message in body["messages"]
            if isinstance(message["content"], list)
            for block in message["content"]
            if block["type"] == "tool_use"
        ]
    return [
        call["function"]["name"]
        for message in body["messages"]
        for call in message.get("tool_calls") or []
    ]


async def run_turn(runner: Runner, session_id: str, text: str, mode: StreamingMode) -> list[Event]:
    return [
        event
        async for event in runner.run(
            user_id="u",
            session_id=session_id,
            new_message=Content.from_text("user", text),
            run_config=RunConfig(streaming_mode=mode),
        )
        if not event.partial
    ]


@pytest.mark.parametrize("mode", [StreamingMode.NONE, StreamingMode.SSE], ids=["plain", "sse"])
@pytest.mark.parametrize("server_class", SERVERS, ids=[s.provider for s in SERVERS])
async def test_a_dotted_function_tool_runs_on_every_provider(
    server_class: type[FakeProviderServer], mode: StreamingMode
) -> None:
    """The agent that works on Gemini works on OpenAI and Anthropic: the tool is declared, and
    called back, under ``files_read``; it runs, and the session keeps ``files.read``."""
    sent = "files_read" if server_class in STRICT else "files.read"
    turns = [
        ScriptedTurn(tool_calls=[ScriptedToolCall(sent, {"path": "a.txt"}, id="call_1")]),
        ScriptedTurn(text="It says hello."),
    ]
    async with server_class(*turns) as server, server.make_model() as model:
        agent = LlmAgent(name="reader", model=model, tools=[files_read_tool()])
        sessions = InMemorySessionService()
        runner = Runner(agent=agent, app_name="app", session_service=sessions)
        session = await sessions.create_session(app_name="app", user_id="u")
        events = await run_turn(runner, session.id, "Read a.txt", mode)

    assert server.refused == []
    call_event, response_event, answer = events
    assert [call.name for call in call_event.function_calls()] == ["files.read"]
    (response,) = response_event.function_responses()
    assert (response.name, response.response) == ("files.read", read_file("a.txt"))
    assert answer.text == "It says hello."
    first, second = (request.json() for request in server.requests)
    assert declared_names(server, first) == [sent]
    assert history_names(server, second) == [sent]
    stored = await sessions.get_session(app_name="app", user_id="u", session_id=session.id)
    assert stored is not None
    assert [c.name for e in stored.events for c in e.function_calls()] == ["files.read"]


@pytest.mark.parametrize("server_class", STRICT, ids=[s.provider for s in STRICT])
async def test_a_gemini_session_moves_to_a_provider_that_refuses_its_names(
    server_class: type[FakeProviderServer],
) -> None:
    """A session whose earlier turns called ``files.read`` and ``ns:tool`` on Gemini goes on on
    OpenAI or Anthropic: the history's names are sent fitted, as the declarations are."""
    sessions = InMemorySessionService()
    session = await sessions.create_session(app_name="app", user_id="u")

    def lookup(key: str) -> dict[str, Any]:
        """Look a key up."""
        return {"key": key, "value": 1}

    tools = [files_read_tool(), FunctionTool(lookup, name="ns:lookup")]
    gemini_turns = [
        ScriptedTurn(
            tool_calls=[
                ScriptedToolCall("files.read", {"path": "a.txt"}),
                ScriptedToolCall("ns:lookup", {"key": "k"}),
            ]
        ),
        ScriptedTurn(text="Done."),
    ]
    async with FakeGemini(*gemini_turns) as gemini, gemini.make_model() as model:
        agent: BaseAgent = LlmAgent(name="reader", model=model, tools=tools)
        runner = Runner(agent=agent, app_name="app", session_service=sessions)
        await run_turn(runner, session.id, "Read a.txt", StreamingMode.NONE)

    turns = [
        ScriptedTurn(tool_calls=[ScriptedToolCall("ns_lookup", {"key": "z"}, id="call_2")]),
        ScriptedTurn(text="Again."),
    ]
    async with server_class(*turns) as server, server.make_model() as model:
        agent = LlmAgent(name="reader", model=model, tools=tools)
        runner = Runner(agent=agent, app_name="app", session_service=sessions)
        events = await run_turn(runner, session.id, "Once more", StreamingMode.NONE)

    assert server.refused == []
    assert [call.name for call in events[0].function_calls()] == ["ns:lookup"]
    assert events[1].function_responses()[0].response == {"key": "z", "value": 1}
    first = server.requests[0].json()
    assert declared_names(server, first) == ["files_read", "ns_lookup"]
    assert history_names(server, first) == ["files_read", "ns_lookup"]


@pytest.mark.parametrize("server_class", STRICT, ids=[s.provider for s in STRICT])
async def test_the_fakes_refuse_the_names_the_real_apis_refuse(
    server_class: type[FakeProviderServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sent as it is (no fitting), a dotted name is the API's 400."""
    async with server_class(ScriptedTurn(text="never")) as server, server.make_model() as model:
        monkeypatch.setattr(type(model), "accepted_tool_names", None)
        request = LlmRequest(
            contents=[Content.from_text("user", "hi")],
            tools=[ToolDeclaration(name="files.read", description="Read a file.")],
        )
        with pytest.raises(ModelRequestError, match=r"files|name"):
            async for _ in model.generate_content(request):
                pass
    assert len(server.refused) == 1


def called(response: LlmResponse) -> list[str]:
    assert response.content is not None
    return [call.name for call in response.content.function_calls]


def declaration(name: str) -> ToolDeclaration:
    return ToolDeclaration(
        name=name, description="A tool.", parameters_schema={"type": "object", "properties": {}}
    )


@pytest.mark.parametrize("server_class", STRICT, ids=[s.provider for s in STRICT])
async def test_a_fitted_name_never_takes_a_real_one(
    server_class: type[FakeProviderServer],
) -> None:
    """``a.b`` beside a real ``a_b``: ``a.b`` gets a digest name; each call maps to its own."""
    other = fitted_name("a.b", {"a_b"})
    assert other != "a_b"
    turn = ScriptedTurn(
        tool_calls=[ScriptedToolCall("a_b", id="call_1"), ScriptedToolCall(other, id="call_2")]
    )
    async with server_class(turn) as server, server.make_model() as model:
        request = LlmRequest(
            contents=[Content.from_text("user", "hi")],
            tools=[declaration("a.b"), declaration("a_b")],
        )
        (response,) = [r async for r in model.generate_content(request)]
    assert called(response) == ["a_b", "a.b"]
    assert declared_names(server, server.requests[0].json()) == [other, "a_b"]


@pytest.mark.parametrize("server_class", STRICT, ids=[s.provider for s in STRICT])
async def test_too_long_names_fit_each_providers_limit(
    server_class: type[FakeProviderServer],
) -> None:
    """A 100-character name: cut with a digest for OpenAI (64), as it is for Anthropic (128);
    a name only in the history (a tool since removed) is fitted too."""
    long_name = "t" * 100
    gone = "old.tool"
    turn = ScriptedTurn(text="ok")
    async with server_class(turn) as server, server.make_model() as model:
        request = LlmRequest(
            contents=[
                Content.from_text("user", "hi"),
                Content(role="model", parts=[Part(function_call=FunctionCall(name=gone, id="c"))]),
                Content(
                    role="user",
                    parts=[Part(function_response=FunctionResponse(name=gone, id="c"))],
                ),
            ],
            tools=[declaration(long_name)],
        )
        [_ async for _ in model.generate_content(request)]
    assert server.refused == []
    body = server.requests[0].json()
    (sent,) = declared_names(server, body)
    if isinstance(server, FakeAnthropic):
        assert sent == long_name
    else:
        assert len(sent) == 64
        assert sent == fitted_name(long_name, set())
    assert history_names(server, body) == ["old_tool"]


async def test_gemini_fits_a_name_it_refuses() -> None:
    """A BaseTool may be named as Gemini refuses (``my tool``, ``1st``): it is sent fitted."""
    turn = ScriptedTurn(tool_calls=[ScriptedToolCall("my_tool"), ScriptedToolCall("_1st")])
    async with FakeGemini(turn) as server, server.make_model() as model:
        request = LlmRequest(
            contents=[Content.from_text("user", "hi")],
            tools=[declaration("my tool"), declaration("1st")],
        )
        (response,) = [r async for r in model.generate_content(request)]
    assert server.refused == []
    assert declared_names(server, server.requests[0].json()) == ["my_tool", "_1st"]
    assert called(response) == ["my tool", "1st"]


@pytest.mark.parametrize("server_class", STRICT, ids=[s.provider for s in STRICT])
async def test_a_remote_dotted_tool_runs_as_a_local_one(
    server_class: type[FakeProviderServer],
) -> None:
    """Across the mesh: a ToolServer serves ``files.read``; the agent's provider gets it fitted
    and the RemoteToolset calls the server by its real name."""
    tool_server = ToolServer([files_read_tool()], name="files")
    port = await tool_server.start("127.0.0.1:0")
    toolset = RemoteToolset(f"127.0.0.1:{port}", tls=None)
    turns = [
        ScriptedTurn(tool_calls=[ScriptedToolCall("files_read", {"path": "b"}, id="call_1")]),
        ScriptedTurn(text="Read."),
    ]
    try:
        async with server_class(*turns) as server, server.make_model() as model:
            agent = LlmAgent(name="reader", model=model, tools=[toolset])
            sessions = InMemorySessionService()
            runner = Runner(agent=agent, app_name="app", session_service=sessions)
            session = await sessions.create_session(app_name="app", user_id="u")
            events = await run_turn(runner, session.id, "Read b", StreamingMode.NONE)
    finally:
        await toolset.close()
        await tool_server.stop(None)
    assert server.refused == []
    (response,) = events[1].function_responses()
    assert (response.name, response.response) == ("files.read", read_file("b"))
    assert json.dumps(declared_names(server, server.requests[0].json())) == '["files_read"]'
