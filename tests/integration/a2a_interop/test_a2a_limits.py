"""The A2A port's TLS, body bound, the caller's invocation id, and a tool's artifact going out."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from a2a.types import a2a_pb2
from a2a.utils.constants import TransportProtocol

from adk_mesh import A2aAgent, InMemoryArtifactService, InMemorySessionService, LlmAgent, Runner
from adk_mesh.contexts import ToolContext
from adk_mesh.mesh import ClientTLS, ServerSecurity, ServerTLS
from adk_mesh.mesh._channel import MAX_MESSAGE_BYTES
from adk_mesh.mesh.a2a_server import A2aAgentServer
from adk_mesh.mesh.pki import DevCertificateAuthority
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.types import Content, Part
from tests.a2a_clients import a2a_client


@pytest.mark.parametrize("binding", ["jsonrpc", "grpc"])
async def test_tls_on_both_bindings(tmp_path: Path, binding: str) -> None:
    ca = DevCertificateAuthority(tmp_path / "pki")
    issued = ca.issue("greeter")
    security = ServerSecurity(tls=ServerTLS(issued.cert_file, issued.key_file))
    server = A2aAgentServer(LlmAgent(name="greeter", model=ScriptedModel(["over TLS"])))
    await server.start("127.0.0.1:0", security=security)
    try:
        url = f"https://127.0.0.1:{server.a2a_port}"
        async with httpx.AsyncClient() as http:  # trusts only the system's CAs: refused
            with pytest.raises(httpx.HTTPError):
                await http.get(url)
        client_tls = ClientTLS(ca_file=ca.ca_file)
        remote = A2aAgent("greeter", url, binding=binding, tls=client_tls)  # type: ignore[arg-type]
        sessions = InMemorySessionService()
        runner = Runner(agent=remote, app_name="app", session_service=sessions)
        session = await sessions.create_session(app_name="app", user_id="u")
        events = [
            e
            async for e in runner.run(
                user_id="u", session_id=session.id, new_message=Content.from_text("user", "hi")
            )
        ]
        assert [e.text for e in events if not e.partial] == ["over TLS"]
        card = remote._card
        assert card is not None
        assert {i.protocol_binding: i.url[:8] for i in card.supported_interfaces}["JSONRPC"] == (
            "https://"
        )
        await remote.close()
    finally:
        await server.stop(1)


async def test_a_body_over_the_message_limit_is_refused_with_413() -> None:
    server = A2aAgentServer(LlmAgent(name="greeter", model=ScriptedModel([])))
    await server.start("127.0.0.1:0")
    try:
        async with httpx.AsyncClient() as http:
            response = await http.post(
                f"http://127.0.0.1:{server.a2a_port}/", content=b"x" * (MAX_MESSAGE_BYTES + 1)
            )
        assert response.status_code == 413
    finally:
        await server.stop(1)


async def test_the_callers_invocation_id_is_the_runs_and_saved_artifacts_go_out() -> None:
    async def report(tool_context: ToolContext) -> dict[str, int]:
        """Writes the report."""
        version = await tool_context.save_artifact("report.txt", Part(text="42"))
        return {"version": version}

    model = ScriptedModel([call("report"), "written"])
    server = A2aAgentServer(
        LlmAgent(name="writer", model=model, tools=[report]),
        artifact_service=InMemoryArtifactService(),
    )
    await server.start("127.0.0.1:0")
    try:
        assert server.a2a_port is not None
        client = await a2a_client(server.a2a_port, TransportProtocol.JSONRPC)
        message = a2a_pb2.Message(
            message_id="m1", role=a2a_pb2.Role.ROLE_USER, parts=[a2a_pb2.Part(text="go")]
        )
        message.metadata.update({"adk_mesh": {"invocation_id": "e-caller-1"}})
        responses = [
            r async for r in client.send_message(a2a_pb2.SendMessageRequest(message=message))
        ]
        updates = [r.status_update for r in responses if r.HasField("status_update")]
        assert {u.metadata["adk_mesh"]["invocation_id"] for u in updates} == {"e-caller-1"}
        # The tool call and its result went out as working messages, marked.
        kinds = [
            p.metadata["adk_mesh.part_kind"]
            for u in updates
            if u.status.HasField("message")
            for p in u.status.message.parts
        ]
        assert kinds == ["function_call", "function_response"]
        artifacts = [r.artifact_update.artifact for r in responses if r.HasField("artifact_update")]
        saved = [a for a in artifacts if a.name == "report.txt"]
        assert saved and saved[0].parts[0].text == "42"
        await client.close()
    finally:
        await server.stop(1)
