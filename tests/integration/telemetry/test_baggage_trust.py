"""Whose baggage labels a server span: a mesh peer's (a verified client certificate) or a local
process's on a plaintext server, never an outside client's of a TLS front door, who could
otherwise write another user's or another invocation's ids on this service's spans."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.mesh import AgentServer
from adk_mesh.mesh._channel import open_channel
from adk_mesh.mesh.pki import DevCertificateAuthority
from adk_mesh.mesh.security import ClientTLS, ServerSecurity, ServerTLS
from adk_mesh.sessions.sqlite import SqliteSessionService
from adk_mesh.testing import ScriptedModel
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2

FORGED = (("baggage", "adk_mesh.user_id=mallory,adk_mesh.invocation_id=e-forged,tenant=acme"),)


@dataclass
class Served:
    front: str
    mesh: str
    peer: ClientTLS
    outsider: ClientTLS


@pytest.fixture
async def served(tmp_path: Path, spans: InMemorySpanExporter) -> AsyncIterator[Served]:
    """An agent service with a TLS front door and a mutual-TLS mesh door, traced into
    ``spans`` (set up first: a server picks its interceptors when it starts)."""
    ca = DevCertificateAuthority(tmp_path / "pki")
    server_cert, peer_cert = ca.issue("researcher"), ca.issue("coordinator")
    agent = LlmAgent(name="researcher", model=ScriptedModel(["found it"] * 10))
    server = AgentServer(agent, session_service=SqliteSessionService(tmp_path / "s.db"))
    security = ServerSecurity(
        tls=ServerTLS(server_cert.cert_file, server_cert.key_file, ca.ca_file),
        allow_peers=frozenset({peer_cert.identity}),
    )
    port = await server.start("127.0.0.1:0", security=security, mesh_address="127.0.0.1:0")
    try:
        yield Served(
            front=f"127.0.0.1:{port}",
            mesh=f"127.0.0.1:{server.mesh_port}",
            peer=ClientTLS(
                ca_file=ca.ca_file, cert_file=peer_cert.cert_file, key_file=peer_cert.key_file
            ),
            outsider=ClientTLS(ca_file=ca.ca_file),
        )
    finally:
        await server.stop(None)


def _message() -> content_pb2.Content:
    return content_pb2.Content(role="user", parts=[content_pb2.Part(text="hi")])


async def _run(target: str, tls: ClientTLS, request: agent_pb2.RunRequest) -> None:
    async with open_channel(target, tls=tls) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        async for _ in stub.Run(request, metadata=FORGED, timeout=10):
            pass


async def _server_span(spans: InMemorySpanExporter) -> ReadableSpan:
    """The Run's server span, once it has ended (after the client has read the last reply)."""
    async with asyncio.timeout(10):
        while True:
            for span in spans.get_finished_spans():
                if span.kind is SpanKind.SERVER and span.name == "adk_mesh.v1.AgentService/Run":
                    return span
            await asyncio.sleep(0.01)


async def test_an_outside_clients_baggage_labels_nothing(
    served: Served, spans: InMemorySpanExporter
) -> None:
    root = agent_pb2.RunRequest(root=agent_pb2.RootRun(user_id="ada", new_message=_message()))
    await _run(served.front, served.outsider, root)
    server = (await _server_span(spans)).attributes or {}
    assert server.get("adk_mesh.user_id") != "mallory", server
    assert server.get("adk_mesh.invocation_id") != "e-forged", server
    # The invocation's spans (the server span among them) carry the ids this service gave.
    labelled = [s for s in spans.get_finished_spans() if "adk_mesh.user_id" in (s.attributes or {})]
    assert labelled
    assert {s.attributes["adk_mesh.user_id"] for s in labelled if s.attributes} == {"ada"}
    assert all(
        s.attributes and s.attributes["adk_mesh.invocation_id"] != "e-forged" for s in labelled
    )


async def test_a_mesh_peers_baggage_labels_the_server_span(
    served: Served, spans: InMemorySpanExporter
) -> None:
    delegated = agent_pb2.RunRequest(
        delegated=agent_pb2.DelegatedRun(
            invocation_id="e-1",
            session=agent_pb2.SessionView(app_name="researcher", user_id="ada", session_id="s"),
            user_content=_message(),
        )
    )
    await _run(served.mesh, served.peer, delegated)
    attributes = (await _server_span(spans)).attributes or {}
    assert attributes["adk_mesh.user_id"] == "mallory"
    assert attributes["adk_mesh.invocation_id"] == "e-forged"


class _PlaintextCall:
    """The part of a grpc.aio ServicerContext ``_caller_context`` reads: a plaintext call."""

    def __init__(self, peer: str) -> None:
        self._peer = peer

    def auth_context(self) -> dict[str, list[bytes]]:
        return {"transport_security_type": [b"insecure"]}

    def peer(self) -> str:
        return self._peer


@pytest.mark.parametrize(
    ("peer", "trusted"),
    [
        ("ipv4:127.0.0.1:50000", True),
        ("ipv6:[::1]:50000", True),
        ("unix:/run/adk.sock", True),
        # An --insecure server listens beyond loopback: its remote clients are no mesh peers.
        ("ipv4:10.1.2.3:50000", False),
        ("ipv6:[2001:db8::1]:50000", False),
    ],
)
def test_a_plaintext_servers_remote_client_labels_nothing(peer: str, trusted: bool) -> None:
    from adk_mesh.mesh._interceptors import _caller_context
    from adk_mesh.telemetry._propagation import attributes_from_baggage, extract_context

    received = extract_context(FORGED)
    labels = attributes_from_baggage(_caller_context(received, _PlaintextCall(peer)))  # type: ignore[arg-type]
    assert (labels.get("adk_mesh.user_id") == "mallory") is trusted
