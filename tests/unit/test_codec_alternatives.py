"""A JSON value's two wire forms (a Struct / Value field and its ``*_json`` twin) are
alternatives: a writer sets one, never both (``content.proto``, "JSON values"). A message that
sets both for the same value is a client's bug, refused with INVALID_ARGUMENT naming the field
and the key, rather than read as one of them with the other silently dropped: in process (the
codec) and across the mesh (real servers on 127.0.0.1). What adk-mesh writes never sets both.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from google.protobuf import struct_pb2

from adk_mesh import codec
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.codec import STRUCT_MAX_DEPTH
from adk_mesh.errors import InvalidArgumentError
from adk_mesh.mesh import AgentServer, ToolServer
from adk_mesh.mesh._channel import open_channel
from adk_mesh.sessions import SqliteSessionService
from adk_mesh.testing import FunctionModel
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import (
    EventActions,
    FunctionCall,
    FunctionResponse,
    Part,
    ServerToolCall,
    ServerToolResponse,
    ToolConfirmation,
)
from adk_mesh.v1 import (
    agent_pb2,
    agent_pb2_grpc,
    content_pb2,
    event_pb2,
    session_pb2,
    session_pb2_grpc,
    tool_pb2,
    tool_pb2_grpc,
)


def struct(**fields: Any) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(fields)
    return message


def deep(levels: int) -> dict[str, Any]:
    """An object nesting ``levels`` levels of objects."""
    value: dict[str, Any] = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


TOO_DEEP = deep(STRUCT_MAX_DEPTH + 5)


# --- objects: a Struct field and its *_json twin --------------------------------------------

#: (name, what is refused, a reader of a message that sets both forms of one object).
#: ``ToolResult.response`` / ``response_json`` are members of one oneof: no message holds both.
OBJECT_PAIRS: list[tuple[str, str, Callable[[], object]]] = [
    (
        "function-call",
        "FunctionCall.args and FunctionCall.args_json",
        lambda: codec.part_from_proto(
            content_pb2.Part(
                function_call=content_pb2.FunctionCall(
                    name="f", args=struct(a=1), args_json='{"a":2}'
                )
            )
        ),
    ),
    (
        "function-response",
        "FunctionResponse.response and FunctionResponse.response_json",
        lambda: codec.part_from_proto(
            content_pb2.Part(
                function_response=content_pb2.FunctionResponse(
                    name="f", response=struct(a=1), response_json='{"a":2}'
                )
            )
        ),
    ),
    (
        "server-tool-call",
        "ServerToolCall.args and ServerToolCall.args_json",
        lambda: codec.part_from_proto(
            content_pb2.Part(
                server_tool_call=content_pb2.ServerToolCall(
                    tool_type="web_search", args=struct(a=1), args_json='{"a":2}'
                )
            )
        ),
    ),
    (
        "server-tool-response",
        "ServerToolResponse.response and ServerToolResponse.response_json",
        lambda: codec.part_from_proto(
            content_pb2.Part(
                server_tool_response=content_pb2.ServerToolResponse(
                    tool_type="web_search", response=struct(a=1), response_json='{"a":2}'
                )
            )
        ),
    ),
    (
        "progress-update",
        "ToolProgressUpdate.data and ToolProgressUpdate.data_json",
        lambda: codec.tool_progress_update_from_proto(
            event_pb2.ToolProgressUpdate(tool_name="t", data=struct(a=1), data_json='{"a":2}')
        ),
    ),
    (
        "legacy-grounding",
        "LlmResponse.grounding_metadata and LlmResponse.grounding_metadata_json",
        lambda: codec.llm_response_from_proto(
            event_pb2.LlmResponse(
                grounding_metadata=struct(webSearchQueries=["a"]),
                grounding_metadata_json='{"webSearchQueries":["b"]}',
            )
        ),
    ),
    (
        "declaration-parameters",
        "ToolDeclaration.parameters_schema and ToolDeclaration.parameters_schema_json",
        lambda: codec.declaration_from_proto(
            tool_pb2.ToolDeclaration(
                name="t",
                parameters_schema=struct(type="object"),
                parameters_schema_json='{"type":"string"}',
            )
        ),
    ),
    (
        "declaration-response",
        "ToolDeclaration.response_schema and ToolDeclaration.response_schema_json",
        lambda: codec.declaration_from_proto(
            tool_pb2.ToolDeclaration(
                name="t",
                response_schema=struct(type="object"),
                response_schema_json='{"type":"string"}',
            )
        ),
    ),
    (
        "card-input",
        "AgentCard.input_schema and AgentCard.input_schema_json",
        lambda: codec.card_schemas(
            agent_pb2.AgentCard(input_schema=struct(type="object"), input_schema_json="{}")
        ),
    ),
    (
        "card-output",
        "AgentCard.output_schema and AgentCard.output_schema_json",
        lambda: codec.card_schemas(
            agent_pb2.AgentCard(output_schema=struct(type="object"), output_schema_json="{}")
        ),
    ),
    (
        "call-tool-args",
        "CallToolRequest.args and CallToolRequest.args_json",
        lambda: codec.call_tool_request_from_proto(
            tool_pb2.CallToolRequest(tool_name="t", args=struct(a=1), args_json='{"a":2}')
        ),
    ),
    (
        "tool-progress",
        "ToolProgress.data and ToolProgress.data_json",
        lambda: codec.tool_progress_from_proto(
            tool_pb2.ToolProgress(message="m", data=struct(a=1), data_json='{"a":2}')
        ),
    ),
    (
        "confirmation-payload",
        "ToolConfirmation.payload and ToolConfirmation.payload_json",
        lambda: codec.tool_confirmation_from_proto(
            event_pb2.ToolConfirmation(
                hint="h", payload=struct_pb2.Value(string_value="a"), payload_json='"b"'
            )
        ),
    ),
]


@pytest.mark.parametrize(
    ("what", "read"), [pair[1:] for pair in OBJECT_PAIRS], ids=[pair[0] for pair in OBJECT_PAIRS]
)
def test_both_forms_of_one_value_are_refused(what: str, read: Callable[[], object]) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        read()
    assert raised.value.message == f"{what} both set: send one"


def test_an_empty_struct_beside_the_text_is_both_set_too() -> None:
    """An empty Struct that is present is the value {}: set, as much as one with fields."""
    call = content_pb2.FunctionCall(name="f", args_json='{"a":2}')
    call.args.SetInParent()
    with pytest.raises(InvalidArgumentError) as raised:
        codec.part_from_proto(content_pb2.Part(function_call=call))
    assert raised.value.message == (
        "FunctionCall.args and FunctionCall.args_json both set: send one"
    )


def test_either_form_alone_is_still_read() -> None:
    by_struct = content_pb2.FunctionCall(name="f", args=struct(a=1))
    by_text = content_pb2.FunctionCall(name="f", args_json='{"a":1}')
    for message in (
        content_pb2.Part(function_call=by_struct),
        content_pb2.Part(function_call=by_text),
    ):
        call = codec.part_from_proto(message).function_call
        assert call is not None and call.args == {"a": 1}


# --- maps: a key of map<string, Value> and of its map<string, string> twin ------------------


def _value(number: float) -> struct_pb2.Value:
    return struct_pb2.Value(number_value=number)


#: (name, what is refused, a reader of a message holding key "k" in both maps).
MAP_PAIRS: list[tuple[str, str, Callable[[], object]]] = [
    (
        "event-actions",
        "EventActions.state_delta['k'] and EventActions.state_delta_json['k']",
        lambda: codec.actions_from_proto(
            event_pb2.EventActions(state_delta={"k": _value(1)}, state_delta_json={"k": "2"})
        ),
    ),
    (
        "session-view",
        "SessionView.state['k'] and SessionView.state_json['k']",
        lambda: codec.session_view_from_proto(
            agent_pb2.SessionView(
                app_name="a",
                user_id="u",
                session_id="s",
                state={"k": _value(1)},
                state_json={"k": "2"},
            )
        ),
    ),
    (
        "list-tools",
        "ListToolsRequest.state['k'] and ListToolsRequest.state_json['k']",
        lambda: codec.list_tools_state_from_proto(
            tool_pb2.ListToolsRequest(state={"k": _value(1)}, state_json={"k": "2"})
        ),
    ),
    (
        "call-tool-state",
        "CallToolRequest.state['k'] and CallToolRequest.state_json['k']",
        lambda: codec.call_tool_request_from_proto(
            tool_pb2.CallToolRequest(tool_name="t", state={"k": _value(1)}, state_json={"k": "2"})
        ),
    ),
    (
        "state-from-map",
        "state['k'] and state_json['k']",
        lambda: codec.state_from_map({"k": _value(1)}, {"k": "2"}),
    ),
    (
        "state-delta-from-map",
        "state_delta['k'] and state_delta_json['k']",
        lambda: codec.state_from_map({"k": _value(1)}, {"k": "2"}, field="state_delta"),
    ),
]


@pytest.mark.parametrize(
    ("what", "read"), [pair[1:] for pair in MAP_PAIRS], ids=[pair[0] for pair in MAP_PAIRS]
)
def test_a_key_in_both_maps_is_refused(what: str, read: Callable[[], object]) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        read()
    assert raised.value.message == f"{what} both set: send one"


def test_different_keys_in_the_two_maps_are_read_together() -> None:
    assert codec.state_from_map({"a": _value(1)}, {"b": '{"c":[2]}'}) == {"a": 1, "b": {"c": [2]}}


# --- what adk-mesh writes sets one form only ------------------------------------------------


def _one_form(message: Any, field: str) -> None:
    assert message.HasField(field) != bool(getattr(message, f"{field}_json")), field


@pytest.mark.parametrize("value", [{"shallow": [1, {"b": None}]}, TOO_DEEP], ids=["struct", "text"])
def test_every_object_writer_sets_one_form(value: dict[str, Any]) -> None:
    part = codec.part_to_proto(Part(function_call=FunctionCall(name="f", args=value)))
    _one_form(part.function_call, "args")
    part = codec.part_to_proto(Part(function_response=FunctionResponse(name="f", response=value)))
    _one_form(part.function_response, "response")
    part = codec.part_to_proto(
        Part(server_tool_call=ServerToolCall(tool_type="web_search", args=value))
    )
    _one_form(part.server_tool_call, "args")
    part = codec.part_to_proto(
        Part(server_tool_response=ServerToolResponse(tool_type="web_search", response=value))
    )
    _one_form(part.server_tool_response, "response")
    _one_form(codec.tool_progress_to_proto("m", value, None), "data")
    _one_form(codec.tool_result_to_proto(value, None, EventActions()), "response")
    card = agent_pb2.AgentCard()
    codec.fill_card_schemas(card, value, value)
    _one_form(card, "input_schema")
    _one_form(card, "output_schema")
    confirmation = codec.tool_confirmation_to_proto(ToolConfirmation(hint="h", payload=value))
    _one_form(confirmation, "payload")


def test_every_map_writer_puts_a_key_in_one_map() -> None:
    state = {"shallow": {"b": [1]}, "deep": TOO_DEEP}
    actions = codec.actions_to_proto(EventActions(state_delta=state))
    assert set(actions.state_delta) == {"shallow"}
    assert set(actions.state_delta_json) == {"deep"}
    assert codec.actions_from_proto(actions).state_delta == state
    request = tool_pb2.CallToolRequest()
    codec.state_to_map(request.state, state, request.state_json)
    assert set(request.state) == {"shallow"}
    assert set(request.state_json) == {"deep"}
    assert codec.state_from_map(request.state, request.state_json) == state


# --- across the mesh ------------------------------------------------------------------------


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Any, Any, SqliteSessionService]]:
    store = SqliteSessionService(str(tmp_path / "sessions.db"))
    agent = LlmAgent(name="helper", model=FunctionModel(lambda request: "done"))
    server = AgentServer(agent, session_service=store)
    port = await server.start("127.0.0.1:0")
    try:
        async with open_channel(f"127.0.0.1:{port}") as channel:
            yield (
                agent_pb2_grpc.AgentServiceStub(channel),
                session_pb2_grpc.SessionServiceStub(channel),
                store,
            )
    finally:
        await server.stop(None)
        await store.close()


def echo(value: Any = None) -> dict[str, Any]:
    """Echo the value."""
    return {"value": value}


@pytest.fixture
async def tools() -> AsyncIterator[tool_pb2_grpc.ToolServiceStub]:
    server = ToolServer([FunctionTool(echo)], name="echoes")
    port = await server.start("127.0.0.1:0")
    try:
        async with open_channel(f"127.0.0.1:{port}") as channel:
            yield tool_pb2_grpc.ToolServiceStub(channel)
    finally:
        await server.stop(None)


async def _refused(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        result = call()
        if hasattr(result, "__aiter__"):
            [item async for item in result]
        else:
            await result
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    return raised.value


async def test_session_writes_with_a_key_in_both_maps_are_refused(
    served: tuple[Any, Any, SqliteSessionService],
) -> None:
    _, sessions, store = served
    error = await _refused(
        lambda: sessions.CreateSession(
            session_pb2.CreateSessionRequest(
                user_id="u1", session_id="s-new", state={"k": _value(1)}, state_json={"k": "2"}
            )
        )
    )
    assert "state['k'] and state_json['k'] both set: send one" in (error.details() or "")
    assert await store.get_session(app_name="helper", user_id="u1", session_id="s-new") is None

    await sessions.CreateSession(session_pb2.CreateSessionRequest(user_id="u1", session_id="s1"))
    error = await _refused(
        lambda: sessions.UpdateSessionState(
            session_pb2.UpdateSessionStateRequest(
                user_id="u1",
                session_id="s1",
                state_delta={"k": _value(1)},
                state_delta_json={"k": "2"},
            )
        )
    )
    assert "state_delta['k'] and state_delta_json['k'] both set" in (error.details() or "")
    session = await store.get_session(app_name="helper", user_id="u1", session_id="s1")
    assert session is not None and "k" not in session.state and session.events == []


async def test_a_turn_whose_function_response_sets_both_forms_is_refused(
    served: tuple[Any, Any, SqliteSessionService],
) -> None:
    agents, _, store = served
    answer = content_pb2.Part(
        function_response=content_pb2.FunctionResponse(
            id="c1", name="lookup", response=struct(value=1), response_json='{"value":2}'
        )
    )
    request = agent_pb2.RunRequest(
        root=agent_pb2.RootRun(
            user_id="u1",
            session_id="s-both",
            new_message=content_pb2.Content(role="user", parts=[answer]),
        )
    )
    error = await _refused(lambda: agents.Run(request))
    assert "FunctionResponse.response and FunctionResponse.response_json both set" in (
        error.details() or ""
    )
    assert await store.get_session(app_name="helper", user_id="u1", session_id="s-both") is None


async def test_tool_calls_setting_both_forms_are_refused(
    tools: tool_pb2_grpc.ToolServiceStub,
) -> None:
    context = tool_pb2.CallerContext(
        app_name="helper", user_id="u1", session_id="s1", agent_name="helper"
    )
    error = await _refused(
        lambda: tools.CallTool(
            tool_pb2.CallToolRequest(
                context=context, tool_name="echo", args=struct(value=1), args_json='{"value":2}'
            )
        )
    )
    assert "CallToolRequest.args and CallToolRequest.args_json both set" in (error.details() or "")
    error = await _refused(
        lambda: tools.CallTool(
            tool_pb2.CallToolRequest(
                context=context,
                tool_name="echo",
                state={"k": _value(1)},
                state_json={"k": "2"},
            )
        )
    )
    assert "CallToolRequest.state['k'] and CallToolRequest.state_json['k'] both set" in (
        error.details() or ""
    )
