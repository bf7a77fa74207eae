"""``adk-mesh run`` reads whatever a service sends: it never crashes on a RunResponse.

A response that does not parse (gRPC for Python hands over None), one that carries no event,
and one whose event cannot be read are each reported on stderr and skipped; the run goes on
and exits 0. Against a real AgentServer, a tool result 100 levels deep prints like any other.
"""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import grpc.aio
import pytest

from adk_mesh import cli, codec
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.mesh import AgentServer
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.types import Content, Event
from adk_mesh.v1 import agent_pb2


def response_bytes(event: Event | None, *, session_id: str = "") -> bytes:
    response = agent_pb2.RunResponse(session_id=session_id)
    if event is not None:
        codec.event_to_proto(event, into=response.event)
    return response.SerializeToString()


def unreadable_event_bytes() -> bytes:
    response = agent_pb2.RunResponse()
    part = response.event.llm_response.content.parts.add()
    part.function_call.name = "f"
    part.function_call.args_json = "{not json"
    return response.SerializeToString()


async def serve_raw(responses: list[bytes]) -> tuple[grpc.aio.Server, str]:
    """An AgentService whose Run sends ``responses`` as they are, parseable or not."""

    async def run(request: agent_pb2.RunRequest, context: Any) -> AsyncIterator[bytes]:
        for data in responses:
            yield data

    handler: Callable[..., Any] = grpc.unary_stream_rpc_method_handler(
        run,
        request_deserializer=agent_pb2.RunRequest.FromString,
        response_serializer=lambda data: data,
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("adk_mesh.v1.AgentService", {"Run": handler}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


async def run_cli(target: str, *options: str) -> str:
    args = cli.build_parser().parse_args(["run", target, "hi", *options])
    out = io.StringIO()
    await cli._stream_run(args, out)
    return out.getvalue()


async def test_run_skips_what_it_cannot_read_and_prints_the_rest(
    capsys: pytest.CaptureFixture[str],
) -> None:
    first = Event.new(
        author="agent", invocation_id="inv-1", content=Content.from_text("model", "one")
    )
    last = Event.new(
        author="agent", invocation_id="inv-1", content=Content.from_text("model", "two")
    )
    server, target = await serve_raw(
        [
            response_bytes(None, session_id="s-1"),  # no event at all
            response_bytes(first),
            b"\xff\xff\xff",  # not a RunResponse
            unreadable_event_bytes(),
            agent_pb2.RunResponse().SerializeToString(),  # empty
            response_bytes(last),
        ]
    )
    try:
        output = await run_cli(target)
    finally:
        await server.stop(None)
    assert output.splitlines() == ["session s-1", "[agent] one", "[agent] two"]
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "warning: skipped a response from the service that does not parse",
        "warning: skipped an event that cannot be read: Content.parts[0]: "
        "FunctionCall.args_json is not JSON: Expecting property name enclosed in double "
        "quotes: line 1 column 2 (char 1)",
    ]


async def test_run_json_output_skips_a_response_that_does_not_parse(
    capsys: pytest.CaptureFixture[str],
) -> None:
    server, target = await serve_raw([b"\xff\xff\xff", response_bytes(None, session_id="s-1")])
    try:
        output = await run_cli(target, "--json")
    finally:
        await server.stop(None)
    assert [json.loads(line) for line in output.splitlines()] == [{"sessionId": "s-1"}]
    assert "does not parse" in capsys.readouterr().err


def deep(depth: int) -> dict[str, Any]:
    value: Any = "bottom"
    for _ in range(depth - 1):
        value = {"k": value}
    return {"k": value}


def dig() -> dict[str, Any]:
    """Digs 100 levels deep."""
    return deep(100)


async def test_run_prints_a_tool_result_100_levels_deep() -> None:
    agent = LlmAgent(name="digger", model=ScriptedModel([call("dig", {}), "dug"]), tools=[dig])
    server = AgentServer(agent)
    port = await server.start("127.0.0.1:0")
    try:
        output = await run_cli(f"127.0.0.1:{port}")
    finally:
        await server.stop(None)
    lines = output.splitlines()
    assert lines[1] == "[digger] → dig({})"
    assert lines[2] == f"[digger] ← dig: {json.dumps(deep(100), separators=(', ', ': '))}"
    assert lines[-1] == "[digger] dug"
