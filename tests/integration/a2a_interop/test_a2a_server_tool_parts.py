"""The calls and results of a tool the model provider ran itself (``server_tool_call`` /
``server_tool_response``: Gemini's Google Search, Claude's web search) across A2A: an
A2aAgentServer sends them as data parts marked ``adk_mesh.part_kind``, so a plain a2a-sdk
client can show that a search happened; an A2aAgent maps them back to the same parts; and a
client's message carrying them stores them as those kinds, as it does function calls."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from a2a.client import Client
from a2a.types import a2a_pb2
from a2a.utils.constants import TransportProtocol
from a2a.utils.errors import InvalidParamsError
from google.protobuf import json_format

from adk_mesh import A2aAgent, InMemorySessionService, LlmAgent, Runner
from adk_mesh.mesh.a2a_server import ANONYMOUS_USER, A2aAgentServer
from adk_mesh.testing import ScriptedModel
from adk_mesh.types import Content, LlmResponse, Part
from tests.a2a_clients import a2a_client

BINDINGS = [TransportProtocol.JSONRPC, TransportProtocol.GRPC]
State = a2a_pb2.TaskState
KIND = "adk_mesh.part_kind"

SEARCH_CALL = Part.from_server_tool_call(
    "GOOGLE_SEARCH_WEB", {"queries": ["weather in Porto"]}, id="search-1"
)
SEARCH_RESULT = Part.from_server_tool_response(
    "GOOGLE_SEARCH_WEB",
    {"results": [{"title": "IPMA", "url": "https://www.ipma.pt/en/", "rank": 1}]},
    id="search-1",
)
ANSWER = Part(text="Sunny in Porto, 24 degrees.")
#: The model's one response: a search it ran itself, then the answer it grounded.
GROUNDED = LlmResponse(
    content=Content(role="model", parts=[SEARCH_CALL, SEARCH_RESULT, ANSWER]), turn_complete=True
)


@pytest.fixture
async def served() -> AsyncIterator[tuple[A2aAgentServer, ScriptedModel]]:
    model = ScriptedModel([GROUNDED])
    server = A2aAgentServer(LlmAgent(name="searcher", model=model))
    await server.start("127.0.0.1:0")
    try:
        yield server, model
    finally:
        await server.stop(1)


@pytest.fixture(params=BINDINGS)
async def client(
    served: tuple[A2aAgentServer, ScriptedModel], request: Any
) -> AsyncIterator[Client]:
    server, _ = served
    assert server.a2a_port is not None
    opened = await a2a_client(server.a2a_port, request.param)
    try:
        yield opened
    finally:
        await opened.close()


def _request(parts: list[a2a_pb2.Part], context_id: str) -> a2a_pb2.SendMessageRequest:
    return a2a_pb2.SendMessageRequest(
        message=a2a_pb2.Message(
            message_id=f"m-{context_id}",
            role=a2a_pb2.Role.ROLE_USER,
            parts=parts,
            context_id=context_id,
        )
    )


def _data_part(kind: str, value: Any) -> a2a_pb2.Part:
    part = a2a_pb2.Part()
    part.data.struct_value.update({"v": value})
    part.data.CopyFrom(part.data.struct_value.fields["v"])
    part.metadata.update({KIND: kind})
    return part


async def _send(
    client: Client, request: a2a_pb2.SendMessageRequest
) -> list[a2a_pb2.StreamResponse]:
    return [response async for response in client.send_message(request)]


async def test_a_plain_client_sees_the_search_as_marked_data_parts(client: Client) -> None:
    responses = await _send(client, _request([a2a_pb2.Part(text="Weather in Porto?")], "ctx-1"))
    assert responses[-1].status_update.status.state == State.TASK_STATE_COMPLETED
    (answer,) = [
        r.artifact_update.artifact
        for r in responses
        if r.HasField("artifact_update") and r.artifact_update.last_chunk
    ]
    assert answer.name == "response"
    call_part, result_part, text_part = answer.parts
    assert call_part.WhichOneof("content") == "data"
    assert json_format.MessageToDict(call_part.metadata) == {KIND: "server_tool_call"}
    assert json_format.MessageToDict(call_part.data) == {
        "tool_type": "GOOGLE_SEARCH_WEB",
        "args": {"queries": ["weather in Porto"]},
        "id": "search-1",
    }
    assert result_part.WhichOneof("content") == "data"
    assert json_format.MessageToDict(result_part.metadata) == {KIND: "server_tool_response"}
    assert json_format.MessageToDict(result_part.data) == {
        "tool_type": "GOOGLE_SEARCH_WEB",
        "response": {"results": [{"title": "IPMA", "url": "https://www.ipma.pt/en/", "rank": 1}]},
        "id": "search-1",
    }
    assert text_part.text == ANSWER.text and not text_part.HasField("metadata")


@pytest.mark.parametrize("binding", ["jsonrpc", "grpc"])
async def test_an_a2a_agents_event_holds_the_search_parts_unchanged(
    served: tuple[A2aAgentServer, ScriptedModel], binding: str
) -> None:
    server, _ = served
    remote = A2aAgent(
        "searcher",
        f"http://127.0.0.1:{server.a2a_port}",
        binding=binding,  # type: ignore[arg-type]
        keeps_conversation=False,
    )
    sessions = InMemorySessionService()
    runner = Runner(agent=remote, app_name="app", session_service=sessions)
    session = await sessions.create_session(app_name="app", user_id="u1")
    try:
        events = [
            event
            async for event in runner.run(
                user_id="u1",
                session_id=session.id,
                new_message=Content.from_text("user", "Weather in Porto?"),
            )
            if not event.partial
        ]
    finally:
        await remote.close()
    (answer,) = [event for event in events if event.author == "searcher"]
    assert answer.llm_response.error_code is None
    assert answer.content is not None
    assert answer.content.parts == [SEARCH_CALL, SEARCH_RESULT, ANSWER]
    stored = await sessions.get_session(app_name="app", user_id="u1", session_id=session.id)
    assert stored is not None
    assert [p.kind for p in stored.events[-1].content.parts] == [  # type: ignore[union-attr]
        "server_tool_call",
        "server_tool_response",
        "text",
    ]


async def test_a_clients_search_parts_are_refused_and_nothing_is_stored(
    served: tuple[A2aAgentServer, ScriptedModel], client: Client
) -> None:
    # A built-in tool's call or result is the model provider's, never a client's (as a
    # function call is): stored in the user's turn it would go to the model in every later
    # request of the session. Refused before anything is stored, on either binding.
    server, model = served
    sent = [
        a2a_pb2.Part(text="Is this search still right?"),
        _data_part(
            "server_tool_call",
            {"tool_type": "web_search", "args": {"query": "porto"}, "id": "srvtoolu_1"},
        ),
        _data_part(
            "server_tool_response",
            {"tool_type": "web_search_tool_result", "response": {"content": []}},
        ),
    ]
    with pytest.raises(Exception, match="built-in tool's call or result"):
        await _send(client, _request(sent, "ctx-2"))
    session = await server.session_service.get_session(
        app_name="searcher", user_id=ANONYMOUS_USER, session_id="ctx-2"
    )
    assert session is None or not session.events
    assert not model.requests


@pytest.mark.parametrize(
    ("part", "named"),
    [
        (_data_part("server_tool_call", ["not", "an", "object"]), "server_tool_call"),
        (_data_part("server_tool_call", {"tool_type": 7}), "tool_type"),
        (_data_part("server_tool_response", {"response": "text"}), "server_tool_response"),
        (_data_part("server_tool_call", {"tool_type": "x", "args": [1]}), "server_tool_call"),
    ],
)
async def test_a_search_part_that_cannot_be_read_is_invalid_params(
    served: tuple[A2aAgentServer, ScriptedModel], client: Client, part: a2a_pb2.Part, named: str
) -> None:
    _, model = served
    with pytest.raises(InvalidParamsError) as refused:
        await _send(client, _request([a2a_pb2.Part(text="hi"), part], "ctx-3"))
    assert named in str(refused.value.message) and "part 1" in str(refused.value.message)
    assert not model.requests
