"""A credentials check that cannot run (an issuer's JWKS down: UNAVAILABLE) or that breaks (an
application's authenticator raising: INTERNAL) is answered with its own status at every door
that checks credentials — the A2A server's HTTP and gRPC bindings and the MCP server — never as
a bare 401, nor as a 500 carrying a traceback's text."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import grpc
import grpc.aio
import httpx
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc
from a2a.utils.constants import TransportProtocol

from adk_mesh import FunctionTool, LlmAgent
from adk_mesh.errors import AdkIOError
from adk_mesh.mesh import ServerSecurity
from adk_mesh.mesh.a2a_server import A2aAgentServer
from adk_mesh.mesh.auth import Authenticator, Principal
from adk_mesh.mesh.mcp_server import McpServer
from adk_mesh.mesh.tool_server import _StaticToolset
from adk_mesh.testing import ScriptedModel
from tests.a2a_clients import agent_card

SECRET = "/etc/secret-path-of-the-check"


class _Down(Authenticator):
    """An issuer that cannot be reached: the check cannot run now."""

    async def authenticate(self, metadata: Mapping[str, str]) -> Principal | None:
        raise AdkIOError("this service cannot check credentials right now; try again later")


class _Broken(Authenticator):
    """An application's authenticator with a bug."""

    async def authenticate(self, metadata: Mapping[str, str]) -> Principal | None:
        raise RuntimeError(f"cannot open {SECRET}")


def echo(text: str) -> dict[str, str]:
    """Echoes."""
    return {"text": text}


CASES = [(_Down, 503, grpc.StatusCode.UNAVAILABLE), (_Broken, 500, grpc.StatusCode.INTERNAL)]


@asynccontextmanager
async def _a2a(authenticator: Authenticator) -> AsyncIterator[A2aAgentServer]:
    server = A2aAgentServer(LlmAgent(name="greeter", model=ScriptedModel(["hi"])))
    await server.start("127.0.0.1:0", security=ServerSecurity(authenticators=(authenticator,)))
    try:
        yield server
    finally:
        await server.stop(None)


def _message() -> a2a_pb2.SendMessageRequest:
    return a2a_pb2.SendMessageRequest(
        message=a2a_pb2.Message(
            message_id="m-1", role=a2a_pb2.Role.ROLE_USER, parts=[a2a_pb2.Part(text="hi")]
        )
    )


@pytest.mark.parametrize(("authenticator", "http_status", "grpc_status"), CASES)
async def test_the_a2a_http_binding_answers_the_checks_status(
    authenticator: type[Authenticator], http_status: int, grpc_status: grpc.StatusCode
) -> None:
    async with _a2a(authenticator()) as server:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}
            },
        }
        async with httpx.AsyncClient() as http:
            answer = await http.post(f"http://127.0.0.1:{server.a2a_port}/", json=body)
        assert answer.status_code == http_status, answer.text
        assert SECRET not in answer.text and "Traceback" not in answer.text


@pytest.mark.parametrize(("authenticator", "http_status", "grpc_status"), CASES)
async def test_the_a2a_grpc_binding_answers_the_checks_status(
    authenticator: type[Authenticator], http_status: int, grpc_status: grpc.StatusCode
) -> None:
    async with _a2a(authenticator()) as server:
        assert server.a2a_port is not None
        card = await agent_card(server.a2a_port)
        (url,) = [
            i.url for i in card.supported_interfaces if i.protocol_binding == TransportProtocol.GRPC
        ]
        async with grpc.aio.insecure_channel(url) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await a2a_pb2_grpc.A2AServiceStub(channel).SendMessage(_message(), timeout=10)
        assert refused.value.code() is grpc_status
        assert SECRET not in (refused.value.details() or "")


@pytest.mark.parametrize(("authenticator", "http_status", "grpc_status"), CASES)
async def test_the_mcp_server_answers_the_checks_status(
    authenticator: type[Authenticator], http_status: int, grpc_status: grpc.StatusCode
) -> None:
    server = McpServer(
        _StaticToolset("tools", [FunctionTool(echo)]),
        name="tools",
        security=ServerSecurity(authenticators=(authenticator(),)),
    )
    port = await server.start("127.0.0.1", 0)
    try:
        async with httpx.AsyncClient() as http:
            answer = await http.post(
                f"http://127.0.0.1:{port}/mcp",
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                headers={"accept": "application/json, text/event-stream"},
            )
        assert answer.status_code == http_status, answer.text
        assert SECRET not in answer.text and "Traceback" not in answer.text
    finally:
        await server.stop()
