"""A root Run names the session it used in the trailer ``adk-mesh-session-id``, success or
failure: a turn that creates a new session and fails before its first event still stored the
user's message there, and the client must be able to find that session again (real
AgentServer on 127.0.0.1, port 0)."""

from __future__ import annotations

import io
import json
from typing import Any

import grpc
import grpc.aio
import pytest

from adk_mesh import cli
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.errors import AdkError, ToolError
from adk_mesh.mesh import AgentServer
from adk_mesh.mesh._channel import open_channel
from adk_mesh.mesh._status import error_from_rpc_error
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import ScriptedModel
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2

TRAILER = "adk-mesh-session-id"


def refuse(callback_context: Any) -> None:
    raise ToolError("refused before the first event")


def root_request(*, user_id: str = "u", session_id: str = "") -> agent_pb2.RunRequest:
    return agent_pb2.RunRequest(
        root=agent_pb2.RootRun(
            user_id=user_id,
            session_id=session_id,
            new_message=content_pb2.Content(role="user", parts=[content_pb2.Part(text="hi")]),
        )
    )


def trailer_of(metadata: Any) -> list[str]:
    return [value for key, value in metadata or () if key == TRAILER]


async def serve(*, fails: bool) -> tuple[AgentServer, InMemorySessionService, str]:
    sessions = InMemorySessionService()
    agent = LlmAgent(
        name="assistant",
        model=ScriptedModel(["hello"]),
        before_agent_callback=refuse if fails else None,
    )
    server = AgentServer(agent, session_service=sessions)
    port = await server.start("127.0.0.1:0")
    return server, sessions, f"127.0.0.1:{port}"


async def run(target: str, request: agent_pb2.RunRequest) -> tuple[list[Any], Any]:
    """The responses of a Run, and its error (or None) with the trailers."""
    async with open_channel(target) as channel:
        call = agent_pb2_grpc.AgentServiceStub(channel).Run(request)
        responses: list[Any] = []
        try:
            async for response in call:
                responses.append(response)
        except grpc.RpcError as error:
            return responses, error
        return responses, await call.trailing_metadata()


async def test_a_new_session_that_fails_before_its_first_event_is_named_in_the_trailer() -> None:
    server, sessions, target = await serve(fails=True)
    try:
        responses, error = await run(target, root_request())
    finally:
        await server.stop(None)
    assert isinstance(error, grpc.RpcError)
    assert responses == []
    [session_id] = trailer_of(error.trailing_metadata())
    # The session it names is the caller's, and holds the user's message.
    session = await sessions.get_session(app_name="assistant", user_id="u", session_id=session_id)
    assert session is not None
    assert [event.author for event in session.events][:1] == ["user"]
    # The error's own detail still comes (the trailer joins it, replaces nothing).
    assert isinstance(error_from_rpc_error(error), ToolError)


async def test_a_named_session_that_fails_is_named_in_the_trailer() -> None:
    server, _, target = await serve(fails=True)
    try:
        _, error = await run(target, root_request(session_id="s-1"))
    finally:
        await server.stop(None)
    assert isinstance(error, grpc.RpcError)
    assert trailer_of(error.trailing_metadata()) == ["s-1"]


async def test_a_turn_that_succeeds_names_its_session_in_the_trailer_too() -> None:
    server, _, target = await serve(fails=False)
    try:
        responses, trailers = await run(target, root_request())
    finally:
        await server.stop(None)
    assert not isinstance(trailers, grpc.RpcError)
    assert trailer_of(trailers) == [responses[0].session_id]


async def test_a_run_refused_before_any_session_is_touched_names_none() -> None:
    server, _, target = await serve(fails=False)
    try:
        _, error = await run(target, root_request(user_id=""))
    finally:
        await server.stop(None)
    assert isinstance(error, grpc.RpcError)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert trailer_of(error.trailing_metadata()) == []


async def run_cli(target: str, *options: str) -> str:
    args = cli.build_parser().parse_args(["run", target, "hi", *options])
    out = io.StringIO()
    with pytest.raises(AdkError, match="refused before the first event"):
        await cli._stream_run(args, out)
    return out.getvalue()


async def test_adk_mesh_run_prints_the_session_of_a_turn_that_failed() -> None:
    server, sessions, target = await serve(fails=True)
    try:
        output = await run_cli(target)
        json_output = await run_cli(target, "--json")
    finally:
        await server.stop(None)
    [line] = output.splitlines()
    assert line.startswith("session ")
    session_id = line.removeprefix("session ")
    assert await sessions.get_session(app_name="assistant", user_id="user", session_id=session_id)
    # --json: the line of a RunResponse that names the session alone.
    [json_line] = json_output.splitlines()
    named = json.loads(json_line)["sessionId"]
    assert await sessions.get_session(app_name="assistant", user_id="user", session_id=named)


@pytest.mark.e2e
@pytest.mark.timeout(300)
async def test_the_node_client_prints_the_session_of_a_turn_that_failed() -> None:
    from tests.e2e.test_node_client import node_client

    server, sessions, target = await serve(fails=True)
    try:
        code, output, errors = await node_client(target, None)
    finally:
        await server.stop(None)
    assert code == 1, errors
    [line] = output.splitlines()
    session_id = line.removeprefix("session ")
    assert await sessions.get_session(app_name="assistant", user_id="ada", session_id=session_id)
    assert errors.startswith("error: INTERNAL: refused before the first event"), errors
